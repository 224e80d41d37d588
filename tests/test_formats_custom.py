"""User-defined regex formats: validation, save/load round trip, reading and detection."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ingest.errors import StabScopeError
from ingest.formats import detect, read_log
from ingest.formats.custom import load_custom_formats, save_custom_format

REGEX = r"^(?P<wall_time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) epoch=\d+ it=(?P<step>\d+) L=(?P<l>\S+) G=(?P<g>\S+)"


def _log(path: Path) -> Path:
    path.write_text(
        "booting trainer v3\n"
        "2024-01-01 00:00:00 epoch=0 it=1 L=5.0 G=1.5\n"
        "2024-01-01 00:00:10 epoch=0 it=2 L=nan G=inf\n"
        "checkpoint saved\n"
        "2024-01-01 00:00:20 epoch=0 it=3 L=4.0 G=1.25\n"
    )
    return path


def test_save_load_and_read(tmp_path: Path) -> None:
    formats = tmp_path / "store" / "formats"
    saved = save_custom_format("mytrainer", REGEX, {"l": "loss", "g": "grad_norm"}, formats)
    assert saved == formats / "mytrainer.json"
    assert json.loads(saved.read_text())["mapping"] == {"l": "loss", "g": "grad_norm"}
    loaded = load_custom_formats(formats)
    assert list(loaded) == ["mytrainer"]
    log = _log(tmp_path / "train.log")
    parsed = read_log([log], format="custom:mytrainer", custom_dir=formats)
    assert parsed.format == "custom:mytrainer"
    steps, loss = parsed.series("loss")
    assert steps.tolist() == [1, 2, 3] and math.isnan(loss[1]) and loss[2] == 4.0
    assert math.isinf(parsed.series("grad_norm")[1][1])
    assert parsed.table["wall_time"].to_pylist()[:3] == [1704067200.0, 1704067210.0, 1704067220.0]
    assert parsed.skipped == 2
    assert parsed.skipped_examples[0][1:] == (1, "does not match custom:mytrainer: booting trainer v3")


def test_detection_includes_custom_formats(tmp_path: Path) -> None:
    formats = tmp_path / "formats"
    save_custom_format("mytrainer", REGEX, {"l": "loss"}, formats)
    log = _log(tmp_path / "train.log")
    assert detect([log]) == []
    best = detect([log], custom_dir=formats)[0]
    assert best[0] == "custom:mytrainer" and best[1] > 0.7
    parsed = read_log([log], custom_dir=formats)
    assert "l" not in parsed.metrics and "loss" in parsed.metrics
    assert "g" in parsed.metrics  # unmapped groups keep their own name


@pytest.mark.parametrize(
    ("name", "regex", "mapping", "message"),
    [
        ("../evil", REGEX, {}, "invalid format name"),
        ("a/b", REGEX, {}, "invalid format name"),
        ("ok", r"(?P<step>\d+", {}, "does not compile"),
        ("ok", r"loss=(?P<loss>\S+)", {}, "named group 'step'"),
        ("ok", r"it=(?P<step>\d+)", {}, "at least one named value group"),
        ("ok", REGEX, {"zz": "loss"}, "groups the regex lacks: zz"),
        ("ok", REGEX, {"l": "bad name"}, "not a valid metric name"),
    ],
)
def test_invalid_formats_are_refused(
    tmp_path: Path, name: str, regex: str, mapping: dict[str, str], message: str
) -> None:
    with pytest.raises(StabScopeError, match=message):
        save_custom_format(name, regex, mapping, tmp_path)
    assert not list(tmp_path.iterdir())


def test_custom_format_needs_the_folder_and_a_broken_file_is_named(tmp_path: Path) -> None:
    log = _log(tmp_path / "train.log")
    with pytest.raises(StabScopeError, match="needs the store's formats folder"):
        read_log([log], format="custom:mytrainer")
    formats = tmp_path / "formats"
    formats.mkdir()
    (formats / "broken.json").write_text("{not json")
    with pytest.raises(StabScopeError, match=r"broken\.json"):
        load_custom_formats(formats)
    assert load_custom_formats(tmp_path / "missing") == {}
