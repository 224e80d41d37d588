"""The console of Microsoft's Swin-Transformer ``main.py`` (a timm-based trainer; read by
:class:`ingest.formats.timm_console.TimmConsoleReader`)::

    [2024-09-04 20:35:07 swin_base] (main.py 257): INFO Full config saved to output/.../config.json
    [...] (main.py 257): INFO Train: [0/300][0/4]	eta 0:00:03 lr 0.000000	 wd 0.0500	time 0.9720 (0.9720)
        loss 15.1780 (15.1780)	grad_norm 188.4493 (188.4493)	loss_scale 65536.0000 (65536.0000)	mem 3277MB
    [...] (main.py 300): INFO Test: [0/4]	Time 0.325 (0.325)	Loss 13.2662 (13.2662)	MAE 3.491 (3.491)
    [...] (main.py 306): INFO  * Average Loss: 18.0025, Average MAE: 3.991        (or ' * Acc@1 81.2 Acc@5 95.5')

Rules (docs/diagnosis.md, "Rules added in round 24"):

- A ``Train: [E/T][b/N]`` line prints ``key value (running mean)`` pairs: the first number is the step's
  (``time`` is the step's seconds, ``mem`` its memory in MB); ``eta`` is the time left, no metric.
- The step is ``E * N + b``, except where every train line of the file is batch 0 of its epoch (the print
  interval is longer than the epoch): one record per epoch, and its step is the epoch ``E``.
- The `` * `` line closing an evaluation holds the epoch's results (``Average Loss`` is ``val_loss``,
  ``Acc@1`` is ``val_acc@1``), at the step of the train line before it in the same launch; the per-batch
  ``Test:`` lines are progress (their running means end in the `` * `` line).
- A launch that resumes from epoch ``E``'s checkpoint (``=> loaded successfully '...' (epoch E)``) evaluates it
  before its first train line: that evaluation is at epoch ``E``'s last step.
- ``Full config saved to`` is the first line ``main.py`` prints: each one starts a launch, its own run.
"""

from __future__ import annotations

import re
from typing import Final

from ingest.formats.aliases import canonical_name
from ingest.formats.numbers import NUMBER, parse_number

TRAIN: Final = re.compile(r"(?:^|[ \t])Train:[ \t]*\[(?P<epoch>[0-9]+)/[0-9]+\]\[(?P<batch>[0-9]+)/(?P<n>[0-9]+)\]")
"""Swin's train line: epoch ``E`` of ``T``, batch ``b`` of the epoch's ``N``."""
TEST: Final = re.compile(r"(?:^|[ \t])Test:[ \t]*\[[0-9]+/[0-9]+\]")
SUMMARY: Final = re.compile(r"(?:^|[ \t]|INFO)[ \t]*\*[ \t]+(?=[A-Za-z])")
"""The `` * `` that opens an evaluation's closing line."""
RESUMED: Final = re.compile(r"=> loaded successfully .*\(epoch (?P<epoch>[0-9]+)\)")
"""A launch resumed from a checkpoint of epoch ``E``: the evaluation it runs before training is epoch ``E``'s."""
BANNER: Final = re.compile(r"\bFull config saved to\b")
"""The first line a Swin ``main.py`` launch prints."""
_PAIR: Final = re.compile(
    r"(?<![^ \t])(?P<key>[A-Za-z][A-Za-z0-9_@]*)[ \t]+(?P<val>" + NUMBER + r")(?P<unit>MB|s)?(?=[ \t(]|$)"
)
_SUMMARY_PAIR: Final = re.compile(
    r"(?P<key>[A-Za-z][A-Za-z0-9_@]*(?: [A-Za-z][A-Za-z0-9_@]*)?):?[ \t]+(?P<val>" + NUMBER + r")%?"
)
_TRAIN_KEYS: Final = {"time": ("step_time_s", None), "mem": ("gpu_mem_gb", "MB"), "eta": None}


def train_pairs(text: str, start: int) -> list[tuple[str, str | None, float]]:
    """``(metric, unit, value)`` of a train line's pairs after ``start``: each pair's first number."""
    out = []
    for pair in _PAIR.finditer(text, start):
        key = pair["key"]
        value = parse_number(pair["val"])
        if value is None or (key in _TRAIN_KEYS and _TRAIN_KEYS[key] is None):
            continue
        metric, unit = _TRAIN_KEYS.get(key) or canonical_name(key)
        out.append((metric, unit or (pair["unit"] if pair["unit"] == "MB" else None), value))
    return out


def summary_pairs(text: str, start: int) -> list[tuple[str, float]]:
    """``(metric, value)`` of an evaluation's closing line: ``Average Loss: 1.2`` -> ``val_loss``."""
    out = []
    for pair in _SUMMARY_PAIR.finditer(text, start):
        value = parse_number(pair["val"])
        if value is None:
            continue
        key = re.sub(r"^(?:average|avg|mean) ", "", pair["key"].strip(), flags=re.IGNORECASE)
        out.append(("val_" + canonical_name(key)[0].lower(), value))
    return out
