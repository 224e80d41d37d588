"""The planned step count a log states, recorded as ``meta['planned_steps']``.

Readers already keep the total a log prints as ``total_steps`` (Megatron's ``iteration N/ M``, llm.c's
``step N/M``, modded-nanogpt's ``step:N/M``, torchtitan's ``total steps M``, LLaMA-Factory's
``total_steps``, the HF Trainer's ``max_steps``); ``planned_steps`` is the key the run status and the
diagnosis read. A value already there (from a config, or set by the user) is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ingest.formats._common import LogBuilder
from ingest.formats.textlog import TextLogReader


def note_planned_steps(meta: dict[str, Any]) -> None:
    """``meta['planned_steps']`` from a positive whole ``meta['total_steps']``, unless already set."""
    total = meta.get("total_steps")
    if isinstance(total, bool) or not isinstance(total, (int, float)):
        return
    if total > 0 and float(total).is_integer():
        meta.setdefault("planned_steps", int(total))


class PlannedStepsTextLogReader(TextLogReader):
    """A text-log reader that also records the step total its lines print as ``planned_steps``."""

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        super().fill(paths, builder)
        note_planned_steps(builder.meta)
