"""The shard plumbing every stage shares: what its files carry, and its shards read back, verified.

A stage's ``run`` writes one records file per shard while the run goes on; its ``merge`` reads
them back once every shard is recorded and writes one merged file per unit. Both carry metadata
(``docs/architecture/stages.md``, "Shard files and merged files"):

- a shard file (``shard_metadata``): the submission, the benchmark, where the shard sits (unit,
  shard index, image range), the stage's protocol fields, the run seed's commitment
  (``seed_commitment``: never the seed, which stays secret until the run ends; commit-reveal,
  ``models.submissions.run_seeds``) and what the data was (``data_hashes``,
  ``models.stages.inputs.data_hashes``);
- a merged file (``ShardSet.merged_metadata``): the submission, the stage's fields, the
  evaluator version and the revealed seed (``models.stages.base.run_seed_metadata``), served only
  once the run has ended.

``read_shards`` reads a stage's shard files in image order and refuses any computed under another
run seed (``check_shard_seed``) or another protocol (metadata other than what the stage expects);
its ``ShardSet`` then gives the one set of data hashes the shards recorded (refusing shards
computed on different bytes), the merged file's metadata and the stored per-unit results.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from models.core.errors import StorageError
from models.stages.base import (
    RecordedShard,
    UnitResult,
    check_shard_seed,
    recorded_data_hashes,
    run_seed_metadata,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from models.stages.base import MergeContext
    from models.stages.work import WorkItem

Reader = Callable[[Path], tuple[Mapping[str, Any], Any]]
"""Reads one shard file: (its metadata, its records in whatever form the stage merges)."""


def shard_metadata(item: WorkItem, hashes: Mapping[str, str], **fields: Any) -> dict[str, Any]:
    """The metadata of a shard file: the submission and benchmark, the stage's ``fields``
    (where the shard sits, its protocol), the run seed's commitment and the data hashes.

    Shard files are written while the run goes on, so they name the seed's commitment, never the
    seed; ``merge`` refuses a shard naming another commitment (``check_shard_seed``).
    """
    return {
        "submission_id": item.submission_id,
        "benchmark": item.benchmark,
        **fields,
        "seed_commitment": item.seed_commitment,
        "data_hashes": dict(hashes),
    }


def json_table(path: Path) -> tuple[dict[str, Any], pa.Table]:
    """A records file whose metadata is JSON under ``certbench`` in the parquet schema (the
    ``certbench`` writers' convention): (its metadata, its table without it). Raises the core's
    RecordsError for a missing or unreadable file."""
    from certbench.smoothing import METADATA_KEY, read_table

    table = read_table(path)
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    return (json.loads(raw) if raw else {}), table.replace_schema_metadata(None)


def write_json_table(table: pa.Table, path: Path, metadata: Mapping[str, Any]) -> Path:
    """Write ``table`` atomically with ``metadata`` as JSON under ``certbench`` (``json_table``
    reads it back)."""
    from certbench.smoothing import METADATA_KEY, write_table_atomic

    text = json.dumps(dict(metadata), sort_keys=True)
    return write_table_atomic(table.replace_schema_metadata({METADATA_KEY: text}), path)


@dataclass(frozen=True)
class ShardSet:
    """Shard files of a stage (or of some of its units) read back and verified, in image order.

    ``parts`` holds each shard's records as its reader returned them, in the order of
    ``shards``; ``metadata`` the metadata of every shard read (also of the other units' after
    ``unit``: what the data hashes are checked over); ``hashes_of`` names those shards in the
    error raised when they were computed on different data.
    """

    item: WorkItem = field(repr=False)
    shards: tuple[RecordedShard, ...]
    metadata: tuple[Mapping[str, Any], ...]
    parts: tuple[Any, ...]
    hashes_of: str

    @property
    def seconds(self) -> float:
        """Compute time the shards recorded, summed."""
        return float(sum(shard.seconds for shard in self.shards))

    def records(self) -> list[Any]:
        """Every shard's records concatenated, in image order (parts read as lists)."""
        return [record for part in self.parts for record in part]

    def unit(self, name: str) -> ShardSet:
        """The shards and records of one unit, its results recording the data hashes of the
        whole set (a stage computed on one set of bytes)."""
        keep = [k for k, shard in enumerate(self.shards) if shard.unit == name]
        return replace(
            self,
            shards=tuple(self.shards[k] for k in keep),
            parts=tuple(self.parts[k] for k in keep),
        )

    def data_hashes(self) -> dict[str, str]:
        """The one ``data_hashes`` the shards recorded: what a result says it was computed on.

        Raises StorageError naming ``hashes_of`` when shards were computed on different bytes.
        """
        found = [metadata.get("data_hashes") for metadata in self.metadata]
        return recorded_data_hashes(found, where=self.hashes_of)

    def merged_metadata(self, context: MergeContext, **fields: Any) -> dict[str, Any]:
        """The metadata of a merged file: the submission, the stage's ``fields``, the evaluator
        version and the revealed run seed (merged files are served once the run has ended)."""
        return {
            "submission_id": self.item.submission_id,
            **fields,
            "evaluator_version": context.evaluator_version,
            **run_seed_metadata(self.item),
        }

    def result(
        self,
        unit: str,
        *,
        summary: dict[str, Any],
        records_path: str,
        count: int,
        protocol: Mapping[str, Any] | None = None,
        seeds: Mapping[str, Any] | None = None,
    ) -> UnitResult:
        """A stored per-unit result of these shards: their compute time, the revealed run seed
        with the stage's other ``seeds``, and the data hashes (checked, ``data_hashes``)."""
        return UnitResult(
            unit=unit,
            summary=summary,
            records_path=records_path,
            count=count,
            seconds=self.seconds,
            protocol=dict(protocol or {}),
            seeds={**run_seed_metadata(self.item), **(seeds or {})},
            data_hashes=self.data_hashes(),
        )


def in_order(
    shards: Mapping[str, Sequence[RecordedShard]], units: Iterable[str] | None = None
) -> list[RecordedShard]:
    """The recorded shards of ``units`` (default: every unit, in the mapping's order), unit after
    unit, each unit's in image order."""
    names = list(shards) if units is None else list(units)
    return [shard for name in names for shard in sorted(shards[name], key=lambda s: s.start)]


def read_shards(
    item: WorkItem,
    shards: Mapping[str, Sequence[RecordedShard]],
    read: Reader,
    *,
    label: str,
    units: Iterable[str] | None = None,
    wrap: tuple[type[Exception], ...] = (),
    expect: Mapping[str, Any] | None = None,
    differs: Callable[[Mapping[str, Any]], str] = lambda found: "under another protocol",
    hashes_of: str | None = None,
) -> ShardSet:
    """Read the shard files of ``units`` (``in_order``) with ``read`` and verify each one.

    Each file is named ``<label> shard '<path>'`` in errors. ``read`` raising one of ``wrap``
    is re-raised as StorageError naming the file; a shard naming another run seed's commitment is
    refused (``check_shard_seed``), and so is one whose metadata differs from ``expect`` (the
    protocol fields its records depend on: a definition changed while the submission ran), with
    StorageError "<shard> was computed <differs(its metadata)>; re-run the submission fresh".
    ``hashes_of`` names the shards when their data hashes differ (default: the stage of the
    submission).
    """
    ordered = in_order(shards, units)
    metadata: list[Mapping[str, Any]] = []
    parts: list[Any] = []
    for shard in ordered:
        where = f"{label} shard {str(shard.path)!r}"
        try:
            found, part = read(shard.path)
        except wrap as err:
            raise StorageError(f"{where}: {err}") from err
        check_shard_seed(item, found, where)
        if any(found.get(key) != value for key, value in (expect or {}).items()):
            raise StorageError(
                f"{where} was computed {differs(found)}; re-run the submission fresh"
            )
        metadata.append(found)
        parts.append(part)
    default = f"the {label} stage of submission {item.submission_id}"
    return ShardSet(item, tuple(ordered), tuple(metadata), tuple(parts), hashes_of or default)
