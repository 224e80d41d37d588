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

Lines of shell commands, SLURM and launcher messages are never metric lines; a line with no step
counter, or with nothing but it, is skipped and counted.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from ingest.formats._common import LogBuilder, iter_whole_lines
from ingest.formats.aliases import TIME_UNITS, canonical_name, normalise_key
from ingest.formats.base import Reader
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import LAUNCHER_LEAD, decode_head, looks_binary
from stab_core.metrics import CANONICAL_METRICS

_UNIT: Final = r"(?:ms|us|ns|sec|s|min|h|%|GB|GiB|MB|MiB)"
_KEY: Final = r"[A-Za-z_][A-Za-z0-9_/.@\-]{0,80}"
_PAIR: Final = re.compile(
    r"(?P<q>['\"])(?P<qkey>[A-Za-z_][^'\"\n]{0,80})(?P=q)[ \t]*:[ \t]*['\"]?(?P<qval>" + NUMBER + r")['\"]?"
    # a split word before the key stays with it: `train loss 9.2, val loss 9.3` is two metrics
    r"|(?<![A-Za-z0-9_/.@\-])(?P<key>(?:(?:train|training|val|valid|validation|eval|test)[ \t]+)?"
    + _KEY
    + r")(?:[ \t]*[:=][ \t]*|[ \t]+)"
    # the unit may stand one blank after the number ('time: 644.64 ms', Karpathy's llm.c-style logs)
    r"(?P<val>" + NUMBER + r")(?:[ \t]?(?P<unit>" + _UNIT + r"(?:/it(?:er)?)?))?(?![A-Za-z0-9_.])"
)
"""One ``key: number``, ``key=number``, ``key number`` or ``'key': number`` pair, with an optional unit."""
_BRACKET_STEP: Final = re.compile(r"^\[(?P<step>[0-9]+)\][ \t]")
"""CLU-style ``[100] loss=...``: the bracketed number is the step (proposed as key ``[N]``)."""
BRACKET_KEY: Final = "[N]"
_RAY: Final = re.compile(r"^\((?:[A-Za-z_][A-Za-z0-9_.]*[ \t]+)?pid=[0-9]+(?:,[ \t]*ip=[0-9A-Fa-f.:]+)?\)[ \t]*")
_NOT_METRICS: Final = re.compile(
    r"^(?:[+$>][ \t]*)?(?:export|unset|source|srun|sbatch|salloc|torchrun|deepspeed|mpirun|accelerate[ \t]+launch"
    r"|python3?[ \t])|^#SBATCH|slurmstepd|^srun:|\*\*\* (?:JOB|STEP) [0-9]|^pdsh@"
)
"""Shell commands, SLURM and launcher messages: their ``NAME=1`` are settings, never metrics."""
STEP_NAMES: Final = (
    "step",
    "global_step",
    "global step",
    "iteration",
    "iter",
    "it",
    "steps",
    "train_step",
    "trainer/global_step",
    "num_updates",
    "update",
    "updates",
    "batch",
)
"""Names a step counter goes by, most telling first."""
MIN_UNNAMED_LINES: Final = 3
"""Metric lines a step key without a step's name must count on (strictly increasing) to be proposed."""
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

    def mapping(self) -> dict[str, str]:
        """``{role: key as printed}``, the step first."""
        return {"step": self.step, **self.roles}


def line_pairs(text: str) -> list[tuple[str, float, str | None]]:
    """``(key, value, unit)`` of every pair in one line's own text (prefixes removed), with the
    ``[N]`` of a CLU-style line as key ``[N]``; empty for shell commands and launcher messages."""
    raw = text.encode("utf-8", "replace")
    lead = LAUNCHER_LEAD.match(raw)
    own = raw[lead.end() if lead else 0 :].decode("utf-8", "replace").strip()
    own = _RAY.sub("", own)
    if not own or _NOT_METRICS.search(own):
        return []
    out: list[tuple[str, float, str | None]] = []
    bracket = _BRACKET_STEP.match(own)
    if bracket:
        out.append((BRACKET_KEY, float(bracket["step"]), None))
    for m in _PAIR.finditer(own):
        key = m["qkey"] if m["qkey"] is not None else m["key"]
        value = m["qval"] if m["qval"] is not None else m["val"]
        number = parse_number(value)
        if number is not None:
            out.append((key.strip(), number, m["unit"]))
    return out


