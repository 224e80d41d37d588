"""The ``|``-field plan of the text-log engine (textlog_pipes.Plan) against the regex engine it shortcuts.

Every test that compares reads the same file twice: with plans (the default) and with plans turned
off, so only the skeleton regexes run; the two must agree on every row, skipped line and event.
"""

from __future__ import annotations

import os
import random
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import ingest.formats.textlog_engine as engine
import ingest.formats.textlog_patterns as patterns
import ingest.formats.textlog_pipes as pipes
from ingest.errors import StabScopeError
from ingest.formats import read_log
from ingest.formats._common import LogBuilder, iter_line_chunks, iter_whole_lines
from ingest.formats.log_rows import Piece, one_metric
from ingest.formats.megatron import MegatronDeepSpeedReader, MegatronReader
from ingest.formats.numbers import utf8_or_null

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"


def _read(path: Path, fmt: str, *, plans: bool, chunk_bytes: int | None = None) -> Any:
    reader = {"megatron": MegatronReader, "megatron_deepspeed": MegatronDeepSpeedReader}[fmt]()
    if chunk_bytes is not None:
        reader.chunk_bytes = chunk_bytes
    original = patterns.plan_for
    if not plans:
        patterns.plan_for = lambda *args: None  # type: ignore[assignment]
    try:
        return reader.read([path])
    finally:
        patterns.plan_for = original  # type: ignore[assignment]


def _same(a: Any, b: Any) -> None:
    key = ["metric", "rank", "step"]
    ta, tb = (
        _plain_names(t.table).sort_by([(k, "ascending") for k in key]) for t in (a, b)
    )  # Arrow sorts no dictionary column
    assert ta.column_names == tb.column_names
    for name in ta.column_names:
        x, y = ta.column(name).to_pylist(), tb.column(name).to_pylist()
        if name in ("value", "wall_time"):
            np.testing.assert_array_equal(np.array(x, dtype=float), np.array(y, dtype=float), err_msg=name)
        else:
            assert x == y, name
    assert a.skipped == b.skipped
    assert a.skipped_examples == b.skipped_examples
    assert [(e.step, e.kind, e.detail) for e in a.events] == [(e.step, e.kind, e.detail) for e in b.events]
    assert a.meta == b.meta


def _plain_names(table: pa.Table) -> pa.Table:
    """A read_log table with its metric column as plain strings."""
    index = table.schema.get_field_index("metric")
    return table.set_column(index, "metric", table.column("metric").cast(pa.string()))


def _claimed(path: Path, fmt: str, chunk_bytes: int | None = None) -> int:
    """Lines the plans took (so a comparison is not vacuous)."""
    taken = 0
    original = engine.EngineState._match_plan

    def counting(self: Any, *args: Any) -> Any:
        nonlocal taken
        block = original(self, *args)
        taken += 0 if block is None else len(block.rows)
        return block

    engine.EngineState._match_plan = counting  # type: ignore[method-assign]
    try:
        _read(path, fmt, plans=True, chunk_bytes=chunk_bytes)
    finally:
        engine.EngineState._match_plan = original  # type: ignore[method-assign]
    return taken


VALUES = ["7.399E+00", "nan", "-nan", "inf", "-inf", "1,234", "12ms", "", "1 2", "0.5", "+3", ".25", "NaN", "1e5", "x"]


def _iteration(rng: random.Random, step: int, total: int) -> str:
    loss = rng.choice(VALUES) if rng.random() < 0.08 else f"{rng.uniform(1, 10):.6E}"
    sep = " | " if rng.random() > 0.05 else "  |  "
    lead = rng.choice([" ", " ", " ", "", "[2024-06-14 11:00:10] "])
    fields = [
        f"consumed samples: {step * 512}",
        f"elapsed time per iteration (ms): {rng.uniform(700, 900):.1f}",
        f"learning rate: {rng.uniform(0, 1e-3):.6E}",
        "global batch size: 512",
        f"lm loss: {loss}",
        "loss scale: 1.0",
        f"grad norm: {rng.choice(['0.800', '1.5', 'inf', 'nan'])}",
        f"number of skipped iterations: {rng.choice([0, 0, 0, 1])}",
        "number of nan iterations: 0",
    ]
    if rng.random() < 0.03:
        fields.insert(2, "throughput per GPU (TFLOP/s/GPU): 300.5")
    if rng.random() < 0.03:
        fields.pop(rng.randrange(len(fields)))
    if rng.random() < 0.02:
        fields[3] = "global  batch size:512"
    end = rng.choice([" |", " |", " |", " |  ", " |\r", "", " | extra"])
    return f"{lead}iteration {step:>8d}/ {total:>8d}{sep}" + sep.join(fields) + end


