"""The Hugging Face Trainer's console (and TRL's trainers, which log through it).

``ProgressCallback.on_log`` writes each ``logs`` dict as Python prints it, between tqdm bars that
redraw with carriage returns::

    {'loss': '2.897', 'grad_norm': '0.7695', 'learning_rate': '2.262e-05', 'epoch': '0.03579'}
    {'eval_loss': '2.51', 'eval_runtime': '10.2', 'eval_samples_per_second': '98.04', 'epoch': '0.5'}
    {'train_runtime': '1234.5', 'train_samples_per_second': '2.3', 'train_loss': '2.1', 'epoch': '3.0'}

Newer versions print the floats as strings (4 significant digits), older ones as numbers; a
``tensor(0.77, device='cuda:0')`` grad norm of some versions is read as its number. The dict carries
no step, so the step is derived, and ``meta['step_source']`` says how:

- ``printed step``: a step counter printed just before each training dict (``Step:  3 {'loss': ...}``,
  as text-generation-webui's Training_PRO prints it). Used when every training dict has one and they
  strictly increase.
- ``progress bar``: the training bar's count ``N`` in its last ``N/T`` drawn before the dict (the
  Trainer advances the bar to the global step, then logs). Used when every training dict follows a
  bar of the training total ``T`` and the counts strictly increase (TRL's consoles).
- ``logging interval``: the epoch-derived steps (next item) advance by one constant interval ``g``
  (each gap within one step of it, the first at ``g``): the Trainer logs at every ``logging_steps``,
  so the N-th dict is step ``N x g``. The epoch is a rounded float over a fractional number of steps
  per epoch, and ``round(epoch x steps per epoch)`` drifts by a few steps over a long run.
- ``epoch``: the step is ``round(epoch x steps per epoch)``, where the steps per epoch are the planned
  optimizer steps (the banner's ``Total optimization steps = T``, else a tqdm bar's ``N/T``) over the
  epoch they end at (the final summary dict's ``epoch``, else the banner's ``Num Epochs``). Used only
  when it gives strictly increasing steps.
- ``line order``: the N-th training dict is step N (a log interval, not an optimizer step).

Evaluation dicts (keys ``eval_*``) are kept apart as evaluation metrics (``eval_loss`` is
``val_loss``): at the training bar's count where bars date the dicts; else, where the steps come from
the epoch, at ``round(epoch x steps per epoch)`` of their own epoch (an evaluation at epoch 7.0 of 94
steps per epoch is step 658, not the training dict's step 650 before it), kept between the training
steps around it; else at the step of the training dict before them. The final summary
(``train_runtime``) is no step: it goes to ``meta['train_summary']``. tqdm bars and other text are
skipped and counted. A dict holding no key the Trainer logs (``loss``, ``learning_rate``, ``epoch``
...: ``Trainer.log`` adds ``epoch`` to every dict) is some other program's, not a logs dict. The
training bar's total is the one whose count advances between the training dicts (a model-loading
bar's ``254/254`` drawn before them is not the run's steps).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np

from ingest.formats._common import LogBuilder, iter_whole_lines
from ingest.formats.aliases import canonical_name, sanitise_name
from ingest.formats.base import Reader
from ingest.formats.numbers import parse_number
from ingest.formats.planned import note_planned_steps
from ingest.formats.raw_text import LAUNCHER_LEAD, decode_head, looks_binary
from ingest.formats.run_totals import is_eval_counter
from ingest.formats.stage_lines import MIN_STAGE_LINES, stage_record
from ingest.formats.tqdm_rates import STREAM as BAR_STREAM
from ingest.formats.tqdm_rates import bar_rate, bar_step_times

_DICT: Final = re.compile(r"\{'[A-Za-z_][^']*':[^{}]*\}")
"""A printed ``logs`` dict: Python's repr, single-quoted keys."""
_PAIR: Final = re.compile(
    r"'(?P<key>[^']+)':[ \t]*(?:'(?P<sval>[^']*)'|(?:tensor|np\.[a-z0-9_]+|numpy\.[a-z0-9_]+)\((?P<tval>[^,)]+)[^)]*\)"
    r"|(?P<val>[^,}\s]+))"
)
"""One ``'key': value`` of a printed dict: a number, a quoted string, a ``tensor(0.77, device=...)`` or a numpy
scalar's repr (``np.float64(0.64)``: NumPy 2 prints its scalars so, as an evaluation's results dict holds them)."""
_KNOWN_KEYS: Final = re.compile(r"\{'(loss|eval_loss|learning_rate|grad_norm|train_runtime|train_loss)'")
_TQDM: Final = re.compile(r"[0-9]+%(?:\|[^|]*\||[ \t])[ \t]*(?P<n>[0-9]+)/(?P<total>[0-9]+)[ \t]*\[")
"""A tqdm bar, ``  5%|▍  | 20/405 [07:33<...]``; a notebook's copy drops the glyphs (``  3% 9/300 [03:58<...]``)."""
_TOTAL_STEPS: Final = re.compile(r"Total (?:optimization )?steps = ([0-9,]+)")
"""The Trainer's banner ``Total optimization steps = T`` (Unsloth's: ``Total steps = T``)."""
_PRINTED_STEP: Final = re.compile(r"(?:^|[^A-Za-z0-9_])(?:step|global[ _]step)[ \t]*[:=]?[ \t]*([0-9]+)[ \t]*$", re.I)
"""A step counter printed right before a dict (``Step:      3 {'loss': ...}``)."""
_NUM_EPOCHS: Final = re.compile(r"Num Epochs = ([0-9,]+)")
_ARGS_EPOCHS: Final = re.compile(r"TrainingArguments\(.*?\bnum_train_epochs=([0-9]+)(?:\.0)?\b")
"""A ``TrainingArguments(...)`` dump's epochs: the planned epochs (as the banner's Num Epochs) where its
``max_steps`` is off (-1 or 0); a positive ``max_steps`` bounds the run instead."""
_ARGS_NO_MAX: Final = re.compile(r"\bmax_steps=(?:-1|0)\b")
_SUMMARY_KEY: Final = "train_runtime"
_LOGGED_KEY: Final = re.compile(r"loss|learning_rate|grad_norm|epoch|eval_|train_")
"""A key of the Trainer's logs (``Trainer.log`` adds ``epoch`` to every dict it prints)."""
_TRAINING_KEY: Final = re.compile(r"(?!eval_|test_|predict_).*(?:loss|learning_rate|grad_norm)")
"""A key a training step's logs dict holds: the Trainer logs ``loss``, ``grad_norm`` and ``learning_rate`` at every
logging step (TRL's trainers add theirs beside them). A dict with none of them (``{'forget_quality': 0.64,
'model_utility': 0.44, 'epoch': 1.0}``, a custom evaluator's results sent through ``Trainer.log``) is an
evaluation's, whatever its keys are named."""