def propose(lines: Sequence[str], step_key: str | None = None) -> Proposal | None:
    """The mapping for a log whose first lines are ``lines`` (None: no step counter on most of its
    metric lines). ``step_key`` is the user's choice of step (``--map KEY=step``)."""
    records = [pairs for pairs in (line_pairs(line) for line in lines) if len(pairs) >= 2][:HEAD_LINES]
    if not records:
        return None
    step = step_key if step_key is not None else _step_key(records)
    if step is None:
        return None
    proposal = Proposal(step, len(records))
    first_key: dict[str, str] = {}
    units: dict[str, str | None] = {}
    for pairs in records:
        for key, _, unit in pairs:
            if key in (step, BRACKET_KEY):
                continue
            name, key_unit = stored_name(key, unit)
            first_key.setdefault(name, key)
            units.setdefault(name, unit or key_unit)
    for name, key in first_key.items():
        if name in CANONICAL_METRICS:
            proposal.roles.setdefault(name, key)
    for role, test in _ROLE_BY_NAME:
        if role in proposal.roles:
            continue
        fits = [n for n, k in first_key.items() if n not in CANONICAL_METRICS and test(normalise_key(k), units[n])]
        if len(fits) == 1:
            proposal.roles[role] = fits[0]  # as stored: the name --map takes
            proposal.extra[fits[0]] = role
    return proposal


@functools.lru_cache(maxsize=4096)
def stored_name(key: str, unit: str | None) -> tuple[str, str | None]:
    """The metric name a key is stored under (as every reader names it) and its unit."""
    name, key_unit = canonical_name(key)
    unit = (unit or key_unit or "").split("/")[0] or None  # '9905 ms/iter': milliseconds
    if unit in TIME_UNITS and name not in CANONICAL_METRICS and not name.endswith("_s"):
        name += "_s"
    return name, unit


def _is_loss(key: str, unit: str | None) -> bool:
    return "loss" in key and not re.search(r"\b(?:val|valid|validation|eval|test)\b", key)


def _is_grad_norm(key: str, unit: str | None) -> bool:
    return ("grad" in key and "norm" in key) or key == "gnorm"


def _is_lr(key: str, unit: str | None) -> bool:
    return bool(re.search(r"(?:^|\b|/)lr\b|learning rate", key))


def _is_step_time(key: str, unit: str | None) -> bool:
    timed = unit is not None and unit.split("/")[0] in TIME_UNITS
    return timed and ("time" in key or "/it" in (unit or "") or key in ("dt", "elapsed"))


_ROLE_BY_NAME: Final = (
    ("loss", _is_loss),
    ("grad_norm", _is_grad_norm),
    ("lr", _is_lr),
    ("step_time_s", _is_step_time),
)


