"""Detection on the shapes of the held-out corpus logs (issue #32, tests/corpus/golden/a_*, b_*).

Each series is built from the numbers in a golden file's "why" (never copied from the log): a reward
model's noisy flat loss, an early blow-up at step 2, a chronicle's excerpts with thousands of unlogged
steps between them, a word model's second blow-up after a long first one, a character model that
overfits. The tests of the four faults (noisy reward model, step-2 blow-up, chronicle gap, second
blow-up) fail on main at 84b31a7; the others guard what the rules must keep (a real climb in a noisy
run, a one-sample early blip, a jump without a gap, overfitting on the series a correct import stores).
"""

from __future__ import annotations

import math

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.early_rises import NOISE_MIN_SAMPLES, banded_climbs, noise_band, sample_noise
from stab_core.findings import run_findings
from stab_core.runview import RunView, Series
from stab_core.step_gaps import judged_across_gap, step_gap_starts


def _shown(view: RunView) -> list[dict[str, object]]:
    return [d for d in analyze_run(view).spike_dicts() if d.get("severity") != "blip"]


def _reward_model_loss(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """202 steps of a pairwise reward model in a tiny-lr warm-up: the loss sits at ~0.66 (ln 2 = 0.693
    is chance) and swings 0.36-1.27 batch to batch (b_lf_360_rm's golden: per-batch noise, healthy)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, 203, dtype=np.int64)
    loss = np.clip(0.66 + 0.17 * rng.standard_normal(steps.size), 0.34, 1.27)
    loss[[21, 73, 169]] = [1.266, 1.147, 1.258]  # the batches the detectors flagged before
    return steps, loss


def test_sample_noise_known_answers() -> None:
    # second differences are +-2 everywhere: the MAD-equivalent noise of one sample is 2/sqrt(6)
    assert math.isclose(sample_noise(np.array([1.0, 2.0, 1.0, 2.0, 1.0])), 2 / math.sqrt(6))
    assert sample_noise(np.array([1.0, 2.0, 1.0, 2.0])) == 0.0  # 2 second differences: no scale
    # a straight trend, however steep, is not noise
    assert sample_noise(np.linspace(12.0, 3.0, 10)) < 1e-9
    # too few samples: no scale, the ratio rules alone judge
    assert sample_noise(np.array([10.86, 14.45, 15.20, 11.31])) == 0.0
    # the band is the spike detector's z test: z * MAD / 0.6745
    assert math.isclose(noise_band(np.array([1.0, 2.0, 1.0, 2.0, 1.0]), 6.0), 6.0 * 2 / math.sqrt(6) / 0.6745)


def test_noisy_flat_reward_model_loss_is_not_instability() -> None:
    """Before: early instability at 22 and 74, climbs at 103, 116 and 170, one of them "diverged". Only
    a run's first samples, too few for a noise scale, can still show a rise there (topping all before
    it, said as less certain); from the 6th sample on the run's noise band judges."""
    for seed in range(5):
        steps, loss = _reward_model_loss(seed)
        lr = np.linspace(1e-9, 2e-7, steps.size)
        items = analyze_run(RunView("rm", {"loss": Series(steps, loss), "lr": Series(steps, lr)})).spike_dicts()
        shown = [d for d in items if d.get("severity") != "blip"]
        late = [(d["kind"], d["peak"]) for d in shown if int(d["start"]) > NOISE_MIN_SAMPLES]
        assert late == [], f"seed {seed}: {late}"
        assert all(d["certainty"] == "low" and not d["diverged"] for d in shown)


def test_a_climb_out_of_the_noise_band_is_still_found() -> None:
    """The band raises the bar by the run's own noise; a sustained rise well out of it is still a climb."""
    steps, loss = _reward_model_loss(1)
    loss = loss.copy()
    loss[120:150] += 1.6  # ~0.66 -> ~2.3 for 30 steps: 3.4x the level, far out of a 0.17-sigma noise
    (climb,) = banded_climbs(steps, loss, 6.0)
    assert 100 <= climb.start <= 121 and climb.until >= 150
    shown = _shown(RunView("rm", {"loss": Series(steps, loss)}))
    assert any(int(d["start"]) <= 121 and int(d["until"]) >= 150 for d in shown), shown


def _aurora_shape() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """torchtitan on Aurora (a_torchtitan_aurora_blendcorpus's golden): loss 10.86 at 1 -> 14.45 at 2 ->
    15.20 at 3, 11.31 at 4, 11.12 at 5, 10.19 at 6, then falling to ~5.3 at 105; grad norm 3.2 -> 41.8
    -> 66.6."""
    steps = np.arange(1, 106, dtype=np.int64)
    tail = 5.3 + (10.0 - 5.3) * np.exp(-(steps[6:] - 7) / 25.0)
    tail = tail + 0.05 * np.sin(steps[6:] * 1.7)
    loss = np.concatenate([[10.86, 14.45, 15.20, 11.31, 11.12, 10.19], tail])
    grad = np.concatenate([[3.2, 41.8, 66.6, 14.1, 38.4, 18.2], 4.0 + 0.3 * np.cos(steps[6:])])
    return steps, loss, grad


