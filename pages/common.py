"""What every page shares: the store handle, cached reads, pickers, and the data shaping behind the charts.

Every cached read is keyed by the store root and the run's generation (``gen``; ``analysis_gen`` for
analysis results), so a run that grows under ``watch`` is re-read and an unchanged one is not. Pages
only lay out widgets; figures live in ``pages.charts``.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import re
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st
from streamlit.errors import StreamlitAPIException

from ingest import run_alerts as ingest_alerts
from ingest.errors import StabScopeError
from ingest.paths import default_store_path
from ingest.run_meta import REVISION_FIELD
from ingest.store import RunInfo, SeriesData, Store
from stab_core.alerts import RankDeviation, rank_deviations
from stab_core.cost import DEFAULT_USD_PER_GPU_HOUR as DEFAULT_USD_PER_GPU_HOUR  # re-exported for the pages
from stab_core.cost import CostInputs
from stab_core.metrics import CANONICAL_METRICS, unit_of
from stab_core.runview import RunEvent

FULL_RES_MAX_STEPS = 5000
"""A visible span of at most this many steps is read at full fidelity; wider spans are bucketed."""
DISPLAY_BUCKETS = 1500
"""Min/max buckets per chart when downsampled (about one per horizontal pixel of a wide chart)."""
HEATMAP_BUCKETS = 400
"""Step columns of the rank heatmap."""
LIVE_REFRESH_S = 5.0
"""How often pages re-read a live run (seconds)."""

# ------------------------------------------------------------------------------------------- store


@st.cache_resource(show_spinner=False)
def _store_at(root: str) -> Store:
    from ingest.run_analyses import open_analysed_store

    return open_analysed_store(root)


def store_root() -> str:
    """The active store's directory (``$STABSCOPE_STORE`` or the embedded default), resolved."""
    return str(default_store_path().expanduser().resolve())


def get_store() -> Store:
    """The store at ``store_root()``: one handle per directory, shared by every session."""
    return _store_at(store_root())


def ensure_demo_runs() -> None:
    """Seed the demo runs on a store's first start, with a progress bar (once per store)."""
    from ingest.demo import DEMO_SEEDED_KEY, seed_demo_store

    store = get_store()
    if os.environ.get("STABSCOPE_NO_DEMO") or store.get_setting(DEMO_SEEDED_KEY):
        return
    bar = st.progress(0.0, text="First start: writing demo runs through the real shard -> Parquet path…")

    def advance(done: int, total: int) -> None:
        bar.progress(done / total, text=f"demo run {done}/{total}")

    seed_demo_store(store, progress=advance)
    bar.empty()


def list_runs() -> list[RunInfo]:
    """Catalog rows (not cached: cheap, and must show live runs and deletions at once)."""
    return get_store().list_runs()


def show_error(exc: Exception) -> None:
    """A user-facing error banner (never a traceback), in the page's words where the error has them
    (``StabScopeError.page_message``: "the Format box" rather than the CLI's ``--format NAME``)."""
    st.error(getattr(exc, "page_message", None) or str(exc), icon=":material/error:")


def nav_link(page: str, label: str, icon: str | None = None) -> None:
    """``st.page_link`` to another page; plain text when the page runs on its own (no navigation)."""
    try:
        st.page_link(page, label=label, icon=icon)
    except StreamlitAPIException:
        st.markdown(f"{icon or ''} {label} (open the **{Path(page).stem}** page)")


def go_to(page: str) -> None:
    """``st.switch_page`` when the app's navigation knows ``page``; nothing when a page runs on its own."""
    try:
        st.switch_page(page)
    except StreamlitAPIException:
        st.caption(f"Open the **{Path(page).stem}** page to continue.")


# ------------------------------------------------------------------------------------- cached reads
# Cached values are plain dicts, tuples and arrays, never library classes: st.cache_data pickles them,
# and a class reloaded by Streamlit's file watcher no longer pickles as the old one.


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
    s = _store_at(root).read_series(name, metric, start=start, end=end, buckets=buckets, rank=rank)
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
    return _store_at(root).read_rank_heatmap(name, metric, buckets=buckets, start=start, end=end)


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


