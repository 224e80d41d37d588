"""An experiment's results as Markdown tables and PNG plots, for ``docs/experiments.md``.

``python -m ingest.training.experiment_report RESULTS.json --img docs/img`` writes
``experiments-rates.png``, ``experiments-val-loss.png``, ``experiments-differences.png`` and
``experiments-snr.png`` there and prints the tables. Plots need matplotlib (imported here only).
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ingest.training.experiment_results import ARMS, MECHANISMS, SUMMARY_FIGURES, ExperimentResults, read_results
from ingest.training.experiment_summary import COMPARED_PAIRS
from stab_core.bootstrap import Interval

KEY_PAIRS = COMPARED_PAIRS
"""Differences shown in the table and the forest plot: every pair the summary compares."""
_PERCENT = {"spike_rate", "success_rate", "divergence_rate"}


def _fmt(value: float, figure: str) -> str:
    if not math.isfinite(value):
        return "-"
    if figure in _PERCENT:
        return f"{100 * value:.0f}%"
    if figure in ("steps_to_recover", "wall_time_s"):
        return f"{value:.0f}"
    return f"{value:.3f}" if figure == "final_val_loss" else f"{value:.2f}"


def cell(interval: Interval, figure: str) -> str:
    """``estimate [low, high]`` in the figure's unit (percent for rates)."""
    if interval.empty:
        return "-"
    return f"{_fmt(interval.estimate, figure)} [{_fmt(interval.low, figure)}, {_fmt(interval.high, figure)}]"


def _signed(interval: Interval, figure: str) -> str:
    if interval.empty:
        return "-"
    scale = 100.0 if figure in _PERCENT else 1.0
    unit = " pp" if figure in _PERCENT else ""
    digits = 0 if figure in _PERCENT or figure in ("steps_to_recover", "wall_time_s") else 3
    e, lo, hi = (scale * v for v in (interval.estimate, interval.low, interval.high))
    return f"{e:+.{digits}f}{unit} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


def _relative(interval: Interval) -> str:
    """A relative change as signed percent (-0.9 -> -90%)."""
    if interval.empty:
        return "-"
    e, lo, hi = (100 * v for v in (interval.estimate, interval.low, interval.high))
    return f"{e:+.0f}% [{lo:+.0f}%, {hi:+.0f}%]"


def arm_table(results: ExperimentResults, mechanism: str) -> str:
    figures = list(SUMMARY_FIGURES)
    head = "| arm | runs | " + " | ".join(figures) + " |"
    lines = [head, "|" + " --- |" * (len(figures) + 2)]
    for arm in ARMS:
        summary = results.arm(mechanism, arm)
        if summary is None:
            continue
        cells = " | ".join(cell(summary.figures[f], f) for f in figures)
        lines.append(f"| {arm} | {summary.seeds} | {cells} |")
    return "\n".join(lines)


