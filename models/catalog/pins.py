"""``certbench benchmarks pin``: write the bytes of a published data set into its definition.

After ``certbench publish out/cifar10-f --repo ORG/cifar10-f`` (which prints the commit the Hub
now holds), an operator pins the definition to exactly those bytes: each test set gets
``provenance.sha256``, the content hash of its config in the local folder that was published
(``certbench.data.provenance.config_sha256``: for a single shard, the value its ``checksum.json``
records and the Hub's LFS object id), and ``provenance.hub_commit`` when given; ``version`` goes
up by one, so a service that stored the old version replaces it on the next load. Workers then
check every byte they read against the pin (``models.stages.inputs.data_hashes``).

Nothing is written unless every test set's config is in the folder and every hash agrees with
the folder's own ``checksum.json``: a half-pinned definition would fail runs on the sets left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from certbench.errors import DataSourceError
from models.catalog.benchmarks import parse_definition
from models.core.errors import BenchmarkDefinitionError

CHECKSUM_FILE = "checksum.json"
"""Written next to each config's shard by the generators (``generators.hub``)."""

YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class PinnedDefinition:
    """The pinned definition: its file text, new version and each test set's content hash."""

    text: str
    version: int
    pins: dict[str, str]


def pin_definition(
    definition: Path, data: Path, *, hub_commit: str | None = None, out: Path | None = None
) -> PinnedDefinition:
    """Pin every test set of ``definition`` to its config's bytes in the folder ``data``.

    ``out`` (default: ``definition``) only chooses the output format (YAML for ``.yaml``/
    ``.yml``, else JSON); the caller writes the text.

    Raises:
        BenchmarkDefinitionError: the definition is unreadable or invalid, a test set's config
            is missing from ``data`` or disagrees with its ``checksum.json`` (nothing is pinned
            then), or the pinned definition would not load (e.g. a ``revision`` that contradicts
            ``hub_commit``).
    """
    raw = _read(definition)
    parse_definition(json.dumps(raw), source=str(definition))
    pins = content_hashes(raw["test_sets"], data)
    for test_set in raw["test_sets"]:
        pin = dict(test_set.get("provenance") or {})
        pin["sha256"] = pins[test_set["name"]]
        if hub_commit is not None:
            pin["hub_commit"] = hub_commit
        test_set["provenance"] = pin
    raw["version"] = int(raw["version"]) + 1
    text = _render(raw, out or definition)
    parse_definition(text, source=f"{definition} pinned")
    return PinnedDefinition(text=text, version=raw["version"], pins=pins)


def content_hashes(test_sets: list[dict[str, Any]], data: Path) -> dict[str, str]:
    """Test set name → the SHA-256 of its config's split in ``data``.

    Raises BenchmarkDefinitionError listing every test set whose config is missing or whose
    bytes contradict the folder's ``checksum.json``.
    """
    from certbench.data import config_files, config_sha256

    pins: dict[str, str] = {}
    problems: list[str] = []
    for test_set in test_sets:
        config, split = test_set.get("config"), test_set.get("split", "test")
        where = f"test set {test_set['name']!r} (config {config!r}, split {split!r})"
        try:
            files = config_files(data, config, split)
            digest = config_sha256(data, config, split)
        except DataSourceError as err:
            problems.append(f"{where}: {err}")
            continue
        recorded = _recorded_sha256(files)
        if recorded is not None and recorded != digest:
            problems.append(
                f"{where}: the shard hashes to {digest} but its {CHECKSUM_FILE} records "
                f"{recorded}; the folder changed after it was generated"
            )
            continue
        pins[test_set["name"]] = digest
    if problems:
        shown = "; ".join(problems[:5]) + (
            f"; and {len(problems) - 5} more" if problems[5:] else ""
        )
        raise BenchmarkDefinitionError(
            f"cannot pin {len(problems)} of {len(test_sets)} test set(s) to {str(data)!r}, so "
            f"nothing was written: {shown}. Pass --data the folder that was published (the "
            "generator's output, or `hf download REPO --repo-type dataset --revision COMMIT "
            "--local-dir DIR`)"
        )
    return pins


def _recorded_sha256(files: list[Path]) -> str | None:
    """The SHA-256 a single shard's ``checksum.json`` records (None without one)."""
    if len(files) != 1:
        return None
    marker = files[0].parent / CHECKSUM_FILE
    if not marker.is_file():
        return None
    try:
        record = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BenchmarkDefinitionError(
            f"{CHECKSUM_FILE} next to {files[0].name} is unreadable: {err}"
        ) from err
    value = record.get("sha256") if isinstance(record, dict) else None
    return value if isinstance(value, str) else None


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise BenchmarkDefinitionError(f"benchmark definition {str(path)!r}: {err}") from err
    except yaml.YAMLError as err:
        raise BenchmarkDefinitionError(f"{path}: not valid JSON/YAML: {err}") from err
    if not isinstance(data, dict) or not isinstance(data.get("test_sets"), list):
        raise BenchmarkDefinitionError(f"{path}: not a benchmark definition (no `test_sets` list)")
    return data


def _render(raw: dict[str, Any], target: Path) -> str:
    """The definition as its file format writes it (the packaged JSON files' indentation)."""
    if target.suffix.lower() in YAML_SUFFIXES:
        return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)
    return json.dumps(raw, indent=1, ensure_ascii=False) + "\n"
