"""The log of Coqui's ``Trainer`` (Coqui TTS ``trainer_0_log.txt``): blocks of `` | > name: value  (avg)``
lines under a step header, and evaluation blocks of their averages::

       --> STEP: 24/36 -- GLOBAL_STEP: 1025
         | > loss_0: 3.01  (3.46)
         | > grad_norm_0: 0.53  (2.77)
         | > loss_1: 26.9  (35.5)
         | > current_lr_0: 0.00020
         | > step_time: 1.31  (1.38)
      --> EVAL PERFORMANCE
         | > avg_loss_1: 26.3 (+0.00000)

A value line belongs to the step of the header above it (``GLOBAL_STEP`` counts over the run; ``STEP`` is
the batch of the epoch); the number in brackets is a running mean over the epoch, not the step's value, and
is not kept. An evaluation block's ``avg_<name>`` is ``val_<name>`` at the last global step trained.

A model trained by several optimizers prints each one's total loss, gradient norm and learning rate
indexed by the optimizer (``loss_0``, ``grad_norm_0``, ``current_lr_0``; a single optimizer prints them
bare). The run's ``loss`` (and its ``grad_norm``, ``lr``, ``val_loss``) is the model's optimizer's: where
one total equals a discriminator's loss printed beside it (``loss_disc``, a GAN such as VITS), that
optimizer is the discriminator's and the run's loss is the other optimizer's total (the generator's);
otherwise the first optimizer's. Every indexed series is also kept under its own name. ``amp_scaler`` is
the fp16 loss scale.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Record, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary
from ingest.formats.run_loss import note_loss_source

_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")
_STEP: Final = re.compile(  # ' --> TIME: 2024-01-02 10:44:16 -- STEP: ...' in newer Coqui Trainers
    r"-->[ \t]*(?:TIME:[^\n]{0,40}?--[ \t]*)?STEP:[ \t]*[0-9]+"
    r"(?:/[0-9]+)?[ \t]*--[ \t]*GLOBAL_STEP:[ \t]*(?P<step>[0-9]+)"
)
_EVAL: Final = re.compile(r">[ \t]*EVAL(?:UATION)?\b|-->[ \t]*EVAL PERFORMANCE")
_TRAIN: Final = re.compile(r">[ \t]*TRAINING\b")
_VALUE: Final = re.compile(  # a value printed as a tensor: 'grad_norm_0: tensor(15.61, device='cuda:0')'
    r"^[ \t]*\|[ \t]*>[ \t]*(?P<key>[A-Za-z_][A-Za-z0-9_]*):[ \t]*(?:tensor\()?(?P<val>" + NUMBER + r")"
)
_INDEXED: Final = re.compile(r"^(?P<base>loss|grad_norm|current_lr)_(?P<index>[0-9]+)$")
_DISCRIMINATOR: Final = ("loss_disc", "loss_d", "disc_loss", "d_loss")
_ROLE: Final = {"loss": "loss", "grad_norm": "grad_norm", "current_lr": "lr"}


def _name(key: str) -> str:
    if key == "amp_scaler":
        return "loss_scale"
    if key == "current_lr":
        return "lr"
    return key if _INDEXED.match(key) else canonical_name(key)[0]


class CoquiTrainerReader(Reader):
    name = "coqui_trainer"
    description = "Coqui Trainer log: '--> STEP: i/N -- GLOBAL_STEP: N' blocks of ' | > name: value (avg)'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        lines = _ANSI.sub("", decode_head(head)).splitlines()
        headers = sum(1 for line in lines if _STEP.search(line))
        values = sum(1 for line in lines if _VALUE.match(line))
        return 0.0 if headers == 0 or values < 2 else 0.95 if headers >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        state: dict[str, int | bool | None] = {"step": None, "eval": False}

        def line(text: str) -> LineResult:
            plain = _ANSI.sub("", text)
            if header := _STEP.search(plain):
                state["step"], state["eval"] = int(header["step"]), False
                return [], "step header"
            if _EVAL.search(plain):
                state["eval"] = True
                return [], "evaluation header"
            if _TRAIN.search(plain):
                state["eval"] = False
                return [], "training header"
            value = _VALUE.match(plain)
            step = state["step"]
            if value is None or not isinstance(step, int):
                return [], None
            number = parse_number(value["val"])
            if number is None:
                return [], "not a number"
            key = value["key"]
            if state["eval"]:
                if not key.startswith("avg_") or key.endswith("_time"):
                    return [], "evaluation timing"
                return [("val_" + key[len("avg_") :], None, step, number)], None
            return [(_name(key), None, step, number)], None

        def roles(records: list[Record]) -> list[Record]:
            index = _model_optimizer(records)
            out = list(records)
            for metric, unit, step, value, seq in records:
                bare = metric[len("val_") :] if metric.startswith("val_") else metric
                m = _INDEXED.match(bare)
                if m and m["index"] == index:
                    role = _ROLE[m["base"]]
                    out.append(("val_" + role if metric != bare else role, unit, step, value, seq))
            if index is not None and any(r[0] == "loss" for r in out):
                note_loss_source(builder, f"loss_{index}")
            return out

        read_console(paths, builder, line, "a Coqui Trainer value line", whole=True, finish=roles)


def _model_optimizer(records: list[Record]) -> str | None:
    """The index of the optimizer whose total is the run's loss (module docstring), None where the log
    prints a bare ``loss`` (one optimizer) or no indexed total."""
    if any(r[0] == "loss" for r in records):
        return None
    totals: dict[str, dict[int, float]] = {}
    for metric, _, step, value, _ in records:
        if (m := _INDEXED.match(metric)) and m["base"] == "loss":
            totals.setdefault(m["index"], {})[step] = value
    if not totals:
        return None
    disc = {step: value for metric, _, step, value, _ in records if metric in _DISCRIMINATOR}
    indices = sorted(totals, key=int)
    if disc and len(indices) > 1:
        discriminators = {i for i in indices if all(disc.get(s) == v for s, v in totals[i].items())}
        others = [i for i in indices if i not in discriminators]
        if discriminators and others:
            return others[0]
    return indices[0]
