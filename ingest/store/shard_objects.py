"""Shard segments on object storage: one immutable object per flush, put by a background thread.

Object storage has no append, so a writer at ``s3://bucket/job42/shards`` turns each flush's frames
(the same frames as a local segment; ``ingest.store.shards`` defines them and lists, reads and writes
segments through this module) into one object
``rank-00003/seg-<unix_ns>-<pid>-<flush:09d>.ssf``, uploaded with one PUT. A PUT is whole or absent,
so a writer killed at any point leaves only complete objects; since one writer's objects are put in
order, a listing sees a prefix of them, which readers take as one segment (``ingest.store.shards.SegmentRef``)
whose byte offsets always fall between objects. All S3 calls go through ``ingest.store.object_store.ObjectStore``.

Uploads run on a thread with a bounded queue (``MAX_QUEUED_OBJECTS``): the training step only hands the
bytes over, and waits only when that many objects are not yet stored (a store that cannot keep up slows
the job down instead of filling its memory). ``ShardWriter.flush`` and ``close`` wait until everything
handed over is stored; an upload that fails (after boto3's retries) is raised there, and at the next
flush, as a ``StabScopeError``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import queue
import re
import threading
import weakref

from ingest.errors import StabScopeError
from ingest.store.object_store import ObjectStore, ObjectUrl

MAX_QUEUED_OBJECTS = 8
"""Segment objects handed to the uploader and not yet stored before a flush waits for it."""


@functools.lru_cache(maxsize=64)
def bucket_store(bucket: str) -> ObjectStore:
    """One ``ObjectStore`` (one boto3 client: they are thread-safe) per bucket and process, keys
    relative to the bucket: making a client costs more than reading a small object."""
    return ObjectStore(ObjectUrl(bucket, ""))


def list_segment_objects(location: str, suffix: str) -> list[tuple[str, int]]:
    """``(object URL, size in bytes)`` of every segment object under the shard location ``location``
    (``s3://bucket/prefix``): keys ``rank-*/seg-*<suffix>`` below it, ordered by key (rank, then name)."""
    url = ObjectUrl.parse(location)
    below = f"{url.prefix}/" if url.prefix else ""
    segment_key = re.compile(rf"rank-[^/]+/seg-[^/]+{re.escape(suffix)}")
    found = [
        (f"s3://{url.bucket}/{info.key}", info.size)
        for info in bucket_store(url.bucket).list(below)
        if segment_key.fullmatch(info.key[len(below) :])
    ]
    return sorted(found)


def list_writer_objects(stem_url: str, suffix: str) -> list[tuple[str, int]]:
    """``(object URL, size in bytes)`` of one writer's segment objects ``<stem_url>-<flush><suffix>``,
    in flush order (one LIST request per 1,000 objects)."""
    url = ObjectUrl.parse(stem_url)
    flush_key = re.compile(rf"-\d+{re.escape(suffix)}")
    return sorted(
        (f"s3://{url.bucket}/{info.key}", info.size)
        for info in bucket_store(url.bucket).list(f"{url.prefix}-")
        if flush_key.fullmatch(info.key[len(url.prefix) :])
    )


def read_object_segment(object_url: str, offset: int) -> bytes:
    """The bytes of the segment object ``object_url`` from ``offset`` on (one ranged GET)."""
    url = ObjectUrl.parse(object_url)
    return bucket_store(url.bucket).get_bytes(url.prefix, start=offset)


class ObjectSegmentSink:
    """The frames of one writer, as segment objects ``<name>-<flush:09d><suffix>`` under ``location``.

    ``add`` collects frames; ``seal`` makes them the next object and hands it to the uploader thread
    (``wait``: returns once every object so far is stored); ``close`` seals and waits. Objects of one
    writer are put in order. A sink still open when the interpreter exits is closed then, so a job that
    forgot ``close`` loses only what a local writer would (its unflushed rows).
    """

    def __init__(self, location: str, name: str, suffix: str) -> None:
        url = ObjectUrl.parse(location)
        self._store = bucket_store(url.bucket)
        self._bucket = url.bucket
        self._key_stem = f"{url.prefix}/{name}" if url.prefix else name
        self._suffix = suffix
        self._frames = bytearray()
        self._sealed = 0
        self._queue: queue.Queue[tuple[str, bytes] | None] = queue.Queue(MAX_QUEUED_OBJECTS)
        self._failure: StabScopeError | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._upload_loop, name=f"shard-upload-{name}", daemon=True)
        self._thread.start()
        _open_sinks.add(self)

    @property
    def objects_written(self) -> int:
        """How many segment objects this writer has sealed (each is stored once a wait returns)."""
        return self._sealed

    def add(self, frame: bytes) -> None:
        """Append one complete frame to the object being collected."""
        self._frames += frame

    def seal(self, *, wait: bool) -> None:
        """The frames collected so far become the next object, handed to the uploader."""
        self._raise_failure()
        if self._frames:
            # Nine digits keep a writer's objects in flush order by name for 10^9 flushes.
            key = f"{self._key_stem}-{self._sealed:09d}{self._suffix}"
            self._queue.put((key, bytes(self._frames)))  # blocks while MAX_QUEUED_OBJECTS are pending
            self._frames = bytearray()
            self._sealed += 1
        if wait:
            self._queue.join()
            self._raise_failure()

    def close(self) -> None:
        """Seal what is collected, wait until every object is stored, stop the uploader."""
        if self._closed:
            return
        try:
            self.seal(wait=True)
        finally:
            self._closed = True
            self._queue.put(None)
            self._thread.join()
            _open_sinks.discard(self)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _upload_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._failure is None:  # after a failure, later objects would leave a hole: keep none
                    key, data = item
                    self._store.put_bytes(key, data)
            except StabScopeError as exc:
                self._failure = StabScopeError(
                    f"shard writer: {exc}. This writer stores no more segment objects (a later one would leave "
                    "a hole in the run); the objects stored before this one are kept"
                )
            finally:
                self._queue.task_done()


_open_sinks: weakref.WeakSet[ObjectSegmentSink] = weakref.WeakSet()


@atexit.register
def _close_open_sinks() -> None:
    """Store what open writers handed over before the interpreter stops (daemon threads still run here)."""
    for sink in list(_open_sinks):
        with contextlib.suppress(StabScopeError):  # raised at the writer's last flush, or too late to tell
            sink.close()
