"""The import report: where every line (or record) of an input went.

A reader's :class:`~ingest.formats._common.LogBuilder` holds one :class:`LineAccount`. Every line
read ends in exactly one of three places, so ``read == parsed + sum(ignored) + suspect``:

- ``parsed``: the line gave records (one value per metric it carries);
- ``ignored``, by reason (:data:`IGNORE_REASONS`): blank, banner, config dump, prose, stack trace,
  shell/launcher, progress bar, values without a step (Megatron's ``time (ms) | forward-compute: ...``
  timers, ``world size: 64, ...``: numbers that no step places), a format line without values or
  without a step, unknown layout;
- ``suspect``: a line that looks like a metric line (a known metric name with a number, or a
  ``key: number`` / ``key=number`` layout of several pairs with a step counter) that no layout
  parsed: a warning, since an import that drops such a line may be missing part of the run.

Text readers built on :class:`~ingest.formats.textlog.TextLogReader` get it from the engine
(:mod:`ingest.formats.textlog_engine`): blank lines are counted in bulk, the lines no layout takes are
classified one by one with :func:`classify_line` (only those: metric lines never pass through Python
here). Any other reader gets it from :meth:`~ingest.formats.base.Reader.read`: the unit is then a
*record* (a CSV or JSON-lines row, a TensorBoard scalar event, a Parquet row), ``parsed`` the records
that gave a value and ``ignored`` the records it reported with :meth:`LogBuilder.skip`, grouped by
its reason. A new reader plugs in by either route without code of its own; a reader that knows
better calls :meth:`LineAccount.ignore` / :meth:`LineAccount.flag` itself.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Final

from ingest.formats.aliases import canonical_name
from ingest.formats.numbers import NUMBER
from stab_core.metrics import CANONICAL_METRICS

FIRST_LINES: Final = 5
"""Line numbers kept per ignored reason (the first ones): enough to find the kind in the file."""
SUSPECT_LINES: Final = 100
"""Suspect line numbers kept (the first ones); the count is always exact."""
CLASSIFIED_CHARS: Final = 4096
"""Characters of a line that :func:`classify_line` looks at: a metric line shows itself in its start,
and a line of megabytes (a dump without newlines) is classified in bounded time."""
SUSPECT_EXAMPLES: Final = 5
"""Suspect lines kept with their text, for the warning."""

IGNORE_REASONS: Final = (
    "blank",
    "banner",
    "config dump",
    "prose",
    "stack trace",
    "shell/launcher",
    "progress bar",
    "values without a step",
    "format line without values",
    "metric line without step",
    "unknown layout",
)
"""The reasons a text line is ignored, in the order the report lists them."""
VALUELESS_REASONS: Final = frozenset(
    {
        "blank",
        "banner",
        "prose",
        "config dump",
        "shell/launcher",
        "stack trace",
        "format line without values",
        "record without values",
    }
)
"""The ignored kinds that hold no value a metric could have come from (every other kind may: a line
without its step, an unknown layout); ``record without values`` is a record reader's (``_common``)."""

_PAIR: Final = re.compile(
    r"(?<![\w.])(?P<key>[A-Za-z_][A-Za-z0-9_./-]*(?: [A-Za-z_][A-Za-z0-9_./-]*){0,3})"
    r"(?: ?\([A-Za-z/%]+\))?(?P<sep>\s*[:=]\s*|[ \t]+)(?P<value>" + NUMBER + r")(?![\d:.\w])",
)
"""A ``key: number``, ``key=number`` or ``key number`` pair (a key of up to four words, an optional
``(unit)``); a clock time (``12:34:56``) is no pair. A ``key number`` pair counts only where the key
names a metric or a step (``batch size 160`` in a sentence is no metric)."""
_DIGIT: Final = re.compile(r"\d")
_STEP_KEYS: Final = frozenset({"step", "steps", "iter", "iteration", "iterations", "it", "epoch", "global_step", "s"})
_METRICS: Final = frozenset(CANONICAL_METRICS) - {"epoch", "tokens"}
"""Canonical names whose presence makes a line a metric line (``epoch`` and ``tokens`` also appear in
banners and config dumps)."""

