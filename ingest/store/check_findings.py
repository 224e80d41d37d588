"""The findings of ``stabscope check``: stable codes (``--json``'s ``code``), what ``--repair`` does about
each (``Action``) and the report. ``check`` finds, ``check_recovery`` reads a run back from its files,
``check_repair`` repairs; ``check_remote`` checks a store on object storage with the same findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

CATALOG_NAME: Final = "catalog.duckdb"
CATALOG_TABLES: Final = ("runs", "offsets", "staged", "events", "spikes", "settings")
"""Every table of the catalog (``queries.CATALOG_SCHEMA``): a check reads each in full."""
CHECK_LOCK_WAIT_S: Final = 30.0
"""Seconds a check waits for a run's writer (``--wait``) before reporting the run as busy."""

# Finding codes: stable names for scripts (``--json``'s ``code``).
CATALOG_MISSING: Final = "catalog_missing"
CATALOG_CORRUPT: Final = "catalog_corrupt"
CATALOG_DATA_LOST: Final = "catalog_data_lost"
MISSING_FILE: Final = "missing_file"
UNREADABLE_FILE: Final = "unreadable_file"
BAD_BLOCK_INDEX: Final = "bad_block_index"
ROW_COUNT_MISMATCH: Final = "row_count_mismatch"
CATALOG_FIGURES_MISMATCH: Final = "catalog_figures_mismatch"
UNMERGED_STAGED: Final = "unmerged_staged"
ORPHAN_TMP: Final = "orphan_tmp"
ORPHAN_FILE: Final = "orphan_file"
UNREGISTERED_RUN: Final = "unregistered_run"
NOT_A_RUN_FOLDER: Final = "not_a_run_folder"
RUN_BUSY: Final = "run_busy"
CATALOG_BEHIND_FILES: Final = "catalog_behind_files"
"""A run's files hold a complete generation newer than the catalog's (a catalog restored from a backup)."""


class Action:
    """What ``--repair`` does about a finding (internal; the finding's ``repair`` says it in words)."""

    DELETE: Final = "delete"
    REMERGE: Final = "remerge"
    FORGET_STAGED: Final = "forget_staged"
    MERGE_STAGED: Final = "merge_staged"
    REANALYSE: Final = "reanalyse"
    REGISTER: Final = "register"
    REBUILD: Final = "rebuild_catalog"
    RESTORE: Final = "restore_from_copy"
    ADOPT: Final = "adopt_generation"
    NONE: Final = "none"


REPAIR_TEXT: Final = {
    Action.DELETE: "delete it",
    Action.REMERGE: "merge the run again from its long files into a new generation (no row is lost)",
    Action.FORGET_STAGED: "merge the run again from its long files and its readable staged batches, and forget its "
    "shard offsets, so that the next `stabscope compact` or `watch` reads its shards again (each record is "
    "kept once)",
    Action.MERGE_STAGED: "merge the staged batches into a new generation, as the run's next writer would",
    Action.RESTORE: "rebuild it from the run-level file of its generation, which holds the same rows (every row "
    "of the run is run-level), into a new generation (no row is lost)",
    Action.REANALYSE: "run the run's analyses again",
    Action.REGISTER: "add the run to the catalog from its files",
    Action.REBUILD: "move it aside to catalog.duckdb.corrupt-<time> and rebuild the catalog from the run files",
}


@dataclass
class Finding:
    """One thing wrong: ``run`` (None for the store's catalog), the ``path`` concerned, ``code`` (a stable
    name, see the constants), what is wrong (``problem``) and what ``--repair`` does about it (``repair``;
    ``none: ...`` says what the user can do instead). ``repaired`` is set by ``repair``."""

    code: str
    run: str | None
    path: str
    problem: str
    action: str
    how: str = ""
    repaired: bool = False

    @property
    def repair(self) -> str:
        return self.how or REPAIR_TEXT.get(self.action, "none")

    def to_json(self) -> dict[str, Any]:
        """The ``stabscope check --json`` object (contract: run, path, code, problem, repair, repaired)."""
        return {
            "run": self.run,
            "path": self.path,
            "code": self.code,
            "problem": self.problem,
            "repair": self.repair,
            "repaired": self.repaired,
        }

    def line(self, *, after_repair: bool = False) -> str:
        if after_repair:
            done = "repaired: " if self.repaired else "not repaired: "
            return f"{self.path}: {self.problem}; {done}{self.repair}"
        return f"{self.path}: {self.problem}; --repair: {self.repair}"


@dataclass
class CheckReport:
    """Every finding of a check (``repair``: of every round, ``clean`` telling whether the store is
    clean after the repairs)."""

    root: Path
    findings: list[Finding] = field(default_factory=list)
    clean: bool = True


def first_line(exc: BaseException) -> str:
    """``exc``'s message on one line, at most 300 characters (a finding's or an error's words)."""
    return " ".join(str(exc).split())[:300]
