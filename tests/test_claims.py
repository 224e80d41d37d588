"""Every statement about an incident is a checked claim (issue #32 items 1 and 4): the claim type, the
claims of a diagnosed incident, and what the JSON, the CLI text and the alerts say about a run that is
NaN from its first step (llm.c, bf16, checkpoints every 5,000 steps)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from stab_core.alerts import spike_alerts
from stab_core.analysis import INCIDENT_VERDICT, analyze_run, statements, verdict_words
from stab_core.claims import Claim, check_claim, incident_claims, said, said_from_json
from stab_core.runview import RunView, Series
from stab_core.spikes import build_event
from stab_core.tree_walk import Diagnosis, NodeVisit

# ------------------------------------------------------------------ the claim type


def test_a_claim_is_said_only_when_its_check_does_not_fail() -> None:
    yes = Claim("status", "Loss rose to 2.00x its level.", True, {"ratio": 2.0})
    no = Claim("action", "Roll back.", False, {"never_finite": True})
    unknown = Claim("cause", "Cause unknown.", None, {}, "the LR")
    assert yes.words() == "Loss rose to 2.00x its level." and yes.said
    assert no.words() is None and not no.said
    assert unknown.words() == "Cause unknown. To settle it, log the LR."
    assert said([yes, no, unknown]) == [yes.text, unknown.words()]
    assert said([yes, no, unknown], ("cause",)) == [unknown.words()]
    with pytest.raises(ValueError, match="claim kind"):
        Claim("opinion", "x", True)  # type: ignore[arg-type]


def test_check_claim_evaluates_its_predicate_before_it_is_said() -> None:
    calls: list[int] = []

    def predicate() -> tuple[bool | None, dict[str, float | int | str | bool | None]]:
        calls.append(1)
        return False, {"lr_rose": False}

    claim = check_claim("cause", "Scenario A: LR jump at a transition.", predicate, to_log="the LR")
    assert calls == [1] and claim.holds is False and claim.evidence == {"lr_rose": False}
    assert claim.to_log is None  # what to log is said only when the data cannot tell
    unknown = check_claim("cause", "x", lambda: (None, {}), to_log="the LR")
    assert unknown.to_log == "the LR"


def test_claims_json_round_trip_and_non_finite_numbers() -> None:
    claim = Claim("status", "Loss went non-finite.", True, {"ratio": math.inf, "peak": 4})
    data = json.loads(json.dumps(claim.to_json()))
    assert data == {
        "kind": "status",
        "text": "Loss went non-finite.",
        "holds": True,
        "evidence": {"ratio": None, "peak": 4},
        "to_log": None,
    }
    assert said_from_json([data, {**data, "holds": False}]) == ["Loss went non-finite."]


def test_statements_fall_back_for_objects_stored_before_claims() -> None:
    legacy = {"summary": "Precision fault.", "actions": ["Roll back."]}
    assert statements(legacy, INCIDENT_VERDICT) == ["Precision fault."]
    assert statements(legacy, ("action",)) == ["Roll back."]


# ------------------------------------------------------------------ a cause without its signature


def _event() -> object:
    steps = np.arange(100)
    x = np.ones(100)
    x[60:62] = 3.0
    return build_event("loss", steps, x, 60, 61, 62, 1.0, 0.01)


def test_a_cause_whose_signature_failed_is_not_said() -> None:
    visit = NodeVisit("lr_transition", 2, "?", "yes", {"transition_kind": "warmup_end", "lr_rose": False})
    numerical = NodeVisit("numerical", 1, "?", "no", {})
    diagnosis = Diagnosis("lr_transition", 0.81, [numerical, visit], "leaf_lr_transition", [], [])
    claims = incident_claims(_event(), diagnosis)  # type: ignore[arg-type]
    (cause,) = [c for c in claims if c.kind == "cause"]
    assert cause.holds is False and cause.evidence["lr_rose"] is False
    item = {"cause": "lr_transition", "confidence": 0.81, "recovered": True, "claims": [c.to_json() for c in claims]}
    assert verdict_words(item) == "recovered; cause unknown"
    visit = NodeVisit("lr_transition", 2, "?", "yes", {"transition_kind": "cycle_restart", "lr_rose": True})
    diagnosis = Diagnosis("lr_transition", 0.9, [numerical, visit], "leaf_lr_transition", [], [])
    (cause,) = [c for c in incident_claims(_event(), diagnosis) if c.kind == "cause"]  # type: ignore[arg-type]
    assert cause.holds is True and cause.text == "Scenario A: LR jump at a transition."
    assert cause.evidence["transition_kind"] == "cycle_restart" and cause.evidence["confidence"] == 0.9


def test_an_unknown_cause_says_what_to_log() -> None:
    steps = np.arange(300)
    rng = np.random.default_rng(4)
    loss = 3.0 + 0.02 * rng.standard_normal(steps.size)
    loss[200:203] += 1.5
    (item,) = analyze_run(RunView("plain", {"loss": Series(steps, loss)})).spike_dicts()
    (cause,) = [c for c in item["claims"] if c["kind"] == "cause"]
    assert cause["holds"] is None and "the learning rate (lr)" in cause["to_log"]
    not_logged = [c for c in item["claims"] if c["kind"] == "not_logged"]
    # nothing in the run names experts: the MoE question (4) is neither asked for nor said to be lacking
    assert {c["text"].split(" (")[0] for c in not_logged} == {"Question 2", "Question 3", "Question 5"}
    assert "expert load" not in cause["to_log"]
    (status,) = [c for c in item["claims"] if c["kind"] == "status"]
    assert status["holds"] is True and status["evidence"]["peak"] == item["peak"]
    (recovery,) = [c for c in item["claims"] if c["kind"] == "recovery"]
    # recovery is judged against the loss's trend (stab_core.severity), not the detector's frozen level
    assert item["loss_recovered_at"] is not None
    assert recovery["holds"] is True and recovery["text"].startswith(f"Recovered at step {item['loss_recovered_at']}")
    # the JSON's actions are exactly the action claims that are said
    assert said_from_json(item["claims"], ("action",)) == item["actions"]


def test_a_spike_with_no_finite_level_before_it_is_not_said_to_recover() -> None:
    """Megatron on one GPU: grad norm nan at iteration 1, then 0.000 (a placeholder) on every later one.
    The detector's event "recovers" at step 2 against a level of nan. Before: "Recovered at step 2:
    back near its level of nan."; then "Diverged", which its golden forbids: a run that never trained from
    its first step held no level to diverge from (docs/diagnosis.md, "Recovery")."""
    steps = np.arange(1, 16)
    grad = np.zeros(15)
    grad[0] = np.nan
    event = build_event("grad_norm", steps, grad, 0, 0, 1, math.nan, 0.01)
    numerical = NodeVisit("numerical", 1, "?", "yes", {})
    diagnosis = Diagnosis("numerical", 0.9, [numerical], "leaf_numerical", [], [])
    (recovery,) = [c for c in incident_claims(event, diagnosis) if c.kind == "recovery"]
    assert recovery.holds is True and "diverged" not in recovery.text.lower()
    assert recovery.text.startswith("Not back: grad_norm was non-finite at its first logged sample (step 1)")


# ------------------------------------------------------------------ NaN from step 0 (item 4)


def _nan_from_start(meta: dict[str, object]) -> RunView:
    steps = np.arange(0, 80)
    nan = np.full(steps.size, np.nan)
    lr = np.linspace(6e-6, 6e-4, steps.size)
    return RunView(
        "llmc-nan",
        {"loss": Series(steps, nan.copy()), "grad_norm": Series(steps, nan.copy()), "lr": Series(steps, lr)},
        meta=meta,
    )


@pytest.mark.parametrize("meta", [{"precision": "bf16", "checkpoint_every": 5000}, {}])
def test_a_run_nan_from_step_0_gets_no_action_whose_premise_fails(meta: dict[str, object]) -> None:
    (item,) = analyze_run(_nan_from_start(meta)).spike_dicts()
    said_text = " ".join(statements(item, (*INCIDENT_VERDICT, "action"))).lower()
    assert "a build, kernel, data or initialisation fault, not a training instability" in said_text
    for wrong in ("roll back to the last", "skip the offending batch", "loss scale", "diverged"):
        assert wrong not in said_text
    assert "DIVERGED" not in verdict_words(item) and verdict_words(item).startswith("NON-FINITE FROM THE FIRST STEP")
    (recovery,) = [c for c in item["claims"] if c["kind"] == "recovery"]
    assert recovery["holds"] is True and recovery["evidence"]["never_finite"] is True
    assert "diverg" not in recovery["text"].lower()
    (status,) = [c for c in item["claims"] if c["kind"] == "status"]
    assert status["holds"] is True and status["evidence"]["nonfinite_from_first_step"] is True
    checks = " ".join(a.lower() for a in item["actions"])
    assert "check the first batches" in checks and "fp32 without fused or custom kernels" in checks


def test_the_alert_for_a_run_nan_from_step_0_does_not_say_diverging() -> None:
    spikes = analyze_run(_nan_from_start({"precision": "bf16"})).spike_dicts()
    (alert,) = spike_alerts("llmc-nan", spikes, 79, live=False)
    assert alert.message.startswith("non-finite from the first step: loss was never finite")
    assert "diverging" not in alert.message


@pytest.mark.slow  # an import and two CLI calls: seconds
def test_spikes_cli_text_for_an_llmc_log_nan_from_step_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ingest.cli import main

    log = tmp_path / "main.log"
    log.write_text("".join(f"s:{s} trl:nan lr:{6e-6 * (s + 1):.6f} norm:nan\n" for s in range(40)))
    store = tmp_path / "store"
    assert main(["import", str(log), "--run", "llmc-nan", "--store", str(store)]) == 0
    capsys.readouterr()
    assert main(["spikes", "llmc-nan", "--store", str(store)]) == 0
    text = capsys.readouterr().out
    assert "NON-FINITE FROM THE FIRST STEP" in text
    assert "a build, kernel, data or initialisation fault, not a training instability" in text
    for wrong in ("DIVERGED", "Roll back to the last", "Skip the offending batch", "loss scale"):
        assert wrong not in text
    assert main(["spikes", "llmc-nan", "--json", "--store", str(store)]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert {c["kind"] for c in item["claims"]} >= {"status", "recovery", "cause", "action"}
    assert all(set(c) == {"kind", "text", "holds", "evidence", "to_log"} for c in item["claims"])


def test_what_did_not_run_counts_finite_samples() -> None:
    analysis = analyze_run(_nan_from_start({"precision": "bf16"}))
    reasons = dict(analysis.not_run)
    # every logged loss is NaN: said as such, not as "0 finite samples" (too few logged; docs/diagnosis.md, "Recovery")
    assert reasons["loss spikes"].startswith("all 80 loss samples are non-finite: nothing to compare")


def _texts(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _texts(v)]
    return []


def test_a_run_nan_from_its_first_logged_step_200_says_diverged_nowhere_in_its_json() -> None:
    """word_language_model RNN_RELU: logged every 200 batches from batch 200, loss nan on every line.
    No text of the incident (claims said or not, summary, actions) calls it diverged."""
    steps = np.arange(200, 15000, 200)
    nan = np.full(steps.size, np.nan)
    view = RunView("wlm-nan", {"loss": Series(steps, nan), "lr": Series(steps, np.full(steps.size, 20.0))})
    (item,) = analyze_run(view).spike_dicts()
    assert item["leaf"] == "leaf_nonfinite_from_start" and item["severity"] == "divergence"
    texts = [t for t in _texts(item) if t != "divergence"]
    assert not [t for t in texts if "diverg" in t.lower()]
    said = " ".join(statements(item, (*INCIDENT_VERDICT, "action")))
    assert "non-finite from the first step (step 200)" in said.lower()
    assert verdict_words(item).startswith("NON-FINITE FROM THE FIRST STEP")


def _spiky_loss() -> Series:
    steps = np.arange(300)
    loss = 3.0 + 0.02 * np.random.default_rng(4).standard_normal(steps.size)
    loss[200:203] += 1.5
    return Series(steps, loss)


def test_the_moe_expert_load_is_asked_only_of_a_run_that_names_experts() -> None:
    """A run whose log and settings name no experts, router or MoE model (an RL critic, a GAN, a dense
    language model) is not asked to log an MoE expert load; one that names them is."""
    dense = RunView("dense", {"loss": _spiky_loss()}, meta={"model": "gpt2-124m"})
    named = [
        RunView("moe", {"loss": _spiky_loss()}, meta={"model": "Qwen3-30B-A3B"}),
        RunView("moe", {"loss": _spiky_loss()}, meta={"num_experts": 8}),
        RunView("moe", {"loss": _spiky_loss(), "moe_aux_loss": _spiky_loss()}),
    ]
    for view, asked in [(dense, False)] + [(v, True) for v in named]:
        (item,) = analyze_run(view).spike_dicts()
        texts = " ".join(str(c.get("to_log") or "") + c["text"] for c in item["claims"])
        assert ("the MoE expert load" in texts) is asked, view.meta
