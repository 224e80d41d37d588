"""Statement precision (bench.statement_eval, issue #32): synthetic golden facts and synthetic
``spikes --json`` claims give known true / false / unsupported / unjudged counts for each judging rule,
and the corpus totals are split by ``tuned_on``. No corpus needed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench.corpus_eval import judge_statements
from bench.corpus_scores import LogScore, detector_table, split_table, split_totals, statements_tables
from bench.statement_eval import RunSaid, counts, judge_log, judged_json, match, missed_findings
from bench.statement_rules import ACTION_RULES, PREFIX_FIRST, action_rule
from stab_core.tree_actions import GENERIC_ACTIONS, LEAF_ACTIONS, PREMISES

FACTS: dict[str, Any] = {
    "logged": {
        "loss": True,
        "grad_norm": True,
        "lr": True,
        "step_time": True,
        "loss_scale": False,
        "val_loss": True,
        "clip": False,
        "throughput": False,
    },
    "precision": "bf16",
    "nonfinite_from_start": False,
    "lr_rises": [[1, 100]],
    "checkpoint_steps": [500, 1000],
    "overfitting": None,
    "throughput_changes": [[1200, 1400, "drop", 0.6]],
}

GOLDEN: dict[str, Any] = {
    "name": "toy",
    "import": {"runs": [{"steps": [1, 2000], "records_metric": "loss", "records": 2000, "planned_steps": 3000}]},
    "incidents": {
        "must_find": [
            {
                "step": 700,
                "metric": "loss",
                "tolerance_steps": 5,
                "severity": "spike",
                "recovered_by": 720,
                "causes_consistent": ["data_outlier"],
                "causes_ruled_out": ["lr_transition", "numerical"],
                "causes_why": "LR flat after 100; bf16, no non-finite value",
            }
        ],
        "may_find": [
            {
                "step": 1500,
                "metric": "loss",
                "tolerance_steps": 5,
                "severity": "divergence",
                "recovered_by": None,
                "causes_consistent": [],
                "causes_ruled_out": ["lr_transition"],
            }
        ],
        "must_not_flag": [],
        "healthy": False,
    },
    "statements": {"must_not_say": []},
    "facts": FACTS,
}


def claim(kind: str, text: str, holds: bool | None = True) -> dict[str, Any]:
    return {"kind": kind, "text": text, "holds": holds, "evidence": {}, "to_log": None}


def incident(peak: int, *claims: dict[str, Any], severity: str = "spike", leaf: str = "leaf_unknown") -> dict[str, Any]:
    return {"kind": "spike", "metric": "loss", "start": peak, "peak": peak, "end": peak + 2, "until": peak + 2,
            "severity": severity, "leaf": leaf, "cause": "unknown", "claims": list(claims)}  # fmt: skip


def verdicts(golden: dict[str, Any], *entries: dict[str, Any], **run: Any) -> list[tuple[str, str]]:
    said = RunSaid("toy", run.get("status", "ended at step 2000"), run.get("not_in_run", []), run.get("notes", []))
    said.entries = list(entries)
    return [(j.verdict, j.text) for j in judge_log(golden, [said])]


def incident_verdicts(*entries: dict[str, Any], golden: dict[str, Any] = GOLDEN) -> list[str]:
    return [v for v, _ in verdicts(golden, *entries)[1:]]  # [0] is the run's status


def test_severity_status_and_an_invented_incident() -> None:
    assert incident_verdicts(incident(701, claim("status", "Loss rose to 1.5x its level."))) == ["true", "true"]
    # the golden calls 1500 a divergence: "[spike]" is false, the rise itself is true
    assert incident_verdicts(incident(1500, claim("status", "Loss rose to 2x its level."))) == ["false", "true"]
    # nothing golden near 300: every statement of the incident is false
    assert (
        incident_verdicts(incident(300, claim("status", "Loss rose."), claim("cause", "Cause unknown.", None)))
        == ["false"] * 3
    )
    # a blip is not in the default view: nothing said, nothing judged
    assert incident_verdicts(incident(300, claim("status", "Loss rose."), severity="blip")) == []
    no_severity = copy.deepcopy(GOLDEN)
    del no_severity["incidents"]["must_find"][0]["severity"]
    assert incident_verdicts(incident(700), golden=no_severity) == ["unjudged"]


def test_recovery_against_recovered_by_and_its_tolerance() -> None:
    def recovery(peak: int, text: str) -> str:
        return incident_verdicts(incident(peak, claim("recovery", text)))[1]

    assert recovery(700, "Recovered at step 724: the loss was back within the noise band of its trend.") == "true"
    assert recovery(700, "Recovered at step 702: back near its level of 3.1.") == "false"  # 18 steps early
    assert recovery(700, "Diverged: it has not come back to its level.") == "false"  # recovered_by 720
    assert recovery(1500, "Diverged: it has not come back to its level.") == "true"  # recovered_by null
    assert recovery(1500, "Not back: loss was non-finite at its first logged sample (step 1), with ...") == "true"
    assert recovery(700, "Not back: loss was non-finite at its first logged sample (step 1), with ...") == "false"
    assert recovery(1500, "Recovered at step 1503: back near its level of 3.1.") == "false"
    # cut off by the log's end (docs/diagnosis.md, "Scorer"): no recovery said; false only where the golden has one in
    # the log
    cut_off = "The log ends at this sample (step 1500): whether it lasted cannot be told."
    assert recovery(1500, cut_off) == "true" and recovery(700, cut_off) == "false"


def test_cause_consistent_ruled_out_neither_and_unknown() -> None:
    def cause(peak: int, leaf: str, holds: bool | None = True) -> str:
        return incident_verdicts(incident(peak, claim("cause", "A cause.", holds), leaf=leaf))[1]

    assert cause(700, "leaf_data_outlier_recovered") == "true"  # causes_consistent
    assert cause(700, "leaf_lr_transition") == "false"  # causes_ruled_out
    assert cause(700, "leaf_rank_fault") == "unsupported"  # neither
    assert cause(700, "leaf_unknown", None) == "false"  # data_outlier's signature is in the data
    assert cause(1500, "leaf_unknown", None) == "true"  # no cause is consistent at 1500
    # a cause whose check failed is not said; the surfaces say "cause unknown" instead, judged as such
    said = verdicts(GOLDEN, incident(700, claim("cause", "Scenario A: LR jump at a transition.", False)))
    assert said[2][0] == "false" and said[2][1].startswith("Cause unknown")


def test_not_logged_claims_against_facts_logged() -> None:
    lacks = [
        claim("not_logged", "Question 5 (SNR collapse before the spike?) could not be answered: the log lacks x."),
        claim("not_logged", "Question 2 (Near a schedule transition?) could not be answered: the log lacks lr."),
        claim("not_logged", "Question 3 (Concentrated on few ranks?) could not be answered: the log lacks y."),
    ]
    no_lr = copy.deepcopy(GOLDEN)
    no_lr["facts"]["logged"]["lr"] = False
    assert incident_verdicts(incident(700, *lacks), golden=no_lr)[1:] == ["false", "true", "unjudged"]
    # "too few samples of X": X logged does not contradict it (the sample count is no fact); X absent does
    few = claim(
        "not_logged",
        "Question 5 (SNR collapse before the spike?) could not be answered: the log has too few samples of x.",
    )
    assert incident_verdicts(incident(700, few))[1:] == ["unjudged"]
    no_grad = copy.deepcopy(GOLDEN)
    no_grad["facts"]["logged"]["grad_norm"] = False
    assert incident_verdicts(incident(700, few), golden=no_grad)[1:] == ["false"]


NAN_FROM_START_ACTIONS = [
    "Roll back to the last checkpoint whose loss and weights are finite.",
    "Skip the offending batch and any step whose gradients are non-finite.",
    "Log the fp16 loss scale: whether it kept halving cannot be told from this log.",
    "Train in bf16 with fp32 master weights (or keep fp16 only with a working dynamic loss scaler).",
    "Do not roll back or skip batches: no logged step before this one was finite, so there is no healthy state.",
    "Check the first batches: NaN or inf inputs, token ids beyond the vocabulary.",
]


def test_actions_whose_premise_fails_on_a_run_nan_from_step_0() -> None:
    """Issue #32 item 4: llm.c NaN from step 0, bf16, checkpoints every 5,000 steps."""
    golden = copy.deepcopy(GOLDEN)
    golden["facts"].update(nonfinite_from_start=True, checkpoint_steps=[5000])
    golden["incidents"]["must_find"][0].update(step=0, recovered_by=None, causes_consistent=["nonfinite_from_start"])
    actions = [claim("action", text) for text in NAN_FROM_START_ACTIONS]
    assert incident_verdicts(incident(0, *actions, leaf="leaf_nonfinite_from_start"), golden=golden)[1:] == [
        "false",  # no finite checkpoint to roll back to
        "false",  # every batch is NaN
        "false",  # bf16: no fp16 loss scale
        "false",  # bf16 already
        "true",
        "true",
    ]


