"""The five questions of the decision tree (``stab_core.decision_tree``) answered from a run's data
around one spike: numerical fault, schedule transition, rank concentration, MoE router seesaw, SNR
collapse. Each answer is yes / no / unknown with the numbers behind it; ``stab_core.diagnosis`` walks
the tree with them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import numpy.typing as npt

from stab_core.action_premises import RunFacts, run_facts, step_window
from stab_core.cause_signatures import loss_led_signature, lr_rise_signature, replayed_normally
from stab_core.decision_tree import NONFINITE_FROM_START, DiagnosisParams
from stab_core.lr_groups import other_lr_groups
from stab_core.metrics import loss_falls
from stab_core.moe_signs import names_moe
from stab_core.runview import FloatArray, IntArray, RankMatrix, RunView, Series
from stab_core.schedulers import Transition, largest_lr_change, schedule_transitions
from stab_core.snr import SnrSeries, gradient_snr, snr_drop, temporal_snr_proxy
from stab_core.spikes import SpikeEvent
from stab_core.tree_actions import Evidence
from stab_core.tree_walk import NodeResult

LOGGED_TRANSITION_EVENTS: Final = frozenset({"schedule_transition", "cycle_restart", "data_switch", "warmup_end"})
"""Kinds of logged run events that mark a schedule transition at node 2."""

RISING_LR_TRANSITIONS: Final = frozenset({"warmup_end", "cycle_restart", "lr_jump"})
"""Kinds of transitions found in the logged LR (:func:`stab_core.schedulers.schedule_transitions`) that
raise the LR and so count at node 2 (a ``decay_start`` lowers it: no)."""


@dataclass(frozen=True)
class DiagnosisContext:
    """Per-run work shared by every spike's diagnosis (compute once with :func:`prepare_context`)."""

    snr: SnrSeries | None
    lr_usable: bool
    grad_norm: Series | None = None
    facts: RunFacts | None = None
    replay_loss: Series | None = None
    """In an attempt a resume replaced: the kept run's loss, which replays the same steps (docs/diagnosis.md, "Abandoned
    attempts")."""


def prepare_context(
    view: RunView, params: DiagnosisParams | None = None, snr: SnrSeries | None = None
) -> DiagnosisContext:
    """The SNR (``snr``, else :func:`stab_core.snr.gradient_snr`) and whether the LR is usable."""
    p = params if params is not None else DiagnosisParams()
    chosen = snr if snr is not None else gradient_snr(view, p.proxy_window, p.ema_beta)
    lr = view.series.get("lr")
    lr_usable = lr is not None and int(np.isfinite(lr.values).sum()) >= 2
    return DiagnosisContext(
        snr=chosen, lr_usable=lr_usable, grad_norm=view.series.get("grad_norm"), facts=run_facts(view)
    )


