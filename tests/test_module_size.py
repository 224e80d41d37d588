"""No source module over 600 lines (issue #34): a module that size holds more than one purpose and
is split by purpose instead. Counts physical lines, as ``wc -l`` does."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 600
SOURCE_ROOTS = ("stab_core", "ingest", "pages", "bench")


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
    offenders = oversized()
    assert offenders == {}, f"split by purpose (at most {MAX_LINES} lines each): {offenders}"


def test_the_count_would_notice_a_long_module(tmp_path: Path) -> None:
    # a guard against a check that passes because it counted nothing
    long_module = tmp_path / "long.py"
    long_module.write_text("x = 1\n" * (MAX_LINES + 1))
    assert line_count(long_module) == MAX_LINES + 1
    assert len(source_modules()) > 100
    assert max(line_count(p) for p in source_modules()) > 100
