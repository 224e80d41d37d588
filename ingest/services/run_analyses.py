"""Materialise each stored run's analyses (SNR, clipping statistics, spikes with their diagnosis, alerts)
per generation; the analyses themselves are ``stab_core.analysis``.

:func:`materialise` is the store's ``on_generation`` hook: a store opened with
:func:`open_analysed_store` (the CLI, the pages, ``watch``, the demo) re-analyses a run after every
merge, and pages and the CLI read the stored results instead of recomputing them. A store opened
without it (``ingest.store.Store(root)``) only stores data. The run is read once, everything is
computed from that view in memory, and the results are written once (``Store.write_analysis``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
import pyarrow as pa

from ingest.long_schema import LONG_SCHEMA, null_floats
from ingest.services.run_alerts import alerts_from_memory
from ingest.services.run_findings import sibling_gap
from ingest.store import Store
from stab_core.runview import RunView
from stab_core.schedulers import logged_lr_transitions


def open_analysed_store(root: str | os.PathLike[str] | None = None) -> Store:
    """The store at ``root`` (default: ``$STABSCOPE_STORE`` or the embedded default) that re-runs the
    analyses of a run after each new generation of it: how the product opens a store."""
    return Store(root, on_generation=materialise)


def materialise(store: Store, name: str) -> None:
    """Recompute the analyses of run ``name`` if its data generation moved on, and write them once.

    Everything is computed from the run as read once (``Store.run_view``): the analyses
    (``stab_core.analysis.analyze_run``) and, from their results and the view's per-rank matrices, the
    run's alerts (``ingest.services.run_alerts.alerts_from_memory``), and its overfitting and throughput findings
    (``stab_core.findings``, kept under ``meta['analysis']['findings']``), and the transitions of its
    logged LR (:func:`lr_transitions`). Derived series (``snr``, ``b_simple``,
    ``clip_ratio``, ``clip_mean_coef``) go to the run's derived Parquet file as run-level rows; spike
    events (with their diagnosis) to the catalog; what the UI must say about them (which SNR estimator,
    collapses, overall clip ratio, the alerts) to ``meta['analysis']``. A failing analysis never fails
    the ingest: the error is kept in ``meta['analysis']['error']``.
    """
    info = store.run_info(name)
    if info.analysis_gen == info.gen or info.gen == 0:
        return
    # here, not at the top: a store opened to be read (the dashboard's first screen) loads no analysis
    from stab_core.analysis import analyze_run
    from stab_core.findings import view_findings

    transitions: list[dict[str, Any]] = []
    try:
        view = store.run_view(name)
        transitions = lr_transitions(view)
        analysis = analyze_run(view)
        findings = view_findings(view)
    except Exception as exc:  # an analysis bug must not lose or block the data just ingested
        failed = {"error": f"{type(exc).__name__}: {exc}", "lr_transitions": transitions}
        store.write_analysis(name, info.gen, _derived_table([]), [], failed)
        return
    parts: list[tuple[str, Any, Any]] = []
    summary: dict[str, Any] = {
        "snr_estimator": None,
        "snr_label": None,
        "overall_clip_ratio": None,
        "snr_collapses": [],
        "snr_reason": analysis.snr_reason,
        "not_run": [{"detector": detector, "reason": why} for detector, why in analysis.not_run],
        "logging_end": None,
        "gaps": [],
        "lr_transitions": transitions,
    }
    if analysis.gaps is not None:
        summary["gaps"] = [[int(a), int(b)] for a, b in analysis.gaps.gaps]
        if analysis.gaps.end is not None:
            summary["logging_end"] = {
                "step": int(analysis.gaps.end),
                "reason": "every metric logged from this step on is non-finite (step time and memory included): "
                "the logging stopped; no training fault is shown by it",
            }
    if analysis.snr is not None:
        parts.append(("snr", analysis.snr.steps, analysis.snr.values))
        if analysis.snr.b_simple is not None:
            parts.append(("b_simple", analysis.snr.steps, analysis.snr.b_simple))
        summary.update(snr_estimator=analysis.snr.estimator, snr_label=analysis.snr.label)
        summary["snr_collapses"] = [_plain(c) for c in analysis.snr_collapses]
    clip_ratio = (np.empty(0, np.int64), np.empty(0, np.float64))
    if analysis.clip is not None and analysis.clip_steps is not None:
        clip_ratio = (np.asarray(analysis.clip_steps, np.int64), np.asarray(analysis.clip.clip_ratio, np.float64))
        parts.append(("clip_ratio", analysis.clip_steps, analysis.clip.clip_ratio))
        parts.append(("clip_mean_coef", analysis.clip_steps, analysis.clip.mean_coef))
        summary["overall_clip_ratio"] = float(analysis.clip.overall_clip_ratio)
        summary["max_norm"] = float(analysis.clip.max_norm)
    spikes = analysis.spike_dicts()
    # overfitting and throughput loss; the sibling comparison is also made when read (ingest.services.run_findings)
    summary["findings"] = {"overfitting": findings["overfitting"], "throughput": findings["throughput"]}
    summary["throughput_level"] = findings["throughput_level"]
    findings["throughput_siblings"] = sibling_gap(info, findings["throughput_level"], store.list_runs())
    # the Runs table, the banners and watch read these instead of computing them on each first read
    alerts = alerts_from_memory(info, spikes=spikes, clip_ratio=clip_ratio, per_rank=view.per_rank, findings=findings)
    summary["alerts"] = [a.to_json() for a in alerts]
    store.write_analysis(name, info.gen, _derived_table(parts), spikes, summary)


def lr_transitions(view: RunView) -> list[dict[str, Any]]:
    """The transitions of the run's logged LR (``stab_core.schedulers.logged_lr_transitions``, on every
    logged step: the charts mark them) as JSON-ready ``{step, kind, rel_change}``, kept under
    ``meta['analysis']['lr_transitions']``; none without an ``lr`` series."""
    lr = view.series.get("lr")
    if lr is None:
        return []
    found = logged_lr_transitions(lr.steps, lr.values)
    return [{"step": int(t.step), "kind": str(t.kind), "rel_change": float(t.rel_change)} for t in found]


def _derived_table(parts: list[tuple[str, Any, Any]]) -> pa.Table:
    """The derived series ``parts`` (name, steps, values) as run-level rows of the long schema."""
    if not parts:
        return LONG_SCHEMA.empty_table()
    steps = np.concatenate([np.asarray(s, np.int64) for _, s, _ in parts])
    values = np.concatenate([np.asarray(v, np.float64) for _, _, v in parts])
    # each row's name from its part's code: a Python string per row is slow for millions of derived rows
    codes = np.repeat(np.arange(len(parts), dtype=np.int32), [len(s) for _, s, _ in parts])
    names = pa.array([m for m, _, _ in parts], pa.string())
    metrics = pa.DictionaryArray.from_arrays(codes, names).cast(pa.string())
    return pa.table(
        {
            "rank": pa.array(np.full(steps.size, -1, np.int32)),
            "step": pa.array(steps),
            "metric": metrics,
            "value": pa.array(values),
            "wall_time": null_floats(steps.size),
        },
        schema=LONG_SCHEMA,
    )


def _plain(obj: Any) -> Any:
    """A dataclass of numbers as a JSON-ready dict."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in dataclasses.asdict(obj).items()}
