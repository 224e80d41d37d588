"""A stored run's findings besides its incidents (overfitting, throughput loss; ``stab_core.findings``)
and its comparison with sibling runs, for ``stabscope spikes``, the overview and Spikes pages and the
alerts.

The analyses store each run's findings and its settled throughput level in ``meta['analysis']``
(``ingest.services.run_analyses.materialise``); the sibling comparison is made when read, since a sibling may
be imported after the run. Siblings: the other runs carrying the same ``config_name`` in their
metadata, or imported from the same log file (its segments: ``NAME-2``, ...) with the same settings
stated for them (``run_settings``: the device, precision, batch, sequence length and model shape
markdown notes state for each run they paste, :mod:`ingest.formats.run_settings`): notes that tell a
story of changes (cpu, then cuda, then bf16, then a larger model) hold runs of different
configurations, whose throughput says nothing of each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ingest.store import Store
from ingest.store.run_info import RunInfo
from stab_core.findings import finding_metrics, run_findings
from stab_core.throughput import compare_to_siblings

FINDING_KINDS = ("overfitting", "throughput_loss")
"""``kind`` of the entries :func:`finding_entries` adds after the incidents of ``spikes --json``."""


def findings_from_store(store: Store, info: RunInfo) -> dict[str, Any]:
    """:func:`stab_core.findings.run_findings` of the run ``info`` from the store's full-fidelity series."""
    series = {}
    for metric in finding_metrics(info.metrics):
        if metric in info.metrics:
            data = store.read_series(info.name, metric)
            series[metric] = (data.steps, data.values)
    return run_findings(series)


def sibling_key(info: RunInfo) -> tuple[str, str, tuple[tuple[str, str], ...]] | None:
    """What makes runs siblings: the same ``config_name`` (metadata), else the same imported file and
    the same settings stated for the run in it (``run_settings``; none stated in the file: ``()``)."""
    config = info.meta.get("config_name")
    if config:
        return ("config", str(config), ())
    if info.source.startswith("import:"):
        settings = info.meta.get("run_settings")
        return ("source", info.source, tuple(sorted(settings.items())) if isinstance(settings, dict) else ())
    return None


def sibling_gap(info: RunInfo, level: Any, runs: Sequence[RunInfo]) -> dict[str, Any] | None:
    """The run's settled throughput ``level`` (``{"metric", "level"}``) against its siblings' among
    ``runs`` (their stored levels of the same metric): a sibling gap's dict, or None. A run of a file
    that states settings for its other runs but none for it has no sibling (its settings are unknown), nor
    has one whose stated settings leave out the model's shape."""
    key = sibling_key(info)
    if key is None or not level:
        return None
    if key[0] == "source" and not key[2] and isinstance(info.meta.get("run_settings"), dict):
        return None
    if key[0] == "source" and key[2] and not any(name.startswith("model") for name, _ in key[2]):
        # settings stated without the model's shape (only a batch size and a sequence length): that both
        # runs train the same model is not stated, so their tokens/s are no comparison (issue #32)
        return None
    theirs = {}
    for other in runs:
        if other.name == info.name or sibling_key(other) != key:
            continue
        stored = (other.meta.get("analysis") or {}).get("throughput_level") or {}
        if stored.get("metric") == level["metric"] and stored.get("level") is not None:
            theirs[other.name] = float(stored["level"])
    relation = "the same config" if key[0] == "config" else "the same log file"
    if key[2]:
        # here, not at the top: importing any module of ingest.formats loads every log reader, and the
        # dashboard's first screen imports this module (tests/test_import_hygiene.py)
        from ingest.formats.run_settings import settings_text

        relation += f" and settings ({settings_text(dict(key[2]))})"
    gap = compare_to_siblings(float(level["level"]), theirs, str(level["metric"]), relation)
    return gap.to_json() if gap is not None else None


def stored_findings(store: Store, info: RunInfo, *, siblings: bool = True) -> dict[str, Any]:
    """The run's findings: as the current analyses stored them, else computed from the store; with
    ``throughput_siblings`` (the sibling gap, or None) compared now unless ``siblings`` is False."""
    analysis = info.meta.get("analysis") or {}
    stored = analysis.get("findings")
    if info.analysis_gen == info.gen and isinstance(stored, dict):
        findings = dict(stored)
        findings["throughput_level"] = analysis.get("throughput_level")
    else:
        findings = findings_from_store(store, info)
    if siblings:
        findings["throughput_siblings"] = sibling_gap(info, findings.get("throughput_level"), store.list_runs())
    return findings


