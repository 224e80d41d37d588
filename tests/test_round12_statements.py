"""Issue #32 (docs/diagnosis.md, "Actions and claims"): statements whose premise the data does not show, each on a small
synthetic run.

- a grad norm non-finite at every step beside a loss that falls is a broken readout, not a run that never
  trains (the loss moving shows the updates work);
- a grad norm of 0 at every step beside a loss that does not fall is a reading (no gradient reaches the
  weights), not a placeholder;
- the scorer judges a grad-norm incident's "non-finite from the first step" by the grad norm's own first and
  last values (``facts.nonfinite_from_start`` is about the loss)."""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.run_statement_rules import count_note_verdict
from bench.statement_rules import FALSE, TRUE, Case, nonfinite_from_start_verdict
from stab_core.analysis import INCIDENT_VERDICT, analyze_run, statements
from stab_core.metrics import loss_falls
from stab_core.runview import RunEvent, RunView, Series


def _inf_grads(loss_falls_by: float) -> RunView:
    """A run logged every 10 steps: grad norm inf at every log, the loss finite and falling by
    ``loss_falls_by`` (a share of its start) over the run, with a little noise."""
    rng = np.random.default_rng(4)
    steps = np.arange(1, 1001, 10)
    loss = 11.0 * (1.0 - loss_falls_by * np.linspace(0.0, 1.0, steps.size)) + 0.02 * rng.standard_normal(steps.size)
    grad = np.full(steps.size, np.inf)
    return RunView("pp", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad)})


def _grad_items(view: RunView) -> list[dict[str, Any]]:
    return [i for i in analyze_run(view).spike_dicts() if i["metric"] == "grad_norm"]


def test_loss_falls_tells_a_falling_loss_from_a_flat_one() -> None:
    assert loss_falls(np.linspace(11.0, 5.0, 100)) is True
    assert loss_falls(np.full(100, 11.76)) is False
    assert loss_falls([1.0, np.nan]) is None


def test_inf_grad_norm_beside_a_falling_loss_is_a_broken_readout_not_a_run_that_never_trains() -> None:
    (item,) = _grad_items(_inf_grads(0.5))
    assert item["leaf"] != "leaf_nonfinite_from_start"
    said = " ".join(statements(item, (*INCIDENT_VERDICT, "action")))
    assert "the grad-norm readout is what is broken" in said
    assert "not training" not in said


def test_inf_grad_norm_beside_a_flat_loss_still_never_trains() -> None:
    (item,) = _grad_items(_inf_grads(0.0))
    assert item["leaf"] == "leaf_nonfinite_from_start"


def test_a_zero_grad_norm_beside_a_flat_loss_is_a_reading_not_a_placeholder() -> None:
    steps = np.arange(10, 440, 10)
    loss = 10.35 + 0.02 * np.sin(steps)
    view = RunView("olmo", {"loss": Series(steps, loss), "grad_norm": Series(steps, np.zeros(steps.size))})
    reason = analyze_run(view).snr_reason
    assert reason is not None
    assert "placeholder" not in reason
    assert "while the loss does not fall" in reason


def _case(first: float, last: float, metric: str = "grad_norm") -> Case:
    truth = {"step": 1, "metric": "grad_norm", "recovered_by": None, "causes_consistent": ["numerical"]}
    run = {"first": {"loss": 11.76, metric: first}, "last": {"loss": 11.76, metric: last}}
    return Case({"nonfinite_from_start": False}, truth, {"metric": "grad_norm", "start": 1}, 1, run=run)


def test_the_scorer_judges_a_grad_norm_never_finite_by_its_own_values() -> None:
    assert nonfinite_from_start_verdict(_case(float("inf"), float("inf")))[0] == TRUE
    assert nonfinite_from_start_verdict(_case(0.5, 0.5))[0] == FALSE
    run = {"records_by_metric": {"grad_norm": 101}, "first": {"grad_norm": float("inf")}}
    note = "Not run: grad_norm spikes: all 101 grad_norm samples are non-finite: nothing to compare"
    verdict = count_note_verdict(note, {**run, "last": {"grad_norm": float("inf")}}, {"nonfinite_from_start": False})
    assert verdict is not None and verdict[0] == TRUE
    verdict = count_note_verdict(note, {**run, "last": {"grad_norm": 0.3}}, {"nonfinite_from_start": False})
    assert verdict is not None and verdict[0] == FALSE


