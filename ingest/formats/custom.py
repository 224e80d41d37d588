"""User-defined text formats: a regex with named groups, saved by name, reusable from the CLI
(``--format custom:NAME``) and the upload page.

The regex is searched in each line; group ``step`` (required) is the step, optional ``rank`` the rank
and ``wall_time`` the time (seconds since the epoch, or a ``YYYY-MM-DD HH:MM:SS`` stamp); every other
named group is a metric, named by ``mapping[group]`` when given (a canonical or free metric name),
else by the group's own name through the alias table. Formats are stored one JSON file per format in a
folder the caller owns (the store passes ``<store>/formats/``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder, iter_line_chunks, parse_timestamps
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.numbers import parse_numbers, utf8_or_null
from ingest.formats.raw_text import decode_head, looks_binary
from stab_core.metrics import RUN_RANK, is_valid_metric_name

NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
SPECIAL_GROUPS: Final = ("step", "rank", "wall_time")
FORMAT_VERSION: Final = 1


@dataclass(frozen=True)
class CustomFormat:
    """A saved user format: its name, the regex and the group -> metric mapping."""

    name: str
    regex: str
    mapping: dict[str, str]

    def metric_of(self, group: str) -> tuple[str, str | None]:
        """Metric name (and unit implied by it) for a value group."""
        if group in self.mapping:
            return self.mapping[group], None
        return canonical_name(group)


def validate(name: str, regex: str, mapping: Mapping[str, str]) -> CustomFormat:
    """Check a user format; raise ``StabScopeError`` saying what is wrong."""
    if not NAME_RE.match(name) or ".." in name:
        raise StabScopeError(f"invalid format name {name!r}: use letters, digits, '_', '-', '.' (max 64, no '..')")
    try:
        compiled = re.compile(regex)
    except re.error as exc:
        raise StabScopeError(f"format {name!r}: the regex does not compile: {exc}") from exc
    groups = set(compiled.groupindex)
    if "step" not in groups:
        raise StabScopeError(f"format {name!r}: the regex needs a named group 'step', e.g. (?P<step>\\d+)")
    metric_groups = groups - set(SPECIAL_GROUPS)
    if not metric_groups:
        raise StabScopeError(f"format {name!r}: the regex needs at least one named value group besides 'step'")
    unknown = set(mapping) - metric_groups
    if unknown:
        raise StabScopeError(f"format {name!r}: mapping names groups the regex lacks: {', '.join(sorted(unknown))}")
    for group, metric in mapping.items():
        if not is_valid_metric_name(metric):
            raise StabScopeError(f"format {name!r}: {metric!r} (for group {group!r}) is not a valid metric name")
    return CustomFormat(name, regex, dict(mapping))


def _path_for(name: str, directory: Path) -> Path:
    directory = Path(directory)
    path = (directory / f"{name}.json").resolve()
    if path.parent != directory.resolve():
        raise StabScopeError(f"invalid format name {name!r}")
    return path


def save_custom_format(name: str, regex: str, mapping: Mapping[str, str], directory: Path) -> Path:
    """Validate and save a user format as ``<directory>/<name>.json``; returns the file's path."""
    fmt = validate(name, regex, mapping)
    Path(directory).mkdir(parents=True, exist_ok=True)
    path = _path_for(name, Path(directory))
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(
        json.dumps({"version": FORMAT_VERSION, "name": fmt.name, "regex": fmt.regex, "mapping": fmt.mapping}, indent=2),
        encoding="utf-8",
    )
    tmp.replace(path)
    return path


