"""Which key counts the steps of a log the generic reader (:mod:`ingest.formats.generic`) reads, and
what counts them where no key does.

- :func:`step_key_of`: a step name first (``step``, ``iter`` ...), then CLU's ``[N]``, then an epoch
  where nothing finer counts, then the leftmost key on every metric line that counts up. Such a
  counter may repeat its value on lines of *different* layouts (llm.c's ``s:250 tel:6.15`` evaluation
  line and ``s:250 trl:6.02 lr:... norm:...`` training line are one step): it must rise strictly over
  the lines of each layout and never go down over them all.
- :class:`LineOrder`: lines of one repeated layout that carry a training metric but no counter at all
  (a trainer that prints its logs dict, ``{'loss': 0.166, 'grad_norm': 0.55, 'learning_rate': 0.0,
  'epoch': 0.83}``, every logging interval) are numbered in file order: the N-th line holding the
  run's loss key is step N, a log interval rather than an optimizer step (``meta['mapping']`` says
  ``step: (line order)``; ``--map KEY=step`` overrides it). Lines without that key (an evaluation dict,
  a final summary) are no step of their own. A counter on a line of its own just before such a line
  (Keras's ``Epoch 3/50`` above ``224s - loss: 0.6124 - acc: 0.8221``) is that line's step instead: a
  counter that starts afresh there starts a new run, as a printed step does. A record printed over
  two lines or more (an epoch's ``loss_D: a, loss_G: b,`` then ``loss_perturb: c, loss_adv: d,``; round
  17): a pair line right below a numbered one (the next line of the file, no blank between) whose keys
  that line did not print, and that prints no counter of its own (``Epoch 2 ...`` opens the next
  epoch's record), is the same record, and takes its step.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from ingest.formats.aliases import canonical_name, normalise_key
from ingest.formats.epoch_steps import epoch_counted
from ingest.formats.generic_units import MIN_UNNAMED_LINES

Pairs = list[tuple[str, float, str | None]]

STEP_NAMES: Final = (
    "step",
    "global_step",
    "global step",
    "total update",  # 'update 29 total update 00350': the in-epoch counter restarts, the total counts on
    "total step",
    "iteration",
    "iter",
    "iters",  # 'Epochs: 1/200 || Iters: 10/85000 || Lr: ...' (round 22: f28b): the plural names the counter too
    "iterations",
    "it",
    "steps",
    "train_step",
    "trainer/global_step",
    "num_updates",
    "update",
    "updates",
    "batch",
    # PaddleRec's 'epoch: 3, batch_id: 500': the batch of the epoch (docs/diagnosis.md, "Import: steps, epochs and
    # runs")
    "batch_id",
    "batch_idx",
    "total_timesteps",  # an RL learner's environment steps (its updates and episodes count otherwise)
    "timesteps",
)
"""Names a step counter goes by, most telling first."""
STEP_NAME_SET: Final = frozenset(normalise_key(name) for name in STEP_NAMES)
BRACKET_KEY: Final = "[N]"
"""The key CLU's ``[100] loss=...`` step is proposed under."""
ORDER_KEY: Final = "(line order)"
"""The step key of a log whose metric lines carry no counter (:class:`LineOrder`)."""


def _rises_by_layout(records: Sequence[Pairs], key: str) -> bool:
    """Whether ``key``'s values never go down over ``records`` and rise strictly over the lines of
    each layout (the keys of a line, in order): a step an evaluation line shares with its training
    line is one step, not a restart."""
    values = [v for pairs in records for k, v, _ in pairs if k == key]
    if len(values) < 2 or not np.all(np.diff(values) >= 0) or values[-1] <= values[0]:
        return False
    by_layout: dict[tuple[str, ...], list[float]] = {}
    for pairs in records:
        layout = tuple(k for k, _, _ in pairs)
        by_layout.setdefault(layout, []).extend(v for k, v, _ in pairs if k == key)
    return all(np.all(np.diff(v) > 0) for v in by_layout.values())


