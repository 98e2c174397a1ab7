"""Effective robustness across entries, and which model metric best explains OOD accuracy.

Accuracy on the line (Miller et al., ICML 2021, arXiv:2107.04649): across models, the probit of the
OOD accuracy is close to a linear function of the probit of the ID accuracy. A model's
*effective robustness* (Taori et al., NeurIPS 2020; Andreassen et al. 2021, arXiv:2106.15831) is how
far its OOD accuracy lies above that trend. Fridovich-Keil et al., NeurIPS 2022 (§4, Tables 1–3) fit
the same kind of line with each model metric (ID accuracy, Jacobian norm, pixel/amplitude/phase
HFF, CD) as the predictor of probit OOD accuracy and compare slopes m and R².

Everything here is a pure function of counts and metric values (plain dataclasses), shared by the
service and ``certbench effective-robustness``. A fit covers entries of one σ only: smoothed
classifiers at different noise levels lie on different lines, so mixing them raises.

Normal and Student quantiles come from ``scipy.special`` (``ndtri``, ``ndtr``, ``stdtrit``, the
functions behind ``scipy.stats.norm``/``t``): the same numbers at a fraction of the per-call cost,
which matters because the service refits a whole leaderboard on every read. SciPy is imported
on the first fit, not with this module: the API imports ``Accuracy`` at start-up, and scipy.stats
made 2 of the 7 s that every API process spent importing the app.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from certbench.errors import EffectiveRobustnessError

LEVEL = 0.95
ID_ACCURACY = "id_accuracy"
"""Predictor name of the probit ID accuracy in :func:`metric_predictors`."""


def _normal_pdf(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _probits(accuracies: Sequence[Accuracy]) -> tuple[np.ndarray, np.ndarray]:
    """``Accuracy.probit`` and ``Accuracy.probit_se`` of many accuracies at once."""
    correct = np.array([a.correct for a in accuracies], dtype=np.float64)
    total = np.array([a.total for a in accuracies], dtype=np.float64)
    p = np.clip(correct / total, 0.5 / total, 1 - 0.5 / total)
    from scipy.special import ndtri

    z = ndtri(p)
    density = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return z, np.sqrt(p * (1 - p) / total) / density


@dataclass(frozen=True)
class Accuracy:
    """``correct`` of ``total`` test images (certified accuracy at r = 0 counts an abstention as
    wrong). The probit is taken at p clipped to [1/(2n), 1 − 1/(2n)] so 0 % and 100 % stay
    finite."""

    correct: int
    total: int

    def __post_init__(self) -> None:
        ok = isinstance(self.correct, int) and isinstance(self.total, int)
        if not ok or self.total < 1 or not 0 <= self.correct <= self.total:
            raise EffectiveRobustnessError(
                f"accuracy counts correct={self.correct!r}, total={self.total!r}: need integers "
                "with 0 <= correct <= total and total >= 1"
            )

    @property
    def value(self) -> float:
        return self.correct / self.total

    def _clipped(self) -> float:
        half = 0.5 / self.total
        return min(max(self.value, half), 1 - half)

    def probit(self) -> float:
        from scipy.special import ndtri

        return float(ndtri(self._clipped()))

    def probit_se(self) -> float:
        """Delta-method standard error of the probit: √(p(1−p)/n) / φ(Φ⁻¹(p))."""
        p = self._clipped()
        return math.sqrt(p * (1 - p) / self.total) / _normal_pdf(self.probit())

    def clopper_pearson(self, level: float = LEVEL) -> tuple[float, float]:
        """Two-sided exact interval (what the figures of Fridovich-Keil et al., NeurIPS 2022 draw
        around accuracies)."""
        from scipy.stats import beta

        a = (1 - level) / 2
        k, n = self.correct, self.total
        low = float(beta.ppf(a, k, n - k + 1)) if k > 0 else 0.0
        high = float(beta.ppf(1 - a, k + 1, n - k)) if k < n else 1.0
        return low, high

    @staticmethod
    def pooled(parts: Iterable[Accuracy]) -> Accuracy:
        """One accuracy over several test sets (a band or a benchmark aggregate)."""
        items = list(parts)
        if not items:
            raise EffectiveRobustnessError("pooled() needs at least one accuracy")
        return Accuracy(sum(a.correct for a in items), sum(a.total for a in items))


@dataclass(frozen=True)
class Entry:
    """One leaderboard entry: ID accuracy, OOD accuracies by test-set name, model metrics, and
    its architecture (the paper fits metric predictors per architecture; "" = not known)."""

    name: str
    sigma: float
    id_accuracy: Accuracy
    ood: Mapping[str, Accuracy]
    metrics: Mapping[str, float] = field(default_factory=dict)
    architecture: str = ""


@dataclass(frozen=True)
class LinearFit:
    """Ordinary least squares y = intercept + slope·x over n points (scipy ``linregress``)."""

    slope: float
    intercept: float
    r2: float
    n: int
    x_mean: float
    sxx: float
    residual_sd: float

    def predict(self, x: float) -> float:
        return self.intercept + self.slope * x

    def mean_se(self, x: float) -> float:
        """Standard error of the fitted line at x: s·√(1/n + (x − x̄)²/Sxx)."""
        return self.residual_sd * math.sqrt(1 / self.n + (x - self.x_mean) ** 2 / self.sxx)

    def to_dict(self) -> dict[str, float | int]:
        return {"slope": self.slope, "intercept": self.intercept, "r2": self.r2, "n": self.n}


def fit_line(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> LinearFit:
    """OLS fit; needs at least 3 points (one residual degree of freedom) and x not constant."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if xs.shape != ys.shape or xs.ndim != 1:
        raise EffectiveRobustnessError(f"x and y must be equal-length vectors, got {xs.shape}")
    if len(xs) < 3:
        raise EffectiveRobustnessError(
            f"a trend needs at least 3 entries, got {len(xs)}; add entries of the same σ"
        )
    sxx = float(((xs - xs.mean()) ** 2).sum())
    if sxx <= 0:
        raise EffectiveRobustnessError("every entry has the same x value: no line can be fitted")
    from scipy.stats import linregress

    result = linregress(xs, ys)
    residuals = ys - (result.intercept + result.slope * xs)
    return LinearFit(
        slope=float(result.slope),
        intercept=float(result.intercept),
        r2=float(result.rvalue**2),
        n=len(xs),
        x_mean=float(xs.mean()),
        sxx=sxx,
        residual_sd=math.sqrt(float((residuals**2).sum()) / (len(xs) - 2)),
    )