_TRACE: Final = re.compile(
    r"Traceback \(most recent call last\)|\s*File \"[^\"]*\", line \d+|\s*\^+\s*$"
    r"|(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit)\b(?::|$)"
    r"|During handling of the above exception|The above exception was the direct cause"
    r"|\s*(?:raise|return|self\.|torch\.|assert)\b.*\)\s*$|\S+\.py:\d+: \w*Warning"
)
_SHELL: Final = re.compile(r"\+{1,3} \S|\$ \S|#SBATCH ")
"""``bash -x`` traces (``+ NGPU=8``), prompts, SLURM directives."""
_PROGRESS: Final = re.compile(r"\d+%\|.*\||\d+/\d+ \[\d+:\d+|it/s\]|s/it\]")
_ARGS_DUMP: Final = re.compile(r"\s*[\w.-]+ ?\.{3,} ?\S")
_CONFIG: Final = re.compile(
    r"\s*Namespace\(|\s*--?[A-Za-z][\w-]*(?:[ =]\S+)?\s*\\?$"
    r"|\s*[\"']?[\w./-]+[\"']?\s*[:=]\s*\S.*$|\s*[{}\[\]],?\s*$|\s*-\s+\S"
)
"""Argument and config dumps: Megatron's ``name ...... value``, ``Namespace(...)``, ``--flag value``,
one ``key: value`` or ``key = value`` setting, a JSON/YAML line."""
_CONFIG_WORD: Final = re.compile(
    r"\b(?:config|configuration|hparams|hyperparameters|arguments)\b|Config\(|Namespace\(", re.I
)
"""A line that says it holds settings: its ``lr=0.0003`` is a setting, not a logged value."""
_DROP_BANNER_CHARS: Final = str.maketrans("", "", "=-*#_~+<>|:.[](){}/\\! ")


def _is_banner(text: str) -> bool:
    """A separator or heading line: mostly punctuation (``=====``, ``----- arguments -----``)."""
    stripped = text.strip()
    punct = len(stripped) - len(stripped.translate(_DROP_BANNER_CHARS))
    return len(stripped) >= 3 and (punct >= 0.5 * len(stripped) or re.search(r"([=*#~!-])\1{3,}", stripped) is not None)


@functools.lru_cache(maxsize=4096)
def _names_a_metric(key: str) -> bool:
    """Whether ``key`` maps to a canonical metric (cached: a log repeats its keys on every line)."""
    return canonical_name(key)[0] in _METRICS


def metric_pairs(text: str) -> tuple[int, int, bool]:
    """``(numeric pairs, pairs naming a known metric, a step counter pair)`` on ``text``."""
    pairs = known = 0
    step = False
    if _DIGIT.search(text) is None:  # no number, no pair: most prose, banners
        return 0, 0, False
    for m in _PAIR.finditer(text):
        key = m.group("key").strip().lower()
        last = key.rsplit(" ", 1)[-1]
        spaced = not m.group("sep").strip()
        if key in _STEP_KEYS or last in _STEP_KEYS:
            step = True
        elif _names_a_metric(key) or _names_a_metric(last):
            known += 1
        elif spaced:
            continue
        pairs += 1
    return pairs, known, step


def looks_like_metric_line(text: str) -> bool:
    """Whether a line no layout parsed still looks like a metric line: a known metric name with a
    number beside a step counter or another number, or a step counter with two ``key: number``
    pairs more (one ``lr: 3e-4`` alone is a config setting)."""
    pairs, known, step = metric_pairs(text)
    return (known >= 1 and (pairs >= 2 or step)) or (step and pairs >= 3)


def classify_line(text: str) -> str | None:
    """Why a line that no layout parsed was left out: a reason of :data:`IGNORE_REASONS`, or None
    for a line that looks like a metric line (a suspect). ``text`` is the line's own text, behind any
    launcher prefix."""
    text = text[:CLASSIFIED_CHARS]
    stripped = text.strip()
    if not stripped:
        return "blank"
    if ("%|" in stripped or "/it" in stripped or "it/s" in stripped or ":" in stripped) and _PROGRESS.search(stripped):
        return "progress bar"
    if _TRACE.match(text):
        return "stack trace"
    if _SHELL.match(text):
        return "shell/launcher"
    # 'OptimizerConfig(lr=0.0003, ...)': settings, not values at a step
    if _CONFIG_WORD.search(stripped) and not _is_banner(stripped):
        return "config dump"
    pairs, known, step = metric_pairs(stripped)
    if (known >= 1 and (pairs >= 2 or step)) or (step and pairs >= 3):  # as looks_like_metric_line
        return None
    if _ARGS_DUMP.match(text):  # before banners: its dots would make it one
        return "config dump"
    if _is_banner(stripped):
        return "banner"
    if pairs >= 3:
        return "values without a step"
    if _CONFIG.match(text):
        return "config dump"
    words = re.findall(r"[A-Za-z]{2,}", stripped)
    if len(words) >= 3 and sum(map(len, words)) >= 0.5 * len(stripped):
        return "prose"
    return "unknown layout"


