"""The model page's reproduction: the commands that recompute a finished entry's certification
records bit for bit from its revealed seed, complete as shown (issue 34 §8: the page's hint
``certify … --seed 0x…`` left out the ``--skip 4 --n 1000`` that reproduction needs, and the
docs' ``--config clean`` was refused).

One ``certbench certify`` per test set with the benchmark's protocol (n0, n, α, the test set's
skip and limit), the data as this server reads it (the Hub repo at its revision and config; the
command that generates the demo's digits; a local folder's published name, which a user points at
their copy) and the weights (``certbench download`` for a published entry; otherwise the files
the submitter sent). The noise streams are keyed by ``<config>/<split>`` as the CLI keys them
(``models.stages.certification.provenance.stream_key``), so the same options give the same
records on the same device type.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from api.schemas.benchmark import BenchmarkPublic, TestSetPublic
from api.schemas.result import ResultsPublic
from models.benchmarks.generated import GENERATED

SUBMITTED = ("model.safetensors", "manifest.json")
"""The names the commands give the submitted weights and manifest when they are not published."""


@dataclass(frozen=True)
class Reproduction:
    """The shell lines (comments start with ``#``) and what they need that is not a command."""

    lines: list[str]
    device: str | None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _quote(word: str) -> str:
    return shlex.quote(word)


def _device(results: ResultsPublic) -> str | None:
    """The one device type the certification shards ran on (None when unknown or mixed)."""
    kinds: set[str] = set()
    for stage in results.stages:
        if stage.stage != "certification":
            continue
        for device in (stage.protocol.get("throughput") or {}).get("devices") or []:
            kinds.add(str(device).split(":")[0])
    return kinds.pop() if len(kinds) == 1 else None


def _data(test_set: TestSetPublic, generated_done: set[str]) -> tuple[list[str], list[str]]:
    """(commands that fetch or write the data, the certify options that read it)."""
    source = test_set.source
    if source.kind == "generated":
        name = next((g.name for g in GENERATED.values() if g.repo == test_set.dataset_repo), None)
        folder = name or test_set.dataset_repo.rsplit("/", 1)[-1]
        setup = []
        if folder not in generated_done and name is not None:
            generated_done.add(folder)
            command = GENERATED[name].command.replace("--folder {folder}", f"--out {folder}")
            setup.append(f"uv run {command}")
        options = ["--dataset", f"./{folder}"]  # a path even before the folder exists
    elif source.kind == "hub":
        options = ["--dataset", test_set.dataset_repo]
        if source.revision:
            options += ["--revision", source.revision]
        setup = []
    else:
        setup = [
            f"# this server reads {test_set.dataset_repo} from a local folder ({source.label}): "
            "point --dataset at your copy"
        ]
        options = ["--dataset", test_set.dataset_repo]
    if test_set.config:
        options += ["--config", test_set.config]
    if test_set.split != "test":
        options += ["--split", test_set.split]
    return setup, options


def reproduction(results: ResultsPublic, bench: BenchmarkPublic) -> Reproduction | None:
    """The commands, for a finished entry whose secret seed is revealed (None otherwise: a run
    with the benchmark's public seed keyed its streams by the test set's name, which the CLI
    does not)."""
    seed = results.seed
    if results.state != "finished" or seed is None or seed.kind != "secret" or not seed.value:
        return None
    lines = [f"# {results.model_name} (#{results.submission_id}) on {bench.name}: records bit "
             "for bit, per test set, from the revealed seed"]  # fmt: skip
    if results.weights is not None:
        stem = f"{bench.name}-entry-{results.submission_id}"
        lines.append(f"uv run certbench download {results.submission_id} --out .")
        weights, manifest = f"{stem}.safetensors", f"{stem}.json"
    else:
        weights, manifest = SUBMITTED
        lines.append(
            f"# the weights and manifest you submitted, saved as {weights} and {manifest} "
            "(not published by the submitter)"
        )
    device = _device(results)
    generated: set[str] = set()
    names = {r.test_set for r in results.results}
    protocol = bench.protocol
    for test_set in bench.test_sets:
        if test_set.name not in names:
            continue
        setup, data = _data(test_set, generated)
        lines += setup
        words = ["uv", "run", "certbench", "certify", "--weights", weights, "--manifest", manifest]
        words += data
        words += ["--skip", str(test_set.subset_skip)]
        if test_set.subset_limit is not None:
            words += ["--limit", str(test_set.subset_limit)]
        words += ["--n0", str(protocol.n0), "--n", str(protocol.n)]
        words += ["--alpha", f"{protocol.alpha:g}"]
        if device is not None:
            words += ["--device", device]
        words += ["--seed", seed.value, "--out", f"{test_set.name}.parquet"]
        lines.append(" ".join(_quote(w) for w in words))
    return Reproduction(lines, device)
