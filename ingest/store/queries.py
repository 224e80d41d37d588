"""Every SQL statement StabScope runs, named and parameterised.

Values (run names, steps, metric names, file lists) are always bound as parameters (``?``/``$name``),
never formatted into the SQL text. Callers live in the ``ingest.store`` package; they hand back Arrow tables or
numpy arrays, never cursors.
"""

from __future__ import annotations

from typing import Final

# --------------------------------------------------------------------------- catalog schema

CATALOG_SCHEMA: Final = [
    """CREATE TABLE IF NOT EXISTS runs (
        name VARCHAR PRIMARY KEY,
        created TIMESTAMP NOT NULL,
        updated TIMESTAMP NOT NULL,
        source VARCHAR NOT NULL,
        status VARCHAR NOT NULL,
        gen INTEGER NOT NULL,
        first_step BIGINT,
        last_step BIGINT,
        n_steps BIGINT NOT NULL DEFAULT 0,
        n_rows BIGINT NOT NULL DEFAULT 0,
        ranks INTEGER NOT NULL DEFAULT 0,
        metrics VARCHAR NOT NULL DEFAULT '[]',
        rank_metrics VARCHAR NOT NULL DEFAULT '[]',
        meta VARCHAR NOT NULL DEFAULT '{}',
        rejected BIGINT NOT NULL DEFAULT 0,
        rejected_examples VARCHAR NOT NULL DEFAULT '[]',
        heat_bucket BIGINT NOT NULL DEFAULT 1,
        analysis_gen INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE IF NOT EXISTS offsets (
        run VARCHAR NOT NULL, file VARCHAR NOT NULL, byte_offset BIGINT NOT NULL,
        PRIMARY KEY (run, file)
    )""",
    """CREATE TABLE IF NOT EXISTS staged (
        run VARCHAR NOT NULL, file VARCHAR NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (run, file)
    )""",
    """CREATE TABLE IF NOT EXISTS events (
        run VARCHAR NOT NULL, step BIGINT NOT NULL, kind VARCHAR NOT NULL,
        label VARCHAR NOT NULL, detail VARCHAR NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS spikes (
        run VARCHAR NOT NULL, idx INTEGER NOT NULL, metric VARCHAR NOT NULL,
        start_step BIGINT NOT NULL, peak_step BIGINT NOT NULL, end_step BIGINT NOT NULL,
        ratio DOUBLE, recovered BOOLEAN NOT NULL, cause VARCHAR NOT NULL, confidence DOUBLE NOT NULL,
        detail VARCHAR NOT NULL, PRIMARY KEY (run, idx)
    )""",
    """CREATE TABLE IF NOT EXISTS settings (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)""",
    # The first generation of the current base (its files, then one delta part per generation up to
    # ``gen``); NULL in catalogs written before deltas existed, meaning ``gen`` (no deltas).
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS base_gen INTEGER",
]

# --------------------------------------------------------------------------- catalog statements

RUN_COLUMNS: Final = (
    "name",
    "created",
    "updated",
    "source",
    "status",
    "gen",
    "first_step",
    "last_step",
    "n_steps",
    "n_rows",
    "ranks",
    "metrics",
    "rank_metrics",
    "meta",
    "rejected",
    "rejected_examples",
    "heat_bucket",
    "analysis_gen",
    "base_gen",
)
"""The columns of a run's row as ``LIST_RUNS`` and ``GET_RUN`` select them (callers read rows by these names)."""
LIST_RUNS: Final = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY created, name"
GET_RUN: Final = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE name = ?"
INSERT_RUN: Final = """
INSERT INTO runs (name, created, updated, source, status, gen, meta)
VALUES (?, now(), now(), ?, ?, 0, ?)
"""
RESTORE_RUN: Final = f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' * len(RUN_COLUMNS))})"
"""A whole run row (``RUN_COLUMNS`` order), as ``stabscope check --repair`` rebuilds a lost catalog."""
UPDATE_RUN_META: Final = "UPDATE runs SET meta = ?, updated = now() WHERE name = ?"
UPDATE_RUN_STATUS: Final = "UPDATE runs SET status = ?, updated = now() WHERE name = ?"
ADD_REJECTED: Final = """
UPDATE runs SET rejected = rejected + ?, rejected_examples = ?, updated = now() WHERE name = ?
"""
COMMIT_GENERATION: Final = """
UPDATE runs SET gen = ?, base_gen = ?, first_step = ?, last_step = ?, n_steps = ?, n_rows = ?, ranks = ?,
       metrics = ?, rank_metrics = ?, heat_bucket = ?, updated = now()
WHERE name = ?
"""
"""Make a generation current: a full one (``base_gen = gen``) or a delta on the current base."""
SET_ANALYSIS_GEN: Final = "UPDATE runs SET analysis_gen = ? WHERE name = ?"
DELETE_RUN: Final = "DELETE FROM runs WHERE name = ?"
DELETE_RUN_OFFSETS: Final = "DELETE FROM offsets WHERE run = ?"
DELETE_RUN_STAGED: Final = "DELETE FROM staged WHERE run = ?"
DELETE_RUN_EVENTS: Final = "DELETE FROM events WHERE run = ?"
DELETE_RUN_SPIKES: Final = "DELETE FROM spikes WHERE run = ?"

