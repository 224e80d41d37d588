"""The raw text of a log before any reader's pattern sees it: its head, what is removed from its bytes
(ANSI colour codes, NUL padding), whether it is text at all, and the launcher and logger prefixes
(host, rank, time stamp, log level) that every text format may carry before a trainer's own text,
and the lines that are a launcher's or a shell's, not the trainer's."""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as _pc

from ingest.errors import StabScopeError
from ingest.formats.numbers import NUMBER

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays


def input_size(path: Path) -> int:
    """Bytes of a file, or of the files under a folder (0 when it cannot be read)."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_head(path: Path, nbytes: int = 256 * 1024) -> bytes:
    """The first ``nbytes`` of a file (b'' for a directory or an unreadable file)."""
    if path.is_dir():
        return b""
    try:
        with open(path, "rb") as f:
            return f.read(nbytes)
    except OSError:
        return b""


def open_error(path: Path, exc: OSError) -> StabScopeError:
    """The error for a file that cannot be opened at all."""
    return StabScopeError(f"cannot read file: {exc.strerror or exc}", path=str(path))


KEY_START: Final = r"(?<![A-Za-z0-9_/.@\-\u2190-\u21ff\u2200-\u22ff\u27f0-\u27ff\u2900-\u297f])(?<![^\W\d_])"
"""Where a ``key: value`` key may start: not inside a word, nor glued to an arrow or a math symbol
(``I↔T=1.5%`` is one key, never the pair ``T=1.5``), nor after a letter of any script."""
_ANSI: Final = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")

_HOST_NAME: Final = (
    r"(?:[A-Za-z][A-Za-z0-9_.-]*"  # node017, gpu-a100-017.cluster.local, localhost
    r"|[0-9]{1,3}(?:\.[0-9]{1,3}){3}"  # 192.168.205.202
    r"|[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}"  # fe80::1 (two colons at least: srun's ``7: `` is a rank)
    r"|\[[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*\])"  # [2001:db8::1]
)
"""A host as pdsh writes it before a remote node's lines: a host name, an IPv4 or IPv6 address."""
_LAUNCHER_HOST: Final = r"(?:" + _HOST_NAME + r":[ \t]+)?"
"""pdsh / DeepSpeed's multi-node runner: ``node017: ``, ``192.168.205.202: `` (a host names no rank)."""
_RANK_OPEN: Final = r"(?:[ \t]*\[(?:default|rank|[A-Za-z][A-Za-z0-9_.-]*:)|[ \t]*)"
_RANK_CLOSE: Final = r"(?:\]:[ \t]?|:[ \t])"
_LAUNCHER_RANK: Final = (
    r"(?:(?:" + _RANK_OPEN + r"[0-9]+" + _RANK_CLOSE + r")?" + _RANK_OPEN + r"(?P<lrank>[0-9]+)" + _RANK_CLOSE + r")?"
)
"""``torchrun --tee 3``'s ``[default7]:``, newer torchrun's ``[rank7]:`` (a blank before it where a log was pasted
into a note), ``srun -l``'s ``7: ``, a ``[host:7]:`` task label, and two of them nested (``srun -l`` around
torchrun: ``0: [default3]:``), whose inner one (the trainer process's own rank on its node) is the rank kept."""
_LAUNCHER_TIME: Final = (
    r"(?:\[?[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?Z?\]?[ \t]*(?:[-:][ \t]*)?)??"
)
"""A time stamp before the trainer's text (lazy: a reader that captures it itself still does), closed by
`` - `` or a colon (python logging's ``%(asctime)s:%(levelname)s:``)."""
_LAUNCHER_LEVEL: Final = (
    r"(?:(?:[A-Za-z_][A-Za-z0-9_.]*[ \t]+-[ \t]+)?\[?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]?"
    r"(?:(?::[A-Za-z0-9_.]*)*:)?[ \t]*(?:-[ \t]*)?"
    r"|[A-Za-z_][A-Za-z0-9_.]*[ \t]+(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL):[ \t]*)??"
)
"""A log level (``INFO``, ``[INFO]``, Python logging's ``INFO:root:``, ``name - INFO - `` or
``%(asctime)s %(name)s %(levelname)s: `` 's ``semantic_segmentation INFO: ``, round 22: f28b). The
logger's name components are the ones a ``:`` closes: in ``INFO:__main__:Epoch 1 | ...`` the text
starts at ``Epoch``, which is the message's, not the logger's."""
LAUNCHER_PREFIX: Final = _LAUNCHER_HOST + _LAUNCHER_RANK + _LAUNCHER_TIME + _LAUNCHER_LEVEL
"""What launchers and loggers put before a trainer's own text, as one regex matched at the line
start: host, rank (named group ``lrank``), time stamp, log level, each optional, in that order. The
text engine (:mod:`ingest.formats.textlog`) puts it before every line kind of every text format, so
detection and reading see through it alike. ANSI codes and NUL bytes are removed from the bytes
before (:func:`clean_text`)."""


