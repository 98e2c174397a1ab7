"""certbench: certified-robustness benchmarks and leaderboard.

The science is in packages by concept (``certbench.smoothing``, ``certbench.pd``, ...), each with
a public face: the names its ``__init__`` imports under ``TYPE_CHECKING``, loaded on first use by
:func:`public_face` so that importing a package costs only what is used (``certbench --help``
and the API's import never load torch for a name that does not need it).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import lazy_loader

try:
    __version__ = version("certbench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"


def public_face(
    package: str, init_file: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` of a package whose face is the ``from package.module
    import name`` statements under ``if TYPE_CHECKING:`` in its ``__init__`` (PEP 562, through
    ``lazy_loader``). One list of names serves the type checkers, the import graph
    (``tests/test_architecture.py``) and the lazy loading."""
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"))
    attrs: dict[str, list[str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom):
                continue
            source = statement.module or ""  # None for ``from . import x``
            if source.startswith(package + "."):
                module = source[len(package) + 1 :]
                attrs.setdefault(module, []).extend(alias.name for alias in statement.names)
    if not attrs:
        raise ImportError(f"{package}: no face: import its names under `if TYPE_CHECKING:`")
    return lazy_loader.attach(package, submod_attrs=attrs)
