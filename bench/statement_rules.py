"""The rules that judge StabScope's statements about an incident against the golden ``facts``
(issue #32; ``bench.statement_eval`` applies them): the verdicts, the incident being judged
(:class:`Case`), the causes' verdicts and :data:`ACTION_RULES`, one row per action StabScope may say,
each commented with the fact it uses. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

TRUE: Final = "true"
FALSE: Final = "false"
UNSUPPORTED: Final = "unsupported"
UNJUDGED: Final = "unjudged"
VERDICTS: Final = (TRUE, FALSE, UNSUPPORTED, UNJUDGED)

Verdict = tuple[str, str]
"""(verdict, the fact that decided it, in words)."""

TREE_CAUSES: Final = ("numerical", "nonfinite_from_start", "lr_transition", "rank_fault", "router", "data_outlier")
"""Golden cause names (facts schema) that name a signature in the data; "unknown" and
"early_instability" (a kind of incident, not a signature) are not among them."""

SIGNAL_FACT: Final[dict[str, str | None]] = {
    "the loss at every step": "loss",
    "the learning rate (lr)": "lr",
    "per-rank gradient norms": "per_rank",  # facts v2: per-rank grad norms or per-rank losses
    "the MoE expert load": "expert_load",  # facts v2; "or num_experts=1 ... for a dense model": facts.moe
    "the global gradient norm before clipping": "grad_norm",
}
"""The signals a "Log ... and diagnose again" action names (the tree nodes' ``to_log``), and the
``facts.logged`` key of each (None: no fact says whether it is logged; ``per_rank`` and ``expert_load`` are in
the golden files that carry the facts v2 fields)."""


RUN_METRICS: Final[dict[str, tuple[str, ...]]] = {
    "loss": ("loss",),
    "grad_norm": ("grad_norm",),
    "lr": ("lr",),
    "step_time": ("step_time_s",),
    "loss_scale": ("loss_scale",),
    "val_loss": ("val_loss",),
    "clip": ("clip_coef", "clip_ratio"),
    "throughput": ("throughput_tok_s", "throughput_samples_s", "tflops"),
}
"""The canonical metrics (a golden run's ``metrics``) that show each ``facts.logged`` quantity."""


def logged_in_run(facts: Mapping[str, Any], key: str, run_metrics: Sequence[str] | None) -> bool | None:
    """Does the run log quantity ``key``? ``facts.logged`` says whether the FILE logs it; in a file of
    several runs, a quantity the file logs is in a run only when the golden run's ``metrics`` list it
    (the s21-gpt2 notes' first runs log the loss alone). None: no fact."""
    value = (facts.get("logged") or {}).get(key)
    if not isinstance(value, bool):
        return None
    if value and run_metrics is not None and key in RUN_METRICS:
        return any(m in run_metrics for m in RUN_METRICS[key])
    return value


def signal_present(case: Case, key: str) -> bool | None:
    """Is the signal of ``facts.logged`` key ``key`` in the log? For ``expert_load`` the tree's signal is
    "the MoE expert load, or num_experts=1 for a dense model": present also when ``facts.moe`` is false
    (the file states a dense model). None: no fact."""
    logged = case.logged(key)
    if key == "expert_load" and logged is not True and case.facts.get("moe") is False:
        return True
    return logged


@dataclass(frozen=True)
class Case:
    """An incident being judged: the golden facts, the golden incident it matches (None: invented), the
    incident's JSON object and the first logged step of the golden runs."""

    facts: Mapping[str, Any]
    truth: Mapping[str, Any] | None
    incident: Mapping[str, Any]
    first_step: int
    text: str = ""
    """The words of the statement being judged (an action that names signals is judged by them)."""
    run_metrics: tuple[str, ...] | None = None
    """The golden run's canonical metrics where the log holds several runs (None: one run)."""
    run: Mapping[str, Any] | None = None
    """The golden run the incident's stored run is paired with (its record counts), None when there is none."""

    @property
    def start(self) -> int:
        return int(self.incident.get("start", self.incident.get("peak", 0)))

    def logged(self, key: str) -> bool | None:
        return logged_in_run(self.facts, key, self.run_metrics)

    def not_logged(self, key: str, when_logged: str = "") -> Verdict:
        """The verdict on "the run does not log ``key``": unjudged without a fact, false when it is logged
        (``when_logged`` ends that reason), true when it is not."""
        logged = self.logged(key)
        if logged is None:
            return UNJUDGED, f"facts have no logged.{key}"
        return (FALSE, f"logged.{key} true{when_logged}") if logged else (TRUE, f"logged.{key} false")

    def cause(self, name: str) -> Verdict:
        """A statement that rests on cause ``name``: causes_consistent / causes_ruled_out."""
        return cause_verdict(self.truth or {}, name)


# --------------------------------------------------------------------------------------------------
# Facts read by several rules
# --------------------------------------------------------------------------------------------------


def cause_verdict(truth: Mapping[str, Any], name: str) -> Verdict:
    """``name`` against the golden incident's causes_consistent (true) / causes_ruled_out (false) /
    neither (unsupported); no cause fields: unjudged."""
    if "causes_consistent" not in truth and "causes_ruled_out" not in truth:
        return UNJUDGED, "the golden incident has no causes"
    consistent, ruled_out = truth.get("causes_consistent") or [], truth.get("causes_ruled_out") or []
    if name in consistent:
        return TRUE, f"causes_consistent has {name}"
    if name in ruled_out:
        return FALSE, f"causes_ruled_out has {name} ({truth.get('causes_why', '')})".replace(" ()", "")
    return UNSUPPORTED, f"{name} is neither consistent nor ruled out"


def consistent_causes_verdict(truth: Mapping[str, Any], named: Sequence[str]) -> Verdict:
    """ "Cause not confirmed: consistent with A or B (evidence)": false when the golden rules out any cause
    named (or none is named); true when it lists one named as consistent; else neither (unsupported)."""
    if "causes_consistent" not in truth and "causes_ruled_out" not in truth:
        return UNJUDGED, "the golden incident has no causes"
    if not named:
        return FALSE, "a 'consistent with' statement that names no cause"
    consistent, ruled_out = truth.get("causes_consistent") or [], truth.get("causes_ruled_out") or []
    out = [c for c in named if c in ruled_out]
    if out:
        return FALSE, f"causes_ruled_out has {', '.join(out)}"
    hit = [c for c in named if c in consistent]
    if hit:
        return TRUE, f"causes_consistent has {', '.join(hit)}"
    return UNSUPPORTED, f"{', '.join(named)}: neither consistent nor ruled out"


def unknown_cause_verdict(truth: Mapping[str, Any]) -> Verdict:
    """ "Cause unknown: no question of the tree found a cause with its signature in this log": true when the
    golden lists no cause with a signature (or lists "unknown" as consistent), false when it lists one."""
    if "causes_consistent" not in truth:
        return UNJUDGED, "the golden incident has no causes"
    consistent = truth.get("causes_consistent") or []
    if "unknown" in (truth.get("causes_ruled_out") or []):
        return FALSE, "causes_ruled_out has unknown"
    signed = [c for c in consistent if c in TREE_CAUSES]
    if signed and "unknown" not in consistent:
        return FALSE, f"causes_consistent has {', '.join(signed)}: a cause's signature is in the log"
    return TRUE, "causes_consistent names no cause with a signature in the data"


def recovered_by(case: Case) -> tuple[bool, int | None]:
    """(the golden incident states recovered_by, its value)."""
    truth = case.truth or {}
    return "recovered_by" in truth, truth.get("recovered_by")


def _nonfinite_from_start(case: Case) -> bool:
    grads = grads_never_finite(case)
    if grads is not None:
        return grads
    return run_loss_never_finite(case.run) or case.facts.get("nonfinite_from_start") is True


def run_loss_never_finite(run: Mapping[str, Any] | None) -> bool:
    """Does the golden run state its first and last loss non-finite? ``facts.nonfinite_from_start`` is about
    the file (its first run): in a sweep whose one run is NaN from its own first record, that run's values
    decide (docs/diagnosis.md, "Scorer")."""
    ends = [((run or {}).get(end) or {}).get("loss") for end in ("first", "last")]
    return all(isinstance(v, int | float) and not math.isfinite(v) for v in ends)


def _checkpoint_before(case: Case, step: int) -> bool | None:
    """Is a checkpoint save logged before ``step``? None when the log shows no checkpoint (null)."""
    steps = case.facts.get("checkpoint_steps")
    if steps is None:
        return None
    return any(int(s) < step for s in steps)


def _rises(case: Case) -> list[tuple[int, int]] | None:
    rises = case.facts.get("lr_rises")
    return None if rises is None else [(int(a), int(b)) for a, b in rises]


# --------------------------------------------------------------------------------------------------
# Actions: one row per action (or the "otherwise" said instead), each with the fact it uses
# --------------------------------------------------------------------------------------------------


def _rollback_to_finite(case: Case) -> Verdict:
    if _nonfinite_from_start(case):
        return FALSE, "nonfinite_from_start: no finite checkpoint to return to"
    stated, by = recovered_by(case)
    if not stated:
        return UNJUDGED, "the golden incident has no recovered_by"
    if by is not None:
        return FALSE, f"recovered_by {by}: the loss came back, nothing to roll back"
    if _checkpoint_before(case, case.start) is False:
        return FALSE, f"checkpoint_steps: no checkpoint saved before step {case.start}"
    return TRUE, "recovered_by null: the loss did not come back"


def _precision_is(case: Case, wanted: str) -> Verdict:
    precision = case.facts.get("precision")
    if precision is None:
        return UNJUDGED, "facts have no precision"
    if precision == "unknown":
        return UNSUPPORTED, "precision unknown: the file does not state it"
    if precision == wanted:
        return TRUE, f"precision {precision}"
    return FALSE, f"precision {precision}"


def _check_loss_scaling(case: Case) -> Verdict:
    if case.facts.get("precision") in ("bf16", "fp32"):
        return FALSE, f"precision {case.facts['precision']}: no loss scaling"
    if case.logged("loss_scale") is False:
        return FALSE, "logged.loss_scale false: no loss scale to check"
    return case.cause("numerical")


def _skip_nonfinite(case: Case) -> Verdict:
    if _nonfinite_from_start(case):
        return FALSE, "nonfinite_from_start: every batch is non-finite"
    return case.cause("numerical")


def grads_never_finite(case: Case) -> bool | None:
    """Is the incident a grad norm non-finite from the golden run's first record on? ``facts.
    nonfinite_from_start`` is about the loss (the d_megatron_core convention): for a grad-norm incident the
    golden run's first grad-norm value and the matched golden incident decide (docs/diagnosis.md, "Scorer"). None: the
    incident is no grad-norm one, or no fact gives the first value."""
    metric = str(case.incident.get("metric") or "")
    truth = case.truth or {}
    first = ((case.run or {}).get("first") or {}).get("grad_norm")
    if not metric.startswith("grad_norm") or not str(truth.get("metric", "")).startswith("grad_norm"):
        return None
    if not isinstance(first, int | float):
        return None
    return not math.isfinite(first) and truth.get("recovered_by") is None


def nonfinite_from_start_verdict(case: Case) -> Verdict:
    grads = grads_never_finite(case)
    if grads is not None:
        return (TRUE if grads else FALSE), (
            "the golden run's first grad_norm is non-finite and the golden incident never recovers"
            if grads
            else "the golden run's first grad_norm is finite, or its incident recovers"
        )
    if run_loss_never_finite(case.run):
        return TRUE, "the golden run's first and last loss are non-finite"
    value = case.facts.get("nonfinite_from_start")
    if not isinstance(value, bool):
        return UNJUDGED, "facts have no nonfinite_from_start"
    return (TRUE if value else FALSE), f"nonfinite_from_start {str(value).lower()}"


def _warmup_restart(case: Case) -> Verdict:
    rises = _rises(case)
    if rises is None:
        return UNSUPPORTED, "lr_rises null: the LR is not logged"
    restarts = [r for r in rises if r[0] > case.first_step + 1 and r[1] <= case.start + 1]
    if restarts:
        return TRUE, f"lr_rises has a rise after the initial warmup: {restarts[-1]}"
    return FALSE, f"lr_rises {rises}: no LR rise after the initial warmup before step {case.start}"


def _lengthen_warmup(case: Case) -> Verdict:
    rises = _rises(case)
    if rises is None:
        return UNSUPPORTED, "lr_rises null: the LR is not logged"
    if not rises:
        return FALSE, "lr_rises []: the logged LR never rises, there is no warmup"
    if rises[0][1] > case.start + 1:
        return FALSE, f"lr_rises {rises[0]}: the warmup had not ended at step {case.start}"
    if "lr_transition" in ((case.truth or {}).get("causes_ruled_out") or []):
        return case.cause("lr_transition")
    return TRUE, f"lr_rises {rises[0]}: the warmup ended before step {case.start}"


def _early_lr(case: Case) -> Verdict:
    if case.logged("lr") is False:
        return FALSE, "logged.lr false: the LR it quotes is not logged"
    rises = _rises(case)
    if rises is None:
        return UNJUDGED, "facts have no lr_rises"
    if not rises:
        return FALSE, "lr_rises []: the logged LR never rises, there is no warmup to lengthen"
    return TRUE, f"lr_rises {rises[0]}: a warmup to lengthen"


def _early_checks(case: Case) -> Verdict:
    truth = case.truth or {}
    if truth.get("kind") == "early_instability":
        return TRUE, "the golden incident is an early instability"
    return case.cause("early_instability")


def _not_recovered(case: Case) -> Verdict:
    stated, by = recovered_by(case)
    if not stated:
        return UNJUDGED, "the golden incident has no recovered_by"
    if by is not None:
        return FALSE, f"recovered_by {by}: the loss came back"
    return TRUE, "recovered_by null: the loss did not come back"


SAVED_AT: Final = re.compile(r"\(step (-?\d+)\)")


def _rollback_before(case: Case) -> Verdict:
    """ "Roll back to the last checkpoint saved before the spike (step N)" (or "before step S, if there is
    one: no checkpoint save is read"): false when no finite or no earlier save exists, or when a named
    save is not the golden's last before the incident; else the roll-back rests on the loss not coming
    back (docs/diagnosis.md, "Scorer")."""
    if _nonfinite_from_start(case):
        return FALSE, "nonfinite_from_start: no finite checkpoint to return to"
    steps = case.facts.get("checkpoint_steps")
    if _checkpoint_before(case, case.start) is False:
        return FALSE, f"checkpoint_steps: none saved before step {case.start}"
    named = SAVED_AT.search(case.text)
    if named and steps is not None:
        last = max(int(s) for s in steps if int(s) < case.start)
        if int(named.group(1)) != last:
            return FALSE, f"checkpoint_steps: the last save before step {case.start} is {last}"
    return _not_recovered(case)


def _data_outlier_not_from_start(case: Case) -> Verdict:
    if _nonfinite_from_start(case):
        return FALSE, "nonfinite_from_start: every batch is non-finite"
    return case.cause("data_outlier")


def _resume_after_rank_fault(case: Case) -> Verdict:
    verdict = _not_recovered(case)
    return verdict if verdict[0] == FALSE else case.cause("rank_fault")


def _clip_capped(case: Case) -> Verdict:
    if case.logged("grad_norm") is False:
        return FALSE, "logged.grad_norm false: no grad norm to have been capped"
    return UNJUDGED, "no fact gives max_norm or the pre-clip grad norm's excess"


def _log_missing_signals(case: Case) -> Verdict:
    named = [(signal, key) for signal, key in SIGNAL_FACT.items() if signal in case.text]
    logged = [signal for signal, key in named if key is not None and signal_present(case, key) is True]
    if logged:
        dense = "the MoE expert load" in logged and case.logged("expert_load") is not True
        reason = f"logged: {', '.join(logged)} (said to be missing)"
        return FALSE, reason + (" (facts.moe false: a dense model)" if dense else "")
    if any(key is None or signal_present(case, key) is None for _, key in named) or not named:
        return UNJUDGED, "a signal it names has no logged fact"
    return TRUE, "every signal it names is not logged"


def _inspect_batches(case: Case) -> Verdict:
    return TRUE, "a golden incident at this step (the batches there are worth a look)"


def _rerun_from_checkpoint(case: Case) -> Verdict:
    if _nonfinite_from_start(case):
        return FALSE, "nonfinite_from_start: no finite checkpoint to re-run from"
    before = _checkpoint_before(case, case.start)
    if before is None:
        return UNSUPPORTED, "checkpoint_steps null: no checkpoint save is logged"
    return (TRUE, "checkpoint_steps: one before the incident") if before else (FALSE, "no checkpoint before it")


def _record_max_norm(case: Case) -> Verdict:
    return case.not_logged("clip", ": the log tells")


def _record_precision(case: Case) -> Verdict:
    precision = case.facts.get("precision")
    if precision is None:
        return UNJUDGED, "facts have no precision"
    return (TRUE, "precision unknown") if precision == "unknown" else (FALSE, f"the file states {precision}")


def _log_loss_scale(case: Case) -> Verdict:
    if case.facts.get("precision") in ("bf16", "fp32"):
        return FALSE, f"precision {case.facts['precision']}: no fp16 loss scale exists"
    return case.not_logged("loss_scale")


def _log_lr(case: Case) -> Verdict:
    return case.not_logged("lr")


def _no_fact(case: Case) -> Verdict:
    return UNJUDGED, "no fact of the schema says whether the run switched its data recipe"


ActionRule = tuple[str, Callable[[Case], Verdict]]

ACTION_RULES: Final[tuple[ActionRule, ...]] = (
    # leaf_numerical
    # recovered_by, nonfinite_from_start, checkpoint_steps
    ("Roll back to the last checkpoint whose loss and weights are finite", _rollback_to_finite),
    ("Train in bf16 with fp32 master weights", lambda c: _precision_is(c, "fp16")),  # precision
    ("Check the loss scaling", _check_loss_scaling),  # precision, logged.loss_scale, cause numerical
    # nonfinite_from_start, cause numerical
    ("Skip the offending batch and any step whose gradients are non-finite", _skip_nonfinite),
    # leaf_nonfinite_from_start: every action rests on the run being non-finite from its first step
    ("Do not roll back or skip batches", nonfinite_from_start_verdict),  # nonfinite_from_start
    ("Run the first steps again in fp32", nonfinite_from_start_verdict),  # nonfinite_from_start
    ("Check the first batches: NaN or inf inputs", nonfinite_from_start_verdict),  # nonfinite_from_start
    ("Check the initialisation: every weight", nonfinite_from_start_verdict),  # nonfinite_from_start
    ("Check the loss itself", nonfinite_from_start_verdict),  # nonfinite_from_start
    # leaf_lr_transition
    ("Add a warmup restart at the transition", _warmup_restart),  # lr_rises after the initial warmup
    ("Lengthen the warmup or lower the peak LR", _lengthen_warmup),  # lr_rises[0] ended before
    ("Size restart_warmup", _warmup_restart),  # lr_rises after the initial warmup
    ("For a data-recipe switch", _no_fact),  # none: no fact records data switches
    # leaf_rank_fault
    ("Inspect rank", lambda c: c.cause("rank_fault")),  # cause rank_fault
    ("Inspect the outlier rank's node", lambda c: c.cause("rank_fault")),  # cause rank_fault
    ("Re-run the step Megatron-style", lambda c: c.cause("rank_fault")),  # cause rank_fault
    ("Exclude the node or the shard", _resume_after_rank_fault),  # recovered_by, cause rank_fault
    # leaf_router
    ("Add a router z-loss", lambda c: c.cause("router")),  # cause router
    ("Use auxiliary-loss-free load balancing", lambda c: c.cause("router")),  # cause router
    ("Lower the router's learning rate", lambda c: c.cause("router")),  # cause router
    # leaf_data_outlier_recovered
    ("Keep gradient clipping on", _clip_capped),  # logged.grad_norm (max_norm has no fact)
    ("Find the batches", lambda c: c.cause("data_outlier")),  # cause data_outlier
    # leaf_data_outlier_diverged
    ("Roll back to the last checkpoint saved before", _rollback_before),  # recovered_by, checkpoint_steps
    ("Skip the next 200-500 batches", _data_outlier_not_from_start),  # nonfinite_from_start, cause data_outlier
    ("Restart with a short LR warmup", _not_recovered),  # recovered_by
    ("Lower the peak LR.", _not_recovered),  # recovered_by
    # leaf_unknown
    ("Log ", _log_missing_signals),  # logged.* of each signal named (before the PREMISES rows: "Log the ...")
    ("Inspect the batches", _inspect_batches),  # the matched golden incident
    ("Re-run from the previous checkpoint", _rerun_from_checkpoint),  # nonfinite_from_start, checkpoint_steps
    # leaf_early_instability
    ("Lower the peak LR or lengthen the warmup: from step", _early_lr),  # logged.lr, lr_rises
    ("Check the initialisation scale and the first batches", _early_checks),  # golden kind / cause early_instability
    ("Restart from the beginning", _not_recovered),  # recovered_by
    # said instead of an action whose premise the data cannot check (PREMISES' otherwise)
    ("Record the run's max_norm", _record_max_norm),  # logged.clip
    ("Record the run's precision", _record_precision),  # precision
)
"""Each action StabScope may say, by the start of its words, and the rule that judges it. The otherwise
texts "Log the fp16 loss scale" and "Log the LR" are matched first (:data:`PREFIX_FIRST`)."""

PREFIX_FIRST: Final[tuple[ActionRule, ...]] = (
    ("Log the fp16 loss scale", _log_loss_scale),  # precision, logged.loss_scale
    ("Log the LR", _log_lr),  # logged.lr
)


def action_rule(text: str) -> Callable[[Case], Verdict] | None:
    """The rule of the first row whose prefix starts ``text`` (None: no row: the action is unjudged)."""
    for prefix, rule in (*PREFIX_FIRST, *ACTION_RULES):
        if text.startswith(prefix):
            return rule
    return None
