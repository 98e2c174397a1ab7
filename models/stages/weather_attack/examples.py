"""The worst-case weather stage's example panels (Wang et al., NeurIPS 2022 ML Safety Workshop,
Fig. 1): the first images of the subset, attacked as the base units attack them, drawn clean /
random / attacked / difference for every weather at the highest severity
(``models.stages.weather_attack.stage``'s ``examples`` unit).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from models.core.errors import StorageError
from models.stages.weather_attack.protocol import EXAMPLES, WeatherSpec, result_seeds

if TYPE_CHECKING:
    from models.stages.base import MergeContext, RunContext, UnitResult
    from models.stages.shard_files import ShardSet
    from models.stages.work import WorkItem


def run_examples(
    item: WorkItem,
    model: Any,
    images: Any,
    window: slice,
    spec: WeatherSpec,
    context: RunContext,
    metadata: dict[str, Any],
) -> int:
    """Attack the shard's example images as the base units do (same seeds, same images) and
    keep their pictures for every weather at the highest severity."""
    from certbench.weather import weather_examples, write_examples

    count = window.stop - window.start
    rows = []
    for k, weather in enumerate(spec.weathers, start=1):
        rows += weather_examples(
            model, images.images[window], images.labels[window], weather=weather,
            severity=spec.example_severity, config=spec.attack_config(),
            indices=images.indices[window], device=context.device, run_seed=item.seed,
        )  # fmt: skip
        context.on_progress(count * k // len(spec.weathers))
    write_examples(rows, context.target, metadata)
    return count


def merge_examples(
    item: WorkItem, spec: WeatherSpec, found: ShardSet, context: MergeContext
) -> UnitResult:
    """Merge the example shards and draw one Fig. 1 panel (PNG) per weather next to them; the
    summary lists each file's path relative to the artifacts folder under ``files``."""
    from certbench.errors import RecordsError
    from certbench.figures import write_weather_panel
    from certbench.weather import read_examples, write_examples

    try:
        examples = [e for s in found.shards for e in read_examples(s.path)]
    except RecordsError as err:
        raise StorageError(f"weather-attack examples: {err}") from err
    relpath, target = context.target_for(EXAMPLES)
    seeds = result_seeds(item, spec)
    write_examples(examples, target, {"submission_id": item.submission_id, **seeds})
    folder = PurePosixPath(relpath).parent
    files: dict[str, str] = {}
    panels = []
    for weather in spec.weathers:
        mine = sorted((e for e in examples if e.weather == weather), key=lambda e: e.index)
        name = f"examples-{weather}-{spec.example_severity}.png"
        skip = max(spec.images.subset_skip, 1)  # labelled by their test positions
        write_weather_panel(
            mine, Path(target).parent / name, positions=[e.index // skip for e in mine]
        )
        files[name] = str(folder / name)
        panels.append(
            {
                "weather": weather,
                "severity": spec.example_severity,
                "file": name,
                "images": [
                    {
                        "index": e.index,
                        "label": e.label,
                        "random_prediction": e.random_prediction,
                        "attacked_prediction": e.attacked_prediction,
                    }
                    for e in mine
                ],
            }
        )
    return found.result(
        EXAMPLES,
        summary={"kind": "examples", "files": files, "panels": panels},
        records_path=relpath,
        count=len({e.index for e in examples}),
        protocol=spec.describe(),
        seeds={"weather_seed": spec.seed},
    )
