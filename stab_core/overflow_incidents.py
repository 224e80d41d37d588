"""Two severities of lone non-finite grad norms: the first of a run whose loss is printed 0 is shown, and one more
skipped update on the log's last sample is a blip, not a divergence (round 23, issue #32; docs/diagnosis.md,
"Non-finite values").

A lone non-finite grad norm with the loss finite and the next norm finite is a dynamic loss scaler's
skipped update (:mod:`stab_core.skipped_steps`); it is a blip because the loss shows that the run lost
nothing (:mod:`stab_core.unfelt_outliers`). That reading needs a loss that can show it. A GRPO/RL trainer's
printed loss is the policy objective with zero-mean advantages: ``0.0`` / ``-0.0`` on every record, whatever
the gradients did. Beside such a loss the grad norm is the only sign of the update's health, so the run's
first overflow (the first non-finite grad norm after finite ones: fp16 overflow the scaler skipped, or worse)
is an incident a user must see, at least a ``spike``; the lone ones after it, each followed by a finite norm,
are that one pattern recurring and stay blips.

The rule: where every finite logged loss sample but at most :data:`INFORMATIVE_SHARE` of them is exactly 0,
the incident holding the grad-norm series' first non-finite sample after a finite one, made a ``blip`` by the
severity rules, is a ``spike`` (its recovery stands).

On the log's last sample a lone non-finite grad norm has no next sample to show the skip; where the loss is
finite there and every earlier non-finite grad norm of the run was a skipped update
(:func:`stab_core.skipped_steps.skipped_steps` marks it neither recovered nor diverged), it is that pattern once
more: an incident of such members only is a ``blip`` (a cut-off event is a ``spike`` otherwise).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.incidents import Incident
from stab_core.runview import Series
from stab_core.skipped_steps import skip_at_end

INFORMATIVE_SHARE: Final = 0.1
"""At most this share of the finite loss samples may be non-zero for the loss to count as printed 0 (a
GRPO loss is now and then a rounded 1e-4 or so)."""
MIN_LOSS_SAMPLES: Final = 5
"""Fewer finite loss samples than this tell nothing about how the loss prints."""


def loss_printed_zero(loss: Series) -> bool:
    """Is ``loss`` (logged) exactly 0 on all but :data:`INFORMATIVE_SHARE` of its finite samples?"""
    finite = loss.values[np.isfinite(loss.values)]
    return finite.size >= MIN_LOSS_SAMPLES and float(np.mean(finite != 0.0)) <= INFORMATIVE_SHARE


def first_overflow_step(grad: Series) -> int | None:
    """The step of the first non-finite sample of ``grad`` after a finite one, or None."""
    bad = ~np.isfinite(grad.values)
    good = np.flatnonzero(~bad)
    if not good.size:
        return None
    later = np.flatnonzero(bad[good[0] :])
    return int(grad.steps[good[0] + later[0]]) if later.size else None


def _end_skip(incident: Incident, grad: Series, loss: Series) -> bool:
    """Does ``incident`` hold only lone non-finite grad norms on the series' last sample that
    :func:`~stab_core.skipped_steps.skip_at_end` calls one more skipped update?"""
    return all(
        m.metric == "grad_norm" and not m.diverged and not m.recovered and skip_at_end(m, grad, loss)
        for m in incident.members
    )


def overflow_severities(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` with a skipped update on the last sample a ``blip`` and, where the loss is printed 0, the
    blip holding the run's first grad-norm overflow a ``spike`` (see the module)."""
    grad, loss = series.get("grad_norm"), series.get("loss")
    if grad is None or not grad.steps.size or loss is None or not loss.steps.size:
        return list(incidents)
    incidents = [replace(i, severity="blip") if _end_skip(i, grad, loss) else i for i in incidents]
    if not loss_printed_zero(loss):
        return incidents
    step = first_overflow_step(grad)
    if step is None:
        return list(incidents)
    return [
        replace(incident, severity="spike")
        if incident.severity == "blip"
        and any(m.metric == "grad_norm" and m.nonfinite and m.start <= step <= m.until for m in incident.members)
        else incident
        for incident in incidents
    ]
