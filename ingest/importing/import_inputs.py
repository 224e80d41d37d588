"""Which of an import's inputs are logs, which is the run's config, and what is skipped and why.

One rule for ``stabscope import DIR`` (or several files) and the Upload page's files:

- a folder that one reader recognises as a whole (a TensorBoard tree, a Lightning ``version_N``
  folder, an MLflow run) is read by it; its other files are a config or skipped;
- otherwise each file is sorted on its own: a file some reader recognises is a log, a YAML, JSON or
  TOML mapping (or a Megatron arguments dump) is a config, anything else is skipped with the reason
  (``README.md: documentation, not a training log``). Hidden files and folders are left out.

Logs of different formats are read one format at a time and combined, and so are the files of a
whole-log format (``trainer_state.json``, golden values, Parquet): a metric that two of them hold
with the same values at the same steps is kept once; where they disagree both are kept (the later
one namespaced by its file) and a note says which metric, at which steps. A byte-for-byte copy is
skipped (it would read as a restart); a log that fails to read beside others that read is listed
as skipped with the reason. The import fails only when no file is a log.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.errors import StabScopeError
from ingest.formats import (
    AMBIGUITY_MARGIN,
    FORMATS,
    MIN_CONFIDENCE,
    TABLE_SCHEMA,
    ParsedLog,
    detect,
    generic_reads,
    read_log,
)
from ingest.formats._common import Progress
from ingest.formats.generic import GenericReader
from ingest.formats.raw_text import looks_binary, read_head
from ingest.formats.tensorboard import is_event_file

SEPARATE_FILE_FORMATS: Final = frozenset({"hf_trainer_state", "megatron_golden", "parquet"})
"""Formats whose files are each a whole log (not a log and its continuations): read one by one and
combined, so that rows two files hold at one step are compared rather than the last one kept."""
CONFIG_SUFFIXES: Final = (".yaml", ".yml", ".json", ".toml")
WEAK_LOG_CONFIDENCE: Final = 0.6
"""A file that parses as a run config is a config unless a reader rates it at least this much as a log."""
_CONFIG_NAME: Final = re.compile(r"config|hparams|args|params|settings", re.I)
"""Names that say "config": preferred to other mappings (a tokenizer.json), then the most keys mapped."""
_DOC_NAME: Final = re.compile(r"^(readme|provenance|license|licence|notice|changelog|authors|citation)\b", re.I)
_DOC_SUFFIXES: Final = (".md", ".rst", ".html", ".pdf", ".png", ".jpg", ".jpeg", ".svg", ".ipynb", ".py", ".sh")


@dataclass
class SortedInputs:
    """An import's inputs sorted: ``logs`` to read (files, or folders a reader takes whole), the
    ``config`` used as the run's config, and ``skipped`` ``(file, why)`` for the rest."""

    logs: list[Path] = field(default_factory=list)
    formats: dict[Path, str] = field(default_factory=dict)
    """The format each log was recognised as: one group per format, read together."""
    config: Path | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)
    roots: list[Path] = field(default_factory=list)
    """The folders given (file names are shown relative to them)."""


