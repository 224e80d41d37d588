"""Demo seeding exactly once per store (issue #23, Broken 2): however many processes and dashboard
sessions start on an empty store at once, the demo runs are written once, the others wait and then show
them, and nothing fails. Real processes (this file run as a script: ``python tests/test_demo_seeding.py
ROLE ...``) started together behind a barrier, real app.py sessions through AppTest, real stores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # a child: the repository on the path, as pytest's rootdir gives it to the tests
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest

REPO = Path(__file__).resolve().parents[1]


def child_env(store: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "STABSCOPE_STORE": str(store)}
    for off in ("STABSCOPE_NO_DEMO", "STABSCOPE_TOKEN", "STABSCOPE_CRASH_AT"):
        env.pop(off, None)
    return env


def start_child(store: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(store),
        cwd=REPO,
    )


def at_barrier(go: str) -> None:
    """Say this child is ready (its imports done), then wait for the file ``go``."""
    Path(f"{go}.ready-{os.getpid()}").touch()
    while not os.path.exists(go):
        time.sleep(0.005)


def release_barrier(go: Path, children: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while len(list(go.parent.glob(f"{go.name}.ready-*"))) < children and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()


# ------------------------------------------------------------------------------------- children


def child_app(go: str) -> int:
    """A browser session's first run of app.py (the Runs page) on the store: prints what it drew."""
    import streamlit.testing.v1.app_test as app_test_module
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.testing.v1 import AppTest

    import ingest.services.demo  # the first run's heavy imports, before the barrier
    import ingest.services.run_analyses  # noqa: F401
    import pages.parts.store_access  # noqa: F401
    import stab_core.simulate  # noqa: F401
    from tests.app_pages import _NavigationOnly

    # as tests/app_pages.open_in_app: app.py's navigation, not Streamlit's old pages/ folder mode
    app_test_module.PagesManager = _NavigationOnly  # type: ignore[attr-defined,misc]
    PagesManager.uses_pages_directory = False  # type: ignore[assignment]
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at_barrier(go)
    at.run()
    drawn = {
        "exceptions": [str(e.value) for e in at.exception],
        "errors": [str(e.value) for e in at.error],
        "captions": [str(c.value) for c in at.caption],
    }
    print(json.dumps(drawn))
    return 0


def child_serve(go: str) -> int:
    """``stabscope serve``'s first start on the store: the demo runs before the server listens."""
    from ingest.cli.serve import seed_before_serving

    at_barrier(go)
    return seed_before_serving()


def child_demo(go: str) -> int:
    """``stabscope demo`` (which re-creates the demo runs) started with the others."""
    import ingest.services.demo
    import ingest.services.run_analyses  # noqa: F401
    import stab_core.simulate  # noqa: F401
    from ingest.cli import main

    at_barrier(go)
    return main(["demo"])


def child_poller(stop: str, out: str) -> int:
    """Read the catalog every 20 ms until the file ``stop`` exists; write each run seen (name, source,
    created) as JSON lines to ``out``: a run written twice shows two sources (each seeding writes from
    its own temporary shard folder)."""
    from ingest.store import Store

    store = Store(os.environ["STABSCOPE_STORE"])
    seen: set[tuple[str, str, str]] = set()
    errors: list[str] = []
    with open(out, "w") as log:
        while not os.path.exists(stop):
            try:
                for r in store.list_runs():
                    key = (r.name, r.source, str(r.created))
                    if key not in seen:
                        seen.add(key)
                        log.write(json.dumps({"name": r.name, "source": r.source, "created": str(r.created)}) + "\n")
            except Exception as exc:  # a reader must never fail: the test counts these
                errors.append(f"{type(exc).__name__}: {exc}")
                log.write(json.dumps({"error": errors[-1]}) + "\n")
            log.flush()
            time.sleep(0.02)
    return 0


# ------------------------------------------------------------------------------------- tests


