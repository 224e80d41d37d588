"""Hugging Face Trainer ``trainer_state.json``: ``log_history`` holds the training entries
(``loss``, ``grad_norm``, ``learning_rate``, ``epoch``, ``num_tokens``..., ``step``) interleaved with
evaluation entries (``eval_loss``, ``eval_runtime``...) and ends with a summary entry
(``train_runtime``, ``train_loss``, ``total_flos``) that describes the run, not a step: it goes to
``meta['train_summary']``, as do ``max_steps``, ``train_batch_size`` and the logging settings.
``epoch`` is the step axis's companion, not a metric: the epoch reached is ``meta['epochs_done']``."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder
from ingest.formats._tabular import nesting_refusal
from ingest.formats.base import Reader
from ingest.formats.planned import note_planned_steps
from ingest.formats.raw_text import open_error
from ingest.formats.run_totals import SUMMARY_KEYS, is_eval_counter

_META = {
    "max_steps": "total_steps",
    "train_batch_size": "per_rank_batch_size",
    "logging_steps": "logging_steps",
    "eval_steps": "eval_steps",
    "num_train_epochs": "num_train_epochs",
    "global_step": "last_step",
}


class HFTrainerStateReader(Reader):
    name = "hf_trainer_state"
    description = "Hugging Face Trainer trainer_state.json (log_history with train and eval entries)"
    directory_files = ("trainer_state.json",)

    def sniff(self, head: bytes, path: Path) -> float:
        text = head.lstrip()
        if not text.startswith(b"{"):
            return 0.0
        if _is_json_lines(text):
            return 0.0  # a JSON Lines log may end with a trainer-state dump; the JSONL reader owns it
        return 0.95 if re.search(rb'"log_history"\s*:\s*\[', head) else 0.0

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        for stream, path in enumerate(paths):
            builder.source(path)
            state = _load(path)
            builder.advance(path.stat().st_size)
            history = state.get("log_history")
            if not isinstance(history, list):
                raise StabScopeError("expected a 'log_history' list", path=str(path), line=1)
            for key, meta_key in _META.items():
                if isinstance(state.get(key), (int, float)):
                    builder.meta.setdefault(meta_key, state[key])
            columns: dict[str, tuple[list[int], list[float]]] = {}
            seq: dict[str, list[int]] = {}
            base = builder.reserve(len(history))
            for i, entry in enumerate(history):
                if not isinstance(entry, dict) or not isinstance(entry.get("step"), (int, float)):
                    builder.skip(path, 0, f"log_history[{i}] has no step")
                    continue
                if SUMMARY_KEYS & entry.keys() and "loss" not in entry and "eval_loss" not in entry:
                    builder.meta["train_summary"] = {k: v for k, v in entry.items() if k != "step"}
                    continue
                step = int(entry["step"])
                for key, value in entry.items():
                    number = _number(value)
                    if key == "step" or number is None or is_eval_counter(key):
                        continue  # an eval's token counter is the run's count (ingest.formats.run_totals)
                    if key == "epoch":
                        # the step axis's companion (steps / steps per epoch), not a measurement of
                        # the run: kept in the meta as the epoch reached, never a metric series
                        builder.meta["epochs_done"] = max(number, builder.meta.get("epochs_done", number))
                        continue
                    steps, values = columns.setdefault(key, ([], []))
                    steps.append(step)
                    values.append(number)
                    seq.setdefault(key, []).append(base + i)
            for key, (steps, values) in columns.items():
                builder.add(key, steps, values, seq=seq[key], stream=stream)
        note_planned_steps(builder.meta)  # max_steps


def _is_json_lines(text: bytes) -> bool:
    """True when the first line is a whole JSON object and more text follows it: the JSON Lines
    shape (ms-swift ``logging.jsonl`` appends the trainer state as its last line), never a
    ``trainer_state.json``, whose single object spans the file."""
    first, _, rest = text.partition(b"\n")
    if not rest.strip():
        return False
    try:
        return isinstance(json.loads(first), dict)
    except (ValueError, RecursionError):
        return False


def _load(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise open_error(path, exc) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StabScopeError(
            f"byte {exc.start:,} is not UTF-8 text (0x{raw[exc.start]:02x}); expected a UTF-8 JSON file "
            "(re-save it as UTF-8)",
            path=str(path),
            line=raw.count(b"\n", 0, exc.start) + 1,
        ) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StabScopeError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=str(path), line=exc.lineno) from exc
    except RecursionError:
        raise nesting_refusal(text, str(path), "trainer_state.json") from None
    if not isinstance(data, dict):
        raise StabScopeError("expected a JSON object", path=str(path), line=1)
    return data


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
        return float(value)
    return None
