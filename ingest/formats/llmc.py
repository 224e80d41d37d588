"""llm.c: the ``main.log`` its trainer writes and the console output of ``train_gpt2.cu``/``train_gpt2.c``.

``main.log`` (one record per line): ``s:<step> trl:<train loss> lr:<lr> norm:<grad norm>``,
``s:<step> tel:<val loss>``, ``s:<step> eval:<HellaSwag accuracy>``; steps are 0-based.

Console: ``step    1/74 | loss 11.009430 (+nanz)| norm 15.3807 (+nanz)| lr 8.57e-07 | 8462.85 ms |
-100.0% bf16 MFU | 61925 tok/s`` (older: ``| train loss ...``), the CPU trainer's ``step 0: train loss
5.35 (took 1234.5 ms)``, and ``val loss 3.28`` / ``HellaSwag: 2500/10042 = 0.2489`` lines without a
step. The console prints ``step+1``; steps are stored 0-based so both files of one run agree, and
a val line belongs to the iteration whose train line follows it (as in ``main.log``).
"""

from __future__ import annotations

import re
from typing import Final

from ingest.formats.aliases import canonical_name
from ingest.formats.numbers import NUMBER
from ingest.formats.planned import PlannedStepsTextLogReader
from ingest.formats.textlog import LineKind, TextLogReader

_MAIN_KEYS: Final = {
    "trl": ("loss", None),
    "tel": ("val_loss", None),
    "lr": ("lr", None),
    "norm": ("grad_norm", None),
    "eval": ("hellaswag_acc", None),
}


def _main_key(key: str) -> tuple[str, str | None]:
    return _MAIN_KEYS.get(key, canonical_name(key))


_CONSOLE_KEYS: Final = {
    "loss": ("loss", None),
    "train loss": ("loss", None),
    "norm": ("grad_norm", None),
    "lr": ("lr", None),
    "ms": ("step_time_s", "ms"),
    "took": ("step_time_s", "ms"),
    "tok/s": ("throughput_tok_s", None),
    "val loss": ("val_loss", None),
    "HellaSwag": ("hellaswag_acc", None),
}


def _console_key(key: str) -> tuple[str, str | None]:
    if key.endswith("MFU"):
        return ("mfu", "%")
    return _CONSOLE_KEYS.get(key, canonical_name(key))


