"""``stabscope check [RUN] [--repair] [--json]`` on real damage: truncated and deleted Parquet files, stray
temporary files, leftover generations and staging files, corrupt bytes in and deletion of ``catalog.duckdb``.

One store is built once per module through the real pipeline (shards -> compact, with analyses): ``small``
(4 ranks x 2,000 steps) and ``live`` (a first generation and two delta parts); each test damages a copy.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from ingest.cli import main
from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store
from ingest.store.shards import ShardWriter
from tests.conftest import RunSpec, write_run

LIVE = "live"
FIGURES = ("gen", "base_gen", "first_step", "last_step", "n_steps", "n_rows", "ranks", "metrics", "rank_metrics",
           "heat_bucket")  # fmt: skip


def _write_live(store: Store, shards: Path) -> None:
    """A live run: a first generation, then two folds that only extend it (two delta parts)."""
    rng = np.random.default_rng(3)
    for lo, hi in ((0, 2999), (3000, 3100), (3101, 3200)):
        steps = np.arange(lo, hi + 1, dtype=np.int64)
        for rank in (-1, 0, 1):
            with ShardWriter(shards, max(rank, 0)) as writer:
                columns = {"loss": 3 + rng.standard_normal(steps.size)} if rank < 0 else {
                    "grad_norm_local": 1 + 0.1 * rng.standard_normal(steps.size)}  # fmt: skip
                writer.write_columns(steps, columns, rank=rank)
        store.compact(LIVE, shards, status="live")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("check") / "store"
    store = open_analysed_store(root)
    write_run(store, RunSpec())
    _write_live(store, root.parent / "shards")
    info = store.run_info(LIVE)
    assert (info.base_gen, info.gen) == (1, 3)  # the delta parts this file means to check
    return root


@pytest.fixture
def store_copy(pristine: Path, tmp_path: Path) -> Path:
    root = tmp_path / "store copy é"  # a path with a space and non-ASCII
    shutil.copytree(pristine, root, ignore=shutil.ignore_patterns("locks"))
    return root


def _check(root: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict], str]:
    capsys.readouterr()
    code = main(["check", "--store", str(root), "--json", *args])
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def _same_runs(a: Store, b: Store, names: list[str], *, spikes: bool = True, events: bool = True) -> None:
    for name in names:
        x, y = a.run_info(name), b.run_info(name)
        assert [getattr(x, f) for f in FIGURES if f not in ("gen", "base_gen")] == [
            getattr(y, f) for f in FIGURES if f not in ("gen", "base_gen")
        ], name
        ta, tb = a.read_long(name), b.read_long(name)
        assert ta.num_rows == tb.num_rows == x.n_rows
        for column in ta.column_names:  # row for row; NaN equals NaN here
            np.testing.assert_array_equal(
                ta.column(column).to_numpy(zero_copy_only=False), tb.column(column).to_numpy(zero_copy_only=False)
            )
        for metric in x.metrics:
            sa, sb = a.read_series(name, metric, buckets=300), b.read_series(name, metric, buckets=300)
            np.testing.assert_array_equal(sa.values, sb.values)
            np.testing.assert_array_equal(sa.steps, sb.steps)
        if spikes:
            assert a.spikes(name) == b.spikes(name)
            assert x.meta == y.meta
        if events:
            assert a.events(name) == b.events(name) and a.events(name)


def test_a_clean_store_checks_clean(pristine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, findings, err = _check(pristine, capsys=capsys)
    assert (code, findings) == (0, [])
    assert err.strip() == f"stabscope check: store {pristine} is clean"
    assert _check(pristine, LIVE, capsys=capsys)[:2] == (0, [])


def test_damaged_files_are_found_and_repaired_row_for_row(
    pristine: Path, store_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small, live = store_copy / "runs" / "run=small", store_copy / "runs" / "run=live"
    rollup = small / "rollup" / "g000001.parquet"
    rollup.write_bytes(rollup.read_bytes()[:3000])  # truncated: the footer is gone
    (small / "rankb" / "g000001.parquet").unlink()
    stray = small / "long" / "g000002.parquet.0badf00d.tmp"
    stray.write_bytes(b"half a file")
    newer = small / "long" / "g000009.parquet"
    shutil.copy(small / "long" / "g000001.parquet", newer)
    (small / "staging").mkdir()
    unstaged = small / "staging" / "00000000000000000001-deadbeef-00000.parquet"
    shutil.copy(small / "long" / "g000001.parquet", unstaged)
    delta_long = live / "long" / "g000003.parquet"
    delta_long.write_bytes(delta_long.read_bytes()[:-100])

    code, findings, _ = _check(store_copy, capsys=capsys)
    assert code == 1
    got = {(f["code"], f["run"], Path(f["path"]).relative_to(store_copy).as_posix(), f["repaired"]) for f in findings}
    assert got == {
        ("unreadable_file", "live", "runs/run=live/long/g000003.parquet", False),
        ("unreadable_file", "small", "runs/run=small/rollup/g000001.parquet", False),
        ("missing_file", "small", "runs/run=small/rankb/g000001.parquet", False),
        ("orphan_tmp", "small", "runs/run=small/long/g000002.parquet.0badf00d.tmp", False),
        ("orphan_file", "small", "runs/run=small/long/g000009.parquet", False),
        ("orphan_file", "small", "runs/run=small/staging/00000000000000000001-deadbeef-00000.parquet", False),
    }
    by_path = {Path(f["path"]).name: f for f in findings}
    assert by_path["g000009.parquet"]["problem"] == (
        "generation 9 is newer than the catalog's (1): a writer stopped between writing and committing it"
    )
    assert by_path["g000003.parquet"]["repair"].startswith("none: the rows of this file are lost")
    assert by_path["g000001.parquet"]["repair"] == (
        "merge the run again from its long files into a new generation (no row is lost)"
    )

    # the text form: one line per finding, the path first
    capsys.readouterr()
    assert main(["check", "--store", str(store_copy), "small"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5
    assert (
        f"{stray}: temporary file of a writer that stopped (killed?) before finishing it; --repair: delete it" in lines
    )

    code, findings, _ = _check(store_copy, "--repair", capsys=capsys)
    assert code == 1  # the delta part's rows are lost: said, not hidden
    assert [(f["code"], f["run"]) for f in findings if not f["repaired"]] == [("unreadable_file", "live")]
    assert sum(f["repaired"] for f in findings) == 5
    assert not stray.exists() and not newer.exists() and not unstaged.exists()
    assert _check(store_copy, "small", capsys=capsys)[:2] == (0, [])
    repaired = open_analysed_store(store_copy)
    assert repaired.run_info("small").gen == 2  # merged again from the long file
    _same_runs(open_analysed_store(pristine), repaired, ["small"])


DUCKDB_HEADER = 3 * 4096
"""A DuckDB file starts with three 4 KiB headers; then come its 256 KiB blocks."""
DUCKDB_BLOCK = 256 * 1024


def _corrupt(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at : at + 8192] = b"\xa5" * 8192
    path.write_bytes(bytes(data))


def _block_holding_only_some_tables(catalog: Path, scratch: Path) -> int:
    """The offset of a catalog block whose corruption leaves the runs table readable but not another."""
    from ingest.store.check_recovery import salvage_catalog

    for at in range(DUCKDB_HEADER, catalog.stat().st_size, DUCKDB_BLOCK):
        shutil.copy(catalog, scratch)
        _corrupt(scratch, at)
        rows = salvage_catalog(scratch)
        if rows.runs and rows.unreadable:
            return at
    pytest.fail("no catalog block holds only some tables")


@pytest.mark.parametrize("damage", ["corrupt header", "corrupt first block", "corrupt one table", "deleted"])
def test_a_lost_catalog_is_rebuilt_from_the_run_files(
    pristine: Path, store_copy: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = store_copy / "catalog.duckdb"
    if damage == "deleted":
        catalog.unlink()
    elif damage == "corrupt one table":
        _corrupt(catalog, _block_holding_only_some_tables(catalog, store_copy.parent / "scratch.duckdb"))
    else:
        _corrupt(catalog, 0 if damage == "corrupt header" else DUCKDB_HEADER)
    code, findings, _ = _check(store_copy, capsys=capsys)
    assert code == 1
    assert findings[0]["code"] == ("catalog_missing" if damage == "deleted" else "catalog_corrupt")
    assert sorted((f["code"], f["run"]) for f in findings[1:]) == [
        ("unregistered_run", LIVE),
        ("unregistered_run", "small"),
    ]

    code, findings, err = _check(store_copy, "--repair", capsys=capsys)
    assert code == 0, err
    kept = sorted(store_copy.glob("catalog.duckdb.corrupt-*"))
    assert len(kept) == (0 if damage == "deleted" else 1)
    lost = [f for f in findings if f["code"] == "catalog_data_lost"]
    assert _check(store_copy, capsys=capsys)[:2] == (0, [])
    before, after = open_analysed_store(pristine), open_analysed_store(store_copy)
    assert [r.name for r in after.list_runs()] == [r.name for r in before.list_runs()]
    assert (after.run_info(LIVE).base_gen, after.run_info(LIVE).gen) == (1, 3)  # the delta parts kept as they are
    salvaged = damage == "corrupt one table"
    assert bool([f for f in lost if f["run"] and "metadata" in f["problem"]]) is not salvaged
    events_lost = any("events" in f["problem"] for f in lost)
    assert events_lost is (damage != "corrupt one table" or "events" in str(findings[0]["problem"]))
    # the stored incidents are the same when the catalog's events survived: a re-run action rests on the
    # checkpoint saves among them, so an analysis without them words it as "if a checkpoint ... exists"
    _same_runs(before, after, ["small"], spikes=salvaged and not events_lost, events=not events_lost)
    _same_runs(before, after, [LIVE], spikes=salvaged, events=False)  # written without events
    if not salvaged:  # what lived only in the catalog is named, and the runs' data are all there
        assert sorted(str(f["run"]) for f in lost) == ["None", LIVE, "small"]  # None: the store's settings
        assert all("metadata (user-set keys included)" in f["problem"] for f in lost if f["run"])
        assert after.run_info("small").meta.get("analysis") is not None  # the analyses ran again


def test_check_of_a_missing_store_or_run_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--store", str(tmp_path / "nowhere")]) == 2
    assert "no StabScope store at" in capsys.readouterr().err


def _catalog_sql(root: Path, sql: str, params: list[object]) -> None:
    """Change the store's catalog as a stray script or a bad restore would (no process holds it)."""
    import duckdb

    con = duckdb.connect(str(root / "catalog.duckdb"))
    try:
        con.execute(sql, params)
    finally:
        con.close()


