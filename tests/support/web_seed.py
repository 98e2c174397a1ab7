"""Seed a service database for the web tests, only through the service layer.

Benchmarks are loaded from definitions (``models.catalog.benchmarks``), submissions created by
``models.submissions.intake.create_submission`` and driven through the real pipeline functions
(``models.submissions.lifecycle`` transitions, shard records written with
``certbench.smoothing.records``, aggregation by
``models.runs.results.complete_submission``), so every number on a page comes from the same code
path as in production. Records are realistic: counts drawn per image, bounds and radii from
``certbench.smoothing.core``.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from sqlalchemy import update
from sqlalchemy.orm import Session

from certbench.smoothing.core import (
    ABSTAIN,
    CertifyRecord,
    certified_radius,
    lower_confidence_bound,
)
from certbench.smoothing.records import write_records
from generators import hub
from models.catalog.benchmarks import parse_definition, upsert_benchmark
from models.core.settings import Settings
from models.db.accounts import create_token, create_user
from models.db.base import utcnow
from models.db.entities import Benchmark, Role, ShardDispatch, User
from models.db.states import SubmissionState
from models.runs import progress, shards
from models.runs.results import complete_submission
from models.stages.base import ShardSpec
from models.submissions import lifecycle as pipeline
from models.submissions import storage
from models.submissions.intake import Upload, create_submission
from models.submissions.queries import set_moderation
from tests.support.service_factories import RobustnessPlan, record_robustness_shard, seed_metadata

S = SubmissionState
N_SAMPLES = 1000
ALPHA = 0.001
CLASSES = tuple(f"class{i}" for i in range(10))
PROTOCOL = {"version": "web-v1", "n0": 10, "n": N_SAMPLES, "alpha": ALPHA, "skip": 2}
CORRUPTIONS = {"fog": "low", "blur": "mid", "noise": "high"}


def _definition(name: str, title: str, test_sets: list[dict[str, Any]], **extra: Any) -> str:
    return json.dumps(
        {
            "format": "certbench-benchmark/1",
            "name": name,
            "version": extra.pop("version", 1),
            "title": title,
            "description": f"{title}: a tiny benchmark for the web tests.",
            "base_dataset": "cifar10",
            "num_classes": 10,
            "sigmas": [0.25, 0.5],
            "protocol": PROTOCOL,
            "test_sets": test_sets,
            **extra,
        }
    )


#: The robustness stage of webclean v2 (Muthukumar et al. 2025, arXiv:2501.18098): the same 8 clean
#: images, attacked at both ε.
ROBUSTNESS_ANCHORS = "web_k2_s0.safetensors"
ROBUSTNESS_BANK_SHA256 = "5eed" * 16


def robustness_protocol(folder: Path) -> dict[str, Any]:
    return {
        "repo": "certbench/web-clean",
        "folder": str(folder),
        "config": "clean",
        "source_size": 16,
        "anchors": ROBUSTNESS_ANCHORS,
        "k": 2,
        "anchor_seed": 0,
        "eps": [8, 16],
        "n_iter": 10,
        "n_target_classes": 3,
        "projection": "exact",
        "weighting": "pd",
    }


def clean_definition(folder: Path, *, version: int = 1, robustness: bool = False) -> str:
    """webclean; version 2 adds the robustness stage (entries finished under v1 lack it)."""
    extra: dict[str, Any] = {"version": version}
    if robustness:
        extra["robustness"] = robustness_protocol(folder)
    return _definition(
        "webclean",
        "Web clean",
        [
            {
                "name": "clean",
                "repo": "certbench/web-clean",
                "folder": str(folder),
                "config": "clean",
                "source_size": 16,
            }
        ],
        **extra,
    )


def upgraded_definition(folder: Path, *, version: int) -> str:
    """webup: one clean test set; version 2 adds the Fourier sensitivity stage (the documented
    upgrade path, ``certbench benchmarks load v2.json``): its entries, all finished under
    version 1, lack the stage's figures."""
    extra: dict[str, Any] = {"version": version}
    if version > 1:
        extra["stages"] = {
            "fourier_sensitivity": {
                "protocol": "quick", "smoothed": False, "stride": 8, "repo": "certbench/web-clean",
                "folder": str(folder), "config": "clean", "source_size": 16, "skip": 2,
            }
        }  # fmt: skip
    sets = [{"name": "clean", "repo": "certbench/web-clean", "folder": str(folder),
             "config": "clean", "source_size": 16}]  # fmt: skip
    return _definition("webup", "Web upgraded", sets, **extra)


