"""The compaction engines: which code reads a compaction's new shard frames (``Store.compact``'s
``read_parts``, chosen here by ``parts_reader``), and the Spark one
(``stabscope compact DIR --run NAME --engine spark``).

Both engines hand the store the same thing: each new frame's metric rows as ``(metric, rows)`` parts,
with the segments' byte offsets, events, metadata, rejected frames and torn tails recorded on the way
(``stage.record_segment``). The store then writes and commits the generation the one way it always
does (``direct_merge`` or ``stage`` + ``commit``, the one ``GenerationWriter``), so the long table,
run-level rows, rollup, rank buckets and tail, and the publication (the catalog, or an object store's
manifest), are the same code for both.

The Spark engine does the per-record work on the cluster, in one job of two stages:

1. one task per group of segments reads them from their byte offsets (``shards.read_segment``: the
   frames, CRCs, torn tails and bad frames as the embedded engine treats them) and unpivots the
   frames (``shards.wide_to_long_parts``), emitting one Arrow block per (rank, metric, segment);
2. the blocks are range-partitioned by rank and sorted by (rank, metric, segment), so each
   (rank, metric)'s blocks meet in arrival order and are de-duplicated there (``stage.sort_unique``:
   the last write of a (rank, step) wins, as in the embedded engine's staging and merge).

The driver then streams the partitions in rank order (``toLocalIterator``: one partition held at a
time, of about ``PARTITION_BYTES`` of shard bytes) and gives the store one rank's parts at a time,
in ascending rank order, each (metric, rank) strictly ascending in steps. Rows cross the JVM as
Arrow IPC blocks, never one Python object per record. A restart that rewinds steps: its later
segment's rows win, and each segment's bookkeeping carries its ranks' first and last steps, from
which the store adds the ``rollback`` event as for the embedded engine (``rewinds``); one its
writer logged is passed on like any event.

What moves to the cluster is the reading, CRC checks, decoding, unpivoting and de-duplication;
the generation's files (long table, rollup, rank buckets, tail) are still written by the driver's one
``GenerationWriter``, so the driver's writing bounds what more executors can gain
(``bench/scaling.py`` measures both engines on one machine).

PySpark is an optional extra (``pip install -e '.[spark]'``, which needs Java 17); it is imported
only when a Spark compaction starts. ``local[*]`` (the default master) runs in this process's
machine, its executors on this interpreter. At each session start ``ingest.store.engines.spark_shipping`` ships
StabScope's own code to the executors (a zip of ``ingest`` and ``stab_core``'s sources) and checks
with one small job that they can import this module, so a standalone (``spark://host:7077``), YARN
or Kubernetes node needs Java, Spark and a Python of the driver's minor version with the third-party
packages the tasks import (``EXECUTOR_PACKAGES``), not StabScope; which Python is ``PYSPARK_PYTHON``'s
(else the node's ``python3``). The shard location must be reachable under the same name from the
executors: a shared file system path, or an ``s3://`` URL with the endpoint and credentials in the
executors' environment. The store and its files stay on the driver's side (docs/scaling.md).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from ingest.errors import StabScopeError
from ingest.store.direct_merge import _split_by_rank
from ingest.store.engines.spark_shipping import check_executors, engine_zip, executor_python
from ingest.store.rewinds import step_extents
from ingest.store.shards import read_segment, wide_to_long_parts
from ingest.store.stage import PartsReader, SegmentExtras, SegmentTodo, record_segment, segment_parts, sort_unique
from ingest.store.types import IngestReport, ProgressFn

ENGINES = ("embedded", "spark")
"""The engines ``parts_reader`` gives (``stabscope compact --engine``), for ``Store.compact``'s ``read_parts``."""

DEFAULT_MASTER = "local[*]"
"""The Spark master when none is given: every core of this machine."""

PARTITION_BYTES = 16 * 2**20
"""Shard bytes per partition of the sorted rows (at most: fewer when the cluster has more cores).
A partition's rows come to the driver whole (compressed long rows, about half their shard bytes; 3x
uncompressed), and the driver holds two (the one read and the one prefetched) in its 1 GiB heap."""

SEGMENT_MARK = -2
"""The rank of the records that carry a segment's bookkeeping (``SegmentRead`` without its rows):
below every real rank, so they reach the driver first, in segment order."""

SPARK_LOG_CONFIG = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""
"""The driver JVM's log4j2 configuration: errors only (Spark's default prints its warnings about
the host name and native libraries on every start)."""

_PACKED = pa.ipc.IpcWriteOptions(compression="zstd")

_RANK_DIR = re.compile(r"(?:^|/)rank-(\d+|run)/[^/]+$")

_session: Any = None