@st.cache_data(show_spinner=False, max_entries=256)
def _events(root: str, name: str, gen: int) -> list[tuple[int, str, str, dict[str, Any]]]:
    return [(e.step, e.kind, e.label, dict(e.detail)) for e in _store_at(root).events(name)]


def read_events(info: RunInfo) -> list[RunEvent]:
    """The run's logged events (schedule transitions, checkpoints, rollbacks, data switches) and the
    transitions found in its logged LR (``stab_core.schedulers.schedule_transitions``), by step."""
    logged = [RunEvent(*e) for e in _events(store_root(), info.name, info.gen)]
    found = [RunEvent(*e) for e in _lr_transitions(store_root(), info.name, info.gen)]
    fresh = [f for f in found if not any(e.kind == f.kind and abs(e.step - f.step) <= 5 for e in logged)]
    return sorted(logged + fresh, key=lambda e: e.step)


@st.cache_data(show_spinner=False, max_entries=256)
def _lr_transitions(root: str, name: str, gen: int) -> list[tuple[int, str, str, dict[str, Any]]]:
    from stab_core.schedulers import schedule_transitions

    lr = _store_at(root).read_series(name, "lr")
    if lr.steps.size < 3:
        return []
    try:
        found = schedule_transitions(lr.steps, lr.values)
    except ValueError:  # a log the detector cannot read (e.g. repeated steps): no markers, no error
        return []
    return [(t.step, t.kind, f"{t.rel_change:+.0%} LR (from the logged lr)", {}) for t in found]


@st.cache_data(show_spinner=False, max_entries=256)
def _spikes(root: str, name: str, gen: int, analysis_gen: int, meta_rev: int) -> list[dict[str, Any]]:
    return _store_at(root).spikes(name)


def read_spikes(info: RunInfo) -> list[dict[str, Any]]:
    """The run's materialised spike events (the ``stabscope spikes --json`` objects)."""
    return _spikes(store_root(), info.name, info.gen, info.analysis_gen, meta_revision(info))


def meta_revision(info: RunInfo) -> int:
    """How many times a user changed the run's metadata: part of every cached analysis read's key, since
    such a change re-runs the analyses without a new data generation (``Store.update_meta``)."""
    return int(info.meta.get(REVISION_FIELD) or 0)


@st.cache_data(show_spinner=False, max_entries=512)
def _last_finite(root: str, name: str, gen: int, metric: str) -> tuple[int, float] | None:
    from ingest.run_status import last_finite as store_last_finite

    return store_last_finite(_store_at(root), name, metric)


def last_finite(info: RunInfo, metric: str) -> tuple[int | None, float]:
    """(step, value) of the last finite logged value of ``metric`` at full fidelity, ``(None, NaN)``
    when there is none: the one figure the Runs table and Compare both show as a run's last value."""
    found = _last_finite(store_root(), info.name, info.gen, metric)
    return (None, math.nan) if found is None else found


def last_value(info: RunInfo, metric: str) -> float:
    """The last finite logged value of ``metric`` (NaN when none); its step is ``last_finite``'s."""
    return last_finite(info, metric)[1]


@st.cache_data(show_spinner=False, max_entries=512)
def _run_status(root: str, name: str, gen: int, status: str, planned: int | None, stated: Any) -> str:
    # planned/stated (the metadata's planned steps and step count) are in the key: a user may set them
    from ingest.run_status import run_status as store_run_status

    return store_run_status(_store_at(root), name)


def run_status(info: RunInfo) -> str:
    """``live``, ``finished`` (reached its planned steps), ``stopped at N of M`` (ended before them)
    or ``ended at step N`` (no planned steps known): ``ingest.run_status.run_status``."""
    from ingest.run_status import planned_steps

    planned, stated = planned_steps(info.meta), info.meta.get("last_step")
    return _run_status(store_root(), info.name, info.gen, info.status, planned, stated)


BEST_WINDOW = 50
"""Logged values in the rolling median whose lowest point is a run's "best" figure: one noisy batch
does not make it."""


