"""Shared fixtures: small real stores written through ShardWriter -> Store.compact (no mocks).

``small_store`` holds one run, ``SMALL_RUN``: 4 ranks x 2,000 steps with known features that tests
assert on (the constants below). ``write_run`` is the generic builder behind it, for tests that need
several runs (seeds to compare, a run without per-rank data, a live run).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # AppTest scripts import `pages.*` from the repo root
    sys.path.insert(0, str(REPO_ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

from ingest.services.run_analyses import open_analysed_store  # noqa: E402
from ingest.store import Store  # noqa: E402
from ingest.store.shards import ShardWriter  # noqa: E402

pytest_plugins = ["tests.s3_server"]  # the s3_server / s3_url fixtures: a real moto server

# The tests start hundreds of Python children (the CLI as a process, kill tests, servers, workers).
# With PYTHONDONTWRITEBYTECODE set (some machines and containers set it), each child compiles the
# repository's modules from source again: 0.4 s of CPU of the 1.7 s a `stabscope import` child takes.
# Without it a child writes the bytecode once (into __pycache__/, which git ignores) and the others load it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

TIERS: dict[str, str] = {
    # fast: pure core, the readers, store units; what `pytest` alone runs (under 2 minutes on 2 cores)
    **dict.fromkeys(
        (
            "abandoned_attempts",
            "r26b_metric_files",
            "r26a_consoles",
            "r25c_detection",
            "r26c_detection",
            "round26_r26g",
            "round26_r26d",
            "round26_lead",
            "r26f_held_out",
            "lasting_rises",
            "nonfinite_episodes",
            "f29c_detection",
            "f30a_file_runs",
            "f26a_end_and_nan_rises",
            "f27c_val_blowups",
            "f28c_objectives_val_parts",
            "f25d_dip_climbs",
            "round20_tables",
            "round21_metric_files",
            "f28a_metric_files",
            "f25d_named_metrics",
            "run23_running_means",
            "round18_import_faults",
            "round19_f25a_histories",
            "round19_f25b",
            "round20_f26c_consoles",
            "round21_f27b_consoles",
            "round22_f28b_consoles",
            "round23_f29a_consoles",
            "metric_files_fb24",
            "watch_ctrl_c",
            "fb22_fallback_rules",
            "round16_t22c",
            "round17_t23c_axes",
            "round17_rec22",
            "round18_stm24",
            "round20_f26d",
            "round21_f27d",
            "round22_f28d",
            "round23_f29b",
            "round23_f29d",
            "round24_f30b",
            "round24_f30c",
            "window_medians",
            "round24_f30e_median_bounds",
            "round25_r25b_runs",
            "round25_r25d",
            "round25_lead",
            "round17_t23b",
            "round18_det23",
            "round18_t24c",
            "round18_t24d",
            "t22d_metric_files",
            "stated_precision",
            "value_column",
            "json_rows",
            "labelled_runs",
            "formats_rl_logs",
            "return_falls",
            "act22_premises",
            "act24_premises",
            "incident_passes",
            "unfelt_outliers",
            "noisy_series",
            "round24_f30d",
            "grad_norm_surges",
            "t21b_gluon_consoles",
            "gen20a_generic_steps",
            "fb21t_generic_text",
            "t22b_vae_console",
            "t22a_split_records",
            "imp23_import",
            "t23a_vision_consoles",
            "table_runs",
            "round15_consoles",
            "round12_imports",
            "round14_kv_consoles",
            "round15_md_consoles",
            "imp19_imports",
            "r25a_reader_shapes",
            "discriminator_wins",
            "reader_failures",
            "round14_tables",
            "fallback_readers",
            "formats_table_roles",
            "formats_csv_counters",
            "formats_csv_clocks",
            "formats_run_loss",
            "formats_round14_consoles",
            "metrics_files_round12",
            "metrics_files_round15",
            "round12_layouts",
            "round12_consoles",
            "round13_text_consoles",
            "round14_field_records",
            "chart_abandoned",
            "buildnanogpt_log",
            "formats_frameworks",
            "formats_console_tables",
            "jsonl_swift_shape",
            "jsonl_record_roles",
            "action_premise_shapes",
            "round10b_det",
            "round12_statements",
            "round12_rev12b",
            "round12_severity",
            "round12_det13",
            "round13_det14",
            "round13_det15",
            "round14_det17",
            "round14_tun18d",
            "statements_round10",
            "batch9_shapes",
            "det10_shapes",
            "import_rules10",
            "review12a",
            "model_experts",
            "placeholder_grad_norm",
            "alerts",
            "batch8_imports",
            "formats_batch9",
            "formats_batch10",
            "analysis",
            "baselines",
            "cause_signatures",
            "batch8_shapes",
            "checklist_claims",
            "claims",
            "loss_origin",
            "overfitting",
            "throughput",
            "checklist",
            "cli_map",
            "clipping",
            "configs",
            "cost",
            "declared_imports",
            "diagnosis",
            "early_warning",
            "heldout_shapes",
            "experiment_stats",
            "formats_aliases",
            "metric_columns",
            "stab_core_pure",
            "formats_numbers",
            "formats_custom",
            "formats_fidelity",
            "formats_prefixes",
            "formats_tabular",
            "formats_tensorboard",
            "formats_text",
            "formats_text_engines",
            "formats_text_fast",
            "formats_trainers_a",
            "formats_trainers_b",
            "formats_long_tail",
            "fuzz_regressions",
            "import_folders",
            "import_report",
            "import_segments",
            "notes_segments",
            "import_prefixed_detection",
            "import_console_shapes",
            "incidents",
            "pages_helpers",
            "readme_formats",
            "real_logs",
            "run_analyses",
            "run_status",
            "schedulers",
            "severity",
            "shard_rollbacks",
            "shards",
            "simulate",
            "snr",
            "spikes",
            "store_read_routes",
            "tiers",
            "layers",
            "corpus_golden",
            "statement_eval",
            "corpus_scores",
            "module_size",
        ),
        "fast",
    ),
    # integration: several layers at once: the CLI as a process, whole stores, pages through AppTest
    **dict.fromkeys(
        (
            "sibling_settings",
            "cli",
            "formats_number_spellings",
            "cli_contracts",
            "cli_meta",
            "cli_pipes",
            "cli_severity",
            "golden",
            "import_report_pages",
            "pages_checklist",
            "pages_compare",
            "pages_cost",
            "pages_errors",
            "pages_experiment",
            "pages_overview",
            "pages_loss_title",
            "pages_ranks",
            "pages_run_meta",
            "pages_runs",
            "pages_runs_tags",
            "pages_scenarios",
            "pages_scheduler",
            "pages_spikes",
            "pages_tree",
            "pages_upload",
            "pages_warmup",
            "store",
            "store_catalog",
            "store_check",
            "check_integrity",
            "store_incremental",
            "train_loop",
            "findings_store",
            "baseline_eval",
            "serve_start",
            "first_screen_preload",
            "behaviour_dump",
        ),
        "integration",
    ),
    # system: real services and processes: Chromium, servers, Spark, S3 (moto), kills, fuzzing, training
    # over gloo, benchmarks, fresh virtual environments
    **dict.fromkeys(
        (
            "bench_smoke",
            "browser",
            "callbacks_hf",
            "callbacks_lightning",
            "clipping_ddp",
            "demo_seeding",
            "experiment",
            "faults_concurrency",
            "faults_kill_compact",
            "faults_kill_import",
            "faults_kill_upload",
            "faults_kill_watch",
            "faults_storage",
            "fuzz_formats",
            "fuzz_formats_1",
            "fuzz_formats_2",
            "fuzz_formats_3",
            "fuzz_formats_4",
            "gloo_harness",
            "import_hygiene",
            "monitor",
            "object_store",
            "run_lock",
            "security_round2",
            "serve",
            "serve_access",
            "security_gate",
            "shards_s3",
            "spark_cluster",
            "spark_engine",
            "corpus_eval",
            "store_s3",
            "watch_logs",
            "store_s3_cli",
            "store_s3_speed",
            "train_demo",
            "wheel_install",
        ),
        "system",
    ),
}
"""Each test module's tier (``tests/test_NAME.py`` -> ``NAME``), given to its tests as a marker. `pytest`
alone runs the fast tier (pyproject.toml's addopts: ``-m "not slow and not integration and not
system"``); ``.ci/test`` runs all three (``-m ""``). A new test module must be named here."""

TIER_ORDER = ("system", "integration", "fast")
"""The order the tiers' modules run in (each module's tests stay together). ``.ci/test`` keeps it
(``--no-loadscope-reorder``): xdist's default starts the modules holding the most tests first, which
left CI's one-test modules of minutes (the kill tests, the wheel install) for the end on one worker;
the system tier first and the many short modules of the fast tier last let both workers end together."""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unnamed = set()
    for item in items:
        module = item.path.stem.removeprefix("test_")
        tier = TIERS.get(module)
        if tier is None:
            unnamed.add(item.path.name)
        elif tier != "fast":
            item.add_marker(getattr(pytest.mark, tier))
    if unnamed:
        raise pytest.UsageError(f"name the tier of {', '.join(sorted(unnamed))} in tests/conftest.py TIERS")
    items.sort(key=lambda item: TIER_ORDER.index(TIERS[item.path.stem.removeprefix("test_")]))


SMALL_RUN = "small"
N_RANKS = 4
N_STEPS = 2000
WARMUP_STEPS = 200
PEAK_LR = 3e-4
LOSS_SPIKE_STEPS = (1200, 1206)
"""Loss is multiplied by ``LOSS_SPIKE_FACTOR`` on steps [1200, 1206) and recovers after."""
LOSS_SPIKE_FACTOR = 3.0
GRAD_SPIKE_STEP = 1198
"""Global grad norm is 20x its level here: it leads the loss spike by 2 steps."""
OUTLIER_RANK = 2
OUTLIER_STEPS = (1500, 1600)
"""Rank 2's local grad norm is 4x the other ranks' on steps [1500, 1600)."""
SLOW_RANK = 3
SLOW_FACTOR = 1.3
"""Rank 3's step time is 1.3x the others' on every step (a straggler)."""
STEP_TIME_S = 0.5
MAX_NORM = 1.0
EVENTS = (
    (WARMUP_STEPS, "warmup_end", "warmup ends"),
    (500, "checkpoint", "ckpt-500"),
    (1000, "data_switch", "recipe v2"),
    (1000, "checkpoint", "ckpt-1000"),
    (1500, "checkpoint", "ckpt-1500"),
)


@dataclass
class RunSpec:
    """What ``write_run`` generates; every feature can be switched off."""

    name: str = SMALL_RUN
    seed: int = 0
    n_ranks: int = N_RANKS
    n_steps: int = N_STEPS
    loss_floor: float = 2.0
    loss_spike: tuple[int, int] | None = LOSS_SPIKE_STEPS
    grad_spike_step: int | None = GRAD_SPIKE_STEP
    outlier_rank: int | None = OUTLIER_RANK
    slow_rank: int | None = SLOW_RANK
    per_rank: bool = True
    run_level: tuple[str, ...] = ("loss", "lr", "grad_norm", "grad_norm_clipped", "clip_coef", "tokens")
    """Run-level metrics written (a subset makes a run that lacks some signals)."""
    events: tuple[tuple[int, str, str], ...] = EVENTS
    meta: dict[str, object] = field(default_factory=dict)


def loss_curve(steps: np.ndarray, floor: float) -> np.ndarray:
    """The noise-free loss of generated runs (nats/token): ``floor + 8*exp(-step/400)``."""
    return floor + 8.0 * np.exp(-steps / 400.0)


def lr_curve(steps: np.ndarray, n_steps: int) -> np.ndarray:
    """Linear warmup to PEAK_LR over WARMUP_STEPS, then cosine decay to 10 % at the last step."""
    progress = np.clip((steps - WARMUP_STEPS) / max(n_steps - 1 - WARMUP_STEPS, 1), 0, 1)
    decay = PEAK_LR * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * progress)))
    return np.where(steps < WARMUP_STEPS, PEAK_LR * steps / WARMUP_STEPS, decay)


