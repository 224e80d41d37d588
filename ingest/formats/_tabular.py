"""Shared input for the tabular formats (CSV, JSON Lines, Parquet): streamed Arrow batches turned into long
rows, one metric column at a time.

A cell that is empty/null means "not logged at this row" and produces no row; ``nan``/``inf`` (as numbers
or strings) are values and are kept."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as _pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from ingest.errors import StabScopeError
from ingest.formats._common import MAX_SKIPPED_EXAMPLES, LogBuilder
from ingest.formats.aliases import KeyMap, sanitise_name
from ingest.formats.csv_comments import leading_comments, without_comments
from ingest.formats.numbers import parse_numbers
from ingest.formats.raw_text import open_error
from ingest.formats.table_axes import group_lr_columns, is_axis_counter, run_lr_group
from stab_core.metrics import RUN_RANK

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays

_STEP_NAMES: Final = "step Step _step global_step trainer/global_step train/global_step iteration iter steps"
STEP_COLUMNS: Final = (*_STEP_NAMES.split(), "current_steps", "current_step")
"""Column names accepted as the step axis, most specific first."""
WALL_COLUMNS: Final = ("wall_time", "Wall time", "timestamp", "_timestamp", "time", "unix", "unix_time")
"""Column names read as wall-clock time (seconds since the epoch; ``unix``: a Unix time, docs/diagnosis.md, "Import:
settings and counters")."""

MAX_STEP: Final = 2.0**62
"""A step at or beyond this (``1e30`` in a damaged cell) is no step: an int64 cannot hold it."""
JSON_CHUNK_BYTES: Final = 64 * 1024 * 1024
"""JSON Lines are parsed by Arrow 64 MiB at a time (its per-call type inference is not free)."""


def find_column(names: Iterable[str], candidates: Iterable[str]) -> str | None:
    """The first of ``candidates`` present in ``names`` (exact, then case-insensitive)."""
    present = list(names)
    for c in candidates:
        if c in present:
            return c
    lower = {n.lower(): n for n in present}
    for c in candidates:
        if c.lower() in lower:
            return lower[c.lower()]
    return None


def csv_delimiter(head: bytes) -> str:
    """``\t`` for a tab-separated table (a header with tabs and no comma: ``step\tloss``), else ``,``."""
    first = head.split(b"\n", 1)[0]
    return "\t" if b"\t" in first and b"," not in first else ","


def csv_header(head: bytes) -> list[str] | None:
    """Column names of a CSV (or TSV) whose first bytes are ``head`` (None when it does not look like one);
    comment lines above the header are passed over (:mod:`ingest.formats.csv_comments`)."""
    text = (head := without_comments(head)).decode("utf-8-sig", errors="replace")
    first = text.split("\n", 1)[0].strip("\r")
    delimiter = csv_delimiter(head)
    if delimiter not in first or "\x00" in first:
        return None
    try:
        row = next(csv.reader([first], delimiter=delimiter))
    except (csv.Error, StopIteration):
        return None
    return [c.strip() for c in row]


def to_float(col: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(values float64, present bool)``: null = not logged; strings like ``"nan"`` are parsed."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr)), np.zeros(len(arr), dtype=bool)
    present = (
        np.ones(len(arr), dtype=bool)
        if arr.null_count == 0
        else np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    )
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        conv = parse_numbers(arr.cast(pa.string()))
        plain = conv.ok.copy()
        for _, with_unit in conv.units:  # "12.5ms" in a numeric column: not a bare number
            plain &= ~with_unit
        return conv.values, present & plain
    if pa.types.is_boolean(arr.type) or not (
        pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_decimal(arr.type)
    ):
        return np.zeros(len(arr)), np.zeros(len(arr), dtype=bool)
    floats = arr.cast(pa.float64(), safe=False) if arr.type != pa.float64() else arr
    if floats.null_count:
        floats = floats.fill_null(np.nan)
    return np.asarray(floats.to_numpy(zero_copy_only=False), dtype=np.float64), present


def add_wide(
    builder: LogBuilder,
    table: pa.Table,
    *,
    step_col: str,
    rank_col: str | None = None,
    wall_col: str | None = None,
    ignore: Iterable[str] = (),
    stream: int = 0,
    keymap: KeyMap | None = None,
    where: tuple[Path, int] | None = None,
    text_cells_are_errors: bool = False,
    counters_are_axes: bool = True,
) -> int:
    """Append every metric column of a wide ``table`` (one row per logged step) in row order; return the
    sequence number of its first row (row ``i`` has that number plus ``i``), for a value derived from the
    same rows (:func:`ingest.formats.run_loss.add_run_loss`) to count as those rows, not as more records.

    Rows without a step are skipped and counted (``where`` = file and the line of the table's
    first row, for the examples); so are text cells in metric columns when
    ``text_cells_are_errors`` (CSV, where every column is meant to be numeric; JSON objects may hold
    text fields that are not metrics).
    """
    steps_f, has_step = to_float(table[step_col])
    n = table.num_rows
    if n == 0:
        return builder.reserve(0)
    bad = ~has_step | ~np.isfinite(steps_f) | (np.abs(steps_f) >= MAX_STEP)
    if bad.any():
        first_bad = int(np.flatnonzero(bad)[0])
        if where is not None:
            builder.skip(where[0], where[1] + first_bad, f"row without a step in column {step_col!r}", int(bad.sum()))
        else:
            builder.skipped += int(bad.sum())
    steps = np.where(bad, -1, steps_f).astype(np.int64)
    ranks: Any = RUN_RANK
    if rank_col is not None:
        r, has_r = to_float(table[rank_col])
        ranks = np.where(has_r, r, RUN_RANK).astype(np.int32)
    wall = None
    if wall_col is not None:
        w, has_w = to_float(table[wall_col])
        wall = np.where(has_w, w, np.nan)
    first_seq = builder.reserve(n)
    seq: Any = None  # materialised only when a column is sparse
    any_bad = bool(bad.any())
    every_row_valued = False  # a dense column gives every row a value: no per-row bookkeeping
    valued = np.zeros(n, dtype=bool)
    axes = [c for c in table.column_names if counters_are_axes and is_axis_counter(c)]  # ingest.formats.table_axes
    skip = {step_col, rank_col, wall_col, *ignore, *axes}
    groups = group_lr_columns(table.column_names)
    run_lr = run_lr_group(groups, *zip(*(to_float(table[c]) for c in groups), strict=True)) if groups else None
    for name in table.column_names:
        if name in skip:
            continue
        column = table[name]
        values, present = to_float(column)
        if text_cells_are_errors and pa.types.is_string(column.type):
            unreadable = np.asarray(column.is_valid(), dtype=bool) & ~present & ~bad
            if unreadable.any():
                first = int(np.flatnonzero(unreadable)[0])
                reason = f"column {name!r}: {column[first].as_py()!r} is not a number"
                if where is not None:
                    builder.skip(where[0], where[1] + first, reason, int(unreadable.sum()))
                else:
                    builder.skipped += int(unreadable.sum())
        if any_bad:
            present &= ~bad
        dense = bool(present.all())
        if not dense and not present.any():
            continue
        metric, unit = (name, None)
        canonical = False
        if keymap is not None:
            mapped = keymap(name)
            if mapped is None:
                continue
            metric, unit = mapped
            canonical = True
        if name in groups:  # one param group is the run's lr, the others keep their own names
            metric, unit, canonical = ("lr" if name == run_lr else sanitise_name(name)), None, True
        if dense:  # every row logged this metric: share the step/rank/wall arrays, no copies
            every_row_valued = True
            builder.add(
                metric,
                steps,
                values,
                rank=ranks,
                wall_time=wall,
                stream=stream,
                seq=first_seq,
                unit=unit,
                canonical=canonical,
                origin=name,
            )
            continue
        if seq is None:
            seq = np.arange(first_seq, first_seq + n, dtype=np.int64)
        valued |= present
        builder.add(
            metric,
            steps[present],
            values[present],
            rank=ranks[present] if isinstance(ranks, np.ndarray) else ranks,
            wall_time=None if wall is None else wall[present],
            stream=stream,
            seq=seq[present],
            unit=unit,
            canonical=canonical,
            origin=name,
        )
    if not every_row_valued:
        empty = ~valued & ~bad
        if empty.any():  # a step and no metric: counted in the import report, not as an error
            first = int(np.flatnonzero(empty)[0])
            builder.note_empty(where[1] + first if where is not None else 0, int(empty.sum()))
    return first_seq


# --------------------------------------------------------------------------- CSV


def iter_csv(path: Path, builder: LogBuilder, text_columns: Iterable[str] = ()) -> Iterator[tuple[pa.Table, int]]:
    """``(batch, line number of its first row)`` of a CSV file, streamed.

    Every column but ``text_columns`` is read as float64 (a column that holds text is re-read as
    strings and parsed by :func:`to_float`): Arrow would otherwise infer a type from the first block
    and fail on sparse columns (Lightning's validation columns are empty for thousands of rows).
    A row with too few or too many cells (the last line of a log cut by a crash, junk printed into
    the file) is skipped and counted with its line; so are rows that follow it one line later than
    their batch's line number says. A file that is not UTF-8 (a Latin-1 export) is read with its
    invalid bytes replaced (U+FFFD): the cells that held them are then text, skipped and counted.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(64 * 1024)
    except OSError as exc:
        raise open_error(path, exc) from exc
    header, comments = csv_header(head) or [], leading_comments(head)
    if not header:
        first_line = head.split(b"\n", 1)[0]
        nul_at = first_line.find(b"\x00")
        if nul_at >= 0:  # a binary file, or one damaged by a crash (zero-filled blocks)
            raise StabScopeError(
                f"the CSV header holds a NUL byte at column {nul_at + 1:,}: expected "
                "comma-separated column names as text (the file is binary or damaged)",
                path=str(path),
                line=1,
            )
        raise StabScopeError(
            "expected a CSV header line (comma- or tab-separated column names)", path=str(path), line=1
        )
    head = without_comments(head)
    delimiter = csv_delimiter(head)
    text = set(text_columns)
    size = _file_size(path)
    # bytes that are not UTF-8 fail Arrow late: in a column name when it is read, in a skipped row
    # inside Arrow's callback (printed to stderr, not raised); so they are replaced before
    source: Any = path if first_invalid_utf8(path) is None else utf8_source(path, size)
    rows_done = 0
    as_text = False
    while True:
        invalid: list[pacsv.InvalidRow] = []
        types = {c: (pa.string() if (as_text or c in text) else pa.float64()) for c in header}
        convert = pacsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True)
        # padded names (Ultralytics' right-aligned '      epoch,  train/box_loss'): the trimmed header
        trimmed = _trimmed_names(head, header)
        trimmed["skip_rows"] = trimmed.get("skip_rows", 0) + comments
        read = pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES, **trimmed)
        parse = pacsv.ParseOptions(delimiter=delimiter, invalid_row_handler=row_skipper(invalid))
        row = 0
        try:
            for t in _csv_tables(source, size, read, parse, convert):
                start = row
                row += t.num_rows
                if row <= rows_done:
                    continue  # already handed over before a text cell forced the re-read
                if start < rows_done:
                    t = t.slice(rows_done - start)
                    start = rows_done
                rows_done = row
                yield t, start + 2 + comments
        except pa.ArrowInvalid as exc:
            if str(exc).startswith("Empty CSV file") or "cannot infer number of columns" in str(exc):
                builder.advance(size)  # a header cut before its end: no rows (the reader says so)
                return
            if as_text:
                raise StabScopeError(_arrow_message(exc), path=str(path)) from exc
            as_text = True  # a column holds text: read everything as strings from the start
            continue
        if invalid:
            _skip_invalid_rows(path, source, invalid, builder, delimiter)
        builder.advance(size)
        return


def _trimmed_names(head: bytes, header: list[str]) -> dict[str, Any]:
    """Arrow's read options that name the columns by the trimmed header when the file pads its names."""
    first = head.decode("utf-8-sig", errors="replace").split("\n", 1)[0].strip("\r")
    padded = any(c != c.strip() for c in first.split(csv_delimiter(head)))
    return {"column_names": header, "skip_rows": 1} if padded else {}


def row_skipper(rows: list[pacsv.InvalidRow]) -> Callable[[pacsv.InvalidRow], Literal["skip"]]:
    """An Arrow ``invalid_row_handler`` that skips each row with the wrong number of cells and keeps
    it in ``rows`` (to be counted and reported)."""

    def skip(row: pacsv.InvalidRow) -> Literal["skip"]:
        rows.append(row)
        return "skip"

    return skip


def _skip_invalid_rows(
    path: Path, source: Any, rows: list[pacsv.InvalidRow], builder: LogBuilder, delimiter: str = ","
) -> None:
    """Count the rows Arrow skipped for their number of cells, with the line of the first few (a
    threaded read does not know them: the lines are then found by a single-threaded pass)."""
    numbers = [r.number for r in rows[:MAX_SKIPPED_EXAMPLES]]
    if None in numbers:
        skipped: list[pacsv.InvalidRow] = []
        if isinstance(source, pa.BufferReader):
            source.seek(0)
        try:
            for _ in pacsv.open_csv(
                source,
                read_options=pacsv.ReadOptions(use_threads=False, block_size=CSV_BLOCK_BYTES),
                parse_options=pacsv.ParseOptions(delimiter=delimiter, invalid_row_handler=row_skipper(skipped)),
                convert_options=pacsv.ConvertOptions(check_utf8=False, column_types={}, strings_can_be_null=True),
            ):
                if len(skipped) >= MAX_SKIPPED_EXAMPLES:
                    break
        except pa.ArrowInvalid:
            pass  # the lines stay unknown: the rows are still counted
        found = [r.number for r in skipped[: len(numbers)]]
        numbers = (found + [None] * len(numbers))[: len(numbers)]
    for i, r in enumerate(rows):
        shown = r.text if len(r.text) <= 60 else r.text[:57] + "..."
        reason = f"expected {r.expected_columns} cells, found {r.actual_columns}: {shown!r}"
        line = numbers[i] if i < len(numbers) else None
        builder.skip(path, line if line is not None else 0, reason)


def utf8_source(path: Path, size: int) -> pa.BufferReader:
    """A CSV file that is not UTF-8, as UTF-8 with its invalid bytes replaced (U+FFFD); a file too
    large to hold so is refused at its first invalid byte."""
    if size > CSV_WHOLE_FILE_BYTES:
        line, offset = first_invalid_utf8(path) or (0, 0)
        raise StabScopeError(
            f"byte {offset:,} is not UTF-8 text; expected a UTF-8 CSV file (re-save it as UTF-8, "
            "e.g. iconv -f latin1 -t utf-8)",
            path=str(path),
            line=line,
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise open_error(path, exc) from exc
    return pa.BufferReader(data.decode("utf-8", "replace").encode())


def first_invalid_utf8(path: Path) -> tuple[int, int] | None:
    """``(line, byte offset)`` of the first byte of ``path`` that is not UTF-8 text (None: all is)."""
    done = lines = 0  # bytes and newlines before ``pending``
    pending = b""  # a character cut by the block boundary
    with open(path, "rb") as f:
        while block := f.read(CSV_BLOCK_BYTES):
            data = pending + block
            try:
                if not data.isascii():  # ASCII (most logs) is UTF-8: checked without decoding
                    data.decode("utf-8")
                pending = b""
            except UnicodeDecodeError as exc:
                if exc.reason != "unexpected end of data" or exc.start < len(data) - 3:
                    return lines + data.count(b"\n", 0, exc.start) + 1, done + exc.start
                pending = data[exc.start :]
                data = data[: exc.start]
            done += len(data)
            lines += data.count(b"\n")
    return (lines + 1, done) if pending else None


CSV_WHOLE_FILE_BYTES: Final = 256 * 1024 * 1024
"""CSV files up to this size are parsed in one multi-threaded call (the result is as large as
the table anyway); larger ones stream in ``CSV_BLOCK_BYTES`` batches with bounded memory."""
CSV_BLOCK_BYTES: Final = 16 * 1024 * 1024


def _csv_tables(
    source: Any,
    size: int,
    read: pacsv.ReadOptions,
    parse: pacsv.ParseOptions,
    convert: pacsv.ConvertOptions,
) -> Iterator[pa.Table]:
    if isinstance(source, pa.BufferReader):
        source.seek(0)
    if size <= CSV_WHOLE_FILE_BYTES:
        yield pacsv.read_csv(source, read_options=read, parse_options=parse, convert_options=convert)
        return
    for batch in pacsv.open_csv(source, read_options=read, parse_options=parse, convert_options=convert):
        yield pa.Table.from_batches([batch])


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _arrow_message(exc: Exception) -> str:
    return str(exc).split("\n", 1)[0][:300]


# --------------------------------------------------------------------------- JSON Lines


def iter_jsonl(path: Path, builder: LogBuilder) -> Iterator[tuple[pa.Table, int]]:
    """``(table of flattened objects, line of the first)`` for each ~64 MiB chunk of a JSONL file.

    Arrow's JSON reader parses a chunk when it can (zero-copy, in parallel 1 MiB blocks); chunks
    it refuses (``NaN``/``Infinity`` literals, which Python's json writes, a key whose type
    changes, a line that is not an object) are parsed line by line, where lines that are not JSON
    objects are skipped and counted.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise open_error(path, exc) from exc
    line_no = 1
    carry = b""
    try:
        while True:
            block = f.read(JSON_CHUNK_BYTES)
            if not block and not carry:
                break
            builder.advance(len(block))
            data = carry + block if carry else block
            # a short read is the end of the file: its last line joins this chunk even without a newline
            # (alone it would be a one-record table, which a summary test may read as the run's summary)
            end = data.rfind(b"\n") + 1 if len(block) == JSON_CHUNK_BYTES else len(data)
            if end == 0:
                carry = data
                continue
            view = memoryview(data)[:end]
            carry = data[end:]
            table = _arrow_json(view)
            if table is None:
                table = _python_json(bytes(view), path, line_no, builder)
            yield table, line_no
            line_no += data.count(b"\n", 0, end)
    finally:
        f.close()


MAX_JSON_OPENERS_PER_LINE: Final = 1000
"""A JSON line holding more ``[``/``{`` than this goes to Python's parser, not Arrow's: Arrow's
recursive parser crashes the process (a segmentation fault, not an error) on a line nested some
thousands deep, and a line's depth is at most its count of openers."""
_ALL_BUT_OPENERS_AND_NEWLINES = bytes(b for b in range(256) if b not in b"[{\n")
_OPENER_RUN = re.compile(rb"[\[{]{%d}" % (MAX_JSON_OPENERS_PER_LINE + 1))


def may_nest_deeply(chunk: bytes | memoryview) -> bool:
    """Whether a line of ``chunk`` holds more than :data:`MAX_JSON_OPENERS_PER_LINE` openers: the
    chunk is reduced to its openers and newlines (in C), then searched for such a run."""
    return _OPENER_RUN.search(bytes(chunk).translate(None, _ALL_BUT_OPENERS_AND_NEWLINES)) is not None


MAX_NESTING: Final = 100
"""Deepest nesting of brackets a JSON file or a config may have (a trainer's own nest a few levels)."""
_NESTING_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|[\[{]|[\]}]|\n')


def nesting_refusal(text: str, path: str, what: str) -> StabScopeError:
    """The refusal of ``text`` (a ``what``, e.g. "JSON file") whose brackets nest too deeply for the
    parser (its RecursionError): naming the line and column where they pass :data:`MAX_NESTING`."""
    depth, line, line_start = 0, 1, 0
    column = 1
    for token in _NESTING_TOKENS.finditer(text):
        kind = token.group()[0]
        if kind == "\n":
            line, line_start = line + 1, token.end()
        elif kind in "[{":
            depth += 1
            if depth > MAX_NESTING:
                column = token.start() - line_start + 1
                break
        elif kind in "]}":
            depth = max(depth - 1, 0)
    return StabScopeError(
        f"brackets nest deeper than {MAX_NESTING} levels from column {column:,} on: expected a {what} "
        "whose values nest a few levels (this one cannot be read without exhausting the parser's stack)",
        path=path,
        line=line,
    )


def _arrow_json(chunk: memoryview) -> pa.Table | None:
    if may_nest_deeply(chunk):
        return None
    try:
        source: Any = pa.BufferReader(pa.py_buffer(chunk))  # zero-copy over the chunk
        table = pajson.read_json(source, read_options=pajson.ReadOptions(block_size=1 << 20))
        # Arrow takes keys that are not UTF-8 and fails only when a name is read (here, every name
        # is): such a chunk goes line by line, where the lines holding one are skipped and counted
        table.column_names  # noqa: B018 - reads every top-level name
        return flatten(table)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError):
        return None


def flatten(table: pa.Table) -> pa.Table:
    """Nested struct columns become ``parent/child`` columns."""
    while any(pa.types.is_struct(f.type) for f in table.schema):
        cols, names = [], []
        for name, col in zip(table.column_names, table.columns, strict=True):
            if pa.types.is_struct(col.type):
                for i in range(col.type.num_fields):
                    child = col.type.field(i)
                    cols.append(pc.struct_field(col, [i]))
                    names.append(f"{name}/{child.name}")
            else:
                cols.append(col)
                names.append(name)
        table = pa.table(cols, names=names)
    return table


def _flatten_obj(obj: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            _flatten_obj(v, key + "/", out)
        else:
            out[key] = v


def _python_json(chunk: bytes, path: Path, first_line: int, builder: LogBuilder) -> pa.Table:
    columns: dict[str, list[Any]] = {}
    n = 0
    for i, raw in enumerate(chunk.split(b"\n")):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            builder.skip(path, first_line + i, f"not a JSON object ({exc})")
            continue
        except RecursionError:
            builder.skip(path, first_line + i, "a JSON value nested too deeply to read (hundreds of levels)")
            continue
        if not isinstance(obj, dict):
            builder.skip(path, first_line + i, "JSON value is not an object")
            continue
        flat: dict[str, Any] = {}
        _flatten_obj(obj, "", flat)
        for key, value in flat.items():
            col = columns.get(key)
            if col is None:
                col = columns[key] = [None] * n
            col.append(_scalar(value))
        n += 1
        for col in columns.values():
            if len(col) < n:
                col.append(None)
    arrays = {}
    for key, values in columns.items():
        kind = _column_type(values)
        if kind == pa.string():
            values = [v if v is None or isinstance(v, str) else repr(v) for v in values]
        arrays[key] = pa.array(values, kind)
    return pa.table(arrays) if arrays else pa.table({})


def _scalar(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        # text (no metric), as Arrow keeps a list column: a too-deep dump's log_history stays seen
        return f"<list of {len(value)}>"
    return None


def _column_type(values: list[Any]) -> pa.DataType:
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {float}:
        return pa.float64()
    return pa.string()
