"""The test tiers: `pytest` alone is the fast loop, and every test module has a tier."""

from __future__ import annotations

import shlex
import tomllib

from tests.conftest import REPO_ROOT, TIERS


def test_pytest_alone_selects_the_fast_tier() -> None:
    options = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    args = shlex.split(options["addopts"])
    selection = args[args.index("-m") + 1]
    assert selection == "not slow and not integration and not system"
    assert {"integration", "system"} <= {line.split(":")[0] for line in options["markers"]}


def test_every_test_module_has_a_tier() -> None:
    modules = {path.stem.removeprefix("test_") for path in (REPO_ROOT / "tests").glob("test_*.py")}
    assert modules - TIERS.keys() == set()
    assert set(TIERS.values()) == {"fast", "integration", "system"}


def test_ci_runs_every_tier() -> None:
    ci = (REPO_ROOT / ".ci" / "test").read_text()
    pytest_line = next(line for line in ci.splitlines() if line.startswith("python -m pytest"))
    assert '-m ""' in pytest_line
