"""The ``certbench`` command.

The core package owns only the science commands (certify, metrics). Generators, the API server
and the workers live above ``certbench/`` in the layering, so they plug their own sub-commands in
through the ``certbench.commands`` entry-point group: each entry point names a callable
``register(app: typer.Typer) -> None``. The core never imports them by name.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

PLUGIN_GROUP = "certbench.commands"

app = typer.Typer(
    name="certbench",
    help="Certified-robustness benchmarks: certify models, build datasets, run the leaderboard.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def register_plugins(target: typer.Typer) -> None:
    """Attach the sub-commands that installed packages declare under PLUGIN_GROUP."""
    for entry in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            register = entry.load()
        except ImportError as err:
            raise RuntimeError(
                f"certbench plugin {entry.name!r} ({entry.value}) cannot be imported: {err}. "
                "Reinstall the project with `uv sync`."
            ) from err
        register(target)


def main() -> None:
    """Console-script entry point."""
    register_plugins(app)
    app()
