"""The pages' one store handle and their cached reads of it.

Every cached read is keyed by the store root and the run's generation (``gen``; ``analysis_gen`` for
analysis results, and ``meta_revision`` where a user's metadata change re-runs the analyses), so a run
that grows under ``watch`` is re-read and an unchanged one is not.

Cached values are plain dicts, tuples and arrays, never library classes: ``st.cache_data`` pickles
them, and a class reloaded by Streamlit's file watcher no longer pickles as the old one.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st

from ingest.store import LockHolder, RunInfo, SeriesData, Store
from ingest.store.object_store import is_object_url
from ingest.store.paths import default_store_location
from ingest.store.run_meta import REVISION_FIELD
from stab_core.runview import RunEvent

FULL_RES_MAX_STEPS = 5000
"""A visible span of at most this many steps is read at full fidelity; wider spans are bucketed."""
DISPLAY_BUCKETS = 1500
"""Min/max buckets per chart when downsampled (about one per horizontal pixel of a wide chart)."""
HEATMAP_BUCKETS = 400
"""Step columns of the rank heatmap."""
LIVE_REFRESH_S = 5.0
"""How often pages re-read a live run (seconds)."""


@st.cache_resource(show_spinner=False)
def store_at(root: str) -> Store:
    """The store at ``root`` (a directory or an ``s3://`` URL) with the analyses hooked in: one handle per
    store, shared by every session (the cached reads below call it with their ``root`` key)."""
    from ingest.services.run_analyses import open_analysed_store

    return open_analysed_store(root)


def store_root() -> str:
    """The active store (``$STABSCOPE_STORE`` or the embedded default): its directory, resolved, or its
    ``s3://`` URL as it is (the store keeps its local cache itself)."""
    location = default_store_location()
    return location if is_object_url(location) else str(Path(location).expanduser().resolve())


def get_store() -> Store:
    """The store at ``store_root()``: one handle per directory, shared by every session."""
    return store_at(store_root())


def ensure_demo_runs() -> None:
    """Seed the demo runs on a store's first start, with a progress bar (once per store: the sessions and
    processes that start meanwhile show that they are being prepared, with how many are in, then the runs)."""
    from ingest.services.demo import DEMO_SEEDED_KEY, demo_run_names, seed_demo_store

    # STABSCOPE_DEMO_READY: `stabscope serve` seeded them (or found them) before it listened
    if os.environ.get("STABSCOPE_NO_DEMO") or os.environ.get("STABSCOPE_DEMO_READY"):
        return
    store = get_store()
    if store.get_setting(DEMO_SEEDED_KEY):
        return
    bar = st.progress(0.0, text="First start: writing demo runs through the real shard -> Parquet path…")
    names = demo_run_names()

    def advance(done: int, total: int) -> None:
        bar.progress(done / total, text=f"demo run {done}/{total}")

    def waiting(_holder: LockHolder | None) -> None:
        done = len({r.name for r in store.list_runs()} & set(names))
        text = f"The demo runs are being prepared (by another session or process): {done}/{len(names)} ready…"
        bar.progress(min(done / len(names), 1.0), text=text)

    seed_demo_store(store, progress=advance, on_wait=waiting)
    bar.empty()


def list_runs() -> list[RunInfo]:
    """Catalog rows (not cached: cheap, and must show live runs and deletions at once)."""
    return get_store().list_runs()


def meta_revision(info: RunInfo) -> int:
    """How many times a user changed the run's metadata: part of every cached analysis read's key, since
    such a change re-runs the analyses without a new data generation (``Store.update_meta``)."""
    return int(info.meta.get(REVISION_FIELD) or 0)


# ------------------------------------------------------------------------------------------- series


@st.cache_data(show_spinner=False, max_entries=512)
def _series(
    root: str,
    name: str,
    gen: int,
    analysis_gen: int,
    meta_rev: int,
    metric: str,
    start: int | None,
    end: int | None,
    buckets: int | None,
    rank: int | None,
) -> dict[str, Any]:
    s = store_at(root).read_series(name, metric, start=start, end=end, buckets=buckets, rank=rank)
    return dict(vars(s))


def read_series(
    info: RunInfo,
    metric: str,
    *,
    start: int | None = None,
    end: int | None = None,
    buckets: int | None = DISPLAY_BUCKETS,
    rank: int | None = None,
) -> SeriesData:
    """``Store.read_series`` cached per run generation (see the store for the min/max buckets)."""
    return SeriesData(
        **_series(
            store_root(), info.name, info.gen, info.analysis_gen, meta_revision(info), metric, start, end, buckets, rank
        )
    )


def auto_buckets(start: int, end: int) -> int | None:
    """Full fidelity (None) for a span of at most ``FULL_RES_MAX_STEPS`` steps, else ``DISPLAY_BUCKETS``."""
    return None if end - start + 1 <= FULL_RES_MAX_STEPS else DISPLAY_BUCKETS


@st.cache_data(show_spinner=False, max_entries=64)
def _heatmap(
    root: str, name: str, gen: int, metric: str, buckets: int, start: int | None, end: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return store_at(root).read_rank_heatmap(name, metric, buckets=buckets, start=start, end=end)


def read_heatmap(
    info: RunInfo, metric: str, buckets: int = HEATMAP_BUCKETS, start: int | None = None, end: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ranks, steps, matrix)``: per-rank bucket means of ``metric`` (NaN where a rank logged nothing),
    one column per step bucket some rank logged in (``steps``: each column's first logged step)."""
    ranks, steps, matrix = _heatmap(store_root(), info.name, info.gen, metric, buckets, start, end)
    logged = steps >= 0  # the store marks a bucket no rank logged in with step -1: no column for it
    return ranks, steps[logged], matrix[:, logged]


def logged_ranks(info: RunInfo) -> np.ndarray:
    """The ranks that logged any per-rank metric of the run, ascending."""
    found = [_heatmap(store_root(), info.name, info.gen, m, 1, None, None)[0] for m in info.rank_metrics]
    return np.unique(np.concatenate(found)) if found else np.zeros(0, np.int64)


@st.cache_data(show_spinner=False, max_entries=512)
def _last_finite(root: str, name: str, gen: int, metric: str) -> tuple[int, float] | None:
    from ingest.services.run_status import last_finite as store_last_finite

    return store_last_finite(store_at(root), name, metric)


def last_finite(info: RunInfo, metric: str) -> tuple[int | None, float]:
    """(step, value) of the last finite logged value of ``metric`` at full fidelity, ``(None, NaN)``
    when there is none: the one figure the Runs table and Compare both show as a run's last value."""
    found = _last_finite(store_root(), info.name, info.gen, metric)
    return (None, math.nan) if found is None else found


def full_export(name: str, fmt: str) -> bytes:
    """The run's full-fidelity long table (``Store.export``) as CSV or Parquet bytes; called only when
    downloaded."""
    with tempfile.TemporaryDirectory(prefix="stabscope-export-") as folder:
        target = Path(folder) / f"{name}.{fmt}"
        get_store().export(name, fmt, target)
        return target.read_bytes()


# ------------------------------------------------------------------------------- events and spikes


@st.cache_data(show_spinner=False, max_entries=256)
def _events(root: str, name: str, gen: int) -> list[tuple[int, str, str, dict[str, Any]]]:
    return [(e.step, e.kind, e.label, dict(e.detail)) for e in store_at(root).events(name)]


def read_events(info: RunInfo) -> list[RunEvent]:
    """The run's logged events (schedule transitions, checkpoints, rollbacks, data switches) and the
    transitions found in its logged LR, which the analyses store with the run
    (``ingest.services.run_analyses.lr_transitions``; none before they have run), by step."""
    from ingest.services.run_findings import lr_transition_label, stored_lr_transitions

    logged = [RunEvent(*e) for e in _events(store_root(), info.name, info.gen)]
    found = [RunEvent(int(t["step"]), str(t["kind"]), lr_transition_label(t), {}) for t in stored_lr_transitions(info)]
    fresh = [f for f in found if not any(e.kind == f.kind and abs(e.step - f.step) <= 5 for e in logged)]
    return sorted(logged + fresh, key=lambda e: e.step)


@st.cache_data(show_spinner=False, max_entries=256)
def _spikes(root: str, name: str, gen: int, analysis_gen: int, meta_rev: int) -> list[dict[str, Any]]:
    return store_at(root).spikes(name)


def read_spikes(info: RunInfo) -> list[dict[str, Any]]:
    """The run's materialised spike events (the ``stabscope spikes --json`` objects)."""
    return _spikes(store_root(), info.name, info.gen, info.analysis_gen, meta_revision(info))


@st.cache_data(show_spinner=False, max_entries=256)
def _own_findings(root: str, name: str, gen: int, analysis_gen: int, meta_rev: int) -> dict[str, Any]:
    from ingest.services.run_findings import stored_findings

    store = store_at(root)
    return stored_findings(store, store.run_info(name), siblings=False)


def read_findings(info: RunInfo) -> list[dict[str, Any]]:
    """The run's overfitting and throughput-loss findings as ``stabscope spikes --json`` lists them
    after the incidents (``ingest.services.run_findings.finding_entries``); the comparison with sibling runs
    is made on each read, since a sibling may have been imported since."""
    from ingest.services.run_findings import finding_entries, sibling_gap

    findings = dict(_own_findings(store_root(), info.name, info.gen, info.analysis_gen, meta_revision(info)))
    findings["throughput_siblings"] = sibling_gap(info, findings.get("throughput_level"), list_runs())
    return finding_entries(findings)


# -------------------------------------------------------------------------------------- run status


@st.cache_data(show_spinner=False, max_entries=512)
def _run_status(root: str, name: str, gen: int, status: str, planned: int | None, stated: Any) -> str:
    # planned/stated (the metadata's planned steps and step count) are in the key: a user may set them
    from ingest.services.run_status import run_status as store_run_status

    return store_run_status(store_at(root), name)


def run_damage(info: RunInfo) -> str | None:
    """Why run ``info`` is damaged (``Store.damage``), or None: asked on every rerun, not cached with the
    generation, so that a file lost under an unchanged generation shows at once (a footer is read once
    while the file stays as it is)."""
    return store_at(store_root()).damage(info.name)


def run_status(info: RunInfo) -> str:
    """``live``, ``finished`` (reached its planned steps), ``stopped at N of M`` (ended before them)
    or ``ended at step N`` (no planned steps known): ``ingest.services.run_status.run_status``."""
    from ingest.services.run_status import damaged_status, planned_steps

    if run_damage(info) is not None:
        return damaged_status(info.name)
    planned, stated = planned_steps(info.meta), info.meta.get("last_step")
    return _run_status(store_root(), info.name, info.gen, info.status, planned, stated)
