"""What the database says, read by the orchestrator from the client host: which worker holds a
claim now (the moment to cut it off), and, at the end, every fact the checker needs about the
runs (their shards, dispatch rows, results, entries and state changes).

Its own engine without a pool and with short timeouts: the database is restarted under it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, create_engine, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from models.db.base import utcnow
from models.db.entities import (
    LeaderboardEntry,
    ShardDispatch,
    StageResult,
    StageShard,
    Submission,
    SubmissionEvent,
)


def epoch(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


@dataclass
class RunFacts:
    """One run as the database holds it at the end."""

    id: int
    state: str
    reason: str | None
    shards_total: int
    shards: list[dict[str, Any]] = field(default_factory=list)
    dispatches: list[dict[str, Any]] = field(default_factory=list)
    results: list[tuple[str, str]] = field(default_factory=list)
    entries: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)


class Observer:
    """Read-only queries against the fleet's database."""

    def __init__(self, url: str) -> None:
        self.engine: Engine = create_engine(
            url, poolclass=NullPool, connect_args={"connect_timeout": 3}
        )

    def _retry(self, query: Any, attempts: int = 20) -> Any:
        """Run ``query(connection)``; the database may be restarting (bounded retries)."""
        for attempt in range(attempts):
            try:
                with self.engine.connect() as connection:
                    return query(connection)
            except OperationalError:
                if attempt == attempts - 1:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def claims(self, submission_id: int) -> list[tuple[tuple[str, str, int], str]]:
        """Live claims on the run's shards: (shard key, worker name)."""
        now = utcnow()
        rows = self._retry(
            lambda c: c.execute(
                select(
                    ShardDispatch.stage,
                    ShardDispatch.unit,
                    ShardDispatch.shard_index,
                    ShardDispatch.claimed_by,
                ).where(
                    ShardDispatch.submission_id == submission_id,
                    ShardDispatch.claimed_by.is_not(None),
                    ShardDispatch.claimed_until > now,
                )
            ).all()
        )
        return [((r[0], r[1], r[2]), r[3]) for r in rows]

    def recorded(self, submission_id: int) -> dict[tuple[str, str, int], str | None]:
        rows = self._retry(
            lambda c: c.execute(
                select(
                    StageShard.stage, StageShard.unit, StageShard.shard_index, StageShard.worker
                ).where(StageShard.submission_id == submission_id)
            ).all()
        )
        return {(r[0], r[1], r[2]): r[3] for r in rows}

    def state(self, submission_id: int) -> str | None:
        value = self._retry(
            lambda c: c.scalar(select(Submission.state).where(Submission.id == submission_id))
        )
        return None if value is None else str(value.value)

    def shards_total(self, submission_id: int) -> int:
        value = self._retry(
            lambda c: c.scalar(
                select(Submission.shards_total).where(Submission.id == submission_id)
            )
        )
        return int(value or 0)

    def progress_times(self, since: float) -> list[float]:
        """When shards were recorded and runs changed state, after ``since`` (epoch seconds)."""

        def query(c: Any) -> list[float]:
            shards = c.execute(select(StageShard.created_at)).scalars().all()
            events = c.execute(select(SubmissionEvent.at)).scalars().all()
            return sorted(t.timestamp() for t in [*shards, *events] if t.timestamp() > since)

        result: list[float] = self._retry(query)
        return result

    def facts(self, ids: list[int]) -> dict[int, RunFacts]:
        """Everything the checker reads about ``ids``."""

        def query(c: Any) -> dict[int, RunFacts]:
            out: dict[int, RunFacts] = {}
            for sub in c.execute(select(Submission).where(Submission.id.in_(ids))).all():
                row = sub._mapping
                out[row["id"]] = RunFacts(
                    id=row["id"],
                    state=str(row["state"].value),
                    reason=row["reason"],
                    shards_total=row["shards_total"] or 0,
                )
            for s in c.execute(select(StageShard).where(StageShard.submission_id.in_(ids))):
                m = s._mapping
                out[m["submission_id"]].shards.append(
                    {
                        "key": [m["stage"], m["unit"], m["shard_index"]],
                        "start": m["start"],
                        "stop": m["stop"],
                        "worker": m["worker"],
                        "records_path": m["records_path"],
                        "at": epoch(m["created_at"]),
                        "seconds": m["seconds"],
                    }
                )
            for d in c.execute(select(ShardDispatch).where(ShardDispatch.submission_id.in_(ids))):
                m = d._mapping
                out[m["submission_id"]].dispatches.append(
                    {
                        "key": [m["stage"], m["unit"], m["shard_index"]],
                        "dispatches": m["dispatches"],
                        "expired_claims": m["expired_claims"],
                        "history": m["history"],
                        "claimed_by": m["claimed_by"],
                    }
                )
            for r in c.execute(
                select(StageResult.submission_id, StageResult.stage, StageResult.unit).where(
                    StageResult.submission_id.in_(ids)
                )
            ):
                out[r[0]].results.append((r[1], r[2]))
            counts = c.execute(
                select(LeaderboardEntry.submission_id, func.count())
                .where(LeaderboardEntry.submission_id.in_(ids))
                .group_by(LeaderboardEntry.submission_id)
            ).all()
            for submission_id, count in counts:
                out[submission_id].entries = count
            for e in c.execute(
                select(SubmissionEvent)
                .where(SubmissionEvent.submission_id.in_(ids))
                .order_by(SubmissionEvent.id)
            ):
                m = e._mapping
                out[m["submission_id"]].events.append(
                    {
                        "to": str(m["to_state"].value),
                        "reason": m["reason"],
                        "at": epoch(m["at"]),
                        "message": m["message"][:300],
                    }
                )
            return out

        result: dict[int, RunFacts] = self._retry(query)
        return result
