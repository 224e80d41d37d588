"""A run's analyses in one call, and the JSON form of a spike.

:func:`analyze_run` is what the store materialises per run generation: the gradient SNR series (with its estimator),
clipping statistics, and the loss and grad-norm spike events, each with its root-cause diagnosis. :func:`spike_to_dict`
is the JSON contract of ``stabscope spikes --json``; :mod:`stab_core.evaluation` measures how well it finds spikes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np

from stab_core.abandoned import abandoned_attempts, attempt_json
from stab_core.claims import incident_claims, said_from_json
from stab_core.clean_baseline import spikes_past_long_incidents
from stab_core.clipping import CLIP_SATURATION, ClipStats, clipping_stats
from stab_core.decision_tree import NONFINITE_START_LEAF, DiagnosisParams
from stab_core.detectors_not_run import detectors_not_run
from stab_core.diagnosis import diagnose, diagnose_early
from stab_core.early_blowups import blip_length
from stab_core.early_rise_rules import banded_climbs, early_limit, early_rise_events
from stab_core.excursions import excursion_start
from stab_core.held_out import held_out_back_at, held_out_nonfinite, held_out_rose, is_held_out_nonfinite
from stab_core.held_out_blowups import blowup_incidents
from stab_core.held_recovery import costed_recovery
from stab_core.incident_passes import after_grouping
from stab_core.incidents import (
    Incident,
    IncidentKind,
    LoggingGaps,
    group_incidents,
    logging_gaps,
    window_ratio,
    without_steps,
)
from stab_core.level_shifts import LEVEL_SAMPLES, level_shifts
from stab_core.metrics import signed_objective
from stab_core.objectives import with_objective
from stab_core.quantised_levels import under_resolution
from stab_core.recent_level import new_early_jumps, new_recent_level_jumps
from stab_core.rolling_baseline import logging_resolution
from stab_core.run_end_rises import cut_off_at_log_end, rise_corroborated, run_end_rises
from stab_core.running_means import per_batch_view
from stab_core.runview import FloatArray, IntArray, RunView, Series
from stab_core.severity import Certainty, blowup_ratio, classify, loss_left_band, sensitivity
from stab_core.skipped_steps import skipped_steps
from stab_core.snr import SnrCollapse, SnrSeries, detect_snr_collapse, gradient_snr
from stab_core.spike_params import GRAD_NORM_SPIKE_PARAMS, LOSS_SPIKE_PARAMS, SpikeParams
from stab_core.spikes import SpikeEvent, detect_spikes, event_at_step, link_grad_norm_lead
from stab_core.step_gaps import near_baseline as _near_baseline
from stab_core.tree_nodes import DiagnosisContext, logging_interval, prepare_context
from stab_core.tree_walk import Diagnosis
from stab_core.zero_grad_norms import without_placeholder_grad_norms


@dataclass(frozen=True)
class AnalysisParams:
    """Settings of :func:`analyze_run`: spike thresholds per metric, how far before a loss spike a
    grad-norm spike still counts as leading it (``max_lead_steps``, steps), the tree's thresholds,
    the clipping window (logged steps) and saturation fraction, the longest blip (``blip_samples``,
    logged samples: :mod:`stab_core.severity`) and the name of the sensitivity these came from."""

    loss_spikes: SpikeParams = LOSS_SPIKE_PARAMS
    grad_norm_spikes: SpikeParams = GRAD_NORM_SPIKE_PARAMS
    max_lead_steps: int = 50
    blip_samples: int = 3
    sensitivity: str = "default"
    diagnosis: DiagnosisParams = field(default_factory=DiagnosisParams)
    clip_window: int = 100
    clip_saturation: float = CLIP_SATURATION


def params_for(name: object) -> AnalysisParams:
    """The analysis settings of sensitivity ``name`` (low, default, high; None: default), else ValueError."""
    chosen = sensitivity(name)
    return AnalysisParams(
        loss_spikes=chosen.loss,
        grad_norm_spikes=chosen.grad_norm,
        blip_samples=chosen.blip_samples,
        sensitivity=chosen.name,
    )


def run_params(view: RunView) -> AnalysisParams:
    """The run's stored settings (``meta['sensitivity']``); the defaults without one or with one unknown here."""
    try:
        return params_for(view.meta.get("sensitivity"))
    except ValueError:
        return AnalysisParams()