def _step_key(records: list[list[tuple[str, float, str | None]]]) -> str | None:
    """The key that counts steps: on half the metric lines at least, whole, never going down (but
    for a restart or two); a step name first, then CLU's ``[N]``, then the leftmost key that rises on
    every metric line (``MIN_UNNAMED_LINES`` at least)."""
    seen: dict[str, list[float]] = {}
    position: dict[str, int] = {}
    for pairs in records:
        for i, (key, value, unit) in enumerate(pairs):
            if unit is None:
                seen.setdefault(key, []).append(value)
                position[key] = min(position.get(key, i), i)
    fits = []
    for key, values in seen.items():
        arr = np.asarray(values)
        if arr.shape[0] * 2 < len(records) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
            continue
        if not np.all(arr == np.round(arr)):
            continue
        downs = int(np.count_nonzero(np.diff(arr) < 0))
        if arr.shape[0] > 1 and (downs > max(2, arr.shape[0] // 10) or arr[-1] <= arr[0]):
            continue
        fits.append(key)
    for name in STEP_NAMES:
        for key in fits:
            if normalise_key(key) == normalise_key(name):
                return key
    if BRACKET_KEY in fits:
        return BRACKET_KEY
    # a key without a step's name must count on every metric line of a few, strictly: prose's
    # 'for 3 days on 64 GPUs' is not a log
    strict = [k for k in fits if len(seen[k]) == len(records) >= MIN_UNNAMED_LINES and np.all(np.diff(seen[k]) > 0)]
    return min(strict, key=lambda k: position[k]) if strict else None


class GenericReader(Reader):
    """Read a log by its proposed mapping; never detected by ``sniff`` (0): ``read_log`` falls back
    to it when no other reader recognises a file, and ``--format generic`` forces it."""

    name = "generic"
    description = "any log of 'step N' with 'key: number', 'key=number', 'key number' or dict pairs (proposed mapping)"

    def __init__(self, step_key: str | None = None) -> None:
        self.step_key = step_key

    def sniff(self, head: bytes, path: Path) -> float:
        return 0.0

    def proposal(self, head: bytes) -> Proposal | None:
        """The mapping proposed from a file's first bytes (None: not a log it can read)."""
        if not head or looks_binary(head):
            return None
        return propose(decode_head(head).replace("\r", "\n").splitlines(), self.step_key)

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        from ingest.formats.raw_text import read_head
        from ingest.formats.sections import notes_marks

        found = self.proposal(read_head(paths[0], 2 * 1024 * 1024))
        if found is None:
            return
        builder.meta["mapping"] = found.mapping()
        builder.meta["generic_reader"] = (
            "read by the generic reader with the proposed mapping: correct it with --map NAME=ROLE (--map KEY=step)"
        )
        if found.extra:
            builder.meta["proposed_map"] = dict(found.extra)
        for path in paths:
            builder.source(path)
            # a row's seq is its line's index in the file, marked as line 1 onwards: the segments
            # (ingest.formats.segments) cut where the step starts afresh, and report their lines
            rows: dict[tuple[str, str | None], tuple[list[int], list[float], list[int]]] = {}
            line_no = 0
            for chunk in iter_whole_lines(path, builder):
                for line in chunk.decode("utf-8", "replace").split("\n")[:-1]:
                    line_no += 1
                    _read_line(line, line_no, path, found.step, rows, builder)
            builder.mark_lines(1)
            base = builder.reserve(line_no)
            # markdown notes: the settings each pasted run states (what a sibling comparison checks)
            builder.stated_settings += [(base + n - 1, key, value) for n, key, value in notes_marks(path).settings]
            for (name, unit), (steps, values, order) in rows.items():
                builder.add(
                    name,
                    np.asarray(steps, np.int64),
                    np.asarray(values),
                    unit=unit,
                    seq=base + np.asarray(order, np.int64),
                    canonical=True,
                )


def _read_line(
    line: str,
    line_no: int,
    path: Path,
    step_key: str,
    rows: dict[tuple[str, str | None], tuple[list[int], list[float], list[int]]],
    builder: LogBuilder,
) -> None:
    if not line.strip():
        builder.account.text_line(str(path), line_no, line, parsed=False)
        return
    for piece in line.split("\r")[::-1]:  # a progress bar's redraws: the last piece with pairs
        pairs = line_pairs(piece)
        if pairs:
            break
    # a step counter that is not a whole finite number (nan, 1e400, 3.5) counts no step
    steps = [v for k, v, _ in pairs if k == step_key and math.isfinite(v) and v == int(v)]
    values = [(k, v, u) for k, v, u in pairs if k not in (step_key, BRACKET_KEY)]
    if not steps or not values:
        why = "no step counter" if values else "not a metric line"
        builder.skip(path, line_no, f"{why}: {line.strip()[:80]}")
        builder.account.text_line(str(path), line_no, line.split("\r")[-1], parsed=False)
        return
    builder.account.text_line(str(path), line_no, line, parsed=True)
    for key, value, unit in values:
        name, unit = stored_name(key, unit)
        col = rows.setdefault((name, unit), ([], [], []))
        col[0].append(int(steps[0]))
        col[1].append(value)
        col[2].append(line_no - 1)


def generic_summary(meta: dict[str, Any]) -> dict[str, str] | None:
    """The mapping a generic read used (``import --json``'s ``mapping``), None for other readers."""
    mapping = meta.get("mapping")
    return dict(mapping) if isinstance(mapping, dict) else None
