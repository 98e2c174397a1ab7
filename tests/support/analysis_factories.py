"""Synthetic finished entries for the effective-robustness tests: a clean benchmark ``cifar10``
(one test set) and an OOD benchmark ``cifar10-c`` (``fog`` in the low band, ``noise`` in the
high band), 400 images per test set, and submissions driven through the real pipeline functions
with records in which exactly the first ``k`` images are certified correct, so every stored
accuracy is a chosen count. The clean benchmark can run a Fourier-lens stage whose shard records
carry a chosen amplitude HFF."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import norm
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.services import analysis
from certbench.lens.lens import LensRecord, write_lens_records
from certbench.smoothing.core import CertifyRecord
from certbench.smoothing.records import write_records
from models.catalog.benchmarks import parse_definition, upsert_benchmark
from models.core.settings import Settings
from models.db.entities import Benchmark, Role, RunSeed, User
from models.db.states import SubmissionState
from models.runs import shards
from models.runs.results import complete_submission
from models.submissions import lifecycle as pipeline
from models.submissions import storage
from models.submissions.intake import Upload, create_submission
from tests.support.service_db import DatabaseSnapshot, restore, snapshot
from tests.support.service_factories import make_user

S = SubmissionState
IMAGES = 400
SKIP = 2
LENS_PATHS = 3


def definition(name: str, sets: dict[str, str | None], *, lens: bool = False) -> dict[str, Any]:
    """A CIFAR-10 family benchmark whose test sets (name → band) hold IMAGES images each."""
    doc: dict[str, Any] = {
        "format": "certbench-benchmark/1",
        "name": name,
        "version": 1,
        "title": name,
        "base_dataset": "cifar10",
        "num_classes": 10,
        "sigmas": [0.25, 0.5],
        "protocol": {"version": "test-v1", "n0": 4, "n": 16, "alpha": 0.001, "skip": SKIP},
        "test_sets": [
            {
                "name": ts,
                "repo": f"certbench/{name}",
                "config": ts,
                "source_size": IMAGES * SKIP,
                "band": band,
            }
            for ts, band in sets.items()
        ],
    }
    if lens:
        doc["stages"] = {
            "fourier_lens": {
                "repo": "certbench/clean",
                "source_size": IMAGES * SKIP,
                "kinds": ["amplitude"],
                "paths": LENS_PATHS,
            }
        }
    return doc


def load_family(session: Session, *, lens: bool = False) -> tuple[Benchmark, Benchmark]:
    clean = definition("cifar10", {"clean": None}, lens=lens)
    ood = definition("cifar10-c", {"fog": "low", "noise": "high"})
    return tuple(  # type: ignore[return-value]
        upsert_benchmark(session, parse_definition(json.dumps(d))) for d in (clean, ood)
    )


def upload(
    model: int,
    sigma: float,
    benchmark: str,
    *,
    private: bool = False,
    name: str = "",
    architecture: str = "cifar_resnet20",
) -> Upload:
    """The same ``model`` number gives the same weights and model manifest on every benchmark
    (what matching keys on); the manifest names its benchmark, as a real one does."""
    manifest = {
        "benchmark": benchmark,
        "architecture": {"name": architecture, "kwargs": {}},
        "num_classes": 10,
        "preprocessing": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]},
        "smoothing": {"sigma": sigma},
        "metadata": {"name": name or f"model-{model}", "authors": []},
        "input_size": [3, 32, 32],
    }
    return Upload(
        weights=f"weights-of-model-{model}".encode() * 4,
        manifest=manifest,
        model_name=name or f"model-{model}",
        architecture=architecture,
        sigma=sigma,
        is_private=private,
    )


def counts(accuracy: float) -> int:
    return round(accuracy * IMAGES)


def probit_accuracy(intercept: float, slope: float, id_accuracy: float) -> float:
    """The accuracy on the probit line Φ⁻¹(OOD) = intercept + slope·Φ⁻¹(ID)."""
    return float(norm.cdf(intercept + slope * norm.ppf(id_accuracy)))


def _certify_records(start: int, stop: int, correct: int, sigma: float) -> list[CertifyRecord]:
    return [
        CertifyRecord(
            index=position * SKIP,
            label=position % 10,
            prediction=position % 10 if position < correct else -1,
            radius=0.3 if position < correct else 0.0,
            pa_lower=0.9 if position < correct else 0.2,
            selected=position % 10,
            n_a=14,
            n_y=14,
            n=16,
            n0=4,
            correct=position < correct,
            seconds=0.01,
            sigma=sigma,
            alpha=0.001,
        )
        for position in range(start, stop)
    ]


def _lens_records(start: int, stop: int, hff: float) -> list[LensRecord]:
    return [
        LensRecord(
            unit=u,
            kind="amplitude",
            index=u,
            source=2 * u,
            target=2 * u + 1,
            source_label=0,
            target_label=1,
            length=100,
            first_prediction=0,
            hff=hff,
            hff_released=hff,
            cd=50,
            changed=True,
            jacobian_sq=float("nan"),
        )
        for u in range(start, stop)
    ]


def finish(
    session: Session,
    settings: Settings,
    *,
    user: User,
    benchmark: Benchmark,
    upload: Upload,
    correct: dict[str, int],
    hff: float | None = None,
) -> int:
    """A finished submission whose test set ``name`` has ``correct[name]`` of IMAGES images
    certified correct (and, on a lens benchmark, every amplitude path scoring ``hff``)."""
    sid = create_submission(
        session, user=user, benchmark=benchmark, upload=upload, settings=settings
    ).id
    moves = [(S.SUBMITTED, S.VALIDATING), (S.VALIDATING, S.QUEUED), (S.QUEUED, S.RUNNING)]
    for old, new in moves:
        assert pipeline.transition(session, sid, from_states={old}, to_state=new,
                                   settings=settings)  # fmt: skip
    row = (benchmark.stages or {}).get("fourier_lens")
    commitment = session.get(RunSeed, sid).commitment
    for spec in shards.plan(session, sid, settings=settings):
        relpath = shards.records_relpath(sid, spec)
        target = storage.resolve(settings.artifacts_dir, relpath)
        if spec.stage == "certification":
            records = _certify_records(spec.start, spec.stop, correct[spec.unit], upload.sigma)
            write_records(records, target, metadata={"seed_commitment": commitment})
        else:
            assert row is not None and hff is not None
            # as the stage writes them: the protocol's fingerprint, the run seed's commitment
            metadata = {"fingerprint": row["fingerprint"], "seed_commitment": commitment}
            write_lens_records(_lens_records(spec.start, spec.stop, hff), target, metadata)
        assert shards.record(session, submission_id=sid, spec=spec, count=spec.size, seconds=0.1,
                             records_path=relpath, worker="test", settings=settings)  # fmt: skip
    assert complete_submission(session, sid, settings=settings)
    return sid


def probit(accuracy: float) -> float:
    return float(norm.ppf(np.clip(accuracy, 0.5 / IMAGES, 1 - 0.5 / IMAGES)))


FOG = (-0.3, 0.8)  # intercept, slope of the fog trend at σ = 0.25
NOISE = (-0.9, 0.6)
FOG_HALF = (0.2, 1.2)  # the fog trend of the σ = 0.5 entries
ID_ACC = (0.5, 0.56, 0.62, 0.7, 0.78, 0.86)
URL = "/api/v1/analysis/{}/effective-robustness"


@dataclass(frozen=True)
class SavedFamily:
    """A family as built once: its database and artifacts, its users' tokens and its ids."""

    database: DatabaseSnapshot
    headers: dict[str, dict[str, str]]
    ids: dict[tuple[int, float], tuple[int | None, int | None]]