def difference_table(results: ExperimentResults, mechanism: str, figures: Sequence[str]) -> str:
    lines = [
        "| arm - baseline | " + " | ".join(figures) + " |",
        "|" + " --- |" * (len(figures) + 1),
    ]
    for arm, baseline in KEY_PAIRS:
        row = []
        for figure in figures:
            diff = results.difference(mechanism, arm, baseline, figure)
            if diff is None:
                row.append("-")
                continue
            mark = " **(CI excludes 0)**" if diff.excludes_zero else ""
            row.append(_signed(diff.difference, figure) + mark)
        if any(c != "-" for c in row):
            lines.append(f"| {arm} - {baseline} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def claims_table(results: ExperimentResults) -> str:
    claims = {c.key: c for c in results.claims}
    lines = [
        "| claim | mechanism | measured baseline | measured arm | measured change | size agrees | direction holds |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for check in results.claim_checks:
        claim = claims[check.claim]
        words = {True: "yes", False: "no", None: "cannot tell"}
        agrees = f"{words[check.agrees]} | {words[check.direction_holds]}"
        lines.append(
            f"| {claim.text} ({claim.arm} vs {claim.baseline}) | {check.mechanism} | "
            f"{cell(check.measured_baseline, claim.figure)} | {cell(check.measured_arm, claim.figure)} | "
            f"{_relative(check.measured_change)} | {agrees} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------------


def _mechanisms(results: ExperimentResults) -> list[str]:
    return [m for m in MECHANISMS if any(a.mechanism == m for a in results.arms)]


def _interval_bars(results: ExperimentResults, figures: Sequence[str], target: Path, ylabel: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    mechanisms = _mechanisms(results)
    fig, axes = plt.subplots(1, len(figures), figsize=(5.5 * len(figures), 3.8), squeeze=False)
    width = 0.8 / max(len(mechanisms), 1)
    for ax, figure in zip(axes[0], figures, strict=True):
        for i, mechanism in enumerate(mechanisms):
            xs, est, lo, hi = [], [], [], []
            for j, arm in enumerate(ARMS):
                summary = results.arm(mechanism, arm)
                if summary is None or summary.figures[figure].empty:
                    continue
                iv = summary.figures[figure]
                xs.append(j + (i - (len(mechanisms) - 1) / 2) * width)
                est.append(iv.estimate)
                lo.append(iv.estimate - iv.low)
                hi.append(iv.high - iv.estimate)
            ax.bar(xs, est, width, yerr=[lo, hi], capsize=3, label=f"mechanism {mechanism}")
        ax.set_xticks(range(len(ARMS)), list(ARMS), rotation=15)
        ax.set_title(figure.replace("_", " "))
        ax.set_ylabel(ylabel if figure in _PERCENT else SUMMARY_FIGURES[figure].split("(")[-1].rstrip(")"))
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)


def _forest(results: ExperimentResults, figures: Sequence[str], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    mechanisms = _mechanisms(results)
    fig, axes = plt.subplots(1, len(figures), figsize=(5.5 * len(figures), 4.2), squeeze=False)
    for ax, figure in zip(axes[0], figures, strict=True):
        labels: list[str] = []
        y = 0
        for mechanism in mechanisms:
            for arm, baseline in KEY_PAIRS:
                diff = results.difference(mechanism, arm, baseline, figure)
                if diff is None or diff.difference.empty:
                    continue
                iv = diff.difference
                color = "tab:red" if diff.excludes_zero else "tab:gray"
                ax.errorbar(
                    iv.estimate,
                    y,
                    xerr=[[iv.estimate - iv.low], [iv.high - iv.estimate]],
                    fmt="o",
                    color=color,
                    capsize=3,
                )
                labels.append(f"{mechanism}: {arm} - {baseline}")
                y += 1
        ax.axvline(0.0, color="black", lw=0.8)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{figure.replace('_', ' ')}: difference, 95% CI (red: excludes 0)", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)


def _snr(results: ExperimentResults, target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    mechanisms = _mechanisms(results)
    fig, axes = plt.subplots(1, len(mechanisms), figsize=(5 * len(mechanisms), 3.4), squeeze=False)
    for ax, mechanism in zip(axes[0], mechanisms, strict=True):
        for arm in ARMS:
            traces = [r for r in results.runs if r.mechanism == mechanism and r.arm == arm and r.snr_steps]
            if not traces:
                continue
            steps = np.asarray(traces[0].snr_steps, dtype=np.float64)
            values = np.full((len(traces), steps.size), np.nan)
            for i, run in enumerate(traces):
                row = np.array([np.nan if v is None else v for v in run.snr_values], dtype=np.float64)
                values[i, : min(row.size, steps.size)] = row[: steps.size]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a step no run has a finite SNR at: a gap
                mean = np.nanmean(values, axis=0)
            ax.plot(steps, mean, label=arm, lw=1)
        ax.set_yscale("log")
        ax.set_title(f"mechanism {mechanism}: gradient SNR before the transition", fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)


def write_plots(results: ExperimentResults, img_dir: Path) -> list[Path]:
    img_dir.mkdir(parents=True, exist_ok=True)
    paths = [img_dir / f"experiments-{n}.png" for n in ("rates", "val-loss", "differences", "snr")]
    _interval_bars(results, ["spike_rate", "success_rate"], paths[0], "share of runs")
    _interval_bars(results, ["final_val_loss", "peak_ratio"], paths[1], "")
    _forest(results, ["spike_rate", "final_val_loss"], paths[2])
    _snr(results, paths[3])
    return paths


def report(results: ExperimentResults) -> str:
    parts = []
    for mechanism in _mechanisms(results):
        parts += [
            f"### Mechanism {mechanism}: {MECHANISMS[mechanism]}",
            "",
            arm_table(results, mechanism),
            "",
            difference_table(results, mechanism, ["spike_rate", "success_rate", "peak_ratio", "final_val_loss"]),
            "",
        ]
    parts += ["### The article's claims", "", claims_table(results), ""]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--img", default=None, help="folder for the PNG plots (none: tables only)")
    args = parser.parse_args(argv)
    results = read_results(args.results)
    if args.img:
        for path in write_plots(results, Path(args.img)):
            print(f"wrote {path}", file=sys.stderr)
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
