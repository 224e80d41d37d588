"""A run's published state on object storage: the manifest, and every object key of an S3 store.

::

    <prefix>/runs/run=<name>/manifests/m<seq:09d>.json        the run's state as of publication <seq>
    <prefix>/runs/run=<name>/<kind>/g<gen:06d>.<token>.parquet a data file of the local layout's
                                                               ``runs/run=<name>/<kind>/g<gen:06d>.parquet``
    <prefix>/settings/<key>                                    a store setting (``Store.set_setting``)

Object storage has no atomic rename, so a write publishes its data objects first and the manifest
last, with a conditional put (If-None-Match: *): the manifest with the highest sequence number is the
run's truth, and an object no such manifest names is a leftover (``check_remote``). Each data object's
key carries a random token, so two machines that write the same generation number never overwrite
each other's objects: the one whose manifest loses the conditional put leaves only unreferenced ones.

A manifest holds the run's whole committed state, everything a machine needs to rebuild the run's
catalog rows: its row (``queries.RUN_COLUMNS``), events, spike details, shard offsets, and the objects
it references with their sizes (by the file's path relative to the store root). A deleted run's last
manifest is a tombstone (``deleted``), so that other machines drop it too.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from ingest.errors import StabScopeError
from ingest.store import queries

MANIFEST_FORMAT: Final = 1
"""Bumped when a manifest's fields change meaning; a newer one is refused with a clear message."""

_MANIFEST_NAME = re.compile(r"^m(\d{9})\.json$")


def run_prefix(name: str) -> str:
    """The key prefix of run ``name``'s objects (``name`` validated by the caller)."""
    return f"runs/run={name}/"


def manifest_folder(name: str) -> str:
    return run_prefix(name) + "manifests/"


def manifest_key(name: str, seq: int) -> str:
    return f"{manifest_folder(name)}m{seq:09d}.json"


def manifest_seq(key: str) -> int | None:
    """The sequence number of a manifest key, or None when ``key`` names no manifest."""
    head, _, last = key.rpartition("/")
    found = _MANIFEST_NAME.match(last)
    return int(found.group(1)) if found and head.endswith("/manifests") else None


def new_object_key(rel_path: str) -> str:
    """A fresh object key for the local file at ``rel_path`` (relative to the store root): its path with
    a random token before the suffix (``long/g000002.parquet`` -> ``long/g000002.1f0c9a3e.parquet``)."""
    head, dot, suffix = rel_path.rpartition(".")
    token = uuid.uuid4().hex[:8]
    return f"{head}.{token}.{suffix}" if dot else f"{rel_path}.{token}"


def setting_key(key: str) -> str:
    return f"settings/{key}"


@dataclass
class Manifest:
    """Run ``run``'s state as of publication ``seq`` (see the module docstring). ``objects`` maps a file's
    path relative to the store root to ``{"key": object key, "size": bytes}``."""

    run: str
    seq: int
    deleted: bool = False
    row: dict[str, Any] = field(default_factory=dict)
    events: list[list[Any]] = field(default_factory=list)
    spikes: list[str] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    writer: str = ""

    def to_bytes(self) -> bytes:
        body = {
            "format": MANIFEST_FORMAT,
            "run": self.run,
            "seq": self.seq,
            "deleted": self.deleted,
            "row": self.row,
            "events": self.events,
            "spikes": self.spikes,
            "offsets": self.offsets,
            "objects": self.objects,
            "writer": self.writer,
        }
        return json.dumps(body, default=_json_value, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Manifest:
        """Parse a manifest read from ``where`` (its URL, for the error): a clear error when it is not one."""
        try:
            body = json.loads(data)
            if int(body["format"]) > MANIFEST_FORMAT:
                raise StabScopeError(
                    f"{where}: manifest format {body['format']} is newer than this StabScope reads "
                    f"({MANIFEST_FORMAT}): upgrade StabScope"
                )
            return cls(
                run=str(body["run"]),
                seq=int(body["seq"]),
                deleted=bool(body["deleted"]),
                row=dict(body["row"]),
                events=[list(e) for e in body["events"]],
                spikes=[str(s) for s in body["spikes"]],
                offsets={str(k): int(v) for k, v in body["offsets"].items()},
                objects={str(k): {"key": str(v["key"]), "size": int(v["size"])} for k, v in body["objects"].items()},
                writer=str(body.get("writer", "")),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StabScopeError(
                f"{where}: not a StabScope run manifest ({type(exc).__name__}: {exc}); expected the JSON "
                "object a StabScope writer publishes. `stabscope check` lists it"
            ) from exc

    def digest(self) -> str:
        """What the state says, without who published it, when, or its sequence number: equal digests
        are the same state (a ``watch`` pass that found nothing new publishes no manifest)."""
        same = Manifest(**{**self.__dict__, "seq": 0, "writer": "", "row": {**self.row, "updated": None}})
        return hashlib.sha256(same.to_bytes()).hexdigest()

    def row_values(self) -> list[Any]:
        """The run's row in ``queries.RUN_COLUMNS`` order (``queries.RESTORE_RUN``'s parameters)."""
        return [self.row.get(column) for column in queries.RUN_COLUMNS]


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)