def single_sigma(entries: Sequence[Entry]) -> float:
    """The σ all entries share; raises when they mix noise levels (fits are per σ)."""
    sigmas = sorted({float(e.sigma) for e in entries})
    if len(sigmas) != 1:
        raise EffectiveRobustnessError(
            f"entries mix noise levels σ = {sigmas}; fit each σ separately "
            "(group the entries by sigma first)"
        )
    return sigmas[0]


@dataclass(frozen=True)
class ERValue:
    """Effective robustness of one entry on one OOD set, in the probit domain (``value``, with
    its interval) and as an accuracy difference (``accuracy_gain`` = OOD accuracy − Φ(trend))."""

    name: str
    ood_set: str
    value: float
    low: float
    high: float
    se: float
    id_accuracy: float
    ood_accuracy: float
    expected_accuracy: float

    @property
    def accuracy_gain(self) -> float:
        return self.ood_accuracy - self.expected_accuracy


@dataclass(frozen=True)
class Trend:
    """The probit-domain fit of one OOD set across the entries of one σ, with every entry's ER."""

    ood_set: str
    sigma: float
    fit: LinearFit
    entries: tuple[ERValue, ...]


def effective_robustness(entries: Sequence[Entry], ood_set: str, level: float = LEVEL) -> Trend:
    """Fit Φ⁻¹(OOD) = a + b·Φ⁻¹(ID) across the entries that have ``ood_set``; ER_i = y_i − ŷ(x_i).

    ER is measured from the line through *all* entries, the one a plot shows. Its interval is
    ER ± q·se with se² = se(y_i)² + b²·se(x_i)² + se_line(x_i)²: the entry's own binomial
    uncertainty in probit OOD and ID accuracy (delta method; ID error moves the trend value by
    the slope), plus the standard error of the fitted line at x_i. It is a confidence interval
    for the entry's distance from the trend, not a prediction interval: the scatter of the other
    entries around the line is what ER measures, not noise about this entry. The entry's own
    point helps fit the line; treating the two as independent drops a covariance that would
    shrink se (by 2·h_ii·se(y_i)²), so the interval errs wide. q is Student's t at the
    Welch–Satterthwaite degrees of freedom, ν = se⁴ / (se_line⁴ / (n − 2)) (the binomial
    terms are known variances), so few entries give wide intervals.
    """
    from scipy.special import ndtr, ndtri, stdtrit

    sigma = single_sigma(entries)
    rows = [e for e in entries if ood_set in e.ood]
    if len(rows) < 3:
        raise EffectiveRobustnessError(
            f"OOD set {ood_set!r} has {len(rows)} entries at σ = {sigma}; a trend needs 3"
        )
    x, x_se = _probits([e.id_accuracy for e in rows])
    y, y_se = _probits([e.ood[ood_set] for e in rows])
    fit = fit_line(x, y)
    expected = fit.intercept + fit.slope * x
    line_se = fit.residual_sd * np.sqrt(1 / fit.n + (x - fit.x_mean) ** 2 / fit.sxx)
    se = np.sqrt(y_se**2 + (fit.slope * x_se) ** 2 + line_se**2)
    with np.errstate(divide="ignore"):
        dof = np.where(line_se > 0, se**4 / (line_se**4 / (fit.n - 2)), np.inf)
    q = np.where(np.isfinite(dof), stdtrit(np.where(np.isfinite(dof), dof, 1.0), 0.5 + level / 2),
                 ndtri(0.5 + level / 2))  # fmt: skip
    er, half, trend_accuracy = y - expected, q * se, ndtr(expected)
    values = [
        ERValue(
            name=e.name,
            ood_set=ood_set,
            value=float(er[i]),
            low=float(er[i] - half[i]),
            high=float(er[i] + half[i]),
            se=float(se[i]),
            id_accuracy=e.id_accuracy.value,
            ood_accuracy=e.ood[ood_set].value,
            expected_accuracy=float(trend_accuracy[i]),
        )
        for i, e in enumerate(rows)
    ]
    return Trend(ood_set=ood_set, sigma=sigma, fit=fit, entries=tuple(values))