def test_a_jump_the_replay_from_a_checkpoint_does_not_repeat_is_no_bad_batch() -> None:
    """An attempt that jumps 2.5x right after step 300 and is abandoned at 400; the run resumed from the
    checkpoint replays 301-400 at the old level. The same batches gave a normal loss: node 5 (a data
    outlier's resonance) answers no, whatever the SNR did."""
    from dataclasses import replace

    from stab_core.abandoned import abandoned_attempts
    from stab_core.analysis import find_incidents, run_params
    from stab_core.cause_signatures import replayed_normally
    from stab_core.decision_tree import DiagnosisParams
    from stab_core.tree_nodes import node_snr_collapse, prepare_context

    rng = np.random.default_rng(0)
    steps = np.arange(1, 601)
    kept = 2.0 + 0.05 * rng.standard_normal(steps.size)
    jumped = 5.0 + 0.05 * rng.standard_normal(100)
    detail = {"abandoned": {"loss": [[[float(s) for s in range(301, 401)], jumped.tolist()]]}}
    view = RunView("r", {"loss": Series(steps, kept)}, events=(RunEvent(301, "rollback", detail=detail),))
    (attempt,) = abandoned_attempts(view)
    (incident,) = [i for i in find_incidents(attempt.view, run_params(attempt.view)) if i.primary.peak >= 301]
    spike = incident.primary
    assert replayed_normally(spike, view.series["loss"]) is True
    assert replayed_normally(spike, attempt.view.series["loss"]) is False
    assert replayed_normally(spike, None) is None
    context = replace(prepare_context(attempt.view), replay_loss=view.series["loss"])
    result = node_snr_collapse(spike, DiagnosisParams(), context)
    assert result.answer == "no" and result.evidence["replayed_normally"] is True


def test_a_roll_back_names_the_last_save_before_the_spike_or_says_none_is_read() -> None:
    from stab_core.action_premises import _checkpoint_before
    from stab_core.tree_actions import LEAF_ACTIONS, checked_actions

    actions = LEAF_ACTIONS["leaf_data_outlier_diverged"][:1]
    saves = tuple(RunEvent(s, "checkpoint") for s in (5000, 5500, 6000))
    steps = np.arange(5001, 5600)
    view = RunView("r", {"loss": Series(steps, np.ones(steps.size))}, events=saves)
    for events, said in (
        (saves, ["Roll back to the last checkpoint saved before the spike (step 5500)."]),
        (
            (),
            [
                "Roll back to the last checkpoint saved before step 5502, if there is one: no checkpoint save is "
                "read from this log, so which one cannot be told here."
            ],
        ),
    ):
        check = _checkpoint_before(RunView("r", view.series, events=events), 5502)
        facts = {"start": 5502, **check[1]}
        assert checked_actions(actions, facts, {"last_checkpoint_before": check})[0] == said
    early = _checkpoint_before(view, 4000)
    assert checked_actions(actions, {"start": 4000, **early[1]}, {"last_checkpoint_before": early})[0] == []


def test_the_scorer_judges_the_save_a_roll_back_names() -> None:
    from bench.statement_rules import action_rule

    truth = {"step": 5501, "metric": "loss", "recovered_by": None}
    facts = {"checkpoint_steps": [5000, 5500, 6000]}
    text = "Roll back to the last checkpoint saved before the spike (step {}).".format
    for named, verdict in ((5500, TRUE), (5000, FALSE)):
        case = Case(facts, truth, {"metric": "loss", "start": 5502}, 5001, text=text(named))
        rule = action_rule(case.text)
        assert rule is not None and rule(case)[0] == verdict
    none_before = Case(facts, truth, {"metric": "loss", "start": 4000}, 1, text=text(3000))
    rule = action_rule(none_before.text)
    assert rule is not None and rule(none_before)[0] == FALSE


def test_the_scorer_judges_a_zero_grad_norm_reading_and_samples_before_an_onset_on_a_grid() -> None:
    from bench.run_statement_rules import too_few_before_verdict

    note = (
        "Not run: snr: no SNR: the gradient norm is 0 at every one of its 43 samples while the loss does not "
        "fall: no gradient reaches the weights (the run is not training); the SNR proxy needs a non-zero norm."
    )
    flat = {
        "records_by_metric": {"grad_norm": 43},
        "first": {"loss": 10.38, "grad_norm": 0.0},
        "last": {"loss": 10.32, "grad_norm": 0.0},
    }
    verdict = count_note_verdict(note, flat, {})
    assert verdict is not None and verdict[0] == TRUE
    falling = {**flat, "last": {"loss": 6.1, "grad_norm": 0.0}}
    verdict = count_note_verdict(note, falling, {})
    assert verdict is not None and verdict[0] == FALSE
    # grad norm every 10 steps from 10 to 8920 (892 records): 59 before step 600, 199 before 2000
    run = {"steps": [10, 8920], "records": 892, "records_by_metric": {"grad_norm": 892}}
    assert too_few_before_verdict(run, "grad_norm", 600, 100)[0] == TRUE
    assert too_few_before_verdict(run, "grad_norm", 2000, 100)[0] == "unjudged"  # the node's other windows
