"""A store at an S3 URL: published manifests are the truth, a local directory is the cache.

``Store("s3://bucket/prefix")`` works in a local cache directory (``cache_dir_for``) exactly as a local
store does: the same staging, planners, ``GenerationWriter``, commit protocol and writer lock. What
this module adds (``RemoteRuns``):

- **Publish** (``publish``, after a write of a run finishes, under its writer lock): upload the files of
  the run's committed state that the previous manifest does not hold, then put the manifest with the
  next sequence number, conditionally (If-None-Match: *). Losing that put means another machine
  published first: this write's state is dropped from the cache, the cache takes the winner's, and the
  write fails with one paragraph. After a publish, the objects only the previous manifest named are
  deleted. A killed writer leaves only objects no manifest names (``check_remote`` collects them).
- **Sync** (``refresh``, throttled to once per ``REFRESH_S`` unless forced): list each run's manifests
  and, where the newest is not the one the cache reflects, rebuild the run's catalog rows from it in one
  transaction and drop the cached files whose objects changed. A run written here that never got
  published (its writer died) is dropped the same way. Runs written by this process, or locked by
  another one on this machine, are left to their writer.
- **Fetch** (``fetch``, called by ``layout.RunLayout`` when a read needs a file the cache lacks): download
  the object the reflected manifest names for it. Files never change once written, so a cached file
  never goes stale; a newer manifest names new files.

What the cache reflects of each run is kept in ``<cache>/remote/run=<name>.json``: the manifest's
sequence number and objects, and ``dirty`` while a write is under way; and in
``<cache>/remote/local/run=<name>.json`` the size and modification time of each cached file (a
rewritten file, such as a run's analyses after a metadata change, is uploaded again). Deleting the
cache directory loses nothing: the next open rebuilds it from the manifests.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import duckdb

from ingest.errors import StabScopeError
from ingest.store import queries
from ingest.store.catalog import Catalog, delete_run_rows, fetch_one, run_info_of
from ingest.store.commit import failpoint, spike_row
from ingest.store.layout import (
    DERIVED,
    GENERATION_KINDS,
    RANK_BUCKETS,
    ROLLUP,
    RUN_LEVEL,
    TAIL,
    RunLayout,
    part_generations,
    run_folder,
    run_lock_file,
)
from ingest.store.manifest import Manifest, manifest_key, manifest_seq, new_object_key, run_prefix, setting_key
from ingest.store.object_store import ObjectStore, ObjectUrl, RangeFile, endpoint_url
from ingest.store.run_lock import WriterBusy, held, run_busy
from ingest.store.types import validate_run_name

REFRESH_S: Final = 2.0
"""Seconds between two listings of the manifests for reads (a page render asks for the runs many times)."""

STATE_FOLDER: Final = "remote"

SMALL_KINDS: Final = frozenset({RUN_LEVEL, ROLLUP, RANK_BUCKETS, TAIL, DERIVED})
"""The kinds of file fetched together when a read needs one (the long file is fetched alone)."""
FETCH_THREADS: Final = 4
"""Downloads at a time."""
RANGED_MIN_BYTES = 16 << 20
"""A long file at least this large is read by ranges when a read needs a few of its row ranges (one
rank's window); a smaller one is fetched whole: a row group of it is a large part of it, and the next
read finds it in the cache."""


def cache_dir_for(url: ObjectUrl) -> Path:
    """The local cache directory of the store at ``url``: ``$STABSCOPE_CACHE`` (else ``$XDG_CACHE_HOME/stabscope``,
    ``~/.cache/stabscope``) ``/s3/<bucket>/<hash of endpoint, bucket and prefix>``."""
    base = os.environ.get("STABSCOPE_CACHE")
    if base:
        root = Path(base).expanduser()
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stabscope"
    digest = hashlib.sha256(f"{endpoint_url() or 'aws'}|{url.bucket}|{url.prefix}".encode()).hexdigest()[:16]
    return root / "s3" / url.bucket / digest


class RemoteRuns:
    """The S3 side of the store whose cache directory is ``root`` and catalog ``catalog``."""

    def __init__(self, url: str, root: Path, catalog: Catalog) -> None:
        self.objects = ObjectStore(url)  # a missing bucket fails the first listing, in one paragraph
        self.url = self.objects.url
        self.root = root
        self.catalog = catalog
        self._writes_here: dict[str, int] = {}  # run -> writes of this handle under way (nesting counted)
        self._writes_lock = threading.Lock()
        self._state_lock = threading.RLock()
        self._refresh_lock = threading.Lock()
        self._last_refresh = float("-inf")

    # ------------------------------------------------------------------ what the cache reflects

    def _state_path(self, name: str) -> Path:
        return self.root / STATE_FOLDER / f"run={name}.json"

    def _local_path(self, name: str) -> Path:
        return self.root / STATE_FOLDER / "local" / f"run={name}.json"

    def load_state(self, name: str) -> dict[str, Any]:
        """What the cache reflects of run ``name`` (see the module docstring). ``local`` (each cached
        file's size and mtime) lives in a file of its own: readers record what they fetched there without
        the writer lock, and may lose an entry to a race, which costs only an upload again; the rest is
        written under the run's writer lock."""
        state: dict[str, Any] = _read_json(self._state_path(name))
        state.setdefault("seq", 0)
        state.setdefault("objects", {})
        state.setdefault("dirty", False)
        state["local"] = _read_json(self._local_path(name))
        return state

    def _save_state(self, name: str, state: dict[str, Any]) -> None:
        """Save ``state`` (under the run's writer lock), its ``local`` part too when it has one."""
        if "local" in state:
            _write_json(self._local_path(name), state["local"])
        _write_json(self._state_path(name), {k: v for k, v in state.items() if k != "local"})

    # ------------------------------------------------------------------ reads of the objects

    def newest_seq(self, name: str) -> int | None:
        """The sequence number of run ``name``'s newest manifest, or None when it has none."""
        seqs = [manifest_seq(o.key) for o in self.objects.list(run_prefix(name) + "manifests/")]
        return max((s for s in seqs if s is not None), default=None)

    def read_manifest(self, name: str, seq: int) -> Manifest:
        key = manifest_key(name, seq)
        return Manifest.from_bytes(self.objects.get_bytes(key), f"{self.url}/{key}")

    def remote_names(self) -> list[str]:
        """The runs with objects under ``runs/`` (valid names only)."""
        names = []
        for folder in self.objects.list_folders("runs"):
            name = folder.removeprefix("run=")
            with contextlib.suppress(StabScopeError):
                names.append(validate_run_name(name))
        return names

    def fetch(self, path: Path) -> bool:
        """Download the object the cache's manifest names for the cached file ``path``: True when there
        is one (``path`` now exists), False when the manifest names none. A file of a small kind brings
        every small file of the run's state the cache lacks with it, in parallel: opening a run reads
        each of them, and one round of downloads costs about what one does. An object deleted meanwhile
        (a newer manifest replaced it) is ``FileNotFoundError``, which a read answers by starting again
        on the newer state."""
        found = self._run_file(path)
        if found is None:
            return False
        name, rel = found
        with self._state_lock:
            objects = self.load_state(name)["objects"]
        if rel not in objects:
            return False
        wanted = [rel]
        if rel.split("/")[2] in SMALL_KINDS:
            wanted += [
                r for r in objects if r != rel and r.split("/")[2] in SMALL_KINDS and not (self.root / r).exists()
            ]
        with ThreadPoolExecutor(min(len(wanted), FETCH_THREADS)) as pool:
            done = [pool.submit(self._download, name, r, objects[r]) for r in wanted]
        done[0].result()  # the others are fetched ahead: a read that needs one fetches it again
        return True

    def _run_file(self, path: str | Path) -> tuple[str, str] | None:
        """(run name, path relative to the cache root) of a cached run file ``path``, or None."""
        try:
            rel = Path(path).relative_to(self.root).as_posix()
        except ValueError:
            return None
        parts = rel.split("/")
        if len(parts) < 4 or parts[0] != "runs" or not parts[1].startswith("run="):
            return None
        return parts[1].removeprefix("run="), rel

    def _entry(self, path: str | Path) -> dict[str, Any] | None:
        """The manifest entry (object key, size) the cache reflects for the cached file ``path``, or None."""
        found = self._run_file(path)
        if found is None:
            return None
        with self._state_lock:
            entry: dict[str, Any] | None = self.load_state(found[0])["objects"].get(found[1])
        return entry

    def ranged(self, path: Path) -> bool:
        """True when the manifest names an object for the cached file ``path`` that is large enough to be
        read by ranges (``RANGED_MIN_BYTES``; ``open_ranged`` reads it); a smaller one is fetched whole."""
        entry = self._entry(path)
        return entry is not None and int(entry["size"]) >= RANGED_MIN_BYTES

    def open_ranged(self, path: str) -> RangeFile:
        """A file reading the object of the cached file ``path`` by ranged GETs (``RemoteRuns.ranged``)."""
        entry = self._entry(path)
        if entry is None:
            raise FileNotFoundError(f"{path}: no object in the manifest this cache reflects")
        return self.objects.open_input(entry["key"], entry["size"])

    def _download(self, name: str, rel: str, entry: dict[str, Any]) -> None:
        path = self.root / rel
        try:
            self.objects.download(entry["key"], path)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{self.url}/{entry['key']} (for {path}) was replaced by a newer state") from exc
        stat = path.stat()
        with self._state_lock:
            state = self.load_state(name)
            if state["objects"].get(rel) == entry:
                _write_json(self._local_path(name), {**state["local"], rel: [stat.st_size, stat.st_mtime_ns]})

    # ------------------------------------------------------------------ sync

    def refresh(self, *, force: bool = False) -> None:
        """Bring the cache's catalog to every run's newest manifest (at most once per ``REFRESH_S``
        unless ``force``; a refresh under way in another thread is not waited for)."""
        if not force and time.monotonic() - self._last_refresh < REFRESH_S:
            return
        if not self._refresh_lock.acquire(blocking=force):
            return
        try:
            self._last_refresh = time.monotonic()
            local = {str(r[0]) for r in self.catalog.snapshot().runs}
            states = self.root / STATE_FOLDER
            known = {p.stem.removeprefix("run=") for p in states.glob("run=*.json")} if states.is_dir() else set()
            for name in sorted(set(self.remote_names()) | local | known):
                if not self._writing_here(name):
                    self.sync_run(name)
        finally:
            self._refresh_lock.release()

    def sync_run(self, name: str, *, locked: bool = False) -> None:
        """Bring run ``name``'s catalog rows and cached files to its newest manifest (``locked``: the
        caller holds the run's writer lock; else it is tried without waiting, and a run another process
        writes is left to it)."""
        if locked:
            self._sync_locked(name)
            return
        path = run_lock_file(self.root, name)
        busy = lambda holder, waited: run_busy(name, path, holder, waited)  # noqa: E731
        with contextlib.suppress(WriterBusy), held(path, wait_s=0, busy=busy):
            self._sync_locked(name)

    def _sync_locked(self, name: str) -> None:
        state = self.load_state(name)
        newest = self.newest_seq(name)
        listed = name in self.catalog.snapshot().by_name  # False when the cache's catalog was lost
        if newest is not None and newest == state["seq"] and not state["dirty"] and listed != state.get("deleted"):
            return
        manifest = self.read_manifest(name, newest) if newest is not None else None
        self._apply(name, manifest, state, discard=state["dirty"] or manifest is None)

    def _apply(self, name: str, manifest: Manifest | None, state: dict[str, Any], *, discard: bool) -> None:
        """Make the cache reflect ``manifest`` (None: the run has none, so nothing of it is kept):
        its catalog rows in one transaction, then its cached files (all of them when ``discard``)."""
        with self.catalog.unit() as con:
            con.execute("BEGIN TRANSACTION")
            delete_run_rows(con, name)
            if manifest is not None and not manifest.deleted:
                con.execute(queries.RESTORE_RUN, manifest.row_values())
                for step, kind, label, detail in manifest.events:
                    con.execute(queries.ADD_EVENT, [name, step, kind, label, detail])
                for i, detail in enumerate(manifest.spikes):
                    con.execute(queries.ADD_SPIKE, spike_row(name, i, json.loads(detail)))
                for file, offset in manifest.offsets.items():
                    con.execute(queries.UPSERT_OFFSET, [name, file, offset])
            con.execute("COMMIT")
        objects = {} if manifest is None or manifest.deleted else manifest.objects
        folder = run_folder(self.root, name)
        local: dict[str, Any] = {}
        if discard or not objects:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            for rel, entry in state["objects"].items():
                if objects.get(rel) == entry and rel in state["local"]:
                    local[rel] = state["local"][rel]
                else:
                    (self.root / rel).unlink(missing_ok=True)
        if manifest is None:
            self._state_path(name).unlink(missing_ok=True)
            self._local_path(name).unlink(missing_ok=True)
            return
        with self._state_lock:
            self._save_state(
                name,
                {
                    "seq": manifest.seq,
                    "objects": objects,
                    "local": local,
                    "dirty": False,
                    "deleted": manifest.deleted,
                    "digest": manifest.digest(),
                },
            )

    # ------------------------------------------------------------------ writes

    def _writing_here(self, name: str) -> bool:
        with self._writes_lock:
            return self._writes_here.get(name, 0) > 0

    @contextlib.contextmanager
    def publishing(self, name: str) -> Iterator[None]:
        """Around each write of run ``name`` (its writer lock held): the outermost write starts from the
        newest published state and publishes the run's state when it succeeds, or drops what it left
        when it fails; writes within it (the analyses after a merge) publish with it."""
        with self._writes_lock:
            depth = self._writes_here.get(name, 0)
            self._writes_here[name] = depth + 1
        try:
            if depth == 0:
                self.begin_write(name)
            try:
                yield
            except BaseException as exc:
                if depth == 0:
                    with contextlib.suppress(StabScopeError, OSError, duckdb.Error):
                        self.abandon_write(name)
                if isinstance(exc, FileNotFoundError):  # a newer manifest replaced what this write read
                    raise StabScopeError(
                        f"run {name!r} of {self.url}: another machine published a new state of this run while "
                        "this write read the previous one, so nothing of this write is visible. This machine's "
                        f"cache now holds the newer state: run the command again ({exc})"
                    ) from exc
                raise
            if depth == 0:
                self.publish(name)
        finally:
            with self._writes_lock:
                self._writes_here[name] -= 1

    def begin_write(self, name: str) -> None:
        """Before the first write of run ``name`` (its writer lock held): take its newest published state,
        and mark the cache as ahead of it until ``publish``."""
        self.sync_run(name, locked=True)
        with self._state_lock:
            state = self.load_state(name)
            state["dirty"] = True
            self._save_state(name, {k: v for k, v in state.items() if k != "local"})

    def abandon_write(self, name: str) -> None:
        """A write of run ``name`` failed: drop what it left in the cache, take the published state again."""
        self.sync_run(name, locked=True)

    def publish(self, name: str) -> None:
        """Publish run ``name``'s committed state in the cache (its writer lock held): see the module
        docstring. Raises ``StabScopeError`` when another machine published first."""
        state = self.load_state(name)
        seq = int(state["seq"]) + 1
        with self.catalog.unit() as con:
            row = fetch_one(con.execute(queries.GET_RUN, [name]))
            offsets = {str(f): int(o) for f, o in con.execute(queries.GET_OFFSETS, [name]).fetchall()}
        if row is None:
            manifest = Manifest(name, seq, deleted=True, writer=_writer())
            local: dict[str, Any] = {}
        else:
            snapshot = self.catalog.snapshot()
            objects, local = self._upload(name, row, state)
            failpoint("after_object_upload")
            manifest = Manifest(
                name,
                seq,
                row=dict(zip(queries.RUN_COLUMNS, row, strict=True)),
                events=[list(e) for e in snapshot.events.get(name, [])],
                spikes=list(snapshot.spikes.get(name, [])),
                offsets=offsets,
                objects=objects,
                writer=_writer(),
            )
        if manifest.digest() == state.get("digest") and state["seq"] > 0:  # nothing changed: nothing to publish
            with self._state_lock:
                self._save_state(name, {**state, "local": local, "dirty": False})
            return
        if not self.objects.put_bytes(manifest_key(name, seq), manifest.to_bytes(), if_absent=True):
            self.abandon_write(name)
            raise StabScopeError(
                f"run {name!r} of {self.url}: another machine published a new state of this run first "
                f"(manifest m{seq:09d}), so nothing of this write is visible. This machine's cache now "
                "holds that newer state: run the command again"
            )
        failpoint("after_manifest_put")
        with self._state_lock:
            self._save_state(
                name,
                {
                    "seq": seq,
                    "objects": manifest.objects,
                    "local": local,
                    "dirty": False,
                    "deleted": manifest.deleted,
                    "digest": manifest.digest(),
                },
            )
        kept = {e["key"] for e in manifest.objects.values()}
        stale = {e["key"] for e in state["objects"].values()} - kept
        if seq > 2:
            stale.add(manifest_key(name, seq - 2))  # the one before the previous: no reader follows it
        self.objects.delete(sorted(stale))

    def _upload(self, name: str, row: tuple[Any, ...], state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The objects of run ``name``'s committed state (``row``), uploading each cached file the
        previous manifest does not hold as it is now; and the cached files' (size, mtime) after."""
        info = run_info_of(row)
        layout = RunLayout(run_folder(self.root, name))
        paths = [layout.file(kind, g) for g in part_generations(info) for kind in GENERATION_KINDS]
        if info.analysis_gen > 0:
            paths.append(layout.file(DERIVED, info.analysis_gen))
        objects: dict[str, Any] = {}
        local: dict[str, Any] = {}
        for path in paths:
            rel = path.relative_to(self.root).as_posix()
            previous, seen = state["objects"].get(rel), state["local"].get(rel)
            try:
                stat = path.stat()
            except FileNotFoundError:
                if previous is not None:  # published, never fetched here
                    objects[rel] = previous
                continue
            now = [stat.st_size, stat.st_mtime_ns]
            if previous is None or seen != now:
                key = new_object_key(rel)
                self.objects.put_file(path, key)
                previous = {"key": key, "size": stat.st_size}
            objects[rel], local[rel] = previous, now
        return objects, local

    # ------------------------------------------------------------------ settings

    def get_setting(self, key: str) -> str | None:
        if not self.objects.exists(setting_key(key)):
            return None
        return self.objects.get_bytes(setting_key(key)).decode()

    def set_setting(self, key: str, value: str) -> None:
        self.objects.put_bytes(setting_key(key), value.encode())


def _read_json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _write_json(path: Path, value: dict[str, Any]) -> None:
    """Write ``value`` to ``path`` under a temporary name, then rename: a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)


def _writer() -> str:
    """Who published: host and pid, for a person reading a manifest."""
    return f"{socket.gethostname()}:{os.getpid()}"
