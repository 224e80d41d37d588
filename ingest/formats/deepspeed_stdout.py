"""DeepSpeed's own console output (a model trained with ``deepspeed.initialize``, no Megatron)::

    [2026-05-20 02:23:14,182] [INFO] [logging.py:128:log_dist] [Rank 0] step=10, skipped=0, lr=[0.0001],
    mom=[(0.9, 0.999)]
    [2026-05-20 02:23:14,183] [INFO] [timer.py:264:stop] epoch=0/micro_step=10/global_step=10,
    RunningAvgSamplesPerSec=103.1, CurrSamplesPerSec=105.2, MemAllocated=1.23GB, MaxMemAllocated=4.56GB
    steps: 10 loss: 7.1000 iter time (s): 1.234 samples/sec: 103.727

(the first and the second are one line each; the third is the pipeline engine's ``print``). The engine
lines are the same as in Megatron-DeepSpeed logs (:data:`ingest.formats.megatron.DEEPSPEED_KINDS`); ``lr``
is the first param group's, ``skipped`` the running count of skipped (overflow) steps. The throughput timer's
samples/s figures keep their names (the pipeline engine's ``samples/sec`` is ``samples_per_s``) and its
memory figures (GiB) are the printing rank's (rank 0: the line does not say). A DeepSpeed example's
own progress meter (pytorch's imagenet example, :mod:`ingest.formats.meter_lines`) is read beside them.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Final

from ingest.formats.aliases import sanitise_name
from ingest.formats.deepspeed_chat import DS_CHAT_KINDS, DS_EXAMPLES_KINDS
from ingest.formats.megatron import DEEPSPEED_KINDS, MEGATRON_BANNER
from ingest.formats.meter_lines import METER_KINDS
from ingest.formats.numbers import NUMBER
from ingest.formats.textlog import LineKind, TextLogReader

_TIMER_KEYS: Final = {
    "MemAllocated": ("gpu_mem_gb", None),
    "MaxMemAllocated": ("gpu_mem_max_gb", None),
}


def _timer_key(key: str) -> tuple[str, str | None]:
    return _TIMER_KEYS.get(key) or (sanitise_name(key), None)


_TRAINER_ITERATION: Final = re.compile(r"(?:^|\|)[ \t]*(?:\[[^\]\n]*\][ \t]*)*iteration[ \t]+\d+[ \t]*/", re.M)
_ENGINE_LINE: Final = re.compile(
    r"\[Rank \d+\] step=\d+, skipped=|^[ \t]*steps: \d+ loss: |global_step=\d+, "
    r"|\| PPO Epoch: \d+ \| Actor Loss:|^ppl: " + NUMBER + r", loss: |Step: \d+, Rank: \d+, loss = ",
    re.M,
)


class DeepSpeedStdoutReader(TextLogReader):
    name = "deepspeed_stdout"
    description = (
        "DeepSpeed console: '[Rank 0] step=N, skipped=N, lr=[x], ...' and 'steps: N loss: x iter time (s): x' "
        "(and DeepSpeed-Chat's SFT, reward and PPO lines)"
    )
    kinds = (
        # indented too: a log pasted into notes
        *(dataclasses.replace(kind, prefix=r"[ \t]*" + kind.prefix) for kind in DEEPSPEED_KINDS),
        LineKind(
            name="throughput_timer",
            prefix=(
                r"[ \t]*(?:\[(?P<ts>[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:,[0-9]+)?)\][ \t]*)?"
                r"(?:\[[^\]\n]*\][ \t]*)*epoch=[0-9]+/micro_step=[0-9]+/global_step=(?P<step>[0-9]+),[ \t]*"
            ),
            pairs=r"(?P<key>[A-Za-z]+)=(?P<val>" + NUMBER + r"(?:GB)?)(?=,|[ \t]*$)",
            keymap=_timer_key,
        ),
        *DS_CHAT_KINDS,
        *DS_EXAMPLES_KINDS,
        *METER_KINDS,
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        # Megatron-DeepSpeed and GPT-NeoX (on DeeperSpeed) print the same engine lines next to
        # their own iteration lines: those logs are theirs
        if _TRAINER_ITERATION.search(text):
            return 0.5
        # Megatron's argument dump before the first iteration line (a slow first step: the head holds
        # only the engine's step=0 line): the engine's lines are Megatron-DeepSpeed's launcher copy
        if MEGATRON_BANNER.search(text):
            return 0.5
        return 0.95 if _ENGINE_LINE.search(text) else 0.85
