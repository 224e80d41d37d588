"""A run's current alerts, read from the store: one definition for the dashboard's banners and Runs
table and for ``stabscope watch --on-alert`` (the rules are ``stab_core.alerts``)."""

from __future__ import annotations

from ingest.store import Store
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


def run_alerts(store: Store, name: str, *, live: bool | None = None) -> list[Alert]:
    """Alerts of run ``name`` now: diverging and (when live) recent spikes, saturated clipping over
    the last ``ALERT_WINDOW_STEPS`` steps, straggler ranks of ``STRAGGLER_METRICS`` (runs with at
    least 3 ranks). ``live`` defaults to the catalog's status."""
    info = store.run_info(name)
    if info.first_step is None or info.last_step is None:
        return []
    last = int(info.last_step)
    live = info.status == "live" if live is None else live
    alerts = spike_alerts(name, store.spikes(name), last, live)
    # clip_ratio is derived by the analyses (empty when the run logs no clipping)
    clip = store.read_series(name, "clip_ratio", start=max(int(info.first_step), last - ALERT_WINDOW_STEPS + 1))
    saturated = clipping_alert(name, clip.steps, clip.values)
    if saturated is not None:
        alerts.append(saturated)
    for metric in STRAGGLER_METRICS:
        if metric in info.rank_metrics and info.ranks >= 3:
            ranks, steps, matrix = store.read_rank_heatmap(name, metric, buckets=STRAGGLER_BUCKETS)
            alerts += straggler_alerts(name, metric, rank_deviations(ranks, steps, matrix))
    return alerts
