"""Issue #33, second round: hostile inputs and faults, each against the real part (the CLI as a
process, real files, a real full file system, Streamlit's own test runner) with the answer it must give.

The refusals of hostile files are measured in a child process (its own peak resident memory, VmHWM in
``/proc/self/status``): each must stay under 512 MB."""

from __future__ import annotations

import io
import json
import logging
import os
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.cli.output import terminal_safe
from ingest.cli.serve import MIN_TOKEN_CHARS
from ingest.errors import StabScopeError
from ingest.formats import read_log
from ingest.formats.tensorboard_events import masked_crc
from ingest.long_schema import LONG_SCHEMA
from ingest.services.run_analyses import open_analysed_store
from pages.parts.chart_style import plot_text
from pages.parts.charts import event_traces
from pages.parts.token_gate import failure_delay_s
from pages.parts.uploads import STAGING_PREFIX, remove_stale_staging, stage_uploads
from stab_core.runview import RunEvent
from tests.tfevents_writers import write_scalar_events

REPO = Path(__file__).resolve().parents[1]
PEAK_LIMIT_BYTES = 512 * 1024**2
HOSTILE_LABEL = "ckpt\x1b]0;pwned\x07\x1b[2J\x9b31m<b onmouseover=x>saved</b>"


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items() if k != "STABSCOPE_TOKEN"}
    return subprocess.run(
        [sys.executable, "-m", "ingest", *args], cwd=cwd, capture_output=True, env={**base, **(env or {})}, timeout=120
    )


def _small_run(store_root: Path, name: str = "tiny", events: tuple[RunEvent, ...] = ()) -> None:
    store = open_analysed_store(store_root)
    steps = np.arange(50, dtype=np.int64)
    table = pa.table(
        {
            "rank": pa.array(np.full(50, -1, np.int32)),
            "step": pa.array(steps),
            "metric": pa.array(["loss"] * 50),
            "value": pa.array(3.0 - steps / 100.0),
            "wall_time": pa.nulls(50, pa.float64()),
        }
    ).cast(LONG_SCHEMA)
    store.import_table(name, table, source="test", events=events)


# ----------------------------------------------------------------------------- 6: control characters


