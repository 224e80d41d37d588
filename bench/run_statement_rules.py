"""The rules that judge StabScope's run-level statements with the per-run golden facts ("Facts v2" of the
facts schema, ``/work/prompts/facts_schema.md``; issue #32): a sample count quoted by a note against the
golden run's ``records_by_metric``, the run's status against ``planned_steps`` and ``ended``, and a
throughput gap against sibling runs against ``sibling_runs_comparable`` and each golden run's
``median_throughput``. Where a golden file has no such field the verdict is the one it had before
(unjudged, with why). ``bench.statement_eval`` applies them. Pure: no I/O.

Every verdict rests on the golden facts only, never on another output of StabScope.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any, Final

from bench.statement_rules import FALSE, RUN_METRICS, TRUE, UNJUDGED, Verdict, run_loss_never_finite
from stab_core.decision_tree import DiagnosisParams
from stab_core.metrics import LOSS_FLAT_TOLERANCE

SIBLING_TOLERANCE: Final = 0.10
"""A gap against sibling runs is true when the golden medians' ratio is within this fraction of the ratio said."""

COUNT_TOLERANCE: Final = 0.01
"""A count a note quotes may differ from the golden records by this fraction (at least 1): the tolerance
``bench.corpus_eval`` allows a run's records (``RECORDS_TOLERANCE``)."""


# --------------------------------------------------------------------------------------------------
# Counts: "N finite grad_norm samples", "no SNR yet: N grad-norm samples"
# --------------------------------------------------------------------------------------------------

FINITE_SAMPLES: Final = re.compile(r"^Not run: \w+ spikes: (\d+) finite (\w+) samples")
SNR_SAMPLES: Final = re.compile(r"no SNR yet: (\d+) grad-norm samples")
ALL_NONFINITE: Final = re.compile(r"all (\d+) ([\w-]+) samples are non-finite")


def golden_records(run: Mapping[str, Any] | None, metric: str) -> int | None:
    """The golden run's logged steps carrying canonical ``metric`` (finite or not): ``records_by_metric``
    (by the metric's name or the ``facts.logged`` quantity it shows), else ``records`` when ``metric`` is
    the run's ``records_metric``; 0 when ``records_by_metric`` is given and omits it (not logged); None
    when no fact counts it."""
    if not run:
        return None
    by_metric = run.get("records_by_metric")
    if isinstance(by_metric, Mapping):
        keys = [metric] + [quantity for quantity, metrics in RUN_METRICS.items() if metric in metrics]
        for key in keys:
            if isinstance(by_metric.get(key), int):
                return int(by_metric[key])
        return 0
    if run.get("records_metric") == metric and run.get("records") is not None:
        return int(run["records"])
    return None


def sample_count_verdict(
    count: int, metric: str, run: Mapping[str, Any] | None, facts: Mapping[str, Any]
) -> Verdict | None:
    """A note's "``count`` finite ``metric`` samples" against :func:`golden_records` (None: no fact counts
    them). The golden counts finite and non-finite records alike, so fewer finite samples than records is
    neither supported nor contradicted, except 0 finite losses of a run non-finite from its start."""
    records = golden_records(run, metric)
    if records is None:
        return None
    if count == 0 and metric == "loss" and facts.get("nonfinite_from_start") is True:
        return TRUE, "nonfinite_from_start: no finite loss"
    if abs(count - records) <= max(1.0, COUNT_TOLERANCE * records):
        return TRUE, f"the golden run has {records} {metric} records"
    if count > records:
        return FALSE, f"the golden run has {records} {metric} records"
    return UNJUDGED, f"the golden run has {records} {metric} records, finite or not"


SNR_PROXY_SAMPLES: Final = DiagnosisParams().proxy_window
"""Grad-norm samples the SNR proxy needs before it has a value (what "too few samples of the grad norm
before the incident" and "the SNR proxy needs 100" say)."""


