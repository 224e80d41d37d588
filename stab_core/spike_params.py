"""The thresholds of spike detection (``stab_core.spikes``) and of the rolling levels other analyses
take from the same baseline (``stab_core.rolling_baseline``). Windows and gaps count logged samples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class SpikeParams:
    """Thresholds of ``stab_core.spikes.detect_spikes``. Windows and gaps are counted in logged samples.

    Attributes:
        window: samples in the rolling baseline (median and MAD).
        stride: the baseline is refreshed every ``stride`` samples; it lags by at most stride-1.
        min_history: finite samples needed before a finite value may be flagged (warm-up transients).
        z_threshold: modified z-score a sample must reach to be flagged.
        min_ratio: value / baseline median a sample must also reach (ignored when the baseline <= 0).
        recover_z: an event ends at the first finite sample whose z (against the baseline frozen at
            the event's start) is <= recover_z ...
        recover_ratio: ... or whose ratio to that baseline is <= recover_ratio (hysteresis band).
        merge_gap: a new detection at most this many samples after an event's recovery joins it.
        rel_mad_floor: MAD floor as a fraction of |baseline median|.
        outlier_ratio: a sample at least twice ``z_threshold`` out is flagged when it is this many
            times its baseline, below ``min_ratio`` (None: never; grad norms of a quiet run wander
            2x at z 12 with nothing lost).
        abs_mad_floor: absolute MAD floor (in the metric's units): below it a series is treated as
            numerically zero. The series' logging resolution (its smallest positive difference) is
            also a floor, so a series printed with 2 decimals has a MAD of at least 0.01.
    """

    window: int = 63
    stride: int = 16
    min_history: int = 16
    z_threshold: float = 6.0
    min_ratio: float = 1.2
    recover_z: float = 3.0
    recover_ratio: float = 1.1
    merge_gap: int = 3
    rel_mad_floor: float = 0.01
    abs_mad_floor: float = 1e-8
    outlier_ratio: float | None = 1.1

    def __post_init__(self) -> None:
        for name in ("window", "stride", "min_history"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SpikeParams.{name} must be a positive integer, got {value!r}")
        if self.merge_gap < 0:
            raise ValueError(f"SpikeParams.merge_gap must be >= 0, got {self.merge_gap!r}")
        if self.stride > self.window:
            raise ValueError(f"SpikeParams.stride ({self.stride}) must not exceed window ({self.window})")
        if not (self.z_threshold > self.recover_z >= 0):
            raise ValueError(
                f"SpikeParams needs z_threshold > recover_z >= 0, got {self.z_threshold} and {self.recover_z}"
            )
        if not (self.min_ratio >= self.recover_ratio >= 1.0):
            raise ValueError(
                f"SpikeParams needs min_ratio >= recover_ratio >= 1, got {self.min_ratio} and {self.recover_ratio}"
            )
        if self.rel_mad_floor < 0 or self.abs_mad_floor < 0:
            raise ValueError("SpikeParams MAD floors must be >= 0")


LOSS_SPIKE_PARAMS: Final = SpikeParams()
"""Defaults for losses (nats): flagged at z >= 6 and >= 1.2x the baseline."""

GRAD_NORM_SPIKE_PARAMS: Final = SpikeParams(min_ratio=2.0, recover_ratio=1.5, outlier_ratio=None)
"""Defaults for gradient norms: a slow drift of the norm (1.4x over a fine-tune is common) is not a
spike; a batch that doubles it is."""


def default_spike_params(metric: str) -> SpikeParams:
    """The default thresholds for a canonical metric: grad-norm-like metrics vs everything else."""
    return GRAD_NORM_SPIKE_PARAMS if metric.split("/", 1)[0].startswith("grad_norm") else LOSS_SPIKE_PARAMS


def level_params(window: int) -> SpikeParams:
    """Thresholds for a rolling level of a series other than the loss (the SNR, an early-warning score):
    ``window`` samples, refreshed every window/4, from window/4 samples on."""
    stride = max(1, window // 4)
    return SpikeParams(window=window, stride=stride, min_history=stride)
