"""Fixes from a code review (issues #31, #32; docs/diagnosis.md, "Findings", "Abandoned attempts", "Causes"). Each test
fails on main 74e89af."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stab_core.claims import incident_claims
from stab_core.decision_tree import DiagnosisParams
from stab_core.diagnosis import diagnose
from stab_core.runview import RunView, Series
from stab_core.spikes import SpikeEvent


def _spike(**over: object) -> SpikeEvent:
    fields: dict[str, object] = dict(
        metric="loss", start=600, peak=600, end=610, peak_value=6.0, baseline=1.0, ratio=6.0, z=20.0,
        duration=20, recovered=True, recovery_step=620, diverged=False, nonfinite=False, steps_lost=20,
        n_samples=12,
    )  # fmt: skip
    fields.update(over)
    return SpikeEvent(**fields)  # type: ignore[arg-type]


# ------------------------------------------------------------------ 12. the claim reads the run's loss-scale floor


def test_the_cause_claim_reads_the_loss_scale_floor_node_1_used() -> None:
    """A run whose floor is 8 (its own DiagnosisParams): the fp16 scale sat at 4 around the spike after 1024
    earlier in the run (the fall elided). Node 1 judged with floor 8; the claim read the default floor 1.0
    and said "cause unknown" with no word of the scale. Now it reads the floor from node 1's evidence."""
    steps = np.arange(0, 700)
    scale = np.where(steps < 100, 1024.0, 4.0)
    loss = np.where((steps >= 600) & (steps <= 610), 6.0, 1.0)
    view = RunView("r", {"loss": Series(steps, loss), "loss_scale": Series(steps, scale)}, {}, (), {})
    params = DiagnosisParams(loss_scale_floor=8.0)
    diagnosis = diagnose(view, _spike(), params)
    (node1,) = [v for v in diagnosis.path if v.number == 1]
    assert node1.evidence["loss_scale_floor"] == 8.0
    (cause,) = [c for c in incident_claims(_spike(), diagnosis) if c.kind == "cause"]
    assert "loss scale was 4" in cause.text, cause.text


# ------------------------------------------------------------------ 5. one negative sentinel is no signed objective


def test_one_negative_sentinel_does_not_switch_off_the_loss_detectors() -> None:
    """A flat 2.0 loss with a 30-sample 25x blow-up is one incident; one sample of -1.0 (a "not computed"
    sentinel) made the whole loss "signed" and every loss detector skipped: 0 incidents. Now a loss is
    signed when 1 % or more of its finite samples are negative; the note names every detector it skips."""
    from stab_core.analysis import analyze_run
    from stab_core.metrics import SIGNED_LOSS_REASON, signed_objective

    base = list(2.0 + 0.01 * np.sin(np.arange(200)))
    values = np.array(base + [50.0] * 30 + base[:50])
    values[5] = -1.0
    view = RunView("r", {"loss": Series(np.arange(values.size), values)}, {}, (), {})
    assert not signed_objective(values)
    assert len(analyze_run(view).spikes) == 1
    assert signed_objective(np.where(np.arange(300) % 50 == 0, -0.01, 0.02))  # 2 % negative: an objective
    for detector in ("climbs", "run-end rises", "level shifts", "spikes past long incidents"):
        assert detector in SIGNED_LOSS_REASON


# ------------------------------------------------------------------ 10(a). a spike the replay repeats is said once


def _replay_line(step: int, loss: float) -> str:
    return f"step: {step:5d}  loss: {loss:.5f}  grad_norm:  0.3000  memory: 10.00GiB(20.00%)  tps: 1,000  mfu: 30.00%\n"


