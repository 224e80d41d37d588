"""The generic reader: any text log whose metric lines carry a step counter and ``key: number``,
``key=number``, ``key number`` or dict (``'key': number``) pairs, read when no trainer's reader
recognises the file (instead of "format not recognised").

It proposes a *mapping* from the head of the file: which key is the step (an integer on most metric
lines that does not go down, preferring the names trainers give it: ``step``, ``iter``, ``global_step``
...), and which keys play the canonical roles. Keys the alias table knows are named as every reader
names them (``learning_rate`` is ``lr``); the others keep their names, and where a role is still
missing a key whose name says it is proposed for it (``train_ce_loss`` for ``loss``, ``gnorm_total``
for ``grad_norm``, a time per iteration for ``step_time_s``), in ``meta['proposed_map']`` (``{name:
role}``, applied by the import as a ``--map`` would be). ``meta['mapping']`` is the whole proposal,
``{role: key as printed}`` with ``step`` first: ``stabscope import --json`` and the Upload preview
show it, and the user corrects it with ``--map NAME=ROLE`` (``--map iters=step`` for the step).

Only the layouts a log repeats are read (:data:`MIN_LAYOUT_LINES` step lines whose steps count up): a sentence of
generated text that holds the step key (``**Step 2: Distance 14 km in 3 hours**``) gives no series and cuts no run; a
layout seen less often keeps only the keys a repeated layout prints or a known metric's (an eval line's ``val_loss``).
A line of its own that times the step before it (``[timing] sample processed in 276.79s`` after ``Step: 1 | Loss:
...``) is that step's time where the step lines print none. Lines of shell commands, SLURM and launcher messages are
never metric lines; a line with no step counter, or with nothing but it, is skipped and counted. A logger's source
location (``[trainer:837]``, ``[trainer.py:892]``, ``[logging.py:68:log_dist]``) is no ``key: number`` pair. A key that
names its unit is read with it (``elapsed time per iteration (ms): 4220.8``, NeMo's ``train_step_timing in s: 0.41``).
The step counter is judged on the lines that carry a training metric (a name the alias table knows) when a few do: a
distributed setup's ``rank: 3 local_rank: 3`` lines and a model repr's ``in_features=384`` lines, however many, do not
decide it. Units a line does not print are inferred where the log says them otherwise
(:mod:`ingest.formats.generic_units`: a bare ``dt`` by the lines' wall clock, an MFU in percent).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from ingest.formats._common import LogBuilder
from ingest.formats.aliases import TIME_UNITS, keep_apart, normalise_key
from ingest.formats.base import Reader
from ingest.formats.csv_counters import is_tally
from ingest.formats.epoch_headers import EpochHeaders
from ingest.formats.epoch_steps import bar_total, epoch_steps, fresh_launches, step_of_n
from ingest.formats.eval_lines import EVAL_STEP, eval_pairs, place_evals, placeholder
from ingest.formats.generic_clock import clock_step_times
from ingest.formats.generic_lines import head_records
from ingest.formats.generic_names import SECONDS_KEYS, stored_name, trains_or_term, unit_suffixed
from ingest.formats.generic_names import telling as telling_records
from ingest.formats.generic_names import trains as is_training_key
from ingest.formats.generic_steps import (
    BRACKET_KEY,
    ORDER_KEY,
    STEP_NAME_SET,
    STEP_NAMES,
    LineOrder,
    line_order,
    step_key_of,
)
from ingest.formats.generic_units import (
    BARE_STEP_TIME_KEYS,
    MIN_UNNAMED_LINES,
    bare_time_unit,
    is_clock,
    is_countdown,
    line_time,
    loader_timed,
    mfu_unit,
    speed_series,
)
from ingest.formats.launch_banners import StartupLines, repeated_launches
from ingest.formats.line_pairs import SPEED_KEY, line_pairs
from ingest.formats.numbers import NUMBER
from ingest.formats.raw_text import decode_head, looks_binary
from ingest.formats.record_lines import Cycle, find_cycle, joined, numbered_lines, rewrite
from ingest.formats.run_loss import aggregate_loss, gan_generator_loss, note_loss_source
from ingest.formats.sections import notes_marks
from ingest.formats.split_losses import propose_split_losses
from stab_core.metrics import CANONICAL_METRICS

HEAD_LINES: Final = 5000
"""Metric lines of the head the mapping is proposed from."""


@dataclass
class Proposal:
    """What the generic reader proposes for a log: the step key and each role's key."""

    step: str
    lines: int = 0
    """Metric lines (two pairs or more) in the head the proposal was made from."""
    roles: dict[str, str] = field(default_factory=dict)
    """role -> key as printed (canonical names the alias table gives, and proposed extras)."""
    extra: dict[str, str] = field(default_factory=dict)
    """name as stored -> role, for keys whose role is proposed from their name alone."""
    units: dict[str, str] = field(default_factory=dict)
    """key as printed -> the unit inferred for its values where the line prints none."""
    other_steps: list[str] = field(default_factory=list)
    """Step keys of other layouts of the same file (notes pasting two trainers' consoles: Cerebras's
    ``Step=100`` and SambaNova's ``global_step:322``), each a step's name counting on the lines that
    lack the keys before it."""
    order: LineOrder | None = None
    """Where the metric lines carry no step counter: what numbers them (``step`` is ``ORDER_KEY``)."""

    def step_keys(self) -> tuple[str, ...]:
        return (self.step, *self.other_steps)

    def mapping(self) -> dict[str, str]:
        """``{role: key as printed}``, the step first."""
        return {"step": self.step, **self.roles}


