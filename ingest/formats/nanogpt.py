"""Karpathy's nanoGPT console: ``iter N: loss x, time 123.45ms, mfu 35.12%`` and the evaluation line
``step N: train loss x, val loss y``.

The evaluation's ``train loss`` (mean over ``eval_iters`` batches) is not the per-iteration loss:
it is kept as ``eval_train_loss``. nanoGPT prints ``mfu -100.00%`` before it has measured MFU:
that sentinel is dropped, not stored.
"""

from __future__ import annotations

import re
from typing import Any

from ingest.formats.aliases import canonical_name
from ingest.formats.textlog import LineKind, TextLogReader


def _iter_key(key: str) -> tuple[str, str | None]:
    if key == "time":
        return ("step_time_s", "ms")
    return canonical_name(key)


def _eval_key(key: str) -> tuple[str, str | None]:
    return ("eval_train_loss", None) if key == "train loss" else canonical_name(key)


class NanoGPTReader(TextLogReader):
    name = "nanogpt"
    description = "nanoGPT console: 'iter N: loss x, time x ms, mfu x%' and 'step N: train loss x, val loss y'"
    kinds = (
        LineKind(
            name="iter",
            prefix=r"iter[ \t]+(?P<step>[0-9]+):[ \t]*",
            pairs=r"(?P<key>[A-Za-z][A-Za-z_ ]*?)[ \t]+(?P<val>[^\s,]+)",
            keymap=_iter_key,
            sentinels={"mfu": -100.0},
            run_level=True,
        ),
        LineKind(
            name="eval",
            prefix=r"step[ \t]+(?P<step>[0-9]+):[ \t]*(?=train loss[ \t]+[^\s,]+,[ \t]*val loss)",
            pairs=r"(?P<key>train loss|val loss)[ \t]+(?P<val>[^\s,]+)",
            keymap=_eval_key,
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.92 if n_metric_lines >= 2 else 0.75

    def meta_from_head(self, text: str) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        m = re.search(r"tokens per iteration will be: ([\d,]+)", text)
        if m:
            meta["tokens_per_step"] = int(m.group(1).replace(",", ""))
        m = re.search(r"number of parameters: ([\d.]+[KMB]?)", text)
        if m:
            meta["model"] = f"{m.group(1)} parameters"
        overrides = dict(re.findall(r"^Overriding: (\w+) = (.*)$", text, re.M))
        if overrides:
            meta["config_overrides"] = overrides
        return meta
