"""The alert rules: what someone watching a run should hear about now, for the banners, the Runs table
and ``stabscope watch --on-alert``. A stored run's alerts (its inputs gathered from the store or from
the analyses' fresh results, and the stored list) are ``ingest.services.run_alerts``.

Six kinds: a spike that has not recovered (``diverging_run``), a recent spike of a live run
(``new_spike``), clipping that caps nearly every recent step (``clipping_saturated``: the fever pill
is on for good, the LR or the data needs attention), a rank that lags or deviates from its
peers all run long (``straggler``), the val loss rising while the train loss falls (``overfitting``)
and tokens/s or step time below the run's own norm or its siblings' (``throughput_loss``).
Pure: numbers and spike dicts in, ``Alert`` objects out.

A rank's peers are the ranks of its own pipeline stage when the layout is known
(``stab_core.ranklayout``), else all ranks. Only ``STRAGGLER_METRICS`` make a straggler: a rank whose
memory, temperature or power stays apart from its peers is ``persistent``, worth a look, but not
slow (memory by pipeline stage differs by design).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from stab_core.clipping import CLIP_SATURATION
from stab_core.decision_tree import NONFINITE_START_LEAF
from stab_core.rolling_baseline import robust_zscore_columns
from stab_core.severity import shown_by_default

ALERT_WINDOW_STEPS = 200
"""Trailing window (steps) for the clipping-saturation alert and for a spike to count as new."""
# CLIP_SATURATION (0.9), the trailing clip ratio at which clipping counts as saturated, is imported from
# stab_core.clipping, not taken from stab_core.analysis: the pages read stored alerts before the first
# screen and must not load the whole analysis for one number (tests/test_import_hygiene.py)
OUTLIER_Z = 3.5
"""Modified z-score (Iglewicz & Hoaglin 1993) beyond which a rank is an outlier in a step bucket."""
OUTLIER_MIN_DEVIATION = 0.1
"""... and at least this far (relative, 10 %) from the bucket's median: noise among identical ranks is not."""
STRAGGLER_SHARE = 0.5
"""A rank flagged in at least this share of step buckets is a persistent straggler, not a transient."""
STRAGGLER_BUCKETS = 400
"""Step buckets of the rank x step matrix that straggler alerts are judged on."""
STRAGGLER_METRICS = ("step_time_s", "grad_norm_local")
"""Per-rank metrics whose persistent outliers are stragglers, and alerted."""
RANK_KINDS = ("straggler", "persistent", "transient", "normal", "unknown")
"""``RankDeviation.kind``: an outlier in at least ``STRAGGLER_SHARE`` of the columns (a straggler for
``STRAGGLER_METRICS``, ``persistent`` for any other metric), in fewer (``transient``), in none
(``normal``), or never compared (``unknown``: fewer than 3 peers logged with it)."""

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class RankDeviation:
    """One rank against the cross-rank median of each step bucket.

    ``mean``: its mean over buckets (the metric's unit); ``deviation_pct``: its mean relative
    deviation from the median (%); ``peak_deviation_pct`` at ``peak_step``: the bucket where it
    deviates most; ``max_z``: its largest |modified z-score|; ``flagged_pct``: % of buckets where it
    is an outlier (NaN when never compared); ``kind``: one of ``RANK_KINDS``.
    """

    rank: int
    mean: float
    deviation_pct: float
    peak_deviation_pct: float
    peak_step: int
    max_z: float
    flagged_pct: float
    kind: str


@dataclass(frozen=True)
class Alert:
    """One alert. ``step``: where it happened (a spike's peak or start, the last step for clipping,
    the most deviant bucket for a straggler); ``detail``: the numbers behind it."""

    kind: str
    run: str
    step: int
    metric: str
    message: str
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, int]:
        """What stays the same while the condition lasts: a watcher alerts once per key."""
        if self.kind == "straggler":
            return (self.kind, self.metric, int(self.detail["rank"]))
        if self.kind == "clipping_saturated":
            return (self.kind, self.metric, 0)
        if self.kind == "throughput_loss" and self.detail.get("kind") == "siblings":
            return (self.kind, self.metric, -1)
        return (self.kind, self.metric, self.step)

    def to_json(self) -> dict[str, Any]:
        """The object ``watch --on-alert CMD`` writes to the command's stdin."""
        return {"alert": self.kind, "run": self.run, "step": self.step, "metric": self.metric,
                "message": self.message, **self.detail}  # fmt: skip

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Alert:
        """The inverse of ``to_json``."""
        own = ("alert", "run", "step", "metric", "message")
        detail = {k: v for k, v in obj.items() if k not in own}
        kind, run, metric, message = (str(obj[k]) for k in ("alert", "run", "metric", "message"))
        return cls(kind, run, int(obj["step"]), metric, message, detail)


