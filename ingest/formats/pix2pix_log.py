"""The ``loss_log.txt`` of pytorch-CycleGAN-and-pix2pix (``Visualizer.print_current_losses``) and trainers
built on it::

    ================ Training Loss (Mon Mar  4 09:12:40 2024) ================
    (epoch: 1, iters: 200, time: 0.071, data: 0.004) G_GAN: 0.913 G_L1: 6.120 D_real: 0.552 D_fake: 0.611

``iters`` counts within the epoch and a line is printed every ``print_freq`` global iterations, so
consecutive lines are ``print_freq`` apart across epoch ends too: the epoch's length is the last
``iters`` of an epoch plus ``print_freq`` minus the first ``iters`` of the next (an epoch of 1,234
iterations printed every 100: epoch 2 starts at ``iters: 66``), and the step is the global iteration,
``(epoch - 1) * length + iters``. ``time`` is the per-iteration compute time in seconds (``step_time_s``),
``data`` the data-loading time (not a metric). Every loss keeps the log's name (``G_GAN``, ``D_fake``,
CycleGAN's ``G_A``, ``cycle_B``...); pix2pix's adversarial generator loss ``G_GAN`` beside the
discriminator's ``D_*`` is also the run's ``loss`` (``ingest.formats.run_loss``: a GAN's generator loss).

``=== <kind> (date) ===`` headers open blocks: lines under a ``Validation``/``Test`` header are no
training records. A training line whose ``(epoch, iters)`` does not advance past the one before starts
another run (a relaunch writes ``epoch: 1, iters: <print_freq>`` again), unless a second launch writes
into the file while the first still trains: their lines interleave and each goes to the launch whose
counter it continues, one run each (:mod:`ingest.formats.writer_runs`). A key keeps a ``+`` it is
written with (DeblurGAN's ``D_real+fake``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Final

import numpy as np

from ingest.formats._common import LogBuilder
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Record, Row, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary
from ingest.formats.run_loss import note_loss_source
from ingest.formats.writer_runs import writer_runs

_HEADER: Final = re.compile(r"^=+[ \t]*(?P<kind>[A-Za-z][A-Za-z ]*?)[ \t]*\((?P<date>[^)]*)\)[ \t]*=+[ \t]*$")
_LINE: Final = re.compile(
    r"^[ \t]*\(epoch:[ \t]*(?P<epoch>[0-9]+),[ \t]*iters:[ \t]*(?P<iters>[0-9]+)(?P<clock>[^)]*)\)(?P<rest>.*)$"
)
_PAIR: Final = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9_]*(?:\+[A-Za-z][A-Za-z0-9_]*)*):[ \t]*(?P<val>" + NUMBER + ")")
"""A `` key: value`` pair; a key joined by ``+`` (``D_real+fake``: the sum of two loss terms) is one name."""
_TIME: Final = re.compile(r"\btime:[ \t]*(?P<val>" + NUMBER + ")")
_GENERATOR: Final = "G_GAN"


def _layout(marks: list[tuple[int, int]], measured: int | None = None) -> tuple[int, int]:
    """``(print_freq, epoch length)`` of one run's training lines ``(epoch, iters)``: the most common
    gap within an epoch, and the most common length its epoch ends give; else ``measured`` (the length another
    launch of the file measured: :func:`_epoch_length`), else the largest ``iters``."""
    freq, length = _gap(marks), _epoch_length(marks)
    return freq, length or measured or max(i for _, i in marks)


def _gap(marks: list[tuple[int, int]]) -> int:
    """The print frequency of one run's lines: the most common gap of ``iters`` within an epoch (0: none seen)."""
    gaps = Counter(b[1] - a[1] for a, b in pairwise(marks) if a[0] == b[0] and b[1] > a[1])
    return gaps.most_common(1)[0][0] if gaps else 0


def _epoch_length(marks: list[tuple[int, int]]) -> int | None:
    """The epoch length one run's lines measure where they cross an epoch end (the last ``iters`` of an epoch plus
    the print frequency minus the first of the next, most common), None where they cross none."""
    freq = _gap(marks)
    ends = Counter(a[1] + freq - b[1] for a, b in pairwise(marks) if b[0] == a[0] + 1 and freq)
    lengths = [n for n, _ in ends.most_common() if n > 0]
    return lengths[0] if lengths else None


