"""Every benchmark script belongs to exactly one smoke group (``benchmark_smoke.GROUPS``)."""

from __future__ import annotations

from tests.support.benchmark_smoke import GROUPS, SCRIPTS


def test_every_script_is_in_exactly_one_group() -> None:
    assert len(SCRIPTS) >= 10
    grouped = [stem for stems in GROUPS.values() for stem in stems]
    assert len(grouped) == len(set(grouped)), "a script is in two smoke groups"
    missing = sorted({p.stem for p in SCRIPTS} - set(grouped))
    assert not missing, f"add {missing} to a group in tests/support/benchmark_smoke.py"
    unknown = sorted(set(grouped) - {p.stem for p in SCRIPTS})
    assert not unknown, f"{unknown} in benchmark_smoke.GROUPS are not scripts in benchmarks/"