@dataclass
class _Record:
    line: int
    values: dict[str, float]
    eval: bool
    bar: tuple[int, int] | None = None
    """The last progress bar's (count, total) drawn before this dict."""
    printed: int | None = None
    """The step printed just before this dict on its line, if any."""


@dataclass
class _Scan:
    records: list[_Record] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)
    total_steps: int | None = None
    bar_total: int | None = None
    num_epochs: int | None = None
    bar: tuple[int, int] | None = None
    """The last progress bar's (count, total) seen so far."""
    late_total: int | None = None
    """The largest bar total drawn after the first logs dict (the training bar redraws between dicts)."""
    settings: dict[tuple[str, ...], dict[str, str]] = field(default_factory=dict)
    """The last settings dict printed of each set of keys (a grid script's run config): key -> value as printed."""
    changed: bool = False
    """A settings dict of the same keys as an earlier one, a value changed, printed since the last
    training dict: a grid's next point, a new run where the training dict after it restarts."""
    restarts: list[int] = field(default_factory=list)
    """Indices in ``records`` of the records that open a next run (a grid's next point, a next launch)."""
    summarised: bool = False
    """A summary dict (``train_runtime``) was printed since the last training dict: ``train()`` returned."""
    stage: list[tuple[int, int, dict[str, float]]] = field(default_factory=list)
    """A stage's plain step lines before the first dict (:mod:`ingest.formats.stage_lines`): (line, step, values)."""
    full: set[int] = field(default_factory=set)
    """The totals of the bars drawn full (``300/300``): a bar that reached its end."""
    rates: dict[tuple[int, int], float] = field(default_factory=dict)
    """The seconds per step each bar drawn with a rate says, by its ``(count, total)`` (the last draw of a
    count wins: tqdm's smoothed rate at that step)."""