def test_actions_on_a_recovered_data_outlier() -> None:
    actions = [
        claim("action", "Find the batches around step 700 and skip or deduplicate them in the data pipeline."),
        claim("action", "Roll back to the last checkpoint saved before the spike (step 500)."),
        claim("action", "Record the run's precision (fp16 or bf16): moving to bf16 helps only an fp16 run."),
        claim("action", "Record the run's max_norm (clip threshold) and log the grad norm before clipping."),
        claim("action", "Log the LR: whether the instability came with the warmup's rise cannot be told."),
        claim("action", "Log the global gradient norm before clipping (grad_norm) and diagnose again: they settle."),
        claim("action", "Re-run from the previous checkpoint to see whether the spike repeats (data) or not."),
        claim("action", "Lengthen the warmup or lower the peak LR: the spike began 600 steps after the warmup."),
        claim("action", "For a data-recipe switch, re-warm the LR from a lower value as well."),
        claim("action", "Something no row knows."),
    ]
    assert incident_verdicts(incident(700, *actions))[1:] == [
        "true",  # data_outlier consistent
        "false",  # recovered_by 720: nothing to roll back
        "false",  # the file states bf16
        "true",  # no clip coefficient logged
        "false",  # the LR is logged
        "false",  # the grad norm is logged
        "true",  # a checkpoint at 500
        "false",  # the warmup ended at 100, but the golden rules the LR transition out
        "unjudged",
        "unjudged",
    ]


