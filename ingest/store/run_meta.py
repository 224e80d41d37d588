"""Run metadata a user can set (``stabscope meta``, ``import --meta``, the dashboard's "Run settings").

Each known key has one type and range; an unknown key or a bad value is refused with one paragraph
naming the key, the value and what was expected. The store merges the result
(``Store.update_meta``), remembers which keys the user set (so a later import's parsed values do not
replace them) and re-runs the analyses, whose spikes and diagnosis read ``max_norm``, ``precision``
and ``num_experts``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ingest.errors import StabScopeError
from stab_core.severity import SENSITIVITIES

PRECISIONS = ("fp16", "bf16", "fp32")
SENSITIVITY_NAMES = tuple(SENSITIVITIES)


@dataclass(frozen=True)
class MetaKey:
    """One settable key: its ``kind`` (int, float or choice), what is ``expected`` (words for errors),
    the ``check`` its value must pass, ``label`` (what it means, with its unit) and, for a choice, its
    ``choices``."""

    kind: str
    expected: str
    check: Callable[[Any], bool]
    label: str
    choices: tuple[str, ...] = ()


def _int_at_least(low: int) -> Callable[[Any], bool]:
    return lambda v: v >= low


META_KEYS: dict[str, MetaKey] = {
    "gpus": MetaKey("int", "a whole number > 0", _int_at_least(1), "GPUs the job ran on (count)"),
    "usd_per_gpu_hour": MetaKey("float", "a number >= 0", lambda v: v >= 0, "price of one GPU-hour (USD)"),
    "step_time_s": MetaKey("float", "a number > 0", lambda v: v > 0, "wall time of one optimizer step (s)"),
    "max_norm": MetaKey("float", "a number > 0", lambda v: v > 0, "gradient clipping threshold (L2 norm)"),
    "precision": MetaKey(
        "choice", "one of fp16, bf16, fp32", lambda v: v in PRECISIONS, "training precision", PRECISIONS
    ),
    "tokens_per_step": MetaKey("int", "a whole number > 0", _int_at_least(1), "tokens per optimizer step"),
    "num_experts": MetaKey("int", "a whole number >= 1", _int_at_least(1), "MoE experts per layer (1 = dense)"),
    "planned_steps": MetaKey("int", "a whole number > 0", _int_at_least(1), "optimizer steps planned for the run"),
    "world_size": MetaKey("int", "a whole number > 0", _int_at_least(1), "ranks in the job (count)"),
    "tensor_parallel_size": MetaKey("int", "a whole number > 0", _int_at_least(1), "tensor-parallel degree"),
    "pipeline_parallel_size": MetaKey("int", "a whole number > 0", _int_at_least(1), "pipeline-parallel degree"),
    "save_interval": MetaKey("int", "a whole number > 0", _int_at_least(1), "steps between checkpoints"),
    "sensitivity": MetaKey(
        "choice",
        "one of " + ", ".join(SENSITIVITY_NAMES),
        lambda v: v in SENSITIVITY_NAMES,
        "spike sensitivity: the detector's thresholds and the longest blip (low, default, high)",
        SENSITIVITY_NAMES,
    ),
}
"""The keys ``stabscope meta`` accepts, in the order the dashboard's form shows them."""

_MAX_NOTES = 2000
"""Characters of a run's notes: a paragraph, not a document."""
LABEL_KEYS: dict[str, str] = {
    "tags": "comma-separated tags, each letters, digits, '.', '_' or '-' (at most 64 characters)",
    "notes": f"free text of at most {_MAX_NOTES} characters",
}
"""Keys that label a run rather than describe its training (``stabscope meta RUN tags=a,b notes="..."``,
``stabscope runs --tag a``): no analysis reads them, so the dashboard's settings form leaves them out."""
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

USER_KEYS_FIELD = "user_meta_keys"
"""``meta`` entry listing the keys a user set: a log's parsed values never replace these."""
REVISION_FIELD = "meta_revision"
"""``meta`` entry counting the user's metadata changes (cached page reads are keyed by it)."""


def _refuse(key: str, value: Any, expected: str) -> StabScopeError:
    return StabScopeError(f"metadata {key} = {value!r} is not valid: expected {expected} for {key}.")