def too_few_before_verdict(run: Mapping[str, Any] | None, metric: str, onset: int, need: int) -> Verdict:
    """ "The log has too few samples of ``metric`` before the incident" (at step ``onset``; the node needs
    ``need``): true when the golden run has fewer than ``need`` records of it in all, or logs it at every
    step (records = steps in its span) and fewer than ``need`` steps precede ``onset``; otherwise no fact
    counts the samples before a step (unjudged)."""
    records = golden_records(run, metric)
    if records is None:
        return UNJUDGED, f"logged.{metric} true; no fact counts its samples"
    if records < need:
        return TRUE, f"the golden run has {records} {metric} records in all (fewer than {need})"
    steps = (run or {}).get("steps")
    if steps and records == int(steps[1]) - int(steps[0]) + 1 and onset - int(steps[0]) < need:
        return TRUE, f"{metric} at every step from {steps[0]}: {onset - int(steps[0])} before step {onset}"
    span = int(steps[1]) - int(steps[0]) if steps else 0
    if (
        steps
        and records > 1
        and span % (records - 1) == 0
        and (metric == "loss" or run_logs_on_loss_grid(run, records))
    ):
        # the records fill an even grid from the first step to the last (every k steps, as the count says):
        # the samples before the onset are counted on it (docs/diagnosis.md, "Scorer"); more than the proxy needs is no
        # fact against the sentence (the node's other windows need more)
        every = span // (records - 1)
        before = max(0, (onset - int(steps[0]) + every - 1) // every)
        if before < need:
            return TRUE, f"{metric} every {every} steps from {steps[0]}: {before} before step {onset}"
    return UNJUDGED, f"the golden run has {records} {metric} records; no fact counts those before step {onset}"


def run_logs_on_loss_grid(run: Mapping[str, Any] | None, records: int) -> bool:
    """Does a metric with ``records`` records share the run's step grid? Only when it has as many records as
    the run's ``records_metric`` (the steps span counts the run's own records, not every metric's)."""
    return bool(run) and (run or {}).get("records") == records


SIGNED_LOSS_NOTE: Final = "the loss takes negative values"


def signed_loss_verdict(note: str, run: Mapping[str, Any] | None) -> Verdict | None:
    """ "The loss takes negative values": true when a loss value the golden run states (first, last) is
    negative; no fact gives a run's lowest loss otherwise (unjudged). None for any other note."""
    if SIGNED_LOSS_NOTE not in note:
        return None
    stated = [(run or {}).get(end, {}).get("loss") for end in ("first", "last")]
    negative = [v for v in stated if isinstance(v, (int, float)) and v < 0]
    if negative:
        return TRUE, f"the golden run's loss is {negative[0]} (first/last values)"
    return UNJUDGED, "the golden run's first and last losses are not negative; no fact gives its lowest"


def count_note_verdict(note: str, run: Mapping[str, Any] | None, facts: Mapping[str, Any]) -> Verdict | None:
    """A note that quotes a sample count (the spike detector's, the SNR proxy's), judged by
    :func:`sample_count_verdict`; None for any other note, or when no fact counts the samples."""
    samples = FINITE_SAMPLES.match(note)
    if samples:
        return sample_count_verdict(int(samples.group(1)), samples.group(2), run, facts)
    snr = SNR_SAMPLES.search(note)
    if snr:
        return sample_count_verdict(int(snr.group(1)), "grad_norm", run, facts)
    zeros = ZERO_GRAD.search(note)
    if zeros:
        return zero_grad_verdict(int(zeros.group(1)), run)
    every = ALL_NONFINITE.search(note)
    if every:
        return all_nonfinite_verdict(int(every.group(1)), every.group(2).replace("-", "_"), run, facts)
    return None


ZERO_GRAD: Final = re.compile(r"the gradient norm is 0 at every one of its (\d+) samples while the loss does not fall")


def zero_grad_verdict(count: int, run: Mapping[str, Any] | None) -> Verdict | None:
    """ "The gradient norm is 0 at every one of its N samples while the loss does not fall": the count
    against the golden records; the golden run's first and last grad norm (0: true, else false) and its
    first and last loss (within ``stab_core.metrics.LOSS_FLAT_TOLERANCE``; a fall: false). None when no
    fact counts the records."""
    records = golden_records(run, "grad_norm")
    if records is None:
        return None
    if abs(count - records) > max(1.0, COUNT_TOLERANCE * records):
        return FALSE, f"the golden run has {records} grad_norm records"
    ends = [((run or {}).get(end) or {}) for end in ("first", "last")]
    grads, losses = [e.get("grad_norm") for e in ends], [e.get("loss") for e in ends]
    if not all(isinstance(v, int | float) for v in (*grads, *losses)):
        return UNJUDGED, "no fact gives the golden run's first and last grad norm and loss"
    if any(v != 0 for v in grads):
        return FALSE, f"the golden run's first/last grad_norm are {grads}"
    if losses[1] < losses[0] - LOSS_FLAT_TOLERANCE * abs(losses[0]):
        return FALSE, f"the golden run's loss falls: {losses[0]} -> {losses[1]}"
    return TRUE, f"the golden run's grad_norm is 0 at its first and last record, its loss {losses[0]} -> {losses[1]}"


def all_nonfinite_verdict(
    count: int, metric: str, run: Mapping[str, Any] | None, facts: Mapping[str, Any]
) -> Verdict | None:
    """ "All ``count`` ``metric`` samples are non-finite": the count against :func:`golden_records`, the
    "non-finite" against ``facts.nonfinite_from_start`` (a run finite at its start has finite samples: false;
    non-finite from its start with every record counted: true). None when no fact counts the records."""
    records = golden_records(run, metric)
    if records is None:
        return None
    if abs(count - records) > max(1.0, COUNT_TOLERANCE * records):
        return FALSE, f"the golden run has {records} {metric} records"
    ends = [((run or {}).get(end) or {}).get(metric) for end in ("first", "last")]
    if metric != "loss" and all(isinstance(v, int | float) for v in ends):
        # nonfinite_from_start is about the loss: another metric's own first and last values decide (docs/diagnosis.md,
        # "Scorer")
        finite = [v for v in ends if math.isfinite(v)]
        if finite:
            return FALSE, f"the golden run's first/last {metric} is {finite[0]}"
        return TRUE, f"the golden run's first and last {metric} are non-finite; it has {records} {metric} records"
    start = facts.get("nonfinite_from_start")
    if start is True or (metric == "loss" and run_loss_never_finite(run)):
        return TRUE, f"the golden run's loss is non-finite from its start; it has {records} {metric} records"
    if start is False:
        return FALSE, "nonfinite_from_start false: the run has finite values at its start"
    return UNJUDGED, "facts have no nonfinite_from_start"


# --------------------------------------------------------------------------------------------------
# The run's status: "finished", "stopped at N of M", "ended at step N"
# --------------------------------------------------------------------------------------------------

ENDED: Final = re.compile(r"^ended at step (-?\d+)")
STOPPED: Final = re.compile(r"^stopped at (-?\d+) of (\d+)")


def _last_steps(run: Mapping[str, Any]) -> set[int]:
    out = {int(run["steps"][1])} if run.get("steps") else set()
    if run.get("last_step") is not None:
        out.add(int(run["last_step"]))
    return out


def run_status_verdict(status: str, run: Mapping[str, Any] | None, facts: Mapping[str, Any] | None = None) -> Verdict:
    """The status words against the golden run: its last step (``steps[1]`` or ``last_step``, exact),
    ``planned_steps`` (the total the log states) and ``ended`` ("finished" when it reached them or the log
    says training completed).

    - "ended at step N": N is the golden last step;
    - "stopped at N of M": N is the golden last step, M is ``planned_steps`` and N < M, and the golden
      run did not end "finished"; false when ``planned_steps`` is null (the log states none for this run),
      unjudged when the golden has no ``planned_steps`` at all;
    - "finished": the golden last step reached ``planned_steps``, or the golden run ``ended`` "finished"
      (the log says training completed, or its last logged step is the last it would log before the plan);
      false when it ended "stopped"/"crashed" or short of ``planned_steps`` otherwise;
    - "empty: no training steps": :func:`no_training_verdict` on ``facts``."""
    if status.startswith(NO_TRAINING):
        return no_training_verdict(run, facts or {})
    lasts = _last_steps(run or {})
    if not run or not lasts:
        return UNJUDGED, "no golden run to compare with"
    planned, ended = run.get("planned_steps"), run.get("ended")
    said_ended, said_stopped = ENDED.match(status), STOPPED.match(status)
    if said_ended or said_stopped:
        reached = int((said_ended or said_stopped).group(1))  # type: ignore[union-attr]
        if reached not in lasts:
            return FALSE, f"the golden run's last step is {sorted(lasts)}"
        if said_stopped:
            if planned is None and "planned_steps" in run:
                # facts v2 state the planned steps, null when the log never states them for this run
                return FALSE, "planned_steps null: the log states no planned steps for this run"
            if planned is None:
                return UNJUDGED, "the golden run states no planned steps"
            ok = int(said_stopped.group(2)) == int(planned) and reached < int(planned) and ended != "finished"
            how = f", ended {ended}" if ended is not None else ""
            return (TRUE if ok else FALSE), f"last step {reached}, planned_steps {planned}{how}"
        return TRUE, f"the golden run's last step is {reached}"
    if status == "finished":
        if planned is not None and max(lasts) + 1 >= int(planned):
            return TRUE, f"last step {max(lasts)}, planned_steps {planned}"
        if ended == "finished":
            return TRUE, "the golden run ended finished (the log says training completed)"
        if ended in ("stopped", "crashed") or planned is not None:
            return FALSE, f"last step {max(lasts)}, planned_steps {planned}, ended {ended}"
        return UNJUDGED, "the golden run states no planned steps"
    return UNJUDGED, "no rule for this status"


NO_TRAINING: Final = "empty: no training steps"


def no_training_verdict(run: Mapping[str, Any] | None, facts: Mapping[str, Any]) -> Verdict:
    """ "empty: no training steps" (the run logs no loss or grad norm): true when ``facts.logged`` says the
    file logs neither and the golden run (if any) lists no loss; false when the facts say it logs either."""
    logged = facts.get("logged") or {}
    if logged.get("loss") is True or logged.get("grad_norm") is True:
        return FALSE, "logged.loss or logged.grad_norm true"
    if (
        logged.get("loss") is False
        and logged.get("grad_norm") is False
        and "loss" not in ((run or {}).get("metrics") or [])
    ):
        return TRUE, "logged.loss and logged.grad_norm false"
    return UNJUDGED, "no fact says whether the file logs a loss"


# --------------------------------------------------------------------------------------------------
# A throughput gap against sibling runs of the same log file
# --------------------------------------------------------------------------------------------------


def golden_rate(run: Mapping[str, Any] | None) -> tuple[str, float] | None:
    """The golden run's ``median_throughput`` as a rate, higher is faster: (unit, value); seconds per step
    become steps per second. None without one."""
    throughput = (run or {}).get("median_throughput")
    if not isinstance(throughput, Mapping):
        return None
    for unit in ("tokens_per_s", "samples_per_s"):
        if isinstance(throughput.get(unit), int | float) and throughput[unit] > 0:
            return unit, float(throughput[unit])
    step_time = throughput.get("step_time_s")
    if isinstance(step_time, int | float) and step_time > 0:
        return "steps_per_s", 1.0 / float(step_time)
    return None


NO_SIBLING_FACT: Final = "a gap against sibling runs: no fact compares runs"


def sibling_gap_verdict(
    facts: Mapping[str, Any],
    entry: Mapping[str, Any],
    run: Mapping[str, Any] | None,
    golden_by_name: Mapping[str, Mapping[str, Any]],
) -> Verdict:
    """A run "X% slower than its N sibling run(s)" (a ``throughput_loss`` finding with ``start`` -1):
    false when ``sibling_runs_comparable`` is false (runs of different sizes or settings) or null (one
    run); when true, the ratio of this golden run's ``median_throughput`` to the median of its siblings'
    (``golden_by_name``: the golden run paired with each stored run) is within :data:`SIBLING_TOLERANCE`
    of the ratio said (``entry['ratio']``, tokens/s over the siblings')."""
    if "sibling_runs_comparable" not in facts:
        return UNJUDGED, NO_SIBLING_FACT
    comparable = facts["sibling_runs_comparable"]
    if comparable is None:
        return FALSE, "sibling_runs_comparable null: the file holds one run, no sibling to compare with"
    if comparable is False:
        return FALSE, "sibling_runs_comparable false: the file's runs differ in model or settings"
    said = entry.get("ratio")
    names = list((entry.get("throughput") or {}).get("siblings") or [])
    if not isinstance(said, int | float) or said <= 0 or not names:
        return UNJUDGED, "the gap names no siblings or ratio"
    if any(name not in golden_by_name for name in names):
        return UNJUDGED, "a sibling run outside this log's golden runs"
    mine, theirs = golden_rate(run), [golden_rate(golden_by_name[name]) for name in names]
    if mine is None or any(t is None for t in theirs):
        return UNJUDGED, "a golden run has no median_throughput"
    rates = [t for t in theirs if t is not None]
    if any(unit != mine[0] for unit, _ in rates):
        return UNJUDGED, "the golden medians are in different units"
    ratio = mine[1] / median(value for _, value in rates)
    ok = abs(ratio - float(said)) <= SIBLING_TOLERANCE * float(said)
    return (TRUE if ok else FALSE), f"golden median_throughput ratio {ratio:.2f} ({mine[0]}), said {float(said):.2f}"


def golden_runs_by_name(names: Sequence[str], golden_runs: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each stored run's golden run, paired in order as ``bench.corpus_eval.score_import`` pairs them."""
    return {name: run for name, run in zip(names, golden_runs, strict=False)}
