"""Statement precision on the corpus (issue #32): every statement StabScope says about a corpus run,
judged true / false / unsupported / unjudged against the golden ``facts`` written blind (their schema:
``tests/corpus/README.md``; the rules for actions: ``bench.statement_rules``).

What is judged, per stored run of a corpus log (``bench.corpus_eval`` gathers it from the store):

- each incident of the default view (not a blip, not a finding): its severity (``[spike]``,
  ``[divergence]``), and every claim of ``spikes --json`` that is said (``holds`` true, or null: said as
  unknown with what to log): status, recovery, cause, not_logged, action; a cause claim that does not
  hold is replaced on the surfaces by "cause unknown", which is judged as such;
- the run-level statements: the run's status ("finished", "stopped at N of M", "ended at step N"), each
  quantity the pages say is "not in this run" (loss, grad norm, LR, clip ratio panels; the Cost page's
  step time), the analysis notes ("Not run: ...: the run logs no grad_norm", "N finite loss samples"),
  and the overfitting and throughput-loss findings with their actions.

Verdicts: ``true`` (a fact supports it), ``false`` (a fact contradicts it; every statement of an
incident that matches no golden incident is false: the incident is invented), ``unsupported`` (the
facts that bear on it neither support nor contradict it: a cause neither consistent nor ruled out,
precision "unknown"), ``unjudged`` (no fact of the schema bears on it: listed for a human to judge).
Precision = true / all statements, unjudged ones included in "all" (the issue's measure).

The rules: ``bench.statement_rules.ACTION_RULES`` for the actions (one row each, with the fact it uses),
and here :func:`judge_incident` (severity, status, recovery, cause, not_logged) and :func:`judge_run`
(status, "not in this run", notes) and :func:`judge_finding`; the run-level rules that read the per-run
facts v2 (``planned_steps``, ``ended``, ``records_by_metric``, ``median_throughput``,
``sibling_runs_comparable``): ``bench.run_statement_rules``. In a file of several runs, what a run
logs is its golden run's ``metrics`` (``statement_rules.logged_in_run``). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

from bench.run_statement_rules import (
    NO_SIBLING_FACT,
    SNR_PROXY_SAMPLES,
    count_note_verdict,
    golden_runs_by_name,
    run_status_verdict,
    sibling_gap_verdict,
    signed_loss_verdict,
    too_few_before_verdict,
)
from bench.statement_rules import (
    FALSE,
    TRUE,
    UNJUDGED,
    UNSUPPORTED,
    VERDICTS,
    Case,
    Verdict,
    action_rule,
    consistent_causes_verdict,
    grads_never_finite,
    logged_in_run,
    nonfinite_from_start_verdict,
    recovered_by,
    signal_present,
    unknown_cause_verdict,
)
from stab_core.cause_candidates import CONSISTENT_PREFIX, named_causes

LEAF_CAUSE: Final[dict[str, str]] = {
    "leaf_numerical": "numerical",
    "leaf_nonfinite_from_start": "nonfinite_from_start",
    "leaf_lr_transition": "lr_transition",
    "leaf_rank_fault": "rank_fault",
    "leaf_router": "router",
    "leaf_data_outlier_recovered": "data_outlier",
    "leaf_data_outlier_diverged": "data_outlier",
    "leaf_unknown": "unknown",
}
"""The golden cause name of each leaf of StabScope's tree (``leaf`` in ``spikes --json``)."""

NODE_FACT: Final[dict[int, str | None]] = {
    1: "loss",  # numerical: "the loss at every step"
    2: "lr",  # lr_transition: "the learning rate (lr) at every logged step"
    3: "per_rank",  # rank_concentration: "per-rank gradient norms (grad_norm_local) or per-rank losses"
    4: "expert_load",  # router: "the MoE expert load ..., or num_experts=1 in the run's metadata" (facts.moe)
    5: "grad_norm",  # snr_collapse: "the global gradient norm before clipping (grad_norm)"
}
"""The ``facts.logged`` key that settles "Question N ... could not be answered: the log lacks ..."."""

PANEL_FACT: Final[dict[str, str]] = {
    "loss": "loss",
    "grad_norm": "grad_norm",
    "lr": "lr",
    "clip": "clip",
    "step_time": "step_time",
}
"""Quantities a page may say are "not in this run" (``RunSaid.not_in_run``) -> ``facts.logged`` key."""


