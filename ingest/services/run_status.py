"""How far a run got: its last finite value, its planned steps, and the status a user reads.

A run imported from a log is "finished" only when it reached the steps it planned; one that ended
before them "stopped at N of M"; with no planned steps known it "ended at step N" (nothing says
whether that was the plan). N is the last step at which any metric has a finite value: a log whose
values turn to NaN (a golden-values file padded with "nan") stopped where they did. A run that
``watch`` is still writing stays "live".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ingest.store import Store
from ingest.store.storage_errors import DamagedRunFile

STATUS_WORDS = ("live", "finished", "stopped", "ended", "empty", "damaged")
"""The first word of every status :func:`status_text` writes (what the Runs page filters on)."""

FIRST_WINDOW_STEPS = 256
"""Steps read back from a run's end in the first look for its last finite value (doubled until found)."""


def planned_steps(meta: Mapping[str, Any]) -> int | None:
    """The optimizer steps a run planned: ``planned_steps`` (set by the user or a config, so it wins),
    else ``total_steps`` (the total a log states: ``iteration N/ M``, ``max_steps``, a golden file's
    ``end_step``); None when neither is a positive whole number."""
    for key in ("planned_steps", "total_steps"):
        value = meta.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value) and value > 0 and float(value).is_integer():
            return int(value)
    return None


def last_finite(store: Store, name: str, metric: str, *, after: int | None = None) -> tuple[int, float] | None:
    """(step, value) of the last finite value of ``metric`` in run ``name`` at full fidelity (the
    run-level series, else the cross-rank mean); only steps > ``after`` when given. None when there
    is none. Reads back from the run's end in windows that double, so a long run costs a few reads."""
    info = store.run_info(name)
    if info.first_step is None or info.last_step is None or metric not in info.metrics:
        return None
    first, last = info.first_step, info.last_step
    floor = first if after is None else max(first, after + 1)
    width = FIRST_WINDOW_STEPS
    hi = last
    while hi >= floor:
        lo = max(floor, hi - width + 1)
        series = store.read_series(name, metric, start=lo, end=hi, buckets=None)
        finite = np.flatnonzero(np.isfinite(series.values))
        if finite.size:
            i = int(finite[-1])
            return int(series.steps[i]), float(series.values[i])
        hi, width = lo - 1, width * 2
    return None


def last_finite_step(store: Store, name: str) -> int | None:
    """The last step at which any metric of run ``name`` has a finite value (None when none has).

    Loss first (it usually settles it), then each other metric read only past the step found."""
    info = store.run_info(name)
    best: int | None = None
    for metric in sorted(info.metrics, key=lambda m: m != "loss"):
        found = last_finite(store, name, metric, after=best)
        if found is not None:
            best = found[0]
    return best


def status_text(status: str, reached: int | None, planned: int | None, first_step: int | None) -> str:
    """What the Runs table says about a run.

    ``status``: the catalog's ("live" or "finished": whether something still writes it); ``reached``:
    the last step with a finite value; ``planned``: :func:`planned_steps`; ``first_step``: the first
    logged step. A log counted from 0 reaches its plan at step M - 1, one counted from 1 at M."""
    if status == "live":
        return "live"
    if reached is None:
        return "empty: no finite value logged"
    if planned is None:
        return f"ended at step {reached}"
    if reached + (1 if first_step == 0 else 0) >= planned:
        return "finished"
    return f"stopped at {reached} of {planned}"


def damaged_status(name: str) -> str:
    """The status of a run a file of which cannot be read, with the command that says what is wrong."""
    return f"damaged: run `stabscope check {name} --repair`"


def run_status(store: Store, name: str) -> str:
    """:func:`status_text` of run ``name``, from the catalog and its data (the trainer's own step
    count, ``meta['last_step']`` where a log states one, counts as reached)."""
    info = store.run_info(name)
    if store.damage(name) is not None:  # a long file gone is seen by no series read: asked for first
        return damaged_status(name)
    if info.status == "live":
        return "live"
    try:
        reached = last_finite_step(store, name)
    except DamagedRunFile:  # one damaged run must not hide the others' statuses
        return damaged_status(name)
    stated = info.meta.get("last_step")
    if isinstance(stated, int) and not isinstance(stated, bool) and reached is not None:
        reached = max(reached, stated)
    return status_text(info.status, reached, planned_steps(info.meta), info.first_step)
