"""The OpenAPI document, made to say what the API does.

FastAPI's generated document needs three corrections, applied once when it is first built:

- Endpoints that answer anonymously (benchmarks, leaderboards, results, records, datasets) take
  the bearer token as an *option*: their security requirement lists the empty requirement
  ``{}`` next to the token, and their 401 response says that a token sent must be valid (an
  invalid token is refused rather than ignored, so a client never mistakes a revoked token for
  a working one).
- ``POST /api/v1/submissions`` reads its multipart body itself (``api.services.upload_stream``),
  so the body is described here: the ``manifest`` part is a JSON document of the
  ``certbench.nets.loading.Manifest`` schema, the ``weights`` part a binary safetensors file.
- The manifest's schemas are added to ``components``.
- String path and query parameters carry the printable pattern ``api.url_guard`` enforces.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from api.deps import OPTIONAL_SCHEME
from api.services.upload_stream import VENUE_LENGTH
from certbench.data import WEIGHTS_LICENSES
from certbench.nets import PRINTABLE_PATTERN, Manifest

COMPONENTS = "#/components/schemas/{model}"
OPTIONAL_TOKEN_401 = (
    "The token sent is invalid, expired or revoked. The token is optional here: send none to "
    "read as an anonymous visitor (public entries only)."
)


def submission_request_body() -> dict[str, Any]:
    """The multipart body of ``POST /api/v1/submissions``."""
    return {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["weights", "manifest"],
                    "properties": {
                        "weights": {
                            "type": "string",
                            "format": "binary",
                            "description": "model weights, a .safetensors file (state dict "
                            "of the manifest's architecture)",
                        },
                        "manifest": {
                            "$ref": COMPONENTS.format(model="Manifest"),
                            "description": "the JSON manifest (DESIGN.md §6); a UTF-8 "
                            "byte-order mark is accepted",
                        },
                        "private": {
                            "type": "boolean",
                            "default": False,
                            "description": "visible only to you and admins",
                        },
                        "extra_data": {
                            "type": "boolean",
                            "default": False,
                            "description": "trained with data beyond the base set",
                        },
                        "venue": {
                            "type": "string",
                            "maxLength": VENUE_LENGTH,
                            "pattern": PRINTABLE_PATTERN,
                            "description": "where the model was published",
                        },
                        "weights_public": {
                            "type": "boolean",
                            "default": False,
                            "description": "model zoo: publish the weights (anyone may "
                            "download them once the entry has finished, if the entry is "
                            "public); needs weights_license",
                        },
                        "weights_license": {
                            "type": "string",
                            "enum": list(WEIGHTS_LICENSES),
                            "description": "SPDX identifier of the licence the weights are "
                            "published under (matched case-insensitively)",
                        },
                    },
                    "additionalProperties": False,
                },
                "encoding": {
                    "weights": {"contentType": "application/octet-stream"},
                    "manifest": {"contentType": "application/json"},
                },
            }
        },
    }


def install_openapi(app: FastAPI) -> None:
    """Replace ``app.openapi`` with the corrected document (built once, then cached)."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                description=app.description,
                routes=app.routes,
            )
            _add_manifest_schemas(spec)
            _mark_optional_tokens(spec)
            _printable_parameters(spec)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = build  # type: ignore[method-assign]


def _add_manifest_schemas(spec: dict[str, Any]) -> None:
    _, schema = models_json_schema([(Manifest, "validation")], ref_template=COMPONENTS)
    spec.setdefault("components", {}).setdefault("schemas", {}).update(schema.get("$defs", {}))


def _mark_optional_tokens(spec: dict[str, Any]) -> None:
    """Operations secured by the optional scheme accept no token or the (required) token."""
    schemes = spec.get("components", {}).get("securitySchemes", {})
    schemes.pop(OPTIONAL_SCHEME, None)
    for path in spec["paths"].values():
        for operation in path.values():
            security = operation.get("security", [])
            if not any(OPTIONAL_SCHEME in requirement for requirement in security):
                continue
            operation["security"] = [{}, {"HTTPBearer": []}]
            unauthorized = operation.setdefault("responses", {}).setdefault("401", {})
            unauthorized["description"] = OPTIONAL_TOKEN_401
            unauthorized.setdefault(
                "content",
                {
                    "application/json": {
                        "schema": {"$ref": COMPONENTS.format(model="ErrorResponse")}
                    }
                },
            )


def _printable_parameters(spec: dict[str, Any]) -> None:
    """Every string path/query parameter refuses control characters (``api.url_guard``)."""
    for path in spec["paths"].values():
        for operation in path.values():
            for parameter in operation.get("parameters", []):
                for schema in _string_schemas(parameter.get("schema", {})):
                    schema.setdefault("pattern", PRINTABLE_PATTERN)


def _string_schemas(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The string schemas in a parameter schema (directly, in anyOf, or as array items)."""
    if schema.get("type") == "string":
        return [schema]
    found = []
    for option in schema.get("anyOf", []):
        found += _string_schemas(option)
    if isinstance(schema.get("items"), dict):
        found += _string_schemas(schema["items"])
    return found