_NOT_A_PAIR: Final = r"(?![ \t]*" + NUMBER + r"(?:[ \t,;|/%]|$))"
"""After ``name:``: not a number that ends there. A name before ``: NUMBER`` (``Step: 1 | Loss: ...``,
``Epoch: 3/10``, ``RAM: 63.4%``) is a ``key: number`` pair, not a host: a host's line goes on with
text, a rank (``node1: 7: ``) or a time stamp. (A lookahead: only in the Python patterns below, which
take the most they can; the layouts' lazy ``LAUNCHER_PREFIX`` tries the line start first anyway.)"""
_LEAD_HOST: Final = r"(?:" + _HOST_NAME + r":" + _NOT_A_PAIR + r"[ \t]+)?"
LAUNCHER_LEAD: Final = re.compile(
    (_LEAD_HOST + _LAUNCHER_RANK + _LAUNCHER_TIME + _LAUNCHER_LEVEL).replace(")??", ")?").encode()
)
"""``LAUNCHER_PREFIX`` taking all it can (bytes): where a line's own text starts at the latest.
Detection tries a format's line there and at the line start (which, with what is between, the
reader's lazy ``LAUNCHER_PREFIX`` also finds), instead of every way of splitting the prefix."""
_LAUNCHER_LEAD: Final = re.compile("^" + _LEAD_HOST + _LAUNCHER_RANK, re.M)
_RANK_LEAD: Final = re.compile("^" + _LAUNCHER_RANK, re.M)
_HOST_LEAD: Final = re.compile("^" + _HOST_NAME + r":" + _NOT_A_PAIR + r"[ \t]+", re.M)


def strip_launcher_prefixes(text: str) -> str:
    """``text`` with each line's rank prefix removed, and its host prefix where most lines carry
    one (``Overriding: max_iters = 3`` alone is text, not a host): what a reader's banner and
    argument-dump parsing (``meta_from_head``, ``markers``) sees, so that their line-anchored
    patterns fit a ``[default0]:``-prefixed log as they fit a bare one."""
    lines = text.count("\n") + 1
    if len(_HOST_LEAD.findall(text)) * 2 > lines - text.count("\n\n"):
        return _LAUNCHER_LEAD.sub("", text)
    return _RANK_LEAD.sub("", text)


def clean_text(chunk: bytes) -> bytes:
    """``chunk`` without ANSI colour codes (with or without their escape byte) and NUL bytes (a node's
    log cut by a crash is padded with
    NULs where the file system had allocated blocks not yet written)."""
    if b"[" in chunk:  # every colour code holds one: a chunk without is scanned once, not twice
        if b"\x1b" in chunk:
            chunk = _ANSI.sub(b"", chunk)
        if _RESET_CODE.search(chunk):  # faster than ``b"[0m" in chunk``
            chunk = _LITERAL_ANSI.sub(b"", chunk)
    if b"\x00" in chunk:
        chunk = chunk.replace(b"\x00", b"")
    return chunk


def holds_match(text: str, re2_pattern: str) -> bool:
    """Whether the RE2 ``re2_pattern`` matches anywhere in ``text``'s UTF-8 bytes. One scan of a long
    head in Arrow's RE2 automaton, where Python's ``re`` tries every branch of an alternation (or a
    look-behind) at every character; an ASCII pattern finds in the bytes just what it finds in the
    text, since every other character's bytes are all non-ASCII."""
    data = text.encode("utf-8", "surrogatepass")
    return bool(pc.match_substring_regex(pa.array([data], pa.binary()), re2_pattern)[0].as_py())


