"""The Ranks page's outlier table: ``stab_core.alerts.rank_deviations`` as rows, most deviant first."""

from __future__ import annotations

from dataclasses import asdict, fields

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from stab_core.alerts import RankDeviation, rank_deviations


def rank_outliers(
    ranks: np.ndarray,
    steps: np.ndarray,
    matrix: np.ndarray,
    *,
    groups: np.ndarray | None = None,
    straggles: bool = True,
) -> pd.DataFrame:
    """``stab_core.alerts.rank_deviations`` as a table (most deviant rank first): ``rank``, ``mean``,
    ``deviation_pct``, ``peak_deviation_pct``, ``peak_step``, ``max_z``, ``flagged_pct``, ``kind``.
    ``groups``: each rank's comparison group (its pipeline stage); ``straggles``: whether the metric's
    persistent outliers are stragglers (``stab_core.alerts.STRAGGLER_METRICS``)."""
    columns = [f.name for f in fields(RankDeviation)]
    rows = rank_deviations(ranks, steps, matrix, groups=groups, straggles=straggles)
    return pd.DataFrame([asdict(d) for d in rows], columns=columns)
