"""Evaluation lines without a step counter, for the generic reader (:mod:`ingest.formats.generic`;
issue #31; docs/diagnosis.md, "Import: steps, epochs and runs").

A line whose message starts with an evaluation label (``Validation - loss=0.41 ppl=1.5``, ``TEST -
Generator loss: 0.049, Discriminator loss: 0.016, PESQ: 2.49``, ``Eval: loss 2.3``) and carries pairs
but no step is the evaluation of the step line printed before it (an epoch's test after its last
training line): its values are stored at that line's step, each named ``val_`` (its loss is
``val_loss``). A running best on it (``best_loss=inf`` before the first evaluation) is no measurement
and is dropped. A GAN's generator loss is its loss (the training lines print it as ``loss`` beside a
``disc_loss``) and its discriminator loss ``disc_loss``.

A line with no label in front whose every pair is a split's (``Epoch 3, val loss is 0.05, val mse is
0.02``: ``val_``, ``valid_``, ``eval_``, ``test_`` keys, or the split then a space, ``val loss``, besides
its epoch) is such an evaluation too, its keys kept as printed, but for what the evaluation cost (its
time or speed: ``eval_time:1781ms``, ``eval_runtime``, ``eval_samples_per_second``), which measures the
evaluation, not the model. A line of its own that states only an epoch and the learning rate (``Starting
epoch 3 current lr is 0.001``, before the
epoch's steps) is the rate of the steps after it: it takes the next step line's step (a lone ``lr: 0.02`` is a
config dump's setting, no rate of a step).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from ingest.formats.numbers import NUMBER
from ingest.formats.summary_words import in_english

_AFTER: Final = (
    r"(?:[ \t]+(?i:after|at)[ \t]+(?:(?i:step|update|iteration|iter)[ \t]+)?[0-9]+"
    r"(?:[ \t]+(?i:updates?|steps?|iterations?|iters?))?)?"
)
"""``Eval after 250 updates: loss=4.21`` (python logging's ``date | INFO | module |`` before it): the
evaluation of the step line above it, which printed that step (docs/diagnosis.md, "Import: steps, epochs and runs")."""
EVAL_STEP: Final = -2
"""The step an evaluation line holds until :func:`place_evals` gives it the step line's above it."""
_LABEL: Final = re.compile(
    r"^[ \t]*(?:[A-Z]+:[A-Za-z0-9_.]*:|\[[^\]\n]*\][ \t]*|[0-9:,. \t-]+(?=[A-Za-z|])"
    r"|(?:[A-Za-z_][\w.]*[ \t]*)?\|[ \t]*|[A-Za-z_][\w.]*[ \t]+(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL):[ \t]*)*"
    r"[ \t]*(?i:validation|valid|val|evaluation|eval|test)" + _AFTER + r"[ \t]*(?:-|:|\|)[ \t]*(?P<rest>.*)$"
)
_EPOCH_LABEL: Final = re.compile(
    r"^[ \t]*(?:[A-Z]+:[A-Za-z0-9_.]*:)?[ \t]*(?i:epoch)[ \t]*\[?[0-9]+\]?[ \t]*[,:]?[ \t]*"
    r"(?i:validation|valid|val|evaluation|eval|test)[ \t]*(?:-|:|\|)?[ \t]*(?P<rest>[A-Za-z].*)$"
)
"""``Epoch 3 validation pixAcc: 0.71, mIoU: 0.32``: the epoch's evaluation, its label after the epoch
and no separator before its pairs (GluonCV's segmentation trainer)."""
_GAN: Final = {"generator loss": "loss", "g loss": "loss", "discriminator loss": "disc_loss", "d loss": "disc_loss"}
_GAN_KEY: Final = re.compile(r"\b(?i:(generator|discriminator|g|d))[ \t]+(?=(?i:loss)\b)")
_SPLIT_KEY: Final = re.compile(r"^(?:val|valid|validation|eval|test)[_ ][A-Za-z]", re.IGNORECASE)
_EVAL_COST: Final = re.compile(
    r"^(?:val|valid|validation|eval|test)_(?:time|runtime|duration|wall|samples_per_second|steps_per_second)\b",
    re.IGNORECASE,
)
"""What an evaluation cost (``eval_time:1781ms``, ``eval_runtime``, its speed): no measure of the model."""
_RUNNING_EXTREME: Final = re.compile(
    r"\b(?i:min|minimum|max|maximum|best|lowest|highest)[ \t_]+(?i:val|valid|validation|eval|test)\b"
)
"""``Minimum validation bpb: 1.15``: a running best of the evaluations, printed again; no evaluation."""
_METER: Final = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*:[ \t]*)" + NUMBER + r"[ \t]+\((?P<avg>" + NUMBER + r")\)")
"""A ``MetricLogger`` meter, ``loss: 7.3142 (7.5082)``: the median of the last batches, then in brackets
the average over all of them. On an evaluation's line the average is the evaluation's value (the
median a few batches' only); a training line's median stays its step's (round 22: f28b)."""
_PROGRESS_KEYS: Final = frozenset({"step", "time", "data", "data time", "eta", "max mem"})
"""What a labelled evaluation line prints about its own progress (``Test:  [ 10/163]  eta: 0:28:57 ...
time: 10.96  data: 0.002``): the batch it is at and what a batch took, no measure of the model (round 22:
f28b)."""
_LR_KEYS: Final = frozenset({"lr", "learning_rate", "learning rate"})
_EPOCH_KEYS: Final = frozenset({"epoch", "epochs"})
_EVAL_NAME: Final = re.compile(r"^(?:eval|val|valid|validation)(?:_|$)", re.IGNORECASE)

