"""The numeric precision a log's own settings dump states, recorded as ``meta['precision']``.

The actions of a diagnosis ask for the run's precision when the metadata lacks it ("record the run's
precision", "log the fp16 loss scale"); a log that prints its settings already answers. A settings dump
is an argparse ``Namespace(...)`` repr, a dict/JSON/YAML config, ``key: value`` banners or a
hydra/omegaconf print; each spells a setting as ``key=value`` or ``key: value``. The rule, for any
dump in the log's head:

- a mixed-precision setting turned on decides: ``fp16=True``, ``bf16: true``, ``amp=True`` /
  ``use_amp`` (torch/apex autocast: fp16 unless an ``amp_dtype`` says otherwise),
  ``mixed_precision: bf16``, ``precision: 16-mixed``, ``amp_dtype='bfloat16'``;
- else a compute dtype: ``dtype='float32'``, ``train_dtype: bfloat16``, ``compute_dtype=float16``;
- else the fp16 switch stated off (``fp16=False``, ``amp: false``, ``use_amp=False``) with no
  other precision key on: fp32, the default of every framework that has such a switch;
- a banner that names the compute dtype, in any case and with torch's spelling (LLaMA-Factory's
  ``compute dtype: torch.bfloat16``, ``COMPUTE_DTYPE: torch.bfloat16``), counts as a dtype: the key
  says it is the setting the run computes in, not a tensor's dtype;
- else torch's warning ``ComplexHalf support is experimental`` (a complex half tensor was created:
  an FFT or STFT under fp16 autocast; bf16 has no complex type) reads as fp16: the run computes
  in fp16 somewhere, which is what the fp16 actions ask (docs/diagnosis.md, "Actions and claims");
- else (before the switch stated off, which a bf16 autocast leaves off) a log that dumps its training
  script (a line ``import torch``) states the precision its code runs in: every
  ``autocast(..., dtype=torch.bfloat16)`` context of the script naming one literal dtype, none turned
  off by a literal (``enabled=False``), reads as that dtype (round 22 f28d, issue #32: a parameter-golf
  log dumps its ``train_gpt.py`` before its records). One ``with torch.autocast(...)``
  line alone (a traceback's frame) is no dump of the code that ran and is not read; a dtype chosen at
  run time (``dtype=amp_dtype``, ``... if bf16 else ...``) names none.

Two different precisions stated (relaunches with other settings, a dump and a contradicting flag
of the same rank) record nothing: the question stays open rather than answered wrongly. A tensor
printed with its dtype (``tensor(..., dtype=torch.float16)``) is a value, not a setting, and a model
config's ``torch_dtype`` is the dtype its weights were saved in, not how it trains: neither is read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

from ingest.formats.raw_text import holds_match, lines_at, looks_binary, read_head

HEAD_BYTES: Final = 2 * 1024 * 1024
"""How much of a log's start is searched for its settings dump (the same span model_experts reads)."""

_SEP: Final = r"""["']?\s*[=:]\s*["']?"""
"""Between a key and its value: ``=`` (Namespace, dataclass), ``:`` (JSON, YAML, banners); quotes."""

_KEY_START: Final = r"""(?:(?<=^)|(?<=[\s,({'"]))-{0,2}"""
"""A key starts a line, follows a separator of a dump, or is a ``--flag``."""

_ON_FLAG: Final = re.compile(
    _KEY_START
    + r"(fp16|bf16|half|use_fp16|use_bf16|amp|use_amp|enable_amp|mixed_precision)"
    + _SEP
    + r"(True|true|1|yes)(?![\w.-])"
)
"""A mixed-precision switch turned on (``mixed_precision: true`` says mixed, not which: fp16 by default)."""

_OFF_FLAG: Final = re.compile(
    _KEY_START + r"(fp16|half|use_fp16|amp|use_amp|enable_amp)" + _SEP + r"(False|false|0|no)(?![\w.-])"
)
"""The fp16/autocast switch stated off."""