def test_a_rerun_from_a_checkpoint_against_the_saves_the_log_states() -> None:
    """Issue #32 item 4: "Re-run from the previous checkpoint" holds where the log states a save before the
    incident. (Round 10: the conditional "If a checkpoint from before step N exists ..." said where no save
    was read is no longer said: its premise cannot be checked, and logs that print saves only after the
    spike made it false.)"""
    bare = claim("action", "Re-run from the previous checkpoint to see whether the spike repeats (data) or not.")
    for saves, verdicts in (([500], ["true"]), (None, ["unsupported"]), ([900], ["false"])):
        golden = copy.deepcopy(GOLDEN)
        golden["facts"].update(checkpoint_steps=saves)
        assert incident_verdicts(incident(700, bare), golden=golden)[1:] == verdicts


def test_every_action_stabscope_may_say_has_a_rule() -> None:
    templates = [t for actions in LEAF_ACTIONS.values() for t in actions]
    templates += [p.otherwise for p in PREMISES.values() if p.otherwise]
    templates += list(GENERIC_ACTIONS.values())  # said when the numbers an action names are not known
    assert [t for t in templates if action_rule(t) is None] == []
    # a row no action reaches would be a rule of nothing
    prefixes = [prefix for prefix, _ in (*PREFIX_FIRST, *ACTION_RULES)]
    assert [p for p in prefixes if not any(t.startswith(p) for t in templates)] == []