def write_run(store: Store, spec: RunSpec, *, status: str = "finished") -> Store:
    """Generate ``spec`` as per-rank shards and compact them into ``store`` (the real pipeline)."""
    rng = np.random.default_rng(spec.seed)
    steps = np.arange(spec.n_steps, dtype=np.int64)
    loss = loss_curve(steps.astype(float), spec.loss_floor) * (1 + 0.01 * rng.standard_normal(steps.size))
    if spec.loss_spike:
        loss[spec.loss_spike[0] : spec.loss_spike[1]] *= LOSS_SPIKE_FACTOR
    grad = 1.0 + 0.3 * np.exp(-steps / 300.0) + 0.05 * rng.standard_normal(steps.size)
    if spec.grad_spike_step is not None:
        grad[spec.grad_spike_step] *= 20.0
    coef = np.minimum(1.0, MAX_NORM / (grad + 1e-6))
    run_level = {
        "loss": loss,
        "lr": lr_curve(steps.astype(float), spec.n_steps),
        "grad_norm": grad,
        "grad_norm_clipped": grad * coef,
        "clip_coef": coef,
        "tokens": (steps + 1) * 65536.0,
    }
    wall = 1.7e9 + steps * STEP_TIME_S
    meta = {
        "world_size": spec.n_ranks,
        "global_batch_size": 32 * spec.n_ranks,
        "per_rank_batch_size": 32,
        "max_norm": MAX_NORM,
        "gpus": spec.n_ranks,
        "step_time_s": STEP_TIME_S,
        "tags": ["test", f"seed{spec.seed}"],
        **spec.meta,
    }
    with tempfile.TemporaryDirectory(prefix="stabscope-test-shards-") as shard_dir:
        with ShardWriter(shard_dir, 0) as writer:
            writer.write_meta(meta)
            for step, kind, label in spec.events:
                writer.event(step, kind, label)
            chosen = {name: values for name, values in run_level.items() if name in spec.run_level}
            writer.write_columns(steps, chosen, rank=-1, wall_time=wall)
        for rank in range(spec.n_ranks if spec.per_rank else 0):
            local = grad * np.sqrt(spec.n_ranks) * (1 + 0.05 * rng.standard_normal(steps.size))
            if rank == spec.outlier_rank:
                local[OUTLIER_STEPS[0] : OUTLIER_STEPS[1]] *= 4.0
            step_time = STEP_TIME_S * (1 + 0.02 * rng.standard_normal(steps.size))
            if rank == spec.slow_rank:
                step_time *= SLOW_FACTOR
            with ShardWriter(shard_dir, rank) as writer:
                writer.write_columns(
                    steps,
                    {"grad_norm_local": local, "step_time_s": step_time, "gpu_temp_c": 60.0 + rank + 0 * local},
                    wall_time=wall,
                )
        store.compact(spec.name, shard_dir, status=status)
    return store


