"""What one log file holds besides one run: several runs back to back, and one metric from two sources.

A text log's rows are kept per *source*: one line layout (a reader's ``LineKind``) printed by one
rank. Each source is its own stream (:func:`kind_stream`), so lines of different ranks or layouts
that interleave are never read as a restart.

1. **One source per metric.** When two layouts give the same canonical metric at the same steps (Megatron's
   ``lm loss: 1.121008E+01`` and DeepSpeed's ``steps: 1 loss: 11.2101``), one is kept by
   :data:`KEEP_RULE` and the other is recorded under ``<metric>_<its family>`` (``loss_deepspeed``):
   merged, the rounded copy overwrote the precise value wherever it came later.
2. **Segments.** A source whose step goes down to the first step (the smallest it has shown, or
   step 0 or 1) starts a fresh run: the rows from there are a new segment, imported as its own run.
   A step that goes down to a later step is a resume from a checkpoint and stays in the run (the
   builder records it as a rollback). Segment ``i`` of the file is segment ``i`` of every source
   that restarts as often as the most restarting one (ranks restart at slightly different lines);
   a source that restarts less often (a layout printed only in the last run) is cut at the lines
   where the first most restarting source restarted.

This module sees pieces only through their ``stream``, ``seq`` (file order) and ``step`` arrays;
``ingest.formats._common`` owns the pieces and calls it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt

KIND_STREAM_STRIDE: Final = 1 << 24
"""Streams of line layout ``k`` are ``k * KIND_STREAM_STRIDE + (rank stream)``: one stream per source."""

LAUNCHER_LAYOUTS: Final[dict[str, str]] = {"ds_step": "deepspeed", "ds_loss": "deepspeed"}
"""Line layouts printed by the launcher or engine around the trainer (DeepSpeed's engine lines in a
Megatron-DeepSpeed log), by family; they repeat what the trainer logs, rounded."""

KEEP_RULE: Final = "the trainer's own line over the launcher's copy, then the one printed with more significant digits"


def kind_stream(kind_index: int, stream: Any) -> Any:
    """The stream of rows of layout ``kind_index`` whose rank stream is ``stream`` (int or array)."""
    return stream + kind_index * KIND_STREAM_STRIDE


def kind_of_stream(stream: int) -> int:
    """The layout index a stream from :func:`kind_stream` belongs to."""
    return stream // KIND_STREAM_STRIDE


class _PieceLike(Protocol):
    stream: int
    step: npt.NDArray[np.int64]
    value: npt.NDArray[np.float64]

    def seq_array(self) -> npt.NDArray[np.int64]: ...


@dataclass(frozen=True)
class Source:
    """Where a metric's rows were read: a reader's line layout and the key as printed."""

    layout: str
    key: str
    family: str

    def label(self) -> str:
        return f"{self.family} {self.key!r}"


def family_of(layout: str, format_name: str) -> str:
    """The program that printed a layout: the launcher's family, else the reader's trainer."""
    return LAUNCHER_LAYOUTS.get(layout) or format_name.removesuffix("_deepspeed")


def significant_digits(values: npt.NDArray[np.float64]) -> float:
    """Median count of significant digits in ``values`` as the shortest decimal that reads back the
    same (``11.21008`` -> 7, ``11.2101`` -> 6); a rounded copy has fewer."""
    finite = values[np.isfinite(values)][:1000]
    if finite.shape[0] == 0:
        return 0.0
    return float(np.median([_digits(v) for v in finite]))


def _digits(value: float) -> int:
    mantissa = repr(abs(float(value))).split("e")[0].replace(".", "")
    return len(mantissa.strip("0")) or 1  # 1100.0 has 2 (trailing zeros are not printed digits)


def one_source_per_metric(
    pieces: dict[str, list[Any]], sources: dict[tuple[int, str], tuple[str, str]], format_name: str
) -> list[dict[str, str]]:
    """Keep one layout per metric in ``pieces`` (changed in place); the others' pieces move to
    ``<metric>_<family>``. ``sources``: ``(layout index, metric) -> (layout name, key as printed)``.
    Returns what was kept over what (``kept_over``), by :data:`KEEP_RULE`."""
    kept_over: list[dict[str, str]] = []
    for metric in sorted(pieces):
        by_layout: dict[str, list[Any]] = {}
        found: dict[str, Source] = {}
        for piece in pieces[metric]:
            noted = sources.get((kind_of_stream(piece.stream), metric))
            if noted is None:
                continue
            source = Source(noted[0], noted[1], family_of(noted[0], format_name))
            by_layout.setdefault(source.layout, []).append(piece)
            found[source.layout] = source
        if len(by_layout) < 2:
            continue
        order = sorted(by_layout, key=lambda layout: _preference(layout, by_layout[layout]), reverse=True)
        winner = order[0]
        winner_steps = np.concatenate([p.step for p in by_layout[winner]])
        # a layout at other steps complements the winner (a trainer that changed its line): not a copy
        copies = [
            layout
            for layout in order[1:]
            if np.intersect1d(winner_steps, np.concatenate([p.step for p in by_layout[layout]])).shape[0]
        ]
        pieces[metric] = [p for p in pieces[metric] if p not in _ids(by_layout, copies)]
        for layout in copies:
            moved_to = f"{metric}_{found[layout].family}"
            if found[layout].family == found[winner].family or moved_to in pieces:
                moved_to = f"{metric}_{layout}"
            pieces.setdefault(moved_to, []).extend(by_layout[layout])
            kept_over.append(
                {
                    "metric": metric,
                    "kept": found[winner].label(),
                    "over": found[layout].label(),
                    "stored_as": moved_to,
                    "rule": KEEP_RULE,
                }
            )
    return kept_over


def _preference(layout: str, pieces: list[Any]) -> tuple[int, float]:
    """How :data:`KEEP_RULE` ranks a layout's rows of one metric (higher is kept)."""
    trainer = 0 if layout in LAUNCHER_LAYOUTS else 1
    return trainer, significant_digits(np.concatenate([p.value for p in pieces]))


