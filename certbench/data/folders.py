"""Local folders in the Hugging Face Hub layout (README.md with YAML ``configs:`` and parquet
files, as ``hf download`` or :mod:`certbench.data.writer` make them): their configs, the data files
of a config's split, and that split read as an :class:`~certbench.data.image_set.ImageSet`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from certbench.data.decoding import image_set_from_rows
from certbench.data.image_set import ImageSet, Subset, selected_positions
from certbench.errors import DataSourceError

SPLITS = ("train", "test")


def folder_configs(folder: Path) -> dict[str, dict[str, list[str]]]:
    """Config name -> split -> data file patterns, from README.md's YAML ``configs:``.

    Without a ``configs:`` section the folder is one ``default`` config whose split files are
    named ``<split>.parquet`` or ``<split>-*.parquet`` (the names ``Dataset.to_parquet`` and the
    Hub use). Patterns are resolved only for the config being loaded, so one broken config
    never blocks the others.
    """
    entries = _readme_configs(folder)
    if not entries:
        splits = {
            split: sorted(
                str(p.relative_to(folder))
                for p in folder.rglob("*.parquet")
                if p.stem == split or p.stem.startswith(f"{split}-")
            )
            for split in SPLITS
        }
        splits = {s: files for s, files in splits.items() if files}
        if not splits:
            raise DataSourceError(
                f"folder {str(folder)!r} has no `configs:` in README.md and no parquet files "
                "named <split>.parquet or <split>-*.parquet"
            )
        return {"default": splits}
    configs: dict[str, dict[str, list[str]]] = {}
    for entry in entries:
        name = entry.get("config_name", "default") if isinstance(entry, dict) else None
        if not isinstance(name, str) or "data_files" not in entry:
            raise DataSourceError(
                f"{str(folder / 'README.md')!r}: every `configs:` entry needs `config_name` and "
                f"`data_files`, found {entry!r}"
            )
        configs[name] = _split_patterns(entry["data_files"], folder, name)
    return configs


def card_benchmark(folder: Path | str) -> str | None:
    """The certbench benchmark a local data folder belongs to, from its card: the
    ``certbench_benchmark`` key (written by ``certbench datasets demo``), or the demo's title for
    folders written before that key existed; None for any other folder or a missing card."""
    from certbench.data.demo import DEMO_BENCHMARK, DEMO_PRETTY_NAME
    from certbench.data.writer import BENCHMARK_KEY

    metadata = _card_metadata(Path(folder))
    named = metadata.get(BENCHMARK_KEY)
    if isinstance(named, str) and named.strip():
        return named.strip()
    return DEMO_BENCHMARK if metadata.get("pretty_name") == DEMO_PRETTY_NAME else None


def _card_metadata(folder: Path) -> dict[str, Any]:
    readme = folder / "README.md"
    if not readme.is_file():
        return {}
    from huggingface_hub.repocard import metadata_load

    try:
        return metadata_load(readme) or {}
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as err:
        raise DataSourceError(f"cannot parse the YAML header of {str(readme)!r}: {err}") from err


def _readme_configs(folder: Path) -> list[Any]:
    metadata = _card_metadata(folder)
    readme = folder / "README.md"
    configs = metadata.get("configs", [])
    if not isinstance(configs, list):
        raise DataSourceError(
            f"{str(readme)!r}: `configs:` must be a list of entries, found {configs!r}"
        )
    return configs


def _split_patterns(data_files: Any, folder: Path, config: str) -> dict[str, list[str]]:
    """Normalise the forms ``data_files`` takes in a dataset card to split -> patterns."""

    def as_list(value: Any) -> list[str]:
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise DataSourceError(
                f"{str(folder / 'README.md')!r}: config {config!r} has a malformed data_files "
                f"entry {value!r}; expected a path pattern or a list of them"
            )
        return values

    if isinstance(data_files, str) or (
        isinstance(data_files, list) and all(isinstance(v, str) for v in data_files)
    ):
        return {"train": as_list(data_files)}
    if isinstance(data_files, dict):
        return {str(split): as_list(value) for split, value in data_files.items()}
    if isinstance(data_files, list):
        out: dict[str, list[str]] = {}
        for item in data_files:
            if not isinstance(item, dict) or "path" not in item:
                raise DataSourceError(
                    f"{str(folder / 'README.md')!r}: config {config!r} has a data_files item "
                    f"{item!r}; expected `split:` and `path:`"
                )
            out.setdefault(str(item.get("split", "train")), []).extend(as_list(item["path"]))
        return out
    raise DataSourceError(
        f"{str(folder / 'README.md')!r}: config {config!r} has data_files {data_files!r}; "
        "expected a pattern, a list, or a list of {split, path}"
    )


def glob_files(folder: Path, config: str, split: str, patterns: list[str]) -> list[Path]:
    root = folder.resolve()
    files: list[Path] = []
    for pattern in patterns:
        matches = sorted(p for p in folder.glob(pattern) if p.is_file())
        if not matches:
            raise DataSourceError(
                f"config {config!r} split {split!r}: data file pattern {pattern!r} matches no "
                f"file in {str(folder)!r}"
            )
        for match in matches:
            if not match.resolve().is_relative_to(root):
                raise DataSourceError(
                    f"config {config!r}: data file {str(match)!r} lies outside the dataset "
                    f"folder {str(folder)!r}"
                )
            if match.suffix != ".parquet":
                raise DataSourceError(
                    f"config {config!r}: data file {str(match)!r} is not parquet; certbench reads "
                    "Hub-layout folders made of parquet files"
                )
        files.extend(matches)
    return files


def load_folder(folder: Path, config: str | None, split: str, subset: Subset) -> ImageSet:
    configs = folder_configs(folder)
    config = choose_config(folder, configs, config)
    splits = configs[config]
    if split not in splits:
        raise DataSourceError(
            f"unknown split {split!r} for config {config!r} in {str(folder)!r}; available: "
            f"{sorted(splits)}"
        )
    files = glob_files(folder, config, split, splits[split])
    try:
        tables = [pq.read_table(path) for path in files]
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    except (pa.ArrowException, OSError) as err:
        raise DataSourceError(
            f"cannot read the parquet files of config {config!r} split {split!r} in "
            f"{str(folder)!r}: {err}"
        ) from err
    from datasets import Features

    name = f"{folder.name}/{config}/{split}"
    positions = selected_positions(subset, table.num_rows, name)
    return image_set_from_rows(
        table.take(pa.array(positions)),
        Features.from_arrow_schema(tables[0].schema),
        name=name,
        positions=positions,
    )


def choose_config(folder: Path, configs: Mapping[str, Any], config: str | None) -> str:
    if config is None:
        if len(configs) == 1:
            return next(iter(configs))
        raise DataSourceError(
            f"{str(folder)!r} has {len(configs)} configs; choose one with config=, one of "
            f"{list(configs)}"
        )
    if config not in configs:
        raise DataSourceError(
            f"unknown config {config!r} in {str(folder)!r}; available: {list(configs)}"
        )
    return config
