"""The progress meter of pytorch's imagenet example (``pytorch/examples/imagenet/main.py``'s
``ProgressMeter``), which many trainers copy, and DeepSpeedExamples' random-LTD epoch summary::

    Epoch: [3][  0/391]	Time  1.612 ( 1.612)	Loss 2.0441e+00 (2.0441e+00)	Acc@1  21.09 ( 21.09)	...
    val[ 0/40]	Time  2.986 ( 2.986)	Loss 3.6274e+00 (3.6274e+00)	Acc@1   8.98 (  8.98)	...
    iter 391 | LR [0.0001]| val_acc 10.969999313354492 | layer_token 9476288

Each meter prints the batch's value, then its running average in parentheses (a decoration, not
read). The training line's step is ``E * N + i`` (batch ``i`` of ``N`` in epoch ``E``): ``Loss`` is
the loss, ``Time`` the batch's time (the step time, s), ``Data`` its data-loading time; ``Acc@k``
keep their names. The validation meter (``val``/``Test``) counts batches of the held-out set, not
training steps: its line belongs to the training step of the next line (the epoch's end), its
``Loss`` is ``val_loss`` and its accuracies ``val_Acc@k``. random-LTD's ``iter N | LR [x]|
val_acc A | layer_token K`` closes an epoch at its step.
"""

from __future__ import annotations

from typing import Final

from ingest.formats.aliases import canonical_name
from ingest.formats.numbers import NUMBER
from ingest.formats.textlog import LineKind

_RUNNING_AVERAGE: Final = r"\([ \t]*" + NUMBER + r"[ \t]*\)"
_METER_PAIRS: Final = r"(?P<key>[A-Za-z][A-Za-z0-9@]*)[ \t]+(?P<val>" + NUMBER + r")(?=[ \t]*\()"


def _train_key(key: str) -> tuple[str, str | None]:
    if key == "Time":
        return ("step_time_s", "s")
    if key == "Data":
        return ("data_time", "s")
    return canonical_name(key)


def _val_key(key: str) -> tuple[str, str | None]:
    if key == "Loss":
        return ("val_loss", None)
    if key == "Time":
        return ("val_batch_time", "s")
    if key == "Data":
        return ("val_data_time", "s")
    return (f"val_{canonical_name(key)[0]}", None)


METER_KINDS: Final = (
    LineKind(
        name="imagenet_train_meter",
        prefix=r"[ \t]*Epoch:[ \t]*\[(?P<step>[0-9]+\][ \t]*\[[ \t]*[0-9]+/[0-9]+)\][ \t]*",
        pairs=_METER_PAIRS,
        keymap=_train_key,
        ignore=_RUNNING_AVERAGE,
        epoch_batches=True,
        run_level=True,
    ),
    LineKind(
        name="imagenet_val_meter",
        prefix=r"[ \t]*(?:val|Test):?[ \t]*\[[ \t]*[0-9]+/[0-9]+\][ \t]*(?=Time[ \t])",
        pairs=_METER_PAIRS,
        keymap=_val_key,
        ignore=_RUNNING_AVERAGE,
        fill_next=True,
        run_level=True,
    ),
    LineKind(
        name="random_ltd_epoch",
        prefix=r"iter[ \t]+(?P<step>[0-9]+)[ \t]*\|[ \t]*(?=LR[ \t]+\[)",
        pairs=r"(?P<key>[A-Za-z_]+)[ \t]+\[?(?P<val>" + NUMBER + r")\]?",
        run_level=True,
    ),
)
"""The imagenet example's meters and random-LTD's epoch line (see the module docstring)."""