_NAMED: Final = re.compile(
    _KEY_START
    + r"(mixed_precision|precision|amp_dtype|autocast_dtype|amp_level)"
    + _SEP
    + r"(?:torch\.)?(bf16|fp16|fp32|bfloat16|float16|float32|half|16-mixed|bf16-mixed|32-true|16|32|O1|O2|O3)(?![\w.-])"
)
"""A precision named by a mixed-precision key (Lightning's ``16-mixed``, apex's opt levels)."""

_DTYPE: Final = re.compile(
    _KEY_START
    + r"(dtype|train_dtype|compute_dtype|training_dtype)"
    + _SEP
    + r"(bfloat16|float16|float32|bf16|fp16|fp32|half)(?![\w.-])"
)
"""The dtype a run computes in, as a dump prints it: a string or a bare word (``dtype='float32'``,
``dtype: bf16``). ``dtype=torch.float32`` is how code or a tensor spells a dtype, not a setting."""

_COMPUTE_DTYPE: Final = re.compile(
    r"(?i)"
    + _KEY_START
    + r"compute[ _]dtype"
    + _SEP
    + r"(?:torch\.)?(bfloat16|float16|float32|bf16|fp16|fp32|half)(?![\w.-])"
)
"""A compute dtype a banner states, any case, torch's spelling allowed: the key makes it a setting (a
prefixed key such as ``bnb_4bit_compute_dtype``, a quantised layer's dtype, does not start a key)."""

_COMPLEX_HALF: Final = re.compile(r"ComplexHalf support is experimental")
"""Torch's warning on creating a complex half tensor: fp16 compute (no complex bfloat16 exists)."""

_SCRIPT: Final = re.compile(r"(?m)^import torch\b")
"""A dumped training script: its own ``import torch`` line (a traceback quotes frames, never imports)."""

_AUTOCAST: Final = re.compile(r"autocast\(([^()]*)\)")
"""An autocast context of dumped code, its arguments (no nested call: ``dtype=get()`` names none)."""

_AUTOCAST_DTYPE: Final = re.compile(r"\bdtype\s*=\s*torch\.(bfloat16|float16|half)\s*(?:,|$)")
"""A literal dtype among an autocast's arguments (a run-time choice, ``dtype=torch.bfloat16 if ...``, is
not followed by a comma or the end of the arguments)."""

_NOT_A_DUMP: Final = re.compile(r"(?i)tensor\b|tensor\(|torch_dtype|autocast\(|\.to\(|^\s*(?:with|def|return|if)\b")
"""Lines whose dtype is a value, not a setting: a tensor printed (``tensor(..., dtype=...)``, TF's
``<tf.Tensor ... dtype=float32>``), code (``with torch.autocast(...)``, ``x.to(dtype=...)``) and a model
config's ``torch_dtype`` (the dtype its weights were saved in, not how it trains)."""

_KEYWORD: Final = re.compile(r"fp16|bf16|half|Half|(?<![A-Za-z])amp|precision|dtype|DTYPE")
"""A word every key above holds: only lines with one (and the line after, where a value may stand) are
searched, so a head of metric lines costs one cheap scan, not five lookbehind searches (``amp`` as a word
start: a metric line's ``consumed samples`` holds none)."""

_KEYWORD_LITERALS: Final = re.compile(r"fp16|bf16|half|Half|precision|dtype|DTYPE")
"""``_KEYWORD`` less its ``amp``: plain words, found in one fast scan of the whole text."""

_KEYWORD_RE2: Final = r"fp16|bf16|half|Half|(?:^|[^A-Za-z])amp|precision|dtype|DTYPE"
"""``_KEYWORD`` for RE2 (no look-behind: the character before ``amp`` is matched instead), which tells in
one scan whether the text holds a word at all: a head of metric lines, which holds none, costs no line
search (``consumed samples`` gives every Megatron line an ``amp`` to check one by one)."""