_RESET_CODE: Final = re.compile(rb"\[0m")
"""The reset code without its escape byte: a chunk holding none is taken to hold no lost colour codes. Searched
as a regex, which on metric lines takes half the time of ``in`` (docs/performance.md, the import report's cost)."""

_LITERAL_ANSI: Final = re.compile(rb"(?m)^(?:\[[0-9]{1,3}(?:;[0-9]{1,3})*m)+|\[[0-9]{1,3}(?:;[0-9]{1,3})*m(?=\r?$)")
"""Colour codes whose escape byte a copy lost (a console pasted into Markdown: ``[1m --> STEP: 99[0m``),
at a line's start or end: removed as the codes are (docs/diagnosis.md, "Import: readers and prefixes")."""


def lines_at(text: str, offsets: Iterable[int]) -> set[int]:
    """The indices (in ``text.splitlines()``) of the lines holding the characters at ``offsets``, each with
    the line after it (where a dump's wrapped value stands): what a head scan searches once its key words are
    found, instead of running a look-behind regex at every character of a head of metric lines."""
    ends = list(itertools.accumulate(len(line) for line in text.splitlines(keepends=True)))
    hit = {bisect.bisect_right(ends, i) for i in offsets}
    return {j for i in hit for j in (i, i + 1) if j < len(ends)}


def decode_head(head: bytes) -> str:
    """Head bytes as text (invalid UTF-8 replaced); a partial last line is dropped."""
    cut = head.rfind(b"\n")
    if 0 < cut < len(head) - 1:
        head = head[: cut + 1]
    return clean_text(head).decode("utf-8", errors="replace")


_TEXT_CONTROLS: Final = bytes(range(32)).translate(None, b"\t\n\r\x0c\x1b")
"""Control bytes a text log does not hold (NUL aside: see :func:`looks_binary`)."""


def looks_binary(head: bytes) -> bool:
    """True when the head is not text: NUL bytes, unless they are only the padding of a cut log
    (then the rest holds no other control byte)."""
    sample = head[:4096]
    if b"\x00" not in sample:
        return False
    rest = head.replace(b"\x00", b"")[:4096]
    return not rest or len(rest.translate(None, _TEXT_CONTROLS)) < len(rest)


# --------------------------------------------------------------------------- what a line is


_LEAD: Final = re.compile(LAUNCHER_PREFIX.replace(")??", ")?").encode() + rb"[ \t]*")
_SHELL_COMMAND: Final = re.compile(
    rb"(?:[+$>][ \t]*)?(?:export|unset|source|srun|sbatch|salloc|torchrun|deepspeed|mpirun|accelerate[ \t]+launch"
    rb"|python3?[ \t]+(?:-m[ \t]+|-u[ \t]+)*[^\s=]+)[ \t]+(?![ \t]|\.\.)"  # not a dump's 'deepspeed .... True'
    rb"|#SBATCH[ \t]"
)
"""A shell command (a README's ``export HF_DATASETS_OFFLINE=1``, ``bash -x``'s ``+ export ...``, a
launch command): its ``NAME=1`` is a setting, not a metric, whatever pairs a format would see in it."""
LAUNCHER_MESSAGE: Final = re.compile(
    rb"slurmstepd(?:-[A-Za-z0-9_.-]+)?:|srun: (?:error|warning|Job step|Force)|\*\*\* (?:JOB|STEP) [0-9]|pdsh@"
)
"""Where SLURM or pdsh writes into a line (its stderr interleaved with the trainer's stdout:
``slurmstepd: error: *** JOB 123456 ON node017 CANCELLED AT ... ***``): no metric from there on."""


def own_start(line: bytes) -> int:
    """Where ``line``'s own text starts, behind any launcher prefix."""
    lead = _LEAD.match(line)
    return lead.end() if lead else 0


def own_text(line: bytes) -> str:
    """``line``'s own text (behind any launcher prefix), decoded."""
    return line[own_start(line) :].decode("utf-8", "replace")


def is_shell_command(line: bytes) -> bool:
    """Whether ``line``'s own text, behind any launcher prefix, is a shell command."""
    lead = _LEAD.match(line)
    return _SHELL_COMMAND.match(line, lead.end() if lead else 0) is not None


BARE_PREFIX: Final = re.compile(LAUNCHER_PREFIX.encode() + rb"[ \t\r]*")
"""A line that is a launcher prefix alone (an empty line of the trainer's): blank, not skipped."""
