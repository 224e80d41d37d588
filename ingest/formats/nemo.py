"""NVIDIA NeMo's training progress lines.

NeMo 2 (``nemo/lightning/pytorch/callbacks/progress_printer.py``, ``ProgressPrinter``) prints every
``log_interval`` steps ``Training epoch 0, iteration 7/99 | lr: 1.5e-05 | global_batch_size: 32 |
global_step: 7 | reduced_train_loss: 1.285 | train_step_timing in s: 0.5804 | consumed_samples: 256``:
the iteration is ``n - 1`` of ``n`` steps done (0-based, equal to ``global_step``) out of
``max_steps - 1``, so ``max_steps`` (the planned step count) is the printed total + 1. Values are
``{:.4}`` (four significant digits) or whole numbers.

NeMo 1 (Lightning's tqdm bar, ``MegatronProgressBar``): ``Epoch 0: 100%|...| 40/40 [00:31<00:00,
reduced_train_loss=10.90, global_step=39.00, consumed_samples=9984.0, train_step_timing in s=1.400]``
(older bars add ``1.27it/s, loss=10.9, v_num=0``). The postfix's ``global_step`` is the step its
values were logged at, so it is the step; tqdm prints it to 3 significant digits and switches to
``2e+3`` where that is shorter: such a line takes the bar's counter - 1 instead (the counter is the
optimizer steps done, ``max_steps`` its total). Off a terminal tqdm redraws the bar with carriage
returns on one line: its last redraw is read (the values of each redraw belong to its own step).

Canonical roles: ``reduced_train_loss`` -> ``loss``, ``lr``, ``grad_norm``, ``val_loss``,
``train_step_timing in s`` -> ``step_time_s``, ``loss_scale``; ``global_step`` is the step (dropped as
a metric), Lightning's own smoothed ``loss`` becomes ``pl_running_loss`` and the rest keep their names.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.aliases import sanitise_name
from ingest.formats.numbers import NUMBER
from ingest.formats.planned import PlannedStepsTextLogReader, note_planned_steps
from ingest.formats.textlog import LineKind, TextLogReader

_KEYS: Final[dict[str, tuple[str, str | None] | None]] = {
    "reduced_train_loss": ("loss", None),
    "train_loss": ("loss", None),
    "lr": ("lr", None),
    "grad_norm": ("grad_norm", None),
    "val_loss": ("val_loss", None),
    "loss_scale": ("loss_scale", None),
    "train_step_timing in s": ("step_time_s", None),
    "train_step_timing": ("step_time_s", None),
    "loss": ("pl_running_loss", None),  # Lightning's running mean of the last 20 losses, not the step's
    "global_step": None,  # the step
    "v_num": None,  # the logger's version
}


def _nemo_key(key: str) -> tuple[str, str | None] | None:
    if key in _KEYS:
        return _KEYS[key]
    return (sanitise_name(key), None)


_PIPE_PAIRS: Final = r"[ \t]*(?P<key>[^|:\n]*[^|:\s]):[ \t]*(?P<val>" + NUMBER + r")[ \t]*(?=\||[ \t\r]*$)"

NEMO2_KINDS: Final = (
    LineKind(
        name="progress",
        prefix=(
            r"[^\n\r|]*?\bTraining epoch[ \t]+[0-9]+,[ \t]*iteration[ \t]+(?P<step>[0-9]+)/(?P<total>[0-9]+)[ \t]*\|"
        ),
        pairs=_PIPE_PAIRS,
        keymap=_nemo_key,
        run_level=True,
    ),
)

_REDRAWN: Final = r"(?:[^\n]*\r)?"
"""Everything up to the last carriage return of a line tqdm redrew in place: only the last redraw
is read (each redraw's values belong to its own step; the common layer may split them first)."""
_EPOCH_BAR: Final = _REDRAWN + r"[^\n\r]*?\bEpoch[ \t]+[0-9]+:[^\n\r\[]*?"
"""``Epoch 0: 40%|████      `` up to the counter (tqdm's description, percentage and bar)."""
_BAR: Final = _EPOCH_BAR + r"(?:\|[ \t]*[0-9]+/(?P<total>[0-9]+))?[^\n\r\[]*\["
_POSTFIX_PAIRS: Final = r"(?P<key>[A-Za-z_][A-Za-z0-9_/ .-]*?)=(?P<val>" + NUMBER + r")(?=,|\])"

NEMO1_KINDS: Final = (
    LineKind(
        name="bar",
        prefix=_BAR + r"(?=[^\n\r]*?[ ,]global_step=(?P<step>[0-9]+)(?:\.0*)?(?:,|\]))",
        pairs=_POSTFIX_PAIRS,
        keymap=_nemo_key,
        run_level=True,
    ),
    LineKind(
        name="bar_counter",
        # global_step in e-notation (tqdm's 3 significant digits): the counter of steps done - 1
        prefix=_EPOCH_BAR + r"\|[ \t]*(?P<step>[0-9]+)/(?P<total>[0-9]+)[^\n\r\[]*\[",
        pairs=_POSTFIX_PAIRS,
        keymap=_nemo_key,
        step_offset=-1,
        run_level=True,
    ),
)


class NemoProgressReader(TextLogReader):
    name = "nemo"
    description = "NeMo 2: 'Training epoch 0, iteration 7/99 | lr: x | global_step: 7 | reduced_train_loss: x'"
    kinds = NEMO2_KINDS

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.95

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        super().fill(paths, builder)
        total = builder.meta.get("total_steps")
        if isinstance(total, int):
            builder.meta["total_steps"] = total + 1  # the printed total is max_steps - 1
        note_planned_steps(builder.meta)


class NemoTqdmReader(PlannedStepsTextLogReader):
    name = "nemo_tqdm"
    description = "NeMo 1 / Lightning bar: 'Epoch 0: 40%|...| 40/100 [..., reduced_train_loss=x, global_step=39.00]'"
    kinds = NEMO1_KINDS

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.95 if "reduced_train_loss=" in text else 0.8
