"""GPT-NeoX console output (``megatron/logging.py``'s ``training_log``, printed by rank 0)::

     samples/sec: 103.727 | iteration       10/     100 | elapsed time per iteration (ms): 1234.5 |
     learning rate: 1.000E-04 | approx flops per GPU: 123.4TFLOPS | lm_loss: 7.123456E+00 |
     loss scale: 65536.0 | number of skipped iterations:   0 | number of nan iterations:   0 |

(one line; ``MFU: 45.00% | HFU: 50.00% |`` follow the flops when the peak is configured), and
`` validation results at iteration 100 | lm_loss value: 3.210000E+00 | lm_loss_ppl value: 2.478E+01 |``.

Unlike Megatron-LM the line starts with ``samples/sec``, so the step is read ahead of it. ``approx
flops per GPU`` is printed in whichever unit fits (``987.6GFLOPS``, ``1.2PFLOPS``): one series would
mix units, so it is left out (it is the step time in another form).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from ingest.formats.aliases import canonical_name, sanitise_name
from ingest.formats.megatron import DEEPSPEED_KINDS
from ingest.formats.planned import PlannedStepsTextLogReader
from ingest.formats.textlog import LineKind

_PIPE_PAIRS: Final = r"[ \t]*(?P<key>[^|:\n]*[^|:\s]):[ \t]*(?P<val>[^\s|]+)[ \t]*(?=\||$)"

_TRAIN_KEYS: Final = {
    "samples/sec": ("samples_per_s", None),
    "lm_loss": ("loss", None),
    "MFU": ("mfu", "%"),
    "HFU": ("hfu", None),
}


def _train_key(key: str) -> tuple[str, str | None] | None:
    if key == "approx flops per GPU":
        return None
    return _TRAIN_KEYS.get(key) or canonical_name(key)


def _validation_key(key: str) -> tuple[str, str | None]:
    if key == "lm_loss value":
        return ("val_loss", None)
    if key == "lm_loss_ppl value":
        return ("val_ppl", None)
    return ("val_" + sanitise_name(key.removesuffix(" value")), None)


_NEOX_KINDS: Final[tuple[LineKind, ...]] = (
    LineKind(
        name="iteration",
        # the step comes after samples/sec: read it ahead so samples/sec stays a value
        prefix=(
            r"[ \t]*(?=samples/sec:[ \t]*[^\s|]+[ \t]*\|[ \t]*iteration[ \t]+(?P<step>[0-9]+)"
            r"[ \t]*/[ \t]*(?P<total>[0-9]+)[ \t]*\|)"
        ),
        pairs=_PIPE_PAIRS,
        keymap=_train_key,
        # the iteration field changes every line without being a value
        ignore=r"iteration[ \t]+[0-9]+[ \t]*/[ \t]*[0-9]+",
        run_level=True,
    ),
    LineKind(
        name="validation",
        prefix=r"[ \t]*validation results at iteration[ \t]+(?P<step>[0-9]+)[ \t]*\|",
        pairs=_PIPE_PAIRS,
        keymap=_validation_key,
        run_level=True,
    ),
)


class GptNeoXReader(PlannedStepsTextLogReader):
    name = "gpt_neox"
    description = "GPT-NeoX console: 'samples/sec: x | iteration N/ M | ... | lm_loss: x | ...'"
    # NeoX runs on (Deeper)DeepSpeed, whose engine echoes every step in its `steps: N loss: x` and
    # `[Rank 0] step=N, ... lr=[...]` lines: read as the launcher's copy, so the rounded loss is kept
    # apart (``kept_over``) instead of the file being refused as Megatron-DeepSpeed's
    kinds: tuple[LineKind, ...] = _NEOX_KINDS + tuple(
        # indented like NeoX's own lines when the console is pasted into notes
        replace(kind, prefix=r"[ \t]*" + kind.prefix)
        for kind in DEEPSPEED_KINDS
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        # DeepSpeed's engine lines alone are any DeepSpeed trainer's: NeoX's own line must be there
        return 0.95 if _NEOX_OWN_LINES.count_metric_lines(text) else 0.0


class _NeoXOwnLines(GptNeoXReader):
    """NeoX's own iteration and validation lines only (a head's count without the engine's lines)."""

    kinds = _NEOX_KINDS


_NEOX_OWN_LINES: Final = _NeoXOwnLines()