@dataclass
class ImportRead:
    """What an import read: the log, the inputs as sorted, and notes on logs that were combined."""

    parsed: ParsedLog
    inputs: SortedInputs
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The JSON fields the CLI and the page show: log files read, the config, files skipped (with
        why) and notes on logs combined."""
        return {
            "logs": [_shown(Path(f), self.inputs.roots) for f in self.parsed.source_files],
            "config": self.inputs.config.name if self.inputs.config else None,
            "skipped_files": [{"file": f, "why": why} for f, why in self.inputs.skipped],
            "notes": list(self.notes),
        }


def read_inputs(
    paths: Sequence[Path],
    *,
    fmt: str | None = None,
    progress: Progress | None = None,
    custom_dir: Path | None = None,
    step_key: str | None = None,
    reader_set: Collection[str] | None = None,
) -> ImportRead:
    """Read ``paths`` as one run: the logs among them (see the module's rule), with the config's
    text in ``meta`` (``config_text``, ``config_filename``). ``fmt`` forces a reader for every path;
    ``step_key`` is the generic reader's step key when the user chose it (``--map KEY=step``);
    ``reader_set`` limits detection to those built-in readers (``ingest.formats.detect``).
    Raises ``StabScopeError`` when no input is a log, naming each file and why it is not one."""
    paths = [Path(p) for p in paths]
    if fmt is not None:
        inputs = _forced_inputs(paths)
        parsed = read_log(inputs.logs or paths, format=fmt, progress=progress, custom_dir=custom_dir, step_key=step_key)
        return ImportRead(_with_config(parsed, inputs.config), inputs)
    if len(paths) == 1 and paths[0].is_file():
        # one file: it is the log, and read_log's own error says where it stops being one
        return ImportRead(
            read_log(paths, progress=progress, custom_dir=custom_dir, step_key=step_key, reader_set=reader_set),
            SortedInputs(paths),
        )
    inputs = sort_inputs(paths, custom_dir=custom_dir, reader_set=reader_set)
    if not inputs.logs:
        raise _no_log(inputs)
    groups: dict[str, list[Path]] = {}
    for log in inputs.logs:
        groups.setdefault(inputs.formats.get(log, ""), []).append(log)
    parts: list[ParsedLog] = []
    failed: list[tuple[list[Path], StabScopeError]] = []
    # whole-log formats: each file its own log, so that two that disagree at a step are both kept
    # and named; other groups are detected again as a whole (an ambiguous log is refused as
    # read_log refuses it)
    units: list[list[Path]] = []
    for name, group in groups.items():
        units.extend([[f] for f in group] if name in SEPARATE_FILE_FORMATS else [group])
    for unit in units:
        try:
            parts.append(
                read_log(unit, progress=progress, custom_dir=custom_dir, step_key=step_key, reader_set=reader_set)
            )
        except StabScopeError as exc:
            failed.append((unit, exc))
    if not parts:
        raise failed[0][1]
    for unit, error in failed:  # other logs were read: these are listed, not fatal
        inputs.logs = [log for log in inputs.logs if log not in unit]
        for log in unit:
            taken = _taken_by(inputs.formats.get(log, ""), log) if log.is_dir() else None
            names = sorted(_shown(f, inputs.roots) for f in taken) if taken else [_shown(log, inputs.roots)]
            inputs.skipped.extend((name, f"unreadable: {error}") for name in names)
    parsed, notes = (parts[0], []) if len(parts) == 1 else combine(parts)
    return ImportRead(_with_config(parsed, inputs.config), inputs, notes)


def _with_config(parsed: ParsedLog, config: Path | None) -> ParsedLog:
    """``parsed`` with the config's text in its meta (the keys the Upload page's config box sets)."""
    if config is not None:
        parsed.meta["config_text"] = config.read_bytes().decode("utf-8", "replace")
        parsed.meta["config_filename"] = config.name
    return parsed


def _forced_inputs(paths: list[Path]) -> SortedInputs:
    """With a format chosen, every file is read by it except documentation and a config among
    several files (a folder goes to the reader whole, as it chooses its files)."""
    out = SortedInputs(roots=[p for p in paths if p.is_dir()])
    if len(paths) < 2 or out.roots:
        out.logs = list(paths)
        return out
    for f in paths:
        if _is_documentation(f):
            out.skipped.append((f.name, "documentation, not a training log"))
        elif out.config is None and f.suffix.lower() in CONFIG_SUFFIXES and _config_keys(f) is not None:
            out.config = f
        else:
            out.logs.append(f)
    return out


def sort_inputs(
    paths: Sequence[Path], *, custom_dir: Path | None = None, reader_set: Collection[str] | None = None
) -> SortedInputs:
    """Sort ``paths`` into logs, the config and skipped files (see the module's rule), with the
    built-in readers of ``reader_set`` (None: all)."""
    out = SortedInputs()
    loose: list[tuple[Path, Path]] = []  # (file, the folder it is named relative to)
    given = [Path(os.path.abspath(p)) for p in paths if Path(p).is_file()]
    files_root = Path(os.path.commonpath([str(f.parent) for f in given])) if given else Path()
    for path in (Path(p) for p in paths):
        if not path.exists():
            raise StabScopeError("no such file or folder", path=str(path))
        if path.is_file():
            loose.append((path, files_root))
            continue
        out.roots.append(path)
        whole = _whole_folder_format(path, custom_dir, reader_set)
        files = [f for f in sorted(path.rglob("*")) if f.is_file() and not _hidden(f.relative_to(path))]
        if whole is None:
            loose.extend((f, path) for f in files)
            continue
        out.logs.append(path)
        out.formats[path] = whole
        taken = _taken_by(whole, path)
        if taken is None:
            continue
        for f in files:
            if f in taken:
                continue
            if f.name in {t.name for t in taken}:  # checkpoint-200/trainer_state.json beside -2800's
                chosen = ", ".join(str(t.relative_to(path)) for t in sorted(taken))
                out.skipped.append((str(f.relative_to(path)), f"an earlier {f.name}: {chosen} is read"))
            else:
                loose.append((f, path))
    logs: list[tuple[Path, Path, str]] = []
    configs: list[tuple[int, int, Path, str]] = []
    for f, root in loose:
        name = _shown(f, [root])
        best, confidence = _log_format(f, custom_dir, reader_set)
        keys = _config_keys(f)
        # a config.json is one JSON object, which the JSON Lines reader rates weakly as a log
        weak = keys is not None and confidence < WEAK_LOG_CONFIDENCE
        if best and not weak and not _is_documentation(f):
            logs.append((f, root, best))
            continue
        if keys is not None:
            configs.append((-keys, 0 if _CONFIG_NAME.search(f.name) else 1, f, name))
        else:
            out.skipped.append((name, _why_not_a_log(f, best)))
    logs = _without_copies(logs, out)
    together = detect([f for f, _, _ in logs], custom_dir=custom_dir, reader_set=reader_set) if logs else []
    # one group when the logs are of one format together, else a group per format; a format that is no
    # file's own best (the JSON Lines reader that also reads trainer_state.json as a document) does not
    # join files that readers of their own layouts read
    one = _one_format(together) and any(best == together[0][0] for _, _, best in logs)
    for f, _, best in logs:
        out.logs.append(f)
        out.formats[f] = together[0][0] if one else best
    if configs:
        configs.sort(key=lambda c: (c[1], c[0], len(c[3]), c[3]))  # named a config first, then most keys
        out.config = configs[0][2]
        for *_, name in configs[1:]:
            out.skipped.append((name, f"another config: {configs[0][3]} is the run's config"))
    return out


def _without_copies(logs: list[tuple[Path, Path, str]], out: SortedInputs) -> list[tuple[Path, Path, str]]:
    """``logs`` less byte-for-byte copies of an earlier one (listed as skipped): a log uploaded
    twice would otherwise repeat its own steps, which reads as a restart."""
    kept: list[tuple[Path, Path, str]] = []
    seen: dict[tuple[int, str], Path] = {}
    sizes = Counter(f.stat().st_size for f, _, _ in logs)
    for f, root, fmt in logs:
        size = f.stat().st_size
        if sizes[size] < 2:
            kept.append((f, root, fmt))
            continue
        with f.open("rb") as handle:
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
        first = seen.setdefault((size, digest), f)
        if first == f:
            kept.append((f, root, fmt))
        else:
            out.skipped.append((_shown(f, [root]), f"a copy of {_shown(first, [root])}"))
    return kept


def _shown(path: Path, roots: list[Path]) -> str:
    """``path`` relative to the folder given that holds it, else its name."""
    for root in roots:
        if path.is_relative_to(root):
            return str(path.relative_to(root))
        if Path(os.path.abspath(path)).is_relative_to(os.path.abspath(root)):  # a file given as ../x
            return str(Path(os.path.abspath(path)).relative_to(os.path.abspath(root)))
    return path.name


def _one_format(candidates: list[tuple[str, float]]) -> bool:
    """Whether detection over all the loose files found one clear format for all of them."""
    return bool(candidates) and (len(candidates) == 1 or candidates[1][1] < candidates[0][1] - AMBIGUITY_MARGIN)


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def _whole_folder_format(folder: Path, custom_dir: Path | None, reader_set: Collection[str] | None) -> str | None:
    """The format a reader recognises ``folder`` as, as a whole, when one clearly does."""
    candidates = detect([folder], custom_dir=custom_dir, reader_set=reader_set)
    return candidates[0][0] if _one_format(candidates) else None


def _taken_by(fmt: str, folder: Path) -> set[Path] | None:
    """The files of ``folder`` its reader reads (None: the reader takes the whole folder)."""
    if fmt == "tensorboard":
        return {f for f in folder.rglob("*") if f.is_file() and is_event_file(f)}
    reader = FORMATS.get(fmt)
    if reader is None or reader.accepts_directories:
        return None
    return set(reader.expand(folder))


def _log_format(path: Path, custom_dir: Path | None, reader_set: Collection[str] | None) -> tuple[str, float]:
    """The best format ``path`` is recognised as, with its confidence (``""``, 0 when none)."""
    candidates = detect([path], custom_dir=custom_dir, reader_set=reader_set)
    if candidates:
        return candidates[0]
    # a log only the generic reader reads is still a log beside a README or a config (it was refused
    # as "not a training log" when uploaded with one, though read alone)
    reads = generic_reads([path], custom_dir=custom_dir, reader_set=reader_set)
    return (GenericReader.name, MIN_CONFIDENCE) if reads else ("", 0.0)


def _is_documentation(path: Path) -> bool:
    """README, PROVENANCE, LICENSE... and Markdown, pictures, code: about a run, never its log
    (a PROVENANCE.txt that quotes log lines would otherwise be read as more log)."""
    return bool(_DOC_NAME.match(path.name)) or path.suffix.lower() in _DOC_SUFFIXES


def _config_keys(path: Path) -> int | None:
    """How many checklist keys ``path`` maps to when it is a run config, else None."""
    from ingest.importing.configs import MAX_CONFIG_BYTES, read_run_config

    if path.stat().st_size > MAX_CONFIG_BYTES:
        return None
    data = path.read_bytes()
    if path.suffix.lower() not in CONFIG_SUFFIXES and b"arguments --" not in data:
        return None
    try:
        mapped = read_run_config(data, path.name)
    except StabScopeError:
        return None
    # "model" alone is no evidence: a tokenizer.json has a top-level "model" too
    keys = len([k for k in mapped if k not in ("source_format", "key_sources", "skipped_lines", "model")])
    # a tokenizer.json or dataset index is a mapping too: it is a config when it maps a checklist
    # key or its name says so (Lightning's hparams.yaml maps none)
    return keys if keys or _CONFIG_NAME.search(path.name) else None


def _why_not_a_log(path: Path, best: str) -> str:
    """One short reason a file is not read as a log."""
    if _is_documentation(path):
        return "documentation, not a training log"
    head = read_head(path, 64 * 1024)
    if not head:
        return "empty"
    if looks_binary(head):
        return "not a training log (binary, no known format)"
    for raw in head.split(b"\n")[:1000]:
        text = raw.decode("utf-8", "replace").strip()
        if text:
            return f"not a training log (its first line {text[:60]!r} is no known log format)"
    return "not a training log"


def _no_log(inputs: SortedInputs) -> StabScopeError:
    """The error when no input is a log: each file and why it is not one."""
    listed = [f"{name}: {why}" for name, why in inputs.skipped]
    if inputs.config is not None:
        listed.insert(0, f"{inputs.config.name}: a run config, not a log")
    what = "; ".join(listed[:12]) + (f"; and {len(listed) - 12} more" if len(listed) > 12 else "")
    return StabScopeError(f"no training log among the inputs ({what or 'no files'})")


# --------------------------------------------------------------------------- logs of several formats


def combine(parts: Sequence[ParsedLog]) -> tuple[ParsedLog, list[str]]:
    """One ``ParsedLog`` from several logs (of different formats, or whole logs of one), and a note
    for each metric two of them hold.

    Rows of one metric at the same (rank, step) with the same value are kept once; where the values
    differ, the later log's metric is kept under ``<its file stem>/<metric>``, so no row is lost."""
    notes: list[str] = []
    used = {str(m) for part in parts for m in part.metrics}
    labels = _labels(parts)
    series: dict[str, list[tuple[ParsedLog, pa.Table]]] = {}
    for part in parts:
        codes = pc.cast(part.table.column("metric"), pa.string()).combine_chunks().dictionary_encode()
        indices = np.asarray(codes.indices.to_numpy(zero_copy_only=False))
        for code, metric in enumerate(codes.dictionary.to_pylist()):
            rows = part.table.filter(pa.array(indices == code)).select(["rank", "step", "value", "wall_time"])
            series.setdefault(str(metric), []).append((part, rows))
    tables: list[pa.Table] = []
    for metric, found in series.items():
        base_log, base = found[0]
        for log, rows in found[1:]:
            same, differ, steps = _compare(base, rows)
            first, other = labels[id(base_log)], labels[id(log)]
            if differ:
                renamed = _free_name(f"{Path(other).with_suffix('')}/{metric}", used)
                shown = ", ".join(str(s) for s in steps[:5]) + (" ..." if len(steps) > 5 else "")
                notes.append(
                    f"{metric}: {other} and {first} disagree at {differ} steps ({shown}); "
                    f"both kept, {other}'s as {renamed}"
                )
                tables.append(_with_name(rows, renamed))
                continue
            if same:
                notes.append(f"{metric}: {other} repeats {first} at {same} steps with the same values; kept once")
            base = _union(base, rows)
        tables.append(_with_name(base, metric))
    meta: dict[str, Any] = {}
    for part in reversed(parts):
        meta.update(part.meta)
    combined = ParsedLog(
        format="+".join(dict.fromkeys(p.format for p in parts)),
        table=pa.concat_tables(tables) if tables else TABLE_SCHEMA.empty_table(),
        events=sorted((e for p in parts for e in p.events), key=lambda e: (e.step, e.kind)),
        meta=meta,
        skipped=sum(p.skipped for p in parts),
        skipped_examples=[x for p in parts for x in p.skipped_examples],
        source_files=[f for p in parts for f in p.source_files],
        kept_over=[k for p in parts for k in p.kept_over],
        segments=[s for p in parts for s in p.segments],  # further runs a log held stay runs of their own
    )
    return combined, notes


def _free_name(name: str, used: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3``... when a metric of that name exists (then taken)."""
    free, k = name, 1
    while free in used:
        k += 1
        free = f"{name}-{k}"
    used.add(free)
    return free


def _labels(parts: Sequence[ParsedLog]) -> dict[int, str]:
    """Each log's first file name, with its folder where two logs share the name (by ``id``)."""
    files = [Path(p.source_files[0]) if p.source_files else Path(p.format) for p in parts]
    names = Counter(f.name for f in files)
    return {
        id(part): f"{f.parent.name}/{f.name}" if names[f.name] > 1 else f.name
        for part, f in zip(parts, files, strict=True)
    }


def _keys(rows: pa.Table) -> np.ndarray[Any, np.dtype[np.int64]]:
    rank = rows.column("rank").to_numpy().astype(np.int64)
    step = rows.column("step").to_numpy().astype(np.int64)
    keys: np.ndarray[Any, np.dtype[np.int64]] = (rank + 1) * (1 << 40) + step
    return keys


def _compare(a: pa.Table, b: pa.Table) -> tuple[int, int, list[int]]:
    """Rows at the same (rank, step) in ``a`` and ``b``: how many agree, how many differ, and the
    steps where they differ."""
    _, ia, ib = np.intersect1d(_keys(a), _keys(b), return_indices=True)
    va = a.column("value").to_numpy()[ia]
    vb = b.column("value").to_numpy()[ib]
    agree = np.isclose(va, vb, rtol=1e-9, atol=0.0, equal_nan=True) | (va == vb)
    steps = b.column("step").to_numpy()[ib][~agree]
    return int(agree.sum()), int((~agree).sum()), sorted({int(s) for s in steps})


def _union(a: pa.Table, b: pa.Table) -> pa.Table:
    """``a``'s rows plus ``b``'s at (rank, step) that ``a`` lacks, sorted by (rank, step)."""
    extra = b.filter(pa.array(~np.isin(_keys(b), _keys(a))))
    both = pa.concat_tables([a, extra])
    order: np.ndarray[Any, np.dtype[np.int64]] = np.argsort(_keys(both), kind="stable")
    return both.take(order)


def _with_name(rows: pa.Table, metric: str) -> pa.Table:
    """``rows`` in ``TABLE_SCHEMA`` with a one-name dictionary ``metric`` column (as readers build)."""
    n = rows.num_rows
    codes: np.ndarray[Any, np.dtype[np.int32]] = np.zeros(n, np.int32)
    column = pa.DictionaryArray.from_arrays(codes, pa.array([metric], pa.string()))
    return pa.Table.from_arrays(
        [rows.column("rank"), rows.column("step"), column, rows.column("value"), rows.column("wall_time")],
        schema=TABLE_SCHEMA,
    )
