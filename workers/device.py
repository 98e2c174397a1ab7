"""Which torch device a worker process computes on."""

from __future__ import annotations

import torch

from workers.errors import WorkerConfigError


def resolve_device(configured: str | None) -> torch.device:
    """``CERTBENCH_WORKER_DEVICE`` if set (``cuda:1``, ``cpu``), else the first GPU, else CPU.

    Run one worker process per GPU, each with its own device (or CUDA_VISIBLE_DEVICES).
    """
    if configured is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(configured)
    except RuntimeError as err:
        raise WorkerConfigError(
            f"CERTBENCH_WORKER_DEVICE={configured!r} is not a torch device; use e.g. 'cpu', "
            "'cuda' or 'cuda:1'"
        ) from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise WorkerConfigError(
            f"CERTBENCH_WORKER_DEVICE={configured!r} but CUDA is not available on this machine; "
            "unset it to run on CPU"
        )
    return device