def parse_logs_dict(text: str) -> dict[str, float]:
    """The numeric entries of one printed ``logs`` dict (string, number or tensor values)."""
    out: dict[str, float] = {}
    for m in _PAIR.finditer(text):
        raw = m["sval"] if m["sval"] is not None else m["tval"] if m["tval"] is not None else m["val"]
        value = parse_number(raw)
        if value is not None:
            out[m["key"]] = value
    return out


class HFConsoleReader(Reader):
    name = "hf_console"
    description = "Hugging Face Trainer / TRL console: \"{'loss': '2.897', 'grad_norm': ..., 'epoch': ...}\" lines"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        found = _KNOWN_KEYS.findall(decode_head(head))
        if not found:
            return 0.0
        # only the Trainer's end-of-training summary dicts (`{'train_runtime': ...}`, one per rank):
        # no per-step line of the Trainer's, so a reader that finds the run's step lines (DeepSpeed's
        # engine lines under a Trainer + ZeRO launch) is the more specific one
        if all(key == _SUMMARY_KEY for key in found):
            return 0.6
        return 0.9 if len(found) >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        scan = _Scan()
        for path in paths:
            builder.source(path)
            line_no = 1
            for chunk in iter_whole_lines(path, builder):
                text = chunk.decode("utf-8", "replace")
                for line in text.split("\n")[:-1]:
                    _scan_line(line, line_no, path, scan, builder)
                    line_no += 1
        steps, how = _steps(scan)
        builder.meta["step_source"] = how
        if scan.summary:
            builder.meta["train_summary"] = scan.summary
        total = _total(scan)
        if total and not how.startswith(("line order", "printed step")):
            builder.meta["total_steps"] = total
            note_planned_steps(builder.meta)
        staged = _emit_stage(scan, builder)
        _emit(scan.records, steps, builder, [0, *scan.restarts] if staged else scan.restarts)
        if total and not scan.restarts and not how.startswith("line order"):
            bar_step_times(scan.rates, total, builder)


def _emit_stage(scan: _Scan, builder: LogBuilder) -> bool:
    """Store the stage printed as plain step lines before the dicts (:mod:`ingest.formats.stage_lines`) as the
    rows of a run before the dicts' run; whether there was one (its steps rising, on enough lines)."""
    steps = [step for _, step, _ in scan.stage]
    if not scan.records or len(steps) < MIN_STAGE_LINES or any(b <= a for a, b in itertools.pairwise(steps)):
        return False
    base = builder.reserve(len(steps))
    for name in dict.fromkeys(name for _, _, values in scan.stage for name in values):
        rows = [(i, step, values[name]) for i, (_, step, values) in enumerate(scan.stage) if name in values]
        builder.add(
            name,
            np.asarray([step for _, step, _ in rows], np.int64),
            np.asarray([value for _, _, value in rows]),
            seq=base + np.asarray([i for i, _, _ in rows], np.int64),
            canonical=True,
        )
    builder.meta["stage_before_dicts"] = f"{len(steps)} step lines before the first logs dict: a run of their own"
    return True