@dataclass(frozen=True)
class PredictorFit:
    """How well one metric predicts probit OOD accuracy on one OOD set (Fridovich-Keil et al.,
    NeurIPS 2022, Tables 1–3: slope m and R²). NaN slope/R² when fewer than 3 entries have
    the metric or it is constant."""

    ood_set: str
    metric: str
    slope: float
    intercept: float
    r2: float
    n: int


def metric_predictors(
    entries: Sequence[Entry], ood_set: str, metrics: Sequence[str] | None = None
) -> list[PredictorFit]:
    """One OLS per metric: Φ⁻¹(OOD accuracy) = c + m·metric, over the entries having both.

    This pools every entry given; the paper's tables fit each architecture apart and average
    (:func:`certbench.lens.predictors.per_architecture_predictors`, which calls this per group).

    ``id_accuracy`` enters as its probit (the paper's accuracy-on-the-line slope, ≈ 1 in
    Table 1); the other metrics enter as they are (HFF ∈ [0, 1], CD in images, Jacobian norm),
    so their slopes read in probit units per unit of the metric, as in the paper's tables.
    """
    single_sigma(entries)
    names = list(metrics) if metrics is not None else all_metrics(entries)
    out = []
    for name in names:
        pairs = [
            (_predictor(e, name), e.ood[ood_set].probit())
            for e in entries
            if ood_set in e.ood and (name == ID_ACCURACY or name in e.metrics)
        ]
        xs = np.array([p[0] for p in pairs], dtype=np.float64)
        if len(pairs) < 3 or np.ptp(xs) == 0 or not np.all(np.isfinite(xs)):
            out.append(PredictorFit(ood_set, name, math.nan, math.nan, math.nan, len(pairs)))
            continue
        fit = fit_line(xs, [p[1] for p in pairs])
        out.append(PredictorFit(ood_set, name, fit.slope, fit.intercept, fit.r2, fit.n))
    return out