def step_key_of(records: list[Pairs]) -> str | None:
    """The key that counts steps: on half the metric lines at least, whole, never going down (but
    for a restart or two); a step name first, then CLU's ``[N]``, then the leftmost key that rises on
    every metric line (``MIN_UNNAMED_LINES`` at least; see the module's docstring)."""
    seen: dict[str, list[float]] = {}
    position: dict[str, int] = {}
    for pairs in records:
        for i, (key, value, unit) in enumerate(pairs):
            if unit is None:
                seen.setdefault(key, []).append(value)
                position[key] = min(position.get(key, i), i)
    fits, helped = [], set()  # helped: counts only with its epoch's offset (a batch counter)
    restarted: set[str] = set()  # starts afresh a few times (a sweep's arms, or an in-epoch counter)
    for key, values in seen.items():
        arr = np.asarray(counted := epoch_counted(records, key, values))
        helped |= {key} if counted is not values else set()
        if arr.shape[0] * 2 < len(records) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
            continue
        if not np.all(arr == np.round(arr)):
            continue
        restarts = _fresh_starts(arr, key)
        restarted |= {key} if restarts else set()
        downs = int(np.count_nonzero(np.diff(arr) < 0)) - restarts
        if arr.shape[0] > 1 and (
            downs > max(2, arr.shape[0] // 10) or (arr[-1] <= arr[0] and not _relaunched(arr, key))
        ):
            continue
        fits.append(key)
    # a counter that counts by itself first ('global_step' over a batch counter 'step')
    # and one that never starts afresh before one that does ('GLOBAL_STEP: 845600' over 'STEP: 99/630')
    for name in sorted(STEP_NAMES, key=lambda n: any(normalise_key(k) == normalise_key(n) for k in helped | restarted)):
        for key in fits:
            if normalise_key(key) == normalise_key(name):
                return key
    if BRACKET_KEY in fits:
        return BRACKET_KEY
    # no finer counter (none named a step on the lines: one restarting each epoch is no epoch axis)
    for key in fits:
        if normalise_key(key) == "epoch" and not any(normalise_key(k) in STEP_NAME_SET for k in seen):
            return key
    # a key without a step's name must count on every metric line of a few: prose's 'for 3 days on
    # 64 GPUs' is not a log
    strict = [k for k in fits if len(seen[k]) == len(records) >= MIN_UNNAMED_LINES and _rises_by_layout(records, k)]
    return min(strict, key=lambda k: position[k]) if strict else None


def _relaunched(arr: np.ndarray, key: str) -> bool:
    """Whether a counter under a step's name that ends below where it started still counts the steps: it
    rises on nine of every ten lines where it moves (a console appended by many launches, each starting
    afresh or from a checkpoint, ends wherever its last launch stopped: ``Batch 25 .. 13525`` then
    ``Batch 2 .. 190`` and ``Batch 6 .. 11``); a countdown or a value that wanders does not (#31)."""
    if normalise_key(key) not in STEP_NAME_SET:
        return False
    moves = np.diff(arr)
    ups, downs = int(np.count_nonzero(moves > 0)), int(np.count_nonzero(moves < 0))
    return ups >= MIN_UNNAMED_LINES and ups >= 9 * downs


def _fresh_starts(arr: np.ndarray, key: str) -> int:
    """How many times a step counter (a step's name, not a batch's) starts afresh at its first value
    after counting up ``MIN_UNNAMED_LINES`` lines or more each time: a sweep's console holds one run per
    arm (``step 00000/00465 ...`` again after each arm's last step), each restart a run of its own."""
    if normalise_key(key) not in _RESTARTING or arr.shape[0] < 2:
        return 0
    starts = [0, *(int(i) + 1 for i in np.flatnonzero((np.diff(arr) < 0) & (arr[1:] <= arr[0])))]
    spans = np.diff([*starts, arr.shape[0]])
    return len(starts) - 1 if np.all(spans >= MIN_UNNAMED_LINES) else 0


_RESTARTING: Final = frozenset(normalise_key(n) for n in ("step", "global_step", "iteration", "iter", "it"))


@dataclass
class LineOrder:
    """Numbers the lines that hold ``anchor`` (the run's loss key) in file order: see the module."""

    anchor: str
    count: int = 0
    header: float | None = None
    """The counter a line of its own printed just before (Keras's ``Epoch 3/50``), not yet used."""
    last: tuple[int, int, float, frozenset[str]] | None = None
    """The last numbered line: its count, line number, step and the keys its record holds so far."""

    def counted(self, pairs: Pairs, text: str, line_no: int | None = None) -> Pairs:
        """``pairs`` with the step ``(ORDER_KEY, N)`` first where they hold the anchor: the counter of
        a header line just before them (``Epoch 3/50`` then ``224s - loss: 0.61 - acc: 0.82``), else N
        for the N-th such line; a record's next line (``line_no``: see the module) takes its step."""
        if len(pairs) == 1 and _is_counter(*pairs[0]) and _HEADER.match(text):
            self.header = pairs[0][1]
            return pairs
        if not any(k == self.anchor for k, _, _ in pairs):
            self.header = None if pairs else self.header
            last, keys = self.last, frozenset(k for k, _, _ in pairs)
            if line_no is None or last is None or not keys or (last[0], last[1] + 1) != (self.count, line_no):
                return pairs
            if keys & last[3] or _NAMED_COUNTER.search(text):
                return pairs  # a key the record printed already, or a counter of its own: another record
            self.last = (self.count, line_no, last[2], last[3] | keys)
            return [(ORDER_KEY, last[2], None), *pairs]
        self.count += 1
        step, self.header = (float(self.count) if self.header is None else self.header), None
        if line_no is not None:
            self.last = (self.count, line_no, step, frozenset(k for k, _, _ in pairs))
        return [(ORDER_KEY, step, None), *pairs]


_HEADER: Final = re.compile(r"^[\W_]*[A-Za-z][A-Za-z_ ]*[ \t]*[:=#]?[ \t]*[0-9]+(?:[ \t]*/[ \t]*[0-9]+)?[\W_]*$")
"""A line of a counter and nothing else (``Epoch 3/50``, ``=== step 200 ===``; not ``Epoch 00018: early
stopping``)."""


def _is_counter(key: str, value: float, unit: str | None) -> bool:
    """Whether ``key: value`` alone on a line counts steps or epochs (a header of the line after it)."""
    named = normalise_key(key) in STEP_NAME_SET or normalise_key(key) == "epoch"
    return named and unit is None and value >= 0 and value == int(value)


_NAMED_COUNTER: Final = re.compile(
    r"(?i:\b(?:steps?|iter(?:ation)?s?|epochs?|batch|updates?)\b)[^A-Za-z0-9\n]{0,3}[0-9]+(?!\.|[0-9])"
    r"|(?<![0-9])(?<!\.)[0-9]+[ \t]*/[ \t]*[0-9]+(?!\.|[0-9])"
)
"""A counter a line prints in a form no step key was read from (``Epoch [1][50/5455]``, ``iteration 50/
1000``, ``Train Epoch: 1``): such lines are not counterless, and line order would misnumber them."""


def line_order(
    records: Sequence[Pairs], trains: Callable[[str, str | None], bool], lines: Sequence[str] = ()
) -> LineOrder | None:
    """The line order of ``records`` (the head's metric lines with a training metric, none with a
    step counter), anchored on the loss key (else the training key) printed on most of them: on a
    third of them at least (a training dict, an evaluation dict and a summary each logging interval),
    and ``MIN_UNNAMED_LINES`` lines, half of them of one layout; None where no key is, or where the
    metric lines print a counter no step key was read from (:data:`_NAMED_COUNTER`; on 3 lines or
    more, and a quarter as many as hold the key): a log with counters is not counterless.
    ``lines[i]`` is the text of ``records[i]``."""
    counts: dict[str, int] = {}
    for pairs in records:
        for key in {k for k, _, u in pairs if trains(k, u)}:
            counts[key] = counts.get(key, 0) + 1
    fits = [k for k, n in counts.items() if n >= MIN_UNNAMED_LINES and 3 * n >= len(records)]
    if not fits:
        return None
    anchor = max(fits, key=lambda k: (canonical_name(k)[0] == "loss", counts[k]))
    held = [i for i, pairs in enumerate(records) if any(k == anchor for k, _, _ in pairs)]
    layouts: dict[tuple[str, ...], int] = {}
    for i in held:
        layout = tuple(k for k, _, _ in records[i])
        layouts[layout] = layouts.get(layout, 0) + 1
    if 2 * max(layouts.values()) < len(held):  # no layout a logger repeats: a config dump's, notes'
        return None
    named = sum(1 for text in lines if _NAMED_COUNTER.search(text))
    return None if named >= MIN_UNNAMED_LINES and 4 * named >= len(held) else LineOrder(anchor)
