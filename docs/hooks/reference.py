"""MkDocs hook: the reference pages, generated at build time from the code they describe.

- ``reference/cli.md`` from the ``certbench`` command's click tree (Typer builds it; the plugin
  groups of the service layers are mounted as the console script mounts them);
- ``reference/rest.md`` from the service's OpenAPI document (``api.main.create_app().openapi()``);
- ``reference/settings.md`` from ``models.core.settings.Settings``' pydantic-settings fields;
- ``benchmarks/results.md`` from ``benchmarks/RESULTS.md``;
- the table of packaged benchmarks (``<!-- packaged-benchmarks -->`` in a page) from
  ``models/catalog/definitions/*.json``;
- the layer diagram (``<!-- layers-diagram -->``) from the import-linter ``layers`` contracts in
  ``pyproject.toml``, the same contracts ``lint-imports`` enforces in the test suite;
- the table of ``certbench`` packages (``<!-- certbench-packages -->``) from their docstrings.

None of these pages is written by hand, so a renamed option, a new route or a new setting shows up
in the next build. Nothing here reaches the network.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
HTTP_METHODS = ("get", "post", "put", "patch", "delete")


def on_files(files: Files, config: Any) -> Files:
    """Add the generated pages to the site (before the nav is built, so the nav can name them)."""
    pages = {
        "reference/cli.md": cli_reference(),
        "reference/rest.md": rest_reference(),
        "reference/settings.md": settings_reference(),
        "benchmarks/results.md": benchmark_results(),
    }
    for uri, content in pages.items():
        files.append(File.generated(config, uri, content=content))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Fill the packaged-benchmarks marker with the table of the packaged definitions."""
    if PACKAGED_MARKER in markdown:
        markdown = markdown.replace(PACKAGED_MARKER, packaged_benchmarks())
    if LAYERS_MARKER in markdown:
        markdown = markdown.replace(LAYERS_MARKER, layers_diagram())
    if PACKAGES_MARKER in markdown:
        markdown = markdown.replace(PACKAGES_MARKER, packages_table())
    if MODELS_PACKAGES_MARKER in markdown:
        markdown = markdown.replace(MODELS_PACKAGES_MARKER, packages_table("models"))
    return markdown


PACKAGES_MARKER = "<!-- certbench-packages -->"
MODELS_PACKAGES_MARKER = "<!-- models-packages -->"


