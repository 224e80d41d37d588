"""Goal 2: importing foreign logs. TensorBoard event files against TensorBoard's own Python loader
(``EventAccumulator``, keeping every scalar) and RustBoard's published ~1.5M scalars/s; wide CSV, JSON
Lines and a Megatron-LM text log against the pyarrow ceiling on the same records (read + zstd Parquet).
The text log has two ceilings: pyarrow reading the same values written as a wide CSV (the issue's,
about 5x fewer bytes than the log) and pyarrow reading the log's own bytes, split on ``|`` into string
columns (``pyarrow_log_ceiling``). Each repeat runs the ceilings and ours in turn.

Ours is ``ingest.formats.read_log`` (detection skipped: the format is given): parse, validate (CRCs
for event files), map names, build the long Arrow table. Storing it is goal 1's business; the end to
end ``stabscope import`` rate is reported alongside for the event file.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench import Figure, Sizes, Unavailable, generic_console, log, median, run_child
from bench.data import LogInputs, log_inputs, spike_steps

RUSTBOARD_SCALARS_PER_S = 1.5e6
"""RustBoard's load rate on this kind of machine (issue 8), not measurable here (no Rust toolchain)."""


# ------------------------------------------------------------------------------- child targets


def ours_read_log(path: str, fmt: str) -> dict[str, Any]:
    try:
        from ingest.formats import read_log
    except ImportError as exc:
        raise Unavailable(f"ingest.formats not available yet ({exc})") from exc
    import numpy as np
    import pyarrow as pa

    # library initialisation, as imports are: pyarrow imports pandas on its first conversion from
    # numpy (0.15-0.2 s here), which the ceilings never make and a running app has long done
    pa.array(np.zeros(1))
    from ingest.formats import textlog_pipes

    start = time.perf_counter()
    parsed = read_log([Path(path)], format=fmt)
    seconds = time.perf_counter() - start
    engine = "the C extension" if textlog_pipes.C_EXTENSION_BUILT else "numpy/Arrow (the C extension is not built)"
    return {"seconds": seconds, "records": parsed.table.num_rows, "skipped": parsed.skipped, "engine": engine}


def ours_import(path: str, fmt: str, store: str) -> dict[str, Any]:
    """``stabscope import`` into a fresh store: parse, stage, merge, rollups and analyses."""
    import shutil

    from ingest.importing.importer import import_logs
    from ingest.services.run_analyses import open_analysed_store

    shutil.rmtree(store, ignore_errors=True)
    start = time.perf_counter()
    out = import_logs(open_analysed_store(store), [Path(path)], run="imported", fmt=fmt)
    seconds = time.perf_counter() - start
    shutil.rmtree(store, ignore_errors=True)
    return {"seconds": seconds, "records": out[0]["rows"]}


def pyarrow_ceiling(path: str, kind: str, target: str) -> dict[str, Any]:
    """pyarrow reads ``path`` (``csv`` or ``jsonl``) and writes zstd Parquet; records = non-null
    values outside the step/rank/wall-time columns (or rows, for a long table)."""
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson
    import pyarrow.parquet as pq

    start = time.perf_counter()
    table = pcsv.read_csv(path) if kind == "csv" else pjson.read_json(path)
    pq.write_table(table, target, compression="zstd")
    seconds = time.perf_counter() - start
    Path(target).unlink()
    if "metric" in table.column_names:
        records = table.num_rows
    else:
        records = sum(table.num_rows - table.column(c).null_count for c in table.column_names if c != "step")
    return {"seconds": seconds, "records": records}


def pyarrow_log_ceiling(path: str, target: str) -> dict[str, Any]:
    """The same-bytes ceiling of a text log: pyarrow's CSV reader splits the log file itself on ``|``
    (no quoting, every column a string, no header) and the table is written as zstd Parquet. Nothing
    is parsed into numbers, so this is a floor on the cost of merely touching the log's bytes in C++.
    Records = non-blank cells outside the first column (for a Megatron ``iteration`` line: its values)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    with open(path, "rb") as f:
        first = f.readline()
    n_cols = first.count(b"|") + 1
    names = [f"f{i}" for i in range(n_cols)]
    start = time.perf_counter()
    table = pcsv.read_csv(
        path,
        read_options=pcsv.ReadOptions(column_names=names),
        parse_options=pcsv.ParseOptions(delimiter="|", quote_char=False, double_quote=False, escape_char=False),
        convert_options=pcsv.ConvertOptions(
            column_types=dict.fromkeys(names, pa.string()), strings_can_be_null=False, quoted_strings_can_be_null=False
        ),
    )
    pq.write_table(table, target, compression="zstd")
    seconds = time.perf_counter() - start
    Path(target).unlink()
    records = sum(
        int(pc.sum(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(table.column(c))), 0)).as_py() or 0)
        for c in names[1:]
    )
    return {"seconds": seconds, "records": records}


def event_accumulator(path: str, keep_all: bool, spike_at: list[int]) -> dict[str, Any]:
    """TensorBoard's loader: every scalar (``size_guidance`` 0) or its default (10,000 per tag,
    reservoir-sampled); how many of the loss spikes it kept."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    guidance = {ea.SCALARS: 0} if keep_all else ea.DEFAULT_SIZE_GUIDANCE
    start = time.perf_counter()
    acc = ea.EventAccumulator(path, size_guidance=guidance)
    acc.Reload()
    seconds = time.perf_counter() - start
    tags = acc.Tags()["scalars"]
    scalars = sum(len(acc.Scalars(t)) for t in tags)
    kept_steps = {e.step for e in acc.Scalars("train/loss")}
    return {"seconds": seconds, "records": scalars, "spikes_kept": sum(s in kept_steps for s in spike_at)}


