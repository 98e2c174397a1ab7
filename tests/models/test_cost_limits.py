"""A benchmark's caps on a submitted network (issue 33 §1): parameters and FLOPs per sample,
counted on the ``meta`` device at intake (``models.benchmarks.limits.check_cost``), stored with
the benchmark, and a definition written before caps existed keeps its hash."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from sqlalchemy.orm import Session

from certbench.nets import load_manifest
from models.benchmarks.limits import COST_LIMIT_CODE, check_cost, cost_limits
from models.catalog.benchmarks import (
    definition_sha256,
    packaged_definitions,
    parse_definition,
    upsert_benchmark,
)
from models.core.errors import BenchmarkDefinitionError, IntakeError
from models.db.entities import Benchmark
from tests.nets.test_library_architectures import RESNET, VIT, manifest
from tests.support.service_factories import tiny_definition


def benchmark(**limits: int) -> Benchmark:
    return Benchmark(name="capped", limits=limits or None)


def test_a_network_within_the_caps_gets_its_cost():
    cost = check_cost(benchmark(), load_manifest(manifest(RESNET)))
    assert 0 < cost.parameters < 10**6 and cost.flops_per_sample > cost.parameters


@pytest.mark.parametrize(
    ("limits", "figure"),
    [({"max_parameters": 1_000}, "parameters"), ({"max_flops_per_sample": 10_000}, "FLOPs")],
)
def test_a_network_above_a_cap_is_refused_naming_the_limit(limits: dict[str, int], figure: str):
    with pytest.raises(IntakeError) as refused:
        check_cost(benchmark(**limits), load_manifest(manifest(VIT)))
    limit = next(iter(limits.values()))
    assert refused.value.code == COST_LIMIT_CODE
    assert f"{figure}" in str(refused.value) and f"limit of {limit:,}" in str(refused.value)


def test_a_trillion_parameters_are_refused_by_the_default_cap_before_any_forward_pass():
    wide = manifest({"name": "timm/vit_tiny_patch16_224", "kwargs": {
        "img_size": 32, "patch_size": 4, "embed_dim": 262_144, "num_heads": 4}})  # fmt: skip
    with pytest.raises(IntakeError, match=r"above benchmark 'capped''s limit of 1,000,000,000"):
        check_cost(benchmark(), load_manifest(wide))


@pytest.mark.parametrize(
    ("architecture", "code", "phrase"),
    [
        ({"name": "timm/resnet18", "kwargs": {"depths": [2, 2]}}, "bad_manifest", "'depths'"),
        ({"name": "timm/vit_tiny_patch16_224"}, "input_size", "doesn't match model (224)"),
    ],
)
def test_a_network_the_library_cannot_build_or_run_is_refused_with_its_reason(
    architecture: dict[str, Any], code: str, phrase: str
):
    with pytest.raises(IntakeError) as refused:
        check_cost(benchmark(), load_manifest(manifest(architecture)))
    assert refused.value.code == code and phrase in str(refused.value)


def test_the_caps_are_bounded_and_stored_with_the_benchmark(session: Session):
    with pytest.raises(BenchmarkDefinitionError, match=r"limits\.max_parameters"):
        parse_definition(json.dumps(tiny_definition() | {"limits": {"max_parameters": 10**14}}))
    capped = tiny_definition(name="capped") | {"limits": {"max_flops_per_sample": 10**6}}
    stored = upsert_benchmark(session, parse_definition(json.dumps(capped)))
    session.expire_all()
    assert cost_limits(stored).max_flops_per_sample == 10**6
    assert cost_limits(stored).max_parameters == cost_limits(Benchmark()).max_parameters


def test_a_definition_without_caps_keeps_the_hash_it_had_before_caps_existed():
    """The packaged CIFAR definitions and every file loaded before keep their identity (a
    reload of the same version is not refused as "different content")."""
    definition = parse_definition(json.dumps(tiny_definition()))
    before = definition.model_dump(mode="json")
    before.pop("limits")
    digest = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()
    assert definition_sha256(definition) == digest
    explicit = parse_definition(json.dumps(tiny_definition() | {"limits": {}}))
    assert definition_sha256(explicit) != digest


def test_the_demo_caps_admit_cpu_sized_networks_and_refuse_a_wide_resnet():
    """The demo is certified on CPUs: timm's ResNet-18 at 32 px passes, WRN-28-10 does not."""
    demo = {d.name: d for d in packaged_definitions()}["demo-digits"]
    assert "limits" in demo.model_fields_set
    capped = Benchmark(name="demo-digits", limits=demo.limits.model_dump())
    check_cost(capped, load_manifest(manifest({"name": "timm/resnet18"})))
    with pytest.raises(IntakeError, match="parameters"):
        check_cost(capped, load_manifest(manifest({"name": "wrn"})))
