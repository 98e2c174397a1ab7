"""Model names cannot impersonate another (issue 27 §4): NFKC-normalised, and refused when they
hold characters that do not show as themselves (bidi overrides, zero-width characters, other
format characters, invisible letters) or a word mixing look-alike scripts."""

from __future__ import annotations

import re

import pytest

from certbench.errors import ManifestError
from certbench.nets import PRINTABLE_PATTERN, clean_text, load_manifest
from tests.certbench.test_manifest_limits import manifest_dict

REFUSED = {
    "bidi override": "ResNet\u202e02-teN",
    "bidi isolate": "\u2067ResNet",
    "zero-width space": "Res\u200bNet",
    "zero-width joiner": "Res\u200dNet",
    "word joiner": "Res\u2060Net",
    "byte-order mark": "\ufeffResNet",
    "soft hyphen": "Res\u00adNet",
    "hangul filler": "ResNet\u3164",
    "private use": "ResNet\ue000",
    "cyrillic e in a latin word": "ResN\u0435t-110",
    "greek omicron in a latin word": "C\u03bfhen",
}
REFUSED_KEY = {value: key for key, value in REFUSED.items()}


@pytest.mark.parametrize("name", REFUSED.values(), ids=REFUSED.keys())
def test_names_that_do_not_show_as_themselves_are_refused(name: str):
    with pytest.raises(ManifestError, match=r"metadata\.name: Value error, (must not|the word)"):
        load_manifest(manifest_dict(metadata={"name": name}))
    # the OpenAPI pattern says the same for every character class it can express
    if "latin word" not in REFUSED_KEY[name]:
        assert re.fullmatch(PRINTABLE_PATTERN, name) is None


def test_names_are_normalised_nfkc():
    loaded = load_manifest(manifest_dict(metadata={"name": "ＲｅｓＮｅｔ\u00a0ﬁve"}))
    assert loaded.metadata.name == "ResNet five"


@pytest.mark.parametrize(
    "name", ["Müller & Vechev σ=0.25", "αβ-CROWN", "Cohen et al. (2019)", "残差网络", "ResNet-110"]
)
def test_ordinary_names_in_any_script_pass_unchanged(name: str):
    assert clean_text(name) == name
    assert load_manifest(manifest_dict(metadata={"name": name})).metadata.name == name


def test_normalisation_cannot_overflow_the_column():
    with pytest.raises(ManifestError, match="once normalised"):
        load_manifest(manifest_dict(metadata={"name": "\ufdfa" * 10}))