def propose(lines: Sequence[str], step_key: str | None = None) -> Proposal | None:
    """The mapping for a log whose first lines are ``lines`` (None: no step counter on most of its
    metric lines). ``step_key`` is the user's choice of step (``--map KEY=step``)."""
    trains = is_training_key
    found = head_records(lines, line_pairs, lambda p: is_training_key(p[0], p[2]), HEAD_LINES)  # generic_lines
    if len(telling_records([pairs for pairs, _ in found], is_training_key)) < MIN_UNNAMED_LINES:  # loss terms, no total
        trains = trains_or_term
        found = head_records(lines, line_pairs, lambda p: trains_or_term(p[0], p[2]), HEAD_LINES)
    records = [pairs for pairs, _ in found]
    if not records:
        return None
    telling = telling_records(records, trains)
    step = step_key if step_key is not None else step_key_of(telling if len(telling) >= MIN_UNNAMED_LINES else records)
    if step is None and step_key is None and len(telling) >= MIN_UNNAMED_LINES:
        step = _named_step(records)  # per-epoch summaries name the loss; the step lines a 'batch_loss'
    told = [(pairs, line) for pairs, line in found if any(trains(key, unit) for key, _, unit in pairs)]
    unstepped = step is None and step_key is None and told
    order = line_order([p for p, _ in told], trains, [t for _, t in told]) if unstepped else None
    if order is not None:  # no counter on the metric lines: they count in file order (generic_steps)
        found = [(order.counted(pairs, line), line) for pairs, line in found]
        records, step, order.count, order.header = [pairs for pairs, _ in found], ORDER_KEY, 0, None
    if step is None:
        return None
    proposal = Proposal(step, len(records), order=order)
    proposal.units = _inferred_units(found, step)
    rest = [pairs for pairs in telling if not any(key == step for key, _, _ in pairs)]
    while step_key is None and len(rest) >= MIN_UNNAMED_LINES:
        other = step_key_of(rest)
        if other is None or not any(normalise_key(other) == normalise_key(name) for name in STEP_NAMES):
            break
        proposal.other_steps.append(other)
        rest = [pairs for pairs in rest if not any(key == other for key, _, _ in pairs)]
    first_key: dict[str, str] = {}
    units: dict[str, str | None] = {}
    seen: dict[str, list[float]] = {}
    for pairs in records:
        if not any(key in proposal.step_keys() for key, _, _ in pairs):
            continue  # a key only off the step's lines is never read: no role for it
        values = [(k, u) for k, _, u in pairs if k not in (*proposal.step_keys(), BRACKET_KEY, SPEED_KEY)]
        numbers = [v for k, v, _ in pairs if k not in (*proposal.step_keys(), BRACKET_KEY, SPEED_KEY)]
        for (key, unit), (name, key_unit), number in zip(
            values, line_names(values, proposal.units), numbers, strict=True
        ):
            first_key.setdefault(name, key)
            units.setdefault(name, unit or proposal.units.get(key) or key_unit)
            seen.setdefault(name, []).append(number)
    for name, key in first_key.items():
        if name in CANONICAL_METRICS:
            proposal.roles.setdefault(name, key)
    for role, test in _ROLE_BY_NAME:
        if role in proposal.roles:
            continue
        fits = [
            n
            for n, k in first_key.items()
            if n not in CANONICAL_METRICS
            and test(normalise_key(k), units[n])
            and not (role == "step_time_s" and is_clock(seen[n], MIN_UNNAMED_LINES))
            and not (role == "step_time_s" and _epoch_wide(normalise_key(first_key[n]), proposal.step))
        ]
        if len(fits) > 1:  # 'batch_loss' beside 'running_loss': the running average is no measurement
            fits = [n for n in fits if not _RUNNING.match(normalise_key(first_key[n]))] or fits
        if len(fits) > 1 and role == "loss":  # loss terms beside their total ('loss_vae', 'loss_kl', ...)
            fits = [total] if (total := aggregate_loss(fits)) is not None else fits
        if len(fits) == 1:
            proposal.roles[role] = fits[0]  # as stored: the name --map takes
            proposal.extra[fits[0]] = role
    propose_split_losses(proposal.roles, proposal.extra, first_key, units)  # 'train 0.046  val 0.057'
    return proposal