def packages_table(root: str = "certbench") -> str:
    """Each subpackage of ``root`` with the first paragraph of its ``__init__`` docstring (its
    stated role), read with ``ast`` so nothing is imported."""
    import ast

    rows = ["| package | role |", "|---|---|"]
    for init in sorted((ROOT / root).glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        role = doc.split("\n\n")[0]
        rows.append(f"| `{root}.{init.parent.name}` | {_cell(role)} |")
    return "\n".join(rows)


PACKAGED_MARKER = "<!-- packaged-benchmarks -->"
LAYERS_MARKER = "<!-- layers-diagram -->"


def layers_diagram() -> str:
    """Boxes, top floor first, one per ``layers`` contract of ``pyproject.toml``: a floor may
    import the floors under it, never those above (``|`` separates independent neighbours)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    blocks = []
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["type"] != "layers":
            continue
        container = ", ".join(contract.get("containers", [])) or "the repository"
        floors = [" | ".join(p.strip() for p in layer.split("|")) for layer in contract["layers"]]
        width = max(len(f) for f in floors) + 4
        lines = ["┌" + "─" * width + "┐"]
        for i, floor in enumerate(floors):
            lines.append("│  " + floor.ljust(width - 2) + "│")
            if i < len(floors) - 1:
                lines.append("├" + "─" * (width // 2 - 1) + "▼" + "─" * (width - width // 2) + "┤")
        lines.append("└" + "─" * width + "┘")
        drawing = "\n".join(lines)
        blocks.append(f"**{container}**: {contract['name']}.\n\n```text\n{drawing}\n```")
    return "\n\n".join(blocks)


def packaged_benchmarks() -> str:
    """One row per packaged benchmark definition: its protocol and stages, as loaded."""
    import json

    rows = [
        "| benchmark | title | test sets | σ | n0, n, α | images | stages |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in sorted((ROOT / "models" / "catalog" / "definitions").glob("*.json")):
        d = json.loads(path.read_text(encoding="utf-8"))
        p = d["protocol"]
        skip = p.get("skip", 1)
        images = "all" if skip == 1 else f"every {skip}th"
        images += f", first {p['limit']}" if p.get("limit") else ""
        stages = ", ".join(f"`{s}`" for s in sorted(d.get("stages", {}))) or "—"
        sigmas = ", ".join(str(s) for s in d["sigmas"])
        rows.append(
            f"| `{d['name']}` | {_cell(d['title'])} | {len(d['test_sets'])} | {sigmas} | "
            f"{p['n0']}, {p['n']:,}, {p['alpha']} | {images} | {stages} |"
        )
    return "\n".join(rows)


def cli_command() -> Any:
    """The ``certbench`` click group with every plugin group mounted, as ``certbench.cli.main``
    builds it. Registered once per process: a second registration would mount groups twice.
    Typer vendors its own click, so its classes are duck-typed here."""
    from typer.main import get_command

    from certbench.cli.app import app, register_plugins

    if not getattr(app, "_certbench_plugins_registered", False):
        register_plugins(app)
        app._certbench_plugins_registered = True  # type: ignore[attr-defined]
    return get_command(app)


def _walk(command: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    found = [(path, command)]
    if hasattr(command, "commands"):
        for name in sorted(command.commands):
            sub = command.commands[name]
            if not sub.hidden:
                found += _walk(sub, [*path, name])
    return found


def _cell(text: Any) -> str:
    """Text safe inside a markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _option_row(param: Any, ctx: Any) -> str:
    if param.param_type_name == "argument":
        name = f"`{(param.metavar or param.name).upper()}`"
        kind = _cell(param.display_type(ctx).strip("<>")) + ("" if param.required else ", optional")
        return f"| {name} | {kind} | | |"
    names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
    kind = "flag" if param.is_flag else _cell(param.display_type(ctx).strip("<>"))
    if param.multiple:
        kind += ", repeatable"
    default = param.default
    if param.required:
        shown = "**required**"
    elif default is None or default == () or default == [] or (param.is_flag and not default):
        shown = ""
    else:
        shown = f"`{_cell(getattr(default, 'value', default))}`"
    return f"| {names} | {kind} | {shown} | {_cell(param.help or '')} |"


def cli_reference() -> str:
    """Every command and sub-command of ``certbench``: its help, usage and options."""
    lines = [
        "# Command-line reference",
        "",
        "Generated from the `certbench` command's definitions when this site was built. In a "
        "clone, run commands as `uv run certbench ...`; `certbench COMMAND --help` prints the "
        "same text.",
        "",
    ]
    root = cli_command()
    for path, command in _walk(root, ["certbench"]):
        title = " ".join(path)
        lines += [f"## {title}", ""]
        help_text = (command.help or "").strip()
        if help_text:
            lines += [help_text.split("\b")[0].strip(), ""]
        ctx = command.context_class(command, info_name=title)
        usage = " ".join(command.collect_usage_pieces(ctx))
        lines += ["```text", f"{title} {usage}".rstrip(), "```", ""]
        params = [p for p in command.params if not getattr(p, "hidden", False)]
        if hasattr(command, "commands"):
            subs = [n for n in sorted(command.commands) if not command.commands[n].hidden]
            names = ", ".join(f"<code>{n}</code>" for n in subs)  # .cli-names: never split
            lines += [f'<p class="cli-names">Commands: {names}.</p>', ""]
        if params:
            lines += ["| option | type | default | description |", "|---|---|---|---|"]
            lines += [_option_row(p, ctx) for p in params]
            lines.append("")
    return "\n".join(lines)


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"list of {_schema_name(schema.get('items', {}))}"
    return str(schema.get("type", "any"))


def openapi_document() -> dict[str, Any]:
    """The service's OpenAPI document, from an app on throw-away settings (no database opened)."""
    from api.main import create_app
    from models.core.settings import Settings

    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(data_dir=Path(folder), database_url=f"sqlite:///{folder}/x.db")
        return create_app(settings).openapi()


def rest_reference() -> str:
    """Every REST route: method, path, summary, description, parameters, body, responses."""
    spec = openapi_document()
    lines = [
        "# REST reference",
        "",
        f"Generated from the service's OpenAPI document ({spec['info']['title']}, version "
        f"{spec['info']['version']}) when this site was built. A running service serves the same "
        "document at `/openapi.json` and browsable at `/docs` (Swagger UI) and `/redoc`.",
        "",
    ]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in spec["paths"].items():
        for method in HTTP_METHODS:
            if method in item:
                operation = item[method]
                tag = (operation.get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append((method.upper(), path, operation))
    for tag in sorted(by_tag):
        lines += [f"## {tag}", ""]
        for method, path, operation in by_tag[tag]:
            lines += _operation(method, path, operation)
    return "\n".join(lines)


def _operation(method: str, path: str, operation: dict[str, Any]) -> list[str]:
    lines = [f"### `{method} {path}`", ""]
    if operation.get("summary"):
        lines += [f"**{operation['summary']}.**", ""]
    if operation.get("description"):
        lines += [operation["description"].strip(), ""]
    params = operation.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for p in params:
            lines.append(
                f"| `{p['name']}` | {p['in']} | {_cell(_schema_name(p.get('schema', {})))} | "
                f"{'yes' if p.get('required') else ''} | {_cell(p.get('description', ''))} |"
            )
        lines.append("")
    body = operation.get("requestBody", {}).get("content", {})
    if body:
        kinds = ", ".join(f"`{k}` ({_schema_name(c.get('schema', {}))})" for k, c in body.items())
        lines += [f"Body: {kinds}.", ""]
    responses = operation.get("responses", {})
    if responses:
        lines += [
            "Responses: "
            + "; ".join(f"{c} {_cell(r.get('description', ''))}" for c, r in responses.items())
            + ".",
            "",
        ]
    return lines


def settings_reference() -> str:
    """Every field of the service settings with its ``CERTBENCH_*`` variable, default and
    description (the fields' own ``description``)."""
    from models.core.settings import Settings

    prefix = Settings.model_config.get("env_prefix", "")
    lines = [
        "# Settings reference",
        "",
        "Generated from `models/core/settings.py` when this site was built. The API processes and "
        "the workers read the same variables, so a deployment is configured in one place. With "
        "nothing set, everything lives under `./certbench-data` (SQLite, artifacts, data sets) "
        "and the broker is the embedded one.",
        "",
        "| variable | type | default | description |",
        "|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        if get_origin(field.annotation) is Literal:
            annotation = " \\| ".join(f"`{v}`" for v in get_args(field.annotation))
        else:
            annotation = getattr(field.annotation, "__name__", None) or str(field.annotation)
            annotation = _cell(annotation.replace("typing.", "").replace("pathlib.", ""))
        default = field.get_default()
        shown = "" if default in (None, "") else f"`{_cell(default)}`"
        lines.append(
            f"| `{prefix}{name.upper()}` | {annotation} | {shown} | "
            f"{_cell(field.description or '')} |"
        )
    return "\n".join(lines) + "\n"


def benchmark_results() -> str:
    """``benchmarks/RESULTS.md`` as a page: its figures, each with the command and the machine
    (the project's internal "helper" labels dropped)."""
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    text = re.sub(r"^Each helper records.*\n", "", text, flags=re.M)
    text = re.sub(r',? helper "[^"]+"', "", text)
    # the measurements were taken beside other jobs; who ran them is no reader's concern
    return text.replace("other helpers'", "other jobs'").replace("other helpers", "other jobs")