def parts_reader(engine: str, master: str | None = None) -> PartsReader:
    """The reader of new shard frames for ``engine`` (see ``ENGINES``); ``master`` is Spark's."""
    if engine == "embedded":
        if master is not None:
            raise StabScopeError("--master is a Spark setting: give it with --engine spark")
        return segment_parts
    if engine == "spark":
        return SparkParts(master or DEFAULT_MASTER)
    raise StabScopeError(f"unknown compaction engine {engine!r}: use one of {', '.join(ENGINES)}")


def spark_session(master: str) -> Any:
    """The process's Spark session on ``master``, started on first use and reused (a different
    master stops the old one). Quiet, without the web UI; a clear error without PySpark or Java."""
    global _session
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise StabScopeError(
            "the Spark engine needs PySpark, which is an optional extra: install it with "
            "pip install -e '.[spark]' (it also needs Java 17), or compact with --engine embedded"
        ) from exc
    if _session is not None and _session.sparkContext._jsc is not None:
        if _session.sparkContext.master == master:
            return _session
        _session.stop()
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))) and shutil.which("java") is None:
        raise StabScopeError(
            "the Spark engine needs Java 17, and no java was found (on PATH or in JAVA_HOME): install it "
            "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or compact with --engine embedded"
        )
    builder = (
        SparkSession.builder.master(master)
        .appName("stabscope-compact")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{_log_config_file()}")
    )
    python = executor_python(master)
    try:
        with _environment("PYSPARK_PYTHON", python):  # what PySpark 4 reads when the context starts
            session = builder.getOrCreate()
    except Exception as exc:  # the JVM did not start or the master refused: one paragraph
        raise StabScopeError(f"Spark did not start with master {master!r}: {_first_line(exc)}") from exc
    session.sparkContext.setLogLevel("ERROR")
    try:
        session.sparkContext.addPyFile(str(engine_zip()))
        check_executors(session.sparkContext, master)
    except BaseException:
        session.stop()  # a session whose executors cannot run the tasks is not kept for the next call
        raise
    _session = session
    return session


@contextlib.contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    """``os.environ[name]`` is ``value`` inside (unchanged when None), as it was after."""
    if value is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message (a Java exception's ``str`` can itself fail)."""
    try:
        text = str(exc).strip()
    except Exception:
        text = ""
    return (text.splitlines() or [type(exc).__name__])[0]


def _log_config_file() -> str:
    """``SPARK_LOG_CONFIG`` as a file the JVM can read (written again at each start: it is tiny)."""
    path = os.path.join(tempfile.gettempdir(), f"stabscope-spark-log4j2-{os.getuid()}.properties")
    with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(path), delete=False, encoding="utf-8") as f:
        f.write(SPARK_LOG_CONFIG)
    os.replace(f.name, path)  # whole: another process may be starting Spark with it now
    return path


