"""The client host: submitters driving the REST API the way users do, every answer recorded.

Runs in the orchestrating process after it entered the client's namespace, so its requests cross
the switch like any host's. Requests go to the API hosts in turn; a 503 or a transport error is
retried on the next host with backoff (bounded), as a client behind a load balancer would. Each
request becomes one :class:`Call` in the history the checker reads: when, which host, the status
(or the transport error), the ``Retry-After`` header of a 503 and how long it took.

The workload is the demo benchmark (``models/catalog/definitions/demo-digits.json``) with tiny
models: a LeNet-5 per run, initialised from the run's index, so no two uploads are duplicates.
"""

from __future__ import annotations

import io
import json
import threading
import time
from dataclasses import asdict, dataclass, field
from importlib.resources import files
from typing import Any

import httpx

TERMINAL = {"finished", "failed", "rejected", "cancelled", "duplicate"}
DEMO = "demo-digits"
SMOKE = "demo-digits-smoke"
LENET_MEAN = (0.3055, 0.3055, 0.3055)
LENET_STD = (1.0, 1.0, 1.0)


@dataclass
class Call:
    at: float
    host: str
    method: str
    path: str
    status: int | None
    seconds: float
    error: str | None = None
    retry_after: str | None = None


@dataclass
class Run:
    """One submission the client got accepted (202), and what it saw of it."""

    id: int
    index: int
    phase: str
    accepted_at: float
    state: str = "submitted"
    ended_at: float | None = None
    shards_done: int = 0
    shards_total: int = 0
    progress_at: list[float] = field(default_factory=list)


def demo_definition(*, smoke: bool = False) -> dict[str, Any]:
    """The packaged demo benchmark's definition, as an admin would PUT it. ``smoke``: the same
    images and protocol on every 16th image (23) and certification only, named
    ``demo-digits-smoke``: the suite's smoke check runs in a minute or two."""
    text = (files("models.catalog") / "definitions" / f"{DEMO}.json").read_text()
    definition: dict[str, Any] = json.loads(text)
    if smoke:
        definition.update(name=SMOKE, title="Handwritten digits (fleet-check smoke)", stages={})
        definition["protocol"] = {**definition["protocol"], "skip": 16}
    return definition


def tiny_upload(
    index: int, benchmark: str = DEMO, sigma: float = 0.5
) -> tuple[bytes, dict[str, Any]]:
    """A LeNet-5 initialised from ``index`` (safetensors bytes) and its manifest."""
    import torch
    from safetensors.torch import save

    from certbench.nets.architectures import build_classifier

    torch.manual_seed(1000 + index)
    model = build_classifier("lenet5", num_classes=10, mean=LENET_MEAN, std=LENET_STD)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    manifest = {
        "benchmark": benchmark,
        "architecture": {"name": "lenet5", "kwargs": {}},
        "num_classes": 10,
        "preprocessing": {"mean": list(LENET_MEAN), "std": list(LENET_STD)},
        "smoothing": {"sigma": sigma},
        "metadata": {"name": f"fleet-check LeNet-5 #{index}", "authors": ["fleet-check"]},
        "input_size": [3, 32, 32],
    }
    return save(tensors), manifest


#: Seconds a request may take before it counts as "no answer" (an invariant the check breaks on),
#: on a quiet machine; ``--time-scale`` stretches it (``pace``).
REQUEST_TIMEOUT = 30.0