def _noise(rng: random.Random, step: int) -> str:
    return rng.choice(
        [
            f" [Rank 0] (after {step} iterations) memory (MB) | allocated: 1024.5 | max allocated: 2048.0 | "
            "reserved: 4096.0 | max reserved: 4096.0",
            f" validation loss at iteration {step} | lm loss value: 7.9 | lm loss PPL: 2697.282 | ",
            "a | b | c | d | e | f | g | h | i | j | k",
            "| | | | | | | | | |",
            "",
            "   ",
            "saving checkpoint at iteration 100 | 0.5 s",
            f" iteration {step}/ 100 | lm loss | grad norm: 1 |",
            "\tkwargs | {'a': 1}",
        ]
    )


def _write_log(path: Path, seed: int, n: int = 3000) -> None:
    rng = random.Random(seed)
    lines: list[str] = []
    step = 1
    for _ in range(n):
        if rng.random() < 0.1:
            lines.append(_noise(rng, step))
            continue
        lines.append(_iteration(rng, step, 500000))
        step += 1
        if rng.random() < 0.003:
            step = max(1, step - rng.randrange(1, 50))  # a restart re-logs steps
    path.write_text("\n".join(lines) + "\n", newline="")


@pytest.fixture(params=["c", "arrow"])
def field_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The plan's fields checked by the C extension (``_fields.c``) or by Arrow's kernels."""
    if request.param == "c" and pipes._fields is None:
        if os.environ.get("CI"):
            pytest.fail("ingest.formats._fields was not built: `pip install -e .` needs a C compiler")
        pytest.skip("ingest.formats._fields not built (no C compiler at install time)")
    if request.param == "arrow":
        monkeypatch.setattr(pipes, "_fields", None)
    return str(request.param)


# every seed through the C pass; the Arrow path (the one kept for installs without a compiler) on
# three, which covers both chunkings at a third of the time
@pytest.mark.parametrize(
    ("field_engine", "seed"),
    [("c", s) for s in range(6)] + [("arrow", s) for s in (0, 2, 3)],
    indirect=["field_engine"],
)
def test_plan_equals_the_regex_engine_on_varied_lines(tmp_path: Path, seed: int, field_engine: str) -> None:
    path = tmp_path / "train.log"
    _write_log(path, seed)
    chunk = [None, 4096, 65536][seed % 3]
    fast = _read(path, "megatron", plans=True, chunk_bytes=chunk)
    slow = _read(path, "megatron", plans=False, chunk_bytes=chunk)
    _same(fast, slow)
    assert fast.table.num_rows > 10000
    assert _claimed(path, "megatron", chunk) > 1500


@pytest.mark.parametrize("name", ["megatron_lm_restart.log", "megatron_deepspeed.log"])
def test_plan_equals_the_regex_engine_on_fixtures(name: str, field_engine: str) -> None:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"no fixture {name}")
    fmt = "megatron_deepspeed" if "deepspeed" in name else "megatron"
    for chunk in (None, 97, 1000):
        _same(_read(path, fmt, plans=True, chunk_bytes=chunk), _read(path, fmt, plans=False, chunk_bytes=chunk))


def test_plan_known_answers_nan_units_and_fallbacks(tmp_path: Path, field_engine: str) -> None:
    head = " iteration {:>8d}/      100 | consumed samples: {} | elapsed time per iteration (ms): {} | lm loss: {} |"
    rows = [(1, 512, "1500.0", "7.5"), (2, 1024, "1,500.5", "nan"), (3, 1536, "1600.0", "inf"), (4, 2048, "", "7.0")]
    rows += [(s, s * 512, "1000.0", f"{8 - s / 10000:.4f}") for s in range(5, 3000)]
    path = tmp_path / "train.log"
    path.write_text("\n".join(head.format(*r) for r in rows) + "\n")
    parsed = read_log([path], format="megatron")
    steps, loss = parsed.series("loss")
    assert steps[:5].tolist() == [1, 2, 3, 4, 5]
    assert loss[0] == 7.5 and np.isnan(loss[1]) and np.isinf(loss[2]) and loss[3] == 7.0
    steps, secs = parsed.series("step_time_s")
    assert steps[:4].tolist() == [1, 2, 3, 5]  # step 4 prints no value for it
    assert secs[:3].tolist() == pytest.approx([1.5, 1.5005, 1.6])  # "1,500.5": thousands separator
    assert parsed.meta.get("total_steps") == 100
    assert parsed.skipped == 0
    _same(parsed, _read(path, "megatron", plans=False))
    assert _claimed(path, "megatron") >= 2000


def test_ends_with_pipe() -> None:
    assert pipes.ends_with_pipe(r"iteration[ \t]+(?P<step>[0-9]+)[ \t]*\|")
    assert pipes.ends_with_pipe(r"(?:a|b)[^|\n]*\|")
    assert not pipes.ends_with_pipe(r"a|b\|")  # top-level alternative: may end anywhere
    assert not pipes.ends_with_pipe(r"a\\|")  # an escaped backslash, then an alternative
    assert not pipes.ends_with_pipe(r"a[|]")
    assert not pipes.ends_with_pipe(r"a\|[ \t]*")


def _random_pipe_text(seed: int, n_lines: int) -> bytes:
    rng = random.Random(seed)
    return b"".join(
        b"|".join(bytes(rng.choice(b"ab |:") for _ in range(rng.randrange(6))) for _ in range(rng.randrange(1, 5)))
        + b"\n"
        for _ in range(n_lines)
    )


def _assert_split_rebuilds(text: bytes) -> None:
    split = pipes.Split(text)
    lines = split.lines.to_pylist()
    assert b"".join(lines) == text
    assert len(lines) == text.count(b"\n")
    segments = split.segments.to_pylist()
    for i, line in enumerate(lines):
        k = int(split.first_segment[i])
        fields = segments[k : k + int(split.pipes_per_line[i]) + 1]
        assert b"".join(fields) == line
        assert int(split.pipes_per_line[i]) == line.count(b"|")


def test_split_fields_rebuild_every_line(field_engine: str) -> None:
    _assert_split_rebuilds(_random_pipe_text(3, 500))


def test_split_in_c_equals_numpy() -> None:
    """The C split (16 bytes at a time, then the tail) gives numpy's arrays on any bytes: NULs,
    runs of separators, text after the last newline, every length around the 16-byte steps."""
    fields = _c_fields()
    rng = random.Random(11)
    texts = [b"", b"\n", b"|", b"abc", b"|" * 40, b"\n" * 33, b"a|b\x00|c\nno newline|"]
    texts += [bytes(rng.choice(b"ab|\n\x00 ") for _ in range(n)) for n in range(0, 70)]
    texts += [_random_pipe_text(seed, 300) for seed in range(3)]
    for text in texts:
        for got, want in zip(pipes.split_c(text), pipes.split_numpy(text), strict=True):
            assert got.dtype == want.dtype and got.tolist() == want.tolist(), text
    n_segments, n_lines = fields.count_separators(b"a|b\nc|")
    assert (n_segments, n_lines) == (3, 1)
    wrong = (np.empty(n_segments, np.int32), np.empty(n_lines, np.int64), np.empty(n_lines, np.int64))
    with pytest.raises(ValueError, match="count_separators"):  # one segment short: never written past
        fields.split_fields(b"a|b\nc|", *wrong, np.empty(n_lines + 1, np.int32))


def test_split_reuses_its_masks_across_sizes_and_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipes, "_fields", None)  # the masks belong to the numpy split
    # A thread keeps its masks from chunk to chunk: a shorter chunk after a longer one must see only
    # its own bytes (stale separators past its end would add fields), and threads must not share them.
    texts = [_random_pipe_text(seed, n) for seed, n in ((4, 2000), (5, 30), (6, 700), (7, 1))]
    for text in texts:
        _assert_split_rebuilds(text)
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(_assert_split_rebuilds, texts * 3))


@pytest.mark.parametrize("chunk_bytes", [1, 7, 64, 1 << 20])
def test_line_chunks_are_whole_lines_with_their_numbers(tmp_path: Path, chunk_bytes: int) -> None:
    rng = random.Random(chunk_bytes)
    lines = [b"x" * rng.randrange(0, 200) for _ in range(300)]
    path = tmp_path / "a.log"
    path.write_bytes(b"\n".join(lines) + b"\nlast line without newline")
    got: list[bytes] = []
    for chunk, first_line in iter_line_chunks(path, LogBuilder([path]), chunk_bytes, first_chunk_bytes=chunk_bytes):
        assert chunk.endswith(b"\n")
        assert first_line == len(got) + 1
        got.extend(chunk[:-1].split(b"\n"))
    assert got == [*lines, b"last line without newline"]


@pytest.mark.parametrize("chunk_bytes", [1, 100, 1 << 16, 3 << 16])
@pytest.mark.parametrize("ending", [b"", b"\n", b"\r\n"])
def test_line_chunks_around_the_probe(tmp_path: Path, chunk_bytes: int, ending: bytes) -> None:
    """Chunks are read at their exact size up to a newline found by a 64 KiB probe: lines longer
    than the probe and the chunk, a newline as the last byte of a chunk, an empty file, a file
    whose last line has no newline; every byte comes back once, with ANSI colours removed."""
    lines = [b"a" * 70_000, b"", b"b" * (chunk_bytes - 1), b"\x1b[31mred\x1b[0m", b"c" * 200_000, b"tail"]
    path = tmp_path / "a.log"
    path.write_bytes(ending.join(lines) + ending if ending else b"\n".join(lines))
    builder = LogBuilder([path])
    chunks = list(iter_whole_lines(path, builder, chunk_bytes, first_chunk_bytes=chunk_bytes))
    assert all(c.endswith(b"\n") for c in chunks)
    sep = ending or b"\n"
    assert b"".join(chunks)[: -len(sep)].split(sep) == [*lines[:3], b"red", *lines[4:]]
    assert all(len(c) < chunk_bytes + 200_000 + 2 for c in chunks)  # at most one line past the size
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert list(iter_whole_lines(empty, LogBuilder([empty]), chunk_bytes)) == []


def test_shared_series_arrays_equal_the_general_path() -> None:
    rng = np.random.default_rng(0)
    for trial in range(60):
        pieces: list[Piece] = []
        seq, step = 0, 0
        for _ in range(rng.integers(1, 6)):
            n = int(rng.integers(1, 50))
            if rng.random() < 0.2:
                step = max(0, step - int(rng.integers(1, 30)))  # restart
            steps = step + np.cumsum(rng.integers(0 if rng.random() < 0.1 else 1, 3, n)).astype(np.int64)
            seqs: Any = seq if rng.random() < 0.5 else seq + np.arange(n, dtype=np.int64)
            if rng.random() < 0.1 and not isinstance(seqs, int):
                seqs = seqs[::-1].copy()  # out of file order
            wall = rng.random(n) if rng.random() < 0.3 else None
            pieces.append(Piece(-1, steps, rng.random(n), wall, 0, seqs))
            seq += n + int(rng.integers(0, 3))
            step = int(steps[-1]) + 1
        spans: dict[int, list[tuple[int, int]]] = {}
        general = one_metric(pieces, spans)
        shared: dict[Any, Any] = {}
        for _ in range(2):  # the second call reuses the shared arrays
            spans_fast: dict[int, list[tuple[int, int]]] = {}
            fast = one_metric(pieces, spans_fast, shared)
            assert spans_fast == spans
            for x, y in zip(fast, general, strict=True):
                if x is None or y is None:
                    assert x is None and y is None
                else:  # values may come as their pieces, in order
                    flat = np.concatenate(x) if isinstance(x, list) else x
                    np.testing.assert_array_equal(flat, y, err_msg=f"trial {trial}")


def test_plan_keeps_bytes_that_are_not_utf8(tmp_path: Path, field_engine: str) -> None:
    path = tmp_path / "train.log"
    body = "".join(
        f" iteration {i:>8d}/      100 | lm loss: {7 - i / 100:.3f} | grad norm: 1.0 |\n" for i in range(1, 80)
    ).encode()
    path.write_bytes(body + b" iteration       80/      100 | lm loss: 6.2 | grad norm: 1.0 |\xff\n")
    fast, slow = _read(path, "megatron", plans=True), _read(path, "megatron", plans=False)
    _same(fast, slow)
    assert pa.compute.max(fast.table["step"]).as_py() >= 79


def _read_with(path: Path, workers: int, chunk_bytes: int | None = None) -> Any:
    reader = MegatronReader()
    reader.workers = workers
    if chunk_bytes is not None:
        reader.chunk_bytes = chunk_bytes
    return reader.read([path])


@pytest.mark.slow  # out of the fast loop: multi-second (CLI processes, several threads); CI runs it
@pytest.mark.parametrize("seed", range(3))
def test_threaded_chunks_equal_one_thread(tmp_path: Path, seed: int) -> None:
    """Chunks matched on a pool (many small chunks, so many in flight at once and lines cut at
    every boundary) give the rows, order, skipped lines and events that one thread gives."""
    path = tmp_path / "train.log"
    _write_log(path, seed)
    one = _read_with(path, 1, 4096)
    for workers in (2, 4):
        many = _read_with(path, workers, 4096)
        _same(many, one)
        for name in one.table.column_names:  # same order too, not just the same rows
            x, y = many.table[name].to_pylist(), one.table[name].to_pylist()
            if name in ("value", "wall_time"):  # NaN == NaN here
                np.testing.assert_array_equal(np.array(x, dtype=float), np.array(y, dtype=float), err_msg=name)
            else:
                assert x == y, name
        assert many.skipped_examples == one.skipped_examples


def test_threaded_reports_a_bad_line_in_a_later_chunk_and_learns_late_layouts(tmp_path: Path) -> None:
    """A malformed line far from the first chunk keeps its own line number, and a layout first
    seen mid-file (learned while later chunks were already matched) still takes its lines."""
    head = " iteration {:>6d}/  10000 | consumed samples: {} | lm loss: {:.6E} | grad norm: 0.5 |"
    late = " iteration {:>6d}/  10000 | consumed samples: {} | lm loss: {:.6E} | loss scale: 2.0 |"
    lines = [head.format(s, s * 8, 10 - s / 1000) for s in range(1, 3001)]
    lines[2000] = "garbage | not | a | metric"
    lines += [late.format(s, s * 8, 7 - s / 1000) for s in range(3001, 4001)]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    for workers in (1, 2):
        out = _read_with(path, workers, 8192)
        assert out.skipped == 1
        assert out.skipped_examples == [(str(path), 2001, "not a metric line: garbage | not | a | metric")]
        metrics = out.table["metric"].to_pylist()
        steps = out.table["step"].to_pylist()
        assert [s for m, s in zip(metrics, steps, strict=True) if m == "loss_scale"] == list(range(3001, 4001))
        assert metrics.count("loss") == 3999
    _same(_read_with(path, 2, 8192), _read_with(path, 1, 8192))


@pytest.mark.parametrize("text", ["", "\n\n", " iteration 1/ 10 | lm loss: 2.5 |", "not a metric line\n"])
def test_threaded_tiny_and_empty_files(tmp_path: Path, text: str) -> None:
    path = tmp_path / "train.log"
    path.write_text(text)
    try:
        one = _read_with(path, 1)
    except StabScopeError as exc:  # no metrics: the same error either way
        with pytest.raises(StabScopeError, match="no metrics found"):
            _read_with(path, 2)
        assert "no metrics found" in str(exc)
        return
    _same(_read_with(path, 2), one)


def test_digits_alike() -> None:
    alike = pipes.digits_alike
    assert alike(r"[ \t]*(?:\[(?P<ts>[0-9]{4}-[0-9]{2})\][ \t]*)?iteration[ \t]+(?P<step>[0-9]+)[ \t]*\|")
    assert alike(r"(?P<step>\d+)\w*[^|\n]*.\|") and alike(r"(?:a|[^0-9])\b\|") and alike(r"\s*\S+\|")
    assert not alike(r"step 1(?P<step>[0-9]+)\|")  # a digit literal
    assert not alike(r"(?P<step>[1-9][0-9]*)\|")  # a class with some digits only
    assert not alike(r"[^5]\|") and not alike(r"(?P<a>[0-9])(?P=a)\|") and not alike(r"(?=[0-9])\|")
    assert not alike(r"([")  # not a regex


def _heads(rng: random.Random, n: int) -> list[bytes]:
    out: list[bytes] = []
    step = rng.choice([1, 95, 9990, 10**7 - 5])
    for _ in range(n):
        lead = rng.choice([b" ", b" ", b"", b"[2024-06-14 11:00:10] ", b"[2024-06-14T11:00:10.5] ", b"\t"])
        head = lead + b"iteration %*d/ %8d |" % (rng.choice([8, 8, 8, 3, 12]), step, rng.choice([100, 500000]))
        if rng.random() < 0.05:
            head = rng.choice([b" iteration x/ 10 |", b"iteration |", b" iteration 1/2/3 |", b"validation |", b"|"])
        out.append(head)
        step += rng.randrange(1, 3)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_head_by_shape_equals_the_regex(seed: int, field_engine: str) -> None:
    rng = random.Random(seed)
    heads = _heads(rng, rng.choice([70, 500, 3000]))
    tail = b" lm loss: 1.0 |\n"
    text = b"".join(h + tail for h in heads)
    split = pipes.Split(text)
    kind = MegatronReader.kinds[0]
    plan = pipes.Plan(2, "^(?:" + kind.prefix + ")$", ((b" lm loss: ", b" |"),), (), b"", True)
    assert pipes.digits_alike(plan.prefix_re2)
    lines = np.arange(len(heads), dtype=np.int64)
    head = split.segments.take(pa.array(split.first_segment[lines]))
    got = pipes.match_head(plan, split, lines)
    want = pipes.pc.extract_regex(head, plan.prefix_re2)
    assert got.is_valid().to_pylist() == want.is_valid().to_pylist()
    valid = want.is_valid()
    assert got.filter(valid).to_pylist() == want.filter(valid).to_pylist()
    assert [f.name for f in got.type] == [f.name for f in want.type]


@pytest.mark.parametrize("seed", range(3))
def test_table_built_on_threads_equals_one_thread(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    import ingest.formats._common as common

    def build(parallel_rows: int) -> Any:
        monkeypatch.setattr(common, "PARALLEL_BUILD_ROWS", parallel_rows)
        rng = np.random.default_rng(seed)
        builder = LogBuilder([])
        for piece in range(40):
            steps = np.arange(piece * 50, piece * 50 + 60) - rng.integers(0, 120) * (rng.random() < 0.2)
            seq = builder.reserve(steps.shape[0])
            for name in ("loss", "grad_norm", "lr", "tokens_per_s"):
                stream = int(rng.integers(0, 3))
                wall = None if name == "lr" else rng.random(steps.shape[0])
                builder.add(name, steps, rng.random(steps.shape[0]), seq=seq, stream=stream, wall_time=wall)
        builder.add("loss", [5, 6], [1.0, 2.0], rank=np.array([0, 1]), canonical=True)
        return builder.finish("test")

    one, threaded = build(1 << 62), build(0)
    assert one.table.equals(threaded.table)
    assert [c.num_chunks for c in one.table.columns] == [c.num_chunks for c in threaded.table.columns]
    assert [(e.step, e.kind, e.label, e.detail) for e in one.events] == [
        (e.step, e.kind, e.label, e.detail) for e in threaded.events
    ]
    assert any(e.kind == "rollback" for e in one.events)


def test_metric_column_is_one_name_per_chunk() -> None:
    """The long table's metric column: one chunk per metric, each a dictionary holding that one
    name over zero codes (what the store takes as a part without decoding), in name order."""
    parsed = read_log([FIXTURES / "megatron_lm_restart.log"], format="megatron")
    column = parsed.table.column("metric")
    assert column.type == pa.dictionary(pa.int32(), pa.string()) == parsed.table.schema.field("metric").type
    names = [chunk.dictionary.to_pylist() for chunk in column.chunks if len(chunk)]
    assert all(len(n) == 1 for n in names) and len(names) >= 3
    assert [n[0] for n in names] == sorted(n[0] for n in names)
    assert all(chunk.null_count == 0 and not any(chunk.indices.to_pylist()) for chunk in column.chunks)
    assert sorted(set(column.to_pylist())) == [n[0] for n in names]


def test_line_chunks_keep_a_line_that_grows_while_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live log: a chunk read ends at the end of the file in the middle of a line, and the writer
    finishes that line before the next read. The line comes back whole, not cut in two."""
    import os

    path = tmp_path / "live.log"
    path.write_bytes(b"first\nsecond half-writ")
    real_pread = os.pread
    reads: list[bytes] = []

    def pread(fd: int, n: int, offset: int) -> bytes:
        data = real_pread(fd, n, offset)
        reads.append(data)
        if data == b"second half-writ":  # the chunk itself, cut mid-line: the writer goes on now
            with path.open("ab") as f:
                f.write(b"ten\nthird\n")
        return data

    monkeypatch.setattr(os, "pread", pread)
    chunks = list(iter_whole_lines(path, LogBuilder([path]), chunk_bytes=4, first_chunk_bytes=4))
    assert b"second half-writ" in reads  # the case happened
    assert b"".join(chunks).split(b"\n") == [b"first", b"second half-written", b"third", b""]


