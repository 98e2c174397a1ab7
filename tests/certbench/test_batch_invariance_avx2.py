"""The batch-invariance promises again with the kernels restricted to AVX2 (its own file, so the
test processes run it beside ``test_batch_invariance.py`` rather than after it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import timing

pytestmark = pytest.mark.memory(gib=0.75)

AVX2_ONLY = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}
"""Kernels limited to AVX2, as on the AMD machines CI may run on (an AVX2-only CPU ignores it)."""

INVARIANCE_TESTS = [
    "tests/certbench/test_batch_invariance.py",  # certification counts, d_PD, projections

    "tests/certbench/test_attacks.py::test_an_image_attacked_alone_gets_the_records_it_gets_in_a_batch",
    "tests/certbench/test_attacks.py::test_shards_reproduce_the_full_run_and_tables_round_trip",
    "tests/certbench/test_weather_attack.py::test_records_are_deterministic_and_independent_of_batch_size_and_sharding",
    "tests/certbench/test_fourier_lens.py::test_an_images_jacobian_is_bitwise_the_same_alone_or_in_a_batch",
    "tests/certbench/test_fourier_lens.py::test_records_do_not_depend_on_sharding_or_batch_size",
    "tests/certbench/test_fourier_sensitivity.py::test_records_do_not_depend_on_sharding_or_batch_size",
    "tests/certbench/test_smoothing.py::test_records_identical_for_any_batch_size_and_sharding",
]  # fmt: skip
"""Every test of a batch-invariance promise (certification counts, d_PD, both projections,
APGD, weather, lens, Fourier maps)."""


def test_invariance_holds_with_the_instruction_set_restricted_to_avx2():
    """The same promises with AVX2 kernels only, in a fresh process (the variables are read when
    the libraries load). Here at the machine's best they ran above; on an AVX-512 machine the
    AVX2 kernels take other tile shapes, which once made the weather search of a batch of 7
    differ from batches of 3."""
    if os.environ.get("ATEN_CPU_CAPABILITY") == "avx2":
        pytest.skip("this process already runs with AVX2 kernels only")
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if flags and "avx512f" not in flags:
        pytest.skip("this CPU has no AVX-512: its best kernels are the AVX2 ones, with which "
                    "the invariance tests already ran in this suite")  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, **AVX2_ONLY}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         *INVARIANCE_TESTS],
        cwd=root, env=env, capture_output=True, text=True, timeout=timing.seconds(600),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1], run.stdout
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert probe.stdout.strip() in {"AVX2", "DEFAULT"}, probe.stdout