class Client:
    """REST calls across the API hosts, recorded."""

    def __init__(
        self, apis: dict[str, str], benchmark: str, *, timeout: float = REQUEST_TIMEOUT
    ) -> None:
        self.apis = apis  # host name -> base URL
        self.benchmark = benchmark
        self.timeout = timeout
        self.calls: list[Call] = []
        self.runs: dict[int, Run] = {}
        self._lock = threading.Lock()
        self._turn = 0
        self._local = threading.local()

    def _http(self) -> httpx.Client:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = httpx.Client(timeout=self.timeout, trust_env=False)
        return client

    def _next_host(self) -> str:
        with self._lock:
            self._turn += 1
            hosts = sorted(self.apis)
            return hosts[self._turn % len(hosts)]

    def call(
        self,
        method: str,
        path: str,
        *,
        host: str | None = None,
        token: str | None = None,
        **kwargs: Any,
    ) -> httpx.Response | None:
        """One request to ``host`` (else the next in turn), recorded; None on a transport error."""
        host = host or self._next_host()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        started = time.time()
        try:
            response = self._http().request(
                method, self.apis[host] + path, headers=headers, **kwargs
            )
        except httpx.TransportError as err:
            self._record(
                Call(
                    started,
                    host,
                    method,
                    path,
                    None,
                    time.time() - started,
                    error=f"{type(err).__name__}: {err}",
                )
            )
            return None
        self._record(
            Call(
                started,
                host,
                method,
                path,
                response.status_code,
                time.time() - started,
                retry_after=response.headers.get("retry-after"),
            )
        )
        return response

    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def retrying(
        self, method: str, path: str, *, attempts: int = 12, ok: set[int], **kwargs: Any
    ) -> httpx.Response:
        """``call`` until a status in ``ok`` (or another 4xx); 503s and transport errors are
        tried again on the next host, backing off 0.5, 1, 2 ... s (at most 8 s)."""
        wait = 0.5
        last: str = "no attempt"
        for _ in range(attempts):
            response = self.call(method, path, **kwargs)
            if response is not None and (
                response.status_code in ok or 400 <= response.status_code < 500
            ):
                return response
            last = "transport error" if response is None else f"{response.status_code}"
            time.sleep(wait)
            wait = min(8.0, wait * 2)
        raise RuntimeError(f"{method} {path}: no answer in {ok} after {attempts} tries ({last})")

    # --- the service's flows ------------------------------------------------------------------

    def load_benchmark(self, admin: str, definition: dict[str, Any]) -> None:
        response = self.retrying(
            "PUT", "/api/v1/admin/benchmarks", token=admin, ok={200}, json=definition
        )
        if response.status_code != 200:
            raise RuntimeError(f"loading benchmark {definition['name']}: {response.text}")

    def submitter(self, admin: str, name: str) -> str:
        user = self.retrying(
            "POST",
            "/api/v1/admin/users",
            token=admin,
            ok={201},
            json={"name": name, "role": "submitter"},
        )
        if user.status_code != 201:
            raise RuntimeError(f"creating user {name}: {user.text}")
        token = self.retrying(
            "POST",
            f"/api/v1/admin/users/{user.json()['id']}/tokens",
            token=admin,
            ok={201},
            json={},
        )
        if token.status_code != 201:
            raise RuntimeError(f"creating a token for {name}: {token.text}")
        secret: str = token.json()["token"]
        return secret

    def submit(self, token: str, index: int, phase: str) -> Run:
        """Upload run ``index``'s model until it is accepted (202)."""
        weights, manifest = tiny_upload(index, self.benchmark)
        response = self.retrying(
            "POST",
            "/api/v1/submissions",
            token=token,
            ok={202},
            files={
                "weights": ("model.safetensors", io.BytesIO(weights), "application/octet-stream"),
                "manifest": ("manifest.json", json.dumps(manifest).encode(), "application/json"),
            },
        )
        if response.status_code != 202:
            raise RuntimeError(f"run {index} refused: {response.status_code} {response.text}")
        return self.accepted(response, index, phase)

    def accepted(self, response: httpx.Response, index: int, phase: str) -> Run:
        """Track the run a 202 answer accepted (it must finish: the checker's first rule)."""
        run = Run(id=response.json()["id"], index=index, phase=phase, accepted_at=time.time())
        with self._lock:
            self.runs[run.id] = run
        return run

    def poll(self, token: str) -> None:
        """One GET of every unfinished run (through the next host in turn)."""
        for run in list(self.runs.values()):
            if run.ended_at is not None:
                continue
            response = self.call("GET", f"/api/v1/submissions/{run.id}", token=token)
            if response is None or response.status_code != 200:
                continue
            body = response.json()
            if body["shards_done"] > run.shards_done or body["state"] != run.state:
                run.progress_at.append(time.time())
            run.state, run.shards_done = body["state"], body["shards_done"]
            run.shards_total = body["shards_total"] or run.shards_total
            if run.state in TERMINAL:
                run.ended_at = time.time()

    def history(self) -> dict[str, Any]:
        with self._lock:
            return {
                "calls": [asdict(c) for c in self.calls],
                "runs": [asdict(r) for r in self.runs.values()],
            }


class Poller(threading.Thread):
    """Polls every run about once a second, and a public page, until stopped (the read load)."""

    def __init__(self, client: Client, token: str, interval: float = 1.0) -> None:
        super().__init__(name="fleet-poller", daemon=True)
        self.client, self.token, self.interval = client, token, interval
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._halt.wait(self.interval):
                self.client.poll(self.token)
                self.client.call("GET", f"/api/v1/leaderboards/{self.client.benchmark}")
        except BaseException as err:  # reported by the orchestrator, never lost
            self.error = err

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=60)