def test_run_level_statements() -> None:
    notes = [
        "Not run: grad_norm spikes: the run logs no grad_norm.",
        "Not run: loss spikes: 2500 finite loss samples: the spike detector needs more than 16.",  # > 2,000 records
        "Logging stopped at step 2000: every metric logged from this step on is non-finite.",
    ]
    got = verdicts(GOLDEN, status="stopped at 2000 of 3000", not_in_run=["lr", "clip"], notes=notes)
    assert [v for v, _ in got] == ["true", "false", "true", "false", "false", "unjudged"]
    assert verdicts(GOLDEN, status="finished")[0][0] == "false"  # 2000 of 3000
    assert verdicts(GOLDEN, status="ended at step 1990")[0][0] == "false"


def test_findings_and_their_misses() -> None:
    overfit = {"kind": "overfitting", "start": 800, "end": 2000, "summary": "Overfitting from 800.",
               "actions": ["Keep the checkpoint of step 800 (the lowest val loss); stop earlier."],
               "overfitting": {"best_step": 800}}  # fmt: skip
    slow = {"kind": "throughput_loss", "start": 1250, "end": 1450, "summary": "Throughput fell 40%.",
            "actions": ["Compare the slow span's nodes."]}  # fmt: skip
    siblings = {"kind": "throughput_loss", "start": -1, "end": -1, "summary": "45% slower than its siblings.",
                "actions": []}  # fmt: skip
    assert [v for v, _ in verdicts(GOLDEN, overfit, slow, siblings)[1:]] == [
        "false",  # facts.overfitting null
        "false",
        "true",  # the drop at 1200-1400
        "true",
        "unjudged",  # no fact compares sibling runs
    ]
    golden = copy.deepcopy(GOLDEN)
    golden["facts"]["overfitting"] = {"best_val_step": 800, "val_rising_from": 800, "val_rising_to": 2000}
    assert [v for v, _ in verdicts(golden, overfit)[1:]] == ["true", "true"]
    assert missed_findings(golden, [RunSaid("toy", "ended at step 2000")]) == [
        "overfitting from 800 (800-2000)",
        "throughput drop 1200-1400 (x0.6)",
    ]


def test_match_takes_the_nearest_golden_incident_within_tolerance() -> None:
    truths = [{"step": 100, "tolerance_steps": 10}, {"step": 112, "tolerance_steps": 10}]
    assert match({"start": 109, "peak": 111, "end": 111}, truths) == truths[1]
    assert match({"start": 130, "peak": 130, "end": 130}, truths) is None


def test_match_compares_onsets_not_the_peak_with_an_onset() -> None:
    """A golden incident's step is its first step: a divergence detected from 2000 to the log's end, highest
    at 6790, is the golden divergence from 2400, not the may-find swing at 6790."""
    truths = [{"step": 2400, "tolerance_steps": 500}, {"step": 6790, "tolerance_steps": 50}]
    assert match({"start": 2000, "peak": 6790, "end": 9000}, truths) == truths[0]
    same_onset = [{"step": 100, "tolerance_steps": 5}, {"step": 100, "tolerance_steps": 50}]
    assert match({"start": 100, "peak": 140, "end": 150}, same_onset) == same_onset[0]


def test_counts_and_precision() -> None:
    judged = judged_json(judge_log(GOLDEN, [RunSaid("toy", "ended at step 2000", ["lr"], [], [incident(300)])]))
    c = counts(judged)
    assert (c["true"], c["false"], c["unsupported"], c["unjudged"], c["all"]) == (1, 2, 0, 0, 3)
    assert c["precision"] == pytest.approx(1 / 3)
    assert c["by_kind"]["severity"] == {"true": 0, "false": 1, "unsupported": 0, "unjudged": 0}
    unknown = counts(
        judged_json(
            judge_log(
                GOLDEN,
                [RunSaid("toy", "x", [], [], [incident(700, claim("cause", "Cause unknown: no question.", None))])],
            )
        )
    )
    assert unknown["by_kind"]["cause (unknown)"]["false"] == 1 and "cause" not in unknown["by_kind"]


