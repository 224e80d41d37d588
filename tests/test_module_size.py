"""No source module over 600 lines (issue #34): a module that size holds more than one purpose and
is split by purpose instead. Counts physical lines, as ``wc -l`` does."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 600
SOURCE_ROOTS = ("stab_core", "ingest", "pages", "bench")

BEING_SPLIT = frozenset(
    {
        "ingest/cli/__init__.py",
        "ingest/formats/_common.py",
        "ingest/formats/tensorboard_records.py",
        "ingest/formats/textlog_engine.py",
    }
)
"""Modules other branches of this round split (issue #34); the lead drops this set at merge."""


def source_modules() -> list[Path]:
    """Every Python source module the limit applies to: the packages and ``app.py`` (not the tests)."""
    modules = [REPO / "app.py"]
    for root in SOURCE_ROOTS:
        modules.extend(sorted((REPO / root).rglob("*.py")))
    return modules


def line_count(path: Path) -> int:
    return len(path.read_bytes().splitlines())


def oversized(limit: int = MAX_LINES) -> dict[str, int]:
    """Relative path -> line count of each source module over ``limit`` lines."""
    sizes = {str(p.relative_to(REPO).as_posix()): line_count(p) for p in source_modules()}
    return {name: n for name, n in sorted(sizes.items()) if n > limit}


def test_no_source_module_over_the_limit() -> None:
    offenders = {name: n for name, n in oversized().items() if name not in BEING_SPLIT}
    assert offenders == {}, f"split by purpose (at most {MAX_LINES} lines each): {offenders}"


@pytest.mark.xfail(strict=False, reason="split in branch layout/grammar")
def test_the_modules_being_split_elsewhere_are_within_the_limit() -> None:
    offenders = {name: n for name, n in oversized().items() if name in BEING_SPLIT}
    assert offenders == {}, f"split by purpose (at most {MAX_LINES} lines each): {offenders}"


def test_the_count_would_notice_a_long_module(tmp_path: Path) -> None:
    # a guard against a check that passes because it counted nothing
    long_module = tmp_path / "long.py"
    long_module.write_text("x = 1\n" * (MAX_LINES + 1))
    assert line_count(long_module) == MAX_LINES + 1
    assert len(source_modules()) > 100
    assert max(line_count(p) for p in source_modules()) > 100
