"""The one place stages are registered (like ``certbench.nets.architectures`` for networks).

Built-in stages are listed in ``BUILTIN``; a deployment (or a test) adds its own without touching
the pipeline, by either
- an entry point in the ``certbench.stages`` group naming a module, or
- ``CERTBENCH_STAGE_PLUGINS=package.module[,other.module]`` in the environment of the API and of
  every worker (the module is imported; its ``@register`` decorators run).
Stages are instances; the order of registration is the order the pipeline plans and shows them.
"""

from __future__ import annotations

import importlib
import os
import threading
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, TypeVar

from models.core.errors import BenchmarkDefinitionError
from models.db.entities import declare_figures
from models.stages.base import Stage

if TYPE_CHECKING:
    from models.stages.work import WorkItem

BUILTIN = (
    "models.stages.certification.stage",
    "models.stages.pd_robustness.stage",
    "models.stages.fourier_sensitivity.stage",
    "models.stages.weather_attack.stage",
    "models.stages.fourier_lens.stage",
)
ENTRY_POINT_GROUP = "certbench.stages"
PLUGINS_ENV = "CERTBENCH_STAGE_PLUGINS"

S = TypeVar("S", bound=type[Stage])
_stages: dict[str, Stage] = {}
_loaded = False
_lock = threading.RLock()


def register(cls: S) -> S:
    """Class decorator: register one instance of a stage under ``cls.name`` and declare its
    figures to the leaderboard entries (``models.db.entities.declare_figures``).

    Re-registering the same class (a module imported twice) is harmless; another class under a
    taken name is refused, so two plug-ins cannot silently replace each other.
    """
    with _lock:
        existing = _stages.get(cls.name)
        if existing is not None and type(existing).__qualname__ != cls.__qualname__:
            raise BenchmarkDefinitionError(
                f"stage name {cls.name!r} is already registered by "
                f"{type(existing).__module__}.{type(existing).__qualname__}"
            )
        stage = _stages[cls.name] = cls()
        declare_figures(spec.key for spec in stage.all_metric_specs())
    return cls


def _load() -> None:
    global _loaded
    with _lock:
        if _loaded:
            return
        _loaded = True
        modules = list(BUILTIN)
        modules += [ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)]
        modules += [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError as err:
                raise BenchmarkDefinitionError(
                    f"stage plug-in module {module!r} cannot be imported ({err}); fix "
                    f"{PLUGINS_ENV} or the {ENTRY_POINT_GROUP!r} entry point"
                ) from err


def all_stages() -> list[Stage]:
    """Every registered stage, in registration order (certification first)."""
    _load()
    return list(_stages.values())


def enabled_stages(item: WorkItem) -> list[Stage]:
    """The registered stages this submission's benchmark runs, in registration order."""
    return [stage for stage in all_stages() if stage.enabled(item)]


def get(name: str) -> Stage:
    """The stage called ``name``. Raises BenchmarkDefinitionError naming the known stages."""
    _load()
    stage = _stages.get(name)
    if stage is None:
        raise BenchmarkDefinitionError(
            f"unknown evaluation stage {name!r}; registered stages: {sorted(_stages)}. A plug-in "
            f"stage must be importable by the API and every worker ({PLUGINS_ENV})"
        )
    return stage


def queues() -> list[str]:
    """The distinct queues of the registered stages, in order."""
    return list(dict.fromkeys(stage.queue for stage in all_stages()))


def metric_keys() -> dict[str, bool]:
    """Every sortable metric key of any stage → higher is better (for validation of sort keys)."""
    out: dict[str, bool] = {}
    for stage in all_stages():
        for spec in stage.all_metric_specs():
            out[spec.key] = spec.higher_is_better
    return out