# ------------------------------------------------------------------------------- the goal


def _rates(entry: str, repeats: int, args: dict[str, Any]) -> tuple[list[float], list[float], dict[str, Any]]:
    rates, rss, last = [], [], {}
    for _ in range(repeats):
        child = run_child(entry, args)
        rates.append(child.result["records"] / child.result["seconds"])
        rss.append(child.peak_rss_mb)
        last = child.result
    return rates, rss, last


def _interleaved(
    entries: dict[str, tuple[str, dict[str, Any]]], repeats: int
) -> dict[str, tuple[list[float], list[float], dict[str, Any]]]:
    """``_rates`` of several entries, one repeat of each in turn (a machine that gets busier slows
    them all alike)."""
    out: dict[str, tuple[list[float], list[float], dict[str, Any]]] = {k: ([], [], {}) for k in entries}
    for _ in range(repeats):
        for key, (entry, args) in entries.items():
            rates, rss, _ = out[key]
            child = run_child(entry, args)
            rates.append(child.result["records"] / child.result["seconds"])
            rss.append(child.peak_rss_mb)
            out[key] = (rates, rss, child.result)
    return out


def run(sizes: Sizes, workdir: Path) -> list[Figure]:
    log(f"goal 2: inputs {sizes.import_steps:,} steps, event file {sizes.tb_steps:,} steps x 8 tags")
    inputs = log_inputs(workdir, sizes.import_steps, sizes.tb_steps)
    figures = tensorboard_figures(sizes, workdir, inputs)
    scratch = str(workdir / "ceiling.parquet")
    cases = [
        ("wide CSV", "csv_wide", inputs.wide_csv, inputs.wide_csv, "csv"),
        ("JSON Lines", "jsonl", inputs.jsonl, inputs.jsonl, "jsonl"),
        ("Megatron-LM text log", "megatron", inputs.megatron, inputs.megatron_csv, "csv"),
    ]
    for label, fmt, path, same_records, kind in cases:
        log(f"goal 2: {label}")
        text_log = same_records != path
        entries = {
            "ceiling": ("bench.imports:pyarrow_ceiling", {"path": str(same_records), "kind": kind, "target": scratch}),
            "ours": ("bench.imports:ours_read_log", {"path": str(path), "fmt": fmt}),
        }
        if text_log:
            entries["bytes"] = ("bench.imports:pyarrow_log_ceiling", {"path": str(path), "target": scratch})
        runs = _interleaved(entries, sizes.repeats)
        (ceiling, ceiling_rss, _), (ours, ours_rss, last) = runs["ceiling"], runs["ours"]
        ratio = median(ours) / median(ceiling)
        size = f"{last['records']:,} records, {path.stat().st_size / 1e6:.0f} MB"
        baseline = f"pyarrow {kind} -> zstd Parquet (same file)"
        note = f"{size}; ceiling peak RSS {median(ceiling_rss):.0f} MiB"
        if text_log:
            same_bytes, bytes_rss, _ = runs["bytes"]
            bytes_ratio = median(ours) / median(same_bytes)
            csv_mb = same_records.stat().st_size / 1e6
            baseline = f"pyarrow csv -> zstd Parquet (the same values as CSV, {csv_mb:.0f} MB)"
            note = (
                f"{size}. Two ceilings, both pyarrow -> zstd Parquet: (a) the same values written as a wide CSV "
                f"({csv_mb:.0f} MB, ~{path.stat().st_size / max(1, same_records.stat().st_size):.1f}x fewer bytes, "
                f"numbers parsed): {median(ceiling) / 1e6:.1f}M records/s, ours {ratio:.2f}x; (b) the log file's own "
                f"bytes split on '|' into string columns (nothing parsed): {median(same_bytes) / 1e6:.1f}M "
                f"records/s, ours {bytes_ratio:.2f}x. Ceiling peak RSS (a) {median(ceiling_rss):.0f} MiB, "
                f"(b) {median(bytes_rss):.0f} MiB. '|' layouts cut and parsed by {last['engine']}"
            )
        figures.append(
            Figure(
                "2",
                f"read_log {label} ({fmt})",
                median(ours),
                "records/s",
                baseline,
                median(ceiling),
                ratio,
                ">= 0.5x ceiling",
                ratio >= 0.5,
                median(ours_rss),
                sizes.repeats,
                note,
                samples=ours,
            )
        )
        if not text_log:
            continue
        figures.append(
            Figure(
                "2",
                f"read_log {label} ({fmt}) vs the same bytes",
                median(ours),
                "records/s",
                "pyarrow csv of the log itself ('|'-split strings) -> zstd Parquet",
                median(same_bytes),
                bytes_ratio,
                "reference (the issue's target is against the CSV of the same values)",
                None,
                median(ours_rss),
                sizes.repeats,
                note,
                samples=ours,
            )
        )
    figures.append(launcher_prefix_figure(sizes, inputs.megatron))
    figures.append(generic_console.figure(sizes, workdir))
    log("goal 2: long CSV ceiling")
    long_rates, long_rss, _ = _rates(
        "bench.imports:pyarrow_ceiling", sizes.repeats, {"path": str(inputs.long_csv), "kind": "csv", "target": scratch}
    )
    figures.append(
        Figure(
            "2",
            "pyarrow ceiling: long CSV -> zstd Parquet",
            median(long_rates),
            "records/s",
            peak_rss_mb=median(long_rss),
            repeats=sizes.repeats,
            note="reference only: no trainer writes long CSV, so StabScope has no reader for it",
            samples=long_rates,
        )
    )
    return figures