@pytest.fixture
def small_store(tmp_path: Path) -> Store:
    """A store holding ``SMALL_RUN``: 4 ranks x 2,000 steps, a loss spike at steps 1200-1205 led by a
    grad-norm spike at 1198, rank 2's local grad norm 4x on steps 1500-1599, rank 3 a 1.3x slow
    straggler, LR warmup over 200 steps, and the ``EVENTS``."""
    return write_run(open_analysed_store(tmp_path / "store"), RunSpec())


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """The ``small_store`` contents, built once per test module: for tests that only read."""
    return write_run(open_analysed_store(tmp_path_factory.mktemp("module") / "store"), RunSpec())


@pytest.fixture
def app_store(module_store: Store, monkeypatch: pytest.MonkeyPatch) -> Store:
    """``module_store`` as the store the pages open (``STABSCOPE_STORE``); do not modify it."""
    monkeypatch.setenv("STABSCOPE_STORE", str(module_store.root))
    return module_store


@pytest.fixture
def own_app_store(small_store: Store, monkeypatch: pytest.MonkeyPatch) -> Store:
    """A fresh ``small_store`` as the store the pages open, for tests that add or delete runs."""
    monkeypatch.setenv("STABSCOPE_STORE", str(small_store.root))
    return small_store


@pytest.fixture(scope="session")
def demo_store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo store (the demo and scenario runs written through the real shard path, as
    ``stabscope serve`` seeds them), built once per test session (per xdist worker): never modify it;
    ``demo_store_copy`` gives a module its own copy."""
    from ingest.services.demo import seed_demo_store

    root = tmp_path_factory.mktemp("demo-template") / "store"
    seed_demo_store(open_analysed_store(root))
    return root


def demo_store_copy(template: Path, parent: Path) -> Path:
    """A copy of the demo store at ``parent/store``, for tests that add to it or page through it."""
    import shutil

    root = parent / "store"
    shutil.copytree(template, root)
    return root


@pytest.fixture(params=["c", "numpy"])
def field_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Megatron's '|' layout cut by the C extension (``_fields.c``) or by numpy and Arrow."""
    from ingest.formats import textlog_pipes

    if request.param == "c" and textlog_pipes._fields is None:
        pytest.skip("ingest.formats._fields not built (no C compiler at install time)")
    if request.param == "numpy":
        monkeypatch.setattr(textlog_pipes, "_fields", None)
    return str(request.param)