def load_custom_formats(directory: Path) -> dict[str, CustomRegexReader]:
    """Every saved format in ``directory`` by name (a missing folder holds none).

    A file that does not hold a valid format raises ``StabScopeError`` naming it.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    out: dict[str, CustomRegexReader] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            data: Any = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StabScopeError(f"unreadable custom format file ({exc})", path=str(path)) from exc
        if not isinstance(data, dict) or not isinstance(data.get("regex"), str):
            raise StabScopeError("expected {'name', 'regex', 'mapping'}", path=str(path))
        mapping = data.get("mapping") or {}
        if not isinstance(mapping, dict):
            raise StabScopeError("'mapping' must be an object", path=str(path))
        fmt = validate(str(data.get("name", path.stem)), data["regex"], {str(k): str(v) for k, v in mapping.items()})
        out[fmt.name] = CustomRegexReader(fmt)
    return out


class CustomRegexReader(Reader):
    """Reads lines with a user format's regex (compiled once, run over 4 MiB chunks)."""

    def __init__(self, fmt: CustomFormat) -> None:
        self.fmt = fmt
        self.name = "custom:" + fmt.name
        self.description = f"user format {fmt.name}: {fmt.regex}"
        self._line_re = re.compile(fmt.regex)
        self._chunk_re = re.compile(fmt.regex.encode(), re.M)
        self._groups = sorted(self._chunk_re.groupindex, key=self._chunk_re.groupindex.__getitem__)

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        lines = [ln for ln in decode_head(head).splitlines() if ln.strip()][:2000]
        if not lines:
            return 0.0
        hits = sum(1 for ln in lines if self._line_re.search(ln))
        return 0.0 if hits == 0 else 0.5 + 0.45 * hits / len(lines)

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        index = {g: i for i, g in enumerate(self._groups)}
        n_groups = self._chunk_re.groups
        for path in paths:
            builder.source(path)
            for chunk, first_line in iter_line_chunks(path, builder):
                matches = self._chunk_re.findall(chunk)
                nonblank = chunk.count(b"\n") - chunk.count(b"\n\n")
                if len(matches) < nonblank:
                    self._note_skipped(chunk, first_line, path, builder, nonblank - len(matches))
                self._account(chunk, first_line, path, builder, len(matches))
                if not matches:
                    continue
                if n_groups == 1:
                    matches = [(m,) for m in matches]
                cols = [utf8_or_null(pa.array(c, pa.binary())) for c in zip(*matches, strict=True)]
                group_cols = {g: cols[self._chunk_re.groupindex[g] - 1] for g in index}
                self._emit(group_cols, builder)

    def _emit(self, cols: dict[str, Any], builder: LogBuilder) -> None:
        step_conv = parse_numbers(cols["step"])
        ok_step = step_conv.ok & np.isfinite(step_conv.values)
        steps = np.where(ok_step, step_conv.values, -1).astype(np.int64)
        seq = np.arange(builder.reserve(len(steps)), builder.reserve(0), dtype=np.int64)
        rank: Any = RUN_RANK
        if "rank" in cols:
            rc = parse_numbers(cols["rank"])
            rank = np.where(rc.ok, rc.values, RUN_RANK).astype(np.int32)
        wall = None
        if "wall_time" in cols:
            wc = parse_numbers(cols["wall_time"])
            wall = np.where(wc.ok, wc.values, parse_timestamps(cols["wall_time"]))
        for group, col in cols.items():
            if group in SPECIAL_GROUPS:
                continue
            conv = parse_numbers(col)
            sel = conv.ok & ok_step
            if not sel.any():
                continue
            name, unit = self.fmt.metric_of(group)
            builder.add(
                name,
                steps[sel],
                conv.values[sel],
                rank=rank[sel] if isinstance(rank, np.ndarray) else rank,
                wall_time=None if wall is None else wall[sel],
                seq=seq[sel],
                unit=unit,
                canonical=group in self.fmt.mapping,
            )

    def _account(self, chunk: bytes, first_line: int, path: Path, builder: LogBuilder, n_matches: int) -> None:
        """The import report for one chunk: its lines that the regex matched are parsed; the others
        are blank, ignored by reason or suspect (:func:`~ingest.formats.accounting.classify_line`)."""
        lines = chunk.split(b"\n")[:-1]  # every chunk ends with its last line's newline
        account = builder.account
        account.unit = "lines"
        if n_matches >= len(lines):  # every line matched: nothing to classify
            account.add_read(len(lines), len(lines))
            return
        parsed = 0
        for i, line in enumerate(lines):
            if self._chunk_re.search(line):
                parsed += 1
            else:
                account.note_line(str(path), first_line + i, line.decode("utf-8", "replace"))
        account.add_read(len(lines), parsed)

    def _note_skipped(self, chunk: bytes, first_line: int, path: Path, builder: LogBuilder, count: int) -> None:
        builder.skipped += count
        if not builder.want_examples():
            return
        for i, line in enumerate(chunk.split(b"\n")):
            if not builder.want_examples():
                return
            if line.strip() and not self._chunk_re.search(line):
                text = line.decode("utf-8", "replace").strip()[:80]
                builder.skipped_examples.append((str(path), first_line + i, f"does not match {self.name}: {text}"))
