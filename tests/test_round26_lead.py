"""Round 26, lead: an early instability after the warm-up ended says why its cause is unknown, in words that
agree with the path it shows (issue #32)."""

from __future__ import annotations

import numpy as np

from stab_core.claims import incident_claims
from stab_core.diagnosis import diagnose_early
from stab_core.early_rises import robust_early_rises
from stab_core.runview import RunView, Series


def _settled_after_warmup() -> tuple[RunView, object]:
    """33 logs every 10 steps of a preference (ORPO) fine-tune, its reward margin logged: a linear warm-up to
    5e-6 at step 40, then a slow cosine decay; the loss falls 1.05 -> 0.111 (step 60), jumps to 0.251 at 70
    (2.26x its lowest), 0.147 at 80, and is back at 0.116 by 90; the grad norm falls 25 -> 2.98 (60) and moves
    with the loss (5.51 at 70)."""
    steps = np.arange(10, 340, 10)
    lr = np.where(steps <= 40, 5e-6 * steps / 40, 5e-6 * np.cos((steps - 40) / 330 * np.pi / 2))
    loss = np.array(
        [1.05, 0.71, 0.42, 0.307, 0.125, 0.111, 0.251, 0.147, 0.1155] + [0.11 + 0.004 * (i % 3) for i in range(24)]
    )
    grad_norm = np.array(
        [25.0, 18.0, 14.0, 12.0, 10.45, 2.98, 5.51, 4.0, 3.5] + [3.0 + 0.2 * (i % 4) for i in range(24)]
    )
    (event,) = [e for e in robust_early_rises(steps, loss, 16) if e.peak == 70]
    margins = np.linspace(0.1, 2.0, steps.size)  # a preference objective: its reward margin is logged
    series = {
        "loss": Series(steps, loss),
        "lr": Series(steps, lr),
        "grad_norm": Series(steps, grad_norm),
        "rewards/margins": Series(steps, margins),
    }
    return RunView("orpo", series), event


def test_an_early_rise_after_the_warm_up_ended_names_the_warm_up_in_its_unknown_cause() -> None:
    view, event = _settled_after_warmup()
    diagnosis = diagnose_early(view, event)  # type: ignore[arg-type]
    lr_visit = next(v for v in diagnosis.path if v.node == "lr_transition")
    assert lr_visit.answer == "yes" and lr_visit.evidence["transition_kind"] == "warmup_end"
    (cause,) = [c for c in incident_claims(event, diagnosis, kind="early_instability") if c.kind == "cause"]  # type: ignore[arg-type]
    # before: "no question of the tree found a cause", beside a path whose node 2 said yes
    assert cause.text.startswith("Cause unknown: the warm-up reached its peak LR at step 40, 30 steps before")
    assert "no longer rising" in cause.text
