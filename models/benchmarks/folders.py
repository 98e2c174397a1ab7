"""A definition's data ``folder``: which values are accepted, and the path it names here.

A ``folder`` (of a test set or a stage block) is where a worker reads images and what a page's
"data not available here" hint tells the operator to fill (``certbench datasets demo --folder
NAME``). An attack campaign (issue 35 §3) loaded a definition through the admin API with ``folder:
../../../etc``, and the public hint then printed that path as a command to run. So:

- every definition, wherever it comes from, names a folder as plain path segments: letters,
  digits, ``_``, ``.``, ``-`` (not leading a segment), no ``.``/``..`` segment, no empty segment,
  no other character (:func:`folder_problem`, applied by the definition schema);
- a *relative* folder lies under ``CERTBENCH_DATASETS_DIR``, and stays there on disk: a path that
  resolves (through symbolic links) outside it is refused where it is resolved
  (:func:`locate_folder`: workers, the availability check, the dataset pages);
- an *absolute* folder is a path of the operator's machine: accepted from a definition file the
  operator loads there (``certbench benchmarks load``, the packaged definitions), refused from a
  definition sent over the network (``PUT /api/v1/admin/benchmarks``:
  :func:`network_folder_problems`), whose author must stay inside the data directory.

Messages and hints name a folder only once it passed these checks, never the machine's paths.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MAX_FOLDER_LENGTH = 1024
SEGMENT = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,254}")
"""One path segment: what dataset folders are named (``uoft-cs/cifar10``, ``cifar-10-c``,
``demo-digits``), nothing a shell or a page would read as more."""


def folder_problem(folder: str) -> str | None:
    """Why ``folder`` is no acceptable data folder (None: it is). Never repeats the value: the
    caller names the field, and the value may be the hostile part."""
    if not folder:
        return "is empty; leave `folder` out to read `repo`"
    if len(folder) > MAX_FOLDER_LENGTH:
        return f"is longer than {MAX_FOLDER_LENGTH} characters"
    segments = folder.removeprefix("/").split("/")
    if any(segment in (".", "..") for segment in segments):
        return "has a `.` or `..` segment: a folder must not leave CERTBENCH_DATASETS_DIR"
    if any(not segment for segment in segments):
        return "has an empty segment (`//` or a trailing `/`)"
    if not all(SEGMENT.fullmatch(segment) for segment in segments):
        return (
            "holds a character other than letters, digits, `_`, `.` and `-` (or a segment "
            "starting with `-`)"
        )
    return None


def check_folder(folder: str) -> str:
    """``folder`` if acceptable (:func:`folder_problem`), else ValueError saying why (the
    definition schema's validator: pydantic names the field)."""
    problem = folder_problem(folder)
    if problem is not None:
        raise ValueError(f"data folder {problem}")
    return folder


def is_absolute(folder: str) -> bool:
    return PurePosixPath(folder).is_absolute()


@dataclass(frozen=True)
class LocatedFolder:
    """The path a definition's ``folder`` names on this machine; ``refused`` says why it must
    not be read (None: it may), in words a page may show."""

    path: Path | None
    """None when the folder is no acceptable path at all (nothing is located)."""
    refused: str | None = None


def locate_folder(folder: str, datasets_dir: Path) -> LocatedFolder:
    """Where ``folder`` is read on this machine: an absolute folder as it is, a relative one
    under ``datasets_dir``, refused when it is no acceptable folder (a row stored before these
    checks) or resolves outside ``datasets_dir`` through a symbolic link."""
    problem = folder_problem(folder)
    if problem is not None:
        return LocatedFolder(None, f"the definition's data folder {problem}")
    if is_absolute(folder):
        return LocatedFolder(Path(folder))
    path = datasets_dir / folder
    if not _inside(path, datasets_dir):
        return LocatedFolder(
            path,
            f"folder {folder!r} leads out of CERTBENCH_DATASETS_DIR through a symbolic link: "
            "put the data itself there",
        )
    return LocatedFolder(path)


def _inside(path: Path, root: Path) -> bool:
    """Whether ``path`` resolves (following every symbolic link that exists) inside ``root``."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def network_folder_problems(folders: Iterable[tuple[str, str]], datasets_dir: Path) -> list[str]:
    """What is wrong with each ``(where, folder)`` of a definition sent over the network
    (``where`` names the field, e.g. ``test_sets[0].folder``): an absolute folder, or one that
    leads out of ``datasets_dir``. Empty: every folder stays in the data directory."""
    problems = []
    for where, folder in folders:
        problem = folder_problem(folder)
        if problem is not None:
            problems.append(f"{where}: the data folder {problem}")
            continue
        if is_absolute(folder):
            problems.append(
                f"{where}: an absolute path is not accepted over the API; give the folder "
                "relative to CERTBENCH_DATASETS_DIR (or load the file with `certbench "
                "benchmarks load` on the service machine)"
            )
            continue
        refused = locate_folder(folder, datasets_dir).refused
        if refused is not None:
            problems.append(f"{where}: {refused}")
    return problems