def test_split_by_tuned_on() -> None:
    held = LogScore("new", tuned_on=False, required=2, found=1, reported=3)
    held.statements = judged_json(judge_log(GOLDEN, [RunSaid("new", "ended at step 2000")]))
    held.baselines = {"llm.c": {"required": 2, "found": 0, "invented": 4, "shown": 4}}
    old = LogScore("old", required=4, found=4, healthy=True, reported=1)
    judge_statements(old, {"name": "old"}, [])  # a golden without facts: skipped, with a note
    assert old.statements_note is not None and old.statements == []
    old.baselines = {"llm.c": {"required": 4, "found": 2, "invented": 0, "shown": 0}}
    t = split_totals([held, old])
    assert (t["held_out"]["logs"], t["tuned_on"]["logs"], t["all"]["logs"]) == (1, 1, 2)
    assert (t["held_out"]["recall"], t["tuned_on"]["recall"], t["all"]["recall"]) == (0.5, 1.0, 5 / 6)
    assert t["held_out"]["statements"]["all"] == 1 and t["tuned_on"]["statements"]["all"] == 0
    assert t["tuned_on"]["logs_with_facts"] == 0 and t["held_out"]["logs_with_facts"] == 1
    assert t["held_out"]["baselines"]["llm.c"]["invented"] == 4
    assert t["tuned_on"]["baselines"]["StabScope"]["healthy_shown"] == 1
    table = detector_table([held, old])
    assert "| llm.c | held out | 0.00 | 0 / 2 | 4 | 0 |" in table
    assert "| StabScope | tuned on | 1.00 | 4 / 4 | 0 | 1 |" in table
    assert "Statements not judged (golden without facts): 1 logs: old" in statements_tables([held, old])
    summary = split_table([held, old])
    assert "| logs (with facts) | 2 (1) | 1 (1) | 1 (0) |" in summary
    assert "| required incidents found (recall) | 5/6 (0.83) | 1/2 (0.50) | 4/4 (1.00) |" in summary


def test_actions_false_count_apart_those_of_invented_incidents() -> None:
    roll_back = claim("action", "Roll back to the last checkpoint whose loss and weights are finite.")
    score = LogScore("toy", tuned_on=False)
    score.statements = judged_json(
        judge_log(
            GOLDEN, [RunSaid("toy", "ended at step 2000", [], [], [incident(700, roll_back), incident(300, roll_back)])]
        )
    )
    t = split_totals([score])["held_out"]
    assert (t["actions_false"], t["actions_false_matched"]) == (2, 1)  # 700 recovered; 300 is invented


def test_in_a_file_of_several_runs_what_a_run_logs_is_its_golden_runs_metrics() -> None:
    """The s21-gpt2 notes: 14 runs, the first ones log the loss alone, the last ones grad norm and LR too."""
    golden = copy.deepcopy(GOLDEN)
    golden["import"]["runs"] = [
        {"steps": [0, 49], "metrics": ["loss"]},
        {"steps": [0, 49], "metrics": ["loss", "grad_norm", "lr"]},
    ]
    lacks = claim("not_logged", "Question 2 (Near a schedule transition?) could not be answered: the log lacks lr.")
    runs = [
        RunSaid("a", "ended at step 49", ["grad_norm"], ["Not run: grad_norm spikes: the run logs no grad_norm."],
                [incident(30, lacks)]),
        RunSaid("b", "ended at step 49", ["grad_norm"], [], [incident(30, lacks)]),
    ]  # fmt: skip
    golden["incidents"]["must_find"][0].update(step=30)
    got = [(j.where.split()[0], j.kind, j.verdict) for j in judge_log(golden, runs) if j.kind != "severity"]
    assert got == [
        ("a", "run_status", "true"),
        ("a", "not_in_run", "true"),  # run a's golden metrics have no grad norm
        ("a", "note", "true"),
        ("a", "not_logged", "true"),
        ("b", "run_status", "true"),
        ("b", "not_in_run", "false"),  # run b logs it
        ("b", "not_logged", "false"),
    ]
    one_run = copy.deepcopy(GOLDEN)  # one run: the file's facts decide, whatever the golden run lists
    assert verdicts(one_run, not_in_run=["grad_norm"])[1][0] == "false"