LAUNCHER_PREFIX = b"[default0]:"
"""What ``torchrun --tee 3`` puts before each line of rank 0 (issue #21: prefixed logs must read
within 1.5x of the same log without prefixes)."""


def launcher_prefix_figure(sizes: Sizes, megatron: Path) -> Figure:
    """read_log of the Megatron log with every line behind ``[default0]:`` against the same log bare
    (the same run, one repeat of each in turn)."""
    prefixed = megatron.with_name("megatron-default0.log")
    if not prefixed.exists():
        scratch = prefixed.with_suffix(".part")
        with open(megatron, "rb") as src, open(scratch, "wb") as dst:
            dst.writelines(LAUNCHER_PREFIX + line for line in src)
        scratch.rename(prefixed)
    log("goal 2: Megatron-LM text log behind a launcher prefix")
    runs = _interleaved(
        {
            "bare": ("bench.imports:ours_read_log", {"path": str(megatron), "fmt": "megatron"}),
            "prefixed": ("bench.imports:ours_read_log", {"path": str(prefixed), "fmt": "megatron"}),
        },
        sizes.repeats,
    )
    (bare, _, _), (ours, ours_rss, last) = runs["bare"], runs["prefixed"]
    ratio = median(ours) / median(bare)
    lines = last["records"] // 9
    return Figure(
        "2",
        "read_log Megatron-LM text log behind [default0]: (megatron)",
        median(ours),
        "records/s",
        "the same log without the prefix",
        median(bare),
        ratio,
        ">= 0.67x (within 1.5x of the bare log's time)",
        ratio >= 1 / 1.5,
        median(ours_rss),
        sizes.repeats,
        f"{lines:,} lines, {prefixed.stat().st_size / 1e6:.0f} MB; '|' layouts cut and parsed by {last['engine']}",
        samples=ours,
    )


def tensorboard_figures(sizes: Sizes, workdir: Path, inputs: LogInputs) -> list[Figure]:
    log("goal 2: TensorBoard event file")
    path = str(inputs.tfevents)
    spikes = spike_steps(inputs.tb_steps)
    ours, ours_rss, last = _rates("bench.imports:ours_read_log", sizes.repeats, {"path": path, "fmt": "tensorboard"})
    theirs, theirs_rss, _ = _rates(
        "bench.imports:event_accumulator", sizes.repeats, {"path": path, "keep_all": True, "spike_at": spikes}
    )
    stored, stored_rss, _ = _rates(
        "bench.imports:ours_import",
        sizes.repeats,
        {"path": path, "fmt": "tensorboard", "store": str(workdir / "store-import")},
    )
    ratio = median(ours) / median(theirs)
    size_mb = inputs.tfevents.stat().st_size / 2**20
    return [
        Figure(
            "2",
            "TensorBoard EventAccumulator (all scalars kept)",
            median(theirs),
            "scalars/s",
            peak_rss_mb=median(theirs_rss),
            repeats=sizes.repeats,
            note=f"{inputs.tb_records:,} scalars, one {size_mb:.0f} MiB event file",
            samples=theirs,
        ),
        Figure(
            "2",
            "read_log TensorBoard event file (CRCs checked)",
            median(ours),
            "scalars/s",
            "EventAccumulator",
            median(theirs),
            ratio,
            f">= {RUSTBOARD_SCALARS_PER_S / 1e6:.1f}M/s (RustBoard) and >= 20x EventAccumulator",
            median(ours) >= RUSTBOARD_SCALARS_PER_S and ratio >= 20,
            median(ours_rss),
            sizes.repeats,
            f"{last['records']:,} records",
            samples=ours,
        ),
        Figure(
            "2",
            "stabscope import of the event file (parse + store + analyses)",
            median(stored),
            "scalars/s",
            "EventAccumulator",
            median(theirs),
            median(stored) / median(theirs),
            "",
            None,
            median(stored_rss),
            sizes.repeats,
            samples=stored,
        ),
    ]