def _epoch_wide(key: str, step: str) -> bool:
    """Whether a time named for an epoch (``epoch_time: 95.0min``, ``time_per_epoch``) is printed on
    lines that count steps, not epochs: the epoch's time (or what remains of it), never one step's
    (docs/diagnosis.md, "Import: step times and clocks"; MiniMind's ``epoch_time`` counts the epoch's remaining minutes
    down to 0)."""
    return "epoch" in key and normalise_key(step) != "epoch"


_RUNNING: Final = re.compile(r"^(?:running|smoothed|avg|average|mean|ema)[ _]")
"""A running average's name (``running_loss``): the key measured per step beside it plays the role."""


def _named_step(records: list[list[tuple[str, float, str | None]]]) -> str | None:
    """The step key of the lines that print a loss of any name, where it is a step's name (``step=6``)
    and the lines that
    name a known metric carry none (an epoch's ``[TRAIN] loss=0.0003`` between step lines whose loss
    is a ``batch_loss``): the step lines are the log's records, the summaries off its steps."""
    key = step_key_of([pairs for pairs in records if any(normalise_key(k).endswith("loss") for k, _, _ in pairs)])
    named = key is not None and normalise_key(key) in {normalise_key(n) for n in STEP_NAMES}
    return key if named else None


def line_names(pairs: Sequence[tuple[str, str | None]], units: dict[str, str]) -> list[tuple[str, str | None]]:
    """The ``(name, unit)`` each ``(key, unit)`` of one line is stored under, no two keys on one
    metric (:func:`~ingest.formats.aliases.keep_apart`: ``train_loss`` beside ``loss`` keeps its own
    name, an alias never replaces the metric the line names itself)."""
    mapped = [stored_name(key, unit or units.get(key)) for key, unit in pairs]
    if len({name for name, _ in mapped}) == len(mapped):
        return mapped
    kept = keep_apart([key for key, _ in pairs], list(mapped))
    return [found if found is not None else fallback for found, fallback in zip(kept, mapped, strict=True)]


