"""Training checkpoints without pickle: tensors in safetensors, everything else in JSON.

A checkpoint folder holds ``model.safetensors`` (the classifier's state dict, buffers included),
``optimizer.safetensors`` (every tensor of the optimizer's per-parameter state, keyed
``state.<param id>.<name>``) and ``state.json``: completed epochs, the run configuration, the
optimizer's parameter groups and non-tensor state, the LR scheduler's state and the SHA-256 of
both tensor files. ``state.json`` is written last, atomically, as the commit marker: a crash
mid-write leaves the previous ``state.json`` whose hashes no longer match, and loading refuses
it instead of resuming from torn files. Nothing is ever read with ``torch.load`` or pickle.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from certbench.errors import TrainingError

__all__ = ["CHECKPOINT_DIR", "Checkpoint", "load_checkpoint", "save_checkpoint"]

CHECKPOINT_DIR = "checkpoint"
FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
STATE_FILE = "state.json"


@dataclass(frozen=True)
class Checkpoint:
    """What :func:`load_checkpoint` restored: the completed epoch count and the saved extras."""

    epoch: int
    config: dict[str, Any]
    extra: dict[str, Any]


def _atomic(path: Path, write: Callable[[Path], object]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _split_optimizer(state: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Optimizer state dict -> (tensors for safetensors, JSON-able rest)."""
    tensors: dict[str, torch.Tensor] = {}
    plain: dict[str, dict[str, Any]] = {}
    for param_id, entries in state["state"].items():
        for name, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{param_id}.{name}"] = value.detach().cpu().contiguous()
            else:
                plain.setdefault(str(param_id), {})[name] = value
    return tensors, {"param_groups": state["param_groups"], "plain_state": plain}


def _join_optimizer(tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, param_id, name = key.split(".", 2)
        state.setdefault(int(param_id), {})[name] = value
    for param_id, entries in meta["plain_state"].items():
        state.setdefault(int(param_id), {}).update(entries)
    return {"state": state, "param_groups": meta["param_groups"]}


def _scheduler_json(state: Mapping[str, Any]) -> dict[str, Any]:
    """MultiStepLR keeps its milestones in a Counter (int keys): store them as pairs."""
    out = dict(state)
    if isinstance(out.get("milestones"), Counter):
        out["milestones"] = {"counter": sorted(out["milestones"].items())}
    return out


def _scheduler_state(state: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(state)
    milestones = out.get("milestones")
    if isinstance(milestones, dict) and "counter" in milestones:
        out["milestones"] = Counter({int(k): int(v) for k, v in milestones["counter"]})
    return out


def save_checkpoint(
    out_dir: Path | str,
    *,
    epoch: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    config: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write the checkpoint after ``epoch`` completed epochs into ``out_dir/checkpoint``."""
    folder = Path(out_dir) / CHECKPOINT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    model_tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    opt_tensors, opt_meta = _split_optimizer(optimizer.state_dict())
    _atomic(folder / MODEL_FILE, lambda p: save_file(model_tensors, str(p)))
    _atomic(folder / OPTIMIZER_FILE, lambda p: save_file(opt_tensors, str(p)))
    record = {
        "format": FORMAT_VERSION,
        "epoch": epoch,
        "config": dict(config),
        "optimizer": opt_meta,
        "scheduler": _scheduler_json(scheduler.state_dict()),
        "extra": dict(extra or {}),
        "sha256": {name: _sha256(folder / name) for name in (MODEL_FILE, OPTIMIZER_FILE)},
    }
    try:
        text = json.dumps(record, indent=2, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TrainingError(f"checkpoint state is not JSON-serialisable: {err}") from err
    _atomic(folder / STATE_FILE, lambda p: p.write_text(text, encoding="utf-8"))
    return folder


def read_state(out_dir: Path | str) -> dict[str, Any] | None:
    """The checkpoint's ``state.json`` (None when the folder has no checkpoint)."""
    path = Path(out_dir) / CHECKPOINT_DIR / STATE_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise TrainingError(f"cannot read checkpoint state {str(path)!r}: {err}") from err
    if not isinstance(record, dict) or record.get("format") != FORMAT_VERSION:
        raise TrainingError(
            f"{str(path)!r} is not a certbench checkpoint of format {FORMAT_VERSION}; start a "
            "new run in another --out folder"
        )
    return record


def load_checkpoint(
    out_dir: Path | str,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> Checkpoint:
    """Restore model, optimizer and scheduler in place from ``out_dir/checkpoint``.

    Raises TrainingError when there is no checkpoint, a file's hash does not match
    ``state.json`` (an interrupted write) or the tensors do not fit the model.
    """
    folder = Path(out_dir) / CHECKPOINT_DIR
    record = read_state(out_dir)
    if record is None:
        raise TrainingError(
            f"no checkpoint in {str(folder)!r} to resume from; drop --resume to start a new run"
        )
    for name, expected in record["sha256"].items():
        path = folder / name
        if not path.is_file() or _sha256(path) != expected:
            raise TrainingError(
                f"checkpoint file {str(path)!r} is missing or does not match state.json (an "
                "interrupted write); delete the checkpoint folder and restart the run"
            )
    try:
        model_tensors = load_file(str(folder / MODEL_FILE), device="cpu")
        opt_tensors = load_file(str(folder / OPTIMIZER_FILE), device="cpu")
        model.load_state_dict(model_tensors, strict=True)
        optimizer.load_state_dict(_join_optimizer(opt_tensors, record["optimizer"]))
        scheduler.load_state_dict(_scheduler_state(record["scheduler"]))
    except (SafetensorError, RuntimeError, KeyError, ValueError) as err:
        raise TrainingError(
            f"checkpoint in {str(folder)!r} does not fit this run ({err}); resume with the "
            "same architecture and recipe, or start a new --out folder"
        ) from err
    return Checkpoint(int(record["epoch"]), dict(record["config"]), dict(record["extra"]))
