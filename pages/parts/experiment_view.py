"""The thesis experiment's results as the Scenarios page shows them: the measured table per arm, the
differences between arms, the article's claims set against the measurement in one sentence each, and
the figures (spike incidence and success per arm with their intervals, the SNR before the transition).

Plain functions of an :class:`~ingest.training.experiment_results.ExperimentResults`: no Streamlit,
no store. Every number comes from the results as ``stabscope experiment`` computed them (means,
bootstrap intervals, the claim checks' ``agrees``); nothing here recomputes a statistic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import plotly.graph_objects as go

from ingest.training.experiment_results import (
    ARMS,
    DOCS_RESULTS,
    MECHANISMS,
    ArmDifference,
    Claim,
    ClaimCheck,
    ExperimentResults,
)
from pages.parts.chart_style import PALETTE, base_layout
from pages.parts.charts import compare_figure
from pages.parts.compare_lines import Line, group_lines
from pages.parts.widgets import MISSING
from stab_core.bootstrap import Interval

AGREES = "agrees"
DISAGREES = "does not agree"
NO_DIFFERENCE = "no significant difference"
UNCHECKED = "cannot be checked"
"""The four verdicts a claim can get for one mechanism."""

REPRODUCE = "stabscope experiment"
"""The command that produces the results (its options are in the results' ``command``)."""

FIGURE_COLUMNS: dict[str, str] = {
    "spike_rate": "spike incidence",
    "peak_ratio": "peak ratio (x)",
    "steps_to_recover": "steps to recover",
    "divergence_rate": "divergence rate",
    "success_rate": "success rate",
    "final_val_loss": "final val loss (nats/byte)",
    "wall_time_s": "wall time (s)",
}
"""The tables' figures in order, with their labels (units in brackets; rates are shares of runs)."""
SEEDS_ROW, STORED_ROW = "seeds", "runs in this store"
RATES = frozenset({"spike_rate", "divergence_rate", "success_rate"})
"""Figures that are shares of runs (shown as percentages; their differences in percentage points)."""
_DECIMALS = {"peak_ratio": 2, "steps_to_recover": 0, "final_val_loss": 3, "wall_time_s": 0}


# ------------------------------------------------------------------------------------------ numbers


def _fixed(value: float, decimals: int, sign: str = "") -> str:
    """``value`` to ``decimals`` places with thousands separators; a value that rounds to 0 is "0", never "-0"."""
    rounded = round(value, decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    return f"{rounded:{sign},.{decimals}f}"


def value_text(figure: str, value: float) -> str:
    """One value of ``figure`` as the page prints it: a percentage for a rate, else its own unit."""
    if not math.isfinite(value):
        return MISSING
    if figure in RATES:
        return f"{_fixed(100 * value, 0)}%"
    return _fixed(value, _DECIMALS.get(figure, 2))


def interval_text(figure: str, interval: Interval) -> str:
    """``estimate [low, high]`` (MISSING when there was no data)."""
    if interval.empty:
        return MISSING
    low, high = value_text(figure, interval.low), value_text(figure, interval.high)
    return f"{value_text(figure, interval.estimate)} [{low}, {high}]"


def difference_text(figure: str, interval: Interval) -> str:
    """A difference between arms with its interval, signed: percentage points for a rate, else the
    figure's unit."""
    if interval.empty:
        return MISSING
    scale, decimals, unit = (100.0, 0, " pts") if figure in RATES else (1.0, _DECIMALS.get(figure, 2), "")
    if not unit and interval.excludes_zero:  # a significant difference never prints as "+0.00"
        nearest = min(abs(interval.low), abs(interval.high))
        while decimals < _DECIMALS.get(figure, 2) + 2 and round(nearest, decimals) == 0:
            decimals += 1
    estimate, low, high = (_fixed(scale * v, decimals, "+") for v in (interval.estimate, interval.low, interval.high))
    return f"{estimate}{unit} [{low}, {high}]"


def change_text(value: float) -> str:
    """A relative change as a signed percentage (-0.9 -> '-90%')."""
    return f"{_fixed(100 * value, 0, '+')}%" if math.isfinite(value) else MISSING


# ------------------------------------------------------------------------------------------- tables


def mechanisms_of(results: ExperimentResults) -> list[str]:
    """The mechanisms the results measured, in the order of ``MECHANISMS``."""
    measured = {a.mechanism for a in results.arms}
    return [m for m in MECHANISMS if m in measured] + sorted(measured - set(MECHANISMS))


def arms_of(results: ExperimentResults, mechanism: str) -> list[str]:
    """The mechanism's arms in the order of ``ARMS``."""
    measured = {a.arm for a in results.arms if a.mechanism == mechanism}
    return [a for a in ARMS if a in measured] + sorted(measured - set(ARMS))


def arms_legend(arms: Sequence[str]) -> str:
    """What each arm does, in one line: ``none: no remedy; clip: global clipping at 1.0; ...``."""
    return "; ".join(f"**{arm}**: {ARMS.get(arm, arm)}" for arm in arms)


POOLED = "all"
"""The mechanism name of a claim check pooled over every mechanism (the experiment's ``POOLED``)."""


def mechanism_name(mechanism: str) -> str:
    """``A (LR jump at a schedule switch)``: the key with the description's head."""
    return f"{mechanism} ({MECHANISMS[mechanism].split(' (')[0]})" if mechanism in MECHANISMS else mechanism


def mechanism_head(mechanism: str) -> str:
    """How a sentence about one mechanism (or all of them pooled) starts."""
    return "All mechanisms pooled" if mechanism == POOLED else f"Mechanism {mechanism_name(mechanism)}"


def column_help(results: ExperimentResults, mechanism: str) -> dict[str, str]:
    """The arms table's columns -> the remedy each arm applies."""
    return {arm: ARMS.get(arm, arm) for arm in arms_of(results, mechanism)}


def arm_runs(results: ExperimentResults, mechanism: str, arm: str) -> list[str]:
    """The store names of the arm's runs, by seed."""
    chosen = [r for r in results.runs if r.mechanism == mechanism and r.arm == arm]
    return [r.run for r in sorted(chosen, key=lambda r: r.seed)]


def arm_table(
    results: ExperimentResults, mechanism: str, stored: set[str] | frozenset[str] = frozenset()
) -> pd.DataFrame:
    """One column per arm, one row per figure as ``estimate [95% interval]``, with the seeds and how
    many of the arm's runs are in this store (``stored``: the store's run names)."""
    arms = arms_of(results, mechanism)
    rows: list[dict[str, str]] = [{"figure": SEEDS_ROW}, *({"figure": label} for label in FIGURE_COLUMNS.values())]
    rows.append({"figure": STORED_ROW})
    for arm in arms:
        summary = results.arm(mechanism, arm)
        assert summary is not None  # arms_of lists only measured arms
        rows[0][arm] = str(summary.seeds)
        for row, figure in zip(rows[1:], FIGURE_COLUMNS, strict=False):
            interval = summary.figures.get(figure)
            row[arm] = MISSING if interval is None else interval_text(figure, interval)
        runs = arm_runs(results, mechanism, arm)
        rows[-1][arm] = f"{sum(r in stored for r in runs)} of {len(runs)}"
    return pd.DataFrame(rows, columns=["figure", *arms])


SIGNIFICANT = " *"
"""Marks a difference whose 95% interval excludes 0 (over at least ``MIN_PAIRS`` seed pairs)."""
MIN_PAIRS = 2
"""Seed pairs a difference needs to be marked: one pair's "interval" is a single value, not a range."""


def difference_heading(figure: str) -> str:
    """A figure's column in the differences table: rates differ in percentage points."""
    label = FIGURE_COLUMNS.get(figure, figure)
    return f"{label.split(' (')[0]} (pts)" if figure in RATES else label


def difference_cell(figure: str, interval: Interval) -> str:
    """A difference table's cell: ``difference_text`` (without the unit its heading gives),
    ``SIGNIFICANT`` when its interval excludes 0, the number of seed pairs when fewer than ``MIN_PAIRS``."""
    if interval.empty:
        return MISSING
    text = difference_text(figure, interval).replace(" pts", "")
    if interval.n < MIN_PAIRS:
        return f"{text} (n={interval.n})"
    return text + (SIGNIFICANT if interval.excludes_zero else "")


NO_REMEDY = "none"
"""The arm every remedy is measured against."""


def difference_table(results: ExperimentResults, mechanism: str, against_none: bool) -> pd.DataFrame:
    """The paired differences (arm minus baseline, same seeds) of each remedy against no remedy
    (``against_none``) or of the remedies against each other: a column per comparison, a row per
    figure, each cell the mean difference [its 95% interval], marked ``SIGNIFICANT`` when the interval
    excludes 0. Empty when the results hold no such comparison."""
    order = {a: i for i, a in enumerate(ARMS)}
    chosen = [d for d in results.differences if d.mechanism == mechanism and (d.baseline == NO_REMEDY) == against_none]
    pairs = sorted({(d.baseline, d.arm) for d in chosen}, key=lambda p: (order.get(p[0], 99), order.get(p[1], 99)))
    figures = [f for f in FIGURE_COLUMNS if any(d.figure == f for d in chosen)]
    rows = []
    for figure in figures:
        row = {"figure": difference_heading(figure)}
        for baseline, arm in pairs:
            found = results.difference(mechanism, arm, baseline, figure)
            row[f"{arm} − {baseline}"] = MISSING if found is None else difference_cell(figure, found.difference)
        rows.append(row)
    return pd.DataFrame(rows, columns=["figure", *(f"{arm} − {baseline}" for baseline, arm in pairs)])


# ----------------------------------------------------------------------------------- claim verdicts


def claim_verdict(claim: Claim, check: ClaimCheck, difference: ArmDifference | None = None) -> str:
    """What the measurement says of the claim for one mechanism.

    ``UNCHECKED`` when the experiment could not check it (``agrees`` is None, or the change has no
    data); ``NO_DIFFERENCE`` when the arms' difference is not significant (the change's interval, or
    for a ``levels`` claim the paired difference's when given, includes 0), whatever ``agrees`` says:
    an interval wide enough to hold both 0 and the claim confirms neither; else ``AGREES`` or
    ``DISAGREES`` as the experiment's ``agrees`` says.
    """
    spread = claim_spread(check, difference)
    if check.agrees is None or spread.empty:
        return UNCHECKED
    if not spread.excludes_zero:
        return NO_DIFFERENCE
    return AGREES if check.agrees else DISAGREES


def claim_spread(check: ClaimCheck, difference: ArmDifference | None) -> Interval:
    """The interval that says whether the arms differ: the paired difference when given, else the
    relative change."""
    if difference is not None and not difference.difference.empty:
        return difference.difference
    return check.measured_change


def claimed_change(claim: Claim) -> float | None:
    """The relative change the claim states (for ``levels``: arm over baseline, minus 1)."""
    if claim.kind == "levels":
        if claim.claimed_baseline and claim.claimed_arm is not None:
            return claim.claimed_arm / claim.claimed_baseline - 1.0
        return None
    return claim.claimed_change


def _direction(claim: Claim, check: ClaimCheck) -> str:
    """For a significant change outside the claim: whether it went the claimed way, less or more."""
    claimed, measured = claimed_change(claim), check.measured_change.estimate
    if claimed is None or not math.isfinite(measured):
        return ""
    if claimed * measured < 0:
        return ", the other way"
    return ", a smaller change than claimed" if abs(measured) < abs(claimed) else ", a larger change than claimed"


def claim_sentence(
    claim: Claim, check: ClaimCheck, sample: str, difference: ArmDifference | None = None
) -> tuple[str, str]:
    """(verdict, one plain sentence) for one claim and one mechanism, from the measured numbers only.

    ``sample``: the sample size and where it was measured (``sample_text``), said at the end.
    """
    verdict = claim_verdict(claim, check, difference)
    figure, base, arm = claim.figure, check.measured_baseline, check.measured_arm
    label = FIGURE_COLUMNS.get(figure, figure)
    levels = (
        f"{label} {value_text(figure, base.estimate)} with {claim.baseline} → "
        f"{value_text(figure, arm.estimate)} with {claim.arm}"
    )
    head = mechanism_head(check.mechanism)
    if verdict == UNCHECKED:
        why = "nothing to compare"
        if claim.kind == "relative_change" and base.estimate == 0:
            why = f"no {label} in the {claim.baseline} arm, so nothing to reduce"
        return verdict, f"{head}: cannot be checked — {why} ({levels}; {sample})."
    if claim.kind == "relative_change":
        change = check.measured_change
        claimed = f"the claimed {change_text(claim.claimed_change or math.nan)}"
        measured = (
            f"{levels}, {change_text(change.estimate)} [95% CI {change_text(change.low)}, {change_text(change.high)}]"
        )
        if difference is not None and not difference.difference.empty:
            # the verdict rests on the paired difference (claim_spread): name the interval it reads
            measured += f"; paired difference {difference_text(figure, difference.difference)}"
    else:
        claimed = (
            f"the claimed {value_text(figure, claim.claimed_baseline or math.nan)} → "
            f"{value_text(figure, claim.claimed_arm or math.nan)}"
        )
        spread = claim_spread(check, difference)
        shown = difference_text(figure, spread) if difference is not None else change_text(spread.estimate)
        measured = f"{levels}, a difference of {shown}"
    if verdict == NO_DIFFERENCE:
        why = "neither confirmed nor ruled out" if check.agrees else "not what was measured either"
        paired = difference is not None and not difference.difference.empty
        which = "the paired difference's interval" if paired else "the interval"
        tail = f"no significant difference ({measured}: {which} includes 0), so {claimed} is {why}"
    elif verdict == AGREES:
        tail = f"agrees: {measured}, which holds {claimed}"
    else:
        tail = f"does not agree: {measured}, not {claimed}{_direction(claim, check)}"
    return verdict, f"{head}: {tail}; {sample}."


def claim_sentences(results: ExperimentResults) -> list[tuple[Claim, list[tuple[str, str]]]]:
    """Each claim of the results with its (verdict, sentence) per mechanism that checked it."""
    order = mechanisms_of(results)
    out = []
    for claim in results.claims:
        checks = [c for c in results.claim_checks if c.claim == claim.key]
        checks.sort(key=lambda c: order.index(c.mechanism) if c.mechanism in order else len(order))
        said = []
        for check in checks:
            difference = results.difference(check.mechanism, claim.arm, claim.baseline, claim.figure)
            n = min(check.measured_baseline.n, check.measured_arm.n)
            said.append(claim_sentence(claim, check, sample_text(results, n, check.mechanism), difference))
        out.append((claim, said))
    return out


# ------------------------------------------------------------------------------------------- source


def model_text(config: dict[str, Any]) -> str:
    """The trained model's size from the experiment's config (its ``shape``), as far as it says."""
    nested = config.get("shape")
    shape: dict[str, Any] = nested if isinstance(nested, dict) else config
    parts = []
    for key, unit in (("n_layers", "layers"), ("d_model", "wide")):
        if isinstance(shape.get(key), int):
            parts.append(f"{shape[key]} {unit}")
    if isinstance(shape.get("experts"), int) and shape["experts"] > 0:
        parts.append(f"{shape['experts']} experts")
    steps = config.get("steps")
    text = f"byte-level GPT ({', '.join(parts)})" if parts else "small byte-level GPT"
    return text + (f", {steps:,} steps" if isinstance(steps, int) else "")


def seeds_per_arm(results: ExperimentResults) -> int:
    """The fewest seeds any arm was trained with."""
    return min((a.seeds for a in results.arms), default=0)


def sample_text(results: ExperimentResults, n: int, mechanism: str = "") -> str:
    """``n = 8 seeds per arm, 600 steps on 2 CPU cores``: the sample size and where it was measured
    (pooled over mechanisms, ``n`` counts (mechanism, seed) pairs)."""
    m = results.machine
    steps = results.config.get("steps")
    trained = f", {steps:,} steps" if isinstance(steps, int) else ""
    unit = "runs per arm over all mechanisms" if mechanism == POOLED else "seeds per arm"
    few = f" (fewer than {MIN_SEEDS}: a check of the pipeline, not an answer)" if n < MIN_SEEDS else ""
    return f"n = {n} {unit}{few}{trained} on {m.cpus} {m.device.upper()} cores"


MIN_SEEDS = 8
"""Seeds per arm the experiment's answer rests on (the issue's minimum; ``--quick`` trains 2)."""
CHOICES = (("restart", "clip"), ("restart+clip", "restart"))
"""The comparisons a user choosing a remedy asks about: a restart instead of clipping, and whether
clipping on top of a restart adds anything."""
CHOICE_FIGURES = ("spike_rate", "success_rate", "peak_ratio", "final_val_loss")


def choice_sentence(results: ExperimentResults, mechanism: str, arm: str, baseline: str) -> str | None:
    """``restart`` instead of ``clip`` for one mechanism: each figure's paired difference with its
    interval and whether it is significant; None when the results hold no such comparison."""
    parts = []
    for figure in CHOICE_FIGURES:
        found = results.difference(mechanism, arm, baseline, figure)
        if found is None or found.difference.empty:
            continue
        significant = "significant" if found.excludes_zero else NO_DIFFERENCE
        if found.difference.n < MIN_PAIRS:
            significant = f"n={found.difference.n}, no interval"
        parts.append(f"{FIGURE_COLUMNS[figure]} {difference_text(figure, found.difference)} ({significant})")
    if not parts:
        return None
    return f"{mechanism_head(mechanism)}, {arm} rather than {baseline}: " + "; ".join(parts) + "."


def is_reference(results: ExperimentResults, docs_copy: Path = DOCS_RESULTS) -> bool:
    """Whether the results are the committed reference run (not this store's own experiment)."""
    return bool(results.source) and Path(results.source).resolve() == Path(docs_copy).resolve()


def source_text(results: ExperimentResults, docs_copy: Path = DOCS_RESULTS) -> str:
    """Where the figures come from, what they were measured on and how to reproduce them (markdown)."""
    m = results.machine
    origin = (
        "the reference run shipped with StabScope (`ingest/training/reference_results.json`, the one "
        "docs/experiments.md reports; this store has no experiment of its own)"
        if is_reference(results, docs_copy)
        else f"this store's experiment `{results.experiment_id}`"
    )
    load = f", load {m.load_average_1m:.1f}" if math.isfinite(m.load_average_1m) else ""
    text = (
        f"Measured on {results.created_utc[:10]}: {origin}; a {model_text(results.config)} trained on "
        f"{m.cpus} {m.device.upper()} cores{load} (torch {m.torch_version}). Reproduce with "
        f"`{results.command or REPRODUCE}`. Each interval is a bootstrap 95% interval over seeds."
    )
    if not results.complete:
        text += " **A partial run:** " + " ".join(results.notes)
    return text


# ------------------------------------------------------------------------------------------ figures


def rate_figure(results: ExperimentResults, figure: str) -> go.Figure:
    """``figure`` (a rate) per arm, one bar per mechanism, with the 95% interval as whiskers."""
    fig = go.Figure()
    arms = [a for a in ARMS if any(s.arm == a for s in results.arms)]
    for i, mechanism in enumerate(mechanisms_of(results)):
        points = [(arm, s.figures.get(figure)) for arm in arms if (s := results.arm(mechanism, arm)) is not None]
        shown = [(arm, iv) for arm, iv in points if iv is not None and not iv.empty]
        fig.add_trace(
            go.Bar(
                x=[arm for arm, _ in shown],
                y=[iv.estimate for _, iv in shown],
                error_y={
                    "type": "data",
                    "array": [iv.high - iv.estimate for _, iv in shown],
                    "arrayminus": [iv.estimate - iv.low for _, iv in shown],
                },
                name=f"{mechanism}: {MECHANISMS.get(mechanism, mechanism).split(' (')[0]}",
                marker_color=PALETTE[i % len(PALETTE)],
                customdata=[[iv.low, iv.high, iv.n] for _, iv in shown],
                hovertemplate="%{y:.0%} [%{customdata[0]:.0%}, %{customdata[1]:.0%}], %{customdata[2]} seeds",
            )
        )
    layout = base_layout(380, "arm")
    layout["hovermode"] = "closest"
    fig.update_layout(**layout, barmode="group")
    fig.update_yaxes(title_text=f"{FIGURE_COLUMNS.get(figure, figure)} (share of runs)", range=[0, 1.05],
                     tickformat=".0%")  # fmt: skip
    return fig


def snr_lines(results: ExperimentResults, mechanism: str) -> list[Line]:
    """Each arm's gradient SNR before the transition as the mean of its seeds, x in steps relative to
    the transition (negative: before it)."""
    runs, groups = [], {}
    for arm in arms_of(results, mechanism):
        for r in (r for r in results.runs if r.mechanism == mechanism and r.arm == arm and r.snr_steps):
            y = np.array([math.nan if v is None else v for v in r.snr_values], dtype=np.float64)
            x = np.asarray(r.snr_steps, dtype=np.float64) - r.transition_step
            known = np.isfinite(y)  # the SNR needs a window of steps first: no axis for the steps before
            runs.append(Line(r.run, x[known], y[known]))
            groups[r.run] = arm
    # means only: five arms' seed bands overlap into one blot on a log axis (the Compare page shows them)
    return [replace(line, lower=None, upper=None) for line in group_lines(runs, groups, "minmax")]


def snr_figure(lines: Sequence[Line]) -> go.Figure:
    """The arms' SNR traces on one log axis, the transition at 0."""
    fig = compare_figure(lines, "steps relative to the transition", "gradient SNR", log_y=True)
    fig.add_vline(x=0, line={"dash": "dot", "color": "#868e96"}, annotation_text="transition")
    return fig


def lead_table(rows: Sequence[dict[str, Any]], horizon: int) -> pd.DataFrame:
    """The lead-time rows of one horizon: predictor, spikes warned, alarms, precision, recall, lead."""

    def cell(interval: dict[str, Any]) -> str:
        if interval["estimate"] is None:
            return MISSING
        if interval["low"] is None:
            return f"{interval['estimate']:.2f}"
        return f"{interval['estimate']:.2f} [{interval['low']:.2f}, {interval['high']:.2f}]"

    return pd.DataFrame(
        [
            {
                "predictor": row["predictor"],
                "runs": row["runs"],
                "spikes warned": f"{row['warned']} of {row['spikes']}",
                "alarms (false)": f"{row['alarms']} ({row['false_alarms']})",
                "precision": cell(row["precision"]),
                "recall": cell(row["recall"]),
                "median lead (steps)": MISSING if row["median_lead"] is None else f"{row['median_lead']:.0f}",
            }
            for row in rows
            if row["horizon"] == horizon
        ]
    )
