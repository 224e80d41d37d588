"""Step ranges a restart replayed, merged: one definition for the log readers' purge
(``ingest.formats.log_rows``) and the shard compaction's rewind check (``ingest.store.rewinds``).

Here, not in ``ingest.formats``, so that the store reads and writes runs without importing every
log reader (importing any module of that package runs its ``__init__``, which loads them all).
"""

from __future__ import annotations


def merge_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping replayed step ranges ``(first, last)``, inclusive (one restart seen through several
    metrics), merged into one; sorted by first step."""
    merged: list[tuple[int, int]] = []
    for s0, s1 in sorted(spans):
        if merged and s0 <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], s1))
        else:
            merged.append((s0, s1))
    return merged