@pytest.mark.slow
def test_four_first_starts_at_once_seed_the_demo_runs_once(tmp_path: Path) -> None:
    """Two app.py sessions, ``stabscope serve``'s first start and ``stabscope demo``, started together on
    an empty store: each demo run is written once (one source per run all along, generation 1 as one
    seeding leaves it), the setting names one seeder, nothing fails, and every session shows the runs."""
    from ingest.services.demo import DEMO_SEEDED_KEY, demo_run_names
    from ingest.store import Store

    store, go = tmp_path / "store", tmp_path / "go"
    stop, polled = tmp_path / "stop", tmp_path / "polled.jsonl"
    poller = start_child(store, "poller", str(stop), str(polled))
    roles = ["app", "app", "serve", "demo"]
    children = [start_child(store, role, str(go)) for role in roles]
    try:
        release_barrier(go, len(children))
        results = [(role, child, *child.communicate(timeout=600)) for role, child in zip(roles, children, strict=True)]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
        stop.touch()
        poller.communicate(timeout=60)
    for role, child, _, err in results:
        assert child.returncode == 0, f"{role}: {err}"
        assert "Traceback" not in err and "error" not in err.lower(), f"{role}: {err}"
    names = demo_run_names()
    for role, _, out, _ in results:
        if role == "app":
            drawn = json.loads(out.strip().splitlines()[-1])
            assert drawn["exceptions"] == [] and drawn["errors"] == [], drawn
            assert any(f"of {len(names)} runs" in c for c in drawn["captions"]), drawn  # the Runs table, with them
    demo_err = next(err for role, _, _, err in results if role == "demo")
    assert "demo runs in" in demo_err, demo_err

    seen = [json.loads(line) for line in polled.read_text().splitlines()]
    assert [s for s in seen if "error" in s] == []
    sources: dict[str, set[str]] = {}
    for s in seen:
        sources.setdefault(s["name"], set()).add(s["source"])
    assert sorted(sources) == sorted(names)
    assert {n: len(v) for n, v in sources.items() if len(v) != 1} == {}, "a demo run was written twice"

    opened = Store(store)
    runs = opened.list_runs()
    assert sorted(r.name for r in runs) == sorted(names)
    assert {r.name: r.gen for r in runs} == dict.fromkeys(names, 1)  # one compaction of a fresh run each
    seeder = opened.get_setting(DEMO_SEEDED_KEY) or ""
    assert any(f" pid {child.pid} " in seeder for child in children), seeder


def test_a_waiting_seeder_is_told_who_prepares_the_runs_and_writes_none(tmp_path: Path) -> None:
    """While another process seeds, a second seeding waits, hearing who holds the seeding (the page's
    "being prepared" bar), then finds the runs written and writes none itself."""
    from ingest.services.demo import seed_demo_store
    from ingest.services.run_analyses import open_analysed_store
    from ingest.store import LockHolder

    store_path = tmp_path / "store"
    seeder = start_child(store_path, "seed-small")
    assert seeder.stdout is not None and seeder.stdout.readline().strip() == "seeding"
    heard: list[LockHolder | None] = []
    written = seed_demo_store(open_analysed_store(store_path), include_scenarios=False, on_wait=heard.append)
    out, err = seeder.communicate(timeout=120)
    assert seeder.returncode == 0, err
    assert written == [] and heard, heard
    assert {h.pid for h in heard if h is not None} == {seeder.pid}
    assert json.loads(out.strip().splitlines()[-1]) == ["demo-dense-1b", "demo-fp16-350m", "demo-moe-2b"]


def child_seed_small() -> int:
    """Seed the three small demo runs, saying "seeding" once the first one is in (the lock held)."""
    from ingest.services.demo import seed_demo_store
    from ingest.services.run_analyses import open_analysed_store

    def said(done: int, _total: int) -> None:
        if done == 1:
            print("seeding", flush=True)
            time.sleep(1.0)  # the other seeder is waiting by now

    names = seed_demo_store(open_analysed_store(os.environ["STABSCOPE_STORE"]), include_scenarios=False, progress=said)
    print(json.dumps(names))
    return 0


if __name__ == "__main__":
    role, *rest = sys.argv[1:]
    roles: dict[str, Any] = {
        "app": child_app,
        "serve": child_serve,
        "demo": child_demo,
        "poller": child_poller,
        "seed-small": child_seed_small,
    }
    sys.exit(roles[role](*rest))