def test_early_blow_up_at_step_2_is_shown() -> None:
    """Before: found at step 2 but hidden as a blip (back within 1.1x two samples later)."""
    steps, loss, grad = _aurora_shape()
    shown = _shown(RunView("aurora", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad)}))
    early = [d for d in shown if d["kind"] == "early_instability"]
    assert early and int(early[0]["start"]) == 2 and early[0]["severity"] == "spike"
    assert early[0]["certainty"] == "low"


def test_one_sample_early_outlier_stays_a_blip() -> None:
    """torchtitan Qwen3 (../shared's golden, not required): 12.55, 10.61, 15.82 at 3, 12.14 at 4: one
    sample out and back at the next one is a blip, as the golden rules define it."""
    steps = np.arange(1, 11, dtype=np.int64)
    loss = np.array([12.55, 10.61, 15.82, 12.14, 10.9, 9.6, 8.4, 7.3, 6.4, 5.66])
    items = analyze_run(RunView("tt", {"loss": Series(steps, loss)})).spike_dicts()
    early = [d for d in items if d["kind"] == "early_instability"]
    assert early and int(early[0]["start"]) == 3 and early[0]["severity"] == "blip"


def _chronicle() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """tr8b-104B's chronicle (a_bs_tr8b_104b_chronicles's golden): excerpts of one run pasted with
    thousands of unlogged steps between them; the grad norm grows from ~3,000 to ~80,000-180,000 over
    them (quiet span 12,000-16,801), then the loss jumps 2.667 -> 4.374 at 17,062 and never returns."""
    steps = np.array(
        [6502, 6503, 6504, 8600, 12000, 12001, 13251, 14000, 16800, 16801, *range(17060, 17069)],
        dtype=np.int64,
    )
    grad = np.array(
        [3247, 3670, 2955, 3036, 79680, 60980, 122160, 2554, 180400, 226800, 453100] + 5 * [464400] + 3 * [879900],
        dtype=float,
    )
    excerpts = [3.877, 4.023, 4.031, 3.407, 2.986, 3.029, 2.924, 2.899, 2.682, 2.658]
    blow_up = [2.665, 2.667, 4.374, 4.366, 4.391, 4.405, 4.398, 4.096, 4.137]
    loss = np.array([*excerpts, *blow_up])
    return steps, loss, grad


def test_no_baseline_across_thousands_of_unlogged_steps() -> None:
    """Before: a grad-norm spike at 13,251 (against ~3,100 logged 4,650 steps earlier), "recovered at 14000"."""
    steps, loss, grad = _chronicle()
    items = analyze_run(RunView("tr8b", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad)})).spike_dicts()
    assert not [d for d in items if 12000 <= int(d["peak"]) <= 16801], items
    (blow_up,) = [d for d in items if int(d["start"]) <= 17062 <= int(d["until"])]
    assert blow_up["diverged"] and "loss" in blow_up["metrics"]
    assert not any("recovered at" in str(c.get("text", "")).lower() for c in blow_up.get("claims", []))


def test_the_same_jump_without_the_gap_is_a_spike() -> None:
    """The rule drops only baselines from before a gap: a grad norm 25x its level one step later is found."""
    steps = np.arange(1, 201, dtype=np.int64)
    grad = 3000.0 + 200.0 * np.sin(steps * 0.9)
    grad[150] = 79_680.0
    loss = 3.0 - 0.002 * steps + 0.01 * np.cos(steps * 1.3)
    items = analyze_run(RunView("g", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad)})).spike_dicts()
    assert any(int(d["peak"]) == 151 and "grad_norm" in d["metrics"] for d in items), items


def test_step_gap_known_answers() -> None:
    steps = np.array([1, 2, 3, 500, 501, 502, 503], dtype=np.int64)
    assert step_gap_starts(steps, 63).tolist() == [3]
    assert step_gap_starts(steps[:3], 63).tolist() == []
    from stab_core.spikes import build_event

    x = np.ones(steps.size)
    after = build_event("grad_norm", steps, x, 4, 4, 5, 1.0, 0.1)  # step 501: one sample since the gap
    before = build_event("grad_norm", steps, x, 1, 1, 2, 1.0, 0.1)
    assert judged_across_gap([after, before], steps, 63, 2) == [before]
    assert judged_across_gap([after, before], steps, 1000, 2) == [after, before]


