"""W&B ``wandb-history.jsonl`` (the offline run folder's history): one object per ``wandb.log`` call
with ``_step`` (W&B's own call counter), ``_runtime`` (s since start) and ``_timestamp`` (epoch s).

The trainer's step is preferred when logged (``trainer/global_step`` from Lightning,
``train/global_step`` from Hugging Face), else ``_step``. ``NaN``/``Infinity`` literals are kept.
Media/histogram objects are not scalars and are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ingest.formats._common import LogBuilder
from ingest.formats.base import Reader
from ingest.formats.jsonl import first_object, read_jsonl

STEPS = ("trainer/global_step", "train/global_step", "_step")


class WandbHistoryReader(Reader):
    name = "wandb_history"
    description = "W&B wandb-history.jsonl: objects with _step, _runtime, _timestamp"
    directory_files = ("wandb-history.jsonl",)

    def sniff(self, head: bytes, path: Path) -> float:
        obj = first_object(head)
        if obj is None or "_step" not in obj:
            return 0.0
        return 0.95 if ("_runtime" in obj or "_timestamp" in obj) else 0.7

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        read_jsonl(
            paths,
            builder,
            step_candidates=STEPS,
            wall_candidates=("_timestamp",),
            ignore=("_runtime", "_timestamp"),
            keymap=_keymap,
        )


def _keymap(column: str) -> tuple[str, str | None] | None:
    from ingest.formats.aliases import canonical_name

    if column.startswith("_wandb") or column.endswith("/_type") or "/_" in column:
        return None
    return canonical_name(column)
