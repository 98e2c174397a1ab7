"""Text that researchers read names papers, not an internal numbering of them.

The code and the docs cite their sources by authors, year and venue or arXiv link
(``tests/docs/test_references.py`` holds every tracked file to that). A reader of ``certbench …
--help``, of the OpenAPI schema (``/docs``), of a web page or of a leaderboard column sees text
assembled at run time from many places, so this check reads exactly what is shown: every
registered command's help as click holds it, the app's OpenAPI schema, every web template and
every stage's metric labels and help.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from api.main import create_app
from certbench.cli.app import app as cli_app
from certbench.cli.app import register_plugins
from models.core.settings import Settings
from models.stages.registry import all_stages

#: "seed" and a three-digit number from 000, in any case, possessive, or across a line break.
SEED_JARGON = re.compile(r"\bseed\s+0\d\d\b", re.IGNORECASE)
TEMPLATES = Path(__file__).resolve().parents[2] / "api" / "web" / "templates"


def _commands(command: Any, parent: Any, name: str) -> Iterator[tuple[str, Any, Any]]:
    """Every command under ``command`` (itself included) with the context click shows it in.

    Typed ``Any``: typer ships its own copy of click (``typer._click``), not the ``click``
    package, so the walk relies on click's interface, not on its classes."""
    context = command.context_class(command, info_name=name, parent=parent)
    yield context.command_path, command, context
    if hasattr(command, "list_commands"):
        for sub_name in command.list_commands(context):
            sub = command.get_command(context, sub_name)
            assert sub is not None, sub_name
            yield from _commands(sub, context, sub_name)


def _help_texts(command: Any, context: Any) -> list[str]:
    """What ``--help`` prints of a command: its help, short help, epilog and options' help,
    unwrapped (rich's boxes can split "seed" and its number across lines of the rendering)."""
    texts = [command.help or "", command.short_help or "", command.epilog or ""]
    for param in command.get_params(context):
        texts.append(getattr(param, "help", None) or "")
    return texts


@pytest.fixture(scope="module")
def cli() -> Any:
    register_plugins(cli_app)
    return get_command(cli_app)


def test_no_command_help_cites_seed_files(cli: Any) -> None:
    found = []
    paths = []
    for path, command, context in _commands(cli, None, "certbench"):
        paths.append(path)
        texts = _help_texts(command, context)
        found += [(path, text) for text in texts if SEED_JARGON.search(text)]
    assert found == []
    # the walk reached the plug-in commands too, not only the core's
    assert {"certbench certify", "certbench robust-accuracy", "certbench anchors build"} <= set(
        paths
    )
    assert "certbench submit" in paths and "certbench fourier-heatmap" in paths


@pytest.mark.parametrize("args", [["--help"], ["robust-accuracy", "--help"], ["anchors", "--help"]])
def test_rendered_help_names_the_papers(cli: Any, args: list[str]) -> None:
    """The rendered help (as a terminal shows it) carries the paper's name where a seed was."""
    shown = CliRunner().invoke(cli_app, args, terminal_width=400)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.replace("│", " ").split())
    assert not SEED_JARGON.search(text), text
    if args[0] != "--help":
        assert "Muthukumar, Pal, Sulam & Vidal 2025" in text


def test_fourier_protocol_help_names_sun_et_al(cli: Any) -> None:
    walked = _commands(cli, None, "certbench")
    command = next(c for path, c, _ in walked if path.endswith("fourier-heatmap"))
    protocol = next(p for p in command.params if p.name == "protocol")
    assert "Sun et al." in (getattr(protocol, "help", "") or "")
    assert "ECCV 2022" in (getattr(protocol, "help", "") or "")


def test_openapi_schema_cites_no_seed_files(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, environment="test")
    schema = json.dumps(create_app(settings).openapi(), ensure_ascii=False)
    assert '"paths"' in schema and "/api/v1/submissions" in schema
    assert SEED_JARGON.findall(schema) == []


def test_web_templates_cite_no_seed_files() -> None:
    pages = sorted(TEMPLATES.rglob("*.html"))
    assert len(pages) > 10 and any(p.parent.name == "stages" for p in pages)
    found = [(p.name, m.group()) for p in pages for m in SEED_JARGON.finditer(p.read_text())]
    assert found == []


def test_leaderboard_labels_cite_no_seed_files() -> None:
    """Column headers and their help (the header's tooltip, the REST field's meaning)."""
    specs = [spec for stage in all_stages() for spec in stage.all_metric_specs()]
    assert specs
    texts = [(spec.key, text) for spec in specs for text in (spec.label, spec.help)]
    found = [(key, text) for key, text in texts if SEED_JARGON.search(text)]
    assert found == []