class Pix2PixLossLogReader(Reader):
    name = "pix2pix_loss_log"
    description = "pytorch-CycleGAN-and-pix2pix loss_log.txt: '(epoch: E, iters: I, time: T, data: D) G_GAN: x ...'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        rows = sum(1 for line in decode_head(head).splitlines() if (m := _LINE.match(line)) and _PAIR.search(m["rest"]))
        return 0.0 if rows == 0 else 0.95 if rows >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        marks: list[tuple[int, int]] = []  # each training line's (epoch, iters); its rows carry its index
        paces: list[float] = []  # each training line's time per iteration, seconds (NaN: none printed)
        training = True

        def line(text: str) -> LineResult:
            nonlocal training
            if (h := _HEADER.match(text)) is not None:
                training = not re.search(r"valid|test|eval", h["kind"], re.IGNORECASE)
                return [], "block header"
            if (m := _LINE.match(text)) is None:
                return [], "result line" if not training and text.strip() else None
            if not training:
                return [], "validation line"
            index = len(marks)
            marks.append((int(m["epoch"]), int(m["iters"])))
            paces.append(math.nan)
            found: list[Row] = []
            if (t := _TIME.search(m["clock"])) is not None and (value := parse_number(t["val"])) is not None:
                found.append(("step_time_s", None, index, value))
                paces[index] = value
            for pair in _PAIR.finditer(m["rest"]):
                if (value := parse_number(pair["val"])) is not None:
                    found.append((pair["key"], None, index, value))
                    if pair["key"] == _GENERATOR and "D_" in m["rest"]:
                        found.append(("loss", None, index, value))
            return found, None

        def finish(records: list[Record]) -> list[Record]:
            line_seq = dict.fromkeys(range(len(marks)), -1)
            for _, _, index, _, seq in records:
                line_seq[index] = seq
            run_of = _run_of(marks, paces)
            steps = [0] * len(marks)
            by_run = {run: [i for i, r in enumerate(run_of) if r == run] for run in sorted(set(run_of))}
            lengths = {run: _epoch_length([marks[i] for i in lines]) for run, lines in by_run.items()}
            for run, lines in by_run.items():
                measured = _measured_length(lengths, run)
                for i, step in zip(lines, _steps([marks[i] for i in lines], measured), strict=True):
                    steps[i] = step
            kept = [i for i in range(len(marks)) if line_seq[i] >= 0]
            builder.line_runs = (
                np.asarray([line_seq[i] for i in kept], np.int64),
                np.asarray([run_of[i] for i in kept], np.int64),
            )
            if any(metric == "loss" for metric, *_ in records):
                note_loss_source(builder, _GENERATOR)
            return [(metric, unit, steps[index], value, seq) for metric, unit, index, value, seq in records]

        read_console(paths, builder, line, "a loss_log.txt line", finish=finish)


def _measured_length(lengths: dict[int, int | None], run: int) -> int | None:
    """The epoch length for ``run`` where its own lines cross no epoch end (a launch resumed for part of an epoch):
    the one the nearest launch before it measured, else the nearest after (round 26 r26b). The data set, and so
    the epoch's length, is the one the options of the file's experiment name; a length read off the largest
    ``iters`` printed would fall short of it by up to the print frequency, and every step after the first epoch
    with it."""
    before = [lengths[r] for r in sorted(lengths) if r < run and lengths[r]]
    after = [lengths[r] for r in sorted(lengths) if r > run and lengths[r]]
    return before[-1] if before else after[0] if after else None


def _steps(marks: list[tuple[int, int]], measured: int | None = None) -> list[int]:
    """The global iteration of each of one run's training lines ``(epoch, iters)``; ``measured``: the epoch length
    another launch measured (:func:`_measured_length`), for a run that crosses no epoch end."""
    freq, length = _layout(marks, measured) if marks else (0, 0)
    return [(epoch - 1) * length + iters if freq or length else iters for epoch, iters in marks]


def _run_of(marks: list[tuple[int, int]], paces: list[float]) -> list[int]:
    """The run of each training line: a line that does not advance ``(epoch, iters)`` starts one, unless
    the lines are two launches' written at once (``ingest.formats.writer_runs``: each launch's lines
    advance on their own; ``paces``, each line's ``time``, tell launches apart where their steps meet)."""
    # an epoch as long as the longest seen: each launch's lines keep their order, and its rises their size
    # within an epoch (launches whose lines interleave give _layout no epoch end to measure)
    length = max((iters for _, iters in marks), default=0)
    if (interleaved := writer_runs([(epoch - 1) * length + iters for epoch, iters in marks], paces)) is not None:
        return interleaved
    run, run_of = 0, []
    for i, mark in enumerate(marks):
        run += i > 0 and mark <= marks[i - 1]
        run_of.append(run)
    return run_of