def test_a_small_throughput_drop_and_a_run_nan_from_its_start() -> None:
    small = {"kind": "throughput_loss", "start": 300, "end": 350, "ratio": 0.84, "summary": "-16%", "actions": []}
    large = {**small, "ratio": 0.6, "summary": "-40%"}
    assert [v for v, _ in verdicts(GOLDEN, small, large)[1:]] == ["unsupported", "false"]  # facts list >= 20 %
    golden = copy.deepcopy(GOLDEN)
    golden["facts"]["nonfinite_from_start"] = True
    notes = ["Not run: loss spikes: 0 finite loss samples: the spike detector needs more than 16."]
    assert verdicts(golden, notes=notes)[1][0] == "true"  # 2,000 records, every one NaN
    fewer = ["Not run: loss spikes: 12 finite loss samples: the spike detector needs more than 16."]
    assert verdicts(GOLDEN, notes=fewer)[1][0] == "unjudged"  # records are counted finite or not


# --------------------------------------------------------------------------------------------------
# Facts v2 (per golden run: planned_steps, ended, records_by_metric, median_throughput; facts.logged
# per_rank / expert_load, facts.moe, facts.sibling_runs_comparable): each rule true, false, and as before
# where the golden file lacks the field
# --------------------------------------------------------------------------------------------------


def with_run(**fields: Any) -> dict[str, Any]:
    golden = copy.deepcopy(GOLDEN)
    golden["import"]["runs"][0].update(fields)
    return golden


def note_verdicts(golden: dict[str, Any], *notes: str) -> list[str]:
    return [v for v, _ in verdicts(golden, notes=list(notes))[1:]]


def test_sample_counts_in_notes_against_records_by_metric() -> None:
    grad = "Not run: grad_norm spikes: {} finite grad_norm samples: the spike detector needs more than 16."
    snr = "Not run: snr: no SNR yet: {} grad-norm samples, the SNR proxy needs 100 (a rolling window); log ..."
    golden = with_run(records_by_metric={"loss": 2000, "grad_norm": 10})
    assert note_verdicts(golden, grad.format(10), grad.format(11), grad.format(14)) == ["true", "true", "false"]
    assert note_verdicts(golden, snr.format(10), snr.format(40)) == ["true", "false"]
    # fewer finite samples than records: the golden counts non-finite records too
    assert note_verdicts(golden, snr.format(5)) == ["unjudged"]
    # records_by_metric omits a metric the run does not log: any sample of it is false, none is true
    no_grad = with_run(records_by_metric={"loss": 2000})
    assert note_verdicts(no_grad, grad.format(3), grad.format(0)) == ["false", "true"]
    # without records_by_metric: the loss has the run's records, the grad norm no fact (as before)
    assert note_verdicts(GOLDEN, grad.format(10), snr.format(10)) == ["unjudged", "unjudged"]
    loss = "Not run: loss spikes: 2000 finite loss samples: the spike detector needs more than 16."
    assert note_verdicts(GOLDEN, loss) == ["true"]


def status_verdict(golden: dict[str, Any], status: str) -> str:
    return verdicts(golden, status=status)[0][0]


