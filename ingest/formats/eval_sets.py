"""Which evaluation set's loss is the run's ``val_loss`` where a trainer evaluates several sets (round 24 f30b;
docs/diagnosis.md, "Rules added in round 24").

Hugging Face's Trainer given a dict of evaluation datasets logs each set's metrics under the set's name
(``eval_g0_loss``, ``eval_g1_loss``, ... ; ``eval_dev_loss``, ``eval_test_loss``) and no plain ``eval_loss``. The
rule fairseq's reader follows for its validation subsets holds for any trainer: the first set the run evaluates
(the first logged, ties by name) is the one it is validated on, the run's ``val_loss``; every set keeps its own
series under its own name. Two sets or more are needed (a lone ``eval_<name>_loss`` may be any loss term), and a
run that has a ``val_loss`` keeps it. A set is evaluated for more than its loss (``eval_g0_accuracy``, its
``eval_g0_runtime``): a loss's parts (YOLO's ``val_box_loss``, ``val_obj_loss``) are no sets.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Final

EVAL_SET_LOSS: Final = re.compile(r"^(?:eval|val|valid|validation)_(?P<set>[A-Za-z0-9]+)_loss$")
"""An evaluation set's loss (``eval_g0_loss``); the set is one word (``eval_dev_loss``), so ``eval_kl_div_loss``'s
words are no set's name."""
SOURCE_KEY: Final = "val_loss_source"
"""The run metadata key naming the series ``val_loss`` was taken from."""


def _has_own_metrics(loss: str, pieces: dict[str, list[Any]]) -> bool:
    """Whether the set of ``loss`` (``eval_g0_loss``) has another metric of its own (``eval_g0_accuracy``,
    ``eval_g0_runtime``): an evaluation set is evaluated for more than its loss, while a loss's parts
    (YOLO's ``val_box_loss``, ``val_obj_loss``) are each one series."""
    prefix = loss[: -len("loss")]
    return any(name != loss and name.startswith(prefix) for name in pieces)


def first_set_loss(pieces: dict[str, list[Any]], meta: dict[str, Any]) -> None:
    """Add ``val_loss`` to a run's ``pieces`` (stored name -> its pieces, in record order) as a copy of the first
    evaluation set's loss, where the run has two or more sets' losses and no ``val_loss``; ``meta[SOURCE_KEY]``
    names the set's series."""
    if "val_loss" in pieces:
        return
    sets = [name for name in pieces if EVAL_SET_LOSS.match(name) and pieces[name] and _has_own_metrics(name, pieces)]
    if len(sets) < 2:
        return

    def first_logged(name: str) -> tuple[int, str]:
        return min((int(p.seq_array()[0]) for p in pieces[name] if p.step.shape[0]), default=2**62), name

    first = min(sets, key=first_logged)
    pieces["val_loss"] = [replace(p, origin=first) for p in pieces[first]]
    meta.setdefault(SOURCE_KEY, first)
