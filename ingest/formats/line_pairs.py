"""The ``(key, value, unit)`` pairs of one line of a text log, as the generic reader reads them:
``key: number``, ``key=number``, ``key number``, ``'key': number``, a unit the key names or one
after the number, a speed in steps (``1.16it/s``, ``113.21s/it``) as a time per step, a token
rate; launcher prefixes, a logger's source location, tqdm bars, process ids, times left and shell
commands are no pairs.

The generic reader asks for one line's pairs several times (while it proposes a mapping from the
head, then while it joins records split over lines and reads each line), so :func:`line_pairs`
remembers the pairs of the last :data:`CACHED_LINES` lines it parsed; the text alone decides them.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Final

from ingest.formats.aliases import TIME_UNITS, normalise_key
from ingest.formats.generic_lines import no_key
from ingest.formats.generic_steps import BRACKET_KEY
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.pair_spellings import respelled
from ingest.formats.raw_text import KEY_START, LAUNCHER_LEAD
from ingest.formats.record_lines import rewrite

Pair = tuple[str, float, str | None]

CACHED_LINES: Final = 1 << 15
"""Lines whose pairs are remembered: a 2 MiB head (what a mapping is proposed from) and the line
being read, so each head line is parsed once."""

_UNIT: Final = r"(?:ms|us|ns|sec|s|min|h|%|GB|GiB|MB|MiB)"
_KEY: Final = r"[A-Za-z_][A-Za-z0-9_/.@\-]{0,80}"
_RATE: Final = r"(?:steps?|its?|iters?|iterations?|tok(?:en)?s?|words?)/s(?:ec)?|s(?:ec)?/it(?:er)?"  # words: tokens
_TOKEN_RATE: Final = r"(?:tok(?:en)?s?|tks|words?)/s(?:ec)?(?![A-Za-z])(?![ \t]*[:=])"  # not the next pair's key
_SAMPLE_RATE: Final = r"(?:samples?|ins|instances?|examples?)/s(?:ec)?(?![A-Za-z])(?![ \t]*[:=])"
"""A sample rate printed after the value (PaddleRec's ``ips: 1822.09 ins/s``): the samples per second,
whatever the key calls it (docs/diagnosis.md, "Import: the generic reader")."""
_PAIR: Final = re.compile(
    # a speed printed after its value: `6.75 steps/sec`, `1.16it/s`, `113.21s/it`
    r"(?<![A-Za-z0-9_.])(?P<rval>" + NUMBER + r")[ \t]?(?P<rate>" + _RATE + r")(?![A-Za-z])"
    # a unit the key names, before the separator: 'elapsed time per iteration (ms): 4220.8' (words before
    # a bracketed unit are one key), NeMo's 'train_step_timing in s: 0.41'
    r"|" + KEY_START + r"(?P<ukey>[A-Za-z_][A-Za-z0-9_]*(?:[ \t]+[A-Za-z_][A-Za-z0-9_]*){0,5})"
    # ('(s)' stuck to a word is English's plural, no unit: 'processed sample(s): 512' counts samples)
    r"(?:(?:[ \t]+\(|\((?![sh]\)))(?P<punit>" + _UNIT + r")\)|[ \t]+in[ \t]+(?P<iunit>" + _UNIT + r")"
    r"|(?P<plural>\(e?s\)))"
    r"[ \t]*[:=][ \t]*(?P<uval>" + NUMBER + r")(?![A-Za-z0-9_.])"
    r"|(?P<q>['\"])(?P<qkey>[A-Za-z_][^'\"\n]{0,80})(?P=q)[ \t]*:[ \t]*['\"]?(?P<qval>" + NUMBER + r")['\"]?"
    # a split word before the key stays with it: `train loss 9.2, val loss 9.3` is two metrics
    # (any case: 'Train Loss: 0.03'), with one word between before a colon: 'Train L1 Loss: 0.87'
    r"|" + KEY_START + r"(?P<key>(?:(?i:(?:smoothed[ \t]+)?(?:train|training|val|valid|validation|eval|test))[ \t]+"
    r"(?:[A-Za-z0-9]+[ \t]+(?=[A-Za-z_][A-Za-z0-9_]*[ \t]*:))?)?" + _KEY + r")(?:[ \t]*[:=][ \t]*|[ \t]+)"
    # the unit may stand one blank after the number ('time: 644.64 ms', Karpathy's llm.c-style logs)
    # or a magnitude suffix as nanotron's ``human_format`` prints it ('consumed_tokens: 1.31M', 'K' 'M' 'B' 'T')
    # or a token rate ('throughput=122.0K tks/s': the pair is the log's tokens per second)
    r"(?P<val>" + NUMBER + r")(?:[ \t]?(?P<unit>" + _UNIT + r"(?:/it(?:er)?)?)(?!/)"
    r"|(?P<tmag>[KMBT])?[ \t]?(?P<trate>" + _TOKEN_RATE + r")|[ \t]?(?P<srate>" + _SAMPLE_RATE + r")"
    r"|(?P<mag>[KMBT]))?(?![A-Za-z0-9_.])"
)
"""One ``key: number``, ``key=number``, ``key number`` or ``'key': number`` pair, with an optional unit;
or a speed in steps (``R steps/sec``, ``R it/s``, ``T s/it``), read as a time per step (``T`` or ``1/R``
seconds; see :func:`speed_series` for what it becomes)."""
_MAGNITUDE: Final = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}  # a magnitude suffix ('B': billions, as nanotron)
SPEED_KEY: Final = "speed_step_time"
"""The key a speed in steps is read under, as seconds per step (stored as :func:`speed_series` says)."""
_BRACKET_STEP: Final = re.compile(r"^\[(?P<step>[0-9]+)\][ \t]")
"""CLU-style ``[100] loss=...``: the bracketed number is the step (proposed as key ``[N]``)."""
_LOCATION: Final = re.compile(
    r"\[[A-Za-z_][A-Za-z0-9_.]*:[0-9]+(?::[A-Za-z_<>][A-Za-z0-9_.<>]*)?\]|\[(?i:rank)[ \t]*[0-9]+\]"
)
"""A logger's source location, ``[module:line]`` or ``[file.py:line:function]``, or the rank that
prints the line (``[Rank 0]``): no pair."""
_NOT_PAIRS: Final = re.compile(
    r"(?:[A-Za-z][A-Za-z ]{0,40}:[ \t]{0,8})?[0-9]{1,3}%\|[^|\n]*\|[ \t]*[0-9]+/[0-9]+(?:[ \t]*\[[^\]\n]*\])?"
    r"|\b(?:Process[ \t]+ID|pid)[ \t]*[:=]?[ \t]*[0-9]+"
    r"|\b(?i:eta)[ \t]*[:=]?[ \t]*(?:[0-9]+[ \t]*days?,[ \t]*)?[0-9]+:[0-9]{2}(?::[0-9]{2})?\b"
    r"|\b(?i:eta)[ \t]*[:=]?[ \t]*[0-9]+(?:\.[0-9]+)?[ \t]*(?i:s|secs?|seconds|m|mins?|minutes|h|hrs?|hours)\b"
)
"""A tqdm bar (``Iteration:  13%|#  | 321/2552 [05:02<32:00, 1.16it/s]``), a process id or a time left
printed as a clock (``ETA: 1:54:27``, whose hours a pair would read) or in a unit (``ETA 271.3 min``):
no metric."""
_CLOCK_VALUE: Final = re.compile(
    r"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]*(?:[ \t]+[A-Za-z_][A-Za-z0-9_]*){0,2}[ \t]*[:=][ \t]*"
    r"[0-9]+:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?![0-9:])"
)
"""A key whose value is printed as a clock, ``H:MM:SS`` (``Cost Time: 0:00:07``, ``Estimated Time: 16:49:10``):
an elapsed or remaining time, whose hours alone a pair would read as the value; no pair (round 22: f28b)."""
_TENSOR_SHAPE: Final = re.compile(r"\b(?:shape|size)[ \t]*=[ \t]*\[[0-9, \t]*\]")
"""A tensor's repr (``Tensor(shape=[1], dtype=float32, ...)``): its shape describes it, no metric (round 22:
f28b)."""
_RAY: Final = re.compile(r"^\((?:[A-Za-z_][A-Za-z0-9_.]*[ \t]+)?pid=[0-9]+(?:,[ \t]*ip=[0-9A-Fa-f.:]+)?\)[ \t]*")
_NOT_METRICS: Final = re.compile(
    r"^(?:[+$>][ \t]*)?(?:export|unset|source|srun|sbatch|salloc|torchrun|deepspeed|mpirun|accelerate[ \t]+launch"
    r"|python3?[ \t])|^#SBATCH|slurmstepd|^srun:|\*\*\* (?:JOB|STEP) [0-9]|^pdsh@"
)
"""Shell commands, SLURM and launcher messages: their ``NAME=1`` are settings, never metrics."""
_TOTAL_COUNTER: Final = re.compile(r"\b(?i:(total))[ \t]+(update|step)(?=[ \t]*[:=]?[ \t]*[0-9])")
"""``Epoch 002 / update 29 total update 00350``: the run's total counter beside a counter that restarts
each epoch is a key of its own (``total_update``), never a second value of the restarting one."""
_LOOP_VARIABLE: Final = re.compile(
    r"\b(?i:(batch|step|iter|iteration|update|episode))[ \t]+[a-z](?=[ \t]*[:=][ \t]*[0-9])"
)
"""``batch i:2`` (AlphaZero-Gomoku's self-play counter): a counter word with its one-letter loop variable
is that counter (``batch``), never a metric named ``i``."""
_COUNTER_LEAD: Final = re.compile(rb"^[ \t]*(?i:epoch|iter|iteration|step|batch)[ \t]*:[ \t]*$")
"""A step counter's name that looks like a host prefix (``Epoch: [0/520] Iter:[10/247]``): the line's own text."""
_CJK_GLUED: Final = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff])(?=[A-Za-z])")
"""A Chinese or Japanese character right before a Latin letter: those scripts put no space between words, so the
Latin word starts a word of its own (a resume note glued before a step line, ``中途中断了，继续Epoch [1/500], Step
[1/6], Loss: 0.54``: the line's epoch is 1), never the end of a word its key could not start inside (#31)."""
_OTHER_PHASES: Final = frozenset({"infer", "inference", "eval", "evaluation", "test", "val", "valid", "validation"})
"""A bare phase word timed beside the metrics (``Acc 13.52% | infer 4.5s``): a timer of the evaluation,
no training metric, kept out."""


def line_pairs(text: str) -> list[Pair]:
    """``(key, value, unit)`` of every pair in one line's own text (prefixes removed), with the
    ``[N]`` of a CLU-style line as key ``[N]``; empty for shell commands and launcher messages. A
    new list each call: callers may extend it."""
    return list(_parsed(text))


@functools.lru_cache(maxsize=CACHED_LINES)
def _parsed(text: str) -> tuple[Pair, ...]:
    raw = text.encode("utf-8", "replace")
    lead = LAUNCHER_LEAD.match(raw)
    lead = None if lead is not None and _COUNTER_LEAD.match(lead.group()) else lead  # 'Epoch: [0/520]'
    own = _CJK_GLUED.sub(r"\1 ", raw[lead.end() if lead else 0 :].decode("utf-8", "replace").strip())
    own = _NOT_PAIRS.sub(" ", _LOCATION.sub(" ", _RAY.sub("", own)))
    if ":" in own or "=" in own:
        own = _TENSOR_SHAPE.sub(" ", _CLOCK_VALUE.sub(" ", own))
    own = _LOOP_VARIABLE.sub(r"\1", _TOTAL_COUNTER.sub(r"\1_\2", rewrite(respelled(own))))
    if not own or _NOT_METRICS.search(own):
        return ()
    out: list[Pair] = []
    bracket = _BRACKET_STEP.match(own)
    if bracket:
        out.append((BRACKET_KEY, float(bracket["step"]), None))
    for m in _PAIR.finditer(own):
        if m["rate"] is not None:
            speed = parse_number(m["rval"])
            if speed is not None and speed > 0 and math.isfinite(speed):
                per_step = m["rate"].split("/")[0] in ("s", "sec")  # seconds per iteration, else a rate
                tokens = m["rate"].startswith(("tok", "word"))  # the throughput, under its alias 'tok/s'
                out.append(("tok/s", speed, None) if tokens else (SPEED_KEY, speed if per_step else 1.0 / speed, "s"))
            continue
        if m["ukey"] is not None:  # the key names its unit: 'train_step_timing in s' is NeMo's own name
            unit = m["punit"] or m["iunit"]
            key = m["ukey"] if m["punit"] or m["plural"] else f"{m['ukey']} in {unit}"
            number = parse_number(m["uval"])
            if number is not None:
                out.append((key.strip(), number, unit))
            continue
        key = m["qkey"] if m["qkey"] is not None else m["key"]
        value = m["qval"] if m["qval"] is not None else m["val"]
        number = parse_number(value)
        if m["unit"] in TIME_UNITS and normalise_key(key) in _OTHER_PHASES:
            continue  # 'infer 4.5s': the evaluation's timer
        if number is not None and m["trate"] is not None:  # under the alias of the tokens per second
            out.append(("tok/s", number * _MAGNITUDE.get(m["tmag"] or "", 1.0), None))
        elif number is not None and m["srate"] is not None:  # under the alias of the samples per second
            out.append(("samples/s", number, None))
        elif number is not None and not no_key(key, m["unit"]):  # 'on 320-sample draw': prose, no pair
            out.append((key.strip(), number * _MAGNITUDE.get(m["mag"] or "", 1.0), m["unit"]))
    return tuple(out)
