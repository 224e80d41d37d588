"""Uploaded files on the Upload page: safe names, a private staging folder, a default run name, and the
preview's per-metric summary of what was read."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from ingest.errors import StabScopeError

MAX_UPLOAD_BYTES = 200 * 1024**2
"""Largest total upload accepted (bytes); matches ``server.maxUploadSize`` in .streamlit/config.toml."""
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
STAGING_PREFIX = "stabscope-upload-"
"""Name prefix of the staging folders in the temporary directory."""
STALE_STAGING_S = 3600.0
"""Age (seconds since last modified) past which a staging folder is a session's leftover: a viewer who
closed the page without importing leaves one, removed at the next upload."""


def safe_filename(name: str, fallback: str = "upload") -> str:
    """A browser-supplied file name reduced to a plain base name: no folders, no ``..``, no leading dot,
    only letters, digits and ``._-`` (at most 128 characters)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    cleaned = _UNSAFE_CHARS.sub("_", base).lstrip(".")
    while ".." in cleaned:
        cleaned = cleaned.replace("..", ".")
    return cleaned[-128:] or fallback


def stage_uploads(files: Sequence[tuple[str, bytes]]) -> list[Path]:
    """Write uploaded ``(name, bytes)`` pairs into a new private (0700) temporary folder under safe,
    unique names; the caller removes the folder (``shutil.rmtree(paths[0].parent)``)."""
    total = sum(len(data) for _, data in files)
    if total > MAX_UPLOAD_BYTES:
        raise StabScopeError(
            f"the upload is {total / 1024**2:.1f} MiB; the limit is {MAX_UPLOAD_BYTES / 1024**2:.0f} MiB "
            "(import bigger logs with `stabscope import FILE`)"
        )
    remove_stale_staging()
    folder = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX))
    paths: list[Path] = []
    for i, (name, data) in enumerate(files):
        target = folder / safe_filename(name, f"upload-{i}")
        if target.exists():
            target = folder / f"{i}-{target.name}"
        target.write_bytes(data)
        paths.append(target)
    return paths


def remove_stale_staging(temp_dir: Path | None = None, max_age_s: float = STALE_STAGING_S) -> list[Path]:
    """Remove this user's staging folders in ``temp_dir`` (default: the temporary directory) last
    modified more than ``max_age_s`` seconds ago; returns those removed. A link or a folder of another
    user with the same prefix is left alone."""
    root = Path(temp_dir or tempfile.gettempdir())
    cutoff = time.time() - max_age_s
    removed: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(STAGING_PREFIX):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mtime > cutoff:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def upload_run_name(filename: str) -> str:
    """A default run name from an uploaded file's name (its stem, made a valid run name)."""
    from ingest.importing.importer import default_run_name

    return default_run_name([Path(safe_filename(filename)).with_suffix("")])


def parsed_summary(parsed: Any) -> pd.DataFrame:
    """Per metric of a ``ParsedLog``: rows, ranks, first/last step, min/max finite value, non-finite count."""
    columns = ["metric", "rows", "ranks", "first step", "last step", "min", "max", "non-finite"]
    table = parsed.table.select(["rank", "step", "metric", "value"]).to_pandas()
    if table.empty:
        return pd.DataFrame(columns=columns)
    table["finite"] = table["value"].where(np.isfinite(table["value"]))
    table["nonfinite"] = ~np.isfinite(table["value"])
    grouped = table.groupby("metric", observed=True)  # a categorical column from read_log's dictionary
    out = pd.DataFrame(
        {
            "rows": grouped.size(),
            "ranks": grouped["rank"].nunique(),
            "first step": grouped["step"].min(),
            "last step": grouped["step"].max(),
            "min": grouped["finite"].min(),
            "max": grouped["finite"].max(),
            "non-finite": grouped["nonfinite"].sum().astype(int),
        }
    )
    return out.reset_index()[columns]
