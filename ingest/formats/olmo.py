"""OLMo's console log (``olmo/train.py``, ``Trainer.log_metrics_to_console``; OLMo-core's
``ConsoleLoggerCallback`` prints the same record).

Every ``console_log_interval`` steps rank 0 logs one record over several lines: a header
``[step=N/M]`` (newer: ``[step=N/M,epoch=E]``; ``M`` is ``max_steps``) behind the logger's
``2024-02-01 12:00:00.123<TAB>host:0<TAB>olmo.train:1240<TAB>INFO<TAB>``, then one indented line per
metric, ``    train/CrossEntropyLoss=10.73``, the value through ``format_float``: ``str(v)`` under
1e-4 (``1.2e-05``), whole numbers with thousands separators over 1,000 (``45,773``), else 1-4
decimals. An evaluation logs its label then indented ``eval/...=`` lines: they belong to the step
of the header before them, as do the metric lines of that header.

Canonical roles: ``train/CrossEntropyLoss`` -> ``loss``, ``optim/total_grad_norm`` -> ``grad_norm``,
``optim/learning_rate_group0`` -> ``lr``, ``throughput/total_tokens`` -> ``tokens`` (global, so far),
``throughput/device/tokens_per_second`` -> ``throughput_tok_s`` of rank 0 (the printing device's own
rate). ``train/Perplexity`` is ``train_ppl`` (as Megatron's and NeoX's perplexity are ``val_ppl``).
``System/Peak GPU Memory (MB)`` (the max over ranks) is ``gpu_mem_gb``, its megabytes decimal (OLMo
divides the bytes by 1e6), not the MiB the alias table reads every other ``MB`` as.
The rest keep their names (``train/ZLoss``, ``eval/.../Perplexity``).
OLMo-core names them ``train/CE loss``, ``optim/total grad norm``, ``optim/LR (group 0)``,
``throughput/total tokens`` and ``throughput/device/TPS``, adds ``,eta=...`` to the header and prints
values of 1e9 and over with a suffix (``1.234B``, rounded): such lines are skipped, not misread.
"""

from __future__ import annotations

import re
from typing import Any, Final

from ingest.formats.aliases import sanitise_name
from ingest.formats.numbers import NUMBER
from ingest.formats.planned import PlannedStepsTextLogReader
from ingest.formats.textlog import LineKind

_KEYS: Final[dict[str, tuple[str, str | None] | None]] = {
    "train/CrossEntropyLoss": ("loss", None),
    "train/Perplexity": ("train_ppl", None),
    "optim/total_grad_norm": ("grad_norm", None),
    "optim/learning_rate_group0": ("lr", None),
    "throughput/total_tokens": ("tokens", None),
    "throughput/device/tokens_per_second": ("throughput_tok_s", None),
    # the peak GPU memory (max over ranks) is the GPU memory series, read from its decimal megabytes
    "System/Peak GPU Memory (MB)": ("gpu_mem_gb", "mb_si"),
    # OLMo-core (olmo_core/train: common.py, callbacks/speed_monitor.py, train_module)
    "train/CE loss": ("loss", None),
    "optim/total grad norm": ("grad_norm", None),
    "optim/LR (group 0)": ("lr", None),
    "throughput/total tokens": ("tokens", None),
    "throughput/device/TPS": ("throughput_tok_s", None),
    "step": None,  # the header's own step, read by the prefix
}


def _olmo_key(key: str) -> tuple[str, str | None] | None:
    if key in _KEYS:
        return _KEYS[key]
    return (sanitise_name(key), None)


_HEADER_TAIL: Final = r"(?:,epoch=[0-9]+)?(?:,eta=[^\]\n\r]*)?\]"
"""After ``[step=N/M``: OLMo-core adds ``,eta=3h12m`` (and prints ``???`` for an unknown ``M``)."""

OLMO_KINDS: Final = (
    LineKind(
        name="header",
        # the header carries no metric: its `step=N` is read as a pair (dropped by the keymap) so
        # that the line counts as a metric line and the lines below it take its step
        prefix=r"[^\n\r]*?\[(?=step=(?P<step>[0-9]+)/(?:(?P<total>[0-9]+)|\?\?\?)" + _HEADER_TAIL + ")",
        pairs=r"(?P<key>step)=(?P<val>[0-9]+)",
        keymap=_olmo_key,
        run_level=True,
    ),
    LineKind(
        name="metric",
        # `name=value` alone on its line (indented by OLMo; a paste may lose the indent): a prose
        # line with an `=` inside it does not fit the whole-line shape
        prefix=r"[ \t]*(?=[A-Za-z][A-Za-z0-9_/ ().%@:-]*=" + NUMBER + r"[ \t\r]*$)",
        pairs=r"(?P<key>[A-Za-z][A-Za-z0-9_/ ().%@:-]*)=(?P<val>" + NUMBER + r")",
        keymap=_olmo_key,
        per_rank_keys=frozenset({"throughput_tok_s"}),
    ),
)

_HEADER: Final = re.compile(r"\[step=[0-9]+/(?:[0-9]+|\?\?\?)" + _HEADER_TAIL)


class OlmoReader(PlannedStepsTextLogReader):
    name = "olmo"
    description = "OLMo console: '[step=N/M]' then indented 'train/CrossEntropyLoss=x' lines"
    kinds = OLMO_KINDS

    def score(self, n_metric_lines: int, text: str) -> float:
        # `name=value` lines alone say little: the `[step=N/M]` header makes it OLMo's
        if not _HEADER.search(text):
            return 0.0
        return 0.95 if "CrossEntropyLoss=" in text or "olmo" in text.lower() else 0.85

    def meta_from_head(self, text: str) -> dict[str, Any]:
        return {}
