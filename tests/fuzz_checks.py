"""The fuzz suite's inputs, properties and the tests run per format (issue #23; tests/test_fuzz_formats.py
says what is fuzzed and why).

The per-format tests here, the in-memory fuzzer and the one through ``stabscope import``, are run by
``tests/test_fuzz_formats_1.py`` ... ``_4.py`` (``FUZZ_GROUPS``), each on every fourth registered format:
one module per group, so that CI's ``--dist loadfile`` spreads the suite over its workers (one module
holding every format ran for minutes on one worker). Each group module takes this module's names
(``__all__``): the tests, their fixture, the marks and the hook that picks the group's formats.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ingest.errors import StabScopeError
from ingest.formats import FORMATS, TABLE_SCHEMA, ParsedLog
from ingest.importing.import_inputs import read_inputs
from tests.fuzz_samples import MUTATIONS, SAMPLES, Sample, apply_mutation

__all__ = [
    "pytest_generate_tests",
    "pytestmark",
    "template_stores",
    "test_import_of_mutated_input_into_a_store_changes_nothing_when_refused",
    "test_mutated_input_is_read_or_refused_with_one_message",
]

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("error::RuntimeWarning")]

EXAMPLES = int(os.environ.get("STABSCOPE_FUZZ_EXAMPLES", "200"))
STORE_EXAMPLES = int(os.environ.get("STABSCOPE_FUZZ_STORE_EXAMPLES", "10"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_fraction = st.floats(min_value=0.0, max_value=1.0, exclude_max=True, allow_nan=False)
# the 10^6-character line is drawn rarely (it costs a detection pass over 1 MB, ~15x an ordinary
# example): the other kinds 8 times each in the pool; every format also gets it in
# test_a_million_character_line_is_read_or_refused
_KINDS = [kind for kind in MUTATIONS if kind != "long_line"] * 8 + ["long_line"]
MUTATION = st.tuples(st.sampled_from(_KINDS), _fraction, _fraction, st.integers(0, 1000))
MUTATION_LISTS = st.lists(MUTATION, min_size=1, max_size=3)

LOCATION = re.compile(r"line \d|byte [\d,]+|offset [\d,]+|row group \d|record \d")
"""How a refusal says where in the file it stops being the format."""
WHOLE_FILE = re.compile(
    r"ambiguous format|format not recognised|no metrics found|no metric records|empty|not a readable Parquet file"
    r"|no .* file found|different formats|MLflow run"
)
"""Refusals about the file as a whole (nothing in it is the format, or several formats fit it)."""


def mutated(sample: Sample, mutations: list[tuple[str, float, float, int]]) -> bytes:
    data = sample.files[sample.target]
    for kind, a, b, choice in mutations:
        data = apply_mutation(data, kind, a, b, choice)
    return data


def assert_refusal(exc: StabScopeError, root: Path, sample: Sample) -> None:
    """One paragraph naming the file, where in it (or why the whole file), and what was expected."""
    message = str(exc)
    assert not re.search(r'\n\s*File "', message), f"a traceback in the message: {message}"
    assert "\n" not in message.strip(), f"more than one paragraph: {message}"
    named = {str(root / sample.target), str(root / sample.given), sample.target, Path(sample.target).name}
    assert any(name in message for name in named), f"the refusal names no input file: {message}"
    assert LOCATION.search(message) or WHOLE_FILE.search(message), f"the refusal says not where: {message}"
    assert len(message) > len(str(root)) + 20, message


def assert_well_formed(parsed: ParsedLog) -> None:
    """A read result the store can take: the canonical schema, rows, one per (metric, rank, step),
    each series sorted by step, and every skipped record counted with at most five examples."""
    assert parsed.table.schema.equals(TABLE_SCHEMA), parsed.table.schema
    assert parsed.table.num_rows > 0
    assert parsed.skipped >= len(parsed.skipped_examples) >= 0
    assert len(parsed.skipped_examples) <= 5
    for file, where, reason in parsed.skipped_examples:
        assert isinstance(file, str) and file and where >= 0 and reason, (file, where, reason)
    table = parsed.table
    metric = np.asarray(pa.compute.cast(table["metric"], pa.string()).to_pylist(), dtype=object)
    rank = table["rank"].to_numpy()
    step = table["step"].to_numpy()
    keys = {(m, r) for m, r in zip(metric.tolist(), rank.tolist(), strict=True)}
    for m, r in keys:
        sel = (metric == m) & (rank == r)
        steps = step[sel]
        assert np.all(steps[1:] > steps[:-1]), f"{m} rank {r}: steps not strictly rising"


Answer = tuple[ParsedLog | None, StabScopeError | None]
_ANSWERS: list[dict[tuple[str, bytes, bool], Answer]] = []
"""The answers of ``each_input_read_once`` (one dict while it is open), by (format, SHA-256 of the
input, forced)."""


@contextlib.contextmanager
def each_input_read_once() -> Iterator[None]:
    """While open, ``read_mutated`` reads an input it has read before (the same bytes, forced or not)
    only once and gives its first answer again. Hypothesis draws the same input again and again: two
    mutation lists that place a line at nearby fractions damage the file alike, and of a format's 200
    examples about 130 are distinct (the repeats are short inputs: about 5 % of the fuzzer's CPU; see
    docs/performance.md). The readers are deterministic, so a repeat could only give the same answer;
    every example still runs its own checks on that answer. A read that fails is not kept:
    hypothesis's replay of it reads it again."""
    _ANSWERS.append({})
    try:
        yield
    finally:
        _ANSWERS.pop()


