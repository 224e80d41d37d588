"""A training stage printed as plain step lines before a Hugging Face / TRL console's logs dicts (issue #31).

A pipeline that runs two trainers in one process (a custom SFT loop, then TRL's GRPO trainer) prints the
first stage's progress as its own step lines, ``  step 10/611  loss=12.1181  lr=1.97e-04``, and the second
stage's as the Trainer's dicts. The rule: step lines before the first training dict, each with a step
counter (``step``, ``iter``, ``global_step`` ...) and a value the alias table names the loss, on
:data:`MIN_STAGE_LINES` lines or more, are a stage of their own: a run before the dicts' run (its records
keep their own step axis, so the dicts, counting from their first step again, start the next run). A line
of that shape after the first dict is no stage (a callback echoing the Trainer's metrics) and is not read.
"""

from __future__ import annotations

import math
from typing import Final

from ingest.formats.aliases import canonical_name, normalise_key
from ingest.formats.generic_steps import STEP_NAME_SET
from ingest.formats.line_pairs import line_pairs

MIN_STAGE_LINES: Final = 3
"""Step lines a stage must print: one or two such lines are a message, not a stage's progress."""


def stage_record(line: str) -> tuple[int, dict[str, float]] | None:
    """``(step, {name as stored: value})`` of a stage's step line, or None for any other line."""
    pairs = line_pairs(line)
    steps = [v for k, v, _ in pairs if normalise_key(k) in STEP_NAME_SET and math.isfinite(v) and v == int(v)]
    if len(steps) != 1 or steps[0] < 0:
        return None
    values = {canonical_name(k)[0]: v for k, v, u in pairs if normalise_key(k) not in STEP_NAME_SET and u is None}
    return (int(steps[0]), values) if "loss" in values else None
