"""The Spark engine on a real standalone cluster whose executors do not have StabScope (issue #30 items 3, 4).

A master and a worker are started on 127.0.0.1 from the PySpark package (``spark-class``), as separate JVMs;
the executors run the Python of a second virtualenv that has only the third-party packages the tasks import
(``EXECUTOR_PACKAGES``, pip-installed from the local index at the driver's versions), so the tasks can run
only from the zip the engine ships. The driver is this virtualenv's ``stabscope`` run by its path, with a
``PATH`` that does not hold the virtualenv and a working directory outside the repository (as under cron,
systemd or pipx). A second run points the executors at a bare virtualenv: one paragraph, no traceback.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ingest.store import Store
from ingest.store.engines.spark_shipping import EXECUTOR_PACKAGES, engine_zip, is_local_master
from ingest.store.shards import ShardWriter

pyspark = pytest.importorskip("pyspark")

RUN = "job"
RANKS = 8
STEPS = 1500
RESTART = 1200
"""The restarted job resumes here: the executors de-duplicate the rewound steps (the later write wins)."""
VENV_BIN = Path(sys.executable).parent
START_TIMEOUT_S = 120


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without the virtualenv on ``PATH`` (nor ``PYTHONPATH``/``VIRTUAL_ENV``), on loopback."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != VENV_BIN.resolve()]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON")}
    return {**env, "PATH": os.pathsep.join(path), "SPARK_LOCAL_IP": "127.0.0.1", **extra}


@pytest.fixture(scope="session")
def worker_python() -> Path:
    """A virtualenv's Python with only ``EXECUTOR_PACKAGES`` at the driver's versions (no StabScope), kept
    under the temp directory across test runs: built once per set of versions."""
    pins = sorted(f"{package}=={importlib.metadata.version(package)}" for package in EXECUTOR_PACKAGES.values())
    key = hashlib.sha256(f"{sys.version}\n{' '.join(pins)}".encode()).hexdigest()[:12]
    venv = Path(tempfile.gettempdir()) / f"stabscope-test-spark-workers-{os.getuid()}-{key}"
    python = venv / "bin" / "python"
    if not python.exists():
        building = venv.with_name(venv.name + f".{os.getpid()}.part")
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(building)], check=True, timeout=120)
        subprocess.run(
            [str(building / "bin" / "python"), "-m", "pip", "install", "-q", *pins],
            check=True, timeout=600, capture_output=True, cwd=building,
        )  # fmt: skip
        try:  # a finished venv moved whole (its python finds its packages from pyvenv.cfg, wherever it lies)
            building.rename(venv)
        except OSError:  # another test run finished one first
            shutil.rmtree(building)
    return python


@pytest.fixture(scope="session")
def bare_python() -> Path:
    """A virtualenv's Python with no packages at all: an executor that lacks what the tasks import."""
    venv = Path(tempfile.gettempdir()) / f"stabscope-test-spark-bare-{os.getuid()}"
    if not (venv / "bin" / "python").exists():
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return venv / "bin" / "python"