def cross_rank_band(matrix: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per step column of a rank x step matrix: (median, min, max) over the ranks that logged (NaN if none)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a column no rank logged is all NaN
        return np.nanmedian(matrix, axis=0), np.nanmin(matrix, axis=0), np.nanmax(matrix, axis=0)


def peer_median(matrix: FloatArray, groups: npt.NDArray[np.integer[Any]] | None = None) -> FloatArray:
    """Per cell of a rank x step matrix: the median, in its step column, of the rank's peers (the
    ranks of its group, e.g. its pipeline stage; all ranks when ``groups`` is None). NaN if none logged."""
    if groups is None:
        return np.broadcast_to(cross_rank_band(matrix)[0], matrix.shape).copy()
    out = np.full(matrix.shape, np.nan)
    for group in np.unique(groups):
        rows = groups == group
        out[rows] = cross_rank_band(matrix[rows])[0]
    return out


def peer_deviation_pct(matrix: FloatArray, groups: npt.NDArray[np.integer[Any]] | None = None) -> FloatArray:
    """Each cell's deviation from its peers' median in its step column (``peer_median``), in %."""
    with np.errstate(all="ignore"):
        median = peer_median(matrix, groups)
        return np.asarray(100 * (matrix - median) / np.abs(median), dtype=np.float64)


def _peer_zscores(matrix: FloatArray, groups: npt.NDArray[np.integer[Any]] | None) -> FloatArray:
    """|modified z-score| of each cell among its peers in its column (NaN with fewer than 3 peers)."""
    if groups is None:
        median = cross_rank_band(matrix)[0]
        return np.abs(robust_zscore_columns(matrix, mad_floor=0.01 * np.abs(median), min_finite=3))
    out = np.full(matrix.shape, np.nan)
    for group in np.unique(groups):
        rows = groups == group
        out[rows] = _peer_zscores(matrix[rows], None)
    return out


def rank_deviations(
    ranks: npt.NDArray[np.integer[Any]],
    steps: npt.NDArray[np.integer[Any]],
    matrix: FloatArray,
    *,
    groups: npt.NDArray[np.integer[Any]] | None = None,
    straggles: bool = True,
) -> list[RankDeviation]:
    """Each rank against its peers' median of every step bucket, most deviant first.

    Peers: the ranks of the same ``groups`` entry (its pipeline stage, ``ranklayout.comparison_groups``),
    or all ranks. Per bucket the modified z-score ``0.6745*(x - median)/MAD`` among the peers
    (Iglewicz & Hoaglin 1993; ``stab_core.rolling_baseline.robust_zscore_columns``), with the MAD floored at
    1 % of |median| so identical ranks do not turn noise into outliers. A rank is an outlier in a
    bucket when |z| > ``OUTLIER_Z`` and it is at least ``OUTLIER_MIN_DEVIATION`` from the median; in
    at least ``STRAGGLER_SHARE`` of its buckets it is a ``straggler`` (``straggles``: the metric is
    one of ``STRAGGLER_METRICS``) or else ``persistent``. Fewer than 3 ranks have no robust median: [].
    """
    if ranks.size < 3 or matrix.size == 0:
        return []
    relative = peer_deviation_pct(matrix, groups) / 100
    zscores = _peer_zscores(matrix, groups)
    persistent = "straggler" if straggles else "persistent"
    out = []
    for i, rank in enumerate(ranks.tolist()):
        rank_relative, rank_z = relative[i], zscores[i]
        valid = np.isfinite(rank_relative)
        if not valid.any():
            continue
        peak = int(np.nanargmax(np.abs(np.where(valid, rank_relative, 0.0))))
        scored = np.isfinite(rank_z) & valid
        outlier = (rank_z > OUTLIER_Z) & (np.abs(rank_relative) >= OUTLIER_MIN_DEVIATION)
        flagged = float(np.mean(outlier[scored])) if scored.any() else float("nan")
        if not scored.any():
            kind = "unknown"
        else:
            kind = persistent if flagged >= STRAGGLER_SHARE else "transient" if flagged > 0 else "normal"
        out.append(
            RankDeviation(
                rank=int(rank),
                mean=float(np.nanmean(matrix[i])),
                deviation_pct=100 * float(np.nanmean(rank_relative)),
                peak_deviation_pct=100 * float(rank_relative[peak]),
                peak_step=int(steps[peak]),
                max_z=float(np.nanmax(rank_z)) if np.isfinite(rank_z).any() else float("nan"),
                flagged_pct=100 * flagged,
                kind=kind,
            )
        )
    out.sort(key=lambda d: (-np.nan_to_num(d.flagged_pct), -abs(d.peak_deviation_pct)))
    return out


def spike_alerts(run: str, spikes: Sequence[Mapping[str, Any]], last_step: int, *, live: bool) -> list[Alert]:
    """A spike that has not recovered, always; a recovered one only while the run is live and its
    peak is within ``ALERT_WINDOW_STEPS`` of ``last_step`` (an old, recovered spike is history), and
    never a blip (absorbed within a few steps: :mod:`stab_core.severity`)."""
    out = []
    for s in spikes:
        if s.get("recovered", True) and not shown_by_default(s.get("severity")):
            continue
        common = {"ratio": s.get("ratio"), "cause": s.get("cause"), "actions": list(s.get("actions") or [])}
        if s.get("leaf") == NONFINITE_START_LEAF:
            # never finite: nothing diverged, and no checkpoint or batch to go back to
            message = (
                f"non-finite from the first step: {s['metric']} was never finite (from step {s['start']}): a build, "
                "kernel, data or initialisation fault, not a training instability"
            )
            out.append(Alert("diverging_run", run, int(s["start"]), str(s["metric"]), message, common))
        elif not s.get("recovered", True):
            what = {"early_instability": "early instability", "climb": "climb"}.get(str(s.get("kind")), "spike")
            message = f"diverging: {s['metric']} {what} from step {s['start']} has not recovered"
            out.append(Alert("diverging_run", run, int(s["start"]), str(s["metric"]), message, common))
        elif live and int(s["peak"]) >= last_step - ALERT_WINDOW_STEPS:
            message = f"new spike: {s['metric']} x{_number(s.get('ratio')):.1f} at step {s['peak']}"
            out.append(Alert("new_spike", run, int(s["peak"]), str(s["metric"]), message, common))
    return out


def clipping_alert(run: str, steps: npt.NDArray[np.integer[Any]], clip_ratio: FloatArray) -> Alert | None:
    """Saturated clipping: the last finite trailing clip ratio (fraction of recent steps clipped) at
    or above ``CLIP_SATURATION``. Give it the series' last ``ALERT_WINDOW_STEPS`` steps."""
    finite = np.isfinite(clip_ratio)
    if not finite.any():
        return None
    last = int(np.flatnonzero(finite)[-1])
    ratio = float(clip_ratio[last])
    if ratio < CLIP_SATURATION:
        return None
    message = f"clipping saturated: {ratio:.0%} of the last steps clipped"
    return Alert("clipping_saturated", run, int(steps[last]), "clip_ratio", message, {"clipped_fraction": ratio})


def straggler_alerts(run: str, metric: str, deviations: Sequence[RankDeviation]) -> list[Alert]:
    """One alert per persistent outlier rank of ``metric`` (``rank_deviations``' stragglers)."""
    return [
        Alert(
            "straggler",
            run,
            d.peak_step,
            metric,
            f"straggler: rank {d.rank} {metric} {d.deviation_pct:+.0f}% vs the median",
            {"rank": d.rank, "deviation_pct": d.deviation_pct, "flagged_pct": d.flagged_pct},
        )
        for d in deviations
        if d.kind == "straggler"
    ]


def _number(value: Any) -> float:
    """``value`` as a float, NaN when it is none (a spike dict's ``ratio`` may be None)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def finding_alerts(run: str, findings: Mapping[str, Any]) -> list[Alert]:
    """The findings of ``stab_core.findings.run_findings`` (and ``throughput_siblings``, a sibling
    gap's dict, when the caller compared the run with its siblings) as alerts: ``overfitting`` at the
    best checkpoint's step (one alert while the best stays), ``throughput_loss`` at each drop's
    first step and, for a sibling gap, at step -1 (one per run)."""
    out = []
    found = findings.get("overfitting")
    if found:
        detail = {k: v for k, v in found.items() if k != "message"}
        out.append(Alert("overfitting", run, int(found["best_step"]), "val_loss", str(found["message"]), detail))
    for drop in findings.get("throughput") or []:
        detail = {k: v for k, v in drop.items() if k not in ("message", "metric")}
        out.append(Alert("throughput_loss", run, int(drop["start"]), str(drop["metric"]), str(drop["message"]), detail))
    gap = findings.get("throughput_siblings")
    if gap:
        detail = {k: v for k, v in gap.items() if k not in ("message", "metric")}
        out.append(Alert("throughput_loss", run, -1, str(gap["metric"]), str(gap["message"]), detail))
    return out
