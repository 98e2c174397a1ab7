"""An undisturbed run of each submission, computed here: every stage's unit as one shard, on this
machine's CPU with one thread (what the workers use), from the run's revealed seed; its records
must equal, bit for bit, what the fleet stored across its shards (every column but wall-clock
time). Records do not depend on sharding or batch size (docs/researchers/reproducing.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

WALL_CLOCK = ("seconds",)
"""Columns measuring time, which no two runs share."""


def _table(path: Path) -> Any:
    from models.stages.shard_files import json_table

    return json_table(path)[1]


def _same(a: Any, b: Any) -> str | None:
    """None when the tables hold the same bits (NaNs included), else the first difference."""
    import numpy as np
    import pyarrow as pa

    keep = [c for c in a.column_names if c not in WALL_CLOCK]
    if keep != [c for c in b.column_names if c not in WALL_CLOCK]:
        return f"columns differ: {a.column_names} vs {b.column_names}"
    if a.num_rows != b.num_rows:
        return f"{a.num_rows} rows vs {b.num_rows}"
    for name in keep:
        x, y = a.column(name), b.column(name)
        if x.type != y.type:
            return f"column {name!r} is {x.type} vs {y.type}"
        if pa.types.is_integer(x.type) or pa.types.is_floating(x.type):
            # the values' bits (a NaN equals a NaN of the same bits), nulls apart
            same = x.null_count == y.null_count and (
                np.asarray(x.to_numpy(zero_copy_only=False)).tobytes()
                == np.asarray(y.to_numpy(zero_copy_only=False)).tobytes()
            )
        else:  # strings, booleans, nested values: compared as values
            same = x.to_pylist() == y.to_pylist()
        if not same:
            return f"column {name!r} differs"
    return None


def reproduce(settings: Any, submission_id: int, scratch: Path) -> list[dict[str, Any]]:
    """One row per (stage, unit) of the run: identical or the difference."""
    import pyarrow as pa
    import torch

    from models.db.engine import session_scope
    from models.db.entities import StageShard
    from models.stages import registry
    from models.stages.base import RunContext, ShardSpec
    from models.stages.work import get_work_item
    from models.submissions import storage

    torch.set_num_threads(1)
    with session_scope(settings) as session:
        item = get_work_item(session, submission_id, settings=settings)
        stored = [
            (s.stage, s.unit, s.start, s.records_path)
            for s in session.query(StageShard).filter(StageShard.submission_id == submission_id)
        ]
    rows = []
    for stage in registry.enabled_stages(item):
        for unit in stage.units(item, settings):
            target = scratch / f"{submission_id}-{stage.name}-{unit.name or 'all'}.parquet"
            spec = ShardSpec(stage.name, unit.name, 0, 0, unit.num_images)
            context = RunContext(
                target=target,
                device=torch.device("cpu"),
                batch_size=stage.default_batch_size,
                on_progress=lambda _done: None,
                settings=settings,
            )
            stage.run(item, spec, context)
            parts = sorted(
                (start, path)
                for name, u, start, path in stored
                if name == stage.name and u == unit.name
            )
            fleet = (
                pa.concat_tables(
                    [_table(storage.resolve(settings.artifacts_dir, path)) for _, path in parts]
                )
                if parts
                else None
            )
            difference = "no shard stored" if fleet is None else _same(_table(target), fleet)
            rows.append(
                {
                    "run": submission_id,
                    "stage": stage.name,
                    "unit": unit.name,
                    "shards": len(parts),
                    "identical": difference is None,
                    "difference": difference,
                }
            )
            target.unlink(missing_ok=True)
    return rows
