"""What the Spark engine's executors run: which Python, and StabScope's own code, shipped to them.

- The executors' Python. For a local master (``local``, ``local[N]``, ``local[*]``) it is the interpreter
  running StabScope (``sys.executable``): the one Python on this machine known to have StabScope's
  dependencies, whatever ``PATH`` holds (cron, systemd and pipx run a virtualenv's ``stabscope`` by its
  path, with the system ``python3`` first on ``PATH``). PySpark 4 reads it from ``PYSPARK_PYTHON`` when
  the context starts (``spark.pyspark.python`` is read only by ``spark-submit``), so it is set there for
  that moment. For any other master the nodes' Python is the cluster's: ``PYSPARK_PYTHON`` as the user
  set it, else PySpark's default, ``python3`` on each node's ``PATH``.
- StabScope's code. The ``ingest`` and ``stab_core`` packages' Python sources, zipped once per version
  and source hash into ``cache_dir()`` and added to the context (``addPyFile``), so a node needs only
  Python, Java and the third-party packages the tasks import (``EXECUTOR_PACKAGES``), not StabScope.
  The optional C extension (``ingest/formats/_fields*.so``) is not shipped: it serves text-log imports
  only, and ``ingest.formats.textlog_pipes`` falls back to numpy without it.
- The check. ``check_executors`` runs one tiny job at session start that imports what the tasks import
  and returns the versions found; a node that lacks a package is one paragraph naming the module, the
  executor's Python and what to install there, before any shard is read.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import re
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import ingest
import stab_core
from ingest.errors import StabScopeError

SHIPPED_PACKAGES = ("ingest", "stab_core")
"""StabScope's packages zipped for the executors (their ``.py`` files only)."""

TASK_MODULE = "ingest.store.engines.spark_engine"
"""The module whose functions the Spark tasks run (``decode_segment``, ``deduplicate``, ``RankRanges``):
an executor that imports it can run them."""

EXECUTOR_PACKAGES = {"pyarrow": "pyarrow", "numpy": "numpy", "crc32c": "crc32c", "duckdb": "duckdb", "yaml": "pyyaml"}
"""The third-party modules ``TASK_MODULE`` imports, and the pip package each comes from: what an
executor's Python needs besides the standard library (PySpark's own Python code comes with Spark)."""

_LOCAL_MASTER = re.compile(r"^local(\[[^\]]*\])?$")

STALE_ZIP_S = 7 * 24 * 3600
"""A zip unused this long (seconds) is removed when another is built: each source change makes one."""

_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
"""Every zipped file's time stamp: the zip's bytes depend on the sources only."""


def is_local_master(master: str) -> bool:
    """Whether ``master`` runs the executors in this process's JVM, with this machine's Python."""
    return _LOCAL_MASTER.match(master.strip()) is not None


def executor_python(master: str) -> str | None:
    """The Python the executors will run for ``master``: this interpreter for a local master, else
    ``PYSPARK_PYTHON`` if set, else None (PySpark's default: ``python3`` on each node's ``PATH``)."""
    if is_local_master(master):
        return sys.executable
    return os.environ.get("PYSPARK_PYTHON") or None


def cache_dir() -> Path:
    """Where the zips of StabScope's code are kept (one per user: another user's could be replaced)."""
    return Path(tempfile.gettempdir()) / f"stabscope-spark-{os.getuid()}"


def package_sources() -> list[tuple[str, Path]]:
    """Every ``.py`` file of ``SHIPPED_PACKAGES`` as (its name in the zip, its path), sorted by name."""
    roots = {"ingest": Path(ingest.__file__).resolve().parent, "stab_core": Path(stab_core.__file__).resolve().parent}
    sources: list[tuple[str, Path]] = []
    for package in SHIPPED_PACKAGES:
        root = roots[package]
        for path in root.rglob("*.py"):
            if "__pycache__" not in path.parts:
                sources.append((f"{package}/{path.relative_to(root).as_posix()}", path))
    return sorted(sources)


def stabscope_version() -> str:
    """StabScope's installed version (``unknown`` when run from a checkout that is not installed)."""
    try:
        return importlib.metadata.version("stabscope")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def engine_zip() -> Path:
    """The zip of StabScope's sources for the executors, built on first use for this version and
    source hash and reused after (its name carries both: Spark keeps added files by name)."""
    sources = [(name, path.read_bytes()) for name, path in package_sources()]
    digest = hashlib.sha256()
    for name, data in sources:
        digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    target = cache_dir() / f"stabscope-{stabscope_version()}-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        os.utime(target)  # in use: not one of the stale ones a later build removes
        return target
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    stale = time.time() - STALE_ZIP_S
    for old in target.parent.glob("stabscope-*.zip"):
        with contextlib.suppress(OSError):  # another process may have removed it first
            if old.stat().st_mtime < stale:
                old.unlink()
    with (
        tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as part,
        zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as archive,
    ):
        for name, data in sources:
            archive.writestr(zipfile.ZipInfo(name, _ZIP_TIME), data, zipfile.ZIP_DEFLATED)
    os.replace(part.name, target)  # whole: another compaction may be starting with it now
    return target


