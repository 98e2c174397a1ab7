"""References a reader can follow: papers by name, module paths that import.

Two checks over the tracked tree (``git ls-files``):

- No text names the project's internal numbering of its source papers ("seed" followed by a
  three-digit number): a reader outside the project cannot look that up, so the code and docs
  cite authors, year and venue or arXiv link instead.
- Every dotted module path (``models.stages.base.Stage``, ``certbench.pd.threat``, ...) in a
  docstring or comment of the project's Python files, and anywhere in the Markdown docs,
  resolves: its longest importable module prefix exists and the remaining parts are attributes
  (class attributes and declared fields included). A path that no longer imports, as after a
  module moves, sends a reader nowhere.

Modules are imported once per path prefix (cached), so the test runs in seconds.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import subprocess
import tokenize
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.support.doc_blocks import ROOT

#: Built from parts so that this file does not hold the text it looks for.
SEED_WORD = "se" + "ed"
SEED_NUMBERING = re.compile(rf"\b{SEED_WORD}s?[\s#]+00\d", re.IGNORECASE)
#: Tracked files never read: the lock file holds package hashes, not prose.
NOT_SCANNED = frozenset({"uv.lock"})

#: The project's top-level packages: a dotted path starting with one of them is a reference.
ROOTS = ("certbench", "models", "api", "workers", "generators", "migrations", "tests")
DOTTED_PATH = re.compile(rf"(?<![\w./\-@])((?:{'|'.join(ROOTS)})(?:\.[A-Za-z_]\w*)+)(?![\w\-/])")
IMPORT_LINE = re.compile(r"\s*(?:from|import)\s")
#: A last part that makes the match a file name (``models.py``) or a host name
#: (``api.example.org``), not a module path.
NOT_MODULE_ENDINGS = frozenset(
    {"py", "md", "toml", "yml", "yaml", "html", "j2", "json", "txt", "ini", "js", "css"}
    | {"org", "com", "net", "io", "dev", "edu"}
)


@dataclass(frozen=True)
class Reference:
    """One dotted path as written: where, and the path."""

    where: str
    line: int
    path: str


def tracked_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and name not in NOT_SCANNED]


def read_text(name: str) -> str | None:
    """A tracked file's text, or None for a binary file (an image, a weights file)."""
    raw = (ROOT / name).read_bytes() if (ROOT / name).is_file() else b""
    if b"\0" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def seed_numbering(names: list[str]) -> list[tuple[str, int, str]]:
    """(file, line, text) of every occurrence of the internal numbering."""
    found = []
    for name in names:
        text = read_text(name)
        if text is None:
            continue
        for match in SEED_NUMBERING.finditer(text):
            found.append((name, text[: match.start()].count("\n") + 1, match.group()))
    return found


@cache
def parse(source: str) -> ast.Module:
    return ast.parse(source)


def python_prose(source: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of each comment and string statement (docstrings, ``#:`` notes and the
    bare strings that document a constant) of a Python source: what a reader reads as prose.

    Sources with no dotted path outside import lines are skipped, and only those with one on a
    line holding a ``#`` are tokenized (the pure-Python tokenizer is most of the scan's time)."""
    lines = [line for line in source.splitlines() if not IMPORT_LINE.match(line)]
    candidates = [line for line in lines if DOTTED_PATH.search(line)]
    if not candidates:
        return
    if any("#" in line for line in candidates):
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string
    for node in statements(parse(source).body):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            yield node.lineno, node.value.value


def statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement, nested ones included; expressions are not entered (a docstring is a
    statement of its own), which keeps the walk a fraction of ``ast.walk``."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody"):
            yield from statements(getattr(node, field, []))
        for clause in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
            yield from statements(clause.body)


def references_in(where: str, line: int, text: str) -> Iterator[Reference]:
    for match in DOTTED_PATH.finditer(text):
        if match.group(1).rsplit(".", 1)[1] in NOT_MODULE_ENDINGS:
            continue
        yield Reference(where, line + text[: match.start()].count("\n"), match.group(1))


def prose_references(names: list[str]) -> Iterator[Reference]:
    """The dotted paths of Python prose and of every Markdown file (code blocks included)."""
    for name in names:
        if name.endswith(".py"):
            source = read_text(name) or ""
            for line, text in python_prose(source):
                yield from references_in(name, line, text)
        elif name.endswith(".md"):
            yield from references_in(name, 1, read_text(name) or "")


