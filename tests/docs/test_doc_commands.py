"""Every command block of README.md and the guide is checked, so an example that drifts from the
code fails here (issue 25 §3). How blocks are marked: ``doc_blocks``.

Runnable blocks are executed as written (``uv run X`` becomes the project's own ``X``) in an empty
folder with its own home, offline; parse-only blocks are checked against the ``certbench``
command's click definitions, the REST API's routes, the benchmark scripts and Python's compiler.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from typer._click.exceptions import UsageError  # Typer's vendored click

from tests.support import timing
from tests.support.doc_blocks import ROOT, Block, all_blocks, blocks, command_lines, first_run_block
from tests.support.processes import BIN, service_env

pytestmark = pytest.mark.memory(gib=1)

ALL = all_blocks()
SHELL = [b for b in ALL if b.language in ("bash", "sh", "shell", "console")]
PYTHON = [b for b in ALL if b.language in ("python", "py", "pycon")]
#: Programs a documented shell line may start with besides ``uv run ...``, ``curl`` and ``bash
#: SCRIPT``: their own syntax is not ours to check, only that they are the ones named here.
OTHER_PROGRAMS = {"export": None, "hf": BIN / "hf"}
#: Shell that makes a block's ``uv run X ...`` run the virtual environment's ``X`` (this process's
#: environment is the project's; a temp folder is not a uv project).
UV_SHIM = (
    'uv() { [ "$1" = run ] || { echo "only uv run is shimmed" >&2; return 2; }; shift; "$@"; }\n'
)


def test_every_command_block_is_marked_run_or_parse():
    assert SHELL and PYTHON
    unmarked = [b.where for b in ALL if b.kind not in ("run", "parse", "first-run")]
    assert not unmarked, f"mark these blocks <!-- cmd: run --> or <!-- cmd: parse -->: {unmarked}"
    assert any(b.kind == "run" for b in ALL), "no runnable block: the examples would go unrun"


def test_the_guides_first_submission_is_the_readmes():
    """The e2e test runs the README's block; every first-run block of the guide is that block."""
    readme = first_run_block()
    others = [b for b in ALL if b.kind == "first-run" and b.path != readme.path]
    assert others, "the guide's Getting started shows the first submission too"
    assert all(b.text == readme.text for b in others), [b.where for b in others]


# ---- parse-only: the command line ---------------------------------------------------------------


@pytest.fixture(scope="module")
def cli() -> Any:
    """The ``certbench`` click group as the console script builds it (plugins mounted)."""
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    from reference import cli_command

    return cli_command()


def _resolve(group: Any, argv: list[str]) -> tuple[Any, list[str], list[str]]:
    """The (sub)command an argv names, its path and its own arguments, resolved by each group's
    own parser (``certbench results 12`` is ``results show 12``)."""
    command, path, rest = group, ["certbench"], list(argv)
    while hasattr(command, "commands"):
        ctx = command.make_context(" ".join(path), [a for a in rest if a != "..."])
        pending = [*ctx._protected_args, *ctx.args]
        assert pending, f"`{' '.join(path)}` needs a sub-command"
        name, command, _ = command.resolve_command(ctx, pending)
        path = [*path, name]
        rest = rest[rest.index(pending[0]) + 1 :] if pending[0] in rest else rest
        if name != pending[0]:  # the group chose the command itself (results ID -> show ID)
            rest = [pending[0], *rest]
    return command, path, rest


def check_certbench(group: Any, argv: list[str]) -> None:
    """Parse ``certbench ARGV`` with the command's own parser and convert every value as the
    command would (choices, numbers, callbacks such as the dataset-name check), except that
    files need not exist here. A line with ``...`` elides options: the others are not required."""
    command, path, rest = _resolve(group, argv)
    elided = "..." in rest
    rest = [a for a in rest if a != "..."]
    ctx = command.context_class(command, info_name=" ".join(path))
    options, extra, order = command.make_parser(ctx).parse_args(rest)
    for param in order:
        if param.name in options and param.type_descriptor.annotation is not Path:
            param.process_value(ctx, options[param.name])
    if not elided:
        missing = [p.opts[0] for p in command.params if p.required and p.name not in options]
        assert not missing, f"missing required options {missing}"
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    assert any(p.nargs == -1 for p in arguments) or len(extra) <= len(arguments), (
        f"unexpected arguments {extra}"
    )


def _shell_lines(kinds: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    return [(b.where, argv) for b in SHELL if b.kind in kinds for argv in command_lines(b.text)]


@pytest.mark.parametrize(
    ("where", "argv"), _shell_lines(("parse", "first-run", "run")), ids=lambda v: str(v)[:60]
)
def test_documented_command_lines_are_accepted(where: str, argv: list[str], cli, routes):
    while argv and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):  # VAR=value before the command
        argv = argv[1:]
    try:
        if argv[:3] == ["uv", "run", "certbench"]:
            check_certbench(cli, argv[3:])
        elif argv[:3] == ["uv", "run", "python"]:
            check_script(argv[3:])
        elif argv[0] == "curl":
            check_curl(argv[1:], routes)
        elif argv[0].startswith("scripts/"):
            check_executable(argv)
        elif argv[0] == "bash":
            assert (ROOT / argv[1]).is_file(), f"no script {argv[1]}"
        else:
            assert argv[0] in OTHER_PROGRAMS, f"unchecked program {argv[0]!r}"
            program = OTHER_PROGRAMS[argv[0]]
            assert program is None or program.is_file(), f"{argv[0]} is not installed"
    except Exception as err:  # the click errors carry no location: say where the line is
        raise AssertionError(f"{where}: `{' '.join(argv)}`: {err}") from err