def _inferred_units(found: list[tuple[list[tuple[str, float, str | None]], str]], step: str) -> dict[str, str]:
    """Units for the unitless values whose unit the log says otherwise (see
    :mod:`ingest.formats.generic_units`): a bare ``dt`` by the wall clock, an MFU in percent."""
    times: dict[str, tuple[list[float], list[float], list[float | None]]] = {}
    mfus: dict[str, list[float]] = {}
    for pairs, line in found:
        steps = [v for k, v, _ in pairs if k == step]
        for key, value, unit in pairs:
            if unit is not None:
                continue
            if normalise_key(key) in BARE_STEP_TIME_KEYS and steps:
                col = times.setdefault(key, ([], [], []))
                col[0].append(value)
                col[1].append(steps[0])
                col[2].append(line_time(line))
            elif stored_name(key, None)[0] == "mfu":
                mfus.setdefault(key, []).append(value)
    units = {key: bare_time_unit(*col) for key, col in times.items()}
    units.update({key: unit for key, values in mfus.items() if (unit := mfu_unit(values)) is not None})
    units.update(loader_timed([pairs for pairs, _ in found if any(k == step for k, _, _ in pairs)]))
    return units


def _is_loss(key: str, unit: str | None) -> bool:
    named = "loss" in key or key in ("xent", "cross entropy")  # OpenNMT-py's 'xent': the cross-entropy loss
    return named and not re.search(r"\b(?:val|valid|validation|eval|test)\b", key)


def _is_grad_norm(key: str, unit: str | None) -> bool:
    return ("grad" in key and "norm" in key) or key == "gnorm"


def _is_lr(key: str, unit: str | None) -> bool:
    return bool(re.search(r"(?:^|\b|/)lr\b|learning rate", key))


"""Keys that are a unit themselves: a step line's ``seconds: 1.25`` is the step's time."""


def _is_step_time(key: str, unit: str | None) -> bool:
    timed = unit is not None and unit.split("/")[0] in TIME_UNITS
    key = normalise_key(suffixed[0]) if timed and (suffixed := unit_suffixed(key)) is not None else key  # 'dt ms'
    named = "time" in key or "/it" in (unit or "") or key in ("dt", "elapsed", *SECONDS_KEYS, *_TRAIN_PHASE)
    return timed and (named or bool(_BATCH_COST.search(key)))


_BATCH_COST: Final = re.compile(r"\bbatch[ _]cost\b")
"""PaddlePaddle's ``avg_batch_cost: 0.56 sec``: the time of a batch, the step's (its ``reader_cost`` is the
data loader's share; docs/diagnosis.md, "Import: step times and clocks")."""


_TRAIN_PHASE: Final = ("train", "training")
"""A bare phase word timed on a step line (``Epoch 005 loss 9.5 | train 2.2s``): the step's time."""


_ROLE_BY_NAME: Final = (
    ("loss", _is_loss),
    ("grad_norm", _is_grad_norm),
    ("lr", _is_lr),
    ("step_time_s", _is_step_time),
)


