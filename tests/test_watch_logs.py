"""`stabscope watch` on the logs a job writes itself (#35): a real Megatron-DeepSpeed log appended in
uneven chunks (partial last lines), rotated once (``train.log`` -> ``train.log.1``), and a real Keras
TensorBoard event file written record by record (a torn record, a second event file), each while
``watch`` runs as a real process that is SIGKILLed once midway and started again. The watched run must
equal a one-shot ``stabscope import`` of the finished input, row for row, and the spool must hold the
source's bytes exactly once (no byte lost or doubled across the kill and the rotation).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from ingest.store import Store
from ingest.store.layout import spool_folder
from tests.fault_harness import CHILD_ENV, REPO, assert_same_rows, cli_argv, run_cli, seeded, sorted_rows
from tests.real_runs import REAL

MEGDS_LOG = REAL / "bigscience_megds_perf_log" / "meg_ds_3d_gpt2_perf_n16-ds-off.out"
KERAS_TB = REAL / "tfevents_keras_mnist_toy"
INTERVAL_S = "0.1"
CATCH_UP_S = 30.0
"""How long the watcher may take to show the finished input once the writing stops."""


def _needs(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"../shared absent: no real log at {path}")


def _start_watch(store: Path, source: Path, run: str, stderr_file: Path, *extra: str) -> subprocess.Popen[bytes]:
    with stderr_file.open("ab") as err:
        return subprocess.Popen(
            cli_argv(store, "watch", str(source), "--run", run, "--interval", INTERVAL_S, *extra),
            env=CHILD_ENV,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def _wait_for_run(store: Path, run: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the watcher has stored its first rows of ``run``."""
    deadline = time.monotonic() + CATCH_UP_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        if run in {r.name for r in Store(store).list_runs()}:  # its first generation committed, not only its row
            return
        time.sleep(0.05)
    raise AssertionError(f"watch stored nothing of {run}: {log.read_text()}")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def _finish(store: Path, run: str, want: object, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until ``run`` equals ``want`` (its sorted rows), stop the watcher as Ctrl-C does, and check
    the run is then marked finished with exactly those rows."""
    deadline = time.monotonic() + CATCH_UP_S
    status_seen = set()
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        s = Store(store)
        info = s.run_info(run)
        status_seen.add(info.status)
        # the catalog's count first: reading every row on each poll would slow the watcher it waits for
        if info.n_rows == want.num_rows and sorted_rows(s, run).equals(want):  # type: ignore[attr-defined]
            break
        time.sleep(0.25)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0, log.read_text()
    assert "live" in status_seen  # the Runs page shows a watched run as live while watch follows it
    final = Store(store)
    assert final.run_info(run).status == "finished"
    assert_same_rows(sorted_rows(final, run), want)  # type: ignore[arg-type]


def _reference(tmp_path: Path, *inputs: Path) -> object:
    """The rows of a one-shot ``stabscope import`` of ``inputs`` into a store of its own."""
    ref = tmp_path / "reference-store"
    done = run_cli(ref, "import", *map(str, inputs), "--run", "reference")
    assert done.returncode == 0, done.stderr
    return sorted_rows(Store(ref), "reference")


def test_watched_text_log_equals_its_import_across_a_kill_and_a_rotation(tmp_path: Path) -> None:
    _needs(MEGDS_LOG)
    data = MEGDS_LOG.read_bytes()
    store, logs = tmp_path / "store", tmp_path / "logs"
    logs.mkdir()
    live, stderr_log = logs / "train.log", tmp_path / "watch.stderr"
    rng = seeded(35)
    kill_at, rotate_at = int(len(data) * 0.6), int(len(data) * 0.8)  # metric lines begin at 45%
    rotate_at = data.index(b"\n", rotate_at) + 1  # a rotating logger starts its new file on a line
    live.write_bytes(b"")
    alerts = tmp_path / "alerts.jsonl"
    on_alert = ("--on-alert", f"cat >> {alerts}; echo >> {alerts}")  # each alert's JSON, one a line
    proc = _start_watch(store, live, "watched", stderr_log, *on_alert)
    killed = rotated = False
    pos = 0
    while pos < len(data):
        end = min(len(data), pos + rng.randint(100, 4000))  # uneven chunks: most end mid-line
        if not rotated and end > rotate_at:
            end = rotate_at
        with live.open("ab") as f:
            f.write(data[pos:end])
        pos = end
        if not killed and pos >= kill_at:
            _wait_for_run(store, "watched", proc, stderr_log)
            _kill(proc)
            killed = True
            with live.open("ab") as f:  # written while no watcher runs
                f.write(data[pos : pos + 1500])
            pos += 1500
            proc = _start_watch(store, live, "watched", stderr_log, *on_alert)
        if not rotated and pos == rotate_at:
            time.sleep(0.3)
            live.rename(logs / "train.log.1")
            live.write_bytes(b"")
            rotated = True
        time.sleep(0.02)
    want = _reference(tmp_path, MEGDS_LOG)
    _finish(store, "watched", want, proc, stderr_log)
    # every byte of the log copied once: the copies, oldest first, are the log
    copies = sorted((spool_folder(store, "watched") / "tree").iterdir(), key=lambda p: p.name, reverse=True)
    assert [p.name for p in copies] == ["train.log.1", "train.log"]
    assert b"".join(p.read_bytes() for p in copies) == data
    # alerts as for shards: this log's loss spikes and its clipping are passed to --on-alert
    fired = [json.loads(line) for line in alerts.read_text().splitlines() if line.strip()]
    assert fired and all(a["run"] == "watched" and a["alert"] and a["message"] for a in fired), fired
    info = Store(store).run_info("watched")
    assert info.rejected == Store(tmp_path / "reference-store").run_info("reference").rejected
    # deleting the run deletes the copy: watching the log again into the name reads it from its start
    Store(store).delete_run("watched")
    assert not spool_folder(store, "watched").exists()


def _records(path: Path) -> list[bytes]:
    """The TFRecords of an event file, each with its framing (length, CRCs), in file order."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        out.append(data[pos : pos + 16 + length])
        pos += 16 + length
    assert pos == len(data)
    return out


def test_watched_tensorboard_dir_equals_its_import_across_a_torn_record_a_kill_and_a_new_file(
    tmp_path: Path,
) -> None:
    _needs(KERAS_TB)
    (train_file,) = (KERAS_TB / "train").iterdir()
    (validation_file,) = (KERAS_TB / "validation").iterdir()
    records = _records(train_file)
    store, tb = tmp_path / "store", tmp_path / "tb"
    (tb / "train").mkdir(parents=True)
    (tb / "validation").mkdir()
    stderr_log = tmp_path / "watch.stderr"
    # started on the log dir before the job writes its first event file: what it holds decides
    proc = _start_watch(store, tb, "watched", stderr_log)
    time.sleep(0.5)
    shutil.copyfile(validation_file, tb / "validation" / validation_file.name)
    first = tb / "train" / train_file.name
    # the writer's next file, as TensorBoard names one opened later (its own version record first)
    second = tb / "train" / train_file.name.replace("1690483602", "1690483700")
    split = len(records) // 2
    first.write_bytes(records[0])
    for i, rec in enumerate(records[1:split], start=1):
        with first.open("ab") as f:
            if i == 10:  # a torn record: half of it for longer than a pass, then the rest
                f.write(rec[: len(rec) // 2])
                f.flush()
                time.sleep(0.4)
                f.write(rec[len(rec) // 2 :])
            else:
                f.write(rec)
        if i == split // 2:
            _wait_for_run(store, "watched", proc, stderr_log)
            _kill(proc)
            proc = _start_watch(store, tb, "watched", stderr_log)
        time.sleep(0.01)
    second.write_bytes(records[0])
    for rec in records[split:]:
        with second.open("ab") as f:
            f.write(rec)
        time.sleep(0.01)
    want = _reference(tmp_path, tb)
    _finish(store, "watched", want, proc, stderr_log)
    spool = spool_folder(store, "watched") / "tree" / "train"
    assert (spool / first.name).read_bytes() == first.read_bytes()
    assert (spool / second.name).read_bytes() == second.read_bytes()


def test_watch_refuses_a_path_that_does_not_exist_and_a_log_no_reader_knows(tmp_path: Path) -> None:
    store = tmp_path / "store"
    missing = run_cli(store, "watch", str(tmp_path / "nowhere.log"), "--run", "x", "--once")
    assert missing.returncode != 0
    assert "nowhere.log does not exist" in missing.stderr
    odd = tmp_path / "notes.log"
    odd.write_text("".join(f"today I tidied drawer {i}\n" for i in range(50)))
    unknown = run_cli(store, "watch", str(odd), "--run", "x", "--once")
    assert unknown.returncode != 0
    assert "format not recognised" in unknown.stderr and "--format" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    assert not Store(store).has_run("x")
    wrong = run_cli(store, "watch", str(odd), "--run", "x", "--format", "megatronn")
    assert wrong.returncode != 0 and "unknown format 'megatronn'" in wrong.stderr


LIGHTNING_CSV = REAL / "lightning_csv_slm_124m" / "metrics.csv"
LLAMAFACTORY_JSONL = REAL / "llamafactory_luojiu7b_cpt" / "trainer_log.jsonl"
TORCHTITAN_LOG = REAL / "torchtitan_qwen3_14b_run217" / "run.log"


def _per_rank_logs() -> dict[str, bytes]:
    """Two per-rank logs of torchrun's ``--tee`` layout: the real torchtitan log (rank 0's) and the same
    lines as rank 1 prints them."""
    rank0 = TORCHTITAN_LOG.read_bytes()
    return {"rank0.log": rank0, "rank1.log": rank0.replace(b"[rank0]:", b"[rank1]:")}


@pytest.mark.parametrize(
    ("source", "real"),
    [("metrics.csv", LIGHTNING_CSV), ("trainer_log.jsonl", LLAMAFACTORY_JSONL), ("ranks", TORCHTITAN_LOG)],
)
def test_a_csv_a_jsonl_file_and_a_per_rank_folder_watched_pass_by_pass_equal_their_import(
    tmp_path: Path, source: str, real: Path
) -> None:
    """In-process passes (``LogWatcher``) between uneven appends; from the fourth pass a second
    watcher (as a restarted process, or a second one started by mistake) takes every other pass."""
    _needs(real)
    from ingest.importing.importer import import_logs
    from ingest.live.watch_logs import LogWatcher
    from ingest.store import Store

    files = _per_rank_logs() if source == "ranks" else {source: real.read_bytes()}
    target = tmp_path / "src" / source
    folder = target if source == "ranks" else target.parent
    folder.mkdir(parents=True)
    for name in files:
        (folder / name).write_bytes(b"")
    store = Store(tmp_path / "store")
    first = LogWatcher(store, "watched", target)
    watcher, second = first, None
    rng = seeded(7)
    written = dict.fromkeys(files, 0)
    passes = 0
    while any(written[n] < len(data) for n, data in files.items()):
        for name, data in files.items():
            end = min(len(data), written[name] + rng.randint(50, max(100, len(data) // 12)))
            with (folder / name).open("ab") as f:
                f.write(data[written[name] : end])
            written[name] = end
        watcher.pass_once(status="live", wait_s=5)
        passes += 1
        if passes >= 4:
            second = second or LogWatcher(store, "watched", target)  # its state from the store
            watcher = second if watcher is first else first
    watcher.pass_once(status="live", wait_s=5)
    assert store.run_info("watched").status == "live"
    reference = Store(tmp_path / "reference")
    import_logs(reference, [target], run="reference")
    assert_same_rows(sorted_rows(store, "watched"), sorted_rows(reference, "reference"))
    assert store.run_info("watched").rejected == reference.run_info("reference").rejected
    if source == "ranks":
        assert store.run_info("watched").ranks == 2
    for name, data in files.items():  # each byte copied once, whichever watcher copied it
        assert (spool_folder(store.root, "watched") / "tree" / name).read_bytes() == data


def test_a_watched_log_is_live_on_the_runs_page_until_watch_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _needs(LIGHTNING_CSV)
    import threading

    from ingest.live.watch_logs import watch_logs
    from ingest.store import Store
    from tests.conftest import open_page

    lines = LIGHTNING_CSV.read_bytes().splitlines(keepends=True)
    log = tmp_path / "metrics.csv"
    log.write_bytes(b"".join(lines[:400]))
    store = Store(tmp_path / "store")
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    stop = threading.Event()
    passes: list[int] = []
    follower = threading.Thread(target=lambda: passes.append(watch_logs(store, "job", log, interval_s=0.1, stop=stop)))
    follower.start()
    try:
        deadline = time.monotonic() + CATCH_UP_S
        # listed (its first generation committed), as the page reads it: the catalog row comes first (has_run),
        # and a page opened between the two shows "no runs yet" (CI on db330ce, under load)
        while "job" not in {r.name for r in store.list_runs()} and time.monotonic() < deadline:
            time.sleep(0.05)
        at = open_page("runs").run()
        at.multiselect(key="runs_status").set_value(["live"]).run()
        assert list(at.dataframe(key="runs_table").value["name"]) == ["job"]
    finally:
        stop.set()
        follower.join(timeout=60)
    assert passes and passes[0] >= 1
    at = open_page("runs").run()
    at.multiselect(key="runs_status").set_value(["live"]).run()
    assert at.dataframe(key="runs_table").value.empty  # stopped: no longer live


HF_TRAINER_STATE = REAL / "hf_trainer_state_tinyllama_sft" / "trainer_state.json"


def test_a_file_written_whole_is_read_again_whole_and_a_half_written_one_waits(tmp_path: Path) -> None:
    """``trainer_state.json`` is rewritten at each save, not appended to: its copy is replaced, and a
    copy caught half written does not stop the watcher."""
    _needs(HF_TRAINER_STATE)
    from ingest.importing.importer import import_logs
    from ingest.live.watch_logs import LogWatcher
    from ingest.store import Store

    full = json.loads(HF_TRAINER_STATE.read_text())
    out = tmp_path / "out"
    out.mkdir()
    state = out / "trainer_state.json"
    early = {**full, "log_history": full["log_history"][: len(full["log_history"]) // 2]}
    state.write_text(json.dumps(early, indent=2))
    store = Store(tmp_path / "store")
    watcher = LogWatcher(store, "watched", out)
    assert watcher.pass_once(status="live", wait_s=5) > 0
    text = json.dumps(full, indent=2)
    state.write_text(text[: len(text) // 2])  # caught mid-write
    assert watcher.pass_once(status="live", wait_s=5) == 0
    assert "trainer_state.json" in watcher.waiting  # the reader's error, logged once, not raised
    state.write_text(text)
    assert watcher.pass_once(status="live", wait_s=5) > 0
    reference = Store(tmp_path / "reference")
    import_logs(reference, [out], run="reference")
    assert_same_rows(sorted_rows(store, "watched"), sorted_rows(reference, "reference"))


@pytest.mark.parametrize("step_offset", [0, 1 << 40], ids=["packed keys", "steps past 2**31: hash join"])
def test_new_or_changed_rows_are_new_keys_and_changed_values_nan_matching_nan(step_offset: int) -> None:
    import numpy as np
    import pyarrow as pa

    from ingest.live.new_rows import new_or_changed, rows_table

    def table(rows: list[tuple[str, int, int, float]]) -> pa.Table:
        metric, rank, step, value = zip(*rows, strict=True)
        return rows_table(
            pa.table(
                {
                    "metric": pa.array(metric).dictionary_encode(),
                    "rank": pa.array(rank, pa.int32()),
                    "step": pa.array([s + step_offset for s in step], pa.int64()),
                    "value": pa.array(value, pa.float64()),
                }
            )
        )

    nan = float("nan")
    held = table([("loss", -1, 1, 2.0), ("loss", -1, 2, nan), ("grad_norm", 0, 1, 1.0), ("lr", -1, 5, 1e-4)])
    held = pa.concat_tables([held, table([("lr", -1, 5, 2e-4)])])  # a key held twice (a repeated step)
    new = table(
        [
            ("loss", -1, 1, 2.0),  # held as is
            ("loss", -1, 2, nan),  # NaN matches NaN
            ("grad_norm", 0, 1, 1.5),  # changed value
            ("grad_norm", 1, 1, 1.0),  # another rank
            ("lr", -1, 5, 2e-4),  # one of the two values held
            ("lr", -1, 5, 3e-4),  # neither
            ("tokens", -1, 1, 8.0),  # a new metric
        ]
    )
    np.testing.assert_array_equal(new_or_changed(new, held), [2, 3, 5, 6])
    np.testing.assert_array_equal(new_or_changed(new, held.slice(0, 0)), np.arange(7))
