"""The service group of the benchmark scripts' smoke runs (``benchmark_smoke``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmark_smoke import run_smoke, scripts_of


@pytest.mark.slow
@pytest.mark.parametrize("script", scripts_of("service"), ids=lambda p: p.stem)
def test_smoke_run_prints_figures(script: Path) -> None:
    run_smoke(script)