def _start(args: list[str], log: Path, ready: str, cwd: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A Spark daemon (``spark-class`` execs its JVM) in a process group of its own, once ``ready`` is in its
    log; returns it and the log's line that says so."""
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=_clean_env(),
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if ready in line:
                return process, line
        if process.poll() is not None:
            break
        time.sleep(0.5)
    _stop(process)
    raise AssertionError(f"{args[0]} did not start: {log.read_text(errors='replace')[-3000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """The daemon and what it started (executor JVMs, their Python workers): its process group."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A standalone master and one worker (2 cores) on 127.0.0.1; yields the master URL and the worker's
    work directory (where each executor keeps the files the driver added)."""
    root = tmp_path_factory.mktemp("spark-cluster")
    master, line = _start(
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
        root / "master.log", "Starting Spark master at ", root,
    )  # fmt: skip
    url = line.split("Starting Spark master at ")[1].strip()
    try:
        work = root / "work"
        worker, _ = _start(
            [
                "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--port", "0",
                "--webui-port", "0", "--cores", "2", "--memory", "2g", "--work-dir", str(work),
            ],
            root / "worker.log", "Successfully registered with master", root,
        )  # fmt: skip
        try:
            yield url, work
        finally:
            _stop(worker)
    finally:
        _stop(master)


def write_shards(shards: Path) -> int:
    """Eight ranks' shards, and a restart of them from ``RESTART``; returns the records written."""
    rng = np.random.default_rng(30)
    records = 0
    for job, steps in enumerate((np.arange(STEPS), np.arange(RESTART, STEPS + 300))):
        time.sleep(0.002)  # segment names carry the time: the restart's sort after the first job's
        for rank in range(RANKS):
            with ShardWriter(shards, rank) as writer:
                for lo in range(0, steps.size, 400):
                    part = steps[lo : lo + 400]
                    grad = 1.0 + 0.1 * rng.standard_normal(part.size) + job
                    writer.write_columns(part, {"grad_norm_local": grad, "step_time_s": 0.5 + part * 0.0})
                    records += 2 * part.size
                    if rank == 0:
                        loss = 3.0 * np.exp(-part / 900.0) + 0.01 * rng.standard_normal(part.size) + job
                        writer.write_columns(part, {"loss": loss, "lr": np.full(part.size, 3e-4)}, rank=-1)
                        records += 2 * part.size
    return records


def stabscope(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """This virtualenv's ``stabscope`` run by its path, from ``cwd``, with the virtualenv off ``PATH``."""
    return subprocess.run(
        [str(VENV_BIN / "stabscope"), *args], capture_output=True, text=True, cwd=cwd, env=_clean_env(**env),
        timeout=400,
    )  # fmt: skip


def test_the_shipped_zip_holds_the_python_sources_only_and_is_built_once() -> None:
    path = engine_zip()
    names = zipfile.ZipFile(path).namelist()
    assert "ingest/store/engines/spark_engine.py" in names and "stab_core/metrics.py" in names
    assert all(name.endswith(".py") for name in names)  # no _fields*.so, .c, .pyi or __pycache__
    assert {name.split("/")[0] for name in names} == {"ingest", "stab_core"}
    built = path.stat().st_ino
    assert engine_zip() == path and path.stat().st_ino == built  # reused, not rebuilt (a build replaces it)
    assert is_local_master("local[*]") and is_local_master("local") and not is_local_master("local-cluster[2,1,1024]")
    assert not is_local_master("spark://head:7077")


@pytest.mark.slow
@pytest.mark.system
def test_a_cluster_without_stabscope_compacts_like_the_embedded_engine(
    cluster: tuple[str, Path], worker_python: Path, tmp_path: Path
) -> None:
    url, work = cluster
    assert subprocess.run([worker_python, "-c", "import ingest"], cwd=tmp_path, capture_output=True).returncode
    assert subprocess.run([worker_python, "-c", "import stab_core"], cwd=tmp_path, capture_output=True).returncode
    records = write_shards(tmp_path / "shards")
    done = stabscope(
        "compact", str(tmp_path / "shards"), "--run", RUN, "--engine", "spark", "--master", url,
        "--store", str(tmp_path / "spark"), "--json", cwd=tmp_path, PYSPARK_PYTHON=str(worker_python),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    shipped = list(work.glob("app-*/*/stabscope-*.zip"))
    assert shipped, "no executor fetched the shipped zip"  # the executors ran in the worker, from the zip
    # What the executors imported: the zip's code, its text-log path without the C extension (not shipped).
    code = (
        "import ingest.store.engines.spark_engine as e, ingest.formats.textlog_pipes as t; "
        "print(e.__file__, t.C_EXTENSION_BUILT)"
    )
    imported = subprocess.run(
        [worker_python, "-c", code], cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(shipped[0])}
    )
    assert imported.stdout.split() == [f"{shipped[0]}/ingest/store/engines/spark_engine.py", "False"], imported.stderr
    embedded = Store(tmp_path / "embedded")
    embedded.compact(RUN, tmp_path / "shards")
    assert embedded.run_info(RUN).n_steps == STEPS + 300
    for fmt in ("csv", "parquet"):
        for engine in ("spark", "embedded"):
            out = stabscope(
                "export", RUN, "--format", fmt, "-o", str(tmp_path / f"{engine}.{fmt}"),
                "--store", str(tmp_path / engine), cwd=tmp_path,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
        assert (tmp_path / f"spark.{fmt}").read_bytes() == (tmp_path / f"embedded.{fmt}").read_bytes(), fmt
    assert records > embedded.run_info(RUN).n_rows  # the rewound steps were written twice, kept once


@pytest.mark.slow
@pytest.mark.system
def test_an_executor_python_without_the_packages_is_one_paragraph(
    cluster: tuple[str, Path], bare_python: Path, tmp_path: Path
) -> None:
    url, _ = cluster
    write_shards(tmp_path / "shards")
    done = stabscope(
        "compact", str(tmp_path / "shards"), "--run", RUN, "--engine", "spark", "--master", url,
        "--store", str(tmp_path / "spark"), cwd=tmp_path, PYSPARK_PYTHON=str(bare_python),
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    message = done.stderr.strip().splitlines()[-1]
    assert f"its Python ({bare_python}," in message and "lacks the module 'pyarrow'" in message, message
    assert f"{bare_python} -m pip install pyarrow" in message and "PYSPARK_PYTHON" in message
    assert not (tmp_path / "spark").exists() or not Store(tmp_path / "spark").list_runs()  # nothing committed
    missing = tmp_path / "no-such-venv" / "bin" / "python"  # a PYSPARK_PYTHON that is not on the node
    done = stabscope(
        "compact", str(tmp_path / "shards"), "--run", RUN, "--engine", "spark", "--master", url,
        "--store", str(tmp_path / "spark"), cwd=tmp_path, PYSPARK_PYTHON=str(missing),
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    message = done.stderr.strip().splitlines()[-1]
    assert "could not run StabScope's check job" in message and f'Cannot run program "{missing}"' in message, message
    assert f"PYSPARK_PYTHON={missing}" in message