GET_OFFSETS: Final = "SELECT file, byte_offset FROM offsets WHERE run = ?"
UPSERT_OFFSET: Final = """
INSERT INTO offsets (run, file, byte_offset) VALUES (?, ?, ?)
ON CONFLICT (run, file) DO UPDATE SET byte_offset = excluded.byte_offset
"""
ADD_STAGED: Final = "INSERT INTO staged (run, file, seq) VALUES (?, ?, ?)"
GET_STAGED: Final = "SELECT file, seq FROM staged WHERE run = ? ORDER BY seq"
NEXT_STAGED_SEQ: Final = "SELECT coalesce(max(seq), 0) + 1 FROM staged WHERE run = ?"
CLEAR_STAGED: Final = "DELETE FROM staged WHERE run = ?"

ADD_EVENT: Final = "INSERT INTO events (run, step, kind, label, detail) VALUES (?, ?, ?, ?, ?)"

ADD_SPIKE: Final = """
INSERT INTO spikes (run, idx, metric, start_step, peak_step, end_step, ratio, recovered, cause,
                    confidence, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
ALL_EVENTS: Final = """
SELECT DISTINCT run, step, kind, label, detail FROM events ORDER BY run, step, kind, label
"""
ALL_SPIKES: Final = "SELECT run, detail FROM spikes ORDER BY run, idx"
SPIKE_SUMMARY: Final = """
SELECT run, count(*) AS n_spikes, max(ratio) AS worst_ratio,
       bool_or(NOT recovered) AS any_diverged
FROM spikes GROUP BY run
"""

GET_SETTING: Final = "SELECT value FROM settings WHERE key = ?"
ALL_SETTINGS: Final = "SELECT key, value FROM settings ORDER BY key"
SET_SETTING: Final = """
INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value
"""

# --------------------------------------------------------------------------- Parquet data
#
# Reads of one (metric, rank), the downsampling, the heatmap and the per-rank matrix run in numpy on the
# row ranges the files' block index gives (``ingest.store.read``); SQL is kept where DuckDB is the
# better tool: out-of-core aggregation of a metric too wide for memory, scans of every row, ordered
# copies of a whole run.

COUNT_STEPS: Final = "SELECT count(DISTINCT step) FROM read_parquet($files)"
"""Distinct steps of a merge whose step span is too wide for the in-memory bitmap."""

BUILD_ROLLUP: Final = """
SELECT metric, step,
       count(*) AS n,
       count(*) FILTER (WHERE NOT isfinite(value)) AS n_nonfinite,
       avg(value) FILTER (WHERE isfinite(value)) AS mean,
       min(value) FILTER (WHERE isfinite(value)) AS min,
       max(value) FILTER (WHERE isfinite(value)) AS max,
       stddev_pop(value) FILTER (WHERE isfinite(value)) AS std,
       arg_min(rank, value) FILTER (WHERE isfinite(value)) AS argmin_rank,
       arg_max(rank, value) FILTER (WHERE isfinite(value)) AS argmax_rank
FROM read_parquet($files) WHERE rank >= 0 AND metric = $metric
GROUP BY metric, step ORDER BY step
"""
"""Cross-rank rollup per step of one metric; the merge computes it in memory unless the metric's
step span is too wide for that (``ingest.store.generation.DENSE_SPAN_MAX``)."""

ALL_RUN_LEVEL: Final = """
SELECT metric, step, value FROM read_parquet($files) WHERE rank = -1
"""
"""Every run-level row, in no promised order: the caller gathers each metric's runs of rows and sorts
only a metric whose steps come out of order (cheaper than an ORDER BY over every row)."""
EXPORT_LONG: Final = """
COPY (SELECT step, rank, metric, value, wall_time FROM read_parquet($files) ORDER BY metric, rank, step)
TO $target (FORMAT csv, HEADER true)
"""
EXPORT_LONG_PARQUET: Final = """
COPY (SELECT step, rank, metric, value, wall_time FROM read_parquet($files) ORDER BY metric, rank, step)
TO $target (FORMAT parquet, COMPRESSION zstd)
"""
READ_LONG: Final = """
SELECT step, rank, metric, value, wall_time FROM read_parquet($files) ORDER BY metric, rank, step
"""