Pairs = list[tuple[str, float, str | None]]


class _Line(Protocol):
    step: int
    values: Pairs


def eval_pairs(line: str, pairs_of: Callable[[str], Pairs]) -> Pairs:
    """The ``val_`` pairs of an evaluation line without a step (empty: no such line)."""
    m = _LABEL.match(line.split("\r")[-1])
    if m is None:
        if _RUNNING_EXTREME.search(line):
            return []  # 'Minimum validation bpb: 1.15': the best so far, no evaluation of its own
        found = pairs_of(line)
        pairs = [p for p in found if p[0].strip().lower() not in _EPOCH_KEYS]
        epoch = len(pairs) < len(found)  # an lr with no epoch beside it is a config dump's, not the schedule's
        if pairs and (all(_SPLIT_KEY.match(k) for k, _, _ in pairs) or (epoch and _lr_only(pairs))):
            return [p for p in pairs if not _EVAL_COST.match(p[0])]
        if epoch and (closing := _epoch_close(pairs)):
            return closing
        if summary := epoch_summary(line, pairs_of):
            return summary
        m = _EPOCH_LABEL.match(line.split("\r")[-1])
        if m is None:
            return []
    out: Pairs = []
    for key, value, unit in pairs_of(_GAN_KEY.sub(r"\1_", _METER.sub(r"\g<key>\g<avg>", m["rest"]))):
        name = re.sub(r"[\s_\-]+", " ", key.strip().lower())
        if name.startswith("best") or "patience" in name:  # a running best, an early stop's countdown
            continue
        if name in _PROGRESS_KEYS:  # the evaluation's own batch counter and timers: its progress, not the model
            continue
        name = _GAN.get(name, name).replace(" ", "_")
        out.append((f"val_{name}", value, unit))
    return out


def epoch_summary(line: str, pairs_of: Callable[[str], Pairs]) -> Pairs:
    """The split's pairs of an epoch summary in another language (:mod:`ingest.formats.summary_words`)
    that states an epoch and a split's loss (``Epoch 17 完成 | 训练损失: 4.58 | 验证损失: 5.96``): the
    epoch's evaluation. Its training loss is the mean over the epoch (the step lines print the
    steps' own) and its time the epoch's: neither is kept."""
    text = in_english(line)
    if text is None:
        return []
    found = pairs_of(text)
    if not any(k.strip().lower() in _EPOCH_KEYS for k, _, _ in found):
        return []
    split = [p for p in found if _SPLIT_KEY.match(p[0]) and not _EVAL_COST.match(p[0])]
    return split if any("loss" in k.lower() for k, _, _ in split) else []


_TRAIN_KEY: Final = re.compile(r"^(?:train|training)[_ ][A-Za-z]", re.IGNORECASE)


def _epoch_close(pairs: Pairs) -> Pairs:
    """The pairs kept of a line that closes an epoch (round 22, f28a): beside the epoch only a held-out
    split's pairs and the training split's (``Epoch 0: train loss 0.0366, train acc 0.0100, test acc
    0.0103``), one held-out pair at least. The held-out pairs are the epoch's evaluation; the training
    pairs are the epoch's own measure of the training data (its accuracy), kept as printed, but for its
    loss: the mean over the epoch, which the step lines print step by step (not a step's loss). Empty
    for any other line."""
    held = [p for p in pairs if _SPLIT_KEY.match(p[0])]
    trained = [p for p in pairs if _TRAIN_KEY.match(p[0])]
    if not held or len(held) + len(trained) != len(pairs):
        return []
    kept = [p for p in trained if "loss" not in p[0].lower()] + held
    return [p for p in kept if not _EVAL_COST.match(p[0])]


def place_evals(lines: Sequence[_Line]) -> None:
    """Give each evaluation line (step :data:`EVAL_STEP`) the step of the step line above it, in
    place; one with none above it that evaluates a loss is the model's before the first step line
    (the step before that line's; docs/diagnosis.md, "Import: steps, epochs and runs"), any other keeps
    :data:`EVAL_STEP` (the caller drops it: a settings dump's ``eval_steps``)."""
    last: int | None = None
    for x in lines:
        if x.step == EVAL_STEP and not _lr_only(x.values):
            if last is not None:
                x.step = last
        elif x.step >= 0:
            last = x.step
    following: int | None = None  # an lr stated before the steps is theirs: the next step line's
    for x in reversed(lines):
        if x.step == EVAL_STEP and _lr_only(x.values):
            if following is not None:
                x.step = following
        elif x.step == EVAL_STEP and following is not None and any("loss" in k.lower() for k, _, _ in x.values):
            x.step = max(following - 1, 0)  # a loss evaluated before the first step line: the start's
        elif x.step >= 0:
            following = x.step


def _lr_only(pairs: Pairs) -> bool:
    return len(pairs) == 1 and pairs[0][0].strip().lower() in _LR_KEYS


def placeholder(name: str, values: list[float]) -> bool:
    """An evaluation field that is exactly 0 on every line: no evaluation ran (SambaNova's
    ``validation_average_loss:0.00000`` on every training line), a placeholder, not a series."""
    return bool(_EVAL_NAME.match(name)) and len(values) > 1 and all(v == 0.0 for v in values)
