"""Megatron-LM and Megatron-DeepSpeed console logs.

Metric lines (both): `` iteration   100/  500000 | consumed samples: 51200 | elapsed time per iteration
(ms): 1234.5 | learning rate: 1.0E-04 | global batch size: 512 | lm loss: 7.399E+00 | loss scale: 1.0 |
grad norm: 2.918 | number of skipped iterations: 0 | number of nan iterations: 0 |`` (optionally
behind a ``[date time]`` stamp), ``validation loss at iteration N | lm loss value: x | lm loss PPL: y |``
and the per-rank ``[Rank N] (after K iterations) memory (MB) | allocated: ... | max reserved: ...``.
Megatron-DeepSpeed adds DeepSpeed's engine lines: ``[Rank 0] step=10, skipped=0, lr=[...], mom=[...]``
and ``steps: 10 loss: 10.87 iter time (s): 1.23 samples/sec: 103.7``.

The ``arguments`` dump goes to ``meta`` (batch sizes, world size, clip, planned iterations,
sequence length, model shape); every other non-metric line is skipped and counted.
"""

from __future__ import annotations

import re
from typing import Any, Final

from ingest.formats.aliases import canonical_name, sanitise_name
from ingest.formats.numbers import NUMBER
from ingest.formats.planned import PlannedStepsTextLogReader
from ingest.formats.textlog import LineKind

_TS: Final = r"(?:\[(?P<ts>[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?)\][ \t]*)?"
_PIPE_PAIRS: Final = (
    r"[ \t]*(?P<key>[^|:\n0-9][^|:\n]*[^|:\s]):[ \t]*(?P<val>[^\s|]+)"
    r"(?:[ \t]+(?:s|ms|sec)(?=[ \t]+[A-Za-z][^|:\n]*:))?[ \t]*(?=\||$|[A-Za-z][^|:\n]*:)"
)
"""One ``key: value`` field between ``|``; a field of two pairs with no ``|`` between them (``iteration time: 33.616
s samples/sec: 33.3``, a ``|`` missing after the unit) is two pairs, split after the first value's unit: a key never
starts with a digit, and never holds a value (#31)."""

_ITERATION_KEYS: Final = {
    "consumed samples": ("consumed_samples", None),
    "throughput per GPU (TFLOP/s/GPU)": ("tflops_per_gpu", None),
    "TFLOPs": ("tflops_per_gpu", None),
    "samples per second": ("samples_per_s", None),
    "samples/sec": ("samples_per_s", None),
    "global batch size": ("global_batch_size", None),
}


def _iteration_key(key: str) -> tuple[str, str | None]:
    return _ITERATION_KEYS.get(key, canonical_name(key))


_MEMORY_KEYS: Final = {
    "allocated": "gpu_mem_gb",
    "max allocated": "gpu_mem_max_gb",
    "reserved": "gpu_mem_reserved_gb",
    "max reserved": "gpu_mem_max_reserved_gb",
}


def _memory_key(key: str) -> tuple[str, str | None]:
    return (_MEMORY_KEYS.get(key, sanitise_name(key) + "_gb"), "MB")


def _validation_key(key: str) -> tuple[str, str | None]:
    if key == "lm loss value":
        return ("val_loss", None)
    if key == "lm loss PPL":
        return ("val_ppl", None)
    return ("val_" + sanitise_name(key.removesuffix(" value")), None)


def _ds_key(key: str) -> tuple[str, str | None] | None:
    if key == "skipped":
        return ("ds_skipped_steps_total", None)
    if key == "samples/sec":
        return ("samples_per_s", None)
    return canonical_name(key)


MEGATRON_KINDS: Final = (
    LineKind(
        name="iteration",
        prefix=r"[ \t]*" + _TS + r"iteration[ \t]+(?P<step>[0-9]+)[ \t]*/[ \t]*(?P<total>[0-9]+)[ \t]*\|",
        pairs=_PIPE_PAIRS,
        keymap=_iteration_key,
        run_level=True,
    ),
    LineKind(
        name="memory",
        prefix=(
            r"[ \t]*\[Rank[ \t]+(?P<rank>[0-9]+)\][ \t]*\(after[ \t]+(?P<step>[0-9]+)[ \t]+iterations\)"
            r"[ \t]*memory[ \t]*\(MB\)[ \t]*\|"
        ),
        pairs=_PIPE_PAIRS,
        keymap=_memory_key,
        all_per_rank=True,
    ),
    LineKind(
        name="validation",
        # Megatron-DeepSpeed of 2021-22 (BigScience's runs) prints "valid loss at iteration N"
        prefix=r"[ \t]*" + _TS + r"valid(?:ation)? loss at (?:iteration[ \t]+(?P<step>[0-9]+))?[^|\n]*\|",
        pairs=_PIPE_PAIRS,
        keymap=_validation_key,
        run_level=True,
    ),
)

