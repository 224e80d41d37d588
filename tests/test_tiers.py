"""The test tiers: `pytest` alone is the fast loop, and every test module has a tier."""

from __future__ import annotations

import shlex
import tomllib
from typing import cast

import pytest

from tests.conftest import REPO_ROOT, TIER_ORDER, TIERS, pytest_collection_modifyitems


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


class _Item:
    """What the tier hook reads of a collected test: its file; the markers it is given."""

    def __init__(self, module: str) -> None:
        self.path = REPO_ROOT / "tests" / f"test_{module}.py"
        self.module = module

    def add_marker(self, marker: object) -> None:
        pass


def test_the_system_tier_runs_first_and_ci_keeps_that_order() -> None:
    # xdist's default order (most tests first) left CI's one-test modules of minutes for the end
    items = [_Item(m) for m in ("tiers", "cli", "faults_kill_watch", "tiers", "wheel_install")]
    pytest_collection_modifyitems(cast(pytest.Config, None), cast(list[pytest.Item], items))
    assert [item.module for item in items] == ["faults_kill_watch", "wheel_install", "cli", "tiers", "tiers"]
    assert [TIERS[item.module] for item in items] == sorted((TIERS[i.module] for i in items), key=TIER_ORDER.index)
    ci = (REPO_ROOT / ".ci" / "test").read_text()
    assert "--dist loadfile --no-loadscope-reorder" in ci
