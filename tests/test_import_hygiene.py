"""The dependency direction: stab_core is pure (no streamlit, no duckdb); ingest never pulls in streamlit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import importlib, pkgutil, sys
import {package}
for mod in pkgutil.walk_packages({package}.__path__, "{package}."):
    if mod.name.split(".")[-1] in {skip!r}:
        continue
    importlib.import_module(mod.name)
bad = sorted(m for m in sys.modules if m.split(".")[0] in {forbidden!r})
print(",".join(bad))
"""


def _imported_forbidden(package: str, forbidden: set[str], skip: set[str] = frozenset()) -> str:  # type: ignore[assignment]
    code = PROBE.format(package=package, forbidden=forbidden, skip=skip)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return proc.stdout.strip()


def test_stab_core_imports_neither_streamlit_nor_duckdb() -> None:
    assert _imported_forbidden("stab_core", {"streamlit", "duckdb"}) == ""


TRAINER_CALLBACKS = {"hf_callback", "lightning_callback"}
"""The modules that import an optional training framework at their top (the ``[hf]`` and
``[lightning]`` extras); a user's training script imports them, nothing in ``ingest`` does."""


def test_ingest_imports_no_streamlit() -> None:
    assert _imported_forbidden("ingest", {"streamlit"}, skip={"__main__", *TRAINER_CALLBACKS}) == ""


def test_only_the_callbacks_import_the_training_frameworks() -> None:
    # every other module loads without transformers or Lightning installed: the CLI, the store and
    # the dashboard must not pay their import time, nor fail where the extras are absent
    frameworks = {"transformers", "accelerate", "lightning", "pytorch_lightning"}
    assert _imported_forbidden("ingest", frameworks, skip={"__main__", *TRAINER_CALLBACKS}) == ""


def test_the_probe_would_notice_a_violation() -> None:
    # pages import streamlit: the same probe must report it, or the two tests above prove nothing.
    assert "streamlit" in _imported_forbidden(
        "pages",
        {"streamlit"},
        skip={
            "runs",
            "upload",
            "overview",
            "compare",
            "ranks",
            "spikes",
            "tree",
            "scheduler",
            "cost",
            "checklist",
            "scenarios",
        },
    )


TRAINING_PROBE = """
import sys, tempfile, torch
from ingest.training.monitor import StabilityMonitor
from ingest.training.torch_clipping import clip_grad_norm
model = torch.nn.Linear(4, 2)
with StabilityMonitor(tempfile.mkdtemp(), seq_len=8, per_rank_batch_size=2, flush_interval_s=0.0) as monitor:
    for step in range(3):
        loss = model(torch.randn(2, 4)).square().mean()
        loss.backward()
        record = clip_grad_norm(list(model.parameters()), 1.0)
        monitor.log(step, loss=loss.detach(), lr=1e-3, clip_stats=record, extra={{"grad_norm/layer.0": 1.0}})
print(",".join(sorted(m for m in sys.modules if m.split(".")[0] in {forbidden!r})))
"""


def test_the_training_side_loads_no_pandas_duckdb_or_streamlit() -> None:
    # These load in a training process only on the monitor's first flush, i.e. inside a training
    # step: importing pandas alone (pulled in by pyarrow's ``pa.array``) there showed up as a
    # step-time spike that the monitor itself caused. flush_interval_s=0 flushes on every log.
    code = TRAINING_PROBE.format(forbidden={"pandas", "duckdb", "streamlit"})
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert proc.stdout.strip() == ""


def test_the_embedded_default_imports_neither_spark_nor_boto3() -> None:
    # The default install and the dashboard never need the Spark engine or an S3 client: every ingest
    # module (the Spark engine's included: it imports PySpark inside its functions) loads without them.
    forbidden = {"pyspark", "py4j", "boto3", "botocore"}
    assert _imported_forbidden("ingest", forbidden, skip={"__main__", *TRAINER_CALLBACKS}) == ""


FIRST_SCREEN_PROBE = """
import sys
import pages.parts.alert_banners, pages.parts.page_errors, pages.parts.store_access, pages.parts.run_catalog
import ingest.services.run_alerts, ingest.services.run_status
from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store
print(",".join(sorted(m for m in sys.modules if m in {heavy!r})))
"""


def test_the_runs_page_first_screen_loads_no_log_reader_and_no_analysis() -> None:
    """What app.py and the Runs page import before the first screen is drawn (docs/performance.md, goal 6):
    the store and the stored alerts, not the log readers (importing any module of ``ingest.formats`` loads
    them all) nor the analyses that write what the pages read."""
    heavy = {"ingest.formats", "stab_core.analysis", "stab_core.diagnosis"}
    proc = subprocess.run(
        [sys.executable, "-c", FIRST_SCREEN_PROBE.format(heavy=heavy)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert proc.stdout.strip() == ""


WATCH_PROBE = """
import sys
from ingest.cli import main
code = main(["watch", {source!r}, "--run", "live", "--once", "--store", {store!r}])
print(code, "ingest.formats" in sys.modules)
"""


def test_a_watcher_of_shards_loads_no_log_reader(tmp_path: Path) -> None:
    """`stabscope watch SHARD_DIR` is restarted after every crash (the kill tests start it 20-40 times):
    it decides what it follows before importing a follower, so a shard watcher never loads the log
    readers, which only a log watcher needs. Both still fold in their source."""
    from tests.fault_harness import write_shard_round

    shards, log = tmp_path / "shards", tmp_path / "train.jsonl"
    write_shard_round(shards, 0, 50, ranks=2)
    log.write_text("".join(f'{{"step": {s}, "loss": 2.0}}\n' for s in range(50)))
    seen = {}
    for source in (shards, log):
        code = WATCH_PROBE.format(source=str(source), store=str(tmp_path / f"store-{source.stem}"))
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
        seen[source.stem] = proc.stdout.split()[-2:]
    assert seen == {"shards": ["0", "False"], "train": ["0", "True"]}, seen
