"""modded-nanogpt record logs: ``step:N/M train_loss:x train_time:Nms step_avg:x.xxms`` and
``step:N/M val_loss:x train_time:...`` lines, after the training script's source code, a torch/CUDA
banner and an ``nvidia-smi`` table (all skipped and counted).

``train_time``/``step_avg`` are stored in seconds as ``train_time_s``/``step_avg_s``; ``nanms``
(the step average before it is defined) is kept as NaN. The step time (``step_time_s``, what the
cost and spike views read) is derived from ``train_time`` (see :func:`add_step_times`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ingest.formats._common import LogBuilder
from ingest.formats.aliases import canonical_name
from ingest.formats.planned import PlannedStepsTextLogReader
from ingest.formats.textlog import LineKind


def _step_key(key: str) -> tuple[str, str | None]:
    """``lr_mul`` (parameter-golf's forks print the schedule's multiplier of each group's base LR,
    no absolute LR) is the run's ``lr`` series: the schedule's shape, which warmup, decay and restart
    checks read, in units of the base LR."""
    if key == "lr_mul":
        return ("lr", None)
    # a bare 't' beside 'step_avg' (forks that shorten 'train_time') is the same elapsed training clock:
    # read as 'train_time' the step time is derived from it, and no 't_s' metric is invented
    return canonical_name("train_time" if key == "t" else key)


class ModdedNanoGPTReader(PlannedStepsTextLogReader):
    name = "modded_nanogpt"
    description = "modded-nanogpt record log: 'step:N/M train_loss:x train_time:Nms step_avg:x'"
    kinds = (
        LineKind(
            name="step",
            prefix=r"step:(?P<step>[0-9]+)/(?P<total>[0-9]+)[ \t]+",
            # a unit in the key ('tok/s:5723657', parameter-golf's fork) is part of its name, not a key 's'
            pairs=r"(?P<key>[A-Za-z_]+(?:/[A-Za-z_]+)?):(?P<val>\S+)",
            keymap=_step_key,
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.95 if n_metric_lines >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        super().fill(paths, builder)
        add_step_times(builder)

    def meta_from_head(self, text: str) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        m = re.search(r"Running pytorch (\S+)", text)
        if m:
            meta["torch_version"] = m.group(1)
        gpus = re.findall(r"^\|\s+\d+\s+(NVIDIA [^|]*?)\s+(?:On|Off)\s+\|", text, re.M)
        if gpus:
            meta["gpus"] = len(gpus)
            meta["gpu_model"] = gpus[0]
        m = re.search(r"Training DataLoader: total number of tokens: (\d+)", text)
        if m:
            meta["train_tokens_available"] = int(m.group(1))
        return meta


def add_step_times(builder: LogBuilder) -> None:
    """``step_time_s`` (s, rank 0: the process that prints) from the training lines' ``train_time``.

    ``step_avg`` is a running mean (``train_time`` over the timed steps so far), so it lags: a step
    that took twice as long moves it by 1/N, and it is undefined (``nan``) for the first steps. The
    figure of the steps themselves is the ``train_time`` difference between successive training lines
    divided by their step difference (the mean over the steps between two lines logged every N steps).
    ``train_time`` stops while validating, so the validation lines' own ``train_time`` is left out (it
    would move validation's bookkeeping into the next step), and where it goes down (the timer is
    reset after the warm-up steps, or a restart) that step has no figure rather than a negative one.
    """
    steps, train_time, seq = builder.rows_of("train_time_s")
    if steps.shape[0] < 2:
        return
    val_seq = builder.rows_of("val_loss")[2]
    training = ~np.isin(seq, val_seq)
    steps, train_time, seq = steps[training], train_time[training], seq[training]
    d_step, d_time = np.diff(steps), np.diff(train_time)
    ok = (d_step > 0) & (d_time > 0) & np.isfinite(d_time)
    if ok.any():
        # each figure keeps the file position of the line it ends at: a file of several launches is split into
        # runs by position, and figures placed after the whole file would all fall into the last launch (its
        # steps going back at each launch's start read as resumes from a checkpoint)
        builder.add("step_time_s", steps[1:][ok], d_time[ok] / d_step[ok], rank=0, seq=seq[1:][ok], canonical=True)