def _scan_line(line: str, line_no: int, path: Path, scan: _Scan, builder: LogBuilder) -> None:
    found = False
    bar = False
    for piece in line.split("\r"):
        lead = LAUNCHER_LEAD.match(piece.encode())
        own = piece.encode()[lead.end() if lead else 0 :].decode("utf-8", "replace").strip()
        if not own:
            continue
        # dicts and bars in the order they were drawn: a dict's step is the bar count before it
        marks = sorted([*_DICT.finditer(own), *_TQDM.finditer(own)], key=lambda m: m.start())
        after = 0  # where the text before the next mark starts
        for m in marks:
            before = own[after : m.start()].strip()
            quoted = bool(before)
            after = m.end()
            if m.re is _TQDM:
                bar = True
                scan.bar = (int(m["n"]), int(m["total"]))
                if scan.bar[0] == scan.bar[1]:
                    scan.full.add(scan.bar[1])
                if (seconds := bar_rate(own[m.end() :])) is not None and scan.bar[0] > 0:
                    scan.rates[scan.bar] = seconds
                scan.bar_total = max(scan.bar_total or 0, scan.bar[1])
                if scan.records:
                    scan.late_total = max(scan.late_total or 0, scan.bar[1])
                continue
            if _settings_dict(m.group(0)):
                _note_settings(m.group(0), scan)
                continue
            values = parse_logs_dict(m.group(0))
            # the Trainer prints its dict alone (or after a bar); one after text is quoted: an argument
            # (`fsdp_config={'min_num_params': 0}`), a message (`Non-default generation parameters:
            # {'num_beams': 4}`): a logs dict only if it holds a key the Trainer logs
            if not values or not any(_LOGGED_KEY.match(k) for k in values):
                continue
            found = True
            if _SUMMARY_KEY in values:
                scan.summary.update(values)
                scan.summarised = True
            else:
                is_eval = any(k.startswith("eval_") for k in values) or not any(map(_TRAINING_KEY.match, values))
                printed = _PRINTED_STEP.search(before) if quoted else None
                if not is_eval:
                    _note_restart(values, scan)
                scan.records.append(_Record(line_no, values, is_eval, scan.bar, int(printed[1]) if printed else None))
        if scan.total_steps is None and (t := _TOTAL_STEPS.search(own)):
            scan.total_steps = int(t.group(1).replace(",", ""))
        if scan.num_epochs is None and (e := _NUM_EPOCHS.search(own)):
            scan.num_epochs = int(e.group(1).replace(",", ""))
        elif scan.num_epochs is None and (a := _ARGS_EPOCHS.search(own)) and _ARGS_NO_MAX.search(own):
            scan.num_epochs = int(a.group(1))
    if not found and not bar and not scan.records and (staged := stage_record(line)) is not None:
        scan.stage.append((line_no, *staged))
        found = True
    if found or not line.strip():
        builder.account.text_line(str(path), line_no, line, parsed=found)
        return
    why = "a progress bar" if bar else "not a Trainer logs dict"
    builder.skip(path, line_no, f"{why}: {line.strip()[-80:]}")
    reason = "progress bar" if bar else None
    builder.account.text_line(str(path), line_no, line.split("\r")[-1], parsed=False, reason=reason)


def _steps(scan: _Scan) -> tuple[list[int], str]:
    """Each record's step and how it was found (see the module docstring)."""
    train = [r for r in scan.records if not r.eval]
    runs = _train_runs(scan)
    printed = [r.printed for r in train]
    if printed and all(p is not None for p in printed) and _rising([int(p or 0) for p in printed], runs, first=0):
        return _with_evals(scan, [int(p) for p in printed if p is not None], lambda r: r.printed), (
            "printed step: the step counter printed before each logs dict"
        )
    total = _total(scan)
    if total and train and all(r.bar is not None and r.bar[1] == total for r in train):
        counted = [r.bar[0] for r in train if r.bar is not None]
        if _rising(counted, runs):
            return _with_evals(scan, counted, lambda r: r.bar[0] if r.bar and r.bar[1] == total else None), (
                f"progress bar: the training bar's count N/{total} drawn before each logs dict (the console "
                "prints no step)"
            )
    end_epoch = scan.summary.get("epoch") or (float(scan.num_epochs) if scan.num_epochs else None)
    if total and end_epoch and train and all("epoch" in r.values for r in train):
        per_epoch = total / end_epoch

        def by_epoch(record: _Record) -> int | None:
            return round(record.values["epoch"] * per_epoch) if "epoch" in record.values else None

        derived = [round(r.values["epoch"] * per_epoch) for r in train]
        if _rising(derived, runs):
            where = "the summary's epoch" if "epoch" in scan.summary else "the banner's Num Epochs"
            how = f"{total} optimization steps over {end_epoch:g} epochs, {where}"
            each = [[d for d, run in zip(derived, runs, strict=True) if run == k] for k in range(runs[-1] + 1)]
            intervals = {_logging_interval(run) for run in each}
            interval = intervals.pop() if len(intervals) == 1 else None
            if interval is not None and interval * max(map(len, each)) <= total:
                counted = [interval * (i + 1) for run in each for i in range(len(run))]
                return _with_evals(scan, counted, by_epoch), (
                    f"logging interval: the N-th logs dict is step N x {interval} (the epoch x {per_epoch:g} "
                    f"steps per epoch, {how}, advances by {interval} at every dict; the console prints no step)"
                )
            return _with_evals(scan, derived, by_epoch), (
                f"epoch x {per_epoch:g} steps per epoch ({how}): the console prints no step"
            )
    interval = _completed_interval(scan, total, train)
    if interval is not None and total:
        counted = [interval * (i + 1) for i in range(len(train))]
        return _with_evals(scan, counted, lambda r: None), (
            f"logging interval of a completed run: {len(train)} training logs dicts over the {total} steps the "
            f"training bar reached, the N-th is step N x {interval} (the console prints no step; its bars are "
            "drawn too seldom to date each dict)"
        )
    if scan.restarts:  # runs back to back: each counts from 1 (segments cut them apart)
        counted = [i - runs.index(run) + 1 for i, run in enumerate(runs)]
        return _with_evals(scan, counted, lambda r: None), (
            "line order per run: the N-th training logs dict since the run's start (a summary dict, a changed "
            "settings dict, or an epoch back to the run's first) is step N"
        )
    return _with_evals(scan, list(range(1, len(train) + 1)), lambda r: None), (
        "line order: the N-th training logs dict is step N (one logging interval, not one optimizer step; "
        "the console prints no step and no steps per epoch)"
    )