class GenericReader(Reader):
    """Read a log by its proposed mapping; never detected by ``sniff`` (0): ``read_log`` falls back
    to it when no other reader recognises a file, and ``--format generic`` forces it."""

    name = "generic"
    description = "any log of 'step N' with 'key: number', 'key=number', 'key number' or dict pairs (proposed mapping)"

    def __init__(self, step_key: str | None = None) -> None:
        self.step_key = step_key
        self.cycle: Cycle | None = None  # the lines of a record printed over several (cycle_records)

    def sniff(self, head: bytes, path: Path) -> float:
        return 0.0

    def proposal(self, head: bytes) -> Proposal | None:
        """The mapping proposed from a file's first bytes (None: not a log it can read)."""
        if not head or looks_binary(head):
            return None
        lines = list(enumerate(decode_head(head).replace("\r", "\n").splitlines()))
        self.cycle = find_cycle([text for _, text in lines], line_pairs, self._is_step)  # cycle_records
        return propose([text for _, text, _ in joined(lines, line_pairs, self._is_step, self.cycle)], self.step_key)

    def _is_step(self, key: str) -> bool:
        """Whether ``key`` names a step (a split record's first line holds it alone)."""
        return key == self.step_key or normalise_key(key) in STEP_NAME_SET

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        from ingest.formats.raw_text import read_head

        found = self.proposal(read_head(paths[0], 2 * 1024 * 1024))
        if found is None:
            return
        builder.meta["mapping"] = found.mapping()
        builder.meta["generic_reader"] = (
            "read by the generic reader with the proposed mapping: correct it with --map NAME=ROLE (--map KEY=step)"
        )
        if found.extra:
            builder.meta["proposed_map"] = dict(found.extra)
        if found.other_steps:
            builder.meta["other_step_keys"] = list(found.other_steps)
        names: set[str] = set()
        for path in paths:
            builder.source(path)
            if found.order is not None:
                found.order.count, found.order.header = 0, None
            # a row's seq is its line's index in the file, marked as line 1 onwards: the segments
            # (ingest.formats.segments) cut where the step starts afresh, and report their lines
            rows: dict[tuple[str, str | None], tuple[list[int], list[float], list[int]]] = {}
            pending: list[_StepLine] = []
            startup = StartupLines()  # launch_banners: start-up lines printed again
            headers = EpochHeaders(found.step_keys())  # 'Epoch 2/10' over 'Batch 10/1827 | ...' (epoch_headers)
            line_no = 0
            for line_no, line, more in joined(numbered_lines(path, builder), line_pairs, self._is_step, self.cycle):
                step_line = _read_line(line, line_no, path, found, builder)
                startup.see(line_no, line, step_line is not None and step_line.step >= 0)
                headers.see(line, step_line)
                for n, text in more:  # a split record's value lines: read with its step line
                    builder.account.text_line(str(path), n, text, parsed=step_line is not None)
                if step_line is not None:
                    pending.append(step_line)
                line_no = more[-1][0] if more else line_no
            stepped = [x for x in pending if x.step != EVAL_STEP]
            epoch_steps(stepped)
            relaunched = [stepped[i].line_no for i in fresh_launches(stepped)]
            relaunched += repeated_launches(stepped, startup.repeated)
            place_evals(pending)
            pending = [x for x in pending if x.step != EVAL_STEP]
            checkpoint_rows = _keep_recurring(pending, path, found, rows, builder)
            names |= {name for name, _ in rows}
            builder.mark_lines(1)
            base = builder.reserve(line_no)
            marks = notes_marks(path)
            builder.excerpt_starts += [base + n - 1 for n in marks.excerpt_starts]
            builder.run_headings += [base + n - 1 for n in (*marks.run_headings, *relaunched)]
            builder.config_headings += [base + n - 1 for n in marks.config_headings]
            # markdown notes: the settings each pasted run states (what a sibling comparison checks)
            builder.stated_settings += [(base + n - 1, key, value) for n, key, value in marks.settings]
            # a GAN's generator loss beside its discriminator's, no loss of its own: the run's loss (run_loss)
            generator = gan_generator_loss(name for name, _ in rows)
            for (name, unit), (steps, values, order) in rows.items():
                if name == generator:
                    seq = base + np.asarray(order, np.int64)
                    builder.add(
                        "loss", np.asarray(steps, np.int64), np.asarray(values), seq=seq, canonical=True, origin=name
                    )
                    note_loss_source(builder, name)
                if normalise_key(name) in _EPOCH_NAMES and all(v == int(v) for v in values if math.isfinite(v)):
                    # a whole epoch beside the step counter is an axis, not a metric (docs/diagnosis.md, "Import:
                    # settings and counters")
                    continue
                if unit is None and is_tally(name, values):
                    builder.meta.setdefault("tallies_dropped", []).append(name)
                    continue  # steps run, events seen: a tally of the run, not a measurement (csv_counters)
                if unit in TIME_UNITS and name not in CANONICAL_METRICS and is_countdown(values, MIN_LAYOUT_LINES):
                    builder.meta.setdefault("time_left_dropped", []).append(name)
                    continue  # a time left (an ETA counting down to 0), no measurement of the run
                if placeholder(name, values):
                    builder.meta.setdefault("placeholders_dropped", []).append(name)
                    continue
                if name == SPEED_KEY + "_s":
                    name = speed_series(np.asarray(steps, np.float64), np.asarray(values), rows, builder.meta)
                builder.add(
                    name,
                    np.asarray(steps, np.int64),
                    np.asarray(values),
                    unit=unit,
                    seq=base + np.asarray(order, np.int64),
                    canonical=True,
                    stream=int((name, unit) in checkpoint_rows),
                )
        clock_step_times(builder, names)  # a training clock's differences, where no step time is printed