@dataclass
class SavedFamilies:
    """A test module's families, one per database backend, with the folder of their copies."""

    folder: Path
    saved: dict[str, SavedFamily] = field(default_factory=dict)


class Family:
    def __init__(self, session: Session, settings: Settings) -> None:
        self.session, self.settings = session, settings
        analysis.clear_cache()  # the ER column is memoised per process
        self.clean, self.ood = load_family(session, lens=True)
        self.alice, alice_token = make_user(session, "alice")
        self.bob, bob_token = make_user(session, "bob")
        _, admin_token = make_user(session, "root", Role.ADMIN)
        self.headers = {
            name: {"Authorization": f"Bearer {token}"}
            for name, token in (("alice", alice_token), ("bob", bob_token), ("admin", admin_token))
        }
        self.ids: dict[tuple[int, float], tuple[int | None, int | None]] = {}

    @classmethod
    def built_once(
        cls,
        session: Session,
        settings: Settings,
        cache: SavedFamilies,
        build: Callable[[Family], object],
    ) -> Family:
        """The family ``build`` makes, built through the pipeline by the first test of each
        database backend and restored from ``cache`` (a module's) for the others: the same
        rows, ids, records and tokens for a fraction of the time (a family is 12 or more
        submissions driven through the pipeline, several seconds per test)."""
        backend = session.get_bind().dialect.name
        if backend in cache.saved:
            return cls._restored(session, settings, cache.saved[backend])
        family = cls(session, settings)
        build(family)
        database = snapshot(settings, cache.folder / backend)
        cache.saved[backend] = SavedFamily(database, family.headers, dict(family.ids))
        return family

    @classmethod
    def _restored(cls, session: Session, settings: Settings, saved: SavedFamily) -> Family:
        restore(settings, saved.database)
        analysis.clear_cache()
        family = cls.__new__(cls)
        family.session, family.settings = session, settings
        family.clean = session.scalars(select(Benchmark).filter_by(name="cifar10")).one()
        family.ood = session.scalars(select(Benchmark).filter_by(name="cifar10-c")).one()
        family.alice = session.scalars(select(User).filter_by(name="alice")).one()
        family.bob = session.scalars(select(User).filter_by(name="bob")).one()
        family.headers = saved.headers
        family.ids = dict(saved.ids)
        return family

    def model(
        self,
        model: int,
        sigma: float,
        id_accuracy: float | None,
        *,
        shift: float = 0.0,
        trend: tuple[float, float] = FOG,
        private: bool = False,
        clean: bool = True,
        ood: bool = True,
        architecture: str = "cifar_resnet20",
        hff_offset: float = 0.0,
    ) -> tuple[int | None, int | None]:
        """A model's clean entry at ``id_accuracy`` and its OOD entry on the trends (``shift``
        probit units above the fog trend); the clean entry's amplitude HFF is linear in the
        probit of its fog accuracy (plus ``hff_offset``)."""
        user = self.alice if private else self.bob
        base = id_accuracy if id_accuracy is not None else 0.6
        fog = probit_accuracy(trend[0] + shift, trend[1], base)
        noise = probit_accuracy(*NOISE, base)
        hff = 0.5 - 0.1 * probit(counts(fog) / IMAGES) + hff_offset
        clean_id = ood_id = None
        if clean:
            clean_id = finish(
                self.session, self.settings, user=user, benchmark=self.clean,
                upload=upload(model, sigma, "cifar10", private=private, architecture=architecture),
                correct={"clean": counts(base)}, hff=hff,
            )  # fmt: skip
        if ood:
            ood_id = finish(
                self.session, self.settings, user=user, benchmark=self.ood,
                upload=upload(
                    model, sigma, "cifar10-c", private=private, architecture=architecture
                ),
                correct={"fog": counts(fog), "noise": counts(noise)},
            )  # fmt: skip
        self.ids[(model, sigma)] = (clean_id, ood_id)
        return clean_id, ood_id