def test_terminal_safe_writes_controls_as_visible_escapes() -> None:
    assert terminal_safe("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert terminal_safe("bell\x07 nul\x00 csi\x9b del\x7f") == "bell\\x07 nul\\x00 csi\\x9b del\\x7f"
    assert terminal_safe("rtl\u202eevil") == "rtl\\u202eevil"
    assert terminal_safe("two\nlines") == "two\nlines"
    assert terminal_safe("two\nlines", keep_newlines=False) == "two\\x0alines"
    assert terminal_safe("plain ünïcode, tabs\tno") == "plain ünïcode, tabs\\x09no"


def test_show_prints_a_crafted_event_label_without_its_escape_sequences(tmp_path: Path) -> None:
    _small_run(tmp_path / "s", events=(RunEvent(10, "checkpoint", HOSTILE_LABEL + "\nforged line"),))
    done = _cli("show", "tiny", "--store", str(tmp_path / "s"))
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    event_lines = [line for line in out.splitlines() if "event:" in line]
    assert event_lines == [
        "     event: step 10: checkpoint ckpt\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m<b onmouseover=x>saved</b>"
        "\\x0aforged line"
    ]
    # --json was safe already: json.dumps escapes controls, and the label comes back whole
    shown = json.loads(_cli("show", "tiny", "--store", str(tmp_path / "s"), "--json").stdout)
    assert shown["events"][0]["label"] == HOSTILE_LABEL + "\nforged line"


def test_an_error_quoting_file_content_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    log = tmp_path / "evil.log"
    log.write_bytes(b"\x1b]0;owned\x07\x1b[2Jnot a log line at all\n" * 3)
    done = _cli("import", str(log), "--store", str(tmp_path / "s"))
    assert done.returncode == 2
    err = done.stderr.decode()
    assert "\x1b" not in err and "\x07" not in err
    assert "\\x1b]0;owned\\x07" in err and err.count("\n") == 1  # one paragraph


def test_chart_text_from_the_data_is_html_escaped() -> None:
    assert plot_text("<b>x</b> & <a href='javascript:alert(1)'>") == (
        "&lt;b&gt;x&lt;/b&gt; &amp; &lt;a href='javascript:alert(1)'&gt;"
    )
    (trace,) = event_traces([RunEvent(5, "<i>kind</i>", "<img src=x onerror=alert(1)>")], 0.0, 1.0, legend=True)
    assert trace.name == "&lt;i&gt;kind&lt;/i&gt;"
    assert trace.text[0] == "&lt;i&gt;kind&lt;/i&gt;: &lt;img src=x onerror=alert(1)&gt;"
    assert "<" not in "".join(trace.text)


# ----------------------------------------------------------------------------- 12: small ones


def test_export_dash_writes_csv_and_parquet_to_stdout(tmp_path: Path) -> None:
    _small_run(tmp_path / "s")
    done = _cli("export", "tiny", "--store", str(tmp_path / "s"), "-o", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "-").exists()
    lines = done.stdout.decode().splitlines()
    assert lines[0] == "step,rank,metric,value,wall_time" and len(lines) == 51
    assert lines[1].startswith("0,-1,loss,3.0")
    assert b"wrote 50 rows to standard output" in done.stderr
    done = _cli("export", "tiny", "--store", str(tmp_path / "s"), "--format", "parquet", "-o", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = pq.read_table(io.BytesIO(done.stdout))
    assert list(tmp_path.iterdir()) == [tmp_path / "s"]  # no file named "-", no staging left
    assert table.num_rows == 50 and table.column("value").to_pylist()[:2] == [3.0, 2.99]


@pytest.fixture
def full_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs, filled up to a few hundred bytes (root only: skipped elsewhere)."""
    mount_point = tmp_path / "full"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tiny tmpfs to fill up (needs root): {done.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


def test_export_to_a_full_disk_says_so_in_one_paragraph(tmp_path: Path, full_filesystem: Path) -> None:
    store = tmp_path / "s"
    store_obj = open_analysed_store(store)
    n = 20_000  # ~1 MB of CSV: far more than the 64 KiB file system holds
    table = pa.table(
        {
            "rank": pa.array(np.full(n, -1, np.int32)),
            "step": pa.array(np.arange(n, dtype=np.int64)),
            "metric": pa.array(["loss"] * n),
            "value": pa.array(np.linspace(3, 1, n)),
            "wall_time": pa.nulls(n, pa.float64()),
        }
    ).cast(LONG_SCHEMA)
    store_obj.import_table("big", table, source="test")
    target = full_filesystem / "big.csv"
    done = _cli("export", "big", "--store", str(store), "-o", str(target))
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"cannot write the export of run 'big' to {target}" in err
    assert "No space left on device" in err and "MiB are free there" in err
    assert list(full_filesystem.iterdir()) == []  # no half-written file left behind


def test_a_nul_byte_in_a_csv_header_is_located(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"step,lo\x00ss\n1,2\n2,3\n")
    with pytest.raises(StabScopeError) as caught:
        read_log([path], format="csv_wide")
    text = str(caught.value)
    assert "line 1" in text and "NUL byte at column 8" in text and str(path) in text


def test_stale_upload_staging_folders_are_removed_at_the_next_upload(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    stale, fresh = temp / f"{STAGING_PREFIX}old", temp / f"{STAGING_PREFIX}new"
    for folder in (stale, fresh):
        folder.mkdir()
        (folder / "log.jsonl").write_text("{}\n")
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    other = temp / "unrelated"
    other.mkdir()
    os.utime(other, (two_hours_ago, two_hours_ago))
    link = temp / f"{STAGING_PREFIX}link"
    link.symlink_to(other)
    assert remove_stale_staging(temp) == [stale]
    assert not stale.exists() and fresh.exists() and other.exists() and link.is_symlink()
    # stage_uploads does it in the real temporary directory
    real_stale = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX))
    os.utime(real_stale, (two_hours_ago, two_hours_ago))
    paths = stage_uploads([("a.jsonl", b"{}\n")])
    try:
        assert not real_stale.exists() and paths[0].exists()
    finally:
        import shutil

        shutil.rmtree(paths[0].parent)


# ----------------------------------------------------------------------------- 5: tokens


@pytest.mark.parametrize("how", ["--token", "--token-file", "env"])
def test_serve_refuses_a_token_shorter_than_16_characters(tmp_path: Path, how: str) -> None:
    short = "x" * (MIN_TOKEN_CHARS - 1)
    token_file = tmp_path / "token"
    token_file.write_text(short + "\n")
    token_file.chmod(0o600)
    args = {"--token": ["--token", short], "--token-file": ["--token-file", str(token_file)], "env": []}[how]
    env = {"STABSCOPE_TOKEN": short} if how == "env" else {}
    done = _cli("serve", "--store", str(tmp_path / "s"), "--port", "1", *args, env=env)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert f"has {MIN_TOKEN_CHARS - 1} character(s); at least {MIN_TOKEN_CHARS} are needed" in err
    assert "secrets.token_urlsafe" in err and err.count("\n") == 1


def test_the_gate_and_the_cli_want_the_same_token_length() -> None:
    from pages.parts import token_gate

    assert token_gate.MIN_TOKEN_CHARS == MIN_TOKEN_CHARS == 16


def test_wrong_token_delays_grow_and_are_capped() -> None:
    assert [failure_delay_s(n) for n in range(1, 9)] == [0.0, 0.0, 0.0, 0.5, 1.0, 2.0, 4.0, 4.0]


def _gate_script() -> None:
    import streamlit as st

    from pages.parts.token_gate import ask_for_token, session_unlocked

    if not session_unlocked():
        ask_for_token()
    st.write("the runs")


def test_the_gate_logs_and_slows_wrong_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1 import AppTest

    token = "a-long-enough-token-0123"
    monkeypatch.setenv("STABSCOPE_TOKEN", token)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("pages.parts.token_gate").addHandler(handler)
    try:
        at = AppTest.from_function(_gate_script, default_timeout=30).run()
        took = []
        for guess in range(5):
            at.text_input[0].input(f"guess-{guess}")
            start = time.monotonic()
            at = at.button[0].click().run()
            took.append(time.monotonic() - start)
        assert not at.exception and "the runs" not in str(at.markdown)
        assert max(took[:3]) < 0.5 and took[3] >= 0.5 and took[4] >= 1.0
        messages = [r.getMessage() for r in records]
        assert len(messages) == 5 and all("wrong access token (in the form)" in m for m in messages)
        assert "failure 5 of this session; answered after 1 s" in messages[-1]
        assert not any("guess-" in m or token in m for m in messages)  # no token value is logged
        at.text_input[0].input(token)
        at = at.button[0].click().run()
        assert "the runs" in [m.value for m in at.markdown]
    finally:
        logging.getLogger("pages.parts.token_gate").removeHandler(handler)


def test_the_gate_stays_closed_on_a_short_server_token(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("STABSCOPE_TOKEN", "short")
    at = AppTest.from_function(_gate_script, default_timeout=30).run()
    assert not at.exception and not at.text_input
    assert len(at.error) == 1 and "has 5 character(s); at least 16 are needed" in at.error[0].value
    assert "the runs" not in [m.value for m in at.markdown]


# ----------------------------------------------------------------------------- 10: TensorBoard framing


def test_a_huge_record_length_with_a_valid_crc_resynchronises(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1.h"
    n = 25_000
    # values that change over the run: a field with one value on every record is a setting (import report
    # "moved"), not a series, and this test counts series rows
    values = np.ones((n, 4)) + (np.arange(n) % 7)[:, None]
    write_scalar_events(path, ["loss", "grad_norm", "lr", "x"], np.arange(n), values)
    data = bytearray(path.read_bytes())
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        pos += 16 + struct.unpack_from("<Q", data, pos)[0]
    at = offsets[201]
    header = struct.pack("<Q", 1 << 30)  # 1 GiB, with the CRC of that length: the framing trusts it
    data[at : at + 8] = header
    data[at + 8 : at + 12] = struct.pack("<I", masked_crc(header))
    path.write_bytes(bytes(data))
    parsed = read_log([path])
    assert parsed.table.num_rows == 4 * n - 1  # the one record whose length was replaced
    assert parsed.skipped == 1
    _, where, reason = parsed.skipped_examples[0]
    assert where == at and "record length 1,073,741,824 exceeds the" in reason and "truncated" not in reason


# ----------------------------------------------------------------------------- 11: memory


def _peak_of_refusal(code: str) -> tuple[str, int]:
    """Run ``code`` (it prints its result) in a child; its output and peak resident bytes."""
    script = textwrap.dedent(code) + textwrap.dedent(
        """
        # VmHWM, the peak of this process's own memory: getrusage's ru_maxrss keeps the peak of the
        # process that forked it across exec, so a child of a large pytest worker reported the worker's
        hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
        print("PEAK", int(hwm.split()[1]) * 1024)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out, peak_line = done.stdout.rsplit("PEAK ", 1)
    return out, int(peak_line)


def test_a_parquet_decompression_bomb_is_refused_before_decoding(tmp_path: Path) -> None:
    path = tmp_path / "bomb.parquet"
    chunk = pa.table(
        {
            "step": pa.array(np.zeros(1_000_000, np.int64)),
            "metric": pa.array(["loss"] * 1_000_000),
            "value": pa.array(np.zeros(1_000_000)),
        }
    )
    with pq.ParquetWriter(path, chunk.schema, compression="zstd") as writer:
        for _ in range(50):  # 50 M rows in a file of well under a megabyte
            writer.write_table(chunk, row_group_size=10_000_000)
    assert path.stat().st_size < 1_000_000
    out, peak = _peak_of_refusal(
        f"""
        from pathlib import Path
        from ingest.errors import StabScopeError
        from ingest.formats import read_log
        try:
            read_log([Path({str(path)!r})])
            print("READ")
        except StabScopeError as exc:
            print("REFUSED", exc)
        """
    )
    assert out.startswith("REFUSED") and str(path) in out
    assert "50,000,000 rows" in out and "GiB of memory once read; the limit is 2.0 GiB" in out
    assert "STABSCOPE_PARQUET_MAX_BYTES" in out
    assert peak < PEAK_LIMIT_BYTES, f"peak {peak / 1024**2:.0f} MiB"


def test_parquet_budget_is_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "small.parquet"
    pq.write_table(pa.table({"step": np.arange(1000), "loss": np.linspace(3, 1, 1000)}), path)
    assert read_log([path]).table.num_rows == 1000
    monkeypatch.setenv("STABSCOPE_PARQUET_MAX_BYTES", "1e4")
    with pytest.raises(StabScopeError, match=r"the limit is 0\.0 MiB"):
        read_log([path])


DEEP = 200_000


def test_deeply_nested_json_lines_skip_the_line_without_crashing(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"step": 1, "loss": 1.0}\n' + '{"a": ' + "[" * DEEP + "]" * DEEP + "}\n" + '{"step": 2, "loss": 0.5}\n'
    )
    # before: Arrow's JSON parser recursed per level and the process died of a segmentation fault
    out, peak = _peak_of_refusal(
        f"""
        from pathlib import Path
        from ingest.formats import read_log
        parsed = read_log([Path({str(path)!r})])
        print(parsed.table.num_rows, parsed.skipped, parsed.skipped_examples[0][1], parsed.skipped_examples[0][2])
        """
    )
    assert out.split()[:3] == ["2", "1", "2"], out
    assert "nested too deeply" in out
    assert peak < PEAK_LIMIT_BYTES


def test_a_deeply_nested_trainer_state_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_text('{"global_step": 3,\n "log_history": ' + "[" * DEEP + "]" * DEEP + "}")
    out, peak = _peak_of_refusal(
        f"""
        from pathlib import Path
        from ingest.errors import StabScopeError
        from ingest.formats import read_log
        try:
            read_log([Path({str(path)!r})], format="hf_trainer_state")
        except StabScopeError as exc:
            print("REFUSED", exc)
        """
    )
    assert out.startswith(f"REFUSED {path}, line 2: brackets nest deeper than 100 levels from column 116"), out
    assert peak < PEAK_LIMIT_BYTES


@pytest.mark.parametrize("name", ["config.json", "config.yaml"])
def test_a_bad_config_beside_a_good_log_is_a_warning(tmp_path: Path, name: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n')
    (run / name).write_text(('{"a": ' if name.endswith("json") else "a: ") + "[" * DEEP + "]" * DEEP + "}\n"[:1])
    done = _cli("import", str(run), "--store", str(tmp_path / "s"), "--run", "withconfig")
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert done.stdout.decode().startswith("withconfig: 2 rows of loss")
    assert f"warning: config not used: {run / name}, line 1: brackets nest deeper than 100 levels" in err
    listed = json.loads(_cli("import", str(run), "--store", str(tmp_path / "s2"), "--json").stdout)
    assert listed["rows"] == 2 and len(listed["warnings"]) == 1


def test_peak_memory_probe_measures_something() -> None:
    """The probe above is a real measurement: a child that allocates 600 MB reports it."""
    out, peak = _peak_of_refusal("b = bytearray(600 * 1024**2); b[::4096] = b'x' * len(b[::4096]); print('ok')")
    assert out.strip() == "ok" and peak > 600 * 1024**2
    quiet, small = _peak_of_refusal("print('ok')")  # not the peak of the (large) process that started it
    assert quiet.strip() == "ok" and small < 200 * 1024**2
