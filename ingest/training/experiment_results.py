"""The results of one ``stabscope experiment``: frozen dataclasses, their JSON form, where they live.

An experiment trains every (mechanism, arm, seed) combination, writes each run into the store, and
measures it with StabScope's own detector; this module holds what came out:

- :class:`RunResult`: one run (its name in the store, whether a spike was detected after the
  transition, peak ratio, steps to recover, divergence, final validation loss, wall time, the
  gradient-SNR trace before the transition);
- :class:`ArmSummary`: one (mechanism, arm) over its seeds, each figure a bootstrap
  :class:`~stab_core.bootstrap.Interval`;
- :class:`ArmDifference`: one figure of one arm minus another, paired by seed, with its 95 % interval
  and whether that interval excludes 0;
- :class:`Claim` / :class:`ClaimCheck`: the source article's figures ("spike rate down 90 %",
  "success rate 60 % -> 95 %") as data, and what was measured for each, so a page can set them side
  by side;
- :class:`ExperimentResults`: all of it with the command, the config and the machine.

Results are written into the store as ``<store root>/experiments/<id>.json`` (atomically:
:func:`write_results`); the default run's results are also committed as
``ingest/training/reference_results.json`` (package data, so an installed wheel has them too; the
figures docs/experiments.md reports). :func:`load_latest_results` returns the newest from the store,
else that copy. JSON numbers that are not finite are written as null and read back as NaN.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ingest.errors import StabScopeError
from stab_core.bootstrap import Interval

SCHEMA_VERSION = 1
EXPERIMENTS_DIR = "experiments"
"""Folder under the store root holding one ``<id>.json`` per experiment."""
DOCS_RESULTS = Path(__file__).resolve().with_name("reference_results.json")
"""The committed copy of the default run's results, the ones docs/experiments.md reports (read when the
store holds none). Beside this module, as package data: the Scenarios page finds it in an installed wheel."""

MECHANISMS: dict[str, str] = {
    "A": "LR jump at a schedule switch (the LR returns to its peak with no warmup)",
    "B": "data-outlier resonance (batches of one repeated template at the switch)",
    "C": "router seesaw in a top-1 mixture-of-experts variant (data switch with the LR back at its peak)",
    "S": "spontaneous: a constant high LR after a short warmup, small batches, no weight decay; nothing provoked",
}
ARMS: dict[str, str] = {
    "none": "no remedy",
    "clip": "global clipping at 1.0",
    "zclip": "adaptive z-score clipping (ZClip)",
    "restart": "warmup restart at the transition",
    "restart+clip": "warmup restart and global clipping at 1.0",
}
"""Arm keys in their display order, with what each one does."""

SUMMARY_FIGURES: dict[str, str] = {
    "spike_rate": "share of runs with a detected loss spike after the transition (0-1)",
    "success_rate": "share of runs that neither diverged nor ended a spike unrecovered (0-1)",
    "divergence_rate": "share of runs that diverged (0-1)",
    "peak_ratio": "peak loss after the transition over the loss before it (x)",
    "steps_to_recover": "steps from a detected spike's start until the loss is back at its baseline (steps)",
    "final_val_loss": "validation loss at the end (nats/byte)",
    "wall_time_s": "training wall time of a run (s)",
}
"""Figures of an :class:`ArmSummary` and of :class:`ArmDifference`, with their units."""


@dataclass(frozen=True)
class Machine:
    """Where the experiment ran: CPU cores, the 1-minute load average when it started, torch."""

    hostname: str
    cpus: int
    load_average_1m: float
    device: str
    torch_version: str
    python_version: str


@dataclass(frozen=True)
class RunResult:
    """One trained run, measured. Steps are optimizer steps; losses in nats per byte.

    ``spiked``: StabScope's detector found a loss-led incident starting in the window after the
    transition. ``peak_ratio``: the highest loss in that window over the median loss just before the
    transition (computed for every run, spike or not). ``steps_to_recover``: from the spike's start
    until the loss is back at its baseline (None: no spike, or it never recovered). ``snr_steps`` /
    ``snr_values``: the stored gradient-SNR series before the transition (None where not finite).
    """

    mechanism: str
    arm: str
    seed: int
    run: str
    transition_step: int
    spiked: bool
    peak_ratio: float
    steps_to_recover: int | None
    recovered: bool
    diverged: bool
    final_val_loss: float
    wall_time_s: float
    incidents: int
    snr_steps: tuple[int, ...] = ()
    snr_values: tuple[float | None, ...] = ()

    @property
    def succeeded(self) -> bool:
        """Finished without needing a rollback: not diverged, and any spike recovered."""
        return not self.diverged and (not self.spiked or self.recovered)


@dataclass(frozen=True)
class ArmSummary:
    """One (mechanism, arm) over its seeds: each key of ``SUMMARY_FIGURES`` -> its mean and interval."""

    mechanism: str
    arm: str
    seeds: int
    figures: dict[str, Interval]
    seed_group: str
    """The Compare page's seed group of these runs (meta ``seed_group``)."""