class _Identity(list[Any]):
    """Membership by identity (pieces hold arrays: ``==`` would compare them)."""

    def __contains__(self, item: object) -> bool:
        return any(item is x for x in self)


def _ids(by_layout: dict[str, list[Any]], layouts: Sequence[str]) -> _Identity:
    return _Identity(p for layout in layouts for p in by_layout[layout])


def fresh_starts(steps: npt.NDArray[np.int64], excerpt: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.int64]:
    """Positions in ``steps`` (one source, file order) where a fresh run starts: the step goes down
    to the smallest seen so far, or to 0 or 1. ``excerpt``: each row's fenced block in markdown notes
    (:mod:`ingest.formats.sections`): a block that prints the previous block's step again at the
    smallest step also starts one (two excerpts that both begin at the checkpoint's step are two
    runs; rows of one block at one step are one record), and so does a block that starts below the
    step the block before ended at."""
    if steps.shape[0] < 2:
        return np.zeros(0, np.int64)
    lowest = np.minimum.accumulate(steps)[:-1]
    down = steps[1:] < steps[:-1]
    if excerpt is not None:
        down |= (steps[1:] == steps[:-1]) & (excerpt[1:] != excerpt[:-1])
    fresh = down & ((steps[1:] <= lowest) | (steps[1:] <= 1))
    if excerpt is not None:
        fresh |= (steps[1:] < steps[:-1]) & (excerpt[1:] != excerpt[:-1])
    return np.flatnonzero(fresh).astype(np.int64) + 1


