"""Dataset names the commands accept: the short aliases and the Hub id pattern.

Standard library only, so a command-line option can check a ``--dataset`` value while parsing
(before torch or ``datasets`` load): a misspelt name such as ``cifr10`` is refused at once with a
suggestion, instead of being sent to the Hub and failing after the Hub client's retries.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path

from certbench.errors import DataSourceError

HUB_ALIASES: Mapping[str, str] = {"cifar10": "uoft-cs/cifar10", "cifar100": "uoft-cs/cifar100"}
"""Short names accepted as ``source`` and the Hub dataset each one stands for."""

#: A Hub dataset id: ``org/name``. A bare name is accepted only as an alias of HUB_ALIASES (the
#: Hub's namespace-less legacy ids redirect to ``org/name`` ones).
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def alias_of(repo: str) -> str:
    """The short name users type for a Hub repo (``cifar10`` for ``uoft-cs/cifar10``), else the
    repo id itself: what commands printed as advice should name."""
    return next((alias for alias, hub_id in HUB_ALIASES.items() if hub_id == repo), repo)


def is_hub_id(source: str) -> bool:
    """Whether ``source`` has the shape of a Hub dataset id (``org/name``)."""
    return HUB_ID.fullmatch(source) is not None and not source.startswith(".")


def check_name(source: str) -> None:
    """Refuse a bare name that is neither an alias nor an existing path.

    Raises:
        DataSourceError: "unknown dataset 'cifr10'; did you mean cifar10? ...".
    """
    if source in HUB_ALIASES or "/" in source or "\\" in source:
        return
    if Path(source).expanduser().exists():
        return
    raise DataSourceError(unknown_name_message(source))


def unknown_name_message(name: str) -> str:
    """The error for a bare name that is neither an alias nor an existing folder."""
    close = difflib.get_close_matches(name.lower(), list(HUB_ALIASES), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    return (
        f"unknown dataset {name!r}; {hint}A dataset is one of the names "
        f"{', '.join(HUB_ALIASES)}, a Hub id (org/name) or an existing local folder"
    )
