"""Property (issue 19 §6): any manifest document either validates and can be stored (SQLite and
PostgreSQL), or is refused as a 422 intake error, never a database error.

Documents are drawn around the manifest's shape: valid values most of the time, and at every
field the values that used to crash PostgreSQL (NaN and ±Infinity, which Python's JSON reader
accepts; NUL and other control characters; names longer than their columns; huge integers), plus
wrong types and arbitrary unicode. Each one goes through the intake as the API runs it: parse,
check against the benchmark (a database lookup by name), store the rows.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.services.intake import check_against_benchmark, parse_manifest
from models.catalog.benchmarks import get_benchmark
from models.core.errors import IntakeError, NotFoundError
from models.core.settings import Settings
from models.db.entities import Benchmark, Role, Submission, User
from models.submissions.intake import Upload, create_submission
from tests.support.service_factories import load_tiny, make_user

NASTY_TEXT = ["", "\x00", "a\x00b", "tab\there", "\x7f", "\x85", "\u202e", "\ud800", "m" * 129,
              "é" * 128, "💥" * 64, "tiny"]  # fmt: skip
NASTY_NUMBERS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e308, 5e-324, 2**63, -(2**63),
                 10**30, True]  # fmt: skip

texts = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=140))
numbers = st.one_of(
    st.sampled_from(NASTY_NUMBERS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
)
hostile = st.one_of(texts, numbers, st.none(), st.lists(numbers, max_size=4), st.just({}))

#: Printable unicode of any script (what a valid name may hold), up to the column width.
names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")),
    min_size=1,
    max_size=128,
)
unit = st.floats(min_value=0.01, max_value=1.0)
valid = st.fixed_dictionaries(
    {
        "benchmark": st.just("tiny"),
        "architecture": st.fixed_dictionaries(
            {"name": st.sampled_from(["cifar_resnet20", "cifar_resnet56"]), "kwargs": st.just({})}
        ),
        "num_classes": st.just(10),
        "preprocessing": st.fixed_dictionaries(
            {
                "mean": st.lists(unit, min_size=3, max_size=3),
                "std": st.lists(unit, min_size=3, max_size=3),
            }
        ),
        "smoothing": st.fixed_dictionaries({"sigma": st.sampled_from([0.25, 0.5])}),
        "metadata": st.fixed_dictionaries(
            {"name": names},
            optional={
                "authors": st.lists(names, max_size=3),
                "paper_url": st.just("https://example.org/paper"),
                "licence": st.text(
                    alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")),
                    min_size=1,
                    max_size=64,
                ),
            },
        ),
    },
    optional={"input_size": st.just([3, 32, 32])},
)
#: Where a hostile value may be put, and of which kind (the last key may be new: an unknown field).
PLACES = [
    (("benchmark",), "text"), (("architecture", "name"), "text"),
    (("architecture", "kwargs", "depth"), "number"), (("num_classes",), "number"),
    (("preprocessing", "mean", 1), "number"), (("preprocessing", "std", 0), "number"),
    (("smoothing", "sigma"), "number"), (("metadata", "name"), "text"),
    (("metadata", "authors"), "texts"), (("metadata", "licence"), "text"),
    (("metadata", "paper_url"), "text"), (("input_size",), "numbers"), (("extra",), "any"),
]  # fmt: skip
KINDS = {
    "text": texts,
    "texts": st.lists(texts, max_size=3),
    "number": numbers,
    "numbers": st.lists(numbers, max_size=4),
    "any": hostile,
}


@st.composite
def manifests(draw: st.DrawFn) -> dict[str, Any]:
    """A valid document, then none, one or two fields replaced by hostile values (mostly of the
    field's own type, so they reach the database checks rather than the type checks)."""
    document = copy.deepcopy(draw(valid))
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        (*parents, last), kind = draw(st.sampled_from(PLACES))
        value = copy.deepcopy(draw(st.one_of(KINDS[kind], KINDS[kind], hostile)))
        target: Any = document
        for key in parents:
            target = target.setdefault(key, {}) if isinstance(target, dict) else None
        in_list = isinstance(target, list) and isinstance(last, int) and last < len(target)
        if isinstance(target, dict) or in_list:
            target[last] = value
    return document


def _changed(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """GOOD with one value replaced (for the explicit examples of the issue's crashes)."""
    document = copy.deepcopy(GOOD)
    target: Any = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return document


GOOD = {
    "benchmark": "tiny",
    "architecture": {"name": "cifar_resnet20", "kwargs": {}},
    "num_classes": 10,
    "preprocessing": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]},
    "smoothing": {"sigma": 0.25},
    "metadata": {"name": "é" * 128, "authors": ["Ada"], "licence": "MIT"},
}


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(document=manifests())
@example(document=GOOD)
@example(document=_changed(("preprocessing", "mean", 1), math.nan))
@example(document=_changed(("preprocessing", "std", 0), math.inf))
@example(document=_changed(("metadata", "name"), "m" * 129))
@example(document=_changed(("metadata", "name"), "a\x00b"))
@example(document=_changed(("benchmark",), "ti\x00ny"))
def test_any_manifest_is_stored_or_refused_as_an_intake_error(
    session: Session, settings: Settings, document: dict[str, Any]
) -> None:
    benchmark, admin = _fixtures(session)
    text = json.dumps(document, allow_nan=True).encode()
    try:
        manifest = parse_manifest(text)
        check_against_benchmark(session, manifest)
    except IntakeError as err:
        assert err.code in {"bad_manifest", "unknown_architecture", "benchmark_mismatch",
                            "sigma_not_allowed", "input_size"}, err.code  # fmt: skip
        session.rollback()
        event(f"refused: {err.code}")
        return
    stored_manifest = manifest.model_dump(mode="json")
    upload = Upload(
        weights=b"weights of " + text[:200],
        manifest=stored_manifest,
        model_name=manifest.metadata.name,
        architecture=manifest.architecture.name,
        sigma=manifest.smoothing.sigma,
    )
    submission = create_submission(
        session, user=admin, benchmark=benchmark, upload=upload, settings=settings
    )
    session.expire_all()
    row = session.get(Submission, submission.id)
    assert row.model_name == manifest.metadata.name
    assert row.artifact.manifest == stored_manifest
    assert row.sigma == manifest.smoothing.sigma
    event(f"stored: {row.state}")


def test_a_manifest_at_the_limits_is_stored(session: Session, settings: Settings) -> None:
    benchmark, admin = _fixtures(session)
    manifest = parse_manifest(json.dumps(GOOD).encode())
    check_against_benchmark(session, manifest)
    upload = Upload(
        weights=b"w" * 64,
        manifest=manifest.model_dump(mode="json"),
        model_name=manifest.metadata.name,
        architecture=manifest.architecture.name,
        sigma=manifest.smoothing.sigma,
    )
    row = create_submission(
        session, user=admin, benchmark=benchmark, upload=upload, settings=settings
    )
    session.expire_all()
    assert session.get(Submission, row.id).model_name == "é" * 128


def _fixtures(session: Session) -> tuple[Benchmark, User]:
    """The tiny benchmark and an admin (exempt from quotas), created once per database."""
    try:
        benchmark = get_benchmark(session, "tiny")
    except NotFoundError:
        benchmark = load_tiny(session)
    admin = session.scalar(select(User).where(User.name == "prop-admin"))
    return benchmark, admin or make_user(session, "prop-admin", Role.ADMIN)[0]
