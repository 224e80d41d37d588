"""Every text reader reads the same value spellings (issue #34 item 4: "a value can parse in one
format and not in another"). One loss value of each fixture log is rewritten in each spelling real
trainers print; the reader must store exactly that value. On the five private patterns of
before, 11 of the 13 readers failed 35 of these 78 reads (NaN and NAN in all but three, .5 and
9,270 in most)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from ingest.formats import read_log

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"

# fixture -> (format, regex whose group 2 is the first loss value to rewrite)
READERS: dict[str, tuple[str, str]] = {
    "megatron_deepspeed.log": ("megatron_deepspeed", r"(steps: *\d+ +loss: *)([0-9.]+)"),
    "olmo_console.log": ("olmo", r"(train/CrossEntropyLoss=)([0-9.]+)"),
    "fairseq_simple.log": ("fairseq", r"(\| loss +)([0-9.]+)"),
    "jax_slurm.log": ("jax_console", r"(loss=)([0-9.]+)"),
    "maxtext.log": ("maxtext", r"(loss: )([0-9.]+)"),
    "torchtune.log": ("torchtune", r"(loss:)([0-9.]+)"),
    "llmc_console.log": ("llmc_console", r"(loss )([0-9.]+)"),
    "nemo2_progress.log": ("nemo", r"(reduced_train_loss: )([0-9.]+)"),
    "composer.log": ("composer", r"(loss/train/total: )([0-9.]+)"),
    "gpt_neox.log": ("gpt_neox", r"(lm_loss: )([0-9.E+-]+)"),
    "nanogpt.log": ("nanogpt", r"(loss )([0-9.]+)"),
    "deepspeed_stdout.log": ("deepspeed_stdout", r"(loss[:=] *)([0-9.]+)"),
    "verl_ray.log": ("verl_console", r"(loss:)([0-9.]+)"),
}
SPELLINGS: dict[str, float] = {
    "1.121008E+01": 11.21008,
    "NAN": math.nan,
    "NaN": math.nan,
    "-inf": -math.inf,
    ".5": 0.5,
    "9,270": 9270.0,
}


def _loss_values(path: Path, fmt: str) -> list[float]:
    parsed = read_log([path], format=fmt)
    return [v for name in parsed.metrics if "loss" in name for v in parsed.series(name)[1].tolist()]


def _has(values: list[float], want: float) -> bool:
    return any(v == want or (math.isnan(v) and math.isnan(want)) for v in values)


@pytest.mark.parametrize("fixture", sorted(READERS))
def test_every_reader_reads_every_spelling(fixture: str, tmp_path: Path) -> None:
    fmt, pattern = READERS[fixture]
    text = (FIXTURES / fixture).read_text()
    m = re.search(pattern, text)
    assert m is not None, f"{fixture}: no loss value to rewrite"
    original = _loss_values(FIXTURES / fixture, fmt)
    missed = []
    for i, (spelling, want) in enumerate(SPELLINGS.items()):
        assert not _has(original, want)  # the value comes from the rewrite, not the fixture
        path = tmp_path / f"{i}_{fixture}"
        path.write_text(text[: m.start(2)] + spelling + text[m.end(2) :])
        got = _loss_values(path, fmt)
        if not _has(got, want) or len(got) != len(original):
            missed.append(spelling)
    assert missed == [], f"{fmt} does not read {missed}"
