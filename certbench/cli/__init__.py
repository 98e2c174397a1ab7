"""The ``certbench`` command: one module per command group, science imported lazily.

:mod:`~certbench.cli.app` builds the Typer app, its certify/predict/metrics/robust-accuracy
commands and the plugin loading (entry points ``certbench.commands``: the groups of this package
and those of the service layers above certbench); every other module is one group (``datasets``,
``fourier``, ``lens``, ``pd``, ``weather``, ``intervals``, ``train``, ``client``, ``zoo``). Command
bodies import the science inside the function so ``certbench --help`` stays fast.

Top floor of certbench: it may use every package. Public face: ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.cli.app import app, console, lazy_console, main, user_errors
    from certbench.cli.client import mount_results, results_app

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
