"""Karpathy's nanoGPT console: ``iter N: loss x, time 123.45ms, mfu 35.12%`` and the evaluation line
``step N: train loss x, val loss y``; and its predecessor minGPT's trainer callback (``chargpt.py``,
``adder.py``): ``iter_dt 93.75ms; iter 10: train loss 2.10000``, the time since the previous
iteration first (``0.00ms`` at the first iteration, which has none: not a measurement, dropped).

The evaluation's ``train loss`` (mean over ``eval_iters`` batches) is not the per-iteration loss:
it is kept as ``eval_train_loss``. nanoGPT prints ``mfu -100.00%`` before it has measured MFU:
that sentinel is dropped, not stored. A line of only the LR (``LINESEARCH LR: x``, a line-search variant)
is stored at the step of the metric line after it (:mod:`ingest.formats.lone_lines`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from ingest.formats._common import LogBuilder
from ingest.formats.aliases import canonical_name
from ingest.formats.lone_lines import keep_recurring_lr, lone_lr_kind
from ingest.formats.numbers import NUMBER
from ingest.formats.textlog import LineKind, TextLogReader


def _iter_key(key: str) -> tuple[str, str | None]:
    if key == "time":
        return ("step_time_s", "ms")
    return canonical_name(key)


_UNIT_WORD: Final = r"(?:[ \t]+[A-Za-z]{1,8})?"
"""An optional unit word after a loss value (``BPC``, ``nats``, ``bits``)."""

_PER_ITER_TIME: Final = re.compile(r"^(?P<unit>ns|us|ms|s|sec)/it(?:er)?$")


def _tagged_key(key: str) -> tuple[str, str | None]:
    """Keys of a custom trainer's ``[train] iter N: loss x 9905 ms/iter``: the time per iteration
    is the step time, in the unit its key names."""
    m = _PER_ITER_TIME.match(key)
    if m:
        return ("step_time_s", "s" if m["unit"] == "sec" else m["unit"])
    return canonical_name(key)


def _mingpt_key(key: str) -> tuple[str, str | None]:
    """minGPT's ``iter_dt`` is the step time in ms; its ``train loss`` is the iteration's own loss
    (minGPT prints no evaluation loss on that line)."""
    if key == "iter_dt":
        return ("step_time_s", "ms")
    return ("loss", None) if key == "train loss" else canonical_name(key)


def _tagged_eval_key(key: str) -> tuple[str, str | None]:
    """``[eval] iter N: loss x`` (or ``val loss x``): the loss of the held-out set."""
    name, unit = canonical_name(key)
    return ("val_loss", unit) if name == "loss" else (name, unit)


def _eval_key(key: str) -> tuple[str, str | None]:
    return ("eval_train_loss", None) if key == "train loss" else canonical_name(key)


class NanoGPTReader(TextLogReader):
    name = "nanogpt"
    description = (
        "nanoGPT console: 'iter N: loss x, time x ms, mfu x%' and 'step N: train loss x, val loss y' "
        "(and a custom trainer's '[train] iter N: loss x 9905 ms/iter')"
    )
    kinds = (
        LineKind(
            # a custom trainer in nanoGPT's style tags its lines and prints the time per
            # iteration value first: `[train] iter 10: loss 8.8782 9905 ms/iter`
            name="tagged_iter",
            prefix=r"\[train\][ \t]*iter[ \t]+(?P<step>[0-9]+):[ \t]*",
            pairs=(
                r"(?P<val2>" + NUMBER + r")[ \t]*(?P<key2>(?:ns|us|ms|s|sec)/it(?:er)?)\b"
                r"|(?P<key>[A-Za-z][A-Za-z_ ]*?)[ \t]+(?P<val>" + NUMBER + r"[^\s,]*)"
            ),
            keymap=_tagged_key,
            run_level=True,
        ),
        LineKind(
            name="tagged_eval",
            prefix=r"\[(?:eval|val)\][ \t]*iter[ \t]+(?P<step>[0-9]+):[ \t]*",
            pairs=r"(?P<key>[A-Za-z][A-Za-z_ ]*?)[ \t]+(?P<val>" + NUMBER + r"[^\s,]*)",
            keymap=_tagged_eval_key,
        ),
        LineKind(
            name="iter",
            prefix=r"iter[ \t]+(?P<step>[0-9]+):[ \t]*",
            pairs=r"(?P<key>[A-Za-z][A-Za-z_ ]*?)[ \t]+(?P<val>" + NUMBER + r"[^\s,]*)",
            keymap=_iter_key,
            sentinels={"mfu": -100.0},
            run_level=True,
        ),
        LineKind(
            # minGPT: the step sits after the step time, so the prefix finds it by looking ahead and
            # the pairs are read from the line start
            name="mingpt_iter",
            prefix=r"(?=iter_dt[ \t]+" + NUMBER + r"ms;[ \t]*iter[ \t]+(?P<step>[0-9]+):)",
            pairs=r"(?P<key>iter_dt|train loss)[ \t]+(?P<val>" + NUMBER + r")(?:ms)?",
            keymap=_mingpt_key,
            sentinels={"step_time_s": 0.0},
            run_level=True,
        ),
        LineKind(
            name="eval",
            # a loss may carry its unit word (`train loss 2.58 BPC, val loss 2.79 BPC`: bits per
            # character); the word names the loss's unit, not another field
            prefix=r"step[ \t]+(?P<step>[0-9]+):[ \t]*(?=train loss[ \t]+" + NUMBER + _UNIT_WORD + r",[ \t]*val loss)",
            pairs=r"(?P<key>train loss|val loss)[ \t]+(?P<val>" + NUMBER + ")",
            keymap=_eval_key,
        ),
        # an LR line search prints the LR it picked, without a step, just before the evaluation line of the
        # step it starts at (`LINESEARCH LR: 0.0039` then `step 2000: train loss ...`): the next line's step
        lone_lr_kind(fill_next=True),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.92 if n_metric_lines >= 2 else 0.75

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        super().fill(paths, builder)
        keep_recurring_lr(builder)  # the lone LR lines are this reader's only LR: one alone is the config's

    def meta_from_head(self, text: str) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        m = re.search(r"tokens per iteration will be: ([\d,]+)", text)
        if m:
            meta["tokens_per_step"] = int(m.group(1).replace(",", ""))
        m = re.search(r"number of parameters: (" + NUMBER + r"[KMB]?)", text)
        if m:
            meta["model"] = f"{m.group(1)} parameters"
        overrides = dict(re.findall(r"^Overriding: (\w+) = (.*)$", text, re.M))
        if overrides:
            meta["config_overrides"] = overrides
        return meta