@dataclass(frozen=True)
class DiagnosedSpike:
    """An incident (its primary event ``spike``, and all of it in ``incident``) and the verdict on it."""

    spike: SpikeEvent
    diagnosis: Diagnosis
    incident: Incident | None = None
    attempt: tuple[int, int] | None = None
    """``(resumed_from, abandoned_at)`` of the attempt a resume replaced that it was found in; None: the run."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract object (:func:`spike_to_dict`), plus ``abandoned_attempt`` where it has one."""
        return attempt_json(spike_to_dict(self.spike, self.diagnosis, self.incident), self.attempt)


@dataclass(frozen=True)
class RunAnalysis:
    """Everything materialised for one run.

    ``snr``: the SNR series (None without a grad norm), its ``estimator`` says which one;
    ``snr_collapses``: where it fell ``snr_collapse_factor`` below its level; ``clip_steps`` and
    ``clip``: clipping statistics on the grad-norm steps (None when max_norm is unknown and no
    ``clip_coef`` was logged); ``spikes``: the incidents, each diagnosed, by start; ``gaps``: where
    the run logged nothing usable (left out of every analysis); ``not_run``: (detector, why) for each
    detector the run's data could not feed; ``snr_reason``: why there is no SNR series (None when
    there is one).
    """

    run: str
    snr: SnrSeries | None
    snr_collapses: list[SnrCollapse]
    clip_steps: IntArray | None
    clip: ClipStats | None
    spikes: list[DiagnosedSpike]
    gaps: LoggingGaps | None = None
    not_run: list[tuple[str, str]] = field(default_factory=list)
    snr_reason: str | None = None

    def spike_dicts(self) -> list[dict[str, Any]]:
        """The spikes as JSON-ready dicts (``stabscope spikes --json``)."""
        return [item.to_dict() for item in self.spikes]

    def spike_at(self, step: int, metric: str | None = None) -> DiagnosedSpike | None:
        """The incident that covers ``step`` (from its first start to its last recovery, or end when
        none) and holds ``metric`` (any metric when None)."""
        return incident_at(self.spikes, step, metric)


def incident_at(items: Sequence[DiagnosedSpike], step: int, metric: str | None = None) -> DiagnosedSpike | None:
    """The item of ``items`` whose incident covers ``step`` and holds ``metric`` (any when None)."""
    for item in items:
        members = item.incident.members if item.incident is not None else (item.spike,)
        for member in members:
            if (metric is None or member.metric == metric) and member.start <= step <= member.until:
                return item
    return None