def _import_probe(modules: tuple[str, ...]) -> Callable[[Iterable[Any]], Iterator[dict[str, Any]]]:
    """The check job's task: imports ``modules`` on an executor and yields what it found. A closure,
    so Spark ships its code by value: it runs where ``ingest`` cannot be imported."""

    def probe(_: Iterable[Any]) -> Iterator[dict[str, Any]]:
        import importlib
        import platform
        import sys

        found: dict[str, Any] = {"python": sys.executable, "python_version": platform.python_version()}
        for name in modules:
            try:
                module = importlib.import_module(name)
            except ImportError as exc:
                found["missing"] = exc.name or name
                found["error"] = f"{type(exc).__name__}: {exc}"
                break
            found[name] = getattr(module, "__version__", None) or getattr(module, "__file__", None)
        else:
            pipes = sys.modules.get("ingest.formats.textlog_pipes")
            found["c_extension"] = getattr(pipes, "C_EXTENSION_BUILT", None)
        yield found

    return probe


def check_executors(context: Any, master: str) -> list[dict[str, Any]]:
    """Runs the check job on ``context`` (one task per core, so every executor is likely to run one)
    and returns each task's findings: Python, versions of ``EXECUTOR_PACKAGES`` and where ``ingest``
    came from. An executor that cannot import ``TASK_MODULE`` is one paragraph (``StabScopeError``)."""
    modules = (*EXECUTOR_PACKAGES, TASK_MODULE)
    tasks = max(1, int(context.defaultParallelism))
    try:
        found: list[dict[str, Any]] = (
            context.parallelize(range(tasks), tasks).mapPartitions(_import_probe(modules)).collect()
        )
    except Exception as exc:  # the executors' Python did not start, or is not the driver's version
        raise StabScopeError(
            f"the Spark executors of master {master!r} could not run StabScope's check job: {_job_error(exc)}. "
            f"{_python_advice(master)}"
        ) from exc
    for result in found:
        missing = result.get("missing")
        if missing is None:
            continue
        top = str(missing).split(".")[0]
        if top in SHIPPED_PACKAGES:
            what = (
                f"cannot import StabScope's own module {missing!r}, which the engine ships to it as a zip "
                f"(addPyFile): {result.get('error')}"
            )
        else:
            package = EXECUTOR_PACKAGES.get(top, top)
            what = f"lacks the module {missing!r}: install it there with {result['python']} -m pip install {package}"
        raise StabScopeError(
            f"a Spark executor of master {master!r} cannot run the compaction: its Python "
            f"({result['python']}, {result['python_version']}) {what}. {_python_advice(master)}"
        )
    return found


def _python_advice(master: str) -> str:
    """What every executor's Python needs, which Python the executors were told to run, and how to
    choose another."""
    needs = (
        f"Every node's Python needs {', '.join(sorted(set(EXECUTOR_PACKAGES.values())))} and the driver's "
        f"Python minor version ({sys.version_info.major}.{sys.version_info.minor}); StabScope's code is shipped to it."
    )
    if is_local_master(master):
        return f"{needs} The local executors run this interpreter ({sys.executable})."
    chosen = os.environ.get("PYSPARK_PYTHON")
    if chosen:
        return f"{needs} The executors run PYSPARK_PYTHON={chosen}: set it to such a Python, at one path on every node."
    return f"{needs} PYSPARK_PYTHON is not set, so each node runs the python3 on its PATH: set it to such a Python."


_JOB_CAUSES = (
    re.compile(r"Cannot run program \"[^\"]*\"[^\n]*"),
    re.compile(r"\[PYTHON_VERSION_MISMATCH\][^\n]*"),
    re.compile(r"(?:ModuleNotFoundError|ImportError): [^\n]*"),
)


def _job_error(exc: BaseException) -> str:
    """The line of a failed job's (Java and Python) stack traces that says why: the Python that would
    not start, a Python version mismatch, a failed import; else the message's first line."""
    try:
        text = str(exc)
    except Exception:  # a Java exception's str can itself fail
        text = ""
    for cause in _JOB_CAUSES:
        match = cause.search(text)
        if match:
            return match.group(0).strip().rstrip(".")
    return (text.strip().splitlines() or [type(exc).__name__])[0].rstrip(".")
