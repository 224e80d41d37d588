"""MLflow file store: ``mlruns/<experiment id>/<run id>/metrics/<key>`` with one line per logged point,
``<timestamp ms> <value> <step>`` (keys with ``/`` are nested folders). Accepts the run folder, its
``metrics`` folder, an experiment/``mlruns`` folder that holds exactly one run, or one metric file on
its own (its key is its path below ``metrics/``, else its name). ``params/`` (one
file per parameter) and the run name from ``meta.yaml`` go to ``meta``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import yaml

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder
from ingest.formats._tabular import MAX_STEP, first_invalid_utf8, row_skipper, to_float, utf8_source
from ingest.formats.base import Reader
from ingest.formats.numbers import parse_numbers
from ingest.formats.raw_text import read_head


def run_folders(path: Path) -> list[Path]:
    """MLflow run folders at or under ``path`` (a folder with a ``metrics`` sub-folder)."""
    if path.name == "metrics" and path.is_dir():
        return [path.parent]
    if (path / "metrics").is_dir():
        return [path]
    return sorted(p.parent for p in path.glob("**/metrics") if p.is_dir() and ".trash" not in p.parts)


def _looks_like_metric_file(path: Path) -> bool:
    line = read_head(path, 256).split(b"\n", 1)[0].split()
    if len(line) != 3:
        return False
    try:
        int(line[0])
        float(line[1])
        int(line[2])
    except ValueError:
        return False
    return True


class MlflowReader(Reader):
    name = "mlflow"
    description = "MLflow file store run folder: metrics/<key> files of '<ts_ms> <value> <step>' lines"
    accepts_directories = True

    def sniff(self, head: bytes, path: Path) -> float:
        if not path.is_dir():
            # one metric file on its own (``metrics/loss``): its name is the metric's
            return 0.8 if path.is_file() and _looks_like_metric_file(path) and _ms_stamp(head) else 0.0
        runs = run_folders(path)
        for run in runs[:3]:
            files = [f for f in (run / "metrics").rglob("*") if f.is_file()]
            if files and _looks_like_metric_file(files[0]):
                return 0.95
        return 0.0

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        if all(p.is_file() for p in paths):
            for stream, f in enumerate(paths):
                builder.source(f)
                _read_metric(f, _file_key(f), stream, builder)
            return
        runs = [r for p in paths for r in run_folders(p)]
        if not runs:
            raise StabScopeError("expected an MLflow run folder (with a metrics/ folder)", path=str(paths[0]))
        if len(runs) > 1:
            names = ", ".join(r.name for r in runs[:5])
            raise StabScopeError(
                f"{len(runs)} MLflow runs found ({names}); import one run folder at a time", path=str(paths[0])
            )
        run = runs[0]
        _run_meta(run, builder)
        metrics_dir = run / "metrics"
        for stream, f in enumerate(sorted(p for p in metrics_dir.rglob("*") if p.is_file())):
            builder.source(f)
            key = f.relative_to(metrics_dir).as_posix()
            _read_metric(f, key, stream, builder)


def _ms_stamp(head: bytes) -> bool:
    """Whether the first line opens with a time stamp in milliseconds since the epoch (13 digits)."""
    first = head.split(b"\n", 1)[0].split()
    return bool(first) and first[0].isdigit() and len(first[0]) == 13


def _file_key(path: Path) -> str:
    """A lone metric file's key: its path below the run's ``metrics`` folder (``train/loss``), else its name."""
    parts = path.parts
    if "metrics" in parts[:-1]:
        at = len(parts) - 1 - parts[::-1].index("metrics")
        return "/".join(parts[at + 1 :])
    return path.name


def _read_metric(path: Path, key: str, stream: int, builder: LogBuilder) -> None:
    """One metric file's ``<timestamp ms> <value> <step>`` lines; a line that is not one (too few or
    too many fields, text where a number belongs) is skipped and counted."""
    invalid: list[pacsv.InvalidRow] = []
    opts = pacsv.ParseOptions(delimiter=" ", invalid_row_handler=row_skipper(invalid))
    read = pacsv.ReadOptions(column_names=["ts", "value", "step"], use_threads=False)  # lines of skipped rows
    convert = pacsv.ConvertOptions(column_types=dict.fromkeys(("ts", "value", "step"), pa.string()), null_values=[])
    if not read_head(path, 1):
        builder.skip(path, 1, "an empty metric file")
        return
    # bytes that are not UTF-8 are replaced first: Arrow fails on them late (see ``iter_csv``)
    source: Any = path if first_invalid_utf8(path) is None else utf8_source(path, path.stat().st_size)
    try:
        table = pacsv.read_csv(source, read_options=read, parse_options=opts, convert_options=convert)
    except pa.ArrowInvalid as exc:
        raise StabScopeError(
            f"expected '<timestamp ms> <value> <step>' lines ({str(exc).splitlines()[0][:200]})", path=str(path)
        ) from exc
    builder.advance(path.stat().st_size)
    for row in invalid:
        shown = row.text if len(row.text) <= 60 else row.text[:57] + "..."
        builder.skip(path, row.number or 0, f"expected '<timestamp ms> <value> <step>', found {shown!r}")
    conv = parse_numbers(table["value"].combine_chunks())
    steps, has_step = to_float(table["step"])
    wall, has_wall = to_float(table["ts"])
    ok = conv.ok & has_step & has_wall & np.isfinite(steps) & (np.abs(steps) < MAX_STEP)
    if not ok.all():
        bad = int(np.flatnonzero(~ok)[0])
        builder.skip(path, bad + 1, "expected '<timestamp ms> <value> <step>'", int((~ok).sum()))
    builder.add(
        key,
        steps[ok].astype(np.int64),
        conv.values[ok],
        wall_time=wall[ok] / 1000.0,
        stream=stream,
    )


def _run_meta(run: Path, builder: LogBuilder) -> None:
    meta_file = run / "meta.yaml"
    if meta_file.is_file():
        try:
            data = yaml.safe_load(meta_file.read_text(encoding="utf-8", errors="replace"))
        except yaml.YAMLError:
            data = None
        if isinstance(data, dict):
            for key in ("run_name", "run_id", "experiment_id"):
                if key in data:
                    builder.meta[f"mlflow_{key}"] = data[key]
    params = run / "params"
    if params.is_dir():
        builder.meta["params"] = {
            p.relative_to(params).as_posix(): p.read_text(encoding="utf-8", errors="replace").strip()
            for p in sorted(params.rglob("*"))
            if p.is_file()
        }
