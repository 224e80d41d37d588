"""What `stabscope serve` does before its server listens (issue #34 item 7): the CLI process builds no
training parser (numpy), the server does not import the page helpers before it listens (the first
page does, after its browser warm-up), and a store seeded before is recognised without loading the
analyses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ingest.services.demo import DEMO_SEEDED_KEY
from ingest.store import Store

REPO_ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return done.stdout.strip()


def test_a_core_command_builds_no_training_parser_and_help_lists_them() -> None:
    code = (
        "import sys\nfrom ingest.cli import main\ntry:\n    main(['serve', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('numpy' in sys.modules)"
    )
    assert _python(code).splitlines()[-1] == "False"  # the serve CLI process loads no numpy before it execs
    usage = _python("from ingest.cli import build_parser\nbuild_parser().print_help()")
    assert "demo-train" in usage and "experiment" in usage  # the full parser still lists the training side


def test_the_server_listens_before_the_page_helpers_load() -> None:
    """The first page imports them after its browser warm-up (pages.parts.warmup), as under streamlit run."""
    code = (
        "import sys\nfrom pages.server import _prepare_server\n_prepare_server()\n"
        "print(sorted(m for m in ('pages.parts.charts', 'pages.parts.store_access', 'pandas', 'duckdb')"
        " if m in sys.modules))"
    )
    assert _python(code).splitlines()[-1] == "[]"


def test_a_seeded_store_is_recognised_without_loading_the_analyses(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.set_setting(DEMO_SEEDED_KEY, "1")
    code = (
        "import sys\nfrom ingest.cli.serve import seed_before_serving\nstatus = seed_before_serving()\n"
        "print(status, 'stab_core.analysis' in sys.modules, 'ingest.services.run_analyses' in sys.modules)"
    )
    assert _python(code, STABSCOPE_STORE=str(store.root)).splitlines()[-1] == "0 False False"
