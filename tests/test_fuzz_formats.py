"""Fuzzed input over every registered importer (issue #23): mutations of a valid sample of each format.

Each of ``ingest.formats.FORMATS`` gets a small valid sample (``tests.fuzz_samples``) damaged by one
to three mutations: cut at a byte, bits flipped, junk and binary lines inserted, a 10^6-character
line, CRLF line ends, UTF-16 and Latin-1 re-encodings, NaN/Inf/empty values, decreasing and
duplicate steps. The property: the input is read with its bad records counted (the rows stay one
per (metric, rank, step), sorted), or refused with one ``StabScopeError`` that names the file,
where in it (a line or a byte offset) or why the whole file is refused, and what was expected.
Never another exception type (a traceback).

Most examples are read in memory the way ``stabscope import`` reads them (``read_inputs``), with
the format detected or forced; a seeded few per format go through the real ``stabscope import``
into a store that already holds another run and a run of the same name: a refused import changes
nothing in the store (every run compared row for row before and after, no file left behind), an
accepted one leaves the other run as it was.

``STABSCOPE_FUZZ_EXAMPLES`` (default 200) and ``STABSCOPE_FUZZ_STORE_EXAMPLES`` (default 10) raise
the examples per format locally; the examples are derandomised, so CI runs the same ones each time.

This module holds the checks over all formats at once (a sample each, the long line, the gzip bomb);
the two fuzzers per format run in ``tests/test_fuzz_formats_1.py`` ... ``_4.py``, a quarter of the
formats each (``tests.fuzz_checks``), so that CI's workers share them.
"""

from __future__ import annotations

import gzip
import tempfile
import time
from pathlib import Path

import pytest

from ingest.errors import StabScopeError
from ingest.formats import FORMATS, read_log
from ingest.importing.import_inputs import read_inputs
from tests.conftest import TIERS
from tests.fuzz_checks import FUZZ_GROUPS, baseline, formats_in_group, pytestmark, read_mutated
from tests.fuzz_samples import SAMPLES, apply_mutation

__all__ = ["pytestmark"]  # the fuzz suite's marks (tests/fuzz_checks.py)


def test_every_registered_format_has_a_valid_sample() -> None:
    assert list(SAMPLES) == list(FORMATS)
    for name, sample in SAMPLES.items():
        with tempfile.TemporaryDirectory() as tmp:
            parsed = read_log([sample.write(Path(tmp))])
        assert parsed.format == name
        assert parsed.table.num_rows >= 8, name


def test_the_fuzz_groups_hold_every_format_once_each_in_a_module_of_the_system_tier() -> None:
    grouped = [name for group in range(1, FUZZ_GROUPS + 1) for name in formats_in_group(group)]
    assert sorted(grouped) == sorted(FORMATS) and len(set(grouped)) == len(grouped)
    here = Path(__file__).parent
    for group in range(1, FUZZ_GROUPS + 1):
        assert (here / f"test_fuzz_formats_{group}.py").is_file(), group
        assert TIERS[f"fuzz_formats_{group}"] == "system", group
    assert not (here / f"test_fuzz_formats_{FUZZ_GROUPS + 1}.py").exists()


@pytest.mark.parametrize("name", list(FORMATS))
def test_a_million_character_line_is_read_or_refused(name: str) -> None:
    """A 10^6-character line first (detected: the head is that line) and mid-file (forced)."""
    sample = SAMPLES[name]
    base = baseline(name)
    for where, forced in ((0.0, False), (0.5, True)):
        data = apply_mutation(sample.files[sample.target], "long_line", where, 0.0, 0)
        started = time.perf_counter()
        parsed, _ = read_mutated(name, data, forced=forced)
        assert time.perf_counter() - started < 30
        if parsed is not None and forced:
            assert parsed.skipped > base.skipped, f"the long line was not counted: {parsed.skipped} skipped"


# --------------------------------------------------------------------------- compressed input

GZIP_EXPANDED_BYTES = 64 * 1024**2


def test_a_gzip_bomb_is_refused_without_being_expanded(tmp_path: Path) -> None:
    """The importer reads no compressed input (no reader decompresses .gz/.zst/.zip): a few KB that
    would expand to 64 MiB of log lines are refused as a binary file, promptly, naming it."""
    line = b'{"step": 1, "loss": 2.0}\n'
    bomb = tmp_path / "metrics.jsonl.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        for _ in range(GZIP_EXPANDED_BYTES // (len(line) * 4096)):
            f.write(line * 4096)
    assert bomb.stat().st_size < 512 * 1024
    started = time.perf_counter()
    with pytest.raises(StabScopeError) as refused:
        read_inputs([bomb])
    assert time.perf_counter() - started < 30
    message = str(refused.value)
    assert str(bomb) in message and "format not recognised" in message, message