def read_mutated(name: str, data: bytes, *, forced: bool) -> Answer:
    if not _ANSWERS:
        return _read_mutated(name, data, forced=forced)
    key = (name, hashlib.sha256(data).digest(), forced)
    if key not in _ANSWERS[-1]:
        parsed, error = _read_mutated(name, data, forced=forced)
        # the answer without its traceback, whose frames hold the input (up to 3 MB)
        _ANSWERS[-1][key] = (parsed, error.with_traceback(None) if error is not None else None)
    return _ANSWERS[-1][key]


def _read_mutated(name: str, data: bytes, *, forced: bool) -> Answer:
    sample = SAMPLES[name]
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        root = Path(tmp)
        given = sample.write(root, data)
        try:
            read = read_inputs([given], fmt=name if forced else None)
        except StabScopeError as exc:
            assert_refusal(exc, root, sample)
            return None, exc
        assert_well_formed(read.parsed)
        return read.parsed, None


BASELINES: dict[str, ParsedLog] = {}


def baseline(name: str) -> ParsedLog:
    if name not in BASELINES:
        sample = SAMPLES[name]
        parsed, error = read_mutated(name, sample.files[sample.target], forced=True)
        assert parsed is not None, error
        BASELINES[name] = parsed
    return BASELINES[name]


FUZZ_GROUPS = 4
"""The per-format tests run in this many modules, ``tests/test_fuzz_formats_1.py`` ... ``_4.py``."""


def formats_in_group(group: int) -> list[str]:
    """The registered formats that ``tests/test_fuzz_formats_GROUP.py`` fuzzes (``group`` from 1):
    every ``FUZZ_GROUPS``-th, so that each group holds fast and slow readers alike."""
    return list(FORMATS)[group - 1 :: FUZZ_GROUPS]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A group module's tests run once per format of its group, the number its name ends with."""
    if "name" in metafunc.fixturenames:
        group = int(metafunc.module.__name__.rsplit("_", 1)[1])
        metafunc.parametrize("name", formats_in_group(group))


def test_mutated_input_is_read_or_refused_with_one_message(name: str) -> None:
    base = baseline(name)

    @FUZZ
    @given(mutations=MUTATION_LISTS, forced=st.booleans())
    def check(mutations: list[tuple[str, float, float, int]], forced: bool) -> None:
        sample = SAMPLES[name]
        parsed, _ = read_mutated(name, mutated(sample, mutations), forced=forced)
        event("read, bad records counted" if parsed is not None else "refused with one message")
        kinds = [m[0] for m in mutations]
        if parsed is not None and forced and kinds in (["junk_line"], ["binary_line"], ["long_line"]):
            # one line that is no record of the format, read by the same reader: it is counted
            assert parsed.skipped > base.skipped or parsed.table.num_rows != base.table.num_rows, (
                f"{kinds} read with nothing skipped: {parsed.skipped} lines"
            )

    # `check`'s source stays as it was: hypothesis derives the derandomised examples from it
    with each_input_read_once():
        check()


