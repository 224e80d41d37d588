"""A stored run's alerts: the ones its analyses stored, else computed from the store's reads; one
definition for the dashboard's banners and Runs table and for ``stabscope watch --on-alert``.

The rules themselves (what makes a spike, clipping or a rank worth an alert) are ``stab_core.alerts``;
this module only gathers a run's inputs for them: from memory when the analyses have just computed
them (``ingest.services.run_analyses.materialise``), from the store otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ingest.services.run_findings import stored_findings
from ingest.store import Store
from ingest.store.run_info import RunInfo
from stab_core.alerts import (
    ALERT_WINDOW_STEPS,
    STRAGGLER_BUCKETS,
    STRAGGLER_METRICS,
    Alert,
    clipping_alert,
    finding_alerts,
    rank_deviations,
    spike_alerts,
    straggler_alerts,
)
from stab_core.rank_heatmap import RankHeatmap, rank_heatmap
from stab_core.ranklayout import comparison_groups, stage_layout
from stab_core.runview import RankMatrix

ClipRatio = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]
"""(steps, values) of the analyses' trailing clip ratio (empty arrays when the run logs no clipping)."""


def run_alerts(store: Store, name: str, *, live: bool | None = None) -> list[Alert]:
    """Alerts of run ``name`` now: diverging and (when live) recent spikes, saturated clipping over
    the last ``ALERT_WINDOW_STEPS`` steps, straggler ranks of ``STRAGGLER_METRICS`` (runs with at
    least 3 ranks; each rank against its own pipeline stage when meta ``pipeline_parallel_size`` is
    known). ``live`` defaults to the catalog's status.

    Read from ``meta['analysis']['alerts']`` when the analyses of the current generation stored them
    (``ingest.services.run_analyses.materialise``), else computed from the store (:func:`alerts_from_store`).
    """
    info = store.run_info(name)
    live = info.status == "live" if live is None else live
    stored = (info.meta.get("analysis") or {}).get("alerts")
    if info.analysis_gen == info.gen and isinstance(stored, list):
        alerts = [Alert.from_json(a) for a in stored]
    else:
        alerts = alerts_from_store(store, info)
    return [a for a in alerts if live or a.kind != "new_spike"]


def alerts_from_store(store: Store, info: RunInfo, *, spikes: Sequence[Mapping[str, Any]] | None = None) -> list[Alert]:
    """:func:`compute_alerts` of the run ``info`` from what the store holds: its spikes (unless
    ``spikes`` are given), the recent steps of its derived clip ratio and its rank heatmaps."""
    if info.first_step is None or info.last_step is None:
        return []
    name = info.name
    # clip_ratio is derived by the analyses (empty when the run logs no clipping)
    clip = store.read_series(name, "clip_ratio", start=alert_window_start(info))
    heatmaps = {
        metric: RankHeatmap(*store.read_rank_heatmap(name, metric, buckets=STRAGGLER_BUCKETS))
        for metric in straggler_metrics(info)
    }
    return compute_alerts(
        info,
        spikes=store.spikes(name) if spikes is None else spikes,
        clip_ratio=(clip.steps, clip.values),
        heatmaps=heatmaps,
        findings=stored_findings(store, info),
    )


def alerts_from_memory(
    info: RunInfo,
    *,
    spikes: Sequence[Mapping[str, Any]],
    clip_ratio: ClipRatio,
    per_rank: Mapping[str, RankMatrix],
    findings: Mapping[str, Any] | None = None,
) -> list[Alert]:
    """:func:`compute_alerts` of the run ``info`` from the analyses' fresh results: its spikes, its clip
    ratio and the per-rank matrices of its ``RunView``, bucketed as the store buckets its heatmaps
    (the run's ``heat_bucket`` steps, then ``STRAGGLER_BUCKETS`` columns of its step span), so the
    alerts equal :func:`alerts_from_store`'s once the analyses are written. ``findings``: the run's
    overfitting and throughput findings (``ingest.services.run_findings``), when computed."""
    if info.first_step is None or info.last_step is None:
        return []
    lo, hi = int(info.first_step), int(info.last_step)
    heatmaps = {
        metric: rank_heatmap(per_rank[metric], width=info.heat_bucket, lo=lo, hi=hi, buckets=STRAGGLER_BUCKETS)
        for metric in straggler_metrics(info)
        if metric in per_rank
    }
    return compute_alerts(info, spikes=spikes, clip_ratio=clip_ratio, heatmaps=heatmaps, findings=findings)


def compute_alerts(
    info: RunInfo,
    *,
    spikes: Sequence[Mapping[str, Any]],
    clip_ratio: ClipRatio,
    heatmaps: Mapping[str, RankHeatmap],
    findings: Mapping[str, Any] | None = None,
) -> list[Alert]:
    """Every alert of the run as if it were live (``new_spike`` included), from its ``spikes``, its clip
    ratio (only the steps from :func:`alert_window_start` on count), the rank heatmaps of its
    :func:`straggler_metrics` (``STRAGGLER_BUCKETS`` columns each) and its ``findings`` (overfitting,
    throughput loss: ``stab_core.alerts.finding_alerts``)."""
    if info.first_step is None or info.last_step is None:
        return []
    name, last = info.name, int(info.last_step)
    alerts = spike_alerts(name, spikes, last, live=True)
    steps, values = clip_ratio
    recent = steps >= alert_window_start(info)
    saturated = clipping_alert(name, steps[recent], values[recent])
    if saturated is not None:
        alerts.append(saturated)
    for metric in straggler_metrics(info):
        heatmap = heatmaps.get(metric)
        if heatmap is None:
            continue
        # a rank is judged against its own pipeline stage when the metadata gives the layout
        groups = comparison_groups(stage_layout(info.meta, heatmap.ranks), heatmap.ranks)
        deviations = rank_deviations(heatmap.ranks, heatmap.steps, heatmap.matrix, groups=groups)
        alerts += straggler_alerts(name, metric, deviations)
    if findings:
        alerts += finding_alerts(name, findings)
    return alerts


def straggler_metrics(info: RunInfo) -> list[str]:
    """The ``STRAGGLER_METRICS`` the run logs per rank, when it has the 3 ranks a robust median needs."""
    if info.ranks < 3:
        return []
    return [metric for metric in STRAGGLER_METRICS if metric in info.rank_metrics]


def alert_window_start(info: RunInfo) -> int:
    """The first step of the trailing ``ALERT_WINDOW_STEPS`` window of a run that logged steps."""
    assert info.first_step is not None and info.last_step is not None
    return max(int(info.first_step), int(info.last_step) - ALERT_WINDOW_STEPS + 1)