def best_smoothed(values: np.ndarray, window: int = BEST_WINDOW) -> float:
    """The lowest point of the trailing rolling median of ``window`` consecutive finite values (the
    median of all of them when fewer); NaN when there are none. Units: those of ``values``."""
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return math.nan
    if finite.size < window:
        return float(np.median(finite))
    return float(pd.Series(finite).rolling(window).median().min())


# ------------------------------------------------------------------------------------------ pickers


def pick_run(key: str = "run", label: str = "Run", runs: Sequence[RunInfo] | None = None) -> RunInfo | None:
    """A run selectbox that remembers the choice across pages (``?run=NAME`` in the URL works too)."""
    runs = list(list_runs() if runs is None else runs)
    if not runs:
        st.info(
            "No runs yet. Upload a log on the **Upload** page, or run `stabscope compact SHARD_DIR --run NAME` "
            "(or `stabscope watch ...` for a live run)."
        )
        return None
    names = [r.name for r in runs]
    wanted = st.session_state.get("selected_run") or st.query_params.get("run")
    index = names.index(wanted) if wanted in names else 0
    name = st.selectbox(label, names, index=index, key=key)
    st.session_state["selected_run"] = name
    return runs[names.index(name)]


def step_range(info: RunInfo, key: str) -> tuple[int, int]:
    """The visible step range: a range slider that also follows a live run's growing last step.

    Charts may set ``st.session_state[key]`` from a box selection (see ``zoom_to_selection``).
    """
    lo, hi = int(info.first_step or 0), int(info.last_step or 0)
    if hi <= lo:
        return lo, hi
    seen_key = f"{key}__last"
    current = st.session_state.get(key)
    if current is not None:
        a, b = int(current[0]), int(current[1])
        if b == st.session_state.get(seen_key) or b > hi:  # the user was watching the end: follow it
            b = hi
        st.session_state[key] = (max(lo, min(a, hi)), max(lo, min(b, hi)))
    st.session_state[seen_key] = hi
    if key not in st.session_state:
        st.session_state[key] = (lo, hi)
    value = cast(
        tuple[int, int], st.slider("Steps shown", lo, hi, key=key, help="Drag the ends, or drag across a chart")
    )
    return int(value[0]), int(value[1])


def zoom_to_selection(chart_key: str, range_key: str) -> None:
    """``on_select`` callback: a box selected on a chart becomes the visible step range (re-queried)."""
    event = st.session_state.get(chart_key) or {}
    boxes = (event.get("selection") or {}).get("box") or []
    if not boxes:
        return
    xs = boxes[0].get("x") or []
    if len(xs) == 2:
        a, b = sorted(round(float(x)) for x in xs)
        st.session_state[range_key] = (a, max(b, a + 1))


def reset_range(range_key: str) -> None:
    """Button callback: show the whole run again."""
    st.session_state.pop(range_key, None)


# --------------------------------------------------------------------------------- series shaping


def ema(steps: np.ndarray, values: np.ndarray, weight: float) -> np.ndarray:
    """Debiased EMA for display, with ``weight`` per *step* (TensorBoard's smoothing slider, per step).

    Applied per point as ``stab_core.snr.ema`` with beta = weight ** (median step spacing), so the
    smoothing looks the same whether a chart shows every step or min/max buckets of many steps.
    """
    from stab_core.snr import ema as bias_corrected_ema

    if not 0.0 <= weight < 1.0:
        raise ValueError(f"EMA weight must lie in [0, 1), got {weight!r}")
    if values.size == 0 or weight == 0.0:
        return np.asarray(values, dtype=np.float64)
    spacing = float(np.median(np.diff(steps))) if steps.size > 1 else 1.0
    return bias_corrected_ema(values, weight ** max(spacing, 1.0))


def metric_label(metric: str) -> str:
    """Axis title: the metric with its unit (``loss (nats/token)``)."""
    unit = unit_of(metric)
    return f"{metric} ({unit})" if unit else metric


def describe(metric: str) -> str:
    """The canonical description of a metric, or the name itself."""
    return CANONICAL_METRICS.get(metric.split("/", 1)[0], metric)