@dataclass(frozen=True)
class ArmDifference:
    """``figure`` of ``arm`` minus ``baseline`` (same mechanism), paired by seed."""

    mechanism: str
    arm: str
    baseline: str
    figure: str
    difference: Interval

    @property
    def excludes_zero(self) -> bool:
        return self.difference.excludes_zero


@dataclass(frozen=True)
class Claim:
    """One figure the source article states (as engineering inference, not measured).

    ``kind`` ``relative_change``: ``figure`` of ``arm`` changes by ``claimed_change`` relative to
    ``baseline`` (-0.9 = down 90 %). ``kind`` ``levels``: ``figure`` is ``claimed_baseline`` under
    ``baseline`` and ``claimed_arm`` under ``arm``.
    """

    key: str
    text: str
    kind: str
    figure: str
    arm: str
    baseline: str
    claimed_change: float | None = None
    claimed_baseline: float | None = None
    claimed_arm: float | None = None


ARTICLE_CLAIMS: tuple[Claim, ...] = (
    Claim(
        key="spike_rate_down_90",
        text="warmup restarts cut the spike rate by 90%",
        kind="relative_change",
        figure="spike_rate",
        arm="restart",
        baseline="none",
        claimed_change=-0.9,
    ),
    Claim(
        key="success_60_to_95",
        text="success rate 60% with clipping, 95% with warmup restarts",
        kind="levels",
        figure="success_rate",
        arm="restart",
        baseline="clip",
        claimed_baseline=0.60,
        claimed_arm=0.95,
    ),
)


@dataclass(frozen=True)
class ClaimCheck:
    """What one mechanism measured for one claim.

    ``measured_baseline`` / ``measured_arm``: the figure's mean and interval in each arm;
    ``measured_change``: the relative change (arm over baseline, minus 1) with its interval.
    ``agrees``: the claimed value lies inside the measured interval (for ``levels``: both do);
    None when the measurement is empty (e.g. no spikes at all in the baseline arm).
    ``direction_holds``: the paired difference (arm - baseline, by seed) has the claim's sign with a
    95 % interval that excludes 0: the claim's direction is confirmed even where its size is not (a
    measured -100 % against a claimed -90 %).
    None when the measurement is empty.
    """

    claim: str
    mechanism: str
    measured_baseline: Interval
    measured_arm: Interval
    measured_change: Interval
    agrees: bool | None
    direction_holds: bool | None = None


@dataclass(frozen=True)
class ExperimentResults:
    """Everything one ``stabscope experiment`` produced. ``complete`` is False for a subset (a run
    stopped early): ``notes`` then says which part it is."""

    experiment_id: str
    created_utc: str
    command: str
    config: dict[str, Any]
    machine: Machine
    runs: tuple[RunResult, ...]
    arms: tuple[ArmSummary, ...]
    differences: tuple[ArmDifference, ...]
    claims: tuple[Claim, ...] = ARTICLE_CLAIMS
    claim_checks: tuple[ClaimCheck, ...] = ()
    complete: bool = True
    notes: tuple[str, ...] = ()
    lead_time: tuple[dict[str, Any], ...] = ()
    """Does the SNR fall before a spike: each predictor x horizon scored over the runs
    (``ingest.training.lead_time.lead_row_dict``); empty in results written before it was measured."""
    schema_version: int = SCHEMA_VERSION
    source: str = field(default="", compare=False)
    """Where these results were read from (not written)."""

    def arm(self, mechanism: str, arm: str) -> ArmSummary | None:
        return next((a for a in self.arms if a.mechanism == mechanism and a.arm == arm), None)

    def difference(self, mechanism: str, arm: str, baseline: str, figure: str) -> ArmDifference | None:
        return next(
            (
                d
                for d in self.differences
                if (d.mechanism, d.arm, d.baseline, d.figure) == (mechanism, arm, baseline, figure)
            ),
            None,
        )


# --------------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------------


