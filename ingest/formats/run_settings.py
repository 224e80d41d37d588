"""The settings markdown notes state for each run they paste: what makes two runs' throughput comparable.

Notes that paste several runs of one file (:mod:`ingest.formats.sections`) are often a story of
changes: "Switched to cuda and trained the model with bf16 precision", then "Changed n_layers from 6
to 12", each before its excerpt, whose own first lines say ``Using device: cuda`` and
``1 epoch = 20 batches``. Runs of such notes are not a sweep of one configuration, and one's
tokens/s against the others' says nothing about a slow node. A run is compared with another run of
the same file only when the settings the notes state for both agree (``ingest.services.run_findings``).

Only settings that change what a step computes or where it runs are read: the device, the numeric
precision, the batch (``batch_size``, ``global batch size``, the batches one epoch takes: the tokens
per batch of a fixed data set), the sequence length and the model's shape (layers, heads, width; a
network named by its family and depth, ``resnet50`` in a heading or an argparse dump).
A parallel layout (``TP=4/PP=12``) or a node count is not one: a perf sweep of layouts of one model
is what a sibling comparison is for (BigScience's reshaping log).

Notes that narrate their runs say what each one changed in a sentence between two excerpts ("Added
torch.compile() to speed up the model training"); notes of a sweep separate their runs by headings
(``## Just NCCL``) or configuration lines (``TP=4/PP=12/MBS=2/Nodes=24``). A prose line between two
runs is kept as the later run's ``described change``: two runs with different ones are different
configurations. Prose before the first run is the notes' introduction, of every run.

A setting stated inside a run's excerpt, or in the text before it (after the run before), is that
run's; the last value stated wins.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

SETTING_PATTERNS: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("device", re.compile(r"\b(?:using|on)\s+device\s*[:=]\s*['\"]?([A-Za-z]+)", re.IGNORECASE)),
    ("precision", re.compile(r"\b(bf16|fp16|fp32|tf32|float16|bfloat16|float32)\s+precision\b", re.IGNORECASE)),
    ("precision", re.compile(r"\bprecision\s*[:=]\s*['\"]?(bf16|fp16|fp32|tf32|float16|bfloat16|float32)\b")),
    ("batches per epoch", re.compile(r"\b1\s+epoch\s*=\s*(\d+)\s+batches\b")),
    ("batch size", re.compile(r"(?<![\w.])(?:batch_size|global_batch_size|total_batch_size)\s*[:=]\s*(\d+)\b")),
    ("sequence length", re.compile(r"(?<![\w.])(?:seq_len|seq_length|block_size|max_seq_len)\s*[:=]\s*(\d+)\b")),
    (
        "model",
        re.compile(
            r"(?<![\w.])(n_layers?|num_layers|n_heads?|num_heads|n_embd|hidden_size|d_model)"
            r"\s*(?:from\s+\d+\s+to|[:=])\s*(\d+)"
        ),
    ),
    # the network a heading or a config names by its family and depth ('## MNIST resnet50 backbone',
    # "backbone='resnet18'"): two runs of other depths are other models
    ("model", re.compile(r"(?i)(?<![\w.])(resnet|resnext|wide_resnet|wrn|vgg|densenet|efficientnet-?b)[-_]?(\d+)\b")),
    # the parameter count a model summary prints (Keras' and torchinfo's 'Total params: 1,277,534'): runs
    # of other sizes are other models (docs/diagnosis.md, "Run status")
    ("model", re.compile(r"^\s*(total params)\s*:\s*(\d[\d,]*)\s*$", re.IGNORECASE)),
)
"""``(setting, pattern)``: the first group is the value stated (for ``model``: the key, then the value)."""


DESCRIBED_CHANGE: Final = "described change"
_WORD: Final = re.compile(r"[A-Za-z]{2,}")
_PAIR: Final = re.compile(r"\b[A-Za-z][\w.-]*=\S")


def is_prose(line: str) -> bool:
    """A sentence of the notes' own text: four words or more, no heading, no ``KEY=VALUE``
    configuration line, no table row."""
    text = line.strip()
    if not text or text.startswith(("#", "|", ">")) or _PAIR.search(text):
        return False
    return len(_WORD.findall(text)) >= 4


def stated_settings(lines: Sequence[str]) -> list[tuple[int, str, str]]:
    """``(1-based line, setting, value)`` for each setting ``lines`` state; a model change is kept
    as its new value (``Changed n_layers from 6 to 12``: ``model n_layer``, ``12``)."""
    found = []
    for number, line in enumerate(lines, start=1):
        if len(line) > 2000:  # a pasted table row or a blob, not a sentence stating a setting
            continue
        for setting, pattern in SETTING_PATTERNS:
            for m in pattern.finditer(line):
                if setting == "model":  # n_layers and n_layer name one setting
                    found.append((number, f"model {m.group(1).lower().rstrip('s')}", m.group(2)))
                else:
                    found.append((number, setting, m.group(1).lower()))
    return found


def settings_by_run(settings: Sequence[tuple[int, str, str]], spans: Sequence[tuple[int, int]]) -> list[dict[str, str]]:
    """The settings of each run whose rows span ``(first, last)`` sequence numbers (file order):
    a setting at ``seq`` belongs to the run whose span holds it, else to the first run starting after
    it, else to none (text after the last run); a described change before the first run to none."""
    out: list[dict[str, str]] = [{} for _ in spans]
    first = min((lo for lo, hi in spans if hi >= lo), default=0)
    for seq, setting, value in sorted(settings):
        if setting == DESCRIBED_CHANGE and seq < first:
            continue  # the notes' introduction
        owner = next((i for i, (lo, hi) in enumerate(spans) if lo <= seq <= hi), None)
        if owner is None:
            later = [(lo, i) for i, (lo, _) in enumerate(spans) if lo > seq]
            owner = min(later)[1] if later else None
        if owner is not None:
            out[owner][setting] = value
    return out


def settings_text(settings: dict[str, str]) -> str:
    """The settings as the sibling sentence names them: ``device cuda, 1 epoch = 20 batches``."""
    parts = []
    for setting, value in sorted(settings.items()):
        if setting == DESCRIBED_CHANGE:
            parts.append(f"{setting} {value!r}")
        elif setting == "batches per epoch":
            parts.append(f"1 epoch = {value} batches")
        elif setting.startswith("model "):
            parts.append(f"{setting[6:]} {value}")
        else:
            parts.append(f"{setting} {value}")
    return ", ".join(parts)