class SparkParts:
    """A ``PartsReader`` that decodes and de-duplicates on Spark at ``master`` (see the module
    docstring). Called again with the same segments (the store's fallback from a one-pass first
    generation), it streams the same sorted rows again without re-reading the segments."""

    def __init__(self, master: str) -> None:
        self.master = master
        self._prepared: tuple[list[tuple[str, str, int]], Any] | None = None

    def __call__(
        self,
        todo: SegmentTodo,
        report: IngestReport,
        extras: SegmentExtras,
        progress: ProgressFn | None,
    ) -> Iterator[list[tuple[str, pa.Table]]]:
        if not todo:
            return
        total_bytes = sum(_new_bytes(segment, start) for segment, _, start in todo)
        rows_total, rows_done = 0, 0
        rank: int | None = None
        parts: list[tuple[str, pa.Table]] = []
        for (key_rank, metric, index), payload in self._records(todo):
            if key_rank == SEGMENT_MARK:
                segment, key, start = todo[index]
                record_segment(segment, key, payload[0], report, extras, start, payload[2])
                rows_total += payload[1]
                continue
            if key_rank != rank and parts:
                yield parts
                parts = []
            rank = key_rank
            table = pa.ipc.open_stream(payload).read_all()
            parts.append((metric, table))
            rows_done += table.num_rows
            if progress:
                progress(total_bytes * rows_done // max(rows_total, 1), total_bytes)
        if parts:
            yield parts

    def _records(self, todo: SegmentTodo) -> Iterator[tuple[tuple[int, str, int], Any]]:
        """The job's records in partition order; a failed job is one paragraph."""
        try:
            yield from self._sorted_rows(todo).toLocalIterator(prefetchPartitions=True)
        except StabScopeError:
            raise
        except Exception as exc:  # Py4J and PySpark errors carry the JVM's stack trace: its first line
            raise StabScopeError(
                f"the Spark compaction job on master {self.master!r} failed: {_first_line(exc)} "
                "(Spark's log above names the failed task; nothing was committed)"
            ) from exc

    def _sorted_rows(self, todo: SegmentTodo) -> Any:
        """The job's RDD: ``((rank, metric, 0), Arrow IPC rows)`` per (rank, metric), de-duplicated
        and sorted, after ``((SEGMENT_MARK, "", i), (SegmentRead, rows, step extents))`` per segment ``i``."""
        tasks = [(str(segment), key, start) for segment, key, start in todo]
        if self._prepared is not None and self._prepared[0] == tasks:
            return self._prepared[1]
        context = spark_session(self.master).sparkContext
        weights = [_new_bytes(segment, start) for segment, _, start in todo]
        total = sum(weights)
        cores = max(1, int(context.defaultParallelism))
        bounds = rank_bounds(
            [_segment_rank(location) for location, _, _ in tasks], weights, min(PARTITION_BYTES, total // cores + 1)
        )
        slices = min(len(tasks), max(2 * cores, -(-total // PARTITION_BYTES)))
        indexed = [(i, location, start) for i, (location, _, start) in enumerate(tasks)]
        rdd = (
            context.parallelize(indexed, slices)
            .flatMap(decode_segment)
            .repartitionAndSortWithinPartitions(len(bounds) + 1, RankRanges(bounds))
            .mapPartitions(deduplicate)
        )
        self._prepared = (tasks, rdd)
        return rdd


def _new_bytes(segment: Any, start: int) -> int:
    """Bytes of ``segment`` past ``start``: its listed size, or the file's (0 when unknown)."""
    size = getattr(segment, "size", None)
    if size is None:
        try:
            size = os.path.getsize(segment)
        except (OSError, TypeError):
            return 0
    return max(0, int(size) - start)


def _segment_rank(location: str) -> int | None:
    """The rank a segment's directory names (``rank-00003`` -> 3, ``rank-run`` -> -1), else None."""
    match = _RANK_DIR.search(location.replace(os.sep, "/"))
    if match is None:
        return None
    return -1 if match.group(1) == "run" else int(match.group(1))


def rank_bounds(ranks: Sequence[int | None], weights: Sequence[int], target: int) -> list[int]:
    """Upper rank bounds (exclusive) cutting the ranks, weighted by their segments' new bytes, into
    consecutive ranges of about ``target`` bytes each. Ranks no directory names weigh nothing."""
    per_rank: dict[int, int] = {}
    for rank, weight in zip(ranks, weights, strict=True):
        if rank is not None:
            per_rank[rank] = per_rank.get(rank, 0) + weight
    bounds: list[int] = []
    filled = 0
    ordered = sorted(per_rank)
    for rank, next_rank in itertools.pairwise(ordered):
        filled += per_rank[rank]
        if filled >= target:
            bounds.append(next_rank)
            filled = 0
    return bounds


class RankRanges:
    """Spark's partition function: the range of ``rank_bounds`` a record's rank falls in (segment
    bookkeeping, rank ``SEGMENT_MARK``, falls in the first)."""

    def __init__(self, bounds: list[int]) -> None:
        self.bounds = bounds

    def __call__(self, key: tuple[int, str, int]) -> int:
        return bisect.bisect_right(self.bounds, key[0])


def decode_segment(task: tuple[int, str, int]) -> Iterator[tuple[tuple[int, str, int], Any]]:
    """On an executor: segment ``index``'s new frames from byte ``start`` as one Arrow IPC block per
    (rank, metric), rows in arrival order, keyed ``(rank, metric, index)``; then its bookkeeping."""
    index, location, start = task
    seg = read_segment(location, start)
    rows = 0
    if seg.metrics:
        for metric, part in wide_to_long_parts(pa.concat_tables(seg.metrics, promote_options="default")):
            for rank, block in _split_by_rank(part):
                rows += block.num_rows
                yield (rank, metric, index), _packed(block)
    yield (SEGMENT_MARK, "", index), (replace(seg, metrics=[]), rows, step_extents(seg.metrics))


def deduplicate(records: Iterable[tuple[tuple[int, str, int], Any]]) -> Iterator[tuple[tuple[int, str, int], Any]]:
    """On an executor, over one sorted partition: each (rank, metric)'s blocks (in segment order)
    as one block sorted by step in which the last write of a step wins; bookkeeping passes through."""
    for (rank, metric), group in itertools.groupby(records, key=lambda record: record[0][:2]):
        if rank == SEGMENT_MARK:
            yield from group
            continue
        blocks = [pa.ipc.open_stream(payload).read_all() for _, payload in group]
        yield (rank, metric, 0), _packed(sort_unique(pa.concat_tables(blocks).combine_chunks()))


def _packed(table: pa.Table) -> bytes:
    """``table`` as a zstd-compressed Arrow IPC stream: the form rows are shuffled and sent to the
    driver in (about 6x smaller than uncompressed long rows, and no slower to write)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_PACKED) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())