_EPOCH_NAMES: Final = frozenset({"epoch", "epochs"})
"""A whole epoch's names (``Epochs: 1/200`` beside ``Iters: 10/85000``; the plural, round 22: f28b)."""

MIN_LAYOUT_LINES: Final = 3
"""Lines a layout (the keys of a step line, in order) must recur on to be a layout of the log: a
trainer prints the same keys at every step, prose that happens to say ``Step 2: ... at 5`` does not."""


@dataclass
class _StepLine:
    """A line with a step counter and values, before the file's layouts are known."""

    line_no: int
    text: str
    step: int
    values: list[tuple[str, float, str | None]]
    epoch: int | None = None
    """The line's whole epoch (``Epoch 1``), where it prints one."""
    per_epoch: int | None = None
    """The ``N`` of a step printed ``S/N`` beside an epoch."""

    @property
    def layout(self) -> tuple[str, ...]:
        return tuple(key for key, _, _ in self.values)


TIMING_KEY: Final = "step_time"
_TIMING_LINE: Final = re.compile(r"\b(?:time|timing|took|elapsed|duration)\b", re.IGNORECASE)
_DURATION: Final = re.compile(r"(?<![A-Za-z0-9_.])" + NUMBER + r"[ \t]?(?:ms|s|sec|secs|seconds|min)\b")


def _times_alone(line: str, pair: tuple[str, float, str | None]) -> bool:
    """Whether ``line``, holding the one pair ``pair``, times a step: a timing word and one duration
    (``[timing] sample processed in 276.79s``), or a key that names a step's time (``Step_time:
    1.94``, seconds where no unit is printed, as :func:`~ingest.formats.generic_names.stored_name`
    reads it on a step line)."""
    if _TIMING_LINE.search(line) and len(_DURATION.findall(line)) == 1:
        return True
    return stored_name(pair[0], pair[2])[0] == "step_time_s" and (pair[2] or "s") in TIME_UNITS


def to_seconds(value: float, unit: str | None) -> float | None:
    """``value`` in ``unit`` (a time unit) as seconds; None for a unit that is no time."""
    scale = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9, "s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0}.get(unit or "")
    return None if scale is None else value * scale


def _read_line(line: str, line_no: int, path: Path, found: Proposal, builder: LogBuilder) -> _StepLine | None:
    """The step line ``line`` is (None: a line without a step or values, counted as ignored here)."""
    if not line.strip():
        builder.account.text_line(str(path), line_no, line, parsed=False)
        return None
    for piece in line.split("\r")[::-1]:  # a progress bar's redraws: the last piece with pairs
        pairs = line_pairs(piece)
        if pairs:
            break
    pairs = found.order.counted(pairs, piece, line_no) if found.order is not None else pairs
    step_keys = found.step_keys()
    # a step counter that is not a whole finite number (nan, 1e400, 3.5) counts no step
    steps = [v for k, v, _ in pairs if k in step_keys and math.isfinite(v) and v == int(v)]
    values = [(k, v, u) for k, v, u in pairs if k not in (*step_keys, BRACKET_KEY)]
    if not steps and len(pairs) == 1 and _times_alone(line, pairs[0]):
        named = pairs[0][2] is None and stored_name(pairs[0][0], None)[0] == "step_time_s"
        seconds = to_seconds(pairs[0][1], "s" if named else pairs[0][2])
        if seconds is not None:  # placed (or counted) once the step lines are known
            return _StepLine(line_no, line, -1, [(TIMING_KEY, seconds, "s")])
    if not steps and (closed := _epoch_closed(line, pairs)) is not None:  # the epoch's time, at its last step
        return _StepLine(line_no, line, EVAL_STEP, [(EPOCH_TIME_KEY, closed, "s")])
    if not steps and (evaluated := eval_pairs(line, line_pairs)):  # an evaluation of the step line above
        return _StepLine(line_no, line, EVAL_STEP, evaluated)
    if not steps or not values:
        why = "no step counter" if values else "not a metric line"
        builder.skip(path, line_no, f"{why}: {line.strip()[:80]}")
        builder.account.text_line(str(path), line_no, line.split("\r")[-1], parsed=False)
        return None
    epochs = [v for k, v, _ in values if normalise_key(k) == "epoch" and math.isfinite(v) and v == int(v) and v >= 0]
    of_n = (step_of_n(step_keys, rewrite(line)) or bar_total(line, int(steps[0]))) if epochs else None
    return _StepLine(line_no, line, int(steps[0]), values, int(epochs[0]) if epochs else None, of_n)