def _json_number(value: float | None) -> float | None:
    """Non-finite numbers have no JSON form: they become null."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _json_evidence(evidence: dict[str, Any]) -> dict[str, Any]:
    return {key: _json_number(value) if isinstance(value, float) else value for key, value in evidence.items()}


def _member_dict(event: SpikeEvent) -> dict[str, Any]:
    return {
        "metric": event.metric,
        "start": event.start,
        "peak": event.peak,
        "end": event.end,
        "ratio": _json_number(event.ratio),
        "peak_value": _json_number(event.peak_value),
        "baseline": _json_number(event.baseline),
        "recovered": event.recovered,
        "recovery_step": event.recovery_step,
    }


def spike_to_dict(spike: SpikeEvent, diagnosis: Diagnosis, incident: Incident | None = None) -> dict[str, Any]:
    """The JSON object of one spike (``stabscope spikes --json``); non-finite numbers become null.

    Contract fields: ``start``, ``peak``, ``end`` (steps), ``metric``, ``ratio`` (peak over baseline),
    ``recovered``, ``cause``, ``confidence`` (0-1), ``path`` (nodes visited: ``node``, ``number``,
    ``question``, ``answer``, ``evidence``), ``actions``. Also: ``z``, ``duration``, ``steps_lost``,
    ``diverged``, ``nonfinite``, ``recovery_step``, ``baseline``, ``peak_value``, ``n_samples``,
    ``grad_norm_lead_steps``, ``grad_norm_led``, ``leaf``, ``missing``; per incident: ``kind``
    (``spike``, ``early_instability``, ``climb``), ``metrics`` and ``members`` (every detected event
    in it: metric, start, peak, end, ratio, peak_value, baseline, recovered, recovery_step),
    ``co_moves`` (metric -> peak over level for watched metrics not detected in it), ``until`` (its
    last step), ``rank_outlier`` (the rank that stood out in it: metric, rank, step, ratio to the
    others' median; null when none did), ``action_evidence`` (each action of the verdict's leaf:
    action, premise, holds true/false/null, evidence), ``summary`` (the verdict in a sentence),
    ``claims`` (every statement about the incident, :mod:`stab_core.claims`: kind, text, holds
    true/false/null, evidence, to_log; only those whose ``holds`` is not false are said),
    ``severity`` (``blip``, ``spike`` or ``divergence``: what it cost, :mod:`stab_core.severity`),
    ``certainty`` (``high``, or ``low`` when its level came from few samples), ``loss_recovered_at``
    (the step the loss was back within the noise band of its trend from before it; null when never
    or no loss is logged).
    """
    members = incident.members if incident is not None else (spike,)
    kind = incident.kind if incident is not None else "spike"
    return {
        "start": excursion_start(spike, members),
        "peak": spike.peak,
        "end": spike.end,
        "metric": spike.metric,
        "ratio": _json_number(spike.ratio),
        "recovered": spike.recovered,
        "cause": diagnosis.cause,
        "confidence": round(diagnosis.confidence, 4),
        "path": [
            {
                "node": visit.node,
                "number": visit.number,
                "question": visit.question,
                "answer": visit.answer,
                "evidence": _json_evidence(dict(visit.evidence)),
            }
            for visit in diagnosis.path
        ],
        "actions": list(diagnosis.actions),
        "leaf": diagnosis.leaf,
        "missing": list(diagnosis.missing),
        "z": _json_number(spike.z),
        "duration": spike.duration,
        "steps_lost": spike.steps_lost,
        "diverged": spike.diverged,
        "nonfinite": spike.nonfinite,
        "recovery_step": spike.recovery_step,
        "baseline": _json_number(spike.baseline),
        "peak_value": _json_number(spike.peak_value),
        "n_samples": spike.n_samples,
        "grad_norm_lead_steps": spike.grad_norm_lead_steps,
        "grad_norm_led": spike.grad_norm_led,
        "kind": kind,
        "metrics": list(dict.fromkeys(m.metric for m in members)),
        "members": [_member_dict(m) for m in members],
        "co_moves": {k: _json_number(v) for k, v in (incident.co_moves if incident is not None else {}).items()},
        "until": incident.until if incident is not None else spike.until,
        "rank_outlier": _rank_outlier(diagnosis),
        "action_evidence": [
            {**check.to_json(), "evidence": _json_evidence(dict(check.evidence))} for check in diagnosis.checks
        ],
        "summary": diagnosis.summary,
        "claims": [
            claim.to_json()
            for claim in incident_claims(
                spike,
                diagnosis,
                kind,
                *(incident.said_recovery if incident else ()),
                print_floor=incident.print_floor if incident else None,
            )
        ],
        "severity": incident.severity if incident is not None else ("divergence" if spike.diverged else "spike"),
        "certainty": incident.certainty if incident is not None else "high",
        "loss_recovered_at": incident.loss_recovered_at if incident is not None else None,
        "fell_back": list(incident.fell_back) if incident is not None and incident.fell_back is not None else None,
        "print_floor": incident.print_floor if incident is not None else None,
    }


def _rank_outlier(diagnosis: Diagnosis) -> dict[str, Any] | None:
    """The rank that stood out in the incident (node 3 answered yes): metric, rank, step and its ratio
    to the median of the other ranks; None when no rank did or the ranks were not logged."""
    for visit in diagnosis.path:
        if visit.node == "rank_concentration" and visit.answer == "yes":
            e = visit.evidence
            ratio = e.get("worst_ratio")
            return {
                "metric": e.get("metric"),
                "rank": e.get("worst_rank"),
                "step": e.get("worst_step"),
                "ratio": _json_number(ratio) if isinstance(ratio, float) else None,
            }
    return None


def outcome(item: Mapping[str, Any]) -> str:
    """How an incident (its JSON object) ended: ``recovered``, ``diverged``, or ``non-finite from the
    first step`` (a run that was never finite had nothing to diverge from)."""
    if item.get("leaf") == NONFINITE_START_LEAF:
        return "non-finite from the first step"
    if not item.get("recovered") and item.get("diverged") is False:
        return "not back to its level, fell again" if item.get("fell_back") else "cut off by the log's end"
    return "recovered" if item.get("recovered") else "diverged"


def verdict_words(item: Mapping[str, Any]) -> str:
    """The outcome and cause of an incident in words: "recovered; cause lr_transition (87%)", or
    "DIVERGED; cause unknown" (no confidence is quoted for a cause that is not held)."""
    state = outcome(item)
    state = state if state == "recovered" else state.upper()
    cause = str(item.get("cause", "unknown"))
    cause_claims = [c for c in item.get("claims") or [] if c.get("kind") == "cause"]
    if cause_claims and cause_claims[0].get("holds") is not True:
        cause = "unknown"  # a cause whose signature is not in the data is not said
    if cause == "unknown":
        return f"{state}; cause unknown"
    return f"{state}; cause {cause} ({float(item.get('confidence') or 0.0):.0%})"


INCIDENT_VERDICT: Final = ("status", "recovery", "cause", "not_logged")
"""The kinds of claim that say what happened to an incident and why (the actions come after them)."""


def statements(item: Mapping[str, Any], kinds: Sequence[str]) -> list[str]:
    """What a surface says about an incident (a :func:`spike_to_dict` object): its claims of ``kinds``
    that hold or cannot be settled (:func:`stab_core.claims.said_from_json`). An object stored before
    claims existed falls back to its ``summary`` (verdict kinds) and ``actions``."""
    claims = item.get("claims")
    if isinstance(claims, list):
        return said_from_json(claims, kinds)
    out: list[str] = []
    if any(kind in INCIDENT_VERDICT for kind in kinds) and item.get("summary"):
        out.append(str(item["summary"]))
    if "action" in kinds:
        out += [str(a) for a in item.get("actions") or []]
    return out


def analysis_notes(summary: Mapping[str, Any]) -> list[str]:
    """What a run's analyses could not do and where its logging stopped or had gaps, in sentences, from
    ``meta['analysis']`` (the summary :mod:`ingest.services.run_analyses` stores)."""
    notes = []
    end = summary.get("logging_end")
    if isinstance(end, Mapping):
        notes.append(f"Logging stopped at step {end.get('step')}: {end.get('reason')}.")
    gaps = summary.get("gaps") or []
    if gaps:
        shown = ", ".join(f"{a}-{b}" for a, b in gaps[:5]) + (" ..." if len(gaps) > 5 else "")
        notes.append(
            f"{len(gaps)} logging gap(s), where every metric is non-finite, left out of the analyses: steps {shown}."
        )
    for item in summary.get("not_run") or []:
        notes.append(f"Not run: {item.get('detector')}: {item.get('reason')}.")
    return notes


def _aligned(series: Series, steps: IntArray) -> FloatArray:
    """``series`` at ``steps`` (NaN where it was not logged)."""
    index = np.minimum(np.searchsorted(series.steps, steps), max(series.steps.size - 1, 0))
    out = np.full(steps.size, np.nan)
    if series.steps.size:
        hit = series.steps[index] == steps
        out[hit] = series.values[index[hit]]
    return out


def _max_norm(view: RunView, norms: FloatArray, coef: FloatArray | None) -> float | None:
    """The run's max_norm from meta, else inferred from a logged clip_coef (coef*(norm+1e-6) on
    clipped steps; any value above every norm when none was clipped)."""
    value = view.meta.get("max_norm")
    if isinstance(value, int | float) and math.isfinite(value) and value > 0:
        return float(value)
    if coef is None:
        return None
    clipped = np.isfinite(coef) & (coef < 1.0) & np.isfinite(norms)
    if clipped.any():
        return float(np.median(coef[clipped] * (norms[clipped] + 1e-6)))
    finite = norms[np.isfinite(norms)]
    return float(2.0 * finite.max()) if finite.size and finite.max() > 0 else None


def run_clip_stats(view: RunView, window: int = 100, saturation: float = 0.9) -> tuple[IntArray, ClipStats] | None:
    """Clipping statistics on the grad-norm steps (:func:`stab_core.clipping.clipping_stats`), or None
    without a grad norm or without both max_norm (meta) and a logged ``clip_coef``."""
    grad = view.series.get("grad_norm")
    if grad is None or grad.steps.size == 0:
        return None
    logged = view.series.get("clip_coef")
    coef = _aligned(logged, grad.steps) if logged is not None else None
    max_norm = _max_norm(view, grad.values, coef)
    if max_norm is None:
        return None
    return grad.steps, clipping_stats(grad.values, max_norm, coef, window=window, saturation=saturation)


def find_incidents(view: RunView, params: AnalysisParams | None = None) -> list[Incident]:
    """The run's incidents: loss and grad-norm spikes (:func:`detect_spikes`), early rises and climbs of
    the loss (:mod:`stab_core.incidents`), grouped so that overlapping ones are one incident. A loss
    event's leading grad-norm spike is linked to it (``grad_norm_lead_steps``). A grad-norm-only
    incident lost no steps unless the loss rose above its level inside it."""
    p = params if params is not None else run_params(view)
    grad, raw = view.series.get("grad_norm"), view.series.get("loss")  # raw: a skip is read on its finiteness
    loss = None if signed_objective(getattr(raw, "values", ())) else raw
    found: list[tuple[SpikeEvent, IncidentKind]] = []
    early: list[SpikeEvent] = []
    if grad is not None and grad.steps.size:
        grad_events = detect_spikes(grad.steps, grad.values, "grad_norm", p.grad_norm_spikes)
        early = new_early_jumps(grad, grad_events, p.grad_norm_spikes)
        grad_events, early = (
            skipped_steps(cut_off_at_log_end(_near_baseline(e, grad, p.grad_norm_spikes), grad, loss), grad, raw)
            for e in (grad_events, early)
        )
        found += [(event, "spike") for event in (*grad_events, *early)]
    interval = 1
    if loss is not None and loss.steps.size:
        interval = logging_interval(loss.steps)
        z = p.loss_spikes.z_threshold
        loss_events = _near_baseline(detect_spikes(loss.steps, loss.values, "loss", p.loss_spikes), loss, p.loss_spikes)
        recent = new_recent_level_jumps(loss, loss_events, p.loss_spikes)
        loss_events = cut_off_at_log_end(loss_events + _near_baseline(recent, loss, p.loss_spikes), loss)
        found += [(event, "spike") for event in loss_events]
        # an early rise on the log's last sample (a launch stopped at its second epoch) ended with the log: no
        # divergence unless its level lasts (round 25)
        early_rises = early_rise_events(loss.steps, loss.values, p.loss_spikes.min_history, "loss", z)
        found += [(event, "early_instability") for event in cut_off_at_log_end(early_rises, loss)]
        early_until = early_limit(loss, p.loss_spikes.window)
        found += [
            (event, "early_instability" if event.start < early_until else "climb")
            for event in banded_climbs(loss.steps, loss.values, z)
        ]
        corroborated = rise_corroborated(view.series.get("val_loss"), view.series.get("loss_scale"))
        found += [(event, "climb") for event in run_end_rises(loss.steps, loss.values, z, corroborated)]
        # a lasting rise never back is a divergence only where its level lasts at the end (round 25: a loss
        # printed 0.0000-0.0001 that rose to 0.04 and ended at 0.0002 is back within its print's noise)
        found += [(event, "climb") for event in cut_off_at_log_end(level_shifts(loss.steps, loss.values), loss)]
        seen = [e for e, _ in found if e.metric == "loss"]
        again = spikes_past_long_incidents(loss.steps, loss.values, "loss", p.loss_spikes, seen, p.blip_samples)
        found += [(event, "spike") for event in again]
    found += [(event, "spike") for event in held_out_nonfinite(view.series, loss)]  # a val loss gone NaN/inf
    incidents = []
    resolution = logging_resolution(loss.values) if loss is not None else 0.0  # the print's, for its floor
    for kind, members in group_incidents(found, join_steps=3 * interval, max_lead_steps=p.max_lead_steps):
        primary = members[0]
        if primary.metric == "loss":
            primary = link_grad_norm_lead([primary], [m for m in members if m.metric == "grad_norm"], p.max_lead_steps)[
                0
            ]
        start, until = min(m.start for m in members), max(m.until for m in members)
        co_moves: dict[str, float] = {}
        for metric, series in (("loss", loss), ("grad_norm", grad)):
            if all(m.metric != metric for m in members):
                ratio = window_ratio(series, start, until)
                if ratio is not None:
                    co_moves[metric] = ratio
        if primary.metric != "loss" and co_moves.get("loss", 0.0) < p.loss_spikes.recover_ratio:
            # the loss stayed within its band: no progress was lost
            primary = replace(primary, steps_lost=0)
        incident = Incident(kind, (primary, *members[1:]), co_moves)
        incidents.append(_costed(incident, loss, early, p, view, resolution))
    incidents += blowup_incidents(view.series, incidents, early_limit(loss, p.loss_spikes.window))  # val blow-ups
    return after_grouping(view.series, sorted(incidents, key=lambda i: i.start))


def _costed(
    incident: Incident,
    loss: Series | None,
    early: Sequence[SpikeEvent],
    p: AnalysisParams,
    view: RunView,
    resolution: float = 0.0,
) -> Incident:
    """``incident`` with its severity, certainty and the step its loss was back on trend."""
    cost, recovered_at, held = costed_recovery(loss, incident)
    low = (cost is not None and cost.certainty == "low") or any(m in early for m in incident.members)
    certainty: Certainty = "low" if low or incident.kind == "early_instability" else "high"
    diverged = incident.primary.diverged
    recovered_at = held_out_back_at(incident.primary, incident.members, recovered_at)
    levels = [m.recovery_step for m in incident.members if m.metric == "loss" and m.n_samples >= LEVEL_SAMPLES]
    if recovered_at is not None and levels and all(b is not None for b in levels):
        # a loss member of LEVEL_SAMPLES+ samples (a level) is back when its level is, not at one noisy dip
        recovered_at = max(recovered_at, *(int(b) for b in levels if b is not None))
    until = max(m.until for m in incident.members)
    band = cost.recovered_at if held is not None and cost is not None else None  # severity: steps to the band
    over = until if recovered_at is None else max(until, recovered_at, band or recovered_at)
    # cut off by the log's end (not recovered, not diverged): whether it lasted is unknown, so not a blip
    cut_off = not incident.primary.recovered and not diverged
    severity = (
        "spike"
        if cut_off or is_held_out_nonfinite(incident.primary)
        else classify(
            diverged=diverged,
            loss_samples=cost.samples_above if cost is not None and cost.band is not None else None,
            member_samples=max(m.n_samples for m in incident.members),
            member_out=max(m.n_samples if m.longest_out is None else m.longest_out for m in incident.members),
            blip_samples=blip_length(p.blip_samples, incident, cost is not None and cost.at_level, loss, until, view),
            steps_lost=over - incident.start,
            loss_left_band=loss_left_band(
                cost, "loss" in incident.metrics, incident.co_moves.get("loss"), p.loss_spikes.min_ratio
            ),
            settled=cost is not None and cost.band is not None and cost.certainty == "high",
            peak_ratio=blowup_ratio(incident.primary, set_aside=loss is None and "loss" in view.series),
            held_out_rose=held_out_rose(view.series.get("val_loss"), incident.start, until),
            recurring=cost.recurring if cost is not None and incident.kind == "spike" and not levels else None,
            recurring_steps=cost.recurring_steps if cost is not None else None,
            loss_unmoved=incident.co_moves.get("loss", math.inf) < p.loss_spikes.recover_ratio,  # no loss member
        )
    )
    # a loss level under the print's ``resolution`` is said as the print's floor, with no ratio (round 25)
    floor = incident.primary.metric == "loss" and under_resolution(incident.primary.baseline, resolution)
    return replace(
        incident,
        print_floor=resolution if floor else None,
        severity=severity,
        certainty=certainty,
        loss_recovered_at=None if diverged else recovered_at,
        held=held,
        trend=(cost.band.level, cost.band.samples) if cost is not None and cost.band is not None else None,
    )


def _diagnosed(
    view: RunView, incidents: Sequence[Incident], p: AnalysisParams, context: DiagnosisContext
) -> list[DiagnosedSpike]:
    out = []
    for index, incident in enumerate(incidents):
        earlier = [(other.start, other.until) for other in incidents[:index]]
        if incident.kind == "early_instability":
            diagnosis = diagnose_early(
                view, incident.subject, p.diagnosis, until=incident.until, facts=context.facts, context=context
            )
        else:
            diagnosis = diagnose(view, incident.subject, p.diagnosis, context, until=incident.until, earlier=earlier)
        out.append(DiagnosedSpike(incident.primary, diagnosis, incident))
    return out


def _in_abandoned(view: RunView, p: AnalysisParams, run: Sequence[Incident] = ()) -> list[DiagnosedSpike]:
    """Incidents in attempts a resume replaced (:mod:`stab_core.abandoned`), less those the replay repeated."""
    out, again = [], {(i.primary.metric, i.primary.peak) for i in run}
    for attempt in abandoned_attempts(view):
        found = attempt.dated(find_incidents(attempt.view, p))
        found = [i for i in found if (i.primary.metric, i.primary.peak) not in again]
        context = replace(prepare_context(attempt.view, p.diagnosis, None), replay_loss=view.series.get("loss"))
        for item in _diagnosed(attempt.view, found, p, context):
            summary = f"{(note := attempt.note())[0].upper()}{note[1:]}: {item.diagnosis.summary}"
            diagnosis = replace(item.diagnosis, summary=summary)
            out.append(replace(item, diagnosis=diagnosis, attempt=(attempt.resumed_from, attempt.abandoned_at)))
    return out


def analyze_run(view: RunView, params: AnalysisParams | None = None) -> RunAnalysis:
    """SNR, clipping statistics and diagnosed incidents of one run (pure: the store persists them).
    Steps where every metric is non-finite or absent (:func:`stab_core.incidents.logging_gaps`) are
    left out: the logging stopped there, training did not blow up. Without ``params``, the run's
    stored sensitivity (:func:`run_params`) sets them."""
    view = with_objective(view)  # a GAN's generator loss where no loss is stored: stab_core.objectives
    p = params if params is not None else run_params(view)
    d = p.diagnosis
    gaps = logging_gaps(view)
    view = per_batch_view(without_steps(view, gaps.dead_steps))  # a running mean judged per batch
    logged = view  # what the log holds: the not-run notes count its samples (round 26)
    view = without_placeholder_grad_norms(view)  # a 0.0 grad norm beside a moved loss is no measurement
    snr = gradient_snr(view, d.proxy_window, d.ema_beta)
    context = prepare_context(view, d, snr)
    collapses = detect_snr_collapse(snr, d.snr_collapse_factor, d.snr_level_window) if snr is not None else []
    clip = run_clip_stats(view, p.clip_window, p.clip_saturation)
    spikes = _diagnosed(view, found := find_incidents(view, p), p, context) + _in_abandoned(view, p, found)
    spikes.sort(key=lambda item: item.spike.start)
    not_run, snr_reason = detectors_not_run(logged, (p.loss_spikes, p.grad_norm_spikes), p.diagnosis.proxy_window, snr)
    return RunAnalysis(
        run=view.name,
        snr=snr,
        snr_collapses=collapses,
        clip_steps=clip[0] if clip is not None else None,
        clip=clip[1] if clip is not None else None,
        spikes=spikes,
        gaps=gaps,
        not_run=not_run,
        snr_reason=snr_reason,
    )


def explain_step(
    view: RunView,
    step: int,
    metric: str = "loss",
    params: AnalysisParams | None = None,
    context: DiagnosisContext | None = None,
) -> DiagnosedSpike:
    """Diagnose the incident at ``step`` (``stabscope diagnose RUN --step N --force``): the incident
    covering it if there is one, else an event built at the first logged sample of ``metric`` at or
    after ``step``, walked as if it were a spike (for a spike seen elsewhere or below the thresholds)."""
    view = with_objective(view)
    p = params if params is not None else run_params(view)
    view = without_placeholder_grad_norms(per_batch_view(without_steps(view, logging_gaps(view).dead_steps)))
    series = view.series.get(metric)
    if series is None or series.steps.size == 0:
        raise ValueError(f"run {view.name!r} has no {metric!r} series; it has {sorted(view.series)}")
    ctx = context if context is not None else prepare_context(view, p.diagnosis)
    incidents = find_incidents(view, p)
    found = incident_at(_diagnosed(view, incidents, p, ctx), step, metric)
    if found is not None:
        return found
    spike_params = p.grad_norm_spikes if metric.startswith("grad_norm") else p.loss_spikes
    event = event_at_step(series.steps, series.values, step, metric, spike_params)
    grad = view.series.get("grad_norm")
    if grad is not None and metric != "grad_norm":
        grad_events = detect_spikes(grad.steps, grad.values, "grad_norm", p.grad_norm_spikes)
        event = link_grad_norm_lead([event], grad_events, p.max_lead_steps)[0]
    earlier = [(i.start, i.until) for i in incidents if i.start < event.start]
    return DiagnosedSpike(event, diagnose(view, event, p.diagnosis, ctx, earlier=earlier))