def _train_runs(scan: _Scan) -> list[int]:
    """The run (0, 1, ...: :attr:`_Scan.restarts` cut them) of each training record, in file order."""
    starts = set(scan.restarts)
    out: list[int] = []
    run = 0
    for i, record in enumerate(scan.records):
        run += i in starts and bool(out)
        if not record.eval:
            out.append(run)
    return out


def _rising(steps: Sequence[int], runs: Sequence[int], first: int = 1) -> bool:
    """Whether ``steps`` (one per training record; ``runs``: each one's run) rise strictly within each run, each
    run's first at least ``first``."""
    if not steps:
        return False
    if any(step < first for step, run, before in zip(steps, runs, [None, *runs[:-1]], strict=True) if run != before):
        return False
    return all(b > a for (a, ra), (b, rb) in itertools.pairwise(zip(steps, runs, strict=True)) if ra == rb)


def _completed_interval(scan: _Scan, total: int | None, train: Sequence[_Record]) -> int | None:
    """The logging interval ``g`` of a run whose training bar reached its total ``T`` (it ran every planned
    step) and whose ``n`` training dicts neither bars nor epochs date one by one (bars drawn only now and
    then, an epoch printed with 2 decimals): the Trainer logs at every ``g``-th step, so ``n`` is ``T // g``
    (``T`` 300 and 60 dicts: every 5 steps). None where no ``g`` gives ``n``, where a bar drawn before a dict
    counts past that dict's step ``N x g`` (the bar never runs ahead of the step the Trainer logs), or for a
    grid's runs."""
    n = len(train)
    if not total or n < 2 or scan.restarts or total not in scan.full:
        return None
    interval = total // n
    if interval < 1 or total // interval != n:
        return None
    for i, record in enumerate(train):
        if record.bar is not None and record.bar[1] == total and record.bar[0] > interval * (i + 1):
            return None
    return interval


def _settings_dict(text: str) -> bool:
    """Whether the printed dict ``text`` is settings, not a logs dict: the Trainer's logs hold numbers
    (some printed as strings, ``'2.897'``), a run's config a quoted path or name."""
    return any(m["sval"] is not None and parse_number(m["sval"]) is None for m in _PAIR.finditer(text))


def _note_settings(text: str, scan: _Scan) -> None:
    """Note on ``scan`` a settings dict that repeats an earlier one's keys with a value changed (a grid's
    next point: the seed or learning rate of the next run)."""
    pairs = {m["key"]: m.group(0) for m in _PAIR.finditer(text)}
    before = scan.settings.get(tuple(pairs))
    scan.changed = scan.changed or (before is not None and before != pairs)
    scan.settings[tuple(pairs)] = pairs