EPOCH_TIME_KEY: Final = "epoch_time"
_EPOCH_DONE: Final = re.compile(
    r"\b(?i:epoch)[ \t]*[:=]?[ \t]*[0-9]+[ \t]*[,:]?[ \t]*(?i:done|finished|completed?|ended)\b"
)
"""A line that closes an epoch (PaddleRec's ``epoch: 3 done, AUC: 0.93, loss: 0.12, epoch time: 1070.06 s``)."""


def _epoch_closed(line: str, pairs: list[tuple[str, float, str | None]]) -> float | None:
    """The seconds an epoch took, on a line without a step counter that closes the epoch and times it
    (docs/diagnosis.md, "Import: step times and clocks"): the epoch's time, stored at the epoch's last step line. Its
    other values are the epoch's means, which the step lines already log step by step: not kept."""
    if not _EPOCH_DONE.search(line):
        return None
    times = [to_seconds(v, u) for k, v, u in pairs if "time" in normalise_key(k) and u in TIME_UNITS]
    return times[0] if len(times) == 1 else None


def _counts_steps(steps: list[int]) -> bool:
    """Whether a layout's step values count steps: they go back no more than a restart or two (as
    :func:`_step_key` asks of the step key), unlike the 'Step 1' .. 'Step 4' of each generated answer."""
    downs = sum(1 for a, b in itertools.pairwise(steps) if b < a)
    return downs <= max(2, len(steps) // 10)


def _keep_recurring(
    lines: list[_StepLine],
    path: Path,
    found: Proposal,
    rows: dict[tuple[str, str | None], tuple[list[int], list[float], list[int]]],
    builder: LogBuilder,
) -> set[tuple[str, str | None]]:
    """The rows of the step lines. Where some layout recurs (:data:`MIN_LAYOUT_LINES` lines, its step
    values counting up but for a restart or two), a line of a layout that does not gives only its keys
    that a recurring layout also prints or that name a known metric (an eval line's ``val_loss``; all its
    keys where it names one at a step a recurring layout logs: its ``val_ppl`` too): a
    sentence of generated text or notes that happens to hold the step key (``Step 2: ... travels at
    62 km/h``) adds no series, and no step, and its words are counted as that line's (prose, unknown
    layout or suspect), not kept as metrics. A line of its own that times the step above it is that
    step's time (see below). A recurring layout of no training metric whose step goes back inside the
    steps a training layout logged evaluates saved checkpoints (docs/diagnosis.md, "Import: steps, epochs and runs"):
    its rows are named ``eval_*`` and answered (the caller stores them on a stream of their own: no restart of
    training)."""
    counts: dict[tuple[str, ...], int] = {}
    steps_of: dict[tuple[str, ...], list[int]] = {}
    for step_line in lines:
        counts[step_line.layout] = counts.get(step_line.layout, 0) + 1
        steps_of.setdefault(step_line.layout, []).append(step_line.step)
    recurring = {
        layout
        for layout, n in counts.items()
        if n >= MIN_LAYOUT_LINES and layout != (TIMING_KEY,) and _counts_steps(steps_of[layout])
    }
    known = {key for layout in recurring for key in layout}
    logged = {step for layout in recurring for step in steps_of[layout]}
    # a line of its own that times the step above it ('[timing] sample processed in 276.79s' after
    # 'Step: 1 | Loss: ...'), on most steps, is the step time of a log whose step lines print none
    timed = {
        stored_name(k, u)[0] == "step_time_s" or _is_step_time(normalise_key(k), u)
        for layout in recurring
        for k, _, u in next(x.values for x in lines if x.layout == layout)
    }
    use_timing = counts.get((TIMING_KEY,), 0) >= MIN_LAYOUT_LINES and not any(timed)
    last_step: int | None = None
    timed_steps: set[int] = set()
    trained = {layout for layout in recurring if any(is_training_key(k, u) for k, _, u in _first_values(lines, layout))}
    top = -1
    checkpoint_rows: set[tuple[str, str | None]] = set()
    for step_line in lines:
        if step_line.layout == (TIMING_KEY,):
            if use_timing and last_step is not None and last_step not in timed_steps:
                timed_steps.add(last_step)
                builder.account.text_line(str(path), step_line.line_no, step_line.text, parsed=True)
                col = rows.setdefault(("step_time_s", None), ([], [], []))
                col[0].append(last_step)
                col[1].append(step_line.values[0][1])
                col[2].append(step_line.line_no - 1)
            else:
                builder.account.text_line(str(path), step_line.line_no, step_line.text, parsed=False)
            continue
        values = step_line.values
        # an eval line at a logged step that names a known metric ('step 500 | val_loss 2.5 | val_ppl 12.1')
        # keeps every key; prose ('Step 2: Distance 14 km') names none, and one off the step sequence
        # keeps only the known keys
        evaluated = step_line.step in logged and any(is_training_key(k, u) for k, _, u in values)
        if recurring and step_line.layout not in recurring and not evaluated:
            values = [(k, v, u) for k, v, u in values if k in known or is_training_key(k, u)]
        if not values:
            builder.skip(path, step_line.line_no, f"not a layout of the log: {step_line.text.strip()[:80]}")
            builder.account.text_line(str(path), step_line.line_no, step_line.text.split("\r")[-1], parsed=False)
            continue
        last_step = step_line.step
        builder.account.text_line(str(path), step_line.line_no, step_line.text, parsed=True)
        names = line_names([(key, unit) for key, _, unit in values], found.units)
        if step_line.layout in trained:
            top = max(top, step_line.step)
        # a layout of no training metric, back inside the steps the training layout logged (a pasted
        # inference run over saved checkpoints: 'epoch: 15, batch_id: 0, AUC: ...' after epoch 19's
        # training lines) evaluates checkpoints: an evaluation, not a restart of training
        passed = trained and step_line.layout in recurring - trained and step_line.step < top
        for (_, value, _), (name, unit) in zip(values, names, strict=True):
            if name == "mfu" and value < 0:  # nanoGPT's running MFU before it has one: no measurement
                continue
            if passed:
                name = f"{EVALUATED}{name}"
                checkpoint_rows.add((name, unit))
            col = rows.setdefault((name, unit), ([], [], []))
            col[0].append(step_line.step)
            col[1].append(value)
            col[2].append(step_line.line_no - 1)
    return checkpoint_rows


EVALUATED: Final = "eval_"
"""The prefix of a checkpoint evaluation's rows (:func:`_keep_recurring`), stored on a stream of their own."""


def _first_values(lines: list[_StepLine], layout: tuple[str, ...]) -> list[tuple[str, float, str | None]]:
    return next(x.values for x in lines if x.layout == layout)


def generic_summary(meta: dict[str, Any]) -> dict[str, str] | None:
    """The mapping a generic read used (``import --json``'s ``mapping``), None for other readers."""
    mapping = meta.get("mapping")
    return dict(mapping) if isinstance(mapping, dict) else None
