"""The guide's page "Submitting your architecture" lists exactly the keyword arguments the
allow-list takes (``certbench.nets.library_kwargs.ALLOWED_KWARGS``), and the refused examples it
names are refused."""

from __future__ import annotations

import re

from certbench.nets.library_kwargs import ALLOWED_KWARGS, refused_key
from tests.support.doc_blocks import ROOT

PAGE = ROOT / "docs" / "researchers" / "architectures.md"


def test_the_pages_table_is_the_allow_list():
    rows = re.findall(r"^\| `([a-z_]+)` \|", PAGE.read_text(encoding="utf-8"), re.M)
    assert sorted(rows) == sorted(ALLOWED_KWARGS)


def test_the_keys_the_page_says_are_refused_are_refused():
    text = PAGE.read_text(encoding="utf-8")
    named = re.search(r"any key that names something to load: (.*?)\(a key", text, re.S)
    assert named is not None
    keys = re.findall(r"`([a-z_]+)`", named.group(1))
    assert len(keys) >= 8 and all(refused_key(key) is not None for key in keys)