def coerce_meta_value(key: str, value: Any) -> Any:
    """``value`` (text from the command line or a typed value from a form) as ``key``'s type; raises
    ``StabScopeError`` naming the key, the value and what was expected."""
    if key in LABEL_KEYS:
        return _coerce_label(key, value)
    spec = META_KEYS.get(key)
    if spec is None:
        known = ", ".join([*META_KEYS, *LABEL_KEYS])
        raise StabScopeError(f"unknown metadata key {key!r} (value {value!r}): expected one of {known}.")
    typed: Any
    if spec.kind == "choice":
        typed = str(value).strip().lower()
    elif isinstance(value, bool):
        raise _refuse(key, value, spec.expected)
    else:
        try:
            number = float(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError):
            raise _refuse(key, value, spec.expected) from None
        if not math.isfinite(number) or (spec.kind == "int" and not number.is_integer()):
            raise _refuse(key, value, spec.expected)
        typed = int(number) if spec.kind == "int" else number
    if not spec.check(typed):
        raise _refuse(key, value, spec.expected)
    return typed


def _coerce_label(key: str, value: Any) -> Any:
    """``tags`` as a sorted list of distinct tags (from ``a,b`` text or a list), ``notes`` as stripped text."""
    if key == "notes":
        text = str(value).strip()
        if not text or len(text) > _MAX_NOTES:
            raise _refuse(key, value, LABEL_KEYS[key])
        return text
    parts = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, list | tuple) else None
    tags = sorted({str(part).strip() for part in parts or () if str(part).strip()})
    if not tags or not all(_TAG_RE.match(tag) for tag in tags):
        raise _refuse(key, value, LABEL_KEYS[key])
    return tags


def run_tags(meta: Mapping[str, Any]) -> list[str]:
    """The run's tags (``meta['tags']``; a monitor's or callback's ``meta`` may have set them too)."""
    tags = meta.get("tags")
    if isinstance(tags, str):
        tags = tags.split(",")
    return sorted({str(tag).strip() for tag in tags or () if str(tag).strip()}) if isinstance(tags, list | str) else []


def run_format(source: str) -> str:
    """The format a run came from, read from its catalog ``source`` (``import:FORMAT:files``,
    ``watch:FORMAT:...``, ``shards:...``, ``recovered:...``): FORMAT for imports and watched logs,
    else the first word (``shards``)."""
    kind, _, rest = source.partition(":")
    if kind in ("import", "watch"):
        return rest.partition(":")[0] or kind
    return kind or "unknown"


def parse_assignments(pairs: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """``KEY=VALUE`` texts as (typed updates, keys to remove): ``KEY=`` removes ``KEY``."""
    updates: dict[str, Any] = {}
    removals: list[str] = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise StabScopeError(f"{pair!r} is not KEY=VALUE: expected e.g. gpus=8 (or gpus= to remove the key).")
        if value.strip() == "":
            if key not in META_KEYS and key not in LABEL_KEYS:
                coerce_meta_value(key, value)  # the unknown-key paragraph
            removals.append(key)
            updates.pop(key, None)
        else:
            updates[key] = coerce_meta_value(key, value)
            if key in removals:
                removals.remove(key)
    return updates, removals


def settable_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The known keys ``meta`` holds (what ``stabscope meta RUN`` prints), in ``META_KEYS`` order, then
    ``tags`` and ``notes``."""
    return {key: meta[key] for key in [*META_KEYS, *LABEL_KEYS] if meta.get(key) is not None}


def user_keys(meta: Mapping[str, Any]) -> set[str]:
    """The keys of ``meta`` that a user set."""
    return {str(k) for k in meta.get(USER_KEYS_FIELD) or ()}


def merge_meta(
    old: Mapping[str, Any], new: Mapping[str, Any], *, by_user: bool = False, remove: Sequence[str] = ()
) -> dict[str, Any]:
    """``old`` with ``new`` on top. Parsed values (``by_user`` False) skip the keys a user set; a
    user's values (and ``remove``) are recorded as the user's and bump ``REVISION_FIELD``."""
    owned = user_keys(old)
    if not by_user:
        return {**old, **{k: v for k, v in new.items() if k not in owned}}
    merged = {**old, **new}
    owned |= set(new)
    for key in remove:
        merged.pop(key, None)
        owned.discard(key)
    merged[USER_KEYS_FIELD] = sorted(owned)
    merged[REVISION_FIELD] = int(old.get(REVISION_FIELD) or 0) + 1
    return merged