def bands_definition() -> str:
    sets = [
        {
            "name": f"{corruption}_s{severity}",
            "repo": "certbench/web-c",
            "config": f"{corruption}_s{severity}",
            "source_size": 16,
            "band": band,
            "attributes": {"corruption": corruption, "severity": severity},
        }
        for corruption, band in CORRUPTIONS.items()
        for severity in (1, 2)
    ]
    bands = {band: [c] for c, band in CORRUPTIONS.items()}
    return _definition("webbands", "Web bands", sets, bands=bands)


FOURIER_ALPHAS = (0.5, 2.0)
FOURIER_FCS = (1, 2, 3)


def fourier_definition() -> str:
    sets = [
        {
            "name": f"fc{f_c:02d}_a{alpha:g}_s1".replace(".", "p"),
            "repo": "certbench/web-f",
            "config": f"fc{f_c:02d}_a{alpha:g}_s1".replace(".", "p"),
            "source_size": 16,
            "attributes": {"f_c": f_c, "alpha": alpha, "eps": 8, "severity": 1},
        }
        for alpha in FOURIER_ALPHAS
        for f_c in FOURIER_FCS
    ]
    return _definition("webf", "Web Fourier", sets)


def write_local_dataset(folder: Path) -> None:
    """A Hub-layout folder (``generators.hub``) with one config and a card figure."""
    rng = np.random.default_rng(7)
    images = rng.integers(0, 256, size=(16, 32, 32, 3), dtype=np.uint8)
    hub.write_config(
        folder,
        "clean",
        images=images,
        labels=np.arange(16) % 10,
        class_names=CLASSES,
        columns={"severity": np.zeros(16, dtype=np.int64)},
        source_index=np.arange(16),
    )
    card = hub.build_card(
        configs=["clean"], pretty_name="Web clean", body="# Web clean\n\nTest data.", license="mit"
    )
    hub.write_card(folder, card)
    figure = Image.fromarray(np.kron(images[0], np.ones((4, 4, 1), dtype=np.uint8)))
    buffer = io.BytesIO()
    figure.save(buffer, format="PNG")
    hub.figure_path(folder, "sample_grid.png").write_bytes(buffer.getvalue())


def make_records(
    start: int, stop: int, *, quality: float, sigma: float, seed: int, skip: int = 2
) -> list[CertifyRecord]:
    """Per-image counts drawn around ``quality``; bounds and radii as CERTIFY computes them."""
    rng = np.random.default_rng(seed * 7919 + start)
    out = []
    for position in range(start, stop):
        label = position % 10
        p_true = float(np.clip(rng.beta(8 * quality + 0.5, 8 * (1 - quality) + 0.5), 0, 1))
        n_y = int(rng.binomial(N_SAMPLES, p_true))
        selected = label if n_y >= N_SAMPLES // 2 else (label + 1) % 10
        n_a = n_y if selected == label else N_SAMPLES - n_y
        pa_lower = lower_confidence_bound(n_a, N_SAMPLES, ALPHA)
        prediction = selected if pa_lower >= 0.5 else ABSTAIN
        out.append(
            CertifyRecord(
                index=position * skip,
                label=label,
                prediction=prediction,
                radius=certified_radius(pa_lower, sigma),
                pa_lower=pa_lower,
                selected=selected,
                n_a=n_a,
                n_y=n_y,
                n=N_SAMPLES,
                n0=10,
                correct=prediction == label,
                seconds=0.01,
                sigma=sigma,
                alpha=ALPHA,
            )
        )
    return out


#: Per webclean entry (the stage's 8 images, by position): clean-correct images and, per ε, how
#: many survive ℓ∞ APGD, ℓ∞ APGD + lazy PD projection, and PD-aware APGD. The order is the
#: reverse of certification quality. Alpha finished before the stage existed; Echo's ℓ∞ attack
#: finds nothing at 8/255 (so its median d_PD there is undefined).
ROBUSTNESS_PLANS: dict[str, RobustnessPlan] = {
    "Bravo": (7, {8: (1, 3, 4), 16: (0, 1, 2)}),
    "Charlie": (6, {8: (2, 5, 4), 16: (0, 2, 3)}),
    "Delta": (6, {8: (3, 5, 6), 16: (1, 3, 3)}),
    "Echo": (7, {8: (7, 7, 7), 16: (2, 4, 5)}),
}