def open_page(name: str) -> AppTest:
    """An AppTest of ``pages/<name>.py`` (call ``.run()``)."""
    return AppTest.from_file(str(REPO_ROOT / "pages" / f"{name}.py"), default_timeout=30)


def write_log_lines(folder: Path, lines: list[str], name: str = "train.log") -> Path:
    """``lines`` written as the log file ``folder/name`` (one per line, a final newline)."""
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def metric_series(parsed: Any, metric: str) -> tuple[list[int], list[float]]:
    """Steps and values a parsed log holds for ``metric``, in row order."""
    import pyarrow.compute as pc

    rows = parsed.table.filter(pc.equal(parsed.table["metric"], metric))
    return rows["step"].to_pylist(), rows["value"].to_pylist()


def figure_of(at: AppTest, index: int = 0) -> dict[str, Any]:
    """The ``index``-th Plotly chart of an AppTest run as a figure dict."""
    return dict(json.loads(at.get("plotly_chart")[index].proto.spec))


def plotly_values(data: Any) -> np.ndarray:
    """A trace's ``x``/``y`` as numpy (plotly writes numeric arrays as base64 typed arrays)."""
    if isinstance(data, dict):
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=np.dtype(data["dtype"]))
    return np.asarray(data, dtype=float)


@pytest.fixture(autouse=True, scope="session")
def _no_test_touches_the_users_store(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Point the default store at a throwaway folder for the whole session: a test that forgets to
    pass ``--store``/``STABSCOPE_STORE`` must never write into ``~/.local/share/stabscope``."""
    os.environ["STABSCOPE_STORE"] = str(tmp_path_factory.mktemp("default-store"))
    # a developer's own dashboard token would put every page test behind the gate
    os.environ.pop("STABSCOPE_TOKEN", None)


def _scan_installed_components_once() -> None:
    """Each new AppTest (``open_page``; hundreds a session) scans the metadata of every installed package
    for Streamlit components (``BidiComponentManager.discover_and_register_components``): 0.18 s of CPU
    (about 1 s of wall on a loaded 2-core machine) each time. The installed packages do not change during
    a test session, so the first scan's result (a list of (manifest, folder)) serves the others, copied."""
    from functools import cache

    from streamlit.components.v2 import manifest_scanner

    scan = cache(manifest_scanner.scan_component_manifests)

    def scan_once(max_workers: int | None = None) -> list[Any]:
        return list(scan(max_workers))

    manifest_scanner.scan_component_manifests = scan_once  # type: ignore[assignment]


_scan_installed_components_once()
