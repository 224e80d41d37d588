"""The run store: per-rank shards and imported logs -> Parquet, catalogued and queried through DuckDB.

On disk (``<store>`` defaults to ``$STABSCOPE_STORE`` or ``~/.local/share/stabscope/store``)::

    catalog.duckdb                        runs, shard offsets, staged batches, events, spikes
    runs/run=<name>/long/g<gen>.parquet   (rank, step, metric, value, wall_time) in blocks of one
                                          (metric, rank) sorted by step; the footer's index gives each
                                          block's rows (merged generations: metric/rank/step order;
                                          a first generation written in one pass: rank/metric order)
    runs/run=<name>/runlevel/g<gen>.parquet the rank -1 rows of the long file (what the overview reads)
    runs/run=<name>/rollup/g<gen>.parquet cross-rank count/mean/min/max/std/argmin/argmax per step
    runs/run=<name>/rankb/g<gen>.parquet  per-rank step buckets for the rank x step heatmap
    runs/run=<name>/tail/g<gen>.parquet   a full generation's last rows of each (metric, rank >= 0)
    runs/run=<name>/derived/a<gen>.parquet analyses materialised per generation (SNR, clip ratio)
    runs/run=<name>/staging/*.parquet     batches read from shards, not yet merged
    locks/run=<name>.lock                 the run's writer lock, naming who writes it now (``run_lock``)

A generation is a base (the files of generation ``base_gen``) plus one delta part per later
generation up to ``gen``: a live fold that only extends each (metric, rank) writes just its rows
and what they change (``delta``); anything else merges everything into a new base (``full_merge``);
a run's first generation whose records arrive in order is written in one pass (``direct_merge``).
All three feed the one ``generation.GenerationWriter``.

Every write is two-phase (``commit``): new files are written under temporary names and renamed,
then one catalog transaction makes them current. A crash at any point leaves the previous generation
readable, and the next run finishes the work (files no transaction refers to are garbage).

Modules, bottom up: ``types`` (what the store hands out), ``layout`` (every file name), ``catalog``
(the DuckDB catalog), ``blocks`` (Parquet files by block), ``stage``, ``generation``, the planners
``direct_merge``/``delta``/``full_merge``, ``commit``, ``downsample`` and ``read``, and ``facade``
(``Store``). ``run_lock``: one writer per run across processes (``Store.writing``).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest.store.facade import GenerationHook, Store
    from ingest.store.run_info import RunInfo
    from ingest.store.run_lock import DEFAULT_WRITER_WAIT_S, LockHolder, WriterBusy
    from ingest.store.types import IngestReport, ProgressFn, SeriesData, skipped_example_texts, validate_run_name

_HOMES = {
    "GenerationHook": "facade",
    "Store": "facade",
    "RunInfo": "run_info",
    "DEFAULT_WRITER_WAIT_S": "run_lock",
    "LockHolder": "run_lock",
    "WriterBusy": "run_lock",
    "IngestReport": "types",
    "ProgressFn": "types",
    "SeriesData": "types",
    "skipped_example_texts": "types",
    "validate_run_name": "types",
}
"""Where each name of the package's API is defined. They load on first use (PEP 562), not with the
package: a training job imports ``ingest.store.shards`` (the shard writer), and must not load DuckDB and
the whole store with it (tests/test_import_hygiene.py)."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


__all__ = [
    "DEFAULT_WRITER_WAIT_S",
    "GenerationHook",
    "IngestReport",
    "LockHolder",
    "ProgressFn",
    "RunInfo",
    "SeriesData",
    "Store",
    "WriterBusy",
    "skipped_example_texts",
    "validate_run_name",
]