# ------------------------------------------------------------------ the C extension on its own


def _c_fields() -> Any:
    if pipes._fields is None:
        if os.environ.get("CI"):
            pytest.fail("ingest.formats._fields was not built: `pip install -e .` needs a C compiler")
        pytest.skip("ingest.formats._fields not built (no C compiler at install time)")
    return pipes._fields


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def test_c_parse_plain_known_answers() -> None:
    fields = _c_fields()
    known = {b"512": 512.0, b"9.997900E+00": 9.9979, b"2.275200E-04": 2.2752e-4, b"-0": -0.0, b"0.0": 0.0}
    known |= {b"1e22": 1e22, b"1e-22": 1e-22, b"0e400": 0.0, b"007.50": 7.5, b"9007199254740992": 2.0**53}
    for text, want in known.items():
        assert _bits(fields.parse_plain(text)) == _bits(want), text
    # left to Arrow: not the plain grammar, or not exact in one IEEE operation
    for text in [b"", b"-", b".5", b"5.", b"+3", b"1,234", b"12ms", b"nan", b"inf", b"1e", b"1e+", b"0x10", b" 1"]:
        assert fields.parse_plain(text) is None, text
    for text in [b"1e23", b"1e-23", b"9007199254740993", b"12345678901234567890", b"1e12345"]:
        assert fields.parse_plain(text) is None, text


