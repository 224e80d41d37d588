"""torchtitan console output (``torchrun`` stdout; a ``[rankN]:`` prefix is the text engine's, see
``ingest.formats._common.LAUNCHER_PREFIX``):

``[rank0]:[titan] 2026-05-20 02:23:14,182 - root - INFO - step: 10  loss:  6.92163  grad_norm: 60.5000
memory: 169.10GiB(94.81%)  tps: 10,550  tflops: 888.93  mfu: 39.51%``

``memory`` becomes ``gpu_mem_gb`` and ``gpu_mem_pct`` of the printing rank; ``tps`` (older: ``wps``)
and ``tflops`` are per GPU, so they are stored for the printing rank (rank 0 when the line has no
prefix); ``mfu`` is stored as a fraction. Colour codes are stripped before parsing.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.planned import PlannedStepsTextLogReader
from ingest.formats.textlog import LineKind


class TorchtitanReader(PlannedStepsTextLogReader):
    name = "torchtitan"
    description = "torchtitan console: 'step: N  loss: x  grad_norm: x  memory: xGiB(x%)  tps: N  mfu: x%'"
    kinds = (
        LineKind(
            name="step",
            prefix=(
                # `[titan] 2026-05-20 ...` (torchtitan's logger), or a logger's bracketed timestamp,
                # `[2025-09-11 14:09:46,954794][I][components/metrics:437:log]` (ezpz's), indented
                # when the console is pasted into markdown
                r"[ \t]*(?:\[titan\][ \t]*)?\[?"
                r"(?:(?P<ts>[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[,.][0-9]+)?)"
                r"[^\n]*?)?\bstep:[ \t]*(?P<step>[0-9]+)[ \t]+"
            ),
            pairs=r"(?P<key>[A-Za-z_]+):[ \t]+(?P<val>[^\s]+)",
            per_rank_keys=frozenset({"throughput_tok_s"}),
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.95 if "[titan]" in text or "torchtitan" in text else 0.85

    def meta_from_head(self, text: str) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        for key, pattern in (
            ("per_rank_batch_size", r"local batch size (\d+)"),
            ("global_batch_size", r"global batch size (\d+)"),
            ("gradient_accumulation_steps", r"gradient accumulation steps (\d+)"),
            ("seq_len", r"sequence length (\d+)"),
            ("total_steps", r"total steps (\d+)"),
            ("warmup_steps", r"\(warmup (\d+)\)"),
        ):
            m = re.search(pattern, text)
            if m:
                meta[key] = int(m.group(1))
        m = re.search(r"parallelism: ([a-z_]+=\d+(?:, [a-z_]+=\d+)*)", text)
        if m:
            dims = {k: int(v) for k, v in re.findall(r"([a-z_]+)=(\d+)", m.group(1))}
            meta["parallelism"] = dims
            meta["world_size"] = math.prod(dims.get(k, 1) for k in ("pp", "dp_replicate", "dp_shard", "cp", "tp"))
        m = re.search(r"Model (.+?) size: ([\d,]+) total parameters", text)
        if m:
            meta["model"] = m.group(1)
            meta["n_params"] = int(m.group(2).replace(",", ""))
        m = re.search(r"CUDA capacity: (.+?) with (" + NUMBER + ")GiB memory", text)
        if m:
            meta["gpu_model"] = m.group(1)
            meta["gpu_mem_capacity_gb"] = parse_number(m.group(2))
        m = re.search(r"Peak FLOPS used for computing MFU: (" + NUMBER + ")", text)
        if m:
            meta["peak_flops"] = parse_number(m.group(1))
        return meta
