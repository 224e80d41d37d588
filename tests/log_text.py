"""Helpers for tests that write a synthetic log and read back what a reader stored."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_lines(tmp_path: Path, name: str, lines: list[str]) -> Path:
    """Write ``lines`` (one per line, newline-terminated) to ``tmp_path / name`` and return the path."""
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def series_by_metric(parsed) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{metric: (steps, values)}`` of every stored row, all ranks, in stored order."""
    t = parsed.table
    metrics = np.asarray(t.column("metric").to_pylist())
    steps = t.column("step").to_numpy()
    values = t.column("value").to_numpy()
    return {m: (steps[metrics == m], values[metrics == m]) for m in np.unique(metrics)}