class LlmcMainLogReader(TextLogReader):
    name = "llmc_main"
    description = "llm.c main.log: 's:N trl:x lr:x norm:x' and 's:N tel:x' lines"
    kinds = (
        LineKind(
            name="record",
            prefix=r"s:(?P<step>[0-9]+)[ \t]+",
            pairs=r"(?P<key>[A-Za-z_]+):(?P<val>\S+)",
            keymap=_main_key,
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.95 if n_metric_lines >= 2 else 0.8


_CONSOLE_PAIRS: Final = (
    r"(?P<key>[A-Za-z][A-Za-z ]*?)[ \t]+(?P<val>" + NUMBER + r")(?=[ \t(|)]|$)"
    r"|(?P<val2>" + NUMBER + r")[ \t]*(?P<key2>ms|%[ \t]*[A-Za-z0-9]+[ \t]+MFU|tok/s)"
)
_Z_SCORE: Final = r"\(" + NUMBER + r"z\)"


_TAGGED_KEYS: Final = {
    "train": ("loss", None),
    "val": ("val_loss", None),
    "hella": ("hellaswag_acc", None),
}


def _tagged_key(key: str) -> tuple[str, str | None]:
    return _TAGGED_KEYS.get(key, canonical_name(key))


class BuildNanogptLogReader(TextLogReader):
    """build-nanogpt's ``log.txt``: one ``<step> <tag> <value>`` line per record, the tag one of
    ``train`` (loss), ``val`` (val loss), ``hella`` (HellaSwag accuracy); steps 0-based."""

    name = "buildnanogpt_log"
    description = "build-nanogpt log.txt: '<step> train x', '<step> val x', '<step> hella x' lines"
    kinds = (
        LineKind(
            name="record",
            prefix=r"(?P<step>[0-9]+)[ \t]+(?=(?:train|val|hella)[ \t]+" + NUMBER + r"[ \t]*$)",
            pairs=r"(?P<key>train|val|hella)[ \t]+(?P<val>" + NUMBER + ")",
            keymap=_tagged_key,
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.9 if n_metric_lines >= 2 else 0.7


_BNG_KEYS: Final = {
    "loss": ("loss", None),
    "lr": ("lr", None),
    "norm": ("grad_norm", None),
    "dt": ("step_time_s", "ms"),
    "tok/sec": ("throughput_tok_s", None),
    "validation loss": ("val_loss", None),
    "HellaSwag accuracy": ("hellaswag_acc", None),
}


def _bng_key(key: str) -> tuple[str, str | None]:
    return _BNG_KEYS.get(key, canonical_name(key))


class BuildNanogptConsoleReader(TextLogReader):
    """build-nanogpt's console: ``step N | loss: x | lr x | norm: x | dt: x ms | tok/sec: x`` lines,
    and ``validation loss: x`` / ``HellaSwag accuracy: a/b=x`` lines without a step, printed before
    the step line of the iteration that evaluated them (so they take the next step line's step)."""

    name = "buildnanogpt_console"
    description = "build-nanogpt console: 'step N | loss: x | lr x | norm: x | dt: xms | tok/sec: x'"
    kinds = (
        LineKind(
            name="step",
            # the whole layout (loss, then lr or norm): a bare `step N | loss: x | ...` is the generic
            # reader's; fields are split by `|` or, in a variant, `||` (`elapsed_time: dt=Tms`, no lr)
            prefix=r"step[ \t]+(?P<step>[0-9]+)[ \t]*\|\|?[ \t]*(?=loss:[ \t]*"
            + NUMBER
            + r"[ \t]*\|\|?[ \t]*(?:lr[ \t]|norm:))",
            pairs=r"(?P<key>loss|lr|norm|dt|tok/sec)[:=]?[ \t]*(?P<val>" + NUMBER + r")(?:ms)?",
            keymap=_bng_key,
            run_level=True,
        ),
        LineKind(
            name="val",
            prefix=r"(?=validation loss:)",
            pairs=r"(?P<key>validation loss):[ \t]*(?P<val>" + NUMBER + ")",
            keymap=_bng_key,
            fill_next=True,
        ),
        LineKind(
            name="hellaswag",
            prefix=r"(?=HellaSwag accuracy:)",
            pairs=r"(?P<key>HellaSwag accuracy):[ \t]*[0-9]+/[0-9]+[ \t]*=[ \t]*(?P<val>" + NUMBER + ")",
            keymap=_bng_key,
            ignore=r"[0-9]+/[0-9]+",
            fill_next=True,
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.9 if n_metric_lines >= 2 else 0.7


_STEP_LINE: Final = re.compile(r"(?:^|[ \t\]:>])step[ \t]+[0-9]+(?:/[0-9]+[ \t]*\||:[ \t]*train loss)", re.MULTILINE)


class LlmcConsoleReader(PlannedStepsTextLogReader):
    name = "llmc_console"
    description = "llm.c console output: 'step N/M | loss x | norm x | lr x | ms | MFU | tok/s'"
    kinds = (
        LineKind(
            name="step",
            prefix=r"step[ \t]+(?P<step>[0-9]+)/(?P<total>[0-9]+)[ \t]*\|",
            pairs=_CONSOLE_PAIRS,
            keymap=_console_key,
            ignore=_Z_SCORE,
            sentinels={"mfu": -100.0},
            step_offset=-1,
            run_level=True,
        ),
        LineKind(
            name="cpu_step",
            prefix=r"step[ \t]+(?P<step>[0-9]+):[ \t]*(?=train loss[ \t]+\S+[ \t]+\(took)",
            pairs=_CONSOLE_PAIRS,
            keymap=_console_key,
            run_level=True,
        ),
        LineKind(
            name="val",
            prefix=r"(?=val loss[ \t])",
            pairs=r"(?P<key>val loss)[ \t]+(?P<val>" + NUMBER + ")",
            keymap=_console_key,
            fill_next=True,
        ),
        LineKind(
            name="hellaswag",
            prefix=r"(?=HellaSwag:)",
            pairs=r"(?P<key>HellaSwag):[ \t]*[0-9]+/[0-9]+[ \t]*=[ \t]*(?P<val>" + NUMBER + ")",
            keymap=_console_key,
            ignore=r"[0-9]+/[0-9]+",
            fill_next=True,
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        # a 'val loss x' line takes the step of the step line before it: without a step line (a W&B
        # run summary's 'wandb:  val loss 0.0073' in pasted notes) it is no llm.c console
        if not _STEP_LINE.search(text):
            return 0.0
        return 0.9 if n_metric_lines >= 2 else 0.75
