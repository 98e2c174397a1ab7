"""The consoles the commands print to: as rich makes them in a terminal; piped or redirected,
plain (issue 34 §5: piped, rich assumed 80 columns and cut every label it could not fit,
``results`` printed "r=0.…" and "abst…", ``compare`` labelled every radius row
"certified_acc…", so rows could not be told apart).

Not a terminal, a console has no width limit (a table is as wide as its full labels, and a line
is never wrapped), tables print without box lines (columns separated by spaces, the header line
first) under their title on a line of its own (rich wraps a title to its table's width), and
rich adds no colour or style codes (its own rule for files and pipes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

PIPED_WIDTH = 1_000_000
"""The width of a console that is not a terminal: wider than any table or line it prints."""


def make_console(**options: Any) -> Console:
    """``rich.console.Console(**options)``, plain when its file is not a terminal (module
    docstring). A ``width`` given in ``options`` is kept."""
    from rich.console import Console

    console = Console(**options)
    if console.is_terminal or "width" in options:
        return console
    return _piped_class()(width=PIPED_WIDTH, **options)


def _piped_class() -> type[Console]:
    from rich.console import Console
    from rich.table import Table

    class PipedConsole(Console):
        """A console for a pipe or a file: tables without box lines."""

        def print(self, *objects: Any, **kwargs: Any) -> None:
            shown: list[Any] = []
            for item in objects:
                if isinstance(item, Table):
                    if item.title is not None:
                        shown.append(item.title)
                        item.title = None
                    item.box = None
                    item.show_edge = False
                    item.pad_edge = False
                shown.append(item)
            super().print(*shown, **kwargs)

    return PipedConsole