INVENTED: Final = "no golden incident within tolerance: the incident is invented"
"""The fact of every statement about an incident that matches no golden incident."""


@dataclass(frozen=True)
class Judged:
    """One statement and its verdict: ``where`` (run, and incident step when it is about one), ``kind``
    (a claim kind, ``severity``, ``run_status``, ``not_in_run``, ``note``, ``finding``), the words said."""

    log: str
    where: str
    kind: str
    text: str
    verdict: str
    fact: str


@dataclass
class RunSaid:
    """What StabScope says about one stored run of a corpus log: the run's status words, the quantities
    its pages say are not in it (``PANEL_FACT`` keys), its analysis notes (``stab_core.analysis.
    analysis_notes``) and its ``spikes --json`` entries (incidents, then findings)."""

    run: str
    status: str
    not_in_run: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------
# Incidents
# --------------------------------------------------------------------------------------------------


def _span(incident: Mapping[str, Any]) -> tuple[int, int]:
    start = int(incident.get("start", incident.get("peak", 0)))
    end = int(incident.get("until", incident.get("end", start)) or start)
    return start, max(start, end)


def golden_incidents(golden: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = golden.get("incidents") or {}
    return [dict(t) for t in (*spec.get("must_find", []), *spec.get("may_find", []))]


def match(incident: Mapping[str, Any], truths: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The golden incident whose onset is nearest the incident's onset among those within their tolerance
    of its span (as ``bench.corpus_eval.score_incidents`` matches), the nearest to its peak among equals;
    None when none is. A golden incident's ``step`` is its first step (tests/corpus/README.md), so it is
    compared with the incident's ``start``: a divergence detected from step 2000 to the log's end is judged
    against the golden divergence from 2400, not against a may-find swing near its highest sample at 6790."""
    lo, hi = _span(incident)
    peak = int(incident.get("peak", lo))
    hits = [t for t in truths if lo - int(t["tolerance_steps"]) <= int(t["step"]) <= hi + int(t["tolerance_steps"])]
    return min(hits, key=lambda t: (abs(int(t["step"]) - lo), abs(int(t["step"]) - peak))) if hits else None


def _severity(case: Case) -> Verdict:
    truth = case.truth or {}
    if "severity" not in truth:
        return UNJUDGED, "the golden incident has no severity"
    said = case.incident.get("severity") or "spike"
    return (TRUE if said == truth["severity"] else FALSE), f"golden severity {truth['severity']}"


def _status(case: Case, text: str) -> Verdict:
    if text.startswith("Non-finite from the first step"):
        return nonfinite_from_start_verdict(case)
    return TRUE, f"a golden incident at step {(case.truth or {}).get('step')}"


RECOVERED_AT = re.compile(r"^(?:Recovered at|Back at or below its level before the rise \([^)]*\) at) step (-?\d+)")
NEVER_FINITE = "Nothing to recover to: the run was never finite"


def _recovery(case: Case, text: str) -> Verdict:
    if text.startswith(NEVER_FINITE):
        return nonfinite_from_start_verdict(case)
    stated, by = recovered_by(case)
    if not stated:
        return UNJUDGED, "the golden incident has no recovered_by"
    found = RECOVERED_AT.match(text)
    if found:
        if by is None:
            return FALSE, "recovered_by null: the loss did not come back in the log"
        step, tol = int(found.group(1)), int((case.truth or {}).get("tolerance_steps", 0))
        ok = abs(step - int(by)) <= tol
        return (TRUE if ok else FALSE), f"recovered_by {by} (tolerance {tol})"
    if text.startswith(("Diverged", "Not back")):
        return (TRUE, "recovered_by null") if by is None else (FALSE, f"recovered_by {by}")
    if text.startswith("The log ends at this sample"):
        # no recovery said, only that the log shows none: true unless the golden has the run back in the log
        return (TRUE, "recovered_by null") if by is None else (FALSE, f"recovered_by {by}")
    return UNJUDGED, "no rule for this recovery sentence"


def _cause(case: Case) -> Verdict:
    name = LEAF_CAUSE.get(str(case.incident.get("leaf")), str(case.incident.get("cause", "unknown")))
    if name == "unknown":
        return unknown_cause_verdict(case.truth or {})
    if name == "nonfinite_from_start" and grads_never_finite(case):
        # a grad norm non-finite from its first record: the golden names it numerical where its
        # nonfinite_from_start (about the loss) is false (docs/diagnosis.md, "Scorer")
        consistent = (case.truth or {}).get("causes_consistent") or []
        hit = [c for c in ("nonfinite_from_start", "numerical") if c in consistent]
        if hit:
            return (
                TRUE,
                f"causes_consistent has {hit[0]}; the golden run's grad_norm is non-finite from its first record",
            )
    return case.cause(name)


QUESTION = re.compile(r"^Question (\d+) ")


def _not_logged(case: Case, text: str) -> Verdict:
    found = QUESTION.match(text)
    key = NODE_FACT.get(int(found.group(1))) if found else None
    if key is None:
        return UNJUDGED, "no fact says whether what it lacks is logged"
    logged = case.logged(key)
    if logged is not None and "too few samples of" in text:
        # "the log has too few samples of X before the incident": X absent contradicts it; X logged is judged
        # by the golden run's record count against the window the SNR proxy needs
        if not logged:
            return FALSE, f"logged.{key} false"
        return too_few_before_verdict(case.run, key, case.start, SNR_PROXY_SAMPLES)
    if key == "expert_load":
        # "lacks the MoE expert load, or num_experts=1 for a dense model": false when either is in the log
        present = signal_present(case, key)
        if present is None:
            return UNJUDGED, "facts have no logged.expert_load"
        if not present:
            return TRUE, "logged.expert_load false"
        if case.logged(key):
            return FALSE, "logged.expert_load true"
        return FALSE, "facts.moe false: the file states a dense model (the question is answerable: no router)"
    return case.not_logged(key)


def said_claims(incident: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The claims a surface says for an incident: those that hold or are unknown; a cause claim that does
    not hold becomes "Cause unknown" (what ``verdict_words`` says instead)."""
    out = []
    for claim in incident.get("claims") or []:
        if claim.get("holds") is not False:
            out.append(dict(claim))
        elif claim.get("kind") == "cause":
            out.append(
                {"kind": "cause", "text": "Cause unknown (the cause's signature is not in the data).", "holds": None}
            )
    return out


def judge_incident(log: str, run: str, incident: Mapping[str, Any], case: Case) -> list[Judged]:
    """Every statement said about one incident of the default view."""
    where = f"{run} {incident.get('kind', 'spike')} {incident.get('metric', '?')} at {incident.get('peak')}"
    said: list[tuple[str, str]] = [("severity", f"[{incident.get('severity') or 'spike'}]")]
    said += [(str(c["kind"]), str(c["text"])) for c in said_claims(incident)]
    out = []
    for kind, text in said:
        verdict: Verdict
        if case.truth is None:
            verdict = FALSE, INVENTED
        elif kind == "severity":
            verdict = _severity(case)
        elif kind == "status":
            verdict = _status(case, text)
        elif kind == "recovery":
            verdict = _recovery(case, text)
        elif kind == "cause":
            if text.startswith(CONSISTENT_PREFIX):
                verdict = consistent_causes_verdict(case.truth, named_causes(text))
            elif text.startswith("Cause unknown"):
                verdict = unknown_cause_verdict(case.truth)
            else:
                verdict = _cause(case)
        elif kind == "not_logged":
            verdict = _not_logged(case, text)
        elif kind == "action":
            rule = action_rule(text)
            verdict = rule(replace(case, text=text)) if rule is not None else (UNJUDGED, "no rule for this action")
        else:
            verdict = UNJUDGED, f"no rule for claims of kind {kind}"
        out.append(Judged(log, where, kind, text, *verdict))
    return out


# --------------------------------------------------------------------------------------------------
# Run-level statements
# --------------------------------------------------------------------------------------------------

LOGS_NO = re.compile(r"the run logs no (\w+)")
NO_SNR_GRAD = "no SNR: the run logs no gradient norm"
UNREAD = re.compile(r"no (\w+) series was read: the log names one")
LOGGING_STOPPED = re.compile(r"^Logging stopped at step (-?\d+): every metric logged from this step on is non-finite")


POLICY_NOTE = re.compile(r"the run's loss is its policy loss \(([^)]+)\)")


def policy_loss_verdict(name: str, run: Mapping[str, Any] | None) -> Verdict:
    """ "The run's loss is its policy loss (X)": true when the golden run records X (its ``metrics``,
    ``records_by_metric`` or first/last values); else no fact names it (unjudged)."""
    held: set[str] = set((run or {}).get("metrics") or [])
    for key in ("records_by_metric", "first", "last"):
        held |= set(((run or {}).get(key) or {}).keys())
    if name in held:
        return TRUE, f"the golden run records {name}"
    return UNJUDGED, f"no golden fact names {name}"


def logging_stopped_verdict(step: int, run: Mapping[str, Any] | None) -> Verdict:
    """ "Logging stopped at step N: every metric logged from this step on is non-finite": true when the
    golden run ends before N (its writer counted no record of the run from N on); else no fact says
    whether the records from N on are finite (unjudged)."""
    steps = (run or {}).get("steps")
    if not steps:
        return UNJUDGED, "no golden run to compare with"
    if int(steps[1]) < step:
        return TRUE, f"the golden run ends at {steps[1]}, before step {step}"
    return UNJUDGED, f"the golden run ends at {steps[1]}; no fact says whether its records from {step} on are finite"


def _logged_verdict(facts: Mapping[str, Any], key: str, run_metrics: Sequence[str] | None) -> Verdict:
    """ "Not logged" of quantity ``key`` against ``logged_in_run``."""
    value = logged_in_run(facts, key, run_metrics)
    if value is None:
        return UNJUDGED, f"facts have no logged.{key}"
    where = "" if run_metrics is None or not (facts.get("logged") or {}).get(key) else " (this run's golden metrics)"
    return (FALSE, f"logged.{key} true{where}") if value else (TRUE, f"logged.{key} false{where}")


def note_verdict(
    note: str, facts: Mapping[str, Any], run: Mapping[str, Any] | None, run_metrics: Sequence[str] | None = None
) -> Verdict:
    """An analysis note: "the run logs no X" against ``facts.logged``; "N finite X samples" and "no SNR
    yet: N grad-norm samples" against the golden run's records of X (``records_by_metric``, else
    ``records``; 1 %: ``run_statement_rules.count_note_verdict``); the rest (logging end, gaps) has no fact."""
    if NO_SNR_GRAD in note:
        return _logged_verdict(facts, "grad_norm", run_metrics)
    unread = UNREAD.search(note)
    if unread and unread.group(1) in PANEL_FACT:
        # "no X series was read: the log names one on line N": the log holds X, unread (facts.logged)
        key = PANEL_FACT[unread.group(1)]
        value = (facts.get("logged") or {}).get(key)
        if not isinstance(value, bool):
            return UNJUDGED, f"facts have no logged.{key}"
        return (TRUE, f"logged.{key} true") if value else (FALSE, f"logged.{key} false")
    policy = POLICY_NOTE.search(note)
    if policy:
        return policy_loss_verdict(policy.group(1), run)
    stopped = LOGGING_STOPPED.match(note)
    if stopped:
        return logging_stopped_verdict(int(stopped.group(1)), run)
    logs_no = LOGS_NO.search(note)
    if logs_no and logs_no.group(1) in PANEL_FACT:
        return _logged_verdict(facts, PANEL_FACT[logs_no.group(1)], run_metrics)
    counted = count_note_verdict(note, run, facts)
    if counted is not None:
        return counted
    signed = signed_loss_verdict(note, run)
    if signed is not None:
        return signed
    return UNJUDGED, "no fact bears on this note"


def _overfitting(facts: Mapping[str, Any], entry: Mapping[str, Any], action: bool) -> Verdict:
    if "overfitting" not in facts:
        return UNJUDGED, "facts have no overfitting"
    truth = facts["overfitting"]
    if truth is None:
        return FALSE, "facts.overfitting null: the val loss does not rise while the train loss falls"
    best = int((entry.get("overfitting") or {}).get("best_step", entry.get("start", -1)))
    if action:
        ok = best == int(truth["best_val_step"])
        return (TRUE if ok else FALSE), f"best_val_step {truth['best_val_step']}"
    lo, hi = int(entry.get("start", best)), int(entry.get("end", best))
    ok = lo <= int(truth["val_rising_to"]) and hi >= int(truth["val_rising_from"])
    span = f"{truth['val_rising_from']}-{truth['val_rising_to']}"
    return (TRUE if ok else FALSE), f"val loss rising {span}"


SiblingContext = tuple[Mapping[str, Any] | None, Mapping[str, Mapping[str, Any]]] | None
"""(this run's golden run, the golden run of each stored run by name): what a gap against siblings is judged
with; None: no golden runs to pair."""

THROUGHPUT_FACT_CHANGE: Final = 0.2
"""The smallest level change ``facts.throughput_changes`` records (facts schema: >= 20 %)."""


def _throughput(facts: Mapping[str, Any], entry: Mapping[str, Any], siblings: SiblingContext) -> Verdict:
    lo, hi = int(entry.get("start", -1)), int(entry.get("end", -1))
    if lo < 0:  # a gap against sibling runs (it holds for the whole run)
        if siblings is None:
            return UNJUDGED, NO_SIBLING_FACT
        return sibling_gap_verdict(facts, entry, *siblings)
    if "throughput_changes" not in facts:
        return UNJUDGED, "facts have no throughput_changes"
    drops = [c for c in facts["throughput_changes"] or [] if c[2] == "drop"]
    hit = [c for c in drops if lo <= int(c[1]) and hi >= int(c[0])]
    if hit:
        return TRUE, f"throughput_changes drop {hit[0][0]}-{hit[0][1]}"
    ratio = entry.get("ratio")
    if isinstance(ratio, int | float) and ratio > 1 - THROUGHPUT_FACT_CHANGE:
        # the facts list level changes of 20 % or more only: a smaller drop is neither there nor excluded
        return UNSUPPORTED, f"a {1 - ratio:.0%} drop: the facts list changes of 20% or more, none here"
    return FALSE, f"no throughput drop in {lo}-{hi} ({len(drops)} drops in the facts)"


def judge_finding(
    log: str, run: str, entry: Mapping[str, Any], facts: Mapping[str, Any], siblings: SiblingContext = None
) -> list[Judged]:
    """An overfitting or throughput-loss finding: its summary and each action (``siblings``: what a gap
    against sibling runs is judged with)."""
    where = f"{run} {entry.get('kind')} {entry.get('start')}-{entry.get('end')}"
    out = []
    texts = [("finding", str(entry.get("summary", "")))] + [("action", str(a)) for a in entry.get("actions") or []]
    for kind, text in texts:
        if entry.get("kind") == "overfitting":
            verdict = _overfitting(facts, entry, action=kind == "action")
        else:
            verdict = _throughput(facts, entry, siblings)
        out.append(Judged(log, where, kind, text, *verdict))
    return out


def judge_run(
    log: str,
    said: RunSaid,
    facts: Mapping[str, Any],
    golden_run: Mapping[str, Any] | None,
    run_metrics: Sequence[str] | None = None,
) -> list[Judged]:
    """The run-level statements: status, "not in this run", analysis notes (``run_metrics``: the golden
    run's metrics where the log holds several runs)."""
    out = [Judged(log, said.run, "run_status", said.status, *run_status_verdict(said.status, golden_run, facts))]
    for quantity in said.not_in_run:
        verdict = _logged_verdict(facts, PANEL_FACT.get(quantity, quantity), run_metrics)
        out.append(Judged(log, said.run, "not_in_run", f"{quantity}: not in this run", *verdict))
    for note in said.notes:
        out.append(Judged(log, said.run, "note", note, *note_verdict(note, facts, golden_run, run_metrics)))
    return out


# --------------------------------------------------------------------------------------------------
# A log, and the counts
# --------------------------------------------------------------------------------------------------

FINDING_KINDS: Final = ("overfitting", "throughput_loss")


def shown(entry: Mapping[str, Any]) -> bool:
    """Is an incident in the default view (not a finding, not a blip)?"""
    return entry.get("kind") not in FINDING_KINDS and entry.get("severity") != "blip"


def judge_log(golden: Mapping[str, Any], runs: Sequence[RunSaid]) -> list[Judged]:
    """Every statement said about the stored runs of one corpus log (``golden`` must have ``facts``)."""
    log, facts = str(golden["name"]), golden["facts"]
    truths = golden_incidents(golden)
    golden_runs = list((golden.get("import") or {}).get("runs") or [])
    first = min((int(r["steps"][0]) for r in golden_runs if r.get("steps")), default=0)
    by_name = golden_runs_by_name([said.run for said in runs], golden_runs)
    out: list[Judged] = []
    for i, said in enumerate(runs):
        golden_run = golden_runs[i] if i < len(golden_runs) else None
        # a file of several runs: what each run logs is its golden run's metrics (stored runs and golden
        # runs are paired in order, as bench.corpus_eval.score_import pairs them)
        metrics = tuple(golden_run.get("metrics") or ()) if golden_run and len(golden_runs) > 1 else None
        out += judge_run(log, said, facts, golden_run, metrics)
        for entry in said.entries:
            if entry.get("kind") in FINDING_KINDS:
                out += judge_finding(log, said.run, entry, facts, (golden_run, by_name))
            elif shown(entry):
                case = Case(facts, match(entry, truths), entry, first, run_metrics=metrics, run=golden_run)
                out += judge_incident(log, said.run, entry, case)
    return out


def missed_findings(golden: Mapping[str, Any], runs: Sequence[RunSaid]) -> list[str]:
    """Overfitting and throughput drops the facts state that no finding reports (a miss, not a statement)."""
    facts = golden.get("facts") or {}
    entries = [e for r in runs for e in r.entries]
    out = []
    if facts.get("overfitting") and not any(e.get("kind") == "overfitting" for e in entries):
        o = facts["overfitting"]
        out.append(f"overfitting from {o['best_val_step']} ({o['val_rising_from']}-{o['val_rising_to']})")
    for change in facts.get("throughput_changes") or []:
        if change[2] != "drop":
            continue
        lo, hi = int(change[0]), int(change[1])
        found = [e for e in entries if e.get("kind") == "throughput_loss"
                 and int(e.get("start", -1)) <= hi and int(e.get("end", -1)) >= lo]  # fmt: skip
        if not found:
            out.append(f"throughput drop {lo}-{hi} (x{change[3]})")
    return out


def counts(judged: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """true / false / unsupported / unjudged / all, precision (true / all) and the same per kind, over
    judged statements in their JSON form (:func:`judged_json`)."""
    items = list(judged)
    out: dict[str, Any] = {v: sum(1 for j in items if j["verdict"] == v) for v in VERDICTS}
    out["all"] = len(items)
    out["precision"] = out[TRUE] / len(items) if items else None
    by_kind: dict[str, dict[str, int]] = {}
    for j in items:
        # "cause unknown" apart from the named causes: its verdict rests on a derived rule
        # (unknown_cause_verdict), which a reader may want to weigh differently
        label = "cause (unknown)" if j["kind"] == "cause" and str(j["text"]).startswith("Cause unknown") else j["kind"]
        row = by_kind.setdefault(str(label), dict.fromkeys(VERDICTS, 0))
        row[str(j["verdict"])] += 1
    out["by_kind"] = by_kind
    return out


def judged_json(judged: Iterable[Judged]) -> list[dict[str, Any]]:
    return [asdict(j) for j in judged]


def precision_table(rows: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Markdown: one row per (label, :func:`counts`)."""
    lines = [
        "| | statements | true | false | unsupported | unjudged | precision (true / all) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, c in rows:
        precision = f"{c['precision']:.2f}" if c["precision"] is not None else "-"
        lines.append(
            f"| {label} | {c['all']} | {c[TRUE]} | {c[FALSE]} | {c[UNSUPPORTED]} | {c[UNJUDGED]} | {precision} |"
        )
    return "\n".join(lines)


def kind_table(c: Mapping[str, Any]) -> str:
    """Markdown: the verdicts per kind of statement."""
    lines = ["| kind | true | false | unsupported | unjudged |", "| --- | --- | --- | --- | --- |"]
    for kind, row in sorted(c["by_kind"].items()):
        lines.append(f"| {kind} | {row[TRUE]} | {row[FALSE]} | {row[UNSUPPORTED]} | {row[UNJUDGED]} |")
    return "\n".join(lines)
