"""A small typed client of the certbench service (REST API v1), on httpx.

``Client`` (``certbench.client.rest``) sends the requests; ``certbench.client.types`` holds the
typed answers; ``certbench.client.errors`` the exceptions; ``certbench.client.config`` finds the
server and token (flags, environment, the file ``certbench login`` writes). The ``certbench``
commands submit, status, results, leaderboard and download are built on it
(``certbench.cli.client``), and ``certbench.client.zoo.load_model`` downloads published models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.client.config import (
        DEFAULT_SERVER,
        Connection,
        config_path,
        load_config,
        resolve,
        resolve_server,
        save_config,
    )
    from certbench.client.errors import (
        AuthenticationFailed,
        ClientError,
        HashMismatchError,
        NotFound,
        PermissionDenied,
        ServerUnreachable,
        WaitTimeout,
    )
    from certbench.client.rest import Client, connect, refuse_swapped
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
    from certbench.client.zoo import download

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