def logging_interval(steps: IntArray) -> int:
    """Typical logging interval in steps: the median gap over ~1,000 evenly picked samples (cheap
    enough to ask per spike on a 10M-step run)."""
    if steps.size < 2:
        return 1
    pick = max(1, steps.size // 1_000)
    return max(1, int(np.median(np.diff(steps[::pick])) / pick))


def _strength(value: float, threshold: float) -> float:
    """0.6 at the threshold rising to 1 at 4x it (log scale)."""
    if not math.isfinite(value):
        return 1.0
    return 0.6 + 0.4 * min(1.0, max(0.0, math.log(value / threshold) / math.log(4.0)))


def _count_nonfinite(view: RunView, metric: str, lo: int, hi: int) -> int | None:
    series = view.series.get(metric)
    if series is None:
        return None
    return int((~np.isfinite(step_window(series, lo, hi)[1])).sum())


def _positive_total(view: RunView, metric: str, lo: int, hi: int) -> float | None:
    series = view.series.get(metric)
    if series is None:
        return None
    values = step_window(series, lo, hi)[1]
    values = values[np.isfinite(values)]
    return float(values.sum()) if values.size else 0.0


def node_numerical(view: RunView, spike: SpikeEvent, p: DiagnosisParams) -> NodeResult:
    lookback = max(
        p.numerical_lookback_steps,
        2 * logging_interval(view.series[spike.metric].steps) if spike.metric in view.series else 0,
    )
    lo, hi = spike.onset - lookback, spike.end
    evidence: Evidence = {
        "spike_nonfinite": spike.nonfinite,
        "nonfinite_loss": _count_nonfinite(view, "loss", lo, hi),
        "nonfinite_grad_norm": _count_nonfinite(view, "grad_norm", lo, hi),
        "nan_iterations": _positive_total(view, "nan_iterations", lo, hi),
        "nonfinite_grads": _positive_total(view, "nonfinite_grads", lo, hi),
        "loss_scale_level": None,
        "loss_scale_min": None,
        "loss_scale_drop": None,
        "loss_scale_floor": p.loss_scale_floor,  # the run's floor: a claim on the scale judges with this one
    }
    collapsed = False
    scale = view.series.get("loss_scale")
    if scale is not None:
        recent = step_window(scale, lo, hi)[1]
        before = step_window(scale, lo - 10 * lookback, lo - 1)[1]
        # a loss scale is positive: Megatron prints "loss scale: -1.0" when DeepSpeed owns the optimizer,
        # a placeholder, not a scale that fell to nothing
        recent, before = recent[np.isfinite(recent) & (recent > 0)], before[np.isfinite(before) & (before > 0)]
        if recent.size:
            level = float(np.median(before)) if before.size else float(recent[0])
            low = float(recent.min())
            drop = level / low if low > 0 else math.inf
            evidence.update(loss_scale_level=level, loss_scale_min=low, loss_scale_drop=drop)
            earlier = scale.values[(scale.steps < lo) & np.isfinite(scale.values) & (scale.values > 0)]
            # the run's highest scale before the window (a claim names it where the log elides the fall)
            evidence["loss_scale_earlier_max"] = float(earlier.max()) if earlier.size else None
            # a bf16 run prints a constant scale of 1.0: the floor counts only when the scale fell to it
            collapsed = drop >= p.loss_scale_collapse or (low <= p.loss_scale_floor and level > low)
    counts = [evidence[k] for k in ("nonfinite_loss", "nonfinite_grad_norm", "nan_iterations", "nonfinite_grads")]
    nonfinite = spike.nonfinite or any(isinstance(c, int | float) and c > 0 for c in counts)
    if nonfinite:
        from_start = _nonfinite_from_start(view, spike.onset)
        grads_never_finite = not from_start and _grads_never_finite(view, spike)
        # the same never-finite grad norm beside a loss that falls: the readout is broken (status says so)
        evidence["grad_readout_broken"] = (
            not from_start and not grads_never_finite and _grads_never_finite_shape(view, spike) and _loss_falls(view)
        )
        from_start = from_start or grads_never_finite
        evidence["nonfinite_from_first_step"] = from_start
        evidence["nonfinite_metric"] = spike.metric if grads_never_finite else "loss" if from_start else None
        return NodeResult("yes", evidence, 1.0, branch=NONFINITE_FROM_START if from_start else None)
    if collapsed:
        return NodeResult("yes", evidence, 0.85)
    return NodeResult("no", evidence)


def _nonfinite_from_start(view: RunView, onset: int) -> bool:
    """Is the loss non-finite at its first logged step, with no finite loss logged before ``onset``?
    (Then the run never trained on finite numbers before the incident.) False without a loss."""
    loss = view.series.get("loss")
    if loss is None or not loss.steps.size:
        return False
    before = loss.values[: max(1, int(np.searchsorted(loss.steps, onset)))]
    return not bool(np.isfinite(before).any())


NEVER_FINITE_SHARE: Final = 0.9
"""A grad norm non-finite at this share of its logged samples or more, from its first, never got finite
gradients: fp16's loss-scale warm-up skips a few first steps (inf, then finite), this is every step."""


def _grads_never_finite_shape(view: RunView, spike: SpikeEvent) -> bool:
    """:func:`_grads_never_finite` without its condition on the loss."""
    series = view.series.get(spike.metric)
    if not spike.metric.startswith("grad_norm") or series is None or not series.values.size:
        return False
    before = series.values[: max(1, int(np.searchsorted(series.steps, spike.onset)))]
    share = float(np.mean(~np.isfinite(series.values)))
    return not bool(np.isfinite(before).any()) and share >= NEVER_FINITE_SHARE


def _grads_never_finite(view: RunView, spike: SpikeEvent) -> bool:
    """Is the spike's metric a gradient norm non-finite at its first logged sample, with no finite value
    before ``spike.onset`` and non-finite at :data:`NEVER_FINITE_SHARE` of its samples or more? Then the
    loss may be finite (a forward pass works) but no update is: the model never trains (issue #32)."""
    return _grads_never_finite_shape(view, spike) and not _loss_falls(view)


def _loss_falls(view: RunView) -> bool:
    """A loss that falls shows updates that work: a grad norm non-finite at every step beside it is a
    broken readout (a sum of squares that overflows, inf placeholders reduced across ranks or stages), not
    a run that never trains (docs/diagnosis.md, "Non-finite values")."""
    loss = view.series.get("loss")
    return loss is not None and loss_falls(loss.values) is True


def node_lr_transition(view: RunView, spike: SpikeEvent, p: DiagnosisParams, context: DiagnosisContext) -> NodeResult:
    """Node 2 on the run's ``lr``, then on each other logged param group's LR
    (:func:`stab_core.lr_groups.other_lr_groups`): the first group that answers "yes" answers for the run, its name
    in the evidence (``lr_group``). A bias group that warms down while the weight groups ramp up is not "no LR
    rise" (round 26 r26d)."""
    result = _lr_transition_on(view, view.series.get("lr") if context.lr_usable else None, spike, p)
    if result.answer == "yes":
        return result
    for name, group in other_lr_groups(view.series):
        answer = _lr_transition_on(view, group, spike, p)
        if answer.answer == "yes" or result.answer == "unknown":
            result = replace(answer, evidence={**answer.evidence, "lr_group": name})
        if result.answer == "yes":
            break
    return result


def _lr_transition_on(view: RunView, lr: Series | None, spike: SpikeEvent, p: DiagnosisParams) -> NodeResult:
    """Node 2 read on one logged LR series (None: only the run's logged transition events)."""
    transition_events = [event for event in view.events if event.kind in LOGGED_TRANSITION_EVENTS]
    if lr is None and not transition_events:
        return NodeResult("unknown", {"lr_logged": False, "transition_events": 0})
    window = p.lr_window_steps
    if lr is not None:
        window = max(window, 3 * logging_interval(lr.steps))
    onset = spike.onset
    evidence: Evidence = {"window_steps": window, "lr_rel_change": None, "lr_change_step": None}
    rel_change = 0.0
    transitions: list[Transition] = []
    if lr is not None:
        a, b = np.searchsorted(lr.steps, [onset - window, onset + 1])
        steps, values = lr.steps[max(0, a - 1) : b], lr.values[max(0, a - 1) : b]
        if np.isfinite(values).sum() >= 2:
            change_step, rel_change = largest_lr_change(steps, values)
            evidence.update(lr_rel_change=rel_change, lr_change_step=change_step)
        # transitions from a local slice (a warmup end needs the fall after it): O(window) per spike
        # rather than O(run) per run
        a, b = np.searchsorted(lr.steps, [onset - 2 * window, onset + window + 1])
        if np.isfinite(lr.values[a:b]).sum() >= 2:
            transitions = schedule_transitions(lr.steps[a:b], lr.values[a:b], rel_change=p.transition_rel_change)
    nearest: tuple[int, str] | None = None  # (step, kind) of the latest transition in the window
    for transition in transitions:
        rising = transition.kind in RISING_LR_TRANSITIONS and transition.rel_change > 0
        in_window = onset - window <= transition.step <= onset
        if rising and in_window and (nearest is None or transition.step > nearest[0]):
            nearest = (transition.step, transition.kind)
    for event in transition_events:
        if onset - window <= event.step <= onset and (nearest is None or event.step > nearest[0]):
            nearest = (event.step, event.kind)
    signature: bool | None = None
    if lr is not None:
        signature, rise_evidence = lr_rise_signature(lr, onset, window)
        evidence.update(rise_evidence)
    if nearest is not None and nearest[1] == "data_switch":
        signature = True  # a data-recipe switch needs no LR move
    if signature is False:
        # a transition found only by its shape (or a logged event) is not the cause when the LR did not
        # rise before the spike, or has since fallen back (a drop after a short warmup)
        return NodeResult("no", evidence)
    if nearest is not None:
        evidence.update(
            transition_step=nearest[0], transition_kind=nearest[1], steps_since_transition=onset - nearest[0]
        )
        closeness = 1.0 - (onset - nearest[0]) / window
        return NodeResult("yes", evidence, 0.7 + 0.3 * closeness)
    if rel_change >= p.lr_rel_change:
        evidence.update(transition_step=evidence["lr_change_step"], transition_kind="lr_rise")
        return NodeResult("yes", evidence, _strength(rel_change, p.lr_rel_change))
    return NodeResult("no", evidence)


def _leave_one_out_medians(values: FloatArray) -> FloatArray:
    """For each entry of ``values`` (1-D, finite, n >= 2) the median of all the others."""
    n = values.size
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)

    def remaining(j: npt.NDArray[np.int64]) -> FloatArray:
        # j-th smallest once the entry itself is removed
        return ranked[np.where(j < position, j, j + 1)]

    m = n - 1
    if m % 2:
        return remaining(np.full(n, m // 2))
    return 0.5 * (remaining(np.full(n, m // 2 - 1)) + remaining(np.full(n, m // 2)))


RANK_EVIDENCE_METRICS: Final = ("grad_norm_local", "grad_norm", "loss")
"""Per-rank series node 3 reads first, in this order; after them any other per-rank gradient-norm or loss
series (a trainer's per-rank folders may log ``grad_norm`` or a namespaced loss per rank)."""


def is_rank_evidence(metric: str) -> bool:
    """A per-rank series node 3 can read: a gradient norm or a loss."""
    return metric.startswith("grad_norm") or "loss" in metric.split("/")[-1]


def _rank_matrix(view: RunView) -> tuple[str, RankMatrix] | None:
    others = sorted(name for name in view.per_rank if name not in RANK_EVIDENCE_METRICS and is_rank_evidence(name))
    for metric in (*RANK_EVIDENCE_METRICS, *others):
        matrix = view.per_rank.get(metric)
        if matrix is not None and matrix.ranks.size >= 2:
            return metric, matrix
    return None


def _dense_rank_outlier(matrix: RankMatrix, a: int, b: int, rank_ratio: float) -> tuple[float, int, int, int] | None:
    """The loop of :func:`node_rank_concentration` over columns a..b-1 at once, when every rank logged a
    finite value in each of them (else None: the loop handles the rest). (ratio, rank, step, outliers)
    of the first column holding the largest ratio of a rank to the median of the others."""
    if b <= a:
        return None
    values = matrix.values[:, a:b]
    if values.shape[0] < 2 or not (matrix.present[:, a:b].all() and np.isfinite(values).all()):
        return None
    n = values.shape[0]
    order = np.argsort(values, axis=0, kind="stable")
    ranked = np.take_along_axis(values, order, axis=0)
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.arange(n)[:, None], axis=0)

    def remaining(j: int) -> FloatArray:
        # j-th smallest of each column once the entry itself is removed
        return np.take_along_axis(ranked, np.where(j < position, j, j + 1), axis=0)

    m = n - 1
    medians = remaining(m // 2) if m % 2 else 0.5 * (remaining(m // 2 - 1) + remaining(m // 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = values / medians
    ratios = np.where(np.isnan(ratios), 0.0, ratios)
    worst = np.argmax(ratios, axis=0)
    peaks = ratios[worst, np.arange(b - a)]
    column = int(np.argmax(peaks))
    outliers = int((ratios[:, column] >= rank_ratio).sum())
    return float(peaks[column]), int(matrix.ranks[worst[column]]), int(matrix.steps[a + column]), outliers


def node_rank_concentration(view: RunView, spike: SpikeEvent, p: DiagnosisParams) -> NodeResult:
    found = _rank_matrix(view)
    if found is None:
        return NodeResult("unknown", {"ranks": int(max((m.ranks.size for m in view.per_rank.values()), default=0))})
    metric, matrix = found
    lookback = max(p.rank_lookback_steps, 2 * logging_interval(matrix.steps))
    # the fault shows where the spike begins; later samples of a long event are its aftermath
    a, b = np.searchsorted(matrix.steps, [spike.onset - lookback, spike.start + lookback + 1])
    allowed = max(1, math.floor(p.rank_max_fraction * matrix.ranks.size))
    best = _dense_rank_outlier(matrix, a, b, p.rank_ratio)
    for column in range(a, b) if best is None else ():
        present = matrix.present[:, column]
        values = matrix.values[present, column]
        ranks = matrix.ranks[present]
        if values.size < 2:
            continue
        finite = np.isfinite(values)
        if finite.sum() >= 2:
            medians = np.full(values.size, np.nan)
            # non-finite ranks compare with the finite others; they count as infinitely far out
            medians[finite] = _leave_one_out_medians(values[finite])
            medians[~finite] = np.median(values[finite])
        else:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(finite, values / medians, np.inf)
        ratios = np.where(np.isnan(ratios), 0.0, ratios)
        worst = int(np.argmax(ratios))
        outliers = int((ratios >= p.rank_ratio).sum())
        if best is None or ratios[worst] > best[0]:
            best = (float(ratios[worst]), int(ranks[worst]), int(matrix.steps[column]), outliers)
    if best is None:
        return NodeResult("unknown", {"metric": metric, "ranks": int(matrix.ranks.size), "samples_in_window": 0})
    ratio, rank, step, outliers = best
    evidence: Evidence = {
        "metric": metric,
        "ranks": int(matrix.ranks.size),
        "worst_rank": rank,
        "worst_step": step,
        "worst_ratio": ratio,
        "outlier_ranks": outliers,
        "outlier_ranks_allowed": allowed,
    }
    if ratio >= p.rank_ratio and outliers <= allowed:
        return NodeResult("yes", evidence, _strength(ratio, p.rank_ratio))
    return NodeResult("no", evidence)


def _expert_load(view: RunView) -> tuple[IntArray, FloatArray] | None:
    series = view.series.get("expert_load_max_over_mean")
    if series is not None and series.steps.size:
        return series.steps, series.values
    matrix = view.per_rank.get("expert_load_max_over_mean")
    if matrix is not None and matrix.steps.size:
        masked = np.where(matrix.present, matrix.values, np.nan)
        return matrix.steps, np.fmax.reduce(masked, axis=0)  # NaN only where no rank logged
    return None


def _is_dense(meta: Mapping[str, object]) -> bool:
    experts = meta.get("num_experts")
    return meta.get("moe") is False or (isinstance(experts, int | float) and experts <= 1)


def node_router(view: RunView, spike: SpikeEvent, p: DiagnosisParams) -> NodeResult:
    load = _expert_load(view)
    if load is None:
        if _is_dense(view.meta):
            stated = {"num_experts": view.meta["num_experts"]} if "num_experts" in view.meta else {}
            return NodeResult("no", {"moe": False, **stated})  # a dense model: the count it states
        # unanswerable either way; "moe_named" False: nothing names experts, so the load is not asked for
        return NodeResult("unknown", {"expert_load_logged": False, "moe_named": names_moe(view)})
    steps, values = load
    lead = max(p.router_lead_steps, 3 * logging_interval(steps))
    a, b, c = np.searchsorted(steps, [spike.onset - lead - p.router_baseline_steps, spike.onset - lead, spike.peak + 1])
    before, recent = values[a:b], values[b:c]
    before, recent = before[np.isfinite(before)], recent[np.isfinite(recent)]
    if before.size == 0 or recent.size == 0:
        return NodeResult("unknown", {"expert_load_logged": True, "samples_before": int(before.size)})
    level = float(np.median(before))
    peak = float(recent.max())
    jump = peak / level if level > 0 else math.inf
    evidence: Evidence = {"load_level": level, "load_peak": peak, "load_jump": jump, "lead_steps": lead}
    if jump >= p.router_jump:
        return NodeResult("yes", evidence, _strength(jump, p.router_jump))
    return NodeResult("no", evidence)


def _without_earlier(
    snr: SnrSeries, grad: Series | None, lo: int, hi: int, spans: Sequence[tuple[int, int]], interval: int
) -> tuple[SnrSeries, int]:
    """The SNR over lo..hi-1 without the samples of earlier incidents (``spans``), and how many grad-norm
    or SNR samples were left out. The temporal proxy is recomputed from the grad norm with those samples
    removed (one outlier stays in its rolling window for ``window`` samples: that tail is the earlier
    incident's, not a precursor); the two-batch estimate has the incidents' own samples masked."""
    if snr.estimator == "temporal_proxy" and grad is not None:
        a, b = np.searchsorted(grad.steps, [lo - 2 * snr.window * interval, hi])
        steps, values = grad.steps[a:b], grad.values[a:b]
        keep = np.ones(steps.size, dtype=bool)
        for start, end in spans:
            c, d = np.searchsorted(steps, [start, end + 1])
            keep[c:d] = False
        return temporal_snr_proxy(steps[keep], values[keep], snr.window), int((~keep).sum())
    a, b = np.searchsorted(snr.steps, [lo, hi])
    steps, masked = snr.steps[a:b], snr.values[a:b].copy()
    hidden = 0
    for start, end in spans:
        c, d = np.searchsorted(steps, [start, end + 1])
        hidden += int(np.isfinite(masked[c:d]).sum())
        masked[c:d] = np.nan
    return SnrSeries(steps, masked, snr.estimator, snr.label, snr.window, snr.batch), hidden


def _logged(series: Series | None) -> bool:
    return series is not None and bool(np.isfinite(series.values).any())


def node_snr_collapse(
    spike: SpikeEvent,
    p: DiagnosisParams,
    context: DiagnosisContext,
    earlier: Sequence[tuple[int, int]] = (),
) -> NodeResult:
    if replayed_normally(spike, context.replay_loss):
        # the same batches, replayed from a checkpoint by the resumed run, gave a normal loss: whatever the
        # SNR did, the data is not what spiked (docs/diagnosis.md, "Causes")
        return NodeResult("no", {"replayed_normally": True})
    snr = context.snr
    if snr is None or snr.steps.size == 0:
        # the grad norm may be logged and still too short for an SNR: then what is missing is samples
        return NodeResult("unknown", {"snr_available": False, "grad_norm_logged": _logged(context.grad_norm)})
    interval = logging_interval(snr.steps)
    lookback = max(p.snr_lookback_steps, 10 * interval)
    baseline = max(p.snr_baseline_steps, 10 * interval)
    lo = spike.onset - lookback - baseline
    # an earlier incident's SNR fall (and the rolling window still carrying it) is its own, not a precursor
    spans = [(start, until) for start, until in earlier if start < spike.onset and until >= lo - 2 * snr.window]
    hidden = 0
    if spans:
        snr, hidden = _without_earlier(snr, context.grad_norm, lo, spike.onset, spans, interval)
    drop = snr_drop(snr, spike.onset, lookback, baseline)
    evidence: Evidence = {
        "estimator": snr.estimator,
        "snr_drop": drop.drop,
        "snr_min_step": drop.step,
        "snr_value": drop.value,
        "snr_level": drop.level,
        "lookback_steps": lookback,
        "baseline_steps": baseline,
        "samples": drop.samples,
        "recovered": spike.recovered,
        "recovery_step": spike.recovery_step,
        "earlier_incident_start": max(start for start, _ in spans) if spans else None,
        "samples_left_out_for_earlier_incidents": hidden,
    }
    if drop.samples == 0:
        return NodeResult("unknown", {**evidence, "grad_norm_logged": _logged(context.grad_norm)})
    led, lead_evidence = loss_led_signature(spike, context.grad_norm, interval)
    evidence.update(lead_evidence)

    if drop.drop >= p.snr_collapse_factor and led is not False:
        # the temporal proxy is a weaker witness than the two-batch noise scale
        discount = 1.0 if snr.estimator == "two_batch" else 0.9
        return NodeResult("yes", evidence, discount * _strength(drop.drop, p.snr_collapse_factor))
    return NodeResult("no", evidence)