def _predictor(entry: Entry, name: str) -> float:
    return entry.id_accuracy.probit() if name == ID_ACCURACY else float(entry.metrics[name])


def all_metrics(entries: Sequence[Entry]) -> list[str]:
    """``id_accuracy`` then every metric name any entry carries, sorted."""
    return [ID_ACCURACY, *sorted({m for e in entries for m in e.metrics})]


def ood_sets(entries: Sequence[Entry]) -> list[str]:
    """Every OOD set name any entry carries, sorted."""
    return sorted({name for e in entries for name in e.ood})


def group_by_sigma(entries: Sequence[Entry]) -> dict[float, list[Entry]]:
    """Entries by σ, ascending: the only valid way to analyse a mixed collection."""
    groups: dict[float, list[Entry]] = {}
    for e in entries:
        groups.setdefault(float(e.sigma), []).append(e)
    return dict(sorted(groups.items()))


# --------------------------------------------------------------------------- JSON input


def entries_from_json(path: str | Path) -> list[Entry]:
    """Entries of a results file: one object, a list of objects, or ``{"entries": [...]}``.

    Each object: ``{"name": str, "sigma": float, "id": {"correct": int, "total": int},
    "ood": {SET: {"correct": int, "total": int}, ...}, "metrics": {NAME: float, ...},
    "lens_summary": "summary.json", "architecture": str}``; ``metrics``, ``lens_summary`` and
    ``architecture`` (the paper fits predictors per architecture) are optional. A
    ``lens_summary`` (the summary JSON of ``certbench fourier-lens``, path relative to the file)
    contributes the means of its metrics; explicit ``metrics`` win.
    """
    source = Path(path)
    try:
        data = json.loads(source.read_text())
    except (OSError, ValueError) as err:
        raise EffectiveRobustnessError(f"cannot read results file {str(source)!r}: {err}") from err
    items = data.get("entries", data) if isinstance(data, dict) else data
    items = [items] if isinstance(items, dict) else items
    if not isinstance(items, list) or not items:
        raise EffectiveRobustnessError(f"{str(source)!r}: expected an entry object or a list")
    return [_entry(item, source, i) for i, item in enumerate(items)]


def _entry(item: object, source: Path, position: int) -> Entry:
    where = f"{str(source)!r} entry {position}"
    if not isinstance(item, dict):
        raise EffectiveRobustnessError(f"{where}: expected an object, got {type(item).__name__}")
    missing = [k for k in ("name", "sigma", "id", "ood") if k not in item]
    if missing:
        raise EffectiveRobustnessError(f"{where}: missing {missing}; see --help for the format")
    metrics: dict[str, float] = {}
    if "lens_summary" in item:
        metrics.update(_lens_means(source.parent / str(item["lens_summary"]), where))
    metrics.update({str(k): float(v) for k, v in dict(item.get("metrics") or {}).items()})
    try:
        return Entry(
            name=str(item["name"]),
            sigma=float(item["sigma"]),
            id_accuracy=_accuracy(item["id"], f"{where} id"),
            ood={str(k): _accuracy(v, f"{where} ood {k!r}") for k, v in dict(item["ood"]).items()},
            metrics=metrics,
            architecture=str(item.get("architecture") or ""),
        )
    except (TypeError, ValueError) as err:
        raise EffectiveRobustnessError(f"{where}: {err}") from err


def _accuracy(value: object, where: str) -> Accuracy:
    if not isinstance(value, dict) or not {"correct", "total"} <= value.keys():
        raise EffectiveRobustnessError(f"{where}: expected {{'correct': int, 'total': int}}")
    try:
        return Accuracy(int(value["correct"]), int(value["total"]))
    except EffectiveRobustnessError as err:
        raise EffectiveRobustnessError(f"{where}: {err}") from err


def _lens_means(path: Path, where: str) -> Mapping[str, float]:
    try:
        summary = json.loads(path.read_text())
        return {k: float(v["mean"]) for k, v in summary["metrics"].items()}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise EffectiveRobustnessError(
            f"{where}: lens_summary {str(path)!r} is not a fourier-lens summary.json: {err}"
        ) from err