@dataclass
class Seeded:
    """What the tests need to know about the seeded database."""

    tokens: dict[str, str] = field(default_factory=dict)
    entries: dict[str, dict[str, int]] = field(default_factory=dict)
    running_id: int = 0
    private_id: int = 0


def _start(session: Session, sid: int, settings: Settings) -> None:
    assert pipeline.transition(
        session, sid, from_states={S.SUBMITTED}, to_state=S.VALIDATING, settings=settings
    )
    assert pipeline.transition(session, sid, from_states={S.VALIDATING}, to_state=S.QUEUED)
    assert pipeline.transition(
        session, sid, from_states={S.QUEUED}, to_state=S.RUNNING, settings=settings
    )


def _record(session: Session, sid: int, spec: ShardSpec, *, settings: Settings, **kw: Any) -> None:
    relpath = shards.records_relpath(sid, spec)
    test_sets = pipeline.get_submission(session, sid).benchmark.test_sets
    test_set_id = next(ts.id for ts in test_sets if ts.name == spec.unit)
    seed = kw.pop("seed") * 1000 + test_set_id  # each test set draws its own records
    write_records(
        make_records(spec.start, spec.stop, seed=seed, **kw),
        storage.resolve(settings.artifacts_dir, relpath),
        metadata=seed_metadata(session, sid),
    )
    shards.record(
        session,
        submission_id=sid,
        spec=spec,
        count=spec.stop - spec.start,
        seconds=0.2,
        records_path=relpath,
        worker="seed",
        settings=settings,
    )


#: The running entry's second test set is being certified: 3 of its 8 images in 12 s.
IN_FLIGHT_IMAGES, IN_FLIGHT_SECONDS = 3, 12.0


def _in_flight(session: Session, sid: int, spec: ShardSpec, *, settings: Settings) -> None:
    """A worker holds ``spec`` and reported ``IN_FLIGHT_IMAGES`` after ``IN_FLIGHT_SECONDS``
    (its claim outlives the test session, so the page keeps showing it)."""
    assert shards.claim(session, sid, spec, worker="seed-worker/1", settings=settings) is None
    samples = IN_FLIGHT_IMAGES * (PROTOCOL["n0"] + N_SAMPLES)
    progress.record_partial(
        session,
        sid,
        spec.key,
        worker="seed-worker/1",
        images=IN_FLIGHT_IMAGES,
        samples=samples,
        settings=settings,
    )
    now = utcnow()
    session.execute(
        update(ShardDispatch)
        .where(ShardDispatch.submission_id == sid, ShardDispatch.unit == spec.unit)
        .values(
            started_at=now - timedelta(seconds=IN_FLIGHT_SECONDS),
            updated_at=now,
            claimed_until=now + timedelta(days=1),
        )
    )
    session.commit()


def submit(
    session: Session,
    *,
    user: User,
    benchmark: Benchmark,
    settings: Settings,
    name: str,
    seed: int,
    sigma: float = 0.25,
    architecture: str = "cifar_resnet20",
    **kw: Any,
) -> int:
    manifest = {
        "benchmark": benchmark.name,
        "architecture": {"name": architecture, "kwargs": {}},
        "num_classes": 10,
        "preprocessing": {"mean": [0.49, 0.48, 0.45], "std": [0.25, 0.24, 0.26]},
        "smoothing": {"sigma": sigma},
        "metadata": {
            "name": name,
            "authors": [f"{name} Author"],
            "paper_url": f"https://example.org/{seed}",
            "code_url": f"https://example.org/code/{seed}",
            "licence": "MIT",
        },
    }
    upload = Upload(
        weights=f"weights-{name}-{seed}".encode() * 4,
        manifest=manifest,
        model_name=name,
        architecture=architecture,
        sigma=sigma,
        **kw,
    )
    return create_submission(
        session, user=user, benchmark=benchmark, upload=upload, settings=settings
    ).id


def finish(
    session: Session,
    sid: int,
    *,
    settings: Settings,
    quality: float,
    sigma: float,
    robustness: RobustnessPlan | None = None,
) -> None:
    """Certify (and, on a benchmark with the stage, attack with ``robustness``) and aggregate."""
    _start(session, sid, settings)
    for spec in shards.plan(session, sid, settings=settings, stage="certification"):
        _record(session, sid, spec, settings=settings, quality=quality, sigma=sigma, seed=sid)
    for spec in shards.plan(session, sid, settings=settings, stage="pd_robustness"):
        assert robustness is not None, f"submission {sid} needs a robustness plan"
        assert record_robustness_shard(
            session,
            sid,
            spec,
            robustness,
            settings=settings,
            anchors_sha256=ROBUSTNESS_BANK_SHA256,
            seconds=2.5,
        )
    assert complete_submission(session, sid, settings=settings)


