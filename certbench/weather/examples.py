"""Example panels in the style of Wang et al., NeurIPS 2022 ML Safety Workshop, Fig. 1: clean,
random weather, simulation attack, and the difference between the attacked and the random image, for
a few images.

The panel itself is drawn by ``certbench.figures.write_weather_panel`` (a Vega-Lite spec, like
the web pages' figures). Examples can be kept as parquet (``write_examples`` /
``read_examples``: the float pictures as raw float32 bytes, so a panel drawn later is the panel
drawn now), which lets the service compute them on a worker and draw the PNG when it merges
results.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from certbench.errors import RecordsError
from certbench.smoothing import METADATA_KEY, read_table, write_table_atomic
from certbench.weather.attack import attacked_images
from certbench.weather.search import AttackConfig
from certbench.weather.threat import WeatherSet


@dataclass(frozen=True)
class WeatherExample:
    """One image's panel row; pictures are (H, W, 3) float32 in [0, 1], ``difference`` signed
    (attacked − random, in [−1, 1]). Predictions are the base classifier's."""

    index: int
    label: int
    weather: str
    severity: int
    clean: np.ndarray
    random: np.ndarray
    attacked: np.ndarray
    difference: np.ndarray
    random_prediction: int
    attacked_prediction: int


def weather_examples(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    *,
    weather: str,
    severity: int,
    config: AttackConfig | None = None,
    indices: torch.Tensor | Sequence[int] | None = None,
    device: torch.device | str | None = None,
    run_seed: int | None = None,
) -> list[WeatherExample]:
    """Attack a few images exactly as :func:`certbench.weather.attack.attack_base` does (same
    seeds, same indices: the same attacked images) and return their panel rows."""
    wset = WeatherSet.for_level(weather, severity, (config or AttackConfig()).truncation)
    clean, random, attacked, found = attacked_images(
        model, images, labels, wset, config=config, indices=indices, device=device,
        run_seed=run_seed,
    )  # fmt: skip
    idx = torch.arange(len(clean)) if indices is None else torch.as_tensor(indices)
    y = torch.as_tensor(labels).tolist()

    def hwc(t: torch.Tensor) -> np.ndarray:
        return t.permute(1, 2, 0).numpy().astype(np.float32)

    return [
        WeatherExample(
            index=int(idx[j]),
            label=int(y[j]),
            weather=weather,
            severity=severity,
            clean=hwc(clean[j]),
            random=hwc(random[j]),
            attacked=hwc(attacked[j]),
            difference=hwc(attacked[j] - random[j]),
            random_prediction=int(found.random_prediction[j]),
            attacked_prediction=int(found.attacked_prediction[j]),
        )
        for j in range(len(clean))
    ]


PICTURES = ("clean", "random", "attacked", "difference")
_SCALARS = {
    "index": pa.int64(),
    "label": pa.int64(),
    "weather": pa.string(),
    "severity": pa.int64(),
    "random_prediction": pa.int64(),
    "attacked_prediction": pa.int64(),
    "size": pa.int64(),
}
RECORD_TYPE = "weather-examples"


def write_examples(
    examples: Sequence[WeatherExample],
    path: str | Path,
    metadata: Mapping[str, object] | None = None,
) -> Path:
    """Parquet of example rows, atomically; pictures as raw float32 (H, W, 3) bytes."""
    schema = pa.schema(
        [*_SCALARS.items(), *((name, pa.binary()) for name in PICTURES)]
    ).with_metadata(
        {
            METADATA_KEY: json.dumps(
                {**dict(metadata or {}), "record_type": RECORD_TYPE}, sort_keys=True, default=str
            )
        }
    )
    rows = [
        {
            "index": e.index,
            "label": e.label,
            "weather": e.weather,
            "severity": e.severity,
            "random_prediction": e.random_prediction,
            "attacked_prediction": e.attacked_prediction,
            "size": int(e.clean.shape[0]),
            **{
                name: np.ascontiguousarray(getattr(e, name), dtype=np.float32).tobytes()
                for name in PICTURES
            },
        }
        for e in examples
    ]
    return write_table_atomic(pa.Table.from_pylist(rows, schema=schema), path)


def read_examples(path: str | Path) -> list[WeatherExample]:
    """Inverse of :func:`write_examples`.

    Raises:
        RecordsError: a missing file or one not written by :func:`write_examples`.
    """
    table = read_table(path)
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    kind = json.loads(raw).get("record_type") if raw else None
    missing = [n for n in (*_SCALARS, *PICTURES) if n not in table.column_names]
    if kind != RECORD_TYPE or missing:
        raise RecordsError(
            f"{str(path)!r} is not a weather-examples file (record_type {kind!r}, missing "
            f"columns {missing}); write it with write_examples."
        )
    out = []
    for row in table.to_pylist():
        shape = (row["size"], row["size"], 3)
        clean, random, attacked, difference = (
            np.frombuffer(row[n], dtype=np.float32).reshape(shape) for n in PICTURES
        )
        out.append(
            WeatherExample(
                index=row["index"],
                label=row["label"],
                weather=row["weather"],
                severity=row["severity"],
                clean=clean,
                random=random,
                attacked=attacked,
                difference=difference,
                random_prediction=row["random_prediction"],
                attacked_prediction=row["attacked_prediction"],
            )
        )
    return out