def test_c_parse_plain_is_correctly_rounded() -> None:
    """Every value the fast path takes is the double Python's (correctly rounded) parser gives."""
    fields = _c_fields()
    rng = random.Random(7)
    taken = 0
    for _ in range(20000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 19)))
        cut = rng.randint(1, len(digits))
        text = digits[:cut] + ("." + digits[cut:] if cut < len(digits) else "")
        if rng.random() < 0.7:
            text += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 30))
        text = ("-" if rng.random() < 0.3 else "") + text
        got = fields.parse_plain(text.encode())
        if got is not None:
            taken += 1
            assert _bits(got) == _bits(float(text)), text
    assert taken > 5000  # the comparison is not vacuous


def test_c_match_fields_rejects_what_does_not_fit() -> None:
    fields = _c_fields()
    split = pipes.Split(b" iteration 1/ 2 | lm loss: 7.5 |\n")
    ok, values, slow = np.empty(1, np.bool_), np.empty((1, 1)), np.empty((1, 1), np.bool_)
    args = (split.chunk, split.bounds, split.first_segment, 2, (b" lm loss: ",), (b" |",), (), b"")
    fields.match_fields(*args, ok, values, slow)
    assert ok.tolist() == [True] and values.tolist() == [[7.5]] and slow.tolist() == [[False]]
    with pytest.raises(ValueError, match="inconsistent"):
        fields.match_fields(*args[:3], 3, *args[4:], ok, values, slow)  # pipes do not fit the plan
    with pytest.raises(ValueError, match="inconsistent"):
        fields.match_fields(*args, ok, np.empty(0), slow)
    with pytest.raises(IndexError, match="outside the chunk"):
        fields.match_fields(*args[:2], np.array([5], np.int64), *args[3:], ok, values, slow)
    backwards = split.bounds.copy()
    backwards[1], backwards[2] = backwards[2], backwards[1]
    with pytest.raises(IndexError, match="out of order"):
        fields.match_fields(args[0], backwards, *args[2:], ok, values, slow)