# --------------------------------------------------------------------------- through the store


@contextlib.contextmanager
def _debug_errors() -> Iterator[None]:
    """``STABSCOPE_DEBUG=1``: an exception that is no ``StabScopeError`` propagates out of the CLI
    (instead of its one-line fallback), so the test sees it as what it is."""
    old = os.environ.get("STABSCOPE_DEBUG")
    os.environ["STABSCOPE_DEBUG"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["STABSCOPE_DEBUG"]
        else:
            os.environ["STABSCOPE_DEBUG"] = old


def cli_import(store: Path, given: Path, *, run: str, fmt: str | None) -> tuple[int, str]:
    from ingest.cli import main

    argv = ["import", "--store", str(store), "--run", run, str(given)] + (["--format", fmt] if fmt else [])
    err, out = io.StringIO(), io.StringIO()
    with _debug_errors(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(argv)
    return code, err.getvalue()


def store_state(store: Path) -> dict[str, Any]:
    """Every run of the store row for row (its long table with derived rows, events, spikes, its
    catalog row), and the store's files."""
    from ingest.services.run_analyses import open_analysed_store

    opened = open_analysed_store(store)
    state: dict[str, Any] = {}
    for info in opened.list_runs():
        table = opened.read_long(info.name, include_derived=True)
        table = table.sort_by([("metric", "ascending"), ("rank", "ascending"), ("step", "ascending")])
        state[info.name] = {
            "rows": table.to_pydict(),
            "events": [(e.step, e.kind, e.label) for e in opened.events(info.name)],
            "spikes": opened.spikes(info.name),
            "catalog": dataclasses.asdict(info),
        }
    state["files"] = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    return state


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (a NaN loss is a value, kept)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    return bool(a == b)


OTHER_RUN = "other"
TARGET_RUN = "target"


@pytest.fixture(scope="module")
def template_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per format, a store holding run ``other`` (another format's sample) and run ``target`` (this
    format's valid sample): what each example's import lands in (copied)."""
    return {"root": tmp_path_factory.mktemp("fuzz-stores")}


def _template(root: Path, name: str) -> Path:
    store = root / f"template-{name}"
    if store.exists():
        return store
    other_format = "jsonl" if name != "jsonl" else "csv_wide"
    for run, fmt in ((OTHER_RUN, other_format), (TARGET_RUN, name)):
        sample = SAMPLES[fmt]
        inputs = root / f"input-{name}-{run}"
        code, err = cli_import(store, sample.write(inputs), run=run, fmt=fmt)
        assert code == 0, err
    return store


def test_import_of_mutated_input_into_a_store_changes_nothing_when_refused(
    name: str, template_stores: dict[str, Path]
) -> None:
    root = template_stores["root"]
    template = _template(root, name)
    before = store_state(template)
    examples = {"refused": 0, "imported": 0}

    @settings(FUZZ, max_examples=STORE_EXAMPLES)
    @given(mutations=MUTATION_LISTS, forced=st.booleans())
    def check(mutations: list[tuple[str, float, float, int]], forced: bool) -> None:
        sample = SAMPLES[name]
        with tempfile.TemporaryDirectory(prefix="fuzz-store-", dir=root) as tmp:
            store = Path(tmp) / "store"
            shutil.copytree(template, store)
            given_path = sample.write(Path(tmp) / "in", mutated(sample, mutations))
            code, err = cli_import(store, given_path, run=TARGET_RUN, fmt=name if forced else None)
            after = store_state(store)
            event("imported" if code == 0 else "refused, store unchanged")
            if code == 0:
                examples["imported"] += 1
                assert _same(after[OTHER_RUN], before[OTHER_RUN]), "an import changed another run"
                # a mutated log whose steps start again at the first step holds further runs: the
                # import adds them as TARGET_RUN-2, -3, ... (ingest.formats.segments), no other run
                added = set(after) - set(before)
                assert set(before) <= set(after)
                assert all(re.fullmatch(re.escape(TARGET_RUN) + r"-[0-9]+", run) for run in added), added
                return
            examples["refused"] += 1
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("stabscope import: error: "), err
            assert sample.target.split("/")[-1] in err or sample.given in err, err
            assert _same(after, before), "a refused import changed the store"

    check()
    assert examples["refused"] + examples["imported"] >= min(STORE_EXAMPLES, 2)
