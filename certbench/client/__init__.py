"""A small typed client of the certbench service (REST API v1), on httpx.

``Client`` (``certbench.client.rest``) sends the requests; ``certbench.client.types`` holds the
typed answers; ``certbench.client.errors`` the exceptions; ``certbench.client.config`` finds the
server and token (flags, environment, the file ``certbench login`` writes). The ``certbench``
commands submit, status, results, leaderboard and download are built on it
(``certbench.client_commands``), and ``certbench.zoo.load_model`` downloads published models.
"""

from certbench.client.config import DEFAULT_SERVER, Connection, resolve
from certbench.client.errors import (
    AuthenticationFailed,
    ClientError,
    HashMismatchError,
    NotFound,
    PermissionDenied,
    ServerUnreachable,
    WaitTimeout,
)
from certbench.client.rest import Client
from certbench.client.types import (
    EntryWeights,
    Estimate,
    Leaderboard,
    LeaderboardRow,
    Me,
    Quota,
    Results,
    Submission,
    TestSetProgress,
    TestSetResult,
    Throughput,
    WeightsLink,
)

__all__ = [
    "DEFAULT_SERVER",
    "AuthenticationFailed",
    "Client",
    "ClientError",
    "Connection",
    "EntryWeights",
    "Estimate",
    "HashMismatchError",
    "Leaderboard",
    "LeaderboardRow",
    "Me",
    "NotFound",
    "PermissionDenied",
    "Quota",
    "Results",
    "ServerUnreachable",
    "Submission",
    "TestSetProgress",
    "TestSetResult",
    "Throughput",
    "WaitTimeout",
    "WeightsLink",
    "connect",
    "resolve",
]


def connect(server: str | None = None, token: str | None = None) -> Client:
    """A Client for ``server``/``token`` resolved as the CLI does: arguments, then
    CERTBENCH_SERVER / CERTBENCH_TOKEN, then the config file of ``certbench login``."""
    found = resolve(server, token)
    return Client(found.server, found.token)