def test_overfitting_is_not_divergence() -> None:
    """A character model (b_charlm_overfit_5000's golden): train loss 6.06 -> 0.048 over 0-4,900, val loss
    6.05 -> best ~4.0 at 200 -> 8.53 at 4,900. Overfitting with the best checkpoint at 200, no incident,
    no divergence (before, with the val loss stored as the loss: early instability at 4,900, "DIVERGED")."""
    steps = np.arange(0, 5000, 100, dtype=np.int64)
    train = 0.048 + (6.06 - 0.048) * np.exp(-steps / 350.0)
    rising = 4.0 + 4.53 * (1 - np.exp(-(steps - 200) / 1200.0))
    val = np.where(steps <= 200, 6.05 - (6.05 - 4.0) * steps / 200.0, rising)
    view = RunView("charlm", {"loss": Series(steps, train), "val_loss": Series(steps, val)})
    assert analyze_run(view).spike_dicts() == []
    found = run_findings({"loss": (steps, train), "val_loss": (steps, val)})["overfitting"]
    assert found is not None and found["best_step"] == 200


def _word_lm_lr20() -> tuple[np.ndarray, np.ndarray]:
    """A word-language model at lr 20 (a_wlm_rnn_tanh_lr20's golden), logged every 200 of 2,983 batches
    per epoch: 11.97-12.56 through epoch 1, 14.3-15.1 through epochs 2-3 (the first incident, from
    3,183), 13.48 falling to 12.21 at 10,549 in epoch 4, then 13.96 -> 15.97 -> 17.21 at 11,149 ->
    17.34 ... 17.28 at 11,749; the lr cut to 5 brings 8.81 at 12,132 and ~7 after."""
    batches = np.arange(200, 2983, 200)
    wobble = 0.15 * np.sin(np.arange(batches.size) * 2.1)
    epochs = [
        12.3 + wobble,
        14.8 + wobble,
        14.7 + wobble,
        np.array([13.48, 13.02, 12.98, 13.34, 12.54, 12.36, 12.40, 12.21, 13.96, 15.97, 17.21, 17.34, 17.33, 17.28]),
        np.concatenate([[8.81], 8.1 + 0.05 * np.sin(np.arange(batches.size - 1))]),
        7.0 + 0.04 * np.cos(np.arange(batches.size) * 1.3),
    ]
    steps = np.concatenate([e * 2983 + batches for e in range(len(epochs))]).astype(np.int64)
    return steps, np.concatenate(epochs)


def test_second_blow_up_after_a_long_incident_is_found() -> None:
    """Before: only the first incident; the epoch-4 blow-up read 1.18x the median of the 60 samples before
    it, most of them the first incident's (~14.8), under the 1.2x a spike needs."""
    steps, loss = _word_lm_lr20()
    items = analyze_run(RunView("wlm", {"loss": Series(steps, loss)})).spike_dicts()
    first = [d for d in items if int(d["start"]) - 400 <= 3183 <= int(d["until"]) + 400]
    second = [d for d in items if int(d["start"]) - 400 <= 10949 <= int(d["until"]) + 400]
    assert first and second and first[0] is not second[0], [(d["kind"], d["start"], d["until"]) for d in items]
    assert second[0]["severity"] != "blip" and not second[0]["diverged"]
    # the quiet span after the lr cut stays quiet
    assert not [d for d in items if 18098 <= int(d["peak"]) <= 29647]


def test_a_spike_between_two_of_six_evals_is_found() -> None:
    """A GPT-2 LoRA console (b_gpt2_lora_eval_spike's golden) logs the loss only at evals every 500 steps:
    9.23 at 0, ~7.0 at 500, 6.58-6.65 at 1,000-1,500, 9.5846 at 2,000 (1.41x), 6.6424 at 2,500. With 4
    samples before it there is no noise scale: it must top them all, and does. The validation loss jumps
    with it (9.62 at 2,000): a spike of 500 steps, not a blip; without the validation loss it is a spike
    too, since 4 samples settle no trend that could vouch for one bad batch. (Before the fallback, a noise
    band from 2 second differences, the start's fall, hid it.)"""
    steps = np.arange(0, 3000, 500, dtype=np.int64)
    loss = np.array([9.227, 7.0, 6.58, 6.65, 9.5846, 6.6424])
    val = Series(steps, np.array([9.25, 7.05, 6.62, 6.68, 9.6169, 6.68]))
    (item,) = analyze_run(RunView("lora", {"loss": Series(steps, loss), "val_loss": val})).spike_dicts()
    assert int(item["start"]) == 2000 and item["severity"] == "spike"
    (alone,) = analyze_run(RunView("lora", {"loss": Series(steps, loss)})).spike_dicts()
    assert int(alone["start"]) == 2000 and alone["severity"] == "spike"
    # the same rise that does not top the run's first sample is within what the first samples spanned
    lower = loss.copy()
    lower[4] = 9.0
    assert analyze_run(RunView("lora", {"loss": Series(steps, lower)})).spike_dicts() == []
