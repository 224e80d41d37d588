"""torchtune's metric lines (``StdoutLogger`` and the ``txt`` ``DiskLogger``, ``log_dict``/``log``)::

    Step 12 | loss:1.2345678 lr:2e-05 tokens_per_second_per_gpu:1523.4 peak_memory_alloc:21.5 grad_norm:0.8113

Each value is printed with ``str()``, so the distributed recipes' tensors read
``loss:tensor(1.2345, device='cuda:0')``: the number inside is the value. ``tokens_per_second_per_gpu`` is
per GPU and the ``peak_memory_*`` figures (GiB) are the logging rank's, so they are stored for rank 0
(only rank 0 logs). The validation loss comes as its own ``Step N | val_loss:x`` line.

The recipes' console progress bar (``tqdm``, its description set in each recipe's ``train`` loop to
``{epoch + 1}|{global_step}|Loss: {loss}``) carries the same step's loss; where the metric lines are
written to a file (``DiskLogger``) the bar is all the console has::

    1|12|Loss: 1.2345678:   1%|▏         | 12/1000 [00:20<27:00,  1.64s/it]

A bar redrawn at one step repeats its loss: one value, not a replay.
"""

from __future__ import annotations

from typing import Final

from ingest.formats.aliases import canonical_name
from ingest.formats.numbers import NUMBER
from ingest.formats.textlog import LineKind, TextLogReader

_KEYS: Final = {
    "tokens_per_second_per_gpu": ("throughput_tok_s", None),
    "peak_memory_alloc": ("gpu_mem_max_gb", None),
    "peak_memory_reserved": ("gpu_mem_max_reserved_gb", None),
    "peak_memory_active": ("gpu_mem_max_active_gb", None),
}


def _key(key: str) -> tuple[str, str | None]:
    return _KEYS.get(key) or canonical_name(key)


class TorchtuneReader(TextLogReader):
    name = "torchtune"
    description = "torchtune metric logger: 'Step N | loss:x lr:x tokens_per_second_per_gpu:x'"
    kinds = (
        LineKind(
            name="step",
            # behind the progress bar's last redraw when both share the console (tqdm writes no newline)
            prefix=r"(?:[^\n]*[\r\]])?[ \t]*Step[ \t]+(?P<step>[0-9]+)[ \t]*\|[ \t]*",
            # a key starts the line or follows a blank (so tensor's device='cuda:0' is no pair)
            pairs=r"(?<![^ \t|])(?P<key>[A-Za-z_][A-Za-z0-9_/.\-]*):(?:tensor\()?(?P<val>" + NUMBER + r")",
            keymap=_key,
            per_rank_keys=frozenset({"throughput_tok_s", "gpu_mem_max_active_gb"}),
        ),
        LineKind(
            name="progress",
            prefix=r"[ \t\r]*[0-9]+\|(?P<step>[0-9]+)\|",
            pairs=r"(?P<key>Loss): (?:tensor\()?(?P<val>" + NUMBER + r")",
            keymap=_key,
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.95 if n_metric_lines >= 2 else 0.85
