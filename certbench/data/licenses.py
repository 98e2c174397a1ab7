"""Licences a submitter may publish model weights under: a short list of SPDX identifiers.

The model zoo serves weights only under a licence the submitter chose, so a researcher who
downloads them knows what they may do with them. The list is closed on purpose: a free-text
licence ("research only, ask me") cannot be checked by anyone, while an SPDX identifier
(https://spdx.org/licenses/) names one published text. It covers the licences model weights are
released under in practice: permissive code licences, Creative Commons for data-like artefacts,
the copyleft family, and public-domain dedications.

Kept in the core package (not the API) so the client can check a licence before it uploads.
"""

from __future__ import annotations

import difflib

#: SPDX identifiers, in their canonical spelling.
WEIGHTS_LICENSES: tuple[str, ...] = (
    "Apache-2.0",
    "MIT",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "ISC",
    "MPL-2.0",
    "GPL-2.0-only",
    "GPL-3.0-only",
    "GPL-3.0-or-later",
    "LGPL-3.0-only",
    "AGPL-3.0-only",
    "CC0-1.0",
    "CC-BY-4.0",
    "CC-BY-SA-4.0",
    "CC-BY-NC-4.0",
    "CC-BY-NC-SA-4.0",
    "CC-BY-ND-4.0",
    "CC-BY-NC-ND-4.0",
    "Unlicense",
    "0BSD",
    "ODC-By-1.0",
    "PDDL-1.0",
)

_BY_FOLDED = {name.casefold(): name for name in WEIGHTS_LICENSES}


class UnknownLicenseError(ValueError):
    """The licence is not one of WEIGHTS_LICENSES; the message names the closest ones."""


def canonical_license(value: str) -> str:
    """The canonical SPDX spelling of ``value`` (matched case-insensitively, surrounding blanks
    ignored). Raises UnknownLicenseError naming the accepted identifiers."""
    found = _BY_FOLDED.get(value.strip().casefold())
    if found is not None:
        return found
    close = difflib.get_close_matches(value.strip(), WEIGHTS_LICENSES, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise UnknownLicenseError(
        f"{value[:64]!r} is not an accepted weights licence; {hint}use an SPDX identifier "
        f"from: {', '.join(WEIGHTS_LICENSES)}"
    )