ENTRIES = {
    # name: (quality, sigma, architecture, extra fields)
    "Alpha": (0.9, 0.25, "cifar_resnet110", {"venue": "ICML", "extra_data": True}),
    "Bravo": (0.75, 0.25, "cifar_resnet20", {"venue": "NeurIPS"}),
    "Charlie": (0.6, 0.5, "cifar_resnet110", {"venue": "ICML"}),
    "Delta": (0.45, 0.25, "wrn", {}),
    "Echo": (0.3, 0.5, "cifar_resnet20", {"venue": "ICLR"}),
}


def _seed_upgrade(
    session: Session, settings: Settings, folder: Path, users: dict[str, User]
) -> dict[str, int]:
    """Two entries of webup v1, then the upgrade to v2 (a stage added after they finished)."""
    bench = upsert_benchmark(session, parse_definition(upgraded_definition(folder, version=1)))
    ids = {}
    for i, name in enumerate(("Alpha", "Bravo")):
        quality, sigma, arch, _ = ENTRIES[name]
        sid = submit(session, user=users["alice"], benchmark=bench, settings=settings, name=name,
                     seed=700 + i, sigma=sigma, architecture=arch)  # fmt: skip
        finish(session, sid, settings=settings, quality=quality, sigma=sigma)
        ids[name] = sid
    upsert_benchmark(session, parse_definition(upgraded_definition(folder, version=2)))
    return ids


def seed_database(session: Session, settings: Settings, dataset_folder: Path) -> Seeded:
    """Three benchmarks, three users, finished, private, flagged, baseline and running entries.

    webclean gains the robustness stage (v1 → v2) after Alpha finished, so its other entries
    have robustness results and Alpha has none; webbands and webf have no such stage.
    """
    write_local_dataset(dataset_folder)
    seeded = Seeded()
    benchmarks = [
        upsert_benchmark(session, parse_definition(text))
        for text in (clean_definition(dataset_folder), bands_definition(), fourier_definition())
    ]
    robust_definition = parse_definition(
        clean_definition(dataset_folder, version=2, robustness=True)
    )
    users = {}
    for name, role in (("alice", Role.SUBMITTER), ("bob", Role.SUBMITTER), ("root", Role.ADMIN)):
        users[name] = create_user(session, name=name, role=role)
        seeded.tokens[name] = create_token(session, user=users[name]).secret
    for seed, bench in enumerate(benchmarks):
        ids: dict[str, int] = {}
        for i, (name, (quality, sigma, arch, extra)) in enumerate(ENTRIES.items()):
            plan = ROBUSTNESS_PLANS.get(name) if bench.name == "webclean" else None
            if plan is not None and bench.robustness is None:
                bench = upsert_benchmark(session, robust_definition)
            owner = users["bob"] if i % 2 else users["alice"]
            sid = submit(
                session,
                user=owner,
                benchmark=bench,
                settings=settings,
                name=name,
                seed=seed * 100 + i,
                sigma=sigma,
                architecture=arch,
                **extra,
            )
            finish(session, sid, settings=settings, quality=quality, sigma=sigma, robustness=plan)
            ids[name] = sid
        seeded.entries[bench.name] = ids
    seeded.entries["webup"] = _seed_upgrade(session, settings, dataset_folder, users)
    bands = seeded.entries["webbands"]
    set_moderation(session, bands["Delta"], is_baseline=True)
    set_moderation(session, bands["Echo"], flagged=True, flag_reason="weights do not match paper")
    bench = benchmarks[1]
    seeded.private_id = submit(
        session,
        user=users["alice"],
        benchmark=bench,
        settings=settings,
        name="Secret",
        seed=900,
        is_private=True,
    )
    finish(session, seeded.private_id, settings=settings, quality=0.95, sigma=0.25)
    seeded.running_id = submit(
        session, user=users["alice"], benchmark=bench, settings=settings, name="Running", seed=901
    )
    _start(session, seeded.running_id, settings)
    specs = shards.plan(session, seeded.running_id, settings=settings, stage="certification")
    _record(
        session, seeded.running_id, specs[0], settings=settings, quality=0.5, sigma=0.25, seed=901
    )
    _in_flight(session, seeded.running_id, specs[1], settings=settings)
    return seeded