@dataclass
class _Tally:
    count: int = 0
    first_lines: list[int] = field(default_factory=list)


@dataclass
class LineAccount:
    """Where the lines (or records) of one input went; see the module docstring."""

    unit: str = "lines"
    """``lines`` for a text log; ``records`` for tabular, JSON-lines, TensorBoard and Parquet input."""
    read: int = 0
    parsed: int = 0
    ignored: dict[str, _Tally] = field(default_factory=dict)
    suspect: _Tally = field(default_factory=_Tally)
    suspect_examples: list[tuple[str, int, str]] = field(default_factory=list)
    """``(file, line, text)`` of the first suspect lines."""
    unread_values: _Tally = field(default_factory=_Tally)
    """Values printed on parsed lines that are not numbers (``lm loss: x6.9``): the line gave its
    other values, so it counts as parsed; these are named beside the suspects."""
    unread_keys: dict[str, int] = field(default_factory=dict)
    moved: dict[str, str] = field(default_factory=dict)
    """Fields read from parsed lines that are not stored as series, and why (``ingest.formats.field_roles``:
    a setting of the run, an evaluation pass's timing): their values are in the run's ``log_settings``."""

    def add_read(self, n: int, parsed: int) -> None:
        """``n`` more lines read, of which ``parsed`` gave records."""
        self.read += n
        self.parsed += parsed

    def ignore(self, reason: str, line: int, count: int = 1) -> None:
        """``count`` lines ignored for ``reason``, the first at ``line`` (1-based)."""
        tally = self.ignored.get(reason)
        if tally is None:
            tally = self.ignored[reason] = _Tally()
        tally.count += count
        if line > 0 and len(tally.first_lines) < FIRST_LINES:  # 0: a record with no line of its own
            tally.first_lines.append(int(line))

    def flag(self, file: str, line: int, text: str) -> None:
        """A line that looks like a metric line but was not parsed."""
        self.suspect.count += 1
        if len(self.suspect.first_lines) < SUSPECT_LINES:
            self.suspect.first_lines.append(int(line))
        if len(self.suspect_examples) < SUSPECT_EXAMPLES:
            self.suspect_examples.append((file, int(line), text.strip()[:200]))

    def unread(self, key: str, lines: Any) -> None:
        """Values of ``key`` on parsed ``lines`` (1-based numbers) that are not numbers."""
        listed = [int(n) for n in lines]
        self.unread_values.count += len(listed)
        self.unread_keys[key] = self.unread_keys.get(key, 0) + len(listed)
        room = SUSPECT_LINES - len(self.unread_values.first_lines)
        self.unread_values.first_lines.extend(listed[: max(room, 0)])

    def text_line(self, file: str, line: int, text: str, *, parsed: bool, reason: str | None = None) -> None:
        """One line of a reader that reads text line by line outside the engine (the generic reader,
        the Hugging Face console): parsed, or ignored for ``reason`` where the reader knows it, or
        blank, or classified (:meth:`note_line`)."""
        self.unit = "lines"
        self.read += 1
        if parsed:
            self.parsed += 1
        elif reason is not None:
            self.ignore(reason, line)
        elif not text.strip():
            self.ignore("blank", line)
        else:
            self.note_line(file, line, text)

    def note_line(self, file: str, line: int, text: str) -> None:
        """Classify one line no layout took (:func:`classify_line`) and count it."""
        reason = classify_line(text)
        if reason is None:
            self.flag(file, line, text)
        else:
            self.ignore(reason, line)

    @property
    def ignored_total(self) -> int:
        return sum(t.count for t in self.ignored.values())

    def balanced(self) -> bool:
        """Whether every line read is parsed, ignored or suspect, once."""
        return self.read == self.parsed + self.ignored_total + self.suspect.count

    def to_json(self, per_metric: dict[str, int] | None = None) -> dict[str, Any]:
        """The report's fields (a Contract: see README, "Import report")."""
        order = {r: i for i, r in enumerate(IGNORE_REASONS)}
        ignored = sorted(self.ignored.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
        return {
            "unit": self.unit,
            "lines_read": self.read,
            "parsed": {
                "lines": self.parsed,
                "records": sum((per_metric or {}).values()),
                "per_metric": per_metric or {},
                "unread_values": {
                    "count": self.unread_values.count,
                    "lines": sorted(self.unread_values.first_lines),
                    "keys": dict(self.unread_keys),
                },
            },
            "ignored": {r: {"count": t.count, "first_lines": sorted(t.first_lines)} for r, t in ignored},
            "moved": {name: {"to": "run settings (meta log_settings)", "why": why} for name, why in self.moved.items()},
            "suspect": {
                "count": self.suspect.count,
                "lines": list(self.suspect.first_lines),
                "examples": [{"file": f, "line": n, "text": t} for f, n, t in self.suspect_examples],
            },
        }


def records_per_metric(tables: list[Any]) -> dict[str, int]:
    """Stored rows per metric over ``tables`` (a run's long tables, its segments' after it). The
    ``metric`` column holds one chunk per metric, so this reads the chunks' lengths, not the rows."""
    out: dict[str, int] = {}
    for table in tables:
        for chunk in table.column("metric").chunks:
            names = chunk.dictionary.to_pylist() if hasattr(chunk, "dictionary") else None
            if names is not None and len(names) == 1:
                out[names[0]] = out.get(names[0], 0) + len(chunk)
                continue
            for name, n in zip(*_counts(chunk), strict=True):
                out[name] = out.get(name, 0) + n
    return dict(sorted(out.items()))


def _counts(chunk: Any) -> tuple[list[str], list[int]]:
    import pyarrow.compute as pc

    counts = pc.value_counts(chunk.dictionary_decode() if hasattr(chunk, "dictionary") else chunk)
    return [str(v) for v in counts.field("values").to_pylist()], counts.field("counts").to_pylist()


def import_report(parsed: Any) -> dict[str, Any] | None:
    """The report of one read input (a ``ParsedLog`` and its ``segments``), or None when its reader
    kept no account."""
    account: LineAccount | None = getattr(parsed, "account", None)
    if account is None:
        return None
    return account.to_json(records_per_metric([parsed.table, *(s.table for s in parsed.segments)]))


_QUOTED: Final = re.compile(r"'[^']*'|\"[^\"]*\"")


def skip_reason_group(reason: str) -> str:
    """The group a reader's skip reason is counted under: its words without the quoted values and
    numbers that differ from line to line (``column 'loss': 'abc' is not a number`` and ``... 'x' ...``
    are one reason), shortened."""
    text = re.sub(r"^byte offset \d+: ", "", reason)
    text = re.sub(r"\d+", "N", _QUOTED.sub("...", text))
    return text[:80]


def summary_line(report: dict[str, Any]) -> str:
    """``N lines: P parsed, I ignored (reasons), S suspect`` for a report of :meth:`LineAccount.to_json`."""
    unit = report.get("unit") or report.get("lines_unit") or "lines"  # the reader's report, or its --json fields
    ignored = report.get("ignored", {})
    n_ignored = sum(int(t["count"]) for t in ignored.values())
    reasons = ", ".join(f"{t['count']:,} {r}" for r, t in ignored.items())
    text = f"{report.get('lines_read', 0):,} {unit}: {report['parsed']['lines']:,} parsed, {n_ignored:,} ignored"
    if reasons:
        text += f" ({reasons})"
    return text + f", {report['suspect']['count']:,} suspect"


def suspect_warning(report: dict[str, Any]) -> str | None:
    """The warning for suspect lines and unread values (None when there are none): how many, which."""
    parts = []
    suspect = report.get("suspect") or {}
    count = int(suspect.get("count", 0))
    if count:
        shown = _first_numbers(suspect.get("lines", []), count)
        if count == 1:
            parts.append(f"1 line looks like a metric line but was not parsed (line {shown})")
        else:
            parts.append(f"{count:,} lines look like metric lines but were not parsed (lines {shown})")
    unread = (report.get("parsed") or {}).get("unread_values") or {}
    n_unread = int(unread.get("count", 0))
    if n_unread:
        keys = ", ".join(repr(k) for k in unread.get("keys", {}))
        shown = _first_numbers(unread.get("lines", []), n_unread)
        what = "1 value of {} is not a number" if n_unread == 1 else f"{n_unread:,} values of {{}} are not numbers"
        parts.append(what.format(keys) + f" and {'was' if n_unread == 1 else 'were'} left out (line {shown})")
    return "; ".join(parts) or None


def _first_numbers(lines: list[int], count: int, shown: int = 20) -> str:
    return ", ".join(str(n) for n in lines[:shown]) + (", ..." if count > min(len(lines), shown) else "")
