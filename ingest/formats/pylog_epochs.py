"""A Python-``logging`` console of a trainer that logs one block per epoch::

    11-23 07:14:05 - INFO - train - Epoch: 6, Loss: 0.84
    11-23 07:14:05 - INFO - train - Train. Total Loss: 0.84, Rec.: 0.71, KL: 0.13, AUC: 81.20%, AP: 64.00%
    11-23 07:14:05 - INFO - train - Val. Total Loss: 0.92, Rec.: 0.77, KL: 0.15, AUC: 78.90%, AP: 60.10%

Each line sits behind a ``logging`` prefix (a time, `` - LEVEL - `` and the logger's name). ``Epoch: N``
sets the step (the epoch) and its ``Loss`` is the training loss; a line led by the split's name
(``Train``/``Training``, ``Val``/``Valid``/``Validation``, ``Test``) gives ``key: value`` pairs of that split
at the epoch: its (total) loss is ``loss`` / ``val_loss`` / ``test_loss``, every other key keeps its
name behind the split (``train_kl``, ``val_auc``; percentages as printed). The training loss of an epoch
is stored once (the ``Train`` line repeats the ``Epoch`` line's). A config dict's ``'epochs': N`` gives
the planned steps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Row, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary

_PREFIX: Final = (
    r"^[ \t]*(?:[0-9]{2,4}-)?[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[,.][0-9]+)?"
    r"[ \t]+-[ \t]+(?:(?:DEBUG|INFO|WARNING|ERROR)[ \t]+-[ \t]+\S+|\S+[ \t]+-[ \t]+(?:DEBUG|INFO|WARNING|ERROR))"
    r"[ \t]+-[ \t]+"
)
_MESSAGE: Final = re.compile(_PREFIX)
_EPOCH: Final = re.compile(_PREFIX + r"Epoch[ \t]*:?[ \t]*(?P<epoch>[0-9]+)[ \t]*(?:,|$)(?P<rest>.*)$")
_SPLIT: Final = re.compile(
    _PREFIX + r"(?P<split>Train(?:ing)?|Val(?:id(?:ation)?)?|Test)\.?[ \t]*:?[ \t]+(?P<rest>[A-Za-z].*)$",
    re.IGNORECASE,
)
_PAIR: Final = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9_ .()-]*?)[ \t]*:[ \t]*(?P<val>" + NUMBER + r")[ \t]*%?")
_EPOCHS: Final = re.compile(r"['\"](?:epochs|num_epochs|n_epochs|max_epochs)['\"][ \t]*:[ \t]*(?P<n>[0-9]+)")
_PREFIXES: Final = {"train": "train_", "training": "train_", "val": "val_", "valid": "val_", "validation": "val_"}


def _name(split: str, key: str) -> str:
    """``(val, "Total Loss")`` -> ``val_loss``; ``(train, "Rec.")`` -> ``train_rec``; train loss -> ``loss``."""
    lead = _PREFIXES.get(split.lower(), split.lower() + "_")
    key = re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_")
    if key in {"loss", "total_loss"}:
        return "loss" if lead == "train_" else lead + "loss"
    return lead + key


class PythonLoggingEpochReader(Reader):
    name = "pylog_epochs"
    description = "Python logging console: '... - INFO - name - Epoch: N, Loss: x' then 'Train. k: v' / 'Val. k: v'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        lines = decode_head(head).splitlines()
        epochs = sum(1 for line in lines if _EPOCH.match(line))
        splits = sum(1 for line in lines if _SPLIT.match(line) and _PAIR.search(line))
        return 0.0 if not (epochs and splits) else 0.9 if epochs >= 2 else 0.7

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        epoch: int | None = None
        stored: set[tuple[str, int]] = set()

        def pairs(split: str, rest: str, step: int) -> list[Row]:
            found: list[Row] = []
            for m in _PAIR.finditer(rest):
                name = _name(split, m["key"])
                if (value := parse_number(m["val"])) is not None and (name, step) not in stored:
                    stored.add((name, step))
                    found.append((name, None, step, value))
            return found

        def line(text: str) -> LineResult:
            nonlocal epoch
            if (m := _EPOCH.match(text)) is not None:
                epoch = int(m["epoch"])
                return pairs("train", m["rest"], epoch), "epoch line"
            if (m := _SPLIT.match(text)) is not None and epoch is not None:
                return pairs(m["split"], m["rest"], epoch), "split line"
            if (n := _EPOCHS.search(text)) is not None:
                builder.meta.setdefault("planned_steps", int(n["n"]))
            # another message of the log is the log's own; a line without the prefix (a repr or a
            # traceback spread over lines) is counted as skipped
            return [], "a logging message" if _MESSAGE.match(text) else None

        read_console(paths, builder, line, "an epoch line")