def _json_ready(value: Any) -> Any:
    """Non-finite floats -> None, tuples -> lists, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    return value


def results_to_json(results: ExperimentResults) -> str:
    """The results as JSON text (non-finite numbers as null)."""
    data = asdict(results)
    data.pop("source")
    return json.dumps(_json_ready(data), indent=1, sort_keys=False)


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _interval(data: dict[str, Any]) -> Interval:
    return Interval(
        estimate=_num(data["estimate"]),
        low=_num(data["low"]),
        high=_num(data["high"]),
        n=int(data["n"]),
        confidence=float(data["confidence"]),
    )


def _run(data: dict[str, Any]) -> RunResult:
    return RunResult(
        **{
            k: v
            for k, v in data.items()
            if k not in ("peak_ratio", "final_val_loss", "wall_time_s", "snr_steps", "snr_values")
        },
        peak_ratio=_num(data["peak_ratio"]),
        final_val_loss=_num(data["final_val_loss"]),
        wall_time_s=_num(data["wall_time_s"]),
        snr_steps=tuple(int(s) for s in data["snr_steps"]),
        snr_values=tuple(None if v is None else float(v) for v in data["snr_values"]),
    )


def results_from_json(text: str, source: str = "") -> ExperimentResults:
    """Parse :func:`results_to_json`'s output; raises StabScopeError naming ``source`` when it is not one."""
    try:
        data = json.loads(text)
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise StabScopeError(
                f"experiment results {source or '(text)'} have schema version {version!r}; this StabScope "
                f"reads version {SCHEMA_VERSION}: re-run `stabscope experiment` to write them again"
            )
        return ExperimentResults(
            experiment_id=str(data["experiment_id"]),
            created_utc=str(data["created_utc"]),
            command=str(data["command"]),
            config=dict(data["config"]),
            machine=Machine(**data["machine"]),
            runs=tuple(_run(r) for r in data["runs"]),
            arms=tuple(
                ArmSummary(
                    mechanism=a["mechanism"],
                    arm=a["arm"],
                    seeds=int(a["seeds"]),
                    figures={k: _interval(v) for k, v in a["figures"].items()},
                    seed_group=a["seed_group"],
                )
                for a in data["arms"]
            ),
            differences=tuple(
                ArmDifference(d["mechanism"], d["arm"], d["baseline"], d["figure"], _interval(d["difference"]))
                for d in data["differences"]
            ),
            claims=tuple(Claim(**c) for c in data["claims"]),
            claim_checks=tuple(
                ClaimCheck(
                    claim=c["claim"],
                    mechanism=c["mechanism"],
                    measured_baseline=_interval(c["measured_baseline"]),
                    measured_arm=_interval(c["measured_arm"]),
                    measured_change=_interval(c["measured_change"]),
                    agrees=c["agrees"],
                    direction_holds=c.get("direction_holds"),
                )
                for c in data["claim_checks"]
            ),
            complete=bool(data["complete"]),
            notes=tuple(data["notes"]),
            lead_time=tuple(dict(row) for row in data.get("lead_time", [])),
            schema_version=int(version),
            source=source,
        )
    except StabScopeError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StabScopeError(
            f"experiment results {source or '(text)'} are not the JSON `stabscope experiment` writes "
            f"({type(exc).__name__}: {exc}); re-run the experiment or restore the file"
        ) from exc


# --------------------------------------------------------------------------------------------------
# Where results live
# --------------------------------------------------------------------------------------------------


def results_path(store_root: str | os.PathLike[str], experiment_id: str) -> Path:
    return Path(store_root) / EXPERIMENTS_DIR / f"{experiment_id}.json"


def write_json_atomically(target: Path, text: str) -> Path:
    """Write ``text`` to ``target`` through a temporary file and a rename: a reader sees the old file
    or the new one, never a torn one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the results from a dashboard run by another user
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_results(store_root: str | os.PathLike[str], results: ExperimentResults) -> Path:
    """Write ``results`` as ``<store root>/experiments/<id>.json`` atomically; returns the path."""
    return write_json_atomically(results_path(store_root, results.experiment_id), results_to_json(results))


def read_results(path: str | os.PathLike[str]) -> ExperimentResults:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise StabScopeError(f"cannot read experiment results {file}: {exc.strerror or exc}") from exc
    return results_from_json(text, source=str(file))


def stored_results(store_root: str | os.PathLike[str]) -> list[Path]:
    """The store's experiment result files, oldest first (by the time they were written)."""
    folder = Path(store_root) / EXPERIMENTS_DIR
    if not folder.is_dir():
        return []
    return sorted(folder.glob("*.json"), key=lambda p: (p.stat().st_mtime_ns, p.name))


def load_latest_results(
    store_root: str | os.PathLike[str] | None, docs_copy: str | os.PathLike[str] | None = DOCS_RESULTS
) -> ExperimentResults | None:
    """The newest experiment results in the store, else the committed docs copy, else None."""
    found = stored_results(store_root) if store_root is not None else []
    if found:
        return read_results(found[-1])
    if docs_copy is not None and Path(docs_copy).is_file():
        return read_results(docs_copy)
    return None