@pytest.mark.parametrize(
    ("change", "code", "problem"),
    [
        ("n_rows = n_rows + 7", "row_count_mismatch", "the catalog records {rows_plus_7} rows for the run, its long "
         "files hold {rows}"),
        ("last_step = last_step + 5", "catalog_figures_mismatch", "the catalog's figures differ from the files': "
         "last step: catalog 2004, files 1999"),
    ],
)  # fmt: skip
def test_catalog_figures_unlike_the_files_are_found_and_merged_again(
    pristine: Path, store_copy: Path, change: str, code: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = open_analysed_store(pristine).run_info("small").n_rows
    _catalog_sql(store_copy, f"UPDATE runs SET {change} WHERE name = ?", ["small"])
    found_code, findings, _ = _check(store_copy, capsys=capsys)
    assert found_code == 1
    assert [(f["code"], f["run"], f["problem"]) for f in findings] == [
        (code, "small", problem.format(rows=rows, rows_plus_7=rows + 7))
    ]
    assert findings[0]["repair"] == "merge the run again from its long files into a new generation (no row is lost)"
    assert _check(store_copy, "--repair", capsys=capsys)[0] == 0
    assert _check(store_copy, capsys=capsys)[:2] == (0, [])
    _same_runs(open_analysed_store(pristine), open_analysed_store(store_copy), ["small"])


def test_a_block_index_that_does_not_parse_is_found_and_the_file_rebuilt(
    pristine: Path, store_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow.parquet as pq

    from ingest.store.blocks import INDEX_KEY

    run_level = store_copy / "runs" / "run=small" / "runlevel" / "g000001.parquet"
    table = pq.read_table(run_level)
    pq.write_table(table.replace_schema_metadata({INDEX_KEY: '[["loss", -1, "many"]]'}), run_level)
    code, findings, _ = _check(store_copy, capsys=capsys)
    assert code == 1
    [finding] = findings
    assert (finding["code"], finding["path"]) == ("bad_block_index", str(run_level))
    assert finding["problem"].startswith(f"its block index ({INDEX_KEY}) does not parse")
    assert _check(store_copy, "--repair", capsys=capsys)[0] == 0
    _same_runs(open_analysed_store(pristine), open_analysed_store(store_copy), ["small"])


def test_a_batch_staged_but_not_merged_is_merged_by_repair(
    pristine: Path, store_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A writer stopped between staging and merging: the batch (here the run's own rows again, as a
    re-read shard gives them) is merged; each row is kept once."""
    from ingest.store import queries

    staging = store_copy / "runs" / "run=small" / "staging"
    staging.mkdir(exist_ok=True)
    batch = staging / "00000000000000000001-0badcafe-00000.parquet"
    shutil.copy(store_copy / "runs" / "run=small" / "long" / "g000001.parquet", batch)
    _catalog_sql(store_copy, queries.ADD_STAGED, ["small", str(batch), 1])
    findings = _check(store_copy, capsys=capsys)[1]
    assert [(f["code"], f["path"]) for f in findings] == [("unmerged_staged", str(staging))]
    assert findings[0]["problem"] == "1 batch(es) staged but not merged (a writer stopped between staging and merging)"
    assert _check(store_copy, "--repair", capsys=capsys)[0] == 0
    repaired = open_analysed_store(store_copy)
    assert repaired.run_info("small").gen == 2 and not batch.exists()
    _same_runs(open_analysed_store(pristine), repaired, ["small"])


def test_a_foreign_folder_and_a_busy_run_are_reported_and_left(
    store_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess
    import sys

    from ingest.store.layout import run_lock_file

    foreign = store_copy / "runs" / "backup of small"
    foreign.mkdir()
    run_lock_file(store_copy, LIVE).parent.mkdir()
    holder = subprocess.Popen(  # another process writing run 'live' (its writer lock held)
        [sys.executable, "-c", "import fcntl, sys, time\nf = open(sys.argv[1], 'a')\nfcntl.flock(f, fcntl.LOCK_EX)\n"
         "print('held', flush=True)\ntime.sleep(60)", str(run_lock_file(store_copy, LIVE))],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        code, findings, _ = _check(store_copy, "--repair", "--wait", "0.2", capsys=capsys)
    finally:
        holder.kill()
        holder.wait()
    assert code == 1
    got = {f["code"]: f for f in findings}
    assert set(got) == {"not_a_run_folder", "run_busy"}
    assert got["not_a_run_folder"]["path"] == str(foreign) and foreign.is_dir()  # never deleted
    assert got["not_a_run_folder"]["repair"] == "none: move it out of the store"
    assert got["run_busy"]["run"] == LIVE and got["run_busy"]["problem"].startswith("not checked: ")
    assert not any(f["repaired"] for f in findings)
    assert _check(store_copy, LIVE, capsys=capsys)[:2] == (0, [])  # the writer gone: clean


def test_every_finding_code_has_a_test() -> None:
    """Each code ``stabscope check --json`` can write (local and object store) is asserted in some test."""
    from ingest.store import check_findings, check_remote

    codes = {
        value
        for module in (check_findings, check_remote)
        for key, value in vars(module).items()
        if key.isupper() and isinstance(value, str) and re.fullmatch(r"[a-z]+(_[a-z]+)+", value)
        and key == value.upper()
    }  # fmt: skip
    assert len(codes) >= 19, sorted(codes)
    tests = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py") if p.name != Path(__file__).name)
    mine = Path(__file__).read_text().split("def test_every_finding_code_has_a_test")[0]
    untested = sorted(c for c in codes if f'"{c}"' not in tests + mine)
    assert not untested, f"finding codes no test asserts: {untested}"
