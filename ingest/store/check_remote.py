"""``stabscope check`` for a store at an ``s3://`` URL (the CLI calls it for such a ``--store``): the
objects against the runs' newest manifests.

For every run (or one) under ``<prefix>/runs/``: its newest manifest reads (else ``damaged_manifest``),
every object it references exists with the size it records (else ``missing_object``,
``object_size_mismatch``: a published state that cannot be read in full; delete the run and import it
again), and nothing is left that no published state references (``unreferenced_object``: the data
objects of a writer killed before its manifest, a manifest older than the previous one, the objects of
an older state a writer killed after publishing did not delete). ``--repair`` deletes the unreferenced
objects older than ``grace_s()`` seconds: a younger one may belong to a write under way on another
machine (its manifest not put yet), so it is reported and left for a later check.

The local cache needs no check: it is rebuilt from the manifests (delete it to rebuild it all).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Final

from ingest.errors import StabScopeError
from ingest.store.check_findings import Action, CheckReport, Finding
from ingest.store.manifest import Manifest, manifest_key, manifest_seq
from ingest.store.object_store import ObjectInfo, ObjectStore
from ingest.store.remote import cache_dir_for
from ingest.store.types import validate_run_name

UNREFERENCED_OBJECT: Final = "unreferenced_object"
MISSING_OBJECT: Final = "missing_object"
OBJECT_SIZE_MISMATCH: Final = "object_size_mismatch"
DAMAGED_MANIFEST: Final = "damaged_manifest"

GRACE_S: Final = 900.0
"""Seconds an unreferenced object must have existed before ``--repair`` deletes it (a write under way
elsewhere uploads its objects before its manifest); ``$STABSCOPE_CHECK_GRACE_S`` sets another."""

_REPUBLISH = "none: delete the run (stabscope delete NAME) and import or compact it again"


def grace_s() -> float:
    """``$STABSCOPE_CHECK_GRACE_S`` or ``GRACE_S``."""
    raw = os.environ.get("STABSCOPE_CHECK_GRACE_S", "")
    try:
        return float(raw) if raw else GRACE_S
    except ValueError:
        raise StabScopeError(f"STABSCOPE_CHECK_GRACE_S={raw!r}: expected a number of seconds") from None


def check_object_store(url: str, run: str | None = None, *, repair: bool = False) -> CheckReport:
    """Check (and with ``repair``, repair) the store at ``url``: see the module docstring."""
    objects = ObjectStore(url)
    objects.check_bucket()
    if run is not None:
        validate_run_name(run)
    findings, mtimes = _check(objects, run)
    report = CheckReport(cache_dir_for(objects.url), findings)
    if repair:
        now, grace = time.time(), grace_s()
        doomed = [f for f in findings if f.action == Action.DELETE and now - mtimes.get(f.path, now) >= grace]
        objects.delete(f.path.removeprefix(f"{objects.url}/") for f in doomed)
        for f in doomed:
            f.repaired = True
        for f in findings:
            if f.action == Action.DELETE and not f.repaired:
                f.how = f"delete it once it is {grace:.0f} s old (a write under way elsewhere may still name it)"
        final, _ = _check(objects, run)
        done = {(f.code, f.path) for f in findings if f.repaired}
        report.findings += [f for f in final if (f.code, f.path) not in done and f not in findings]
        report.clean = not final
    else:
        report.clean = not findings
    return report


def _check(objects: ObjectStore, run: str | None) -> tuple[list[Finding], dict[str, float]]:
    """The findings, and each unreferenced object's time (Unix s) by its finding's path."""
    by_run: dict[str, list[ObjectInfo]] = {}
    for info in objects.list("runs/" if run is None else f"runs/run={run}/"):
        parts = info.key.split("/")
        if len(parts) >= 3 and parts[1].startswith("run="):
            by_run.setdefault(parts[1].removeprefix("run="), []).append(info)
    if run is not None and run not in by_run:
        raise StabScopeError(f"no run named {run!r} in store {objects.url} (no object under runs/run={run}/)")
    findings: list[Finding] = []
    for name in sorted(by_run):
        findings += _check_run(objects, name, by_run[name])
    where = f"{objects.url}/"
    mtimes = {where + o.key: o.mtime for infos in by_run.values() for o in infos}
    return findings, mtimes


def _check_run(objects: ObjectStore, name: str, listed: Sequence[ObjectInfo]) -> list[Finding]:
    where = f"{objects.url}/"
    sizes = {o.key: o for o in listed}
    seqs = sorted(s for s in (manifest_seq(o.key) for o in listed) if s is not None)
    referenced: set[str] = set()
    findings: list[Finding] = []
    if seqs:
        newest = seqs[-1]
        key = manifest_key(name, newest)
        referenced = {key, manifest_key(name, newest - 1)}
        try:
            manifest = Manifest.from_bytes(objects.get_bytes(key), where + key)
        except StabScopeError as exc:
            problem = f"the run's newest manifest does not read: {exc}"
            return [Finding(DAMAGED_MANIFEST, name, where + key, problem, Action.NONE, how=_REPUBLISH)]
        for rel, entry in sorted(manifest.objects.items()):
            referenced.add(entry["key"])
            found = sizes.get(entry["key"])
            if found is None:
                problem = f"manifest m{newest:09d} references it (for {rel}) but it is missing"
                findings.append(
                    Finding(MISSING_OBJECT, name, where + entry["key"], problem, Action.NONE, how=_REPUBLISH)
                )
            elif found.size != entry["size"]:
                problem = f"{found.size} bytes, but manifest m{newest:09d} recorded {entry['size']}"
                findings.append(
                    Finding(OBJECT_SIZE_MISMATCH, name, where + entry["key"], problem, Action.NONE, how=_REPUBLISH)
                )
    for o in listed:
        if o.key not in referenced:
            problem = "no published state of the run references it (left by a writer that stopped)"
            findings.append(Finding(UNREFERENCED_OBJECT, name, where + o.key, problem, Action.DELETE))
    return findings
