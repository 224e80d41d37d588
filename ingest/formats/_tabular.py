"""Shared input for the tabular formats (CSV, JSON Lines, Parquet): streamed Arrow batches turned
into long rows, one metric column at a time.

A cell that is empty/null means "not logged at this row" and produces no row; ``nan``/``inf`` (as
numbers or strings) are values and are kept.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as _pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder, open_error, parse_numbers
from ingest.formats.aliases import KeyMap
from stab_core.metrics import RUN_RANK

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays

STEP_COLUMNS: Final = (
    "step",
    "Step",
    "_step",
    "global_step",
    "trainer/global_step",
    "train/global_step",
    "iteration",
    "iter",
    "steps",
)
"""Column names accepted as the step axis, most specific first."""
WALL_COLUMNS: Final = ("wall_time", "Wall time", "timestamp", "_timestamp", "time")
"""Column names read as wall-clock time (seconds since the epoch)."""

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


def csv_header(head: bytes) -> list[str] | None:
    """Column names of a CSV whose first bytes are ``head`` (None when it does not look like CSV)."""
    text = head.decode("utf-8-sig", errors="replace")
    first = text.split("\n", 1)[0].strip("\r")
    if "," not in first or "\x00" in first:
        return None
    try:
        row = next(csv.reader([first]))
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
    floats = arr.cast(pa.float64()) if arr.type != pa.float64() else arr
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
) -> None:
    """Append every metric column of a wide ``table`` (one row per logged step) in row order.

    Rows without a step are skipped and counted (``where`` = file and the line of the table's
    first row, for the examples); so are text cells in metric columns when
    ``text_cells_are_errors`` (CSV, where every column is meant to be numeric; JSON objects may hold
    text fields that are not metrics).
    """
    steps_f, has_step = to_float(table[step_col])
    n = table.num_rows
    if n == 0:
        return
    bad = ~has_step | ~np.isfinite(steps_f)
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
    skip = {step_col, rank_col, wall_col, *ignore}
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
        if dense:  # every row logged this metric: share the step/rank/wall arrays, no copies
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
            )
            continue
        if seq is None:
            seq = np.arange(first_seq, first_seq + n, dtype=np.int64)
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
        )


# --------------------------------------------------------------------------- CSV


def iter_csv(path: Path, builder: LogBuilder, text_columns: Iterable[str] = ()) -> Iterator[tuple[pa.Table, int]]:
    """``(batch, line number of its first row)`` of a CSV file, streamed.

    Every column but ``text_columns`` is read as float64 (a column that holds text is re-read as
    strings and parsed by :func:`to_float`): Arrow would otherwise infer a type from the first block
    and fail on sparse columns (Lightning's validation columns are empty for thousands of rows).
    """
    try:
        with open(path, "rb") as f:
            header = csv_header(f.read(64 * 1024)) or []
    except OSError as exc:
        raise open_error(path, exc) from exc
    if not header:
        raise StabScopeError("expected a CSV header line (comma-separated column names)", path=str(path), line=1)
    text = set(text_columns)
    rows_done = 0
    for as_text in (False, True):
        types = {c: (pa.string() if (as_text or c in text) else pa.float64()) for c in header}
        convert = pacsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True)
        read = pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES)
        row = 0
        try:
            for t in _csv_tables(path, read, convert):
                start = row
                row += t.num_rows
                if row <= rows_done:
                    continue  # already handed over before a text cell forced the re-read
                if start < rows_done:
                    t = t.slice(rows_done - start)
                    start = rows_done
                rows_done = row
                yield t, start + 2
            builder.advance(_file_size(path))
            return
        except pa.ArrowInvalid as exc:
            if as_text:
                raise StabScopeError(f"CSV parse error: {_arrow_message(exc)}", path=str(path), line=row + 2) from exc
            continue  # a column holds text: read everything as strings from the start


CSV_WHOLE_FILE_BYTES: Final = 256 * 1024 * 1024
"""CSV files up to this size are parsed in one multi-threaded call (the result is as large as
the table anyway); larger ones stream in ``CSV_BLOCK_BYTES`` batches with bounded memory."""
CSV_BLOCK_BYTES: Final = 16 * 1024 * 1024


def _csv_tables(path: Path, read: pacsv.ReadOptions, convert: pacsv.ConvertOptions) -> Iterator[pa.Table]:
    if _file_size(path) <= CSV_WHOLE_FILE_BYTES:
        yield pacsv.read_csv(path, read_options=read, convert_options=convert)
        return
    for batch in pacsv.open_csv(path, read_options=read, convert_options=convert):
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
            end = data.rfind(b"\n") + 1 if block else len(data)
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


def _arrow_json(chunk: memoryview) -> pa.Table | None:
    try:
        source: Any = pa.BufferReader(pa.py_buffer(chunk))  # zero-copy over the chunk
        table = pajson.read_json(source, read_options=pajson.ReadOptions(block_size=1 << 20))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return flatten(table)


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
    return None


def _column_type(values: list[Any]) -> pa.DataType:
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {float}:
        return pa.float64()
    return pa.string()