def test_run_status_against_planned_steps_and_ended() -> None:
    stopped = with_run(steps=[1, 50], planned_steps=1000, ended="stopped")
    assert status_verdict(stopped, "stopped at 50 of 1000") == "true"
    assert status_verdict(stopped, "stopped at 50 of 999") == "false"  # not the planned steps
    assert status_verdict(stopped, "stopped at 40 of 1000") == "false"  # not the last step
    assert status_verdict(with_run(steps=[1, 50], planned_steps=1000, ended="crashed"), "stopped at 50 of 1000") == (
        "true"
    )
    # the log says training completed: "stopped" is false
    assert status_verdict(with_run(steps=[1, 990], planned_steps=1000, ended="finished"), "stopped at 990 of 1000") == (
        "false"
    )
    unplanned = with_run(steps=[1, 50], planned_steps=None)  # the log states none for this run: "of 1000" is false
    assert status_verdict(unplanned, "stopped at 50 of 1000") == "false"
    no_fact = copy.deepcopy(GOLDEN)
    del no_fact["import"]["runs"][0]["planned_steps"]
    assert status_verdict(no_fact, "stopped at 2000 of 3000") == "unjudged"  # no planned_steps: as before
    assert status_verdict(no_fact, "finished") == "unjudged"
    assert status_verdict(with_run(steps=[1, 10], planned_steps=10), "finished") == "true"
    assert status_verdict(with_run(steps=[1, 9], planned_steps=10, ended="finished"), "finished") == "true"  # 9 + 1
    # the golden says the run ended on its own terms (early stopping, "End of training", its last logged step
    # the last it would log before the plan): "finished" is true short of the planned steps (docs/diagnosis.md,
    # "Scorer")
    assert status_verdict(with_run(steps=[1, 5], planned_steps=10, ended="finished"), "finished") == "true"
    assert status_verdict(with_run(steps=[1, 5], planned_steps=10, ended="stopped"), "finished") == "false"
    assert status_verdict(with_run(steps=[1, 5], planned_steps=10, ended="unknown"), "finished") == "false"
    # no planned steps: "ended" decides
    assert status_verdict(with_run(steps=[1, 50], planned_steps=None, ended="finished"), "finished") == "true"
    assert status_verdict(with_run(steps=[1, 50], planned_steps=None, ended="crashed"), "finished") == "false"
    assert status_verdict(with_run(steps=[1, 50], planned_steps=None, ended="unknown"), "finished") == "unjudged"
    assert status_verdict(unplanned, "finished") == "unjudged"
    assert status_verdict(unplanned, "ended at step 50") == "true"


RANKS_LACKED = (
    "Question 3 (Concentrated on few ranks?) could not be answered: the log lacks per-rank gradient norms "
    "(grad_norm_local) or per-rank losses."
)
EXPERTS_LACKED = (
    "Question 4 (MoE router seesaw?) could not be answered: the log lacks the MoE expert load "
    "(expert_load_max_over_mean), or num_experts=1 in the run's metadata for a dense model."
)
LOG_RANKS_AND_EXPERTS = (
    "Log per-rank gradient norms (grad_norm_local) or per-rank losses; the MoE expert load "
    "(expert_load_max_over_mean), or num_experts=1 in the run's metadata for a dense model and diagnose again: "
    "they settle the questions this log leaves open."
)


def rank_and_expert_verdicts(**facts: Any) -> list[str]:
    golden = copy.deepcopy(GOLDEN)
    golden["facts"]["logged"].update({k: v for k, v in facts.items() if k != "moe"})
    if "moe" in facts:
        golden["facts"]["moe"] = facts["moe"]
    claims = [claim("not_logged", RANKS_LACKED), claim("not_logged", EXPERTS_LACKED)]
    claims.append(claim("action", LOG_RANKS_AND_EXPERTS))
    return incident_verdicts(incident(700, *claims), golden=golden)[1:]


def test_per_rank_and_expert_load_against_facts_logged_and_moe() -> None:
    assert rank_and_expert_verdicts(per_rank=False, expert_load=False, moe=None) == ["true", "true", "true"]
    assert rank_and_expert_verdicts(per_rank=True, expert_load=False, moe=None) == ["false", "true", "false"]
    assert rank_and_expert_verdicts(per_rank=False, expert_load=True, moe=True) == ["true", "false", "false"]
    # a dense model the file states: "or num_experts=1 for a dense model" is in the log
    assert rank_and_expert_verdicts(per_rank=False, expert_load=False, moe=False) == ["true", "false", "false"]
    # a golden file without the facts v2 fields: as before
    assert rank_and_expert_verdicts() == ["unjudged", "unjudged", "unjudged"]