def shown_frame(shown: dict[str, SeriesData], ema_weight: float = 0.0) -> pd.DataFrame:
    """Exactly what a chart shows, long form: metric, step, value (mean), min, max, ema, bucketed."""
    parts = []
    for label, s in shown.items():
        parts.append(
            pd.DataFrame(
                {
                    "metric": label,
                    "step": s.steps,
                    "value": s.values,
                    "min": s.min,
                    "max": s.max,
                    "ema": ema(s.steps, s.values, ema_weight) if ema_weight > 0 else s.values,
                    "bucketed": s.bucketed,
                }
            )
        )
    columns = ["metric", "step", "value", "min", "max", "ema", "bucketed"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def to_bytes(frame: pd.DataFrame, fmt: str) -> bytes:
    """``frame`` as CSV or Parquet bytes for a download button."""
    if fmt == "csv":
        return bytes(frame.to_csv(index=False).encode())
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def full_export(name: str, fmt: str) -> bytes:
    """The run's full-fidelity long table (``Store.export``) as bytes; called only when downloaded."""
    with tempfile.TemporaryDirectory(prefix="stabscope-export-") as folder:
        target = Path(folder) / f"{name}.{fmt}"
        get_store().export(name, fmt, target)
        return target.read_bytes()


# -------------------------------------------------------------------------------------------- ranks


def rank_outliers(
    ranks: np.ndarray,
    steps: np.ndarray,
    matrix: np.ndarray,
    groups: np.ndarray | None = None,
    straggles: bool = True,
) -> pd.DataFrame:
    """``stab_core.alerts.rank_deviations`` as a table (most deviant rank first): ``rank``, ``mean``,
    ``deviation_pct``, ``peak_deviation_pct``, ``peak_step``, ``max_z``, ``flagged_pct``, ``kind``.
    ``groups``: each rank's comparison group (its pipeline stage); ``straggles``: whether the metric's
    persistent outliers are stragglers (``stab_core.alerts.STRAGGLER_METRICS``)."""
    columns = [f.name for f in fields(RankDeviation)]
    rows = rank_deviations(ranks, steps, matrix, groups=groups, straggles=straggles)
    return pd.DataFrame([asdict(d) for d in rows], columns=columns)


# ------------------------------------------------------------------------------------------ compare

_SEED_SUFFIX = re.compile(r"[-_.]?(?:seed|s)[-_]?\d+$", re.IGNORECASE)


def seed_group(info: RunInfo) -> str:
    """The group a run belongs to: ``meta['seed_group']``, else its name without a seed suffix
    (``gpt-seed3``, ``gpt_s3``, ``gpt-s-3`` -> ``gpt``)."""
    explicit = info.meta.get("seed_group")
    if isinstance(explicit, str) and explicit:
        return explicit
    return _SEED_SUFFIX.sub("", info.name) or info.name


@dataclass
class Line:
    """One compared curve: a run, or a seed group's mean with a band (``lower``/``upper``).

    ``smooth`` is the EMA of ``y`` (computed per run on its step axis, before any grouping).
    """

    label: str
    x: np.ndarray
    y: np.ndarray
    smooth: np.ndarray | None = None
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    members: tuple[str, ...] = ()


def to_x(info: RunInfo, s: SeriesData, axis: str) -> np.ndarray:
    """The x coordinate of each point: its step, or the cumulative ``tokens`` logged at that step, else
    ``meta['tokens_per_step']`` x the steps done by then (the first logged step counts as the first)."""
    if axis == "step":
        return s.steps.astype(np.float64)
    tokens = read_series(info, "tokens")
    if tokens.steps.size == 0:
        per_step = info.meta.get("tokens_per_step")
        if isinstance(per_step, int) and per_step > 0 and info.first_step is not None:
            return (s.steps.astype(np.float64) - info.first_step + 1) * per_step
        raise StabScopeError(
            f"run {info.name} logged no `tokens` series and has no tokens_per_step: align by step instead, "
            "or set its tokens per step under Run settings (Cost or Spikes page)"
        )
    return np.asarray(np.interp(s.steps, tokens.steps, tokens.values), dtype=np.float64)


GROUP_GRID_POINTS = 6000
"""Most points of the shared grid a seed group is averaged on (the union of the runs' x when smaller)."""


def group_lines(runs: Sequence[Line], groups: dict[str, str], band: str) -> list[Line]:
    """Seeds of a group -> one mean line with a ``minmax`` or ``std`` band across the seeds.

    Each run (a ``Line`` labelled with its run name) is interpolated onto the union of the runs' x
    (or ``GROUP_GRID_POINTS`` even points when that is larger; NaN outside the run's own range); the mean, band and the
    smoothed mean are taken over the runs that have data at each point. A group of one stays as is.
    """
    if band not in ("minmax", "std"):
        raise ValueError(f"band must be 'minmax' or 'std', got {band!r}")
    members: dict[str, list[Line]] = {}
    for line in runs:
        members.setdefault(groups.get(line.label, line.label), []).append(line)
    out = []
    for group, lines in members.items():
        if len(lines) == 1:
            out.append(lines[0])
            continue
        lo = min(float(np.nanmin(line.x)) for line in lines)
        hi = max(float(np.nanmax(line.x)) for line in lines)
        union = np.unique(np.concatenate([line.x[np.isfinite(line.x)] for line in lines]))
        grid = union if union.size <= GROUP_GRID_POINTS else np.linspace(lo, hi, GROUP_GRID_POINTS)
        stack = np.vstack([_interp_within(grid, line.x, line.y) for line in lines])
        mean, lower, upper = _band(stack, band)
        smooth = None
        if all(line.smooth is not None for line in lines):
            smooth = _band(np.vstack([_interp_within(grid, ln.x, ln.smooth) for ln in lines]), band)[0]  # type: ignore[arg-type]
        names = tuple(line.label for line in lines)
        out.append(Line(f"{group} (mean of {len(lines)})", grid, mean, smooth, lower, upper, names))
    return out


def _band(stack: np.ndarray, band: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lower, upper) over the rows of ``stack``, ignoring NaN (empty columns give NaN)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(stack, axis=0)
        if band == "minmax":
            return mean, np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)
        std = np.nanstd(stack, axis=0)
        return mean, mean - std, mean + std


