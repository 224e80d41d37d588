"""A user's mapping of a log's metric to a canonical role (``stabscope import --map NAME=loss``, the
Upload page's "Use a metric as" select), remembered with the run.

The alias table (``ingest/formats/aliases.py``) maps the names trainers are known to log; this covers
any other name. A mapping renames the metric in the parsed table before it is stored (every rank,
and W&B's ``NAME__min``/``NAME__max`` companions with it), and is kept in the run's metadata under
``metric_map`` (``{name as the log has it: role}``), so that a later import into the same run (a
re-import, an appended continuation) is mapped the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest.errors import StabScopeError
from ingest.formats.aliases import canonical_name
from stab_core.metrics import CANONICAL_METRICS

META_KEY = "metric_map"
"""Run metadata key holding the user's mapping: ``{metric name in the log: canonical role}``."""
_COMPANIONS = ("", "__min", "__max")


def parse_map_args(pairs: Sequence[str]) -> dict[str, str]:
    """``NAME=ROLE`` texts as a mapping (checked against a log by :func:`resolve_map`)."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, role = pair.rpartition("=")
        if not sep or not name.strip() or not role.strip():
            raise StabScopeError(f"--map {pair!r} is not NAME=ROLE: expected e.g. --map my_loss=loss.")
        out[name.strip()] = role.strip()
    return out


def stored_map(meta: Mapping[str, Any]) -> dict[str, str]:
    """The mapping remembered in a run's metadata (empty when none)."""
    raw = meta.get(META_KEY)
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): str(v) for k, v in raw.items()}


def resolve_map(given: Mapping[str, str], metrics: Sequence[str]) -> dict[str, str]:
    """``given`` with each name as the log has it; refuses an unknown role, a name the log does
    not have, two names for one role and a role the log already has (one paragraph that lists the
    log's metric names, in the CLI's words and the Upload page's)."""
    names = set(metrics)
    resolved: dict[str, str] = {}
    problems: list[str] = []
    for name, role in given.items():
        if role not in CANONICAL_METRICS:
            problems.append(f"{role!r} is not a metric role (roles: {', '.join(CANONICAL_METRICS)})")
            continue
        found = name if name in names else canonical_name(name)[0]
        if found not in names:
            problems.append(f"the log has no metric {name!r}")
            continue
        if found != role:
            resolved[found] = role
    final = [m for m in names if m not in resolved]
    for role in sorted(set(resolved.values())):
        sources = sorted(n for n, r in resolved.items() if r == role)
        if len(sources) > 1:
            problems.append(f"{' and '.join(sources)} cannot both be {role}")
        elif role in final:
            problems.append(f"the log already has {role}; map it to another role first to use {sources[0]} as {role}")
    if problems:
        listed = ", ".join(sorted(names)) or "none"
        text = "; ".join(problems)
        raise StabScopeError(
            f"--map: {text}. The log's metrics: {listed}.",
            page=f"Cannot use that metric: {text}. The log's metrics: {listed}.",
        )
    return resolved


def applicable(remembered: Mapping[str, str], metrics: Sequence[str]) -> dict[str, str]:
    """The entries of a remembered mapping that fit this log: a continuation may lack the metric,
    or already log the role under its own name (then the log's own series is kept)."""
    names = set(metrics)
    fit = {n: r for n, r in remembered.items() if n in names and r in CANONICAL_METRICS and n != r}
    final = names - set(fit)
    return {n: r for n, r in fit.items() if r not in final and list(fit.values()).count(r) == 1}


def rename_metrics(table: pa.Table, renames: Mapping[str, str]) -> pa.Table:
    """``table`` (``TABLE_SCHEMA``) with metrics renamed; each chunk of the dictionary-encoded
    ``metric`` column gets a renamed dictionary, so no row is copied."""
    if not renames or table.num_rows == 0:
        return table
    index = table.schema.get_field_index("metric")
    column = table.column(index)
    chunks = []
    for chunk in column.chunks:
        plain = not pa.types.is_dictionary(chunk.type)
        encoded: Any = pc.dictionary_encode(chunk) if plain else chunk
        dictionary = [str(v) for v in encoded.dictionary.to_pylist()]
        renamed = [renames.get(v, v) for v in dictionary]
        if renamed != dictionary:
            encoded = pa.DictionaryArray.from_arrays(encoded.indices, pa.array(renamed, pa.string()))
            chunk = encoded.dictionary_decode().cast(chunk.type) if plain else encoded.cast(chunk.type)
        chunks.append(chunk)
    return table.set_column(index, table.schema.field(index), pa.chunked_array(chunks, column.type))


