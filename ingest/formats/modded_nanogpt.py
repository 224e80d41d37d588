"""modded-nanogpt record logs: ``step:N/M train_loss:x train_time:Nms step_avg:x.xxms`` and
``step:N/M val_loss:x train_time:...`` lines, after the training script's source code, a torch/CUDA
banner and an ``nvidia-smi`` table (all skipped and counted).

``train_time``/``step_avg`` are stored in seconds as ``train_time_s``/``step_avg_s``; ``nanms``
(the step average before it is defined) is kept as NaN.
"""

from __future__ import annotations

import re
from typing import Any

from ingest.formats.planned import PlannedStepsTextLogReader
from ingest.formats.textlog import LineKind


class ModdedNanoGPTReader(PlannedStepsTextLogReader):
    name = "modded_nanogpt"
    description = "modded-nanogpt record log: 'step:N/M train_loss:x train_time:Nms step_avg:x'"
    kinds = (
        LineKind(
            name="step",
            prefix=r"step:(?P<step>[0-9]+)/(?P<total>[0-9]+)[ \t]+",
            pairs=r"(?P<key>[A-Za-z_]+):(?P<val>\S+)",
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.95 if n_metric_lines >= 2 else 0.8

    def meta_from_head(self, text: str) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        m = re.search(r"Running pytorch (\S+)", text)
        if m:
            meta["torch_version"] = m.group(1)
        gpus = re.findall(r"^\|\s+\d+\s+(NVIDIA [^|]*?)\s+(?:On|Off)\s+\|", text, re.M)
        if gpus:
            meta["gpus"] = len(gpus)
            meta["gpu_model"] = gpus[0]
        m = re.search(r"Training DataLoader: total number of tokens: (\d+)", text)
        if m:
            meta["train_tokens_available"] = int(m.group(1))
        return meta