def _keyword_lines(text: str) -> set[int]:
    """The indices (in ``text.splitlines()``) of the lines ``_KEYWORD`` finds a word in, each with the line
    after: one scan for the plain words and one for ``amp``, whose word start is checked here (a metric
    line's ``consumed samples`` holds ``amp``: the regex run line by line cost most of this module's time)."""
    if not holds_match(text, _KEYWORD_RE2):
        return set()
    starts = [m.start() for m in _KEYWORD_LITERALS.finditer(text)]
    starts += [i for i in _find_all(text, "amp") if i == 0 or not _is_ascii_letter(text[i - 1])]
    return lines_at(text, starts)


def _find_all(text: str, word: str) -> list[int]:
    found, i = [], text.find(word)
    while i >= 0:
        found.append(i)
        i = text.find(word, i + 1)
    return found


def _is_ascii_letter(char: str) -> bool:
    return ("a" <= char <= "z") or ("A" <= char <= "Z")


_CANON: Final = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "bf16-mixed": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "16-mixed": "fp16",
    "16": "fp16",
    "o1": "fp16",
    "o2": "fp16",
    "o3": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "32-true": "fp32",
    "32": "fp32",
}


def _one(values: set[str]) -> str | None:
    """The precision when exactly one is stated, else None (none, or a contradiction)."""
    return next(iter(values)) if len(values) == 1 else None


def stated_precision(text: str) -> str | None:
    """``fp16``, ``bf16`` or ``fp32`` as the settings dumps in ``text`` state it (module docstring),
    None when they state none or contradict each other."""
    near = _keyword_lines(text)  # each with the line after: a value may wrap
    every = text.splitlines() if near else []
    lines = [every[i] for i in sorted(near) if i < len(every) and not _NOT_A_DUMP.search(every[i])]
    body = "\n".join(lines)
    explicit: set[str] = set()
    autocast = False
    for m in _ON_FLAG.finditer(body):
        key = m.group(1).lower()
        if key in ("amp", "use_amp", "enable_amp", "mixed_precision"):
            autocast = True  # mixed precision on, its dtype said elsewhere or fp16 by default
        else:
            explicit.add("bf16" if key in ("bf16", "use_bf16") else "fp16")
    named = {_CANON[m.group(2).lower()] for m in _NAMED.finditer(body)}
    dtypes = {_CANON[m.group(2).lower()] for m in _DTYPE.finditer(body)}
    dtypes |= {_CANON[m.group(1).lower()] for m in _COMPUTE_DTYPE.finditer(body)}
    explicit |= named - {"fp32"}
    if explicit:
        return _one(explicit)
    if autocast:
        return _one(dtypes - {"fp32"}) if dtypes - {"fp32"} else "fp16"
    if dtypes or named:
        return _one(dtypes | named)
    script = _script_autocast(text)  # the code that ran outranks an fp16 switch stated off (bf16 autocast)
    if script is not None:
        return script
    if _OFF_FLAG.search(body):
        return "fp32"
    return "fp16" if _COMPLEX_HALF.search(text) else None  # a warning line, not a dump: the whole text


def _script_autocast(text: str) -> str | None:
    """The one dtype every autocast context of a dumped training script names (module docstring), else None."""
    if "import torch" not in text or not _SCRIPT.search(text):  # ``in`` first: the regex tries every line start
        return None
    named: set[str] = set()
    for m in _AUTOCAST.finditer(text):
        args = m.group(1)
        if re.search(r"\benabled\s*=\s*False\b", args):
            continue  # a context turned off computes in fp32: it states no mixed precision
        dtype = _AUTOCAST_DTYPE.search(args.strip())
        if dtype is None:
            return None  # a context whose dtype is chosen at run time: the script does not say
        named.add(_CANON[dtype.group(1)])
    return _one(named)


def note_precision(meta: dict[str, Any], paths: list[Path]) -> None:
    """``meta['precision']`` from the first text file's head, unless the reader already set it."""
    if "precision" in meta or not paths or not paths[0].is_file():
        return
    head = read_head(paths[0], HEAD_BYTES)
    if not head or looks_binary(head):
        return
    precision = stated_precision(head.decode("utf-8", "replace"))
    if precision is not None:
        meta["precision"] = precision