def test_nothing_to_recover_to_against_nonfinite_from_start() -> None:
    never = claim("recovery", "Nothing to recover to: the run was never finite, so it never held a level.")
    golden = copy.deepcopy(GOLDEN)
    golden["facts"]["nonfinite_from_start"] = True
    assert incident_verdicts(incident(700, never), golden=golden)[1:] == ["true"]
    assert incident_verdicts(incident(700, never))[1:] == ["false"]  # finite at its first step
    del golden["facts"]["nonfinite_from_start"]
    assert incident_verdicts(incident(700, never), golden=golden)[1:] == ["unjudged"]


def sibling_verdicts(comparable: Any, ratio: float, *medians: dict[str, float] | None) -> list[str]:
    golden = copy.deepcopy(GOLDEN)
    golden["import"]["runs"] = [{"steps": [0, 49], "metrics": ["loss"], "median_throughput": m} for m in medians]
    if comparable != "absent":
        golden["facts"]["sibling_runs_comparable"] = comparable
    names = [f"r{i}" for i in range(len(medians))]
    gap = {"kind": "throughput_loss", "start": -1, "end": -1, "ratio": ratio, "summary": "throughput loss",
           "actions": ["Compare the slow span's nodes."], "throughput": {"siblings": names[1:]}}  # fmt: skip
    runs = [RunSaid(names[0], "ended at step 49", [], [], [gap])] + [RunSaid(n, "ended at step 49") for n in names[1:]]
    return [j.verdict for j in judge_log(golden, runs) if j.kind in ("finding", "action")]


def test_a_gap_against_sibling_runs_against_their_golden_medians() -> None:
    tokens = ({"tokens_per_s": 10_000}, {"tokens_per_s": 85_000}, {"tokens_per_s": 86_000})
    assert sibling_verdicts(True, 10_116 / 85_861, *tokens) == ["true", "true"]  # 0.118 said, 0.117 golden
    assert sibling_verdicts(True, 0.5, *tokens) == ["false", "false"]
    assert sibling_verdicts(False, 10_116 / 85_861, *tokens) == ["false", "false"]  # different configs
    assert sibling_verdicts(None, 10_116 / 85_861, *tokens) == ["false", "false"]  # one run: no siblings
    assert sibling_verdicts("absent", 10_116 / 85_861, *tokens) == ["unjudged", "unjudged"]
    assert sibling_verdicts(True, 0.5, tokens[0], None) == ["unjudged", "unjudged"]  # a sibling without a median
    # seconds per step: 2 s against 1 s is half the rate
    assert sibling_verdicts(True, 0.5, {"step_time_s": 2.0}, {"step_time_s": 1.0}) == ["true", "true"]
    assert sibling_verdicts(True, 0.5, {"step_time_s": 2.0}, {"tokens_per_s": 1.0}) == ["unjudged", "unjudged"]


def test_too_few_grad_norm_samples_before_the_incident_against_the_golden_records() -> None:
    few = claim(
        "not_logged",
        "Question 5 (SNR collapse before the spike?) could not be answered: the log has too few samples of x.",
    )

    def verdict(peak: int, **run: Any) -> str:
        golden = with_run(**run)
        golden["incidents"]["must_find"][0]["step"] = peak
        return incident_verdicts(incident(peak, few), golden=golden)[1]

    assert verdict(700, records_by_metric={"loss": 2000, "grad_norm": 18}) == "true"  # 18 in all; the proxy needs 100
    # every step logged from step 1: 49 before step 50, 699 before step 700
    every_step = {"steps": [1, 2000], "records_by_metric": {"loss": 2000, "grad_norm": 2000}}
    assert verdict(50, **every_step) == "true"
    assert verdict(700, **every_step) == "unjudged"  # enough for the proxy; the node's other windows are no fact
    assert verdict(50, steps=[1, 2000], records_by_metric={"loss": 2000, "grad_norm": 400}) == "unjudged"  # sparse
