"""The expert count a log's own model description states, recorded as ``meta['num_experts']``.

Question 4 of the diagnosis tree (MoE router seesaw?) is settled for a dense model by
``num_experts = 1`` in the run's metadata. A log states its model when it prints the model's
arguments or config: a Megatron-LM/DeepSpeed/NeoX ``---- arguments ----`` block, an argparse
``Namespace(...)`` line, a dataclass repr such as torchtitan's ``TransformerModelArgs(...)``, llm.c's
parameter table or a JSON/YAML config. Such a dump lists the model's layer count; an MoE model's dump
also lists its experts (``num_experts``, ``n_routed_experts``, ``num_local_experts``, ...), since those
trainers print every model argument. So:

- an expert count in the dump is the run's (``None``/``null``/0: Megatron's and DeepSeek's way of
  saying dense, i.e. 1);
- a dump with a layer count (or the layer key left ``None`` for a named preset) and no expert key at
  all states a dense model: 1;
- an MoE switch without a count (``moe_enabled=True``), or nothing of the model printed: nothing is
  recorded (the question stays open and the run's status asks for the expert load).

A model named in a banner (``Llama-2-7b``) is not read: only what the log states of its arguments.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

from ingest.formats.raw_text import holds_match, lines_at, looks_binary, read_head

HEAD_BYTES: Final = 2 * 1024 * 1024
"""How much of a log's start is searched for its model arguments (Megatron prints them after the
launcher's and DeepSpeed's start-up lines: ~100 KB into a 32-rank log)."""

_SEP: Final = r"""["']?\s*(?:[=:|]|\.{2,})\s*["']?"""
"""Between a key and its value: ``=`` (Namespace, dataclass), ``:`` (JSON, YAML), ``|`` (llm.c's
table), a dotted leader (Megatron's arguments block); quotes of JSON keys and values."""

_LAYERS: Final = re.compile(
    r"(?<![\w.])(?:num_layers|n_layers|nlayers|n_layer|num_hidden_layers|decoder_layers)(?:\s+[A-Z])?"
    + _SEP
    + r"(\d+|None)\b"
)
"""A model's layer count as a model dump prints it (``num_layers L | 12`` in llm.c's table), or left
unset (minGPT's config prints ``n_layer: None`` when its ``model_type`` preset, ``gpt-nano``, sets the
size): the dump still lists every model argument, so no expert key means no experts. The
look-behind keeps ``checkpoint_num_layers`` (an activation-checkpointing setting) out."""

_EXPERTS: Final = re.compile(
    r"(?<![\w.])(?:num_experts|n_routed_experts|num_local_experts|moe_num_experts|num_moe_experts|n_experts)"
    + _SEP
    + r"(\[[^\]]*\]|[^\s,)|}\]]*)"
)
"""An expert count and the value printed: a number; ``None``/``null``/``[]``: no experts (Megatron
prints ``num_experts .... None``); a list (NeoX's per-layer counts ``[8]``): its largest."""


def _count(value: str) -> int | None:
    """Experts a printed value states (0: none), None when it cannot be read as a count."""
    value = value.strip("\"'")
    if value in ("None", "null", "[]", "~"):
        return 0
    numbers = re.findall(r"\d+", value)
    if numbers and re.fullmatch(r"\[?[\d\s,]+\]?", value):
        return max(int(n) for n in numbers)
    return None


_MOE_SWITCH: Final = re.compile(
    r"(?<![\w.])(?:moe_enabled|use_moe|moe|enable_moe|is_moe)" + _SEP + r"(?:True|true|1)\b"
)
"""An MoE switch turned on: the model has experts even when no count is printed."""


_KEY_WORD: Final = re.compile("layer|expert|moe")
"""A word every key of ``_LAYERS``, ``_EXPERTS`` and ``_MOE_SWITCH`` holds (plain words: one fast scan)."""


def _key_lines(text: str) -> str:
    """The lines of ``text`` that hold a key word, each with the line after (where a wrapped value
    stands): the three searches on them find what they find on the whole text (all 517 corpus logs alike;
    only a value two line breaks after its key would be missed, which no dump prints)."""
    if not holds_match(text, _KEY_WORD.pattern):  # one RE2 scan: a head of metric lines holds no key word
        return ""
    every = text.splitlines()
    return "\n".join(every[i] for i in sorted(lines_at(text, (m.start() for m in _KEY_WORD.finditer(text)))))


def stated_num_experts(text: str) -> int | None:
    """The expert count ``text`` (a log's head) states for its model: the largest count its dumps print
    (``None``/0 count as 1); 1 for a dump with a layer count and no expert key; None when it states
    no model dump or switches MoE on without a count."""
    text = _key_lines(text)
    printed = _EXPERTS.findall(text)
    if printed:
        counts = [_count(v) for v in printed]
        if any(c is None for c in counts):
            return None  # an expert key whose value is not a count: the model is not known to be dense
        return max(1, *(c for c in counts if c is not None))
    if _MOE_SWITCH.search(text) or not _LAYERS.search(text):
        return None
    return 1


def note_num_experts(meta: dict[str, Any], paths: list[Path]) -> None:
    """``meta['num_experts']`` from the first text file's head, unless the reader already set it."""
    if "num_experts" in meta or not paths or not paths[0].is_file():
        return
    head = read_head(paths[0], HEAD_BYTES)
    if not head or looks_binary(head):
        return
    experts = stated_num_experts(head.decode("utf-8", "replace"))
    if experts is not None:
        meta["num_experts"] = experts