def _interp_within(grid: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size == 0:
        return np.full(grid.shape, np.nan)
    out = np.asarray(np.interp(grid, x, y), dtype=np.float64)
    out[(grid < x[0]) | (grid > x[-1])] = np.nan
    return out


# ------------------------------------------------------------------------------------------- spikes


@st.cache_data(show_spinner=False, max_entries=256)
def _cost_inputs(root: str, name: str, gen: int, meta_rev: int) -> dict[str, Any]:
    from ingest.run_cost import run_cost_inputs as inputs_of_run

    return asdict(inputs_of_run(_store_at(root), name))


def run_cost(info: RunInfo) -> CostInputs:
    """The GPUs, USD per GPU-hour and step time every page prices ``info``'s spikes with, each with where
    it came from (``stab_core.cost.resolve_cost_inputs``: metadata, else measured, else assumed/unknown)."""
    return CostInputs(**_cost_inputs(store_root(), info.name, info.gen, meta_revision(info)))


def run_cost_inputs(info: RunInfo) -> tuple[float, int, float]:
    """(step time in s, NaN when unknown; GPUs; USD per GPU-hour) of :func:`run_cost`."""
    inputs = run_cost(info)
    step = inputs.step_time_s if inputs.step_time_s is not None else math.nan
    return step, inputs.gpus, inputs.usd_per_gpu_hour


@st.cache_data(show_spinner=False, max_entries=256)
def _priced_spikes(
    root: str, name: str, gen: int, analysis_gen: int, inputs: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[tuple[float, float, float]]]:
    """The spikes and, per spike, (steps charged, GPU-hours, USD) priced with ``inputs`` (a CostInputs)."""
    from ingest.run_cost import priced_run_spikes

    return priced_run_spikes(_store_at(root), name, CostInputs(**inputs))


def priced_spikes(info: RunInfo) -> pd.DataFrame:
    """The spike table: one row per event with its outcome, cause and price, with :func:`run_cost`'s inputs
    (``ingest.run_cost.priced_run_spikes``: lost steps, or a rollback when diverged). The Spikes and Cost
    pages both show this table; GPU-hours and USD are NaN (unknown) when the step time is."""
    columns = [
        "#",
        "metric",
        "incident",
        "peak step",
        "start",
        "end",
        "ratio",
        "duration",
        "outcome",
        "cause",
        "confidence",
        "steps lost",
        "GPU-hours lost",
        "USD lost",
    ]
    inputs = asdict(run_cost(info))
    spikes, costs = _priced_spikes(store_root(), info.name, info.gen, info.analysis_gen, inputs)
    rows = [
        {
            "#": i,
            "metric": s["metric"],
            "incident": incident_words(s),
            "peak step": int(s["peak"]),
            "start": incident_span(s)[0],
            "end": incident_span(s)[1],
            "ratio": _float(s.get("ratio")),
            "duration": incident_span(s)[1] - incident_span(s)[0] + 1,
            "outcome": "recovered" if s["recovered"] else "diverged",
            "cause": s["cause"],
            "confidence": float(s["confidence"]),
            "steps lost": costs[i][0],
            "GPU-hours lost": costs[i][1],
            "USD lost": costs[i][2],
        }
        for i, s in enumerate(spikes)
    ]
    return pd.DataFrame(rows, columns=columns)


def incident_span(s: dict[str, Any]) -> tuple[int, int]:
    """First and last step of an incident out of its band: over all its members (a grad-norm spike that
    led the loss starts the incident)."""
    members = s.get("members") or [s]
    return min(int(m["start"]) for m in members), max(int(m["end"]) for m in members)


def incident_words(s: dict[str, Any]) -> str:
    """An incident's kind and metrics in a few words ("loss + grad_norm", "early instability: loss")."""
    metrics = " + ".join(s.get("metrics") or [s["metric"]])
    kind = str(s.get("kind") or "spike")
    return metrics if kind == "spike" else f"{kind.replace('_', ' ')}: {metrics}"


def money(usd: float) -> str:
    """US dollars for display: cents below $100 (a short spike on a few GPUs costs cents)."""
    return f"${usd:,.2f}" if abs(usd) < 100 else f"${usd:,.0f}"


def _float(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


# ------------------------------------------------------------------------------------------- alerts


@st.cache_data(show_spinner=False, max_entries=256)
def _alerts(root: str, name: str, gen: int, analysis_gen: int, meta_rev: int, status: str) -> list[str]:
    # status is in the key: a run that stops being live keeps its generation but loses its "new spike"
    return [alert.message for alert in ingest_alerts.run_alerts(_store_at(root), name, live=status == "live")]


def run_alerts(info: RunInfo) -> list[str]:
    """Alerts for a run (cached per generation): diverged or recent spikes, saturated clipping,
    stragglers; the same ones ``stabscope watch --on-alert`` sends (``ingest.run_alerts``)."""
    return _alerts(store_root(), info.name, info.gen, info.analysis_gen, meta_revision(info), info.status)


def alert_banner(runs: Sequence[RunInfo]) -> None:
    """Warning banners for the live runs' alerts (the Runs table lists every run's)."""
    for info in runs:
        if info.status == "live":
            for alert in run_alerts(info):
                st.warning(f"**{info.name}**: {alert}", icon=":material/notifications_active:")


MISSING = "—"
"""How every table shows a value that does not exist (no spike yet, no per-rank data)."""


def run_catalog(runs: Sequence[RunInfo], summary: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The Runs table: one row per run with its status (``run_status``), last finite loss and its step
    (``last_finite``, as Compare shows them), spikes, worst spike, alerts and tags."""
    rows = []
    for r in runs:
        s = summary.get(r.name, {})
        tags = r.meta.get("tags", [])
        loss_step, loss = last_finite(r, "loss")
        rows.append(
            {
                "name": r.name,
                "status": run_status(r),
                "steps": r.n_steps,
                "ranks": r.ranks or None,  # None: a run-level log (no per-rank data), shown as a dash
                "last loss": loss,
                "last loss step": loss_step,
                "spikes": int(s.get("n_spikes", 0)),
                "worst spike (x)": _float(s.get("worst_ratio")),
                "alerts": "; ".join(run_alerts(r)),
                "tags": ", ".join(map(str, tags)) if isinstance(tags, list) else str(tags),
                "first–last": f"{r.first_step}–{r.last_step}" if r.first_step is not None else "",
                "rejected": r.rejected,
                "updated": r.updated,
            }
        )
    table = pd.DataFrame(rows)
    return table.astype({"last loss step": "Int64"}) if rows else table


# ---------------------------------------------------------------------------------------- scheduler


def scheduler_snippet(
    total_steps: int,
    warmup_steps: int,
    restart_warmup_steps: int,
    num_cycles: int,
    min_lr_ratio: float,
    peak_lr: float,
) -> str:
    """Python that builds ``WarmupCosineRestartScheduler`` with these settings (runs as written)."""
    return f"""import torch

from stab_core.schedulers import WarmupCosineRestartScheduler

model = torch.nn.Linear(16, 16)  # your model
optimizer = torch.optim.AdamW(model.parameters(), lr={peak_lr!r})  # lr = the peak LR
scheduler = WarmupCosineRestartScheduler(
    optimizer,
    total_steps={total_steps},
    warmup_steps={warmup_steps},
    restart_warmup_steps={restart_warmup_steps},
    num_cycles={num_cycles},
    min_lr_ratio={min_lr_ratio!r},
)
# in the training loop, after each optimizer.step():
#     scheduler.step()
"""


# ------------------------------------------------------------------------------------ decision tree


def diagnosis_of(spike: dict[str, Any]) -> Any:
    """The stored spike's verdict as a ``stab_core.diagnosis.Diagnosis`` (for ``tree_to_dot``)."""
    from stab_core.diagnosis import Diagnosis, NodeVisit

    path = [
        NodeVisit(p["node"], int(p.get("number", i + 1)), p.get("question", ""), p["answer"], p.get("evidence") or {})
        for i, p in enumerate(spike.get("path", []))
    ]
    leaf = spike.get("leaf") or f"leaf_{spike['cause']}"
    return Diagnosis(
        cause=spike["cause"],
        confidence=float(spike["confidence"]),
        path=path,
        leaf=leaf,
        actions=list(spike.get("actions", [])),
        missing=list(spike.get("missing", [])),
    )


def evidence_text(evidence: dict[str, Any], limit: int = 6) -> str:
    """``key = value`` lines of a node's evidence, numbers to 4 significant digits, unknowns left out."""
    lines = []
    for key, value in evidence.items():
        if value is None or key == "manual":
            continue
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        lines.append(f"{key} = {shown}")
    return "\n".join(lines[:limit] + ([f"… {len(lines) - limit} more"] if len(lines) > limit else []))


def dot_with_evidence(dot: str, diagnosis: Any | None) -> str:
    """``tree_to_dot`` output laid out for a page: the questions in one column with each "yes" leaf
    beside its question, the leaves of a question with several (node 5) stacked below it rather than
    side by side (a narrower graph is scaled down less to fit a column: larger text), and each
    visited node's evidence drawn as a note on the left of it."""
    from stab_core.diagnosis import DECISION_TREE

    # a white canvas keeps the black labels readable in the dark theme too
    extra = ['  graph [nodesep=0.3, ranksep=0.35, fontsize=11, bgcolor="white"];', "  node [fontsize=11];"]
    for node in DECISION_TREE.nodes:
        yes = [e.target for e in node.edges if e.answer.startswith("yes")]
        extra.append(f"  {{rank=same; {node.id}; {yes[0]}}}" if len(yes) == 1 else "")
        if len(yes) > 1:
            leaves = list(dict.fromkeys(e.target for e in node.edges))
            extra += [f"  {a} -> {b} [style=invis];" for a, b in itertools.pairwise(leaves)]
    for visit in diagnosis.path if diagnosis is not None else []:
        text = evidence_text(dict(visit.evidence))
        if not text:
            continue
        note = f"ev_{visit.node}"
        label = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\l") + "\\l"
        extra += [
            f'  {note} [shape=note, fontsize=9, color="#868e96", fontcolor="#343a40", label="{label}"];',
            f'  {note} -> {visit.node} [style=dashed, arrowhead=none, color="#adb5bd"];',
            f"  {{rank=same; {note}; {visit.node}}}",
        ]
    body = dot.rstrip().rstrip("}")
    return "\n".join(map(_rounded_question, body.split("\n"))) + "\n".join(line for line in extra if line) + "\n}\n"


def _rounded_question(line: str) -> str:
    """A question drawn as a rounded box rather than a diamond: about a third as wide around the same
    text, so the graph is scaled down less to fit a page column."""
    if "shape=diamond" not in line:
        return line
    if 'style="filled,bold"' in line:  # on the path
        return line.replace("shape=diamond", "shape=box").replace('style="filled,bold"', 'style="filled,bold,rounded"')
    return line.replace("shape=diamond", 'shape=box, style="rounded"')


# ------------------------------------------------------------------------------------------ uploads

MAX_UPLOAD_BYTES = 200 * 1024**2
"""Largest total upload accepted (bytes); matches ``server.maxUploadSize`` in .streamlit/config.toml."""
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def safe_filename(name: str, fallback: str = "upload") -> str:
    """A browser-supplied file name reduced to a plain base name: no folders, no ``..``, no leading dot,
    only letters, digits and ``._-`` (at most 128 characters)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    cleaned = _UNSAFE_CHARS.sub("_", base).lstrip(".")
    while ".." in cleaned:
        cleaned = cleaned.replace("..", ".")
    return cleaned[-128:] or fallback


def stage_uploads(files: Sequence[tuple[str, bytes]]) -> list[Path]:
    """Write uploaded ``(name, bytes)`` pairs into a new private (0700) temporary folder under safe,
    unique names; the caller removes the folder (``shutil.rmtree(paths[0].parent)``)."""
    total = sum(len(data) for _, data in files)
    if total > MAX_UPLOAD_BYTES:
        raise StabScopeError(
            f"the upload is {total / 1024**2:.1f} MiB; the limit is {MAX_UPLOAD_BYTES / 1024**2:.0f} MiB "
            "(import bigger logs with `stabscope import FILE`)"
        )
    folder = Path(tempfile.mkdtemp(prefix="stabscope-upload-"))
    paths: list[Path] = []
    for i, (name, data) in enumerate(files):
        target = folder / safe_filename(name, f"upload-{i}")
        if target.exists():
            target = folder / f"{i}-{target.name}"
        target.write_bytes(data)
        paths.append(target)
    return paths


def upload_run_name(filename: str) -> str:
    """A default run name from an uploaded file's name (its stem, made a valid run name)."""
    from ingest.importer import default_run_name

    return default_run_name([Path(safe_filename(filename)).with_suffix("")])


def parsed_summary(parsed: Any) -> pd.DataFrame:
    """Per metric of a ``ParsedLog``: rows, ranks, first/last step, min/max finite value, non-finite count."""
    columns = ["metric", "rows", "ranks", "first step", "last step", "min", "max", "non-finite"]
    table = parsed.table.select(["rank", "step", "metric", "value"]).to_pandas()
    if table.empty:
        return pd.DataFrame(columns=columns)
    table["finite"] = table["value"].where(np.isfinite(table["value"]))
    table["nonfinite"] = ~np.isfinite(table["value"])
    grouped = table.groupby("metric", observed=True)  # a categorical column from read_log's dictionary
    out = pd.DataFrame(
        {
            "rows": grouped.size(),
            "ranks": grouped["rank"].nunique(),
            "first step": grouped["step"].min(),
            "last step": grouped["step"].max(),
            "min": grouped["finite"].min(),
            "max": grouped["finite"].max(),
            "non-finite": grouped["nonfinite"].sum().astype(int),
        }
    )
    return out.reset_index()[columns]