def _note_restart(values: dict[str, float], scan: _Scan) -> None:
    """A training dict opens the next run (docs/diagnosis.md, "Import: steps, epochs and runs") when a summary dict
    (``train_runtime``) came before it: ``train()`` returned, and what trains after it is another call (a pipeline's
    next model or method, a relaunch). Where its epoch went back, it opens one too when a changed settings dict
    came before it (a grid's next point), or when it goes back to the first epoch its run logged or below: a resume
    goes back to a checkpoint saved after the run began logging and logs the step after it, so a dict at or below
    the run's first is a fresh session appended to the file (``launch_ends``' rule for a table's steps). An epoch
    that goes back within the run, with no settings changed, splits nothing. The evaluation dicts printed right
    before the dict, at an epoch below the run's last (the new session's evaluation before it trains), go with it."""
    epoch = values.get("epoch")
    last = next((r.values.get("epoch") for r in reversed(scan.records) if not r.eval), None)
    start = scan.restarts[-1] if scan.restarts else 0
    trained = any(not r.eval for r in scan.records[start:])
    fresh = trained and scan.summarised
    if epoch is not None and last is not None and epoch < last:
        first = next((r.values.get("epoch") for r in scan.records[start:] if not r.eval), None)
        fresh = fresh or scan.changed or (first is not None and epoch <= first)
    if fresh:
        at = len(scan.records)
        while (
            at > start + 1
            and scan.records[at - 1].eval
            and scan.records[at - 1].values.get("epoch", 0.0) < (last if last is not None else 0.0)
        ):
            at -= 1
        scan.restarts.append(at)
    scan.changed = False
    scan.summarised = False


def _total(scan: _Scan) -> int | None:
    """The planned steps: the banner's, else the total of the bar that advances between the training
    dicts (the training bar; a model-loading or tokenizing bar drawn once before them does not), else
    the largest total of the bars drawn after the first dict, else the largest bar's."""
    if scan.total_steps:
        return scan.total_steps
    bars = [r.bar for r in scan.records if not r.eval and r.bar is not None]
    totals = {bar[1] for bar in bars}
    if len(totals) == 1 and len({bar[0] for bar in bars}) > 1:
        return totals.pop()
    return scan.late_total or scan.bar_total


def _logging_interval(derived: Sequence[int]) -> int | None:
    """The constant interval the epoch-derived steps advance by (each gap within one step of it, the
    first step within one of it), or None: the Trainer logs every ``logging_steps``."""
    if len(derived) < 3:
        return None
    gaps = np.diff(np.asarray(derived))
    interval = int(np.median(gaps))
    if interval < 2 or np.any(np.abs(gaps - interval) > 1) or abs(derived[0] - interval) > 1:
        return None  # an interval of 1 leaves nothing to correct; a wider spread is not one interval
    return interval


def _with_evals(scan: _Scan, train_steps: list[int], dated: Callable[[_Record], int | None]) -> list[int]:
    """Every record's step: training dicts in turn; an evaluation at ``dated(record)`` (its own bar
    count or epoch) kept between the training steps around it (from 0 in its run), else at the training step
    before it."""
    out: list[int] = []
    it = iter(train_steps)
    last = 0
    later = [*train_steps, 2**62]
    done = 0
    starts = set(scan.restarts)
    for i, record in enumerate(scan.records):
        if i in starts:
            last = 0
        if not record.eval:
            last = next(it)
            done += 1
            out.append(last)
            continue
        own = dated(record)
        out.append(last if own is None else min(max(own, last), later[done]))
    return out


@functools.lru_cache(maxsize=4096)
def _name_of(key: str) -> tuple[str, str | None]:
    return canonical_name(key)


def _emit(records: list[_Record], steps: list[int], builder: LogBuilder, restarts: Sequence[int] = ()) -> None:
    if not records:
        return
    base = builder.reserve(len(records))
    for stream in (0, 1, BAR_STREAM) if restarts else ():  # a grid's next run (or the dicts after a stage): its own run
        builder.run_starts.setdefault(stream, []).extend(base + i for i in restarts)
    series: dict[tuple[str, str | None, int], tuple[list[int], list[float], list[int]]] = {}
    for i, (record, step) in enumerate(zip(records, steps, strict=True)):
        stream = 1 if record.eval else 0
        for key, value in record.values.items():
            if key == "epoch" or (record.eval and is_eval_counter(key)):
                # Trainer.log adds the epoch to every dict: the step axis in epochs (the steps are derived
                # from it), no measurement of the run (docs/diagnosis.md, "Import: settings and counters"); an
                # evaluation's token count is the training dict's before it
                continue
            name, unit = _name_of(key)
            if record.eval and not key.startswith("eval_"):
                name = "eval_" + sanitise_name(key)
            col = series.setdefault((name, unit, stream), ([], [], []))
            col[0].append(step)
            col[1].append(value)
            col[2].append(base + i)
    for (name, unit, stream), (s, v, q) in series.items():
        builder.add(
            name,
            np.asarray(s, np.int64),
            np.asarray(v),
            unit=unit,
            stream=stream,
            seq=np.asarray(q, np.int64),
            canonical=True,
        )
