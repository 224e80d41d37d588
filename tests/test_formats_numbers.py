"""The one number grammar of the text formats (issue #34 item 4): the table of what is and is not a
number, the same answer from the line pattern, the one-string parser and the column parser, and no
reader with a number pattern of its own."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ingest.formats.numbers import NUMBER, parse_number, parse_numbers

# (text as a log writes it, the float it is; None: not a number)
TABLE: list[tuple[str, float | None]] = [
    ("12", 12.0),
    ("0", 0.0),
    ("-3", -3.0),
    ("+7", 7.0),
    ("0.5", 0.5),
    ("1.", 1.0),
    (".5", 0.5),
    ("-.25", -0.25),
    ("3e-5", 3e-5),
    ("1.2E+01", 12.0),
    ("1.121008E+01", 11.21008),  # Megatron's lm loss
    ("2.262e-05", 2.262e-05),  # a Hugging Face dict's learning rate
    (".5e3", 500.0),
    ("9,270", 9270.0),  # OLMo's {:,} throughput
    ("1,234,567.5", 1234567.5),
    ("-10,550", -10550.0),
    ("nan", math.nan),
    ("-nan", math.nan),  # C's printf
    ("NaN", math.nan),  # JSON, pandas
    ("NAN", math.nan),  # Python's {:E} of a NaN: Megatron's 'lm loss: NAN'
    ("inf", math.inf),
    ("-inf", -math.inf),
    ("+inf", math.inf),
    ("INF", math.inf),
    ("Inf", math.inf),
    ("Infinity", math.inf),
    ("-Infinity", -math.inf),
    # not numbers
    ("", None),
    ("-", None),
    (".", None),
    ("e5", None),
    ("1e", None),
    ("1,23", None),  # no group of three: '1' then text, never 123
    ("1,2,3", None),
    ("1.2.3", None),
    ("abc", None),
    ("Nan", None),
    ("nAn", None),
    ("1706ms", None),  # a glued unit is the caller's (parse_numbers reports it)
    ("0x1F", None),
    ("1_000", None),  # Python's literal separator; no trainer prints it
]


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-15)


@pytest.mark.parametrize(("text", "expected"), TABLE)
def test_number_table(text: str, expected: float | None) -> None:
    assert _same(parse_number(text), expected)
    assert (re.fullmatch(NUMBER, text) is not None) == (expected is not None)
    # the column parser agrees on every entry that is a whole number without a unit
    conv = parse_numbers(pa.array([text]))
    if expected is not None:
        assert conv.ok[0] and _same(float(conv.values[0]), expected)
        assert conv.units == []


def test_bytes_and_blanks() -> None:
    assert parse_number(b" 2.897 ") == 2.897
    assert parse_number("\t-1.5E-3\n") == -1.5e-3


def test_column_units_and_percent() -> None:
    conv = parse_numbers(pa.array(["1706ms", "nanms", "160.86GiB(90.19%)", "1,234 tok/s", "x12"]))
    assert conv.values[0] == 1706.0 and math.isnan(conv.values[1]) and conv.ok[1]
    assert conv.values[2] == 160.86 and conv.pct is not None and conv.pct[2] == 90.19
    assert conv.values[3] == 1234.0
    assert not conv.ok[4] and math.isnan(conv.values[4])
    units = {u: m.tolist() for u, m in conv.units}
    assert units["ms"] == [True, True, False, False, False]
    assert units["GiB"][2] and units["tok/s"][3]


def test_first_number_in_a_line() -> None:
    """Inside a line the pattern takes the longest number at that place, and the text after it stays
    for the reader's own pattern (a unit, a separator)."""
    found = [m.group() for m in re.finditer(NUMBER, "loss: 1.121008E+01 | tok 9,270, lr=3e-5 step_avg:1706ms x=1,23")]
    assert found == ["1.121008E+01", "9,270", "3e-5", "1706", "1", "23"]


def test_pattern_runs_on_re2() -> None:
    """No look-around: a skeleton built from it still runs on Arrow's RE2 (textlog_patterns)."""
    import pyarrow.compute as pc

    got = pc.extract_regex(pa.array(["v=-1.5E+02", "v=NAN", "v=9,270"]), "^v=(?P<n>" + NUMBER + ")$")
    assert [r["n"] for r in got.to_pylist()] == ["-1.5E+02", "NAN", "9,270"]


SOURCES = Path(__file__).resolve().parent.parent / "ingest"
# what a private number pattern looks like: an exponent, a float of digit runs, digits-and-dots, a
# nan/inf alternative
PRIVATE_NUMBER = re.compile(
    r"\[eE\]|\\d\+\\\.\\d|\[0-9\]\+\\\.\[0-9\]|\[0-9\.\]|\[\\d\.|\[0-9\]\[0-9\.|\[0-9\]\[\^|\|nan\|inf|nan\|inf\)"
)


def test_no_reader_has_a_private_number_pattern() -> None:
    offenders = []
    for path in sorted([*SOURCES.glob("formats/*.py"), *SOURCES.glob("*.py")]):
        if path.name == "numbers.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE_NUMBER.search(line):
                offenders.append(f"{path.relative_to(SOURCES.parent)}:{n}: {line.strip()}")
    assert offenders == [], "use ingest.formats.numbers.NUMBER:\n" + "\n".join(offenders)


def test_private_pattern_detector_catches_the_old_variants() -> None:
    """The grep above would have found each of the variants the readers had."""
    old = [
        r'_NUM = r"[-+]?(?:[0-9]+\.?[0-9]*(?:[eE][-+]?[0-9]+)?|\.[0-9]+|nan|inf)"',
        r'_NUMBER_LITERAL = r"[-+]?(?:[0-9][0-9.]*(?:[eE][-+]?[0-9]+)?|nan|inf)"',
        r'_NUMBER = r"[-+]?(?:\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"',
        r"(?P<val>[-+]?(?:[0-9][^\s,]*|nan|inf))",
        r'prefix=r"Model Parameters:[ \t]*[0-9.]+[ \t]*B,"',
        r'r"Peak FLOPS used for computing MFU: ([\d.e+]+)"',
    ]
    assert all(PRIVATE_NUMBER.search(v) for v in old)
    assert not PRIVATE_NUMBER.search(r'prefix=r"iteration[ \t]+(?P<step>[0-9]+)"')  # a step is an integer


def test_readers_agree_on_one_value() -> None:
    """The same value text gives the same float in every reader's column path."""
    texts = ["1.121008E+01", "NAN", "-inf", "9,270", ".5", "2.262e-05"]
    conv = parse_numbers(pa.array(texts))
    singles = [parse_number(t) for t in texts]
    assert conv.ok.all()
    assert np.allclose(conv.values, np.array(singles, dtype=float), equal_nan=True)
