"""Readers for the logs people already have, auto-detected, mapped onto canonical metric names.

Public API::

    detect(paths, *, custom_dir=None) -> [(format name, confidence 0-1), ...]   best first
    read_log(paths, format=None, progress=None, *, custom_dir=None) -> ParsedLog
    FORMATS: name -> reader (``name``, ``description``, ``sniff(head, path)``, ``read(paths)``)

``format`` forces a reader (``"custom:NAME"`` for a saved user regex format, see
:mod:`ingest.formats.custom`). Ambiguous or unknown input raises ``StabScopeError`` listing the
candidates and how to force one; so does a file no reader can parse (with file and line).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Final

from ingest.errors import ReaderFailed, StabScopeError
from ingest.formats._common import TABLE_SCHEMA, ParsedLog, Progress
from ingest.formats.base import Reader
from ingest.formats.composer import ComposerReader
from ingest.formats.coqui_trainer import CoquiTrainerReader
from ingest.formats.csv_sweep import SweepCsvReader
from ingest.formats.csv_wide import WideCsvReader
from ingest.formats.deepspeed_csv import DeepSpeedCsvReader
from ingest.formats.deepspeed_stdout import DeepSpeedStdoutReader
from ingest.formats.detectron2 import Detectron2Reader
from ingest.formats.epoch_blocks import EpochBlockReader
from ingest.formats.espnet import EspnetReader
from ingest.formats.fairseq import FairseqReader
from ingest.formats.gan_console import GanConsoleReader
from ingest.formats.generic import GenericReader
from ingest.formats.gpt_neox import GptNeoXReader
from ingest.formats.hf_console import HFConsoleReader
from ingest.formats.hf_trainer_state import HFTrainerStateReader
from ingest.formats.icefall import IcefallReader
from ingest.formats.jax_console import JaxConsoleReader
from ingest.formats.jsonl import JsonlReader
from ingest.formats.keras_console import KerasConsoleReader
from ingest.formats.kv_console import KeyValueConsoleReader
from ingest.formats.kv_tables import KeyValueTableReader
from ingest.formats.lightning_csv import LightningCsvReader
from ingest.formats.llamafactory import LlamaFactoryReader
from ingest.formats.llmc import BuildNanogptConsoleReader, BuildNanogptLogReader, LlmcConsoleReader, LlmcMainLogReader
from ingest.formats.long_rows import LongRowsReader
from ingest.formats.maxtext import MaxTextReader
from ingest.formats.megatron import MegatronDeepSpeedReader, MegatronReader
from ingest.formats.megatron_golden import MegatronGoldenReader
from ingest.formats.mlflow import MlflowReader
from ingest.formats.modded_nanogpt import ModdedNanoGPTReader
from ingest.formats.mxnet_module import MxnetModuleReader
from ingest.formats.nanogpt import NanoGPTReader
from ingest.formats.nemo import NemoProgressReader, NemoTqdmReader
from ingest.formats.olmo import OlmoReader
from ingest.formats.openmmlab import OpenMMLabReader
from ingest.formats.paddle_hapi import PaddleHapiReader
from ingest.formats.parquet import ParquetReader
from ingest.formats.pix2pix_log import Pix2PixLossLogReader
from ingest.formats.pylog_epochs import PythonLoggingEpochReader
from ingest.formats.raw_text import clean_text, looks_binary, read_head
from ingest.formats.rl_console import VerlConsoleReader
from ingest.formats.scalar_json import ScalarJsonReader
from ingest.formats.stage_console import StageConsoleReader
from ingest.formats.tensorboard import TensorBoardReader
from ingest.formats.tensorboard_csv import TensorBoardCsvReader
from ingest.formats.textlog import TextLogReader
from ingest.formats.timm_console import TimmConsoleReader
from ingest.formats.torchtitan import TorchtitanReader
from ingest.formats.torchtune import TorchtuneReader
from ingest.formats.tqdm_postfix import TqdmPostfixReader
from ingest.formats.ultralytics import UltralyticsReader
from ingest.formats.wandb_csv import WandbCsvReader
from ingest.formats.wandb_history import WandbHistoryReader
from ingest.formats.wlm_console import WordLanguageModelReader
from ingest.formats.yolov5_results import Yolov5ResultsReader

__all__ = [
    "FALLBACK_READERS",
    "FORMATS",
    "TABLE_SCHEMA",
    "ParsedLog",
    "Reader",
    "detect",
    "read_log",
]

FORMATS: Final[dict[str, Reader]] = {
    r.name: r
    for r in (
        WideCsvReader(),
        TensorBoardCsvReader(),
        ScalarJsonReader(),
        WandbCsvReader(),
        LightningCsvReader(),
        SweepCsvReader(),
        DeepSpeedCsvReader(),
        JsonlReader(),
        WandbHistoryReader(),
        LlamaFactoryReader(),
        HFTrainerStateReader(),
        HFConsoleReader(),
        MegatronGoldenReader(),
        TensorBoardReader(),
        MegatronReader(),
        MegatronDeepSpeedReader(),
        LlmcMainLogReader(),
        LlmcConsoleReader(),
        BuildNanogptLogReader(),
        BuildNanogptConsoleReader(),
        ModdedNanoGPTReader(),
        TorchtitanReader(),
        MaxTextReader(),
        ComposerReader(),
        GptNeoXReader(),
        TorchtuneReader(),
        DeepSpeedStdoutReader(),
        FairseqReader(),
        OlmoReader(),
        NemoProgressReader(),
        NemoTqdmReader(),
        NanoGPTReader(),
        VerlConsoleReader(),
        JaxConsoleReader(),
        WordLanguageModelReader(),
        KerasConsoleReader(),
        PaddleHapiReader(),
        MxnetModuleReader(),
        OpenMMLabReader(),
        Detectron2Reader(),
        TimmConsoleReader(),
        EspnetReader(),
        IcefallReader(),
        KeyValueConsoleReader(),
        CoquiTrainerReader(),
        UltralyticsReader(),
        Yolov5ResultsReader(),
        GanConsoleReader(),
        PythonLoggingEpochReader(),
        Pix2PixLossLogReader(),
        KeyValueTableReader(),
        EpochBlockReader(),
        StageConsoleReader(),
        TqdmPostfixReader(),
        MlflowReader(),
        LongRowsReader(),
        ParquetReader(),
        GenericReader(),
    )
}
"""Every built-in reader, by name (the one table readers are registered in)."""

MIN_CONFIDENCE: Final = 0.3
"""Below this, a format is not a candidate."""
AMBIGUITY_MARGIN: Final = 0.1
"""Two candidates closer than this are ambiguous: the user must choose."""


FALLBACK_READERS: Final = frozenset({"csv_wide", "csv_sweep", "jsonl", "long_rows", "parquet", GenericReader.name})
"""The readers a log of a layout nobody wrote a reader for still meets (``reader_set=FALLBACK_READERS``
measures them alone: ``python -m bench.corpus_eval --fallback-only``): the generic text reader and the
metrics-file readers keyed on no trainer (a CSV with a step column, a CSV of one run per column, JSON Lines
or a JSON document of per-step objects, ``<step> <name> <value>`` records, Parquet). A reader keyed on one
trainer's or tool's banner, line layout, file name or column spelling (a TensorBoard or W&B download,
Lightning's metrics.csv, ``trainer_state.json``, ``| key | value |`` tables, ``Epoch: N`` blocks, every
console reader) is specific."""


def _readers(custom_dir: Path | None, reader_set: Collection[str] | None = None) -> dict[str, Reader]:
    readers = dict(FORMATS) if reader_set is None else {n: r for n, r in FORMATS.items() if n in reader_set}
    if custom_dir is not None:
        from ingest.formats.custom import load_custom_formats

        for name, reader in load_custom_formats(custom_dir).items():
            readers["custom:" + name] = reader
    return readers


HEAD_BYTES: Final = 256 * 1024
"""The head every path is sniffed from first."""
LONG_HEAD_BYTES: Final = 2 * 1024 * 1024
"""The head a file is sniffed from again when no format fits its first ``HEAD_BYTES``: banners,
argument dumps, nvidia-smi tables or a pasted config can fill those before the first metric line."""


def detect(
    paths: Sequence[Path], *, custom_dir: Path | None = None, reader_set: Collection[str] | None = None
) -> list[tuple[str, float]]:
    """Candidate formats for ``paths`` with a confidence (0-1), best first.

    Each path is sniffed from its first 256 KiB, or its first 2 MiB when nothing fits those (a
    folder from its file names); a format's confidence is its lowest over the paths, since one
    reader must read them all. Formats under ``MIN_CONFIDENCE`` are left out. ``reader_set`` names
    the built-in readers considered (None: all of them; custom formats are always considered), e.g.
    ``FALLBACK_READERS`` to see what a log of a layout no reader was written for gets.
    """
    readers = _readers(custom_dir, reader_set)
    scores: dict[str, float] = {}
    for path in (Path(p) for p in paths):
        found = _sniff(path, read_head(path, HEAD_BYTES), readers)
        if max(found.values(), default=0.0) < MIN_CONFIDENCE and _size_over(path, HEAD_BYTES):
            found = _sniff(path, read_head(path, LONG_HEAD_BYTES), readers)
        for name, score in found.items():
            scores[name] = min(scores.get(name, 1.0), score)
    ranked = sorted(((n, s) for n, s in scores.items() if s >= MIN_CONFIDENCE), key=lambda x: -x[1])
    return [(n, round(s, 3)) for n, s in ranked]


def _sniff(path: Path, head: bytes, readers: dict[str, Reader]) -> dict[str, float]:
    scores = {}
    for name, reader in readers.items():
        try:
            scores[name] = float(reader.sniff_path(path, head))
        except (OSError, ValueError, UnicodeDecodeError):
            scores[name] = 0.0
    return scores


def _size_over(path: Path, nbytes: int) -> bool:
    try:
        return path.is_file() and path.stat().st_size > nbytes
    except OSError:
        return False


def _check_paths(paths: Sequence[Path]) -> list[Path]:
    if not paths:
        raise StabScopeError("no input files given")
    out = []
    for p in (Path(x) for x in paths):
        if not p.exists():
            raise StabScopeError("no such file or folder", path=str(p))
        out.append(p)
    return out


def read_log(
    paths: Sequence[Path],
    format: str | None = None,
    progress: Progress | None = None,
    *,
    custom_dir: Path | None = None,
    step_key: str | None = None,
    reader_set: Collection[str] | None = None,
) -> ParsedLog:
    """Read one run from ``paths`` (files of one format: a log and its continuations, a folder).

    ``format`` forces a reader; otherwise the best detected one is used when it is unambiguous.
    ``progress(done_bytes, total_bytes)`` is called as the input is consumed. Input no reader
    recognises is read by the generic reader when it finds a step counter and metric pairs in it
    (:mod:`ingest.formats.generic`; ``meta['mapping']`` says what it took for what); ``step_key``
    is the user's choice of its step key (``--map KEY=step``). ``reader_set`` limits detection to
    those built-in readers (see :func:`detect`; a forced ``format`` is read whatever the set).
    Raises ``StabScopeError`` for unknown/ambiguous input (listing candidates and ``--format NAME``;
    its ``page_message`` says the same in the Upload page's words)
    and for a file that cannot be read (file, line or byte offset, what was expected).
    """
    checked = _check_paths(paths)
    readers = _readers(custom_dir, reader_set)
    if format == GenericReader.name:
        return _read(GenericReader(step_key), checked, progress)
    if format is not None:
        reader = readers.get(format)
        if reader is None:
            if format.startswith("custom:") and custom_dir is None:
                raise StabScopeError(f"custom format {format!r} needs the store's formats folder")
            known = ", ".join(sorted(readers))
            raise StabScopeError(f"unknown format {format!r}; known formats: {known}")
        return _read(reader, checked, progress)
    candidates = detect(checked, custom_dir=custom_dir, reader_set=reader_set)
    names = ", ".join(f"{n} ({c:.2f})" for n, c in candidates[:5])
    where = ", ".join(str(p) for p in checked[:3]) + (" ..." if len(checked) > 3 else "")
    if not candidates:
        if generic_reads(checked, custom_dir=custom_dir, step_key=step_key, reader_set=reader_set):
            return _read(GenericReader(step_key), checked, progress)
        raise _unrecognised(checked, readers)
    if len(candidates) > 1 and candidates[1][1] >= candidates[0][1] - AMBIGUITY_MARGIN:
        raise StabScopeError(
            f"{where}: ambiguous format, candidates: {names}; choose one with --format NAME",
            page=f"{where}: ambiguous format, candidates: {names}; choose one in the Format box",
        )
    return _read(readers[candidates[0][0]], checked, progress)


def _read(reader: Reader, paths: list[Path], progress: Progress | None) -> ParsedLog:
    """``reader.read``; anything else than a ``StabScopeError`` it raises (a reader's bug, an
    unreadable file) becomes one that names the file and the reader, so the CLI and the Upload page
    show a sentence, never a bare exception name."""
    try:
        return reader.read(paths, progress)
    except StabScopeError:
        raise
    except Exception as exc:
        what = " ".join(str(exc).split())[:300]
        raise ReaderFailed(
            f"the {reader.name} reader failed on this file ({type(exc).__name__}: {what}); "
            "please report it with the file; --format NAME forces another reader",
            path=str(paths[0]),
            page=f"the {reader.name} reader failed on this file ({type(exc).__name__}: {what}); "
            "please report it with the file; the Format box forces another reader",
        ) from exc


def generic_reads(
    paths: Sequence[Path],
    *,
    custom_dir: Path | None = None,
    step_key: str | None = None,
    reader_set: Collection[str] | None = None,
) -> bool:
    """Whether the generic reader reads ``paths``, which no format recognises: every file has its step
    counter and metric pairs, and no known format's line (of ``reader_set``'s readers, see
    :func:`detect`) stands behind text its reader does not take on half the lines the generic reader
    would read or more (that input is refused with the format named, so the user learns what is in
    the way)."""
    checked = [Path(p) for p in paths]
    if not checked:
        return False
    generic = GenericReader(step_key)
    proposals = [generic.proposal(read_head(p, LONG_HEAD_BYTES)) if p.is_file() else None for p in checked]
    close = max((n for n, _ in _near_misses(checked[0], _readers(custom_dir, reader_set))), default=0)
    return all(proposals) and close * 2 < min(p.lines for p in proposals if p is not None)


def _unrecognised(paths: list[Path], readers: dict[str, Reader]) -> StabScopeError:
    """The error for input no reader recognises: the first file and line, and how to force one."""
    formats = ", ".join(sorted(readers))
    per_file = _per_file_best(paths)
    if per_file:
        return StabScopeError(
            f"the files are of different formats ({per_file}): import them separately, "
            f"or force one with --format NAME (formats: {formats})",
            page=f"the files are of different formats ({per_file}): upload them separately, "
            "or choose one in the Format box",
        )
    first = paths[0]
    line_no, excerpt = 1, ""
    head = read_head(first, 64 * 1024)
    if head and not looks_binary(head):
        for i, raw in enumerate(head.split(b"\n")[:1000], start=1):
            text = clean_text(raw).decode("utf-8", "replace").strip()
            if text:
                line_no, excerpt = i, text[:80]
                break
    what = f"{excerpt!r} is not a line of any known log format" if excerpt else "no known log format"
    closest = closest_formats(first, readers)
    return StabScopeError(
        f"format not recognised: {what}; {closest}; force one with --format NAME (formats: {formats})",
        path=str(first),
        line=line_no if excerpt else None,
        page=f"format not recognised: {what}; {closest}; choose the format in the Format box",
    )


CLOSEST_SHOWN: Final = 3


def closest_formats(path: Path, readers: dict[str, Reader] | None = None) -> str:
    """Which formats came closest to ``path``'s head and why, one clause (for a refusal): each text
    reader counts the head lines that hold its metric line after text it does not expect."""
    head = read_head(path, LONG_HEAD_BYTES if _size_over(path, HEAD_BYTES) else HEAD_BYTES)
    shown = [why for _, why in _near_misses(path, readers, head)[:CLOSEST_SHOWN]]
    if not shown:
        n_lines = sum(1 for line in head.splitlines() if line.strip())
        return f"no format came close: none of the {n_lines:,} head lines holds any reader's metric line"
    return "closest: " + "; ".join(shown)


def _near_misses(
    path: Path, readers: dict[str, Reader] | None = None, head: bytes | None = None
) -> list[tuple[int, str]]:
    """``(head lines, why)`` for each text format that came close to ``path``'s head (its metric line
    after text it does not take), closest first; empty when none did."""
    if head is None:
        head = read_head(path, LONG_HEAD_BYTES if _size_over(path, HEAD_BYTES) else HEAD_BYTES)
    if not head or path.is_dir():
        return []
    misses = [reader.near_miss(head) for reader in (readers or FORMATS).values() if isinstance(reader, TextLogReader)]
    misses.sort(key=lambda m: -m[0])
    return [(closeness, text) for closeness, text in misses if closeness > 0]


def _per_file_best(paths: list[Path]) -> str:
    """'file: best format' for inputs that mix formats (empty when fewer than two files fit one)."""
    parts = []
    for p in paths:
        best = detect([p])
        if best:
            parts.append(f"{p.name}: {best[0][0]}")
    return "; ".join(parts) if len(parts) > 1 else ""
