"""The ``certbench`` command starts fast: help and usage errors load no heavy library.

``certbench --help`` registers every command module named in the ``certbench.commands`` entry
points; each must import only typer, the standard library and light modules at top level, with
torch, FastAPI, Celery, SQLAlchemy, ``datasets``, matplotlib, pyarrow and SciPy imported inside
the commands that use them. Checked as the set of modules a fresh interpreter holds after showing
the help of every command (not as a time, which depends on the machine).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.support import timing

#: Libraries that take from a tenth of a second to several seconds to import.
HEAVY = (
    "torch",
    "torchvision",
    "fastapi",
    "starlette",
    "uvicorn",
    "celery",
    "kombu",
    "sqlalchemy",
    "alembic",
    "datasets",
    "huggingface_hub",
    "matplotlib",
    "pyarrow",
    "scipy",
    "numpy",
    "sklearn",
    "PIL",
)

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from typer.main import get_command
    from typer.testing import CliRunner
    from certbench.cli.app import app, register_plugins

    register_plugins(app)
    runner = CliRunner()
    paths, todo = [], [([], get_command(app))]
    while todo:
        prefix, command = todo.pop()
        paths.append(prefix)
        for name, sub in getattr(command, "commands", {}).items():
            todo.append(([*prefix, name], sub))
    outputs = {}
    for path in sorted(paths):
        result = runner.invoke(app, [*path, "--help"])
        outputs[" ".join(path)] = [result.exit_code, result.output]
    usage = runner.invoke(app, ["certify", "--no-such-option"])
    dataset = runner.invoke(
        app,
        ["certify", "--weights", "w", "--manifest", "m", "--dataset", "cifr10", "--out", "o"],
    )
    print(json.dumps({
        "modules": sorted(sys.modules),
        "help": outputs,
        "usage": [usage.exit_code, usage.output],
        "dataset": [dataset.exit_code, dataset.output],
    }))
    """
)


def _run() -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=timing.seconds(300),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_help_and_usage_errors_import_no_heavy_library() -> None:
    shown = _run()
    helps = shown["help"]
    # the root, the core commands and the plug-in groups are all there and all answered
    for command in ("", "certify", "serve", "worker", "admin create-user", "generate", "db"):
        assert command in helps, sorted(helps)
    for command, (code, output) in helps.items():
        assert code == 0 and "Usage:" in output, (command, output)
    assert "--dataset" in helps["certify"][1] and "--queues" in helps["worker"][1]
    usage_code, usage_output = shown["usage"]
    assert usage_code == 2 and "No such option" in usage_output
    dataset_code, dataset_output = shown["dataset"]
    assert dataset_code == 2
    assert "unknown dataset 'cifr10'; did you mean" in " ".join(
        dataset_output.replace("│", " ").split()
    )
    loaded = {name.split(".")[0] for name in shown["modules"]}
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
