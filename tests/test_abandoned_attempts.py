"""Issue #31 (docs/diagnosis.md, "Abandoned attempts"): the values of an attempt a resume replaced are kept on the
``rollback`` event and the detector runs on them; an incident there says in which abandoned attempt it was found."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.formats import read_log
from stab_core.abandoned import abandoned_attempts
from stab_core.analysis import analyze_run
from stab_core.runview import RunView, Series


def _line(step: int, loss: float) -> str:
    return f"step: {step:5d}  loss: {loss:.5f}  grad_norm:  0.3000  memory: 10.00GiB(20.00%)  tps: 1,000  mfu: 30.00%\n"


def _replayed_log(path: Path) -> Path:
    """A run that jumps 2.5x right after the checkpoint at 300, dies at 400, is resumed from 300 and is
    normal over the same steps: the shape of a torchtitan console wrapped by a retry script."""
    rng = np.random.default_rng(0)
    lines = [_line(s, 2.0 + 0.05 * rng.standard_normal()) for s in range(1, 301)]
    lines += [_line(s, 5.0 + 0.05 * rng.standard_normal()) for s in range(301, 401)]
    lines.append("CUDA error: device-side assert triggered\n")
    lines += [_line(s, 2.0 + 0.05 * rng.standard_normal()) for s in range(301, 601)]
    path.write_text("".join(lines))
    return path


def _view(parsed) -> RunView:
    steps, values = parsed.series("loss")
    return RunView(name="r", series={"loss": Series(steps, values)}, events=tuple(parsed.events))


def test_the_replaced_attempt_is_kept_and_its_incident_reported(tmp_path: Path) -> None:
    parsed = read_log([_replayed_log(tmp_path / "train.log")])
    steps, values = parsed.series("loss")
    assert steps.tolist() == list(range(1, 601)) and float(values[349]) < 3  # the replay wins the series
    (rollback,) = [e for e in parsed.events if e.kind == "rollback"]
    ((kept_steps, kept_values),) = rollback.detail["abandoned"]["loss"]
    assert kept_steps == [float(s) for s in range(301, 401)] and min(kept_values) > 4
    view = _view(parsed)
    (attempt,) = abandoned_attempts(view)
    assert (attempt.first, attempt.resumed_from, attempt.abandoned_at) == (301, 301, 400)
    spikes = analyze_run(view).spike_dicts()
    found = [s for s in spikes if s.get("abandoned_attempt")]
    assert found and 296 <= found[0]["start"] <= 305
    assert found[0]["abandoned_attempt"] == {"resumed_from": 301, "abandoned_at": 400}
    assert found[0]["summary"].startswith("In an attempt abandoned at step 400 (resumed from 301)")


def test_a_checkpoint_resumed_twice_keeps_each_attempt_apart() -> None:
    from ingest.formats.log_rows import rollback_detail

    first = (np.arange(11, 16), np.full(5, 9.0))
    second = (np.arange(11, 14), np.full(3, 1.0))
    kept = rollback_detail({"loss": [first, second]}, 11, 15)
    assert kept["abandoned"] == {"loss": [[[11.0, 12.0, 13.0, 14.0, 15.0], [9.0] * 5], [[11.0, 12.0, 13.0], [1.0] * 3]]}