DEEPSPEED_KINDS: Final = (
    LineKind(
        name="ds_step",
        prefix=(
            r"(?:\[(?P<ts>[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:,[0-9]+)?)\][ \t]*)?"
            r"(?:\[[^\]\n]*\][ \t]*)*\[Rank[ \t]+(?P<rank>[0-9]+)\][ \t]*step=(?P<step>[0-9]+),[ \t]*"
        ),
        pairs=r"(?P<key>skipped|lr)=\[?(?P<val>" + NUMBER + ")",
        keymap=_ds_key,
        ignore=NUMBER,
        run_level=True,
    ),
    LineKind(
        name="ds_loss",
        prefix=r"(?:\[[^\]\n]*\][ \t]*)*steps:[ \t]*(?P<step>[0-9]+)[ \t]+",
        pairs=r"(?P<key>[A-Za-z][A-Za-z/ ()]*?):[ \t]*(?P<val>" + NUMBER + ")",
        keymap=_ds_key,
        run_level=True,
    ),
)

_DEEPSPEED_MARKERS: Final = re.compile(
    r"\[Rank \d+\] step=\d+|^steps: \d+ loss:|\[INFO\] \[[A-Za-z_]+\.py:\d+:|DeepSpeed|^\s+deepspeed \.{2,}",
    re.M,
)
MEGATRON_BANNER: Final = re.compile(r"-{3,} arguments -{3,}|using world size: \d+ and model-parallel size")
"""Megatron's own start-up lines (its argument dump, its world size): a log that has them is Megatron's."""
_MEGATRON_MARKERS: Final = re.compile(
    r"-{3,} arguments -{3,}|^using world size: \d+|> building \w+ model|^\s*iteration\s+\d+/", re.M
)

_ARG_META: Final = {
    "global_batch_size": "global_batch_size",
    "micro_batch_size": "micro_batch_size",
    "world_size": "world_size",
    "clip_grad": "max_norm",
    "train_iters": "total_steps",
    "seq_length": "seq_len",
    "lr": "peak_lr",
    "min_lr": "min_lr",
    "lr_warmup_iters": "warmup_steps",
    "lr_decay_style": "lr_decay_style",
    "tensor_model_parallel_size": "tensor_parallel",
    "pipeline_model_parallel_size": "pipeline_parallel",
    "data_parallel_size": "data_parallel",
}


def megatron_meta(text: str) -> dict[str, Any]:
    """Run facts from Megatron's argument dump (parsed by :func:`ingest.formats.config_parsing.megatron_args`, the one
    parser of that block) and startup lines."""
    from ingest.formats.config_parsing import megatron_args

    meta: dict[str, Any] = {}
    args = megatron_args(text)
    if args:
        meta["args"] = {
            k: v if isinstance(v, int | float | str | bool) or v is None else str(v) for k, v in args.items()
        }
        for arg, key in _ARG_META.items():
            if args.get(arg) is not None:
                meta[key] = args[arg]
        shape = [
            f"{args[k]} {label}"
            for k, label in (
                ("num_layers", "layers"),
                ("hidden_size", "hidden"),
                ("num_attention_heads", "heads"),
                ("ffn_hidden_size", "ffn"),
                ("num_experts", "experts"),
            )
            if args.get(k) is not None
        ]
        if shape:
            meta["model"] = ", ".join(shape)
        meta.update(_run_meta_from_args(args))
    m = re.search(r"using world size: (\d+)", text)
    if m:
        meta["world_size"] = int(m.group(1))
    batch = _per_replica_batch(meta)
    if batch is not None:
        meta["per_rank_batch_size"] = batch
    return meta


def _per_replica_batch(meta: dict[str, Any]) -> int | None:
    """Samples one data-parallel replica contributes to a step's gradient (global batch / DP size; the
    micro batch times the accumulation steps): the two-batch noise scale's small batch. DP size from
    the dump, else world size / (tensor x pipeline parallel)."""
    gbs, dp = meta.get("global_batch_size"), meta.get("data_parallel")
    if not isinstance(dp, int):
        world, tp, pp = meta.get("world_size"), meta.get("tensor_parallel", 1), meta.get("pipeline_parallel", 1)
        if isinstance(world, int) and isinstance(tp, int) and isinstance(pp, int) and tp * pp > 0:
            dp = world // (tp * pp)
    if isinstance(gbs, int) and isinstance(dp, int) and dp > 0:
        return gbs // dp
    return None


