"""How a series is shown and downloaded: display smoothing, axis titles with units, and the chart's
points as a table (CSV or Parquet bytes for a download button)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from ingest.store import SeriesData
from stab_core.metrics import unit_of


def ema(steps: np.ndarray, values: np.ndarray, weight: float) -> np.ndarray:
    """Debiased EMA for display, with ``weight`` per *step* (TensorBoard's smoothing slider, per step).

    Applied per point as ``stab_core.snr.ema`` with beta = weight ** (median step spacing), so the
    smoothing looks the same whether a chart shows every step or min/max buckets of many steps.
    """
    from stab_core.snr import ema as bias_corrected_ema

    if not 0.0 <= weight < 1.0:
        raise ValueError(f"EMA weight must lie in [0, 1), got {weight!r}")
    if values.size == 0 or weight == 0.0:
        return np.asarray(values, dtype=np.float64)
    spacing = float(np.median(np.diff(steps))) if steps.size > 1 else 1.0
    return bias_corrected_ema(values, weight ** max(spacing, 1.0))


def metric_label(metric: str) -> str:
    """Axis title: the metric with its unit (``loss (nats/token)``)."""
    unit = unit_of(metric)
    return f"{metric} ({unit})" if unit else metric


def shown_frame(shown: dict[str, SeriesData], ema_weight: float = 0.0) -> pd.DataFrame:
    """Exactly what a chart shows, long form: metric, step, value (mean), min, max, ema, bucketed."""
    parts = []
    for label, s in shown.items():
        parts.append(
            pd.DataFrame(
                {
                    "metric": label,
                    "step": s.steps,
                    "value": s.values,
                    "min": s.min,
                    "max": s.max,
                    "ema": ema(s.steps, s.values, ema_weight) if ema_weight > 0 else s.values,
                    "bucketed": s.bucketed,
                }
            )
        )
    columns = ["metric", "step", "value", "min", "max", "ema", "bucketed"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def to_bytes(frame: pd.DataFrame, fmt: str) -> bytes:
    """``frame`` as CSV or Parquet bytes for a download button."""
    if fmt == "csv":
        return bytes(frame.to_csv(index=False).encode())
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()
