"""MaxText's console (absl) log, as ``metric_logger.py`` prints it:

``I1202 07:50:29.123456 140245 metric_logger.py:231] completed step: 12, seconds: 1.234,
TFLOP/s/device: 181.028, Tokens/s/device: 3949.842, total_weights: 1572864, loss: 7.100, lm_loss: 7.100,
perplexity: 1212.000`` (``[Rampup Batch Size Phase], `` may come first; a profiler boundary step says
``completed profiler activation/deactivation step: N``) and the eval summary ``Completed eval after
train step 10, loss=3.210, perplexity=24.780, total_weights=196608, avg_z_loss=0.000``.

``seconds`` is the step time; ``TFLOP/s/device`` and ``Tokens/s/device`` are per device, so they are
stored for the printing process (rank 0: the line does not say which); ``total_weights`` (the batch's
non-padding tokens) and the other losses keep their names. ``Config param steps: N`` is the planned
step count.
"""

from __future__ import annotations

import re
from typing import Any, Final

from ingest.formats.aliases import canonical_name, sanitise_name
from ingest.formats.numbers import NUMBER
from ingest.formats.planned import PlannedStepsTextLogReader
from ingest.formats.textlog import LineKind

_TRAIN_KEYS: Final = {
    "seconds": ("step_time_s", "s"),
    "TFLOP/s/device": ("tflops", None),
    "Tokens/s/device": ("throughput_tok_s", None),
    "loss": ("loss", None),
}


def _train_key(key: str) -> tuple[str, str | None]:
    return _TRAIN_KEYS.get(key) or canonical_name(key)


def _eval_key(key: str) -> tuple[str, str | None]:
    # the eval summary's loss is the validation loss; its other figures are kept under eval_*
    return ("val_loss", None) if key == "loss" else ("eval_" + sanitise_name(key), None)


class MaxTextReader(PlannedStepsTextLogReader):
    name = "maxtext"
    description = "MaxText console: 'completed step: N, seconds: x, TFLOP/s/device: x, Tokens/s/device: x, loss: x'"
    kinds = (
        LineKind(
            name="step",
            prefix=(
                r"[^\n]*?\bcompleted (?:profiler activation/deactivation )?step:[ \t]*(?P<step>[0-9]+)"
                r"(?:,[ \t]*|[ \t]*$)"
            ),
            pairs=r"(?P<key>[A-Za-z_][A-Za-z0-9_/ ]*?):[ \t]*(?P<val>" + NUMBER + r")(?=,|[ \t]*$)",
            keymap=_train_key,
            per_rank_keys=frozenset({"throughput_tok_s"}),
        ),
        LineKind(
            name="eval",
            prefix=r"[^\n]*?\bCompleted eval after train step[ \t]+(?P<step>[0-9]+),[ \t]*",
            pairs=r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<val>" + NUMBER + r")%?(?=,|[ \t]*$)",
            keymap=_eval_key,
            run_level=True,
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.95 if "TFLOP/s/device" in text or "Config param " in text else 0.85

    def meta_from_head(self, text: str) -> dict[str, Any]:
        m = re.search(r"Config param steps: (\d+)\s*$", text, re.M)
        return {"total_steps": int(m.group(1))} if m else {}
