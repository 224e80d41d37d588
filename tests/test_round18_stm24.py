"""Issue #32 (docs/diagnosis.md, "Recovery"): recovery statements that are true, or not said.

A loss incident whose detector event ended near its level while the loss never came back into its trend's
noise band was said "Not back: from step N the loss was near its level again, ...". On the corpus every such
statement the scorer could judge was false: the goldens count a loss near its level again as back (three of
five named step N itself). The two facts stay; the verdict is not said (docs/diagnosis.md, "Recovery")."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.runview import RunView, Series


def _recovery(loss: np.ndarray) -> dict[str, object]:
    steps = np.arange(1, loss.size + 1)
    (item,) = analyze_run(RunView("near_level", {"loss": Series(steps, loss)})).spike_dicts()
    (recovery,) = [c for c in item["claims"] if c["kind"] == "recovery"]
    assert item["loss_recovered_at"] is None
    return dict(recovery)


def test_a_loss_near_its_level_but_off_its_trend_is_said_neither_back_nor_not_back() -> None:
    """A quiet loss at 2.0 that jumps to 4.0 for three logs, then sits at 2.15 (1.075x) to the log's end: near
    its level from step 44, never within its trend's band. Whether that is "back" is a convention the goldens
    do not share, so the sentence states both facts and no verdict."""
    rng = np.random.default_rng(0)
    loss = np.array([*(2.0 + rng.uniform(-0.02, 0.02, 40)), 4.0, 3.8, 3.5, *(2.15 + rng.uniform(-0.02, 0.02, 30))])
    recovery = _recovery(loss)
    text = str(recovery["text"])
    assert recovery["holds"] is True and recovery["evidence"]["not_back_on_trend"] is True  # type: ignore[index]
    assert not text.startswith(("Not back", "Recovered", "Diverged")), text
    assert "from step 44" in text and "never back within the noise band of its trend" in text