def segment_cuts(
    pieces: dict[str, list[Any]],
    run_headings: Sequence[int] = (),
    excerpt_starts: Sequence[int] = (),
    config_headings: Sequence[int] = (),
) -> dict[int, npt.NDArray[np.int64]]:
    """For each stream, the ``seq`` values (file order) at which its segments 2, 3, ... begin; empty
    when no source starts afresh. ``run_headings``: the ``seq`` of the lines whose heading names
    another experiment (:mod:`ingest.formats.sections`): a stream's rows under two such headings
    are two segments; ``excerpt_starts``: the ``seq`` of the lines opening a fenced block of
    markdown notes (see :func:`fresh_starts`); ``config_headings``: the ``seq`` of the headings that
    state a configuration: run headings too when the stream's step goes back at one of them.
    Streams that restart less often than the most restarting one get that one's cuts."""
    headings = np.asarray(sorted(run_headings), np.int64)
    excerpts = np.asarray(sorted(excerpt_starts), np.int64)
    configs = np.asarray(sorted(config_headings), np.int64)
    by_stream: dict[int, list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]] = {}
    seen: set[tuple[int, int]] = set()
    for metric_pieces in pieces.values():
        for p in metric_pieces:
            # the metrics of one line share its step array: each line's rows are looked at once
            # (a third slower reading a 9M-row Megatron log when every metric's rows were)
            if (int(p.stream), id(p.step)) in seen:
                continue
            seen.add((int(p.stream), id(p.step)))
            by_stream.setdefault(int(p.stream), []).append((p.seq_array(), p.step))
    cuts: dict[int, npt.NDArray[np.int64]] = {}
    for stream, parts in by_stream.items():
        seq = np.concatenate([s for s, _ in parts])
        step = np.concatenate([t for _, t in parts])
        if seq.shape[0] > 1 and not np.all(seq[1:] > seq[:-1]):
            seq, first = np.unique(seq, return_index=True)  # one row per line: a line gives one step
            step = step[first]
        excerpt = np.searchsorted(excerpts, seq, side="right") if excerpts.shape[0] else None
        cuts[stream] = seq[fresh_starts(step, excerpt)]
        if headings.shape[0] and seq.shape[0] > 1:
            section = np.searchsorted(headings, seq, side="right")
            cuts[stream] = np.union1d(cuts[stream], seq[1:][section[1:] != section[:-1]])
        if configs.shape[0] and seq.shape[0] > 1:
            config = np.searchsorted(configs, seq, side="right")
            boundary = config[1:] != config[:-1]
            if np.any(boundary & (step[1:] < step[:-1])):  # experiments compared, not one run resumed
                cuts[stream] = np.union1d(cuts[stream], seq[1:][boundary])
    most = max((c.shape[0] for c in cuts.values()), default=0)
    if most == 0:
        return {}
    leading = next(c for _, c in sorted(cuts.items()) if c.shape[0] == most)
    return {stream: (c if c.shape[0] == most else leading) for stream, c in cuts.items()}


def segment_of(seq: npt.NDArray[np.int64], cuts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Segment index (0 = the first run) of each row by its ``seq``."""
    return np.searchsorted(cuts, seq, side="right").astype(np.int64)


def run_of_lines(line_runs: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]], seq: npt.NDArray[np.int64]) -> Any:
    """Run index of each row by its line's ``seq``, where a reader chose each line's run itself (``line_runs``:
    ``(seq, run)`` of its lines, ``seq`` ascending; the lines of writers that interleave are not contiguous:
    :mod:`ingest.formats.writer_runs`); a row of a line given no run goes to the first run."""
    line_seq, line_run = line_runs
    i = np.clip(np.searchsorted(line_seq, seq), 0, max(line_seq.shape[0] - 1, 0))
    return np.where(line_seq[i] == seq, line_run[i], 0).astype(np.int64)


def run_start_cuts(run_starts: dict[int, list[int]]) -> dict[int, npt.NDArray[np.int64]]:
    """Segment cuts, per stream, from the runs a table reader cut (``ingest.formats.table_runs``)."""
    return {stream: np.asarray(sorted(set(seqs)), np.int64) for stream, seqs in run_starts.items() if seqs}
