"""TensorBoard event files: our TFRecord/protobuf reader against TensorBoard's own loader, tensor
scalars, rank folders, corrupt records, restarts, and files of different writers kept apart."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import numpy as np
import pytest

from ingest.errors import StabScopeError
from ingest.formats import detect, read_log
from ingest.formats.tensorboard_events import decode_event, masked_crc
from tests.tfevents_writers import encode_varint, record, scalar_event, summary_event, write_scalar_events

TAGS = ["loss", "grad_norm", "lr", "model/layer.0/act_rms"]


def _write(path: Path, steps: np.ndarray, *, tensor: bool = False, seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).normal(size=(steps.shape[0], len(TAGS))).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_scalar_events(path, TAGS, steps, values.astype(np.float64), tensor=tensor)
    return values.astype(np.float64)


def test_masked_crc_matches_tensorboards_writer() -> None:
    record_writer = pytest.importorskip("tensorboard.summary.writer.record_writer")
    assert masked_crc(b"") == 0xA282EAD8  # crc32c("") = 0, so the mask leaves the delta
    for data in (b"\x00" * 8, struct.pack("<Q", 46), b"brain.Event:2", bytes(range(256))):
        assert masked_crc(data) == record_writer.masked_crc32c(data)


def test_round_trip_agrees_with_tensorboards_own_loader(tmp_path: Path) -> None:
    loader_mod = pytest.importorskip("tensorboard.backend.event_processing.event_file_loader")
    path = tmp_path / "events.out.tfevents.1700000000.host"
    steps = np.arange(0, 300 * 7, 7)  # crosses the 1- to 2-byte step varint at 128
    values = _write(path, steps)
    ours = read_log([path])
    assert ours.format == "tensorboard"
    expected: dict[tuple[str, int], float] = {}
    for event in loader_mod.LegacyEventFileLoader(str(path)).Load():
        for v in event.summary.value:
            expected[(v.tag, event.step)] = float(v.simple_value)
    assert len(expected) == steps.shape[0] * len(TAGS)
    table = ours.table.to_pydict()
    got = {(m, s): v for m, s, v in zip(table["metric"], table["step"], table["value"], strict=True)}
    canonical = {"loss": "loss", "grad_norm": "grad_norm", "lr": "lr"}
    assert {(canonical.get(t, t), s) for t, s in expected} == set(got)
    for (tag, step), value in expected.items():
        assert got[(canonical.get(tag, tag), step)] == value
    # and the values are the float32s we wrote
    s, v = ours.series("grad_norm")
    assert np.array_equal(s, steps)
    assert np.array_equal(v, values[:, 1])
    wall = [w for m, w in zip(table["metric"], table["wall_time"], strict=True) if m == "loss"]
    assert wall[0] == pytest.approx(1.7e9) and wall[1] == pytest.approx(1.7e9 + 0.1)


def test_tf2_tensor_scalars_float_double_and_float_val(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1.host.v2"
    records = [record(scalar_event("epoch_loss", i, 1.0 / (i + 1), 100.0 + i, tensor=True)) for i in range(5)]
    # a DT_DOUBLE tensor in tensor_content, and a DT_FLOAT in float_val (packed)
    for step, tensor_msg in (
        (7, b"\x08\x02\x12\x00\x22\x08" + struct.pack("<d", 0.125)),
        (8, b"\x08\x01\x12\x00\x2a\x04" + struct.pack("<f", 0.25)),
        (9, b"\x08\x01\x12\x04\x12\x02\x08\x03\x22\x0c" + struct.pack("<3f", 1, 2, 3)),  # shape [3]: not scalar
    ):
        tag = b"epoch_loss"
        value = b"\x0a" + bytes([len(tag)]) + tag + b"\x42" + encode_varint(len(tensor_msg)) + tensor_msg
        records.append(record(summary_event(value, step, 200.0)))
    path.write_bytes(b"".join(records))
    parsed = read_log([path])
    steps, values = parsed.series("epoch_loss")
    assert steps.tolist() == [0, 1, 2, 3, 4, 7, 8]
    assert values[:5] == pytest.approx([1.0, 0.5, 1 / 3, 0.25, 0.2], rel=1e-6)
    assert values[5] == 0.125 and values[6] == 0.25


def test_rank_folders_and_sub_runs(tmp_path: Path) -> None:
    root = tmp_path / "tb"
    steps = np.arange(50)
    v0 = _write(root / "rank_0" / "events.out.tfevents.100.h", steps, seed=1)
    v3 = _write(root / "rank_3" / "events.out.tfevents.100.h", steps, seed=2)
    assert detect([root])[0][0] == "tensorboard"
    parsed = read_log([root])
    s, v = parsed.series("loss", rank=3)
    assert np.array_equal(s, steps) and np.array_equal(v, v3[:, 0])
    s, v = parsed.series("loss", rank=0)
    assert np.array_equal(v, v0[:, 0])
    assert parsed.meta["world_size"] == 2
    assert parsed.series("loss", rank=-1)[0].size == 0


def test_payload_crc_error_is_reported_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1.h"
    _write(path, np.arange(100))
    data = bytearray(path.read_bytes())
    # corrupt one byte inside the payload of the 10th scalar record (after the file_version record)
    offsets = _record_offsets(bytes(data))
    bad_offset = offsets[10]
    data[bad_offset + 12 + 3] ^= 0xFF
    path.write_bytes(bytes(data))
    parsed = read_log([path])
    assert parsed.skipped == 1
    file, where, reason = parsed.skipped_examples[0]
    assert file == str(path) and where == bad_offset
    assert "bad payload CRC" in reason and f"byte offset {bad_offset}" in reason
    assert parsed.table.num_rows == 100 * len(TAGS) - 1


def test_length_crc_error_resyncs_to_next_record(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1.h"
    _write(path, np.arange(100))
    data = bytearray(path.read_bytes())
    offsets = _record_offsets(bytes(data))
    data[offsets[200]] ^= 0x01  # the length field itself: framing is lost here
    path.write_bytes(bytes(data))
    parsed = read_log([path])
    assert parsed.table.num_rows == 100 * len(TAGS) - 1
    _, where, reason = parsed.skipped_examples[0]
    assert where == offsets[200] and "bad length CRC" in reason


def test_truncated_tail_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1.h"
    _write(path, np.arange(20))
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    parsed = read_log([path])
    assert parsed.table.num_rows == 20 * len(TAGS) - 1
    assert "truncated record" in parsed.skipped_examples[0][2]


def test_restart_in_a_second_file_is_a_rollback(tmp_path: Path) -> None:
    first = tmp_path / "run" / "events.out.tfevents.1000.h"
    second = tmp_path / "run" / "events.out.tfevents.2000.h"
    _write(first, np.arange(0, 120), seed=1)
    later = _write(second, np.arange(100, 200), seed=2)
    parsed = read_log([tmp_path / "run"])
    steps, values = parsed.series("loss")
    assert steps.tolist() == list(range(200))
    assert np.array_equal(values[100:], later[:, 0])
    rollbacks = [e for e in parsed.events if e.kind == "rollback"]
    assert [_span(e.detail) for e in rollbacks] == [{"replayed_from": 100, "replayed_to": 119}]


KERAS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs" / "tfevents_keras_mnist_toy"
# PROVENANCE.txt: train epoch_loss 0.2974 -> 0.0319 at steps 0..9; validation's 10 points at the same steps
KERAS_TRAIN_LOSS = [0.29735518, 0.13642873, 0.09945375, 0.07711282, 0.06438939]
KERAS_VAL_LOSS = [0.14290412, 0.10422502, 0.08732965, 0.08505525, 0.08215231]


def _keras_files() -> list[Path]:
    files = sorted(KERAS.glob("*/events.out.tfevents.*"))
    if len(files) != 2:
        pytest.skip("../shared absent: the real Keras tfevents files are not on this machine")
    return files


@pytest.mark.parametrize("how", ["folder", "two files", "flat copies"])
def test_keras_train_and_validation_stay_apart(tmp_path: Path, how: str) -> None:
    files = _keras_files()
    if how == "folder":
        parsed = read_log([KERAS])
    elif how == "two files":
        parsed = read_log(files)
    else:  # an upload: the files without their folders
        for f in files:
            (tmp_path / f.name).write_bytes(f.read_bytes())
        parsed = read_log(sorted(tmp_path.iterdir()))
    # the train writer's epoch_loss is the run's loss, the validation writer's its val_loss (#21 item 3)
    for name, first in (("loss", KERAS_TRAIN_LOSS), ("val_loss", KERAS_VAL_LOSS)):
        steps, values = parsed.series(name)
        assert steps.tolist() == list(range(10))
        np.testing.assert_allclose(values[:5], first, rtol=1e-6)
    assert parsed.series("validation/evaluation_loss_vs_iterations")[0].tolist() == list(range(1500, 15001, 1500))
    assert parsed.table.num_rows == 60  # 2 train tags + 4 validation tags, 10 points each
    assert parsed.events == []  # the validation file repeats no step of a stream: no rollback


def test_concurrent_writers_of_one_process_are_not_a_restart(tmp_path: Path) -> None:
    a = _write(tmp_path / "events.out.tfevents.1000.host.42.0", np.arange(20), seed=1)
    b = _write(tmp_path / "events.out.tfevents.1001.host.42.1", np.arange(20), seed=2)
    # the job restarts as pid 77 from step 10 and opens its two writers again
    restart = _write(tmp_path / "events.out.tfevents.2000.host.77.0", np.arange(10, 30), seed=3)
    _write(tmp_path / "events.out.tfevents.2000.host.77.1", np.arange(20, 30), seed=4)
    parsed = read_log(sorted(tmp_path.iterdir()))
    steps, values = parsed.series("writer-1/loss")
    assert steps.tolist() == list(range(30))
    np.testing.assert_array_equal(values[:10], a[:10, 0])
    np.testing.assert_array_equal(values[10:], restart[:, 0])
    steps, values = parsed.series("writer-2/loss")
    assert steps.tolist() == list(range(30))  # its restart re-logs nothing: no rollback of its own
    np.testing.assert_array_equal(values[:20], b[:, 0])
    assert [_span(e.detail) for e in parsed.events if e.kind == "rollback"] == [
        {"replayed_from": 10, "replayed_to": 19}
    ]


def test_file_names_that_say_the_split_keep_it(tmp_path: Path) -> None:
    train = _write(tmp_path / "train-events.out.tfevents.1000.h", np.arange(5), seed=1)
    val = _write(tmp_path / "val-events.out.tfevents.1000.h", np.arange(5), seed=2)
    parsed = read_log(sorted(tmp_path.iterdir()))
    # train/loss and validation/loss, which the aliases map onto the canonical names
    np.testing.assert_array_equal(parsed.series("loss")[1], train[:, 0])
    np.testing.assert_array_equal(parsed.series("val_loss")[1], val[:, 0])
    assert parsed.events == []


def test_not_an_event_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1.h"
    path.write_bytes(b"this is not a TFRecord file at all, just text\n" * 3)
    with pytest.raises(StabScopeError) as err:
        read_log([path], format="tensorboard")
    assert str(path) in str(err.value)


def test_decode_event_reports_slots() -> None:
    layout = decode_event(scalar_event("a/b", 300, 1.5, 10.0))
    assert layout.step_length == 2
    assert [(s.tag, s.dtype) for s in layout.slots] == [("a/b", "<f4")]


def _record_offsets(data: bytes) -> list[int]:
    offsets, pos = [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        offsets.append(pos)
        pos += 16 + length
    return offsets


@pytest.mark.parametrize("where", ["wall", "step", "value"])
def test_corruption_in_a_varying_byte_is_caught_by_the_vectorised_crc(tmp_path: Path, where: str) -> None:
    # records 1..200 share layouts: their CRCs are checked in bulk from the template's CRC
    path = tmp_path / "events.out.tfevents.1.h"
    _write(path, np.arange(1000, 1050))
    data = bytearray(path.read_bytes())
    offsets = _record_offsets(bytes(data))
    target = offsets[77]
    (length,) = struct.unpack_from("<Q", data, target)
    payload = target + 12
    position = {"wall": payload + 4, "step": payload + 10, "value": payload + length - 2}[where]
    data[position] ^= 0x04
    path.write_bytes(bytes(data))
    parsed = read_log([path])
    assert parsed.skipped == 1
    assert parsed.skipped_examples[0][1] == target and "bad payload CRC" in parsed.skipped_examples[0][2]
    assert parsed.table.num_rows == 50 * len(TAGS) - 1


def test_vectorised_crc_equals_the_crc32c_package() -> None:
    from ingest.formats.tensorboard_layouts import _payload_crcs_ok
    from ingest.formats.tensorboard_records import words_at

    rng = np.random.default_rng(5)
    records = [
        scalar_event("x/y", int(s), float(v), float(w))
        for s, v, w in zip(
            rng.integers(16384, 2_000_000, 300), rng.normal(size=300), rng.uniform(1e9, 2e9, 300), strict=True
        )
    ]
    records = [r for r in records if len(r) == len(records[0])]
    blob = b"".join(record(r) for r in records)
    starts = np.cumsum([0] + [16 + len(r) for r in records[:-1]]).astype(np.int64)
    layout = decode_event(records[0])
    ok = _payload_crcs_ok(words_at(blob + bytes(160)), starts + 12, layout, records[0])
    assert ok.all() and ok.shape[0] == len(records) > 100
    broken = bytearray(blob)
    broken[int(starts[50]) + 12 + 24] ^= 0x01  # inside the value (payload bytes 23..26)
    ok = _payload_crcs_ok(words_at(bytes(broken) + bytes(160)), starts + 12, layout, records[0])
    assert np.flatnonzero(~ok).tolist() == [50]


# --------------------------------------------------------------------------- the periodic-run fast path


def _double_tensor_event(tag: str, step: int, value: float, wall: float) -> bytes:
    tensor_msg = b"\x08\x02\x12\x00\x22\x08" + struct.pack("<d", value)
    tag_b = tag.encode()
    value_msg = b"\x0a" + encode_varint(len(tag_b)) + tag_b + b"\x42" + encode_varint(len(tensor_msg)) + tensor_msg
    return summary_event(value_msg, step, wall)


def _histogram_event(tag: str, step: int, wall: float, blob: bytes) -> bytes:
    tag_b = tag.encode()
    value_msg = b"\x0a" + encode_varint(len(tag_b)) + tag_b + b"\x2a" + encode_varint(len(blob)) + blob
    return summary_event(value_msg, step, wall)


def _varied_events(seed: int) -> bytes:
    """An event file as various writers lay it out: periodic rows of scalars (float, TF2 float and
    double tensors), step varints that grow mid-file, histograms in or out of the period, tags that
    skip steps, two tags of one length that swap places, corrupt bytes, a truncated tail."""
    rng = np.random.default_rng(seed)
    n_tags = int(rng.integers(1, 10))
    tags = [f"t{k}/" + "x" * int(rng.integers(1, 12)) for k in range(n_tags)]
    tags.append("swap/aa")
    tags.append("swap/bb")
    kinds = rng.integers(0, 3, len(tags))  # simple_value, float tensor, double tensor
    kinds[-1] = kinds[-2]  # the swapped tags keep the record lengths
    start = int(rng.choice([0, 1, 120, 16300, 2_097_100]))
    stride = int(rng.choice([1, 1, 3]))
    per_record_wall = bool(rng.integers(0, 2))
    histo_every = int(rng.choice([0, 1, 7]))
    skip_every = int(rng.choice([0, 0, 37]))
    records = [b"\x09" + struct.pack("<d", 1.7e9) + b"\x1a\x0dbrain.Event:2"]
    for i in range(int(rng.integers(150, 400))):
        step = start + stride * i
        wall = 1.7e9 + 0.37 * i
        row_tags = list(tags)
        if i % 5 == 3:
            row_tags[-2], row_tags[-1] = row_tags[-1], row_tags[-2]
        if skip_every and i % skip_every == 0:
            row_tags = row_tags[1:]
        for k, tag in enumerate(row_tags):
            w = wall + (rng.random() if per_record_wall else 0.0)
            value = float(rng.normal()) * 10.0 ** int(rng.integers(-3, 4))
            kind = kinds[tags.index(tag)]
            if kind == 2:
                records.append(_double_tensor_event(tag, step, value, w))
            else:
                records.append(scalar_event(tag, step, value, w, tensor=bool(kind)))
            if histo_every and i % histo_every == 0 and k == 0:
                records.append(_histogram_event("h/w", step, w, rng.bytes(24)))
    data = bytearray(b"".join(record(r) for r in records))
    for _ in range(int(rng.integers(0, 4))):
        data[int(rng.integers(0, len(data)))] ^= 1 << int(rng.integers(0, 8))
    if rng.integers(0, 3) == 0:
        data = data[: -int(rng.integers(1, 40))]
    return bytes(data)


def _parse(path: Path) -> tuple[object, ...]:
    parsed = read_log([path], format="tensorboard")
    table = parsed.table.to_pydict()
    return (table, parsed.skipped, parsed.skipped_examples, [(e.step, e.kind, e.detail) for e in parsed.events])


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    ta, tb_ = a[0], b[0]
    assert isinstance(ta, dict) and isinstance(tb_, dict)
    for column in ta:
        x = np.asarray(ta[column], dtype=object)
        y = np.asarray(tb_[column], dtype=object)
        if x.shape != y.shape:
            return False
        if column in ("value", "wall_time"):
            xf = np.array([np.nan if v is None else v for v in x], float)
            yf = np.array([np.nan if v is None else v for v in y], float)
            if not np.array_equal(xf, yf, equal_nan=True):
                return False
        elif not np.array_equal(x, y):
            return False
    return a[1:] == b[1:]


@pytest.mark.parametrize("seed", range(16))
def test_fast_path_equals_the_general_decoder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    from ingest.formats import tensorboard as tb
    from ingest.formats import tensorboard_records as tb_records

    path = tmp_path / "events.out.tfevents.1.h"
    path.write_bytes(_varied_events(seed))
    decoded = []
    original = tb_records._fast_run

    def counting(*args: object, **kwargs: object) -> object:
        result = original(*args, **kwargs)  # type: ignore[arg-type]
        if result is not None:
            decoded.append(result.records - sum(s.shape[0] for s, _, _ in result.general))
        return result

    def both() -> tuple[object, ...]:
        monkeypatch.setattr(tb_records, "_fast_run", counting)
        fast = _parse(path)
        monkeypatch.setattr(tb_records, "_fast_run", lambda *args, **kwargs: None)
        assert _same(fast, _parse(path))
        return fast

    whole = both()
    # small windows: records cut at window edges, windows grown for long records; then the read path
    monkeypatch.setattr(tb, "_BLOCK_BYTES", 4096)
    monkeypatch.setattr(tb, "_TAIL_BYTES", 1000)
    windowed = both()
    monkeypatch.setattr(mmap, "mmap", lambda *args, **kwargs: (_ for _ in ()).throw(OSError("no mmap")))
    read = both()
    # the same records and errors (reported block by block, so in another order)
    for other in (windowed, read):
        assert _same((*whole[:2], sorted(whole[2]), *whole[3:]), (*other[:2], sorted(other[2]), *other[3:]))  # type: ignore[call-overload]


def test_most_varied_files_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest.formats import tensorboard_records as tb_records

    fast = 0
    for seed in range(24):
        data = _varied_events(seed)
        frames = tb_records.frame_records(data + bytes(tb_records.PAD), len(data), final=True)
        fast += frames.count - frames.starts.shape[0] > frames.count // 2
    assert fast >= 12


def test_fast_path_takes_summary_writer_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest.formats import tensorboard as tb

    path = tmp_path / "events.out.tfevents.1.h"
    values = _write(path, np.arange(0, 20_000, 7))
    general: list[int] = []
    original = tb.decode_block

    def spy(data: bytes, starts: np.ndarray, lengths: np.ndarray) -> object:
        general.append(int(starts.shape[0]))
        return original(data, starts, lengths)

    monkeypatch.setattr(tb, "decode_block", spy)
    parsed = read_log([path])
    assert sum(general) < 3 * 64 + 10  # a walk per run (the step varint grows twice) and the header
    steps, v = parsed.series("loss")
    assert np.array_equal(steps, np.arange(0, 20_000, 7)) and np.array_equal(v, values[:, 0])


def test_distance_tables_are_crc32c_of_one_byte() -> None:
    import crc32c

    from ingest.formats.tensorboard_events import crc_byte_table, distance_tables

    tables = distance_tables(300)
    for d in (0, 1, 2, 7, 8, 63, 300):
        tail = bytes(d)
        zero = crc32c.crc32c(b"\x00" + tail)
        known = [crc32c.crc32c(bytes([b]) + tail) ^ zero for b in range(256)]
        assert tables[d].tolist() == known
        assert crc_byte_table(d).tolist() == known
    assert crc_byte_table(5000).tolist()[1] == crc32c.crc32c(b"\x01" + bytes(5000)) ^ crc32c.crc32c(bytes(5001))


def test_a_corrupt_length_inside_a_periodic_run_resyncs(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1.h"
    _write(path, np.arange(3000))
    data = bytearray(path.read_bytes())
    offsets = _record_offsets(bytes(data))
    for k in (5000, 9001):  # the length CRC, then the length field
        data[offsets[k] + (9 if k == 5000 else 0)] ^= 0x10
    path.write_bytes(bytes(data))
    parsed = read_log([path])
    assert parsed.table.num_rows == 3000 * len(TAGS) - 2
    assert [e[1] for e in parsed.skipped_examples] == [offsets[5000], offsets[9001]]
    assert all("bad length CRC" in e[2] for e in parsed.skipped_examples)


def _span(detail: dict) -> dict:
    """A rollback's replayed span (its ``abandoned`` rows are tests/test_abandoned_attempts.py's)."""
    return {k: v for k, v in detail.items() if k != "abandoned"}