def with_companions(renames: Mapping[str, str], metrics: Sequence[str]) -> dict[str, str]:
    """``renames`` plus W&B's ``NAME__min``/``NAME__max`` companions of each renamed metric."""
    names = set(metrics)
    return {n + s: r + s for n, r in renames.items() for s in _COMPANIONS if n + s in names}


def map_for_part(given: Mapping[str, str], metrics: Sequence[str]) -> dict[str, str]:
    """The entries of ``given`` whose name one run of a file holds: a file of several runs (segments)
    is checked against all its metrics once; a run without a mapped name (an earlier run that did
    not log the step time yet) keeps the rest of the map."""
    names = set(metrics)
    return {n: r for n, r in given.items() if n in names or canonical_name(n)[0] in names}


def all_metrics(parsed: Any) -> list[str]:
    """The metric names of ``parsed`` and of the further runs (segments) it holds."""
    return sorted({*parsed.metrics, *(m for s in parsed.segments for m in s.metrics)})


def apply_metric_map(parsed: Any, given: Mapping[str, str], remembered: Mapping[str, str] | None = None) -> Any:
    """``parsed`` (a ``ParsedLog``) with the user's mapping applied and recorded in its ``meta``.

    ``given`` (this import's ``--map``) is checked against the log (:func:`resolve_map`); the
    ``remembered`` mapping of the run it goes into applies where it fits (:func:`applicable`); a
    name or role given now replaces its remembered entry.
    """
    metrics = parsed.metrics
    resolved = resolve_map(given, metrics)
    earlier = {n: r for n, r in (remembered or {}).items() if n not in resolved and r not in resolved.values()}
    renames = {**applicable(earlier, [m for m in metrics if m not in resolved]), **resolved}
    if set(renames.values()) & {m for m in metrics if m not in renames}:  # a remembered role the log has now
        renames = resolved
    merged = {**earlier, **resolved}
    if not renames and not merged:
        return parsed
    out = replace(parsed, table=rename_metrics(parsed.table, with_companions(renames, metrics)))
    out.meta = {**parsed.meta, META_KEY: merged} if merged else dict(parsed.meta)
    return out


STEP_ROLE = "step"
"""``--map KEY=step``: the key the generic reader counts steps by (no metric role: the steps' axis)."""


def split_step_key(given: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """``given`` without its ``KEY=step`` entry, and that key (None when the user chose none)."""
    steps = [name for name, role in given.items() if role == STEP_ROLE]
    if len(steps) > 1:
        raise StabScopeError(f"--map: {' and '.join(steps)} cannot both be the step; choose one")
    return {n: r for n, r in given.items() if r != STEP_ROLE}, (steps[0] if steps else None)


def with_proposal(given: Mapping[str, str], proposed: Mapping[str, str] | None) -> dict[str, str]:
    """The user's mapping over the generic reader's proposal (``meta['proposed_map']``, ``{name:
    role}``): a proposed entry stands unless the user mapped that name or gave that role."""
    if not proposed:
        return dict(given)
    roles = set(given.values())
    kept = {n: r for n, r in proposed.items() if n not in given and r not in roles}
    return {**kept, **given}


def final_mapping(proposal: Mapping[str, str] | None, given: Mapping[str, str]) -> dict[str, str] | None:
    """The generic reader's ``{role: key}`` after the user's corrections (``import --json``'s
    ``mapping``); None for a log another reader read."""
    if proposal is None:
        return None
    out = {role: key for role, key in proposal.items() if role not in given.values() and key not in given}
    out.update({role: name for name, role in given.items()})
    step = out.pop(STEP_ROLE, None)
    return {STEP_ROLE: step, **out} if step is not None else out
