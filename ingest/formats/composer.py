"""Composer / llm-foundry console output (``ConsoleLogger``): a progress line, then one indented line per
metric logged since the last print (``<TAB>``: a tab)::

    [batch=10/100]:
    <TAB> Train time/batch: 9
    <TAB> Train loss/train/total: 7.1234
    <TAB> Train lr-DecoupledAdamW/group0: 0.0001
    <TAB> Train l2_norm/grad_global: 1.2345
    [Eval batch=4/4] Eval on eval data:
    <TAB> Eval metrics/eval/LanguageCrossEntropy: 3.2100

The step is the ``[batch=N/M]`` count (``M`` is the planned count when ``max_duration`` is in batches);
the ``Train``/``Eval`` lines belong to the progress line above them. The ``time/*`` counters are read at
the batch's start (``time/batch`` is ``N - 1`` under ``[batch=N/M]``), so ``time/token`` keeps its name
rather than becoming the canonical ``tokens`` (which would be one batch short at every step). Floats are printed with 4
decimals (``format_log_data_value``). Runs whose duration is in epochs print ``[epoch=E][batch=b/T]``
with ``b`` counted within the epoch: no global step, so they are not claimed.
"""

from __future__ import annotations

import re
from typing import Any, Final

from ingest.formats.aliases import canonical_name, sanitise_name
from ingest.formats.numbers import NUMBER
from ingest.formats.planned import PlannedStepsTextLogReader
from ingest.formats.textlog import LineKind

_TRAIN_KEYS: Final = {
    "loss/train/total": ("loss", None),
    "l2_norm/grad_global": ("grad_norm", None),  # llm-foundry's OptimizerMonitor (older name)
    "l2_norm/grad/global": ("grad_norm", None),
    "throughput/tokens_per_sec": ("throughput_tok_s", None),  # the whole job's, not per device
    "throughput/device/mfu": ("mfu", None),  # already a fraction
}
_FIRST_GROUP_LR: Final = re.compile(r"^lr-[^/]+/group0$")
_HEADER: Final = re.compile(r"(?<!\])\[batch=([0-9]+)(?:/([0-9]+))?\]:[ \t\r]*$", re.M)
"""The progress line, at a line's end (a launcher prefix may come before it), not behind ``[epoch=E]``."""


def _train_key(key: str) -> tuple[str, str | None]:
    if key in _TRAIN_KEYS:
        return _TRAIN_KEYS[key]
    if _FIRST_GROUP_LR.match(key):
        return ("lr", None)  # the canonical lr is the first param group's
    return (sanitise_name(key), None) if "/" in key else canonical_name(key)


def _eval_key(key: str) -> tuple[str, str | None]:
    if key == "metrics/eval/LanguageCrossEntropy":
        return ("val_loss", None)
    return (sanitise_name(key), None)


def _drop(key: str) -> None:
    return None


_VALUE: Final = r"[ \t]+(?P<key>[^\s:][^\n]*?):[ \t]+(?P<val>" + NUMBER + r")[ \t\r]*$"


class ComposerReader(PlannedStepsTextLogReader):
    name = "composer"
    description = "Composer / llm-foundry console: '[batch=N/M]:' then indented 'Train loss/train/total: x' lines"
    kinds = (
        LineKind(
            # the progress line carries no metric: its total is read as a dropped value so the line counts
            name="progress",
            prefix=r"[ \t]*\[batch=(?P<step>[0-9]+)",
            pairs=r"(?P<key>/)(?P<val>[0-9]+)\]:",
            keymap=_drop,
        ),
        LineKind(name="train", prefix=r"[ \t]+Train", pairs=_VALUE, keymap=_train_key, run_level=True),
        LineKind(name="eval", prefix=r"[ \t]+Eval", pairs=_VALUE, keymap=_eval_key, run_level=True),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        # the indented lines alone could be anyone's: the progress line is the tell-tale
        return 0.95 if _HEADER.search(text) and "Train " in text else 0.0

    def meta_from_head(self, text: str) -> dict[str, Any]:
        m = _HEADER.search(text)
        return {"total_steps": int(m.group(2))} if m and m.group(2) else {}
