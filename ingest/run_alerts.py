"""A run's current alerts, read from the store: one definition for the dashboard's banners and Runs
table and for ``stabscope watch --on-alert`` (the rules are ``stab_core.alerts``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ingest.run_info import RunInfo
from stab_core.alerts import (
    ALERT_WINDOW_STEPS,
    STRAGGLER_BUCKETS,
    STRAGGLER_METRICS,
    Alert,
    clipping_alert,
    rank_deviations,
    spike_alerts,
    straggler_alerts,
)
from stab_core.ranklayout import comparison_groups, stage_layout


class AlertSource(Protocol):
    """What the alerts read from a store (``ingest.store.Store`` is one): typed here rather than imported,
    since the store runs the analyses, and with them the alerts, after each merge."""

    def run_info(self, name: str) -> RunInfo: ...

    def spikes(self, name: str) -> list[dict[str, Any]]: ...

    def read_series(self, name: str, metric: str, *, start: int | None = None) -> Any: ...

    def read_rank_heatmap(self, name: str, metric: str, *, buckets: int) -> Any: ...


def run_alerts(store: AlertSource, name: str, *, live: bool | None = None) -> list[Alert]:
    """Alerts of run ``name`` now: diverging and (when live) recent spikes, saturated clipping over
    the last ``ALERT_WINDOW_STEPS`` steps, straggler ranks of ``STRAGGLER_METRICS`` (runs with at
    least 3 ranks; each rank against its own pipeline stage when meta ``pipeline_parallel_size`` is
    known). ``live`` defaults to the catalog's status.

    Read from ``meta['analysis']['alerts']`` when the analyses of the current generation stored them
    (``ingest.run_analyses.materialise``), else computed from the store.
    """
    info = store.run_info(name)
    live = info.status == "live" if live is None else live
    stored = (info.meta.get("analysis") or {}).get("alerts")
    if info.analysis_gen == info.gen and isinstance(stored, list):
        alerts = [Alert.from_json(a) for a in stored]
    else:
        alerts = compute_alerts(store, info)
    return [a for a in alerts if live or a.kind != "new_spike"]


def compute_alerts(
    store: AlertSource,
    info: RunInfo,
    spikes: Sequence[Mapping[str, Any]] | None = None,
    clip_ratio: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None = None,
) -> list[Alert]:
    """Every alert of the run as if it were live (``new_spike`` included), from its spikes, the last
    ``ALERT_WINDOW_STEPS`` steps of its clip ratio and its rank heatmaps. ``spikes`` and
    ``clip_ratio`` (steps, values) default to what the store holds; the analyses pass their fresh ones."""
    if info.first_step is None or info.last_step is None:
        return []
    name, last = info.name, int(info.last_step)
    alerts = spike_alerts(name, store.spikes(name) if spikes is None else spikes, last, live=True)
    window_start = max(int(info.first_step), last - ALERT_WINDOW_STEPS + 1)
    if clip_ratio is None:
        # clip_ratio is derived by the analyses (empty when the run logs no clipping)
        clip = store.read_series(name, "clip_ratio", start=window_start)
        clip_ratio = (clip.steps, clip.values)
    steps, values = clip_ratio
    recent = steps >= window_start
    saturated = clipping_alert(name, steps[recent], values[recent])
    if saturated is not None:
        alerts.append(saturated)
    for metric in STRAGGLER_METRICS:
        if metric in info.rank_metrics and info.ranks >= 3:
            ranks, bucket_steps, matrix = store.read_rank_heatmap(name, metric, buckets=STRAGGLER_BUCKETS)
            # a rank is judged against its own pipeline stage when the metadata gives the layout
            groups = comparison_groups(stage_layout(info.meta, ranks), ranks)
            alerts += straggler_alerts(name, metric, rank_deviations(ranks, bucket_steps, matrix, groups=groups))
    return alerts
