"""Every command refuses a bad number before loading anything, and every sampling command refuses
a run beyond its limits with the estimate (issue 34 §6: ``train --sigma -1`` was refused after
64 s, once the data had loaded; ``certify --n 100000000000000`` ran 77-106 s, then died in the
allocator).

The domain of every numeric option is declared (typer's ``min``/``max``, or a callback of
``certbench.cli.checks``); a fresh interpreter feeds each option of each command values outside
its domain (NaN and infinities for real numbers) with the command's required parameters filled
in, and checks each is a usage error naming the option while no heavy library was imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from certbench.cli.app import app, register_plugins
from tests.certbench.test_cli_startup import HEAVY
from tests.support import timing
from tests.support.workers import tiny_model, weights_bytes, write_tiny_dataset

SCRIPT = textwrap.dedent(
    """
    import enum, json, math, sys
    from typer.main import get_command
    from typer.testing import CliRunner
    from certbench.cli.app import app, register_plugins
    from certbench.cli.checks import Bounds, check_alpha, check_sigma, check_training_sigma

    REFUSED = {check_sigma: [-1.0, 0.0, math.nan], check_training_sigma: [-1.0, math.inf],
               check_alpha: [0.0, 2.0, math.nan]}

    def refused(param):
        check = param.type_descriptor.parameter_info.callback  # typer wraps param.callback
        if isinstance(check, Bounds):
            return check.outside()
        if check in REFUSED:
            return REFUSED[check]
        values = []
        if param.min is not None:
            values.append(param.min - 1)
        if param.max is not None:
            values.append(param.max + 1)
        return values

    def filler(param):
        annotation = param.type_descriptor.annotation
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return [next(iter(annotation)).value]
        text = str(annotation)
        if "int" in text or "float" in text:
            return ["1"]
        return ["cifar10"] if param.name in ("dataset", "clean", "source") else ["x"]

    import typer.testing

    register_plugins(app)
    root = get_command(app)
    typer.testing._get_command = lambda _: root  # build the click commands once, not per case
    runner = CliRunner()
    todo, cases = [([], root)], []
    while todo:
        path, command = todo.pop()
        for name, sub in getattr(command, "commands", {}).items():
            todo.append(([*path, name], sub))
        for param in getattr(command, "params", []):
            text = str(param.type_descriptor.annotation)
            if param.param_type_name != "option" or not ("int" in text or "float" in text):
                continue
            args = []
            for other in command.params:
                if other is not param and other.required:
                    given = filler(other)
                    args += [other.opts[0], *given] if other.param_type_name == "option" else given
            for value in refused(param):
                shown = repr(value) if isinstance(value, float) else str(value)
                argv = [*path, f"{param.opts[0]}={shown}", *args]
                result = runner.invoke(app, argv)
                cases.append([" ".join(argv), param.opts[0], result.exit_code, result.output])
    print(json.dumps({"cases": cases, "modules": sorted(sys.modules)}))
    """
)


def test_every_numeric_option_refuses_out_of_domain_values_before_loading_anything(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=timing.seconds(600),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shown = json.loads(done.stdout)
    cases = shown["cases"]
    commands = {argv.split(" --")[0] for argv, *_ in cases}
    # the commands of the issue and every sampling command are among them
    for name in ("train", "certify", "predict", "fourier-heatmap", "fourier-lens",
                 "weather-attack", "robust-accuracy", "compare", "threat-report"):  # fmt: skip
        assert name in commands, sorted(commands)
    assert len(cases) > 150, len(cases)
    wrong = [
        (argv, code, " ".join(output.split())[-300:])
        for argv, option, code, output in cases
        if code != 2 or option not in output.replace("│", " ")
    ]
    assert not wrong, wrong[:10]
    loaded = {name.split(".")[0] for name in shown["modules"]}
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_every_numeric_option_declares_its_domain():
    """A new numeric option without a range or a checking callback is refused here, by name."""
    from typer.main import get_command

    register_plugins(app)
    todo, undeclared = [([], get_command(app))], []
    while todo:
        path, command = todo.pop()
        todo += [([*path, n], sub) for n, sub in getattr(command, "commands", {}).items()]
        for param in getattr(command, "params", []):
            text = str(param.type_descriptor.annotation)
            if not ("int" in text or "float" in text):
                continue
            declared = param.callback is not None or param.min is not None or param.max is not None
            if not declared:
                undeclared.append(f"{' '.join(path)} {param.opts[0] if param.opts else param.name}")
    assert not undeclared, undeclared


SAMPLES_1E14 = "100000000000000"


def test_certify_refuses_n_1e14_at_once_with_the_memory_estimate(tmp_path):
    """Refused from the options alone: 8 bytes per sample of one image in flight is 800 TB."""
    script = (
        "import sys; from certbench.cli.app import main; sys.argv = ['certbench', 'certify', "
        "'--weights', 'w', '--manifest', 'm', '--dataset', 'cifar10', '--out', 'o', "
        f"'--n', '{SAMPLES_1E14}']; main()"
    )
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=timing.seconds(120),
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    message = " ".join(line for line in done.stderr.splitlines() if "import time" not in line)
    assert "certify refused before loading anything" in message
    assert "100,000,000,000,100 noisy samples" in message and "808,800 GB" in message
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines()
                if line.startswith("import time:")}  # fmt: skip
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


@pytest.fixture
def tiny(tmp_path: Path) -> dict[str, str]:
    """A tiny CIFAR ResNet-20, its manifest and a two-config data folder, as CLI arguments."""
    weights = tmp_path / "model" / "model.safetensors"
    weights_bytes(tiny_model(), weights.parent)
    manifest = weights.parent / "manifest.json"
    from tests.support.workers import manifest as tiny_manifest

    manifest.write_text(json.dumps(tiny_manifest()))
    dataset = write_tiny_dataset(tmp_path / "data")
    return {"weights": str(weights), "manifest": str(manifest), "dataset": str(dataset)}


def _certify(tiny: dict[str, str], tmp_path: Path, *extra: str) -> tuple[int, str]:
    register_plugins(app)
    result = CliRunner().invoke(
        app,
        ["certify", "--weights", tiny["weights"], "--manifest", tiny["manifest"],
         "--dataset", tiny["dataset"], "--config", "clean", "--out", str(tmp_path / "r.parquet"),
         "--device", "cpu", *extra],
    )  # fmt: skip
    return result.exit_code, " ".join(result.output.replace("│", " ").split())


def test_certify_refuses_a_run_over_the_time_limit_with_its_measured_estimate(tiny, tmp_path):
    """Timed on one batch of the real model before any sample: 4 images × 10^8 samples on a
    CIFAR ResNet-20 on one CPU core take weeks, over a limit of one hour."""
    code, output = _certify(tiny, tmp_path, "--n", "100000000", "--max-hours", "1",
                            "--batch-size", "64")  # fmt: skip
    assert code == 2, output
    assert "certify refused before sampling: estimated about" in output
    assert "400,000,400 forward passes at" in output and "measured on one batch of 64" in output
    assert "over the limit of 1 h" in output and "--max-hours" in output
    assert not (tmp_path / "r.parquet").exists()


def test_certify_refuses_a_run_over_the_memory_limit(tiny, tmp_path):
    code, output = _certify(tiny, tmp_path, "--n", "1000", "--max-memory-gb", "0.000001")
    assert code == 2, output
    assert "refused before loading anything" in output  # 8 kB per image > 1 kB
    code, output = _certify(tiny, tmp_path, "--n", "100", "--max-memory-gb", "0.0001")
    assert code == 2, output
    assert "certify refused before sampling" in output and "over the 0.0001 GB --max-memory-gb" in (
        output
    )


def test_a_small_certify_run_is_neither_timed_nor_refused(tiny, tmp_path):
    code, output = _certify(tiny, tmp_path, "--n", "16", "--n0", "4", "--limit", "1")
    assert code == 0, output
    assert "estimated" not in output
    assert (tmp_path / "r.parquet").exists()
