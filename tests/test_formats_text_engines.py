"""The text-log engine's two regex engines (RE2 and Python's ``re``) read every log alike.

A skeleton's engine is chosen by a fixed rule (the length of the line it was learned from); the
environment variable ``STABSCOPE_TEXTLOG_ENGINE`` forces one engine on every skeleton. Each test
reads the same log once per engine, in small chunks so that most lines go through the learned
skeletons rather than the line-by-line path, and asserts the same table, skipped lines, events and
meta, and that the engines did capture lines (so no comparison is vacuous).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ingest.errors import StabScopeError
from ingest.formats import FORMATS, detect, textlog_patterns
from ingest.formats import textlog_engine as engine
from ingest.formats.megatron import MegatronReader
from ingest.formats.textlog import TextLogReader
from ingest.formats.textlog_patterns import ENGINE_ENV, RE2_MAX_LINE_BYTES, engine_for
from tests.test_formats_text_fast import _same, _write_log

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"
REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"
REAL_TEXT_LOGS = [
    "bigscience_megds_perf_log/meg_ds_3d_gpt2_perf_n16-ds-off.out",
    "mng_llmc_gpt2_124m/main.log",
    "mng_quantizedfp4/433c1732-0c3d-4099-a4a8-ec31eae49b16.txt",
]
ENGINES = ("re2", "python")


def _read_with(
    monkeypatch: pytest.MonkeyPatch, reader: TextLogReader, path: Path, engine_name: str, *, plans: bool = True
) -> tuple[Any, dict[str, int]]:
    """``reader`` over ``path`` with ``engine_name`` forced; the lines each engine captured."""
    captured = dict.fromkeys(ENGINES, 0)
    state = engine.EngineState
    by_re2, by_python = state._match_re2, state._match_python

    def counting(name: str, original: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            found = original(*args)
            captured[name] += 0 if found is None else len(found[0])
            return found

        return staticmethod(wrapper)

    with monkeypatch.context() as patch:
        patch.setenv(ENGINE_ENV, engine_name)
        patch.setattr(state, "_match_re2", counting("re2", by_re2))
        patch.setattr(state, "_match_python", counting("python", by_python))
        if not plans:
            patch.setattr(textlog_patterns, "plan_for", lambda *args: None)
        return reader.read([path]), captured


def _small_chunks(name: str) -> TextLogReader:
    reader = type(FORMATS[name])()
    assert isinstance(reader, TextLogReader)
    reader.chunk_bytes = 512
    return reader


def _engines_agree(monkeypatch: pytest.MonkeyPatch, path: Path, *, plans: bool = True) -> None:
    found = detect([path])
    if not found or not isinstance(FORMATS[found[0][0]], TextLogReader):
        pytest.skip(f"{path.name}: not read by the text engine (a reader of its own, or the generic reader)")
    name = found[0][0]
    results = {e: _read_with(monkeypatch, _small_chunks(name), path, e, plans=plans) for e in ENGINES}
    (by_re2, re2_counts), (by_python, python_counts) = results["re2"], results["python"]
    if python_counts["python"] == 0:
        pytest.skip(f"{path.name}: every line was taken by a plan or the line-by-line path")
    assert python_counts["re2"] == 0, "Python's engine forced, yet RE2 ran"
    # the same skeletons capture the same lines, whichever engine runs them
    assert sum(re2_counts.values()) == python_counts["python"]
    _same(by_re2, by_python)


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.log")))
def test_both_engines_read_every_fixture_alike(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fixture: str) -> None:
    """Each fixture eight times over (a restarted run, to the reader), so that every layout comes
    back in later chunks, after its skeleton was learned."""
    path = tmp_path / fixture
    path.write_bytes((FIXTURES / fixture).read_bytes() * 8)
    _engines_agree(monkeypatch, path)


@pytest.mark.parametrize("relative", REAL_TEXT_LOGS)
def test_both_engines_read_real_logs_alike(monkeypatch: pytest.MonkeyPatch, relative: str) -> None:
    path = REAL / relative
    if not path.exists():
        pytest.skip("../shared absent: the real logs are not on this machine")
    _engines_agree(monkeypatch, path)


@pytest.mark.parametrize("seed", [0, 1])
def test_both_engines_read_mangled_megatron_lines_alike(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seed: int
) -> None:
    """Varied Megatron lines (values that are not numbers, odd spacing, restarts) with the ``|`` plans
    off, so every metric line after the first chunk goes through the forced engine."""
    path = tmp_path / "train.log"
    _write_log(path, seed, n=800)
    reader = MegatronReader()
    reader.chunk_bytes = 4096
    results = {e: _read_with(monkeypatch, reader, path, e, plans=False) for e in ENGINES}
    for e in ENGINES:
        assert results[e][1][e] > 600, e  # the forced engine took the bulk of the lines
    _same(results["re2"][0], results["python"][0])


def test_the_rule_is_fixed_by_the_line_and_the_override_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    short, long = b"x" * RE2_MAX_LINE_BYTES, b"x" * (RE2_MAX_LINE_BYTES + 1)
    assert engine_for("^a$", short, None) == "re2"
    assert engine_for("^a$", long, None) == "python"
    assert engine_for(None, short, "re2") == "python"  # RE2 cannot express that skeleton
    assert engine_for("^a$", long, "re2") == "re2"
    assert engine_for("^a$", short, "python") == "python"
    monkeypatch.setenv(ENGINE_ENV, "fast")
    with pytest.raises(StabScopeError, match=ENGINE_ENV):
        MegatronReader().read([FIXTURES / "megatron_lm_restart.log"])