def test_c_match_shape_known_answers() -> None:
    fields = _c_fields()
    text = b" it 12/ 30 |a\n it 99/ 00 |b\n it 1x/ 30 |c\n it 123/ 30 |d\n"
    split = pipes.Split(text)
    same = np.empty(4, np.bool_)
    fields.match_shape(split.chunk, split.bounds, split.first_segment, b" it 00/ 00 |", same)
    assert same.tolist() == [True, True, False, False]  # a letter for a digit; one byte wider
    with pytest.raises(IndexError, match="outside the chunk"):
        fields.match_shape(split.chunk, split.bounds, np.array([99], np.int64), b"x", same)
    with pytest.raises(ValueError, match="shorter"):
        fields.match_shape(split.chunk, split.bounds, split.first_segment, b"x", np.empty(1, np.bool_))


@pytest.mark.parametrize(("field_engine", "seed"), [("c", 0), ("c", 1), ("arrow", 0)], indirect=["field_engine"])
def test_plan_on_mangled_bytes_equals_the_regex_engine(tmp_path: Path, seed: int, field_engine: str) -> None:
    """Uploads are untrusted: a log with bytes flipped, dropped and inserted at random (separators,
    digits, NULs, signs, exponents) reads the same through the plan as through the regexes."""
    rng = random.Random(100 + seed)
    clean = tmp_path / "clean.log"
    _write_log(clean, seed, n=1000)
    data = bytearray(clean.read_bytes())
    alphabet = b"|\n0123456789.eE+- :\x00\xff\tx"
    for _ in range(len(data) // 200):
        at = rng.randrange(len(data))
        action = rng.random()
        if action < 0.4:
            data[at] = rng.choice(alphabet)
        elif action < 0.7:
            data.insert(at, rng.choice(alphabet))
        else:
            del data[at]
    path = tmp_path / "mangled.log"
    path.write_bytes(bytes(data))
    chunk = [None, 4096][seed % 2]
    _same(
        _read(path, "megatron", plans=True, chunk_bytes=chunk), _read(path, "megatron", plans=False, chunk_bytes=chunk)
    )
    assert _claimed(path, "megatron", chunk) > 100  # about 1 edit in 200 bytes: most lines are hit


def test_a_corrupted_byte_in_a_value_drops_that_value_only(tmp_path: Path, field_engine: str) -> None:
    rows = [f" iteration {i:>8d}/      100 | lm loss: {7 - i / 100:.3f} | grad norm: 1.5 |\n" for i in range(1, 80)]
    body = "".join(rows).encode().replace(b"grad norm: 1.5 |\n", b"grad norm: 1\xff5 |\n", 1)
    path = tmp_path / "train.log"
    path.write_bytes(body)
    parsed = read_log([path], format="megatron")
    steps, loss = parsed.series("loss")
    assert steps.tolist() == list(range(1, 80)) and loss[0] == 6.99
    steps, norm = parsed.series("grad_norm")
    assert steps.tolist() == list(range(2, 80)) and set(norm.tolist()) == {1.5}
    _same(parsed, _read(path, "megatron", plans=False))
    assert utf8_or_null(pa.array([b"1.5", b"1\xff5", None], pa.binary())).to_pylist() == ["1.5", None, None]


def test_a_layout_wider_than_the_c_pass_takes_reads_the_same(tmp_path: Path, field_engine: str) -> None:
    """Past _fields.c's 256 value fields the Arrow path takes the layout (no error out of the C call)."""
    width = pipes.C_MAX_FIELDS + 44
    body = "".join(
        f" iteration {i:>8d}/      100 | lm loss: {7 - i / 100:.3f} |"
        + "".join(f" k{j}: {i * j} |" for j in range(width))
        + "\n"
        for i in range(1, 70)
    )
    path = tmp_path / "wide.log"
    path.write_text(body)
    parsed = read_log([path], format="megatron")
    assert parsed.skipped == 0
    steps, loss = parsed.series("loss")
    assert steps.tolist() == list(range(1, 70)) and loss[0] == 6.99
    _same(parsed, _read(path, "megatron", plans=False))
    assert _claimed(path, "megatron") > 40  # through the plan (the first chunk learns the layout line by line)