def check_script(argv: list[str]) -> None:
    """``uv run python SCRIPT --opt ...``: the script exists and defines every option used."""
    script = ROOT / argv[0]
    assert script.is_file(), f"no script {argv[0]}"
    assert_options_defined(argv, script.read_text(encoding="utf-8"))


def assert_options_defined(argv: list[str], source: str) -> None:
    """Every ``--option`` of the line is defined in the argparse source (``--no-x`` by
    ``--x`` with ``BooleanOptionalAction``)."""
    for option in (a.split("=")[0] for a in argv[1:] if a.startswith("--")):
        positive = "--" + option.removeprefix("--no-")
        negated = option.startswith("--no-") and "BooleanOptionalAction" in source
        defined = f'"{option}"' in source or (negated and f'"{positive}"' in source)
        assert defined, f"{argv[0]} defines no option {option}"


def check_executable(argv: list[str]) -> None:
    """``scripts/NAME --opt ...``: an executable script of the repository that defines every
    option used (in itself or in its package, ``scripts/name/``)."""
    script = ROOT / argv[0]
    assert script.is_file() and os.access(script, os.X_OK), f"{argv[0]} is not an executable"
    package = script.with_name(script.name.replace("-", "_"))
    sources = [script, *sorted(package.glob("*.py"))] if package.is_dir() else [script]
    assert_options_defined(argv, "\n".join(path.read_text(encoding="utf-8") for path in sources))


# ---- parse-only: REST ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def routes(tmp_path_factory) -> list[re.Pattern[str]]:
    """The REST API's paths (OpenAPI templates as patterns)."""
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    from reference import openapi_document

    paths = openapi_document()["paths"]
    return [re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", p) + "$") for p in paths]


def check_curl(args: list[str], routes: list[re.Pattern[str]]) -> None:
    urls = [a for a in args if a.startswith("http")]
    assert len(urls) == 1, f"one URL per curl line, got {urls}"
    path = urlsplit(urls[0]).path
    assert any(r.match(path) for r in routes), f"{path} is no route of the REST API"


# ---- parse-only: Python -------------------------------------------------------------------------


@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.where)
def test_python_blocks_compile_and_their_imports_resolve(block: Block):
    tree = ast.parse(compile(block.text, block.where, "exec", flags=ast.PyCF_ONLY_AST))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                assert hasattr(module, alias.name) or _submodule(module, alias.name), (
                    f"{block.where}: {node.module} has no {alias.name}"
                )


def _submodule(module: Any, name: str) -> bool:
    try:
        importlib.import_module(f"{module.__name__}.{name}")
    except ImportError:
        return False
    return True


# ---- runnable -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in SHELL if b.kind == "run"], ids=lambda b: b.where)
def test_runnable_blocks_run_as_written(block: Block, tmp_path: Path):
    """In an empty folder with its own home and no network, the block exits 0 and every file it
    names with ``--out`` exists afterwards."""
    folder = tmp_path / "work"
    folder.mkdir()
    env = service_env(
        HOME=str(tmp_path / "home"),
        XDG_CONFIG_HOME=str(tmp_path / "home" / "config"),
        XDG_CACHE_HOME=str(tmp_path / "home" / "cache"),
        PATH=f"{BIN}:/usr/bin:/bin",
        COLUMNS="200",
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", UV_SHIM + block.text],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timing.seconds(600),
    )
    assert done.returncode == 0, f"{block.where}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    outs = [argv[argv.index("--out") + 1] for argv in command_lines(block.text) if "--out" in argv]
    assert outs and all((folder / out).exists() for out in outs), outs


def test_marker_parsing_sees_unmarked_blocks(tmp_path: Path):
    """The check above can fail: an unmarked block is reported as unmarked."""
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n```bash\nuv run certbench --help\n```\n\n<!-- cmd: run -->\n```bash\nls\n```\n"
        "\n```\nuv run certbench --help\n```\n\n```\nGET /api/v1/benchmarks\n```\n"
    )
    found = blocks(page)
    assert [b.kind for b in found] == [None, "run", None]  # the GET listing is no command
    assert {b.language for b in found} == {"bash"}


@pytest.mark.parametrize(
    "argv",
    [
        ["certify", "--weights", "w", "--manifest", "m", "--dataset", "cifar10", "--sigmaa", "1"],
        ["certify", "--weights", "w", "--manifest", "m", "--dataset", "cifr10", "--out", "o"],
        ["certify", "--weights", "w", "--manifest", "m", "--dataset", "cifar10"],  # no --out
        ["train", "--recipe", "gaussiann", "--dataset", "d", "--out", "o"],
        ["certify", "...", "--n", "many"],
        ["no-such-command"],
    ],
)
def test_a_drifting_command_line_is_refused(argv: list[str], cli):
    """The parse-only check can fail: a misspelt option, a refused value, a missing required
    option, a bad number where options are elided, an unknown command."""
    with pytest.raises((UsageError, AssertionError)):
        check_certbench(cli, argv)
