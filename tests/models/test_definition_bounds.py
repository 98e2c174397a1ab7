"""Every number of a benchmark definition is bounded by what the pipeline can run (issue 27 §4):
an admin's ``n`` of 2³¹, a Fourier ``n`` of 10¹⁵ or a ``source_size`` of 10⁹ is refused with
the limit named, never a 500 or a worker allocating gigabytes."""

from __future__ import annotations

import json
import types
import typing
from typing import Any

import annotated_types
import pytest
from pydantic import BaseModel

from models.benchmarks.definitions import MAX_SAMPLES, MAX_SOURCE_SIZE, BenchmarkSchema
from models.catalog.benchmarks import parse_definition
from models.core.errors import BenchmarkDefinitionError
from models.stages import registry
from tests.support.service_factories import tiny_definition


def _fourier(**changes: Any) -> dict[str, Any]:
    block = {"protocol": "quick", "repo": "certbench/tiny", "config": "set0", "source_size": 6}
    return {"fourier_sensitivity": block | changes}


CASES = {
    "n of 2^31": (
        {"protocol": {"version": "v", "n": 2**31}},
        f"less than or equal to {MAX_SAMPLES}",
    ),
    "n0 of 1e15": ({"protocol": {"version": "v", "n0": 10**15}}, "protocol.n0"),
    "seed of 2^63": ({"protocol": {"version": "v", "seed": 2**63}}, "protocol.seed"),
    "version of 2^31": ({"version": 2**31}, "version"),
    "num_classes of 1e9": ({"num_classes": 10**9}, "num_classes"),
    "sigma of 1e6": ({"sigmas": [0.25, 1e6]}, "sigmas.1"),
    "source_size of 1e9": (
        {"test_sets": [tiny_definition()["test_sets"][0] | {"source_size": 10**9}]},
        f"less than or equal to {MAX_SOURCE_SIZE}",
    ),
    "fourier n of 1e15": ({"stages": _fourier(n=10**15)}, "stages.fourier_sensitivity"),
}


@pytest.mark.parametrize("case", CASES)
def test_out_of_range_numbers_are_refused_naming_the_limit(case: str):
    changes, phrase = CASES[case]
    document = tiny_definition() | changes
    with pytest.raises(BenchmarkDefinitionError) as info:
        parse_definition(json.dumps(document))
    assert phrase in str(info.value), str(info.value)
    assert "less than or equal to" in str(info.value)


def _numeric_fields(model: type[BaseModel], seen: set[type]) -> list[tuple[str, Any]]:
    """(model.field, FieldInfo) of every int/float field of ``model`` and the models it nests."""
    out = []
    if model in seen:
        return out
    seen.add(model)
    for name, field in model.model_fields.items():
        for kind in _leaf_types(field.annotation):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                out.extend(_numeric_fields(kind, seen))
            elif kind in (int, float):
                out.append((f"{model.__name__}.{name}", field))
    return out


def _leaf_types(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _leaf_types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple, dict):
        return [leaf for arg in typing.get_args(annotation) for leaf in _leaf_types(arg)]
    return [annotation]


def _bounded(field: Any) -> bool:
    metadata = list(field.metadata)
    for arg in typing.get_args(field.annotation):  # Optional[Annotated[int, Field(le=...)]]
        metadata.extend(getattr(arg, "__metadata__", ()))
        for inner in typing.get_args(arg):
            metadata.extend(getattr(inner, "__metadata__", ()))
    for item in metadata:
        if isinstance(item, annotated_types.Le | annotated_types.Lt):
            return True
        if any(
            isinstance(m, annotated_types.Le | annotated_types.Lt)
            for m in getattr(item, "metadata", ())
        ):
            return True
    return False


def test_every_numeric_field_of_a_definition_has_an_upper_bound():
    models = [BenchmarkSchema] + [
        s.protocol_model for s in registry.all_stages() if s.protocol_model
    ]
    seen: set[type] = set()
    fields = [item for model in models for item in _numeric_fields(model, seen)]
    assert len(fields) > 30, fields  # the walk reached the stage blocks
    unbounded = [name for name, field in fields if not _bounded(field)]
    assert unbounded == [], f"numeric definition fields without an upper bound: {unbounded}"