def test_a_spike_the_replay_repeats_is_not_listed_again_for_the_abandoned_attempt(tmp_path: Path) -> None:
    """A job resumed from 300 that replays the same data: the 350-352 blip is in the attempt abandoned at 400
    and again in the replay. Before: listed twice (once for the run, once "in an attempt abandoned at step
    400"), so cost and counts held it twice. An attempt's incident whose primary peaks at the step a run
    incident of the same metric peaks at is the replay's, said once."""
    from ingest.formats import read_log
    from stab_core.analysis import analyze_run

    rng = np.random.default_rng(0)

    def attempt(lo: int, hi: int) -> list[str]:
        return [
            _replay_line(s, (9.0 if 350 <= s <= 352 else 2.0) + 0.02 * rng.standard_normal()) for s in range(lo, hi)
        ]

    lines = [*attempt(1, 401), "CUDA error: device-side assert triggered\n", *attempt(301, 601)]
    (path := tmp_path / "train.log").write_text("".join(lines))
    parsed = read_log([path])
    steps, values = parsed.series("loss")
    view = RunView("r", {"loss": Series(steps, values)}, {}, tuple(parsed.events), {})
    spikes = analyze_run(view).spike_dicts()
    near = [s for s in spikes if 345 <= s["start"] <= 355]
    assert len(near) == 1 and not near[0].get("abandoned_attempt"), [
        (s["start"], s.get("abandoned_attempt")) for s in spikes
    ]


# ------------------------------------------------------------------ 1, 2. throughput drops that recover


def test_a_recovered_slow_span_longer_than_half_the_run_is_still_a_drop() -> None:
    """2000 steps at 1.0 s (2 % noise) and steps 800-1899 at 2.0 s: the run's median is the slow level, so
    "a span at the run's typical level" discarded it. Before (main): nothing; 017511f: (800, 1899, -50 %).
    The typical level is now the median outside the span."""
    from stab_core.throughput import detect_throughput_drops

    times = 1.0 * (1 + np.random.default_rng(0).normal(0, 0.02, 2_000))
    times[800:1_900] *= 2.0
    (drop,) = detect_throughput_drops(np.arange(2_000), times, "step_time_s")
    assert abs(drop.start - 800) <= 10 and abs(drop.end - 1_899) <= 10 and drop.recovered
    assert abs(drop.change_pct + 50) <= 3


def test_three_long_stalls_that_each_come_back_are_three_drops() -> None:
    """3000 steps at 1.0 s with three 150-step 2x stalls at 800, 1500 and 2200: each lasts 5 % of the run, a
    level change of its own. Before: three recovered spans were "intermittent" and all dropped. Only short
    spans (under ``MIN_SPAN_SHARE`` of the run each) that recur are scatter."""
    from stab_core.throughput import detect_throughput_drops

    times = 1.0 * (1 + np.random.default_rng(1).normal(0, 0.02, 3_000))
    for start in (800, 1_500, 2_200):
        times[start : start + 150] *= 2.0
    drops = detect_throughput_drops(np.arange(3_000), times, "step_time_s")
    assert len(drops) == 3, [(d.start, d.end) for d in drops]
    for drop, start in zip(drops, (800, 1_500, 2_200), strict=True):
        assert abs(drop.start - start) <= 10 and abs(drop.end - start - 149) <= 10 and drop.recovered


# ------------------------------------------------------------------ 14. stab_core reads suspect lines only


def test_the_analysis_reads_suspect_lines_not_the_import_reports_layout() -> None:
    """``stab_core`` parsed ``meta['import_report']['suspect']['examples']``, a structure ``ingest`` owns. Now
    the view's builder passes (line, text) pairs (``meta['suspect_lines']``, from
    :func:`ingest.store.report_meta.suspect_lines`), and the analysis reads only those."""
    from ingest.store.report_meta import suspect_lines
    from stab_core.analysis import analyze_run

    report = {"suspect": {"count": 1, "lines": [], "examples": [{"file": "x", "line": 7, "text": "Epoch 1 loss 0.5"}]}}
    assert suspect_lines({"import_report": report}) == [(7, "Epoch 1 loss 0.5")]
    steps = np.arange(50)
    meta = {"suspect_lines": suspect_lines({"import_report": report})}
    view = RunView("r", {"lr": Series(steps, np.full(50, 1e-3))}, {}, (), meta)
    (reason,) = [why for name, why in analyze_run(view).not_run if name == "loss spikes"]
    assert reason.startswith("no loss series was read: the log names one on line 7"), reason