def defined_names(names: list[str]) -> frozenset[str]:
    """Dotted names the project gives to things that are not modules: entry-point groups
    (``pyproject.toml``) and the string constants of its code (Celery task and queue names such
    as ``TASK_VALIDATE = "certbench.validate"``). Tests are left out: a test may hold a bad path
    on purpose."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found = set(pyproject["project"].get("entry-points", {}))
    for name in names:
        if not name.endswith(".py") or name.startswith("tests/"):
            continue
        source = read_text(name) or ""
        if not re.search(r"=\s*[\"'](?:" + "|".join(ROOTS) + r")\.", source):
            continue
        for node in ast.walk(parse(source)):
            if (
                isinstance(node, ast.Assign | ast.AnnAssign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
                and DOTTED_PATH.fullmatch(node.value.value)
            ):
                found.add(node.value.value)
    return frozenset(found)


@cache
def module_file(dotted: str) -> Path | None:
    """The source of a module of the repository (``__init__.py`` for a package), found on disk:
    nothing is imported, so the static check costs no import of a heavy package."""
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@cache
def module_tree(dotted: str) -> ast.Module | None:
    source = module_file(dotted)
    return None if source is None else parse(source.read_text(encoding="utf-8"))


def _top_level(body: list[ast.stmt]) -> Iterator[tuple[str, ast.AST]]:
    """(name, defining node) of every name a module or class body binds, looking into ``if``,
    ``try`` and ``with`` blocks (a lazy public face imports its names under TYPE_CHECKING)."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name, node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield target.id, node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            yield node.target.id, node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                yield (alias.asname or alias.name).split(".")[0], node
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody"):
                yield from _top_level(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from _top_level(handler.body)


def statically_resolves(module: str, attributes: list[str]) -> bool:
    """True when the module's source visibly defines the attribute chain (a name of the module,
    then at most a member of a class defined there). False only means "not seen": the caller
    then imports the module to be sure (names made at run time, inherited members)."""
    tree = module_tree(module)
    if tree is None:
        return False
    bound = dict(_top_level(tree.body))
    node = bound.get(attributes[0])
    if node is None:
        return False
    if len(attributes) == 1:
        return True
    if isinstance(node, ast.ClassDef) and len(attributes) == 2:
        return attributes[1] in dict(_top_level(node.body))
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        name = next(a.name for a in node.names if (a.asname or a.name) == attributes[0])
        return resolves(".".join([node.module, name, *attributes[1:]]))
    return False


def _declared(owner: object, name: str) -> bool:
    """Whether a class declares ``name`` without a class attribute: a dataclass or pydantic
    field, or an annotation anywhere in its MRO."""
    if not isinstance(owner, type):
        return False
    if name in getattr(owner, "__dataclass_fields__", {}) or name in getattr(
        owner, "model_fields", {}
    ):
        return True
    return any(name in vars(klass).get("__annotations__", {}) for klass in owner.__mro__)


def imports_and_resolves(module: str, attributes: list[str]) -> bool:
    """The import-time answer: the getattr chain from the imported module."""
    owner: object = importlib.import_module(module)
    for position, name in enumerate(attributes):
        if hasattr(owner, name):
            owner = getattr(owner, name)
        else:
            return position == len(attributes) - 1 and _declared(owner, name)
    return True


def module_prefix(parts: list[str]) -> int:
    """How many leading parts name a module of the repository."""
    found = 0
    for end in range(1, len(parts) + 1):
        source = module_file(".".join(parts[:end]))
        if source is None:
            break
        found = end
        if source.name != "__init__.py":
            break
    return found


@cache
def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute chain of its longest module prefix."""
    parts = dotted.split(".")
    end = module_prefix(parts)
    if end == 0:
        return False
    module, attributes = ".".join(parts[:end]), parts[end:]
    if not attributes or statically_resolves(module, attributes):
        return True
    return imports_and_resolves(module, attributes)


def test_no_file_uses_the_internal_paper_numbering() -> None:
    names = tracked_files()
    assert len(names) > 100 and "README.md" in names
    assert seed_numbering(names) == []


def test_the_numbering_check_sees_every_spelling() -> None:
    """Any case, a possessive, a plural, a line break or a comment marker between the words."""
    for text in (" 000", "S 001's", "\n    003", "\n# 004", " 002."):
        assert SEED_NUMBERING.search(SEED_WORD + text), text
    assert not SEED_NUMBERING.search(SEED_WORD + " 42") and not SEED_NUMBERING.search("seeded 001")


def test_every_dotted_module_path_in_docstrings_comments_and_docs_resolves() -> None:
    names = tracked_files()
    references = list(prose_references(names))
    assert len(references) > 100, "the scan found the docs' and docstrings' module paths"
    other_names = defined_names(names)
    assert {"certbench.commands", "certbench.validate"} <= other_names
    dangling = [r for r in references if r.path not in other_names and not resolves(r.path)]
    assert dangling == []


def test_the_path_check_flags_a_moved_module_and_keeps_real_ones() -> None:
    """The checker can fail: a module that moved away, or a name its module lacks, does not
    resolve; a package, a module, a lazily exported name, a class member, an inherited method and
    a pydantic field do, read from the source or, failing that, imported."""
    assert not resolves("models.completion")
    assert not resolves("models.db.entities.NoSuchEntity")
    assert not imports_and_resolves("models.core.settings", ["Settings", "no_such_setting"])
    for real in (
        "models.runs",
        "models.runs.results",
        "certbench.fourier.Heatmap",
        "models.core.settings.Settings.model_dump",
        "models.core.settings.Settings.data_dir",
    ):
        assert resolves(real), real
    assert imports_and_resolves("models.core.settings", ["Settings", "data_dir"])
    assert statically_resolves("certbench.fourier", ["Heatmap"])
    text = "see `models.completion`, models.py, api.example.org and https://x/models.gone"
    assert [r.path for r in references_in("x.md", 1, text)] == ["models.completion"]


def test_prose_is_read_from_comments_and_strings_only() -> None:
    source = '"""Module ``models.a``."""\nx = models.b  # models.c\n#: models.d\n'
    texts = [text for _, text in python_prose(source)]
    paths = [r.path for text in texts for r in references_in("x.py", 1, text)]
    assert sorted(paths) == ["models.a", "models.c", "models.d"]
