"""The architecture, checked: layers (import-linter's contracts in pyproject.toml), no import
circle anywhere, packages that are only reached through their public face, and a ``certbench/``
whose tree shows its concepts.

The import graph is grimp's (import-linter's own graph library), built once for the module;
imports inside functions and under ``TYPE_CHECKING`` count, since a circle through them is still
a circle a reader has to untangle."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.support import timing

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("certbench", "models", "generators", "migrations", "api", "workers")
TOP_LEVEL_FILES = {"__init__.py", "errors.py", "py.typed"}
"""What ``certbench/`` holds besides its packages: the version, the one exception hierarchy every
package raises from, and the PEP 561 marker."""


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*LAYERS, cache_dir=None)


def _packages() -> list[str]:
    return sorted(p.name for p in (ROOT / "certbench").iterdir() if (p / "__init__.py").exists())


def test_the_import_contracts_hold():
    """``lint-imports`` with the contracts of pyproject.toml: api | workers above migrations,
    models and generators above certbench; certbench imports no service layer; the API and the
    workers never import each other; inside certbench, cli > client > training > the papers'
    systems > stats > smoothing | data > nets."""
    run = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, timeout=timing.seconds(300),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_anywhere(graph):
    assert _circles(graph) == []


def test_the_circle_finder_finds_a_circle(tmp_path, monkeypatch):
    """The check above can fail: two modules importing each other (one inside a function, as
    the five circles this replaced did) are one circle."""
    pkg = tmp_path / "circular_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circular_probe import b\n")
    (pkg / "b.py").write_text("def f():\n    from circular_probe import a\n    return a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _circles(grimp.build_graph("circular_probe", cache_dir=None)) == [
        ["circular_probe.a", "circular_probe.b"]
    ]


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "certbench" and len(parts) > 1 else None


def test_other_packages_import_a_certbench_package_through_its_face(graph):
    """``from certbench.pd import PDThreat``, never ``from certbench.pd.threat import ...``,
    outside ``certbench.pd`` (tests may reach inside: they test the internals)."""
    faces = {f"certbench.{name}" for name in _packages()}
    reaching = []
    for importer in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(importer):
            home = _package_of(imported)
            if home in faces and imported != home and _package_of(importer) != home:
                reaching.append(f"{importer} -> {imported}")
    assert reaching == []


def test_certbench_top_level_holds_only_packages_and_the_shared_modules():
    loose = {p.name for p in (ROOT / "certbench").iterdir() if p.is_file()}
    assert loose == TOP_LEVEL_FILES
    assert set(_packages()) >= {"smoothing", "stats", "data", "nets", "pd", "fourier", "lens"}


@pytest.mark.parametrize("name", _packages())
def test_every_package_states_its_role_and_its_face_resolves(name):
    """Each ``__init__`` has a docstring saying what the package is; every name of its
    ``__all__`` is importable from it (the face is real, not a list)."""
    path = ROOT / "certbench" / name / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc and len(doc.split()) >= 12, f"certbench.{name} needs a docstring stating its role"
    module = importlib.import_module(f"certbench.{name}")
    face = getattr(module, "__all__", None)
    if face is None:
        assert name == "training" or not any(
            isinstance(node, ast.ImportFrom) for node in tree.body
        ), f"certbench.{name} re-exports names but has no __all__"
        return
    assert sorted(face) == sorted(set(face)), f"certbench.{name}.__all__ repeats a name"
    missing = [n for n in face if not hasattr(module, n)]
    assert missing == []


def _models_packages() -> list[str]:
    return sorted(p.name for p in (ROOT / "models").iterdir() if (p / "__init__.py").exists())


def test_stages_are_subpackages_not_file_name_prefixes():
    """A stage is a subpackage of ``models.stages`` (``certification/stage.py`` beside its keys,
    results and intervals), never ``certification_keys.py``-style prefixes: each of its modules
    lists its modules, as every package here does."""
    stages = ROOT / "models" / "stages"
    for sub in sorted(p.parent for p in stages.glob("*/__init__.py")):
        assert (sub / "stage.py").exists(), f"{sub.name} has no stage module"
        doc = ast.get_docstring(ast.parse((sub / "__init__.py").read_text(encoding="utf-8")))
        listed = [p.stem for p in sub.glob("*.py") if p.stem != "__init__"]
        unlisted = [m for m in listed if f"models.stages.{sub.name}.{m}" not in (doc or "")]
        assert unlisted == [], f"models/stages/{sub.name}/__init__.py does not list {unlisted}"
    prefixes = {p.stem.split("_")[0] for p in stages.glob("[!_]*_*.py")}
    assert prefixes <= {"shard"}, f"file-name prefixes in models/stages: {sorted(prefixes)}"


#: A stage module holds its science and its figures; the plumbing is the contract's
#: (``models.stages.shard_files``, ``models.stages.base``), the provenance, protocol and figure
#: tables are modules beside it.
STAGE_MODULE_LINES = 300


def test_every_stage_module_stays_within_its_science():
    stages = ROOT / "models" / "stages"
    lengths = {
        p.parent.name: len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted(stages.glob("*/stage.py"))
    }
    assert len(lengths) >= 5, lengths
    over = {name: n for name, n in lengths.items() if n > STAGE_MODULE_LINES}
    assert over == {}, f"stage modules over {STAGE_MODULE_LINES} lines: {over}"


def test_models_top_level_holds_only_its_packages():
    """``models/`` is packages by concept (runs, boards, catalog, stages, submissions,
    benchmarks, db, core): no loose module whose file name carries the concept."""
    loose = {p.name for p in (ROOT / "models").iterdir() if p.suffix == ".py"}
    assert loose == {"__init__.py"}
    layered = _models_layers()
    assert set(_models_packages()) == set(layered), "every models package sits on one floor"


def _models_layers() -> list[str]:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract.get("containers") == ["models"]:
            return [name.strip() for layer in contract["layers"] for name in layer.split("|")]
    raise AssertionError("pyproject.toml has no layers contract for the models packages")


@pytest.mark.parametrize("name", _models_packages())
def test_every_models_package_states_its_role_and_lists_its_modules(name):
    """Each ``models`` package's docstring says what it is and names every one of its public
    modules (``~models.<package>.<module>`` or ``models.<package>.<module>``), so the docstring
    a maintainer reads first is the package's true table of contents."""
    folder = ROOT / "models" / name
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
    assert doc and len(doc.split()) >= 12, f"models.{name} needs a docstring stating its role"
    modules = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    modules += sorted(p.parent.name for p in folder.glob("*/__init__.py"))
    unlisted = [m for m in modules if f"models.{name}.{m}" not in doc]
    assert unlisted == [], f"models/{name}/__init__.py does not list {unlisted}"


def test_no_models_package_reaches_into_another_packages_private_module(graph):
    """``models.<package>._helper`` is ``models.<package>``'s own: other packages use its public
    modules."""
    reaching = []
    for importer in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(importer):
            parts = imported.split(".")
            if parts[0] != "models" or len(parts) < 3 or not parts[2].startswith("_"):
                continue
            if importer.split(".")[:2] != parts[:2]:
                reaching.append(f"{importer} -> {imported}")
    assert reaching == []