def _keep_best(found: dict[str, Any]) -> str:
    """The overfitting action: the step of the lowest val loss is an evaluation's step; whether a
    checkpoint was saved there the findings do not know, so the words say which to keep."""
    return (
        f"Keep the checkpoint of step {found['best_step']} (the lowest val loss, {found['best_val_loss']:.4g}), "
        "or the last one saved before it; stop earlier, add data or regularise (dropout, weight decay)."
    )


def finding_entries(findings: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings as entries after the incidents of ``stabscope spikes --json`` (additive: each has
    an incident's ``metric``/``start``/``peak``/``end``/``ratio``/``recovered``/``cause``/
    ``confidence``/``path``/``actions`` and ``kind``, with its detail under ``overfitting`` or
    ``throughput``). ``ratio``: the last val loss over the best; a drop's rate over the norm (tokens/s
    ratio, below 1: slower). A sibling gap has ``start``/``end`` -1 (it holds for the whole run)."""
    out = []
    found = findings.get("overfitting")
    if found:
        out.append({"kind": "overfitting", "metric": "val_loss", "metrics": ["val_loss"],
                    "start": found["best_step"], "peak": found["end_step"], "end": found["end_step"],
                    "ratio": found["end_val_loss"] / found["best_val_loss"] if found["best_val_loss"] else None,
                    "recovered": False, "cause": "overfitting", "confidence": None, "path": [],
                    "summary": found["message"],
                    "actions": [_keep_best(found)],
                    "overfitting": found})  # fmt: skip
    drops = list(findings.get("throughput") or [])
    if findings.get("throughput_siblings"):
        drops.append(findings["throughput_siblings"])
    for drop in drops:
        start = int(drop.get("start", -1))
        end = int(drop.get("end", -1))
        out.append({"kind": "throughput_loss", "metric": drop["metric"], "metrics": [drop["metric"]],
                    "start": start, "peak": start, "end": end, "recovered": bool(drop.get("recovered", False)),
                    "ratio": 1 + float(drop["change_pct"]) / 100, "cause": "throughput", "confidence": None,
                    "path": [], "summary": drop["message"],
                    "actions": [_throughput_action(drop)], "throughput": drop})  # fmt: skip
    return out


def _throughput_action(drop: dict[str, Any]) -> str:
    """What to do about a throughput finding, on its own premise: a drop has a slow span and a fast one
    to compare; a sibling gap holds for the whole run, so the run is compared with its siblings."""
    if drop.get("kind") == "siblings":
        return ("Compare this run's nodes, data loading and settings with its sibling runs' "
                "(per-rank step time shows a straggler on the Ranks page).")  # fmt: skip
    return ("Compare the slow span's nodes, data loading and checkpoint saves with a fast span "
            "(per-rank step time shows a straggler on the Ranks page).")  # fmt: skip


def stored_lr_transitions(info: RunInfo) -> list[dict[str, Any]]:
    """The transitions of run ``info``'s logged LR the analyses stored with it
    (``ingest.services.run_analyses.lr_transitions``: ``step``, ``kind``, ``rel_change``); none before they ran."""
    return list((info.meta.get("analysis") or {}).get("lr_transitions") or [])


def lr_transition_label(transition: dict[str, Any]) -> str:
    """A stored LR transition in words, as the charts label its marker: ``+998% LR (from the logged lr)``."""
    return f"{float(transition['rel_change']):+.0%} LR (from the logged lr)"


def with_lr_transitions(spikes: list[dict[str, Any]], info: RunInfo) -> list[dict[str, Any]]:
    """The incidents of ``stabscope spikes --json``, each with ``lr_transition_before`` added (additive):
    the last transition of the logged LR the analyses stored (``step``, ``kind``, ``rel_change``) at or
    before the incident's start, or None when none precedes it."""
    stored = sorted(stored_lr_transitions(info), key=lambda t: int(t["step"]))
    out = []
    for spike in spikes:
        before = [t for t in stored if int(t["step"]) <= int(spike["start"])]
        out.append({**spike, "lr_transition_before": dict(before[-1]) if before else None})
    return out
