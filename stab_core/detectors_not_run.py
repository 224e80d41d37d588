"""Which detectors a run's data cannot feed, and why (a "Not run" note says so with what to log).

Split out of :mod:`stab_core.analysis` by purpose; pure: numpy in, reasons out."""

from __future__ import annotations

import numpy as np

from stab_core.metrics import SIGNED_LOSS_REASON, SUSPECT_LINES, loss_falls, missing_reason, signed_objective
from stab_core.runview import RunView
from stab_core.snr import SnrSeries
from stab_core.spike_params import SpikeParams


def detectors_not_run(
    view: RunView,
    spike_params: tuple[SpikeParams, SpikeParams],
    proxy_window: int,
    snr: SnrSeries | None,
) -> tuple[list[tuple[str, str]], str | None]:
    """Detectors the run's data cannot feed, and why; and why there is no SNR (None when there is).
    ``spike_params`` are the loss and the grad-norm spike detectors' settings; ``proxy_window`` is the
    SNR proxy's window in logged samples."""
    not_run: list[tuple[str, str]] = []
    for metric, params in zip(("loss", "grad_norm"), spike_params, strict=True):
        series = view.series.get(metric)
        finite = int(np.isfinite(series.values).sum()) if series is not None else 0
        if series is None or (metric == "loss" and signed_objective(series.values)):
            not_run.append(
                (
                    f"{metric} spikes",
                    missing_reason(metric, view.series, view.meta.get(SUSPECT_LINES, ()))
                    if series is None
                    else SIGNED_LOSS_REASON,
                )
            )
        elif finite == 0 and series.values.size:
            # every sample logged and none finite (grad norm inf at every step): "0 finite samples" would read
            # as "too few logged"; what the log shows is that all of them are non-finite (issue #32)
            nothing = "nothing to compare" + ("; only the early-instability check ran" if metric == "loss" else "")
            not_run.append((f"{metric} spikes", f"all {series.values.size} {metric} samples are non-finite: {nothing}"))
        elif finite <= params.min_history:
            not_run.append(
                (
                    f"{metric} spikes",
                    f"{finite} finite {metric} samples: the spike detector needs more than {params.min_history} (it "
                    "compares each sample with the median of the ones before it); only the early-instability "
                    "check ran"
                    if metric == "loss"
                    else f"{finite} finite {metric} samples: the spike detector needs more than {params.min_history}",
                )
            )
    reason = None
    grad = view.series.get("grad_norm")
    # all 0: DeepSpeed's `grad norm: 0.000` when it does not compute the norm. A non-finite value among the
    # zeros shows a norm computed (nan, then 0 once the weights froze): logged, not a placeholder (issue #32)
    zero = grad is not None and bool(grad.values.size and np.isfinite(grad.values).all() and not grad.values.any())
    loss = view.series.get("loss")
    if zero and grad is not None and loss is not None and loss_falls(loss.values) is False:
        # 0 at every step beside a loss that does not fall is a reading: no gradient reaches the weights and
        # the run does not train; a placeholder sits beside a loss that falls (docs/diagnosis.md, "Non-finite values")
        reason = (
            f"no SNR: the gradient norm is 0 at every one of its {grad.values.size} samples while the loss does "
            "not fall: no gradient reaches the weights (the run is not training); the SNR proxy needs a non-zero "
            "norm"
        )
    elif grad is None or zero:
        reason = (
            f"no SNR: the run logs no gradient norm{' (0 at every step: a placeholder)' * zero}; log the global "
            "grad norm before clipping (and per-rank local norms with the batch sizes for the two-batch estimator)"
        )
    elif grad.values.size and not np.isfinite(grad.values).any():
        reason = f"no SNR: all {grad.values.size} grad-norm samples are non-finite; the SNR proxy needs finite ones"
    elif snr is None or not np.isfinite(snr.values).any():
        window = snr.window if snr is not None else proxy_window
        count = int(np.isfinite(grad.values).sum())
        reason = (
            f"no SNR yet: {count} grad-norm samples, the SNR proxy needs {window} (a rolling window); log "
            "per-rank local grad norms and the batch sizes for the two-batch estimator"
        )
    if reason is not None:
        not_run.append(("snr", reason))
    return not_run, reason