def _run_meta_from_args(args: dict[str, Any]) -> dict[str, Any]:
    """The run metadata keys (``ingest.store.run_meta.META_KEYS``) the argument dump states: world and parallel
    sizes, clip_grad as max_norm (0 = clipping off: left out), precision, planned steps, tokens per
    step (global batch x sequence length), experts (None = a dense model: 1) and the checkpoint interval."""

    def whole(name: str) -> int | None:
        value = args.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    meta: dict[str, Any] = {}
    for arg, key in (
        ("world_size", "world_size"),
        ("tensor_model_parallel_size", "tensor_parallel_size"),
        ("pipeline_model_parallel_size", "pipeline_parallel_size"),
        ("train_iters", "planned_steps"),
        ("save_interval", "save_interval"),
        ("num_experts", "num_experts"),
    ):
        if whole(arg) is not None:
            meta[key] = whole(arg)
    if "num_experts" in args and args["num_experts"] is None:
        meta["num_experts"] = 1
    clip = args.get("clip_grad")
    if isinstance(clip, int | float) and not isinstance(clip, bool) and clip > 0:
        meta["max_norm"] = float(clip)
    if args.get("bf16") is True:
        meta["precision"] = "bf16"
    elif args.get("fp16") is True:
        meta["precision"] = "fp16"
    elif args.get("bf16") is False and args.get("fp16") is False:
        meta["precision"] = "fp32"
    batch, seq = whole("global_batch_size"), whole("seq_length")
    if batch is not None and seq is not None:
        meta["tokens_per_step"] = batch * seq
    return meta


_BATCH_SETTING: Final = frozenset({"global_batch_size"})
"""Megatron prints the global batch size on every iteration line: a setting unless it ramps up."""


class MegatronReader(PlannedStepsTextLogReader):
    name = "megatron"
    description = "Megatron-LM console: 'iteration N/ M | ... | lm loss: x | grad norm: x | ...'"
    joins_wrapped_lines = True  # logs pasted into notes
    settings_when_constant = _BATCH_SETTING
    kinds = MEGATRON_KINDS

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.7 if _DEEPSPEED_MARKERS.search(text) else 0.92

    def markers(self, text: str) -> float:
        if not _MEGATRON_MARKERS.search(text):
            return 0.0
        return 0.45 if _DEEPSPEED_MARKERS.search(text) else 0.6

    def meta_from_head(self, text: str) -> dict[str, Any]:
        return megatron_meta(text)


class MegatronDeepSpeedReader(PlannedStepsTextLogReader):
    name = "megatron_deepspeed"
    description = "Megatron-DeepSpeed console: Megatron iteration lines plus DeepSpeed engine lines"
    joins_wrapped_lines = True  # logs pasted into notes
    settings_when_constant = _BATCH_SETTING
    kinds = MEGATRON_KINDS + DEEPSPEED_KINDS

    def score(self, n_metric_lines: int, text: str) -> float:
        if not _MEGATRON_MARKERS.search(text):
            return 0.6  # DeepSpeed's engine lines without Megatron's: deepspeed_stdout's log
        if not _DEEPSPEED_MARKERS.search(text):
            return 0.6
        # only DeepSpeed's engine lines matched, no Megatron iteration line: a Megatron fork that
        # prints its own iteration line (GPT-NeoX) on DeepSpeed is more specific, so this reader
        # steps back by more than the ambiguity margin; with no other reader (a slow first step:
        # the head holds Megatron's banner and the engine's step=0 line only) it is still the one
        if _MEGATRON_ONLY.count_metric_lines(text) == 0:
            return 0.8
        return 0.95

    def markers(self, text: str) -> float:
        if not _MEGATRON_MARKERS.search(text):
            return 0.0
        return 0.6 if _DEEPSPEED_MARKERS.search(text) else 0.45

    def meta_from_head(self, text: str) -> dict[str, Any]:
        return megatron_meta(text)


_MEGATRON_ONLY: Final = MegatronReader()
"""Counts Megatron's own iteration and validation lines in a head (without DeepSpeed's engine lines)."""
