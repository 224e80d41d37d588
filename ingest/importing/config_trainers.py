"""Per-trainer config readers: a parsed config (nested mappings) -> the checklist's keys, each with
the source key it came from.

Megatron-LM arguments, Hugging Face ``TrainingArguments`` and model ``config.json``, torchtitan TOML,
and the ``stabscope`` section (or top-level keys that already are normalised names). The trainer is
recognised by the keys it uses (:func:`detect_source`); where a trainer's documented default decides
an item, the default is applied and its source says so. Validation of the values is
:mod:`ingest.importing.configs`'.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

from stab_core.checklist import CONFIG_KEYS


def _norm_key(key: Any) -> str:
    return str(key).strip().lstrip("-").replace("-", "_").lower()


def flatten(raw: Mapping[str, Any], filename: str, prefix: str = "") -> dict[str, Any]:
    """Nested mappings to ``{"section.key": value}`` with normalised keys (``--clip-grad`` -> clip_grad)."""
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        path = f"{prefix}{_norm_key(key)}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, filename, path + "."))
        else:
            flat[path] = value
    return flat


class SettingsReader:
    """Finds a setting by dotted path (``training.steps``) or by leaf name anywhere (``clip_grad``)."""

    def __init__(self, flat: Mapping[str, Any]) -> None:
        self.flat = flat
        self.by_leaf: dict[str, str] = {}
        for path in flat:
            self.by_leaf.setdefault(path.rsplit(".", 1)[-1], path)

    def find(self, *names: str) -> tuple[Any, str] | None:
        """The first of ``names`` that is present (value may be None), with its source path."""
        for name in names:
            if "." in name:
                if name in self.flat:
                    return self.flat[name], name
            elif name in self.by_leaf:
                path = self.by_leaf[name]
                return self.flat[path], path
        return None

    def value(self, *names: str) -> tuple[Any, str] | None:
        """Like ``find`` but skips settings whose value is None."""
        for name in names:
            found = self.find(name)
            if found is not None and found[0] is not None:
                return found
        return None


class MappedConfig:
    """The normalised dict under construction, with the source of each key."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

    def set(self, key: str, value: Any, source: str) -> None:
        if value is None:
            return
        self.values[key] = value
        if source:
            self.sources[key] = source

    def copy_from(
        self, reader: SettingsReader, key: str, *names: str, convert: Callable[[Any], Any] | None = None
    ) -> None:
        found = reader.value(*names)
        if found is not None:
            self.set(key, convert(found[0]) if convert else found[0], found[1])

    def default(self, key: str, value: Any, source: str) -> None:
        if key not in self.values:
            self.set(key, value, f"{source} (default)")


_SIGNATURES: dict[str, frozenset[str]] = {
    "megatron": frozenset(
        {
            "train_iters",
            "train_samples",
            "clip_grad",
            "lr_warmup_iters",
            "lr_warmup_fraction",
            "lr_warmup_samples",
            "lr_warmup_tokens",
            "lr_decay_style",
            "lr_decay_iters",
            "micro_batch_size",
            "tensor_model_parallel_size",
            "pipeline_model_parallel_size",
            "save_interval",
            "min_lr",
            "moe_aux_loss_coeff",
            "moe_router_load_balancing_type",
        }
    ),
    "hf_trainer": frozenset(
        {
            "learning_rate",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "max_grad_norm",
            "lr_scheduler_type",
            "warmup_ratio",
            "save_steps",
            "save_strategy",
            "num_train_epochs",
            "logging_steps",
            "output_dir",
        }
    ),
    "hf_model": frozenset(
        {
            "architectures",
            "model_type",
            "num_hidden_layers",
            "num_local_experts",
            "n_routed_experts",
            "router_aux_loss_coef",
            "output_router_logits",
            "torch_dtype",
        }
    ),
}


_TORCHTITAN_SECTIONS = frozenset({"job", "optimizer", "lr_scheduler", "parallelism", "checkpoint", "metrics"})


def detect_source(raw: Mapping[str, Any], flat: Mapping[str, Any]) -> str:
    sections = {_norm_key(k) for k, v in raw.items() if isinstance(v, Mapping)}
    if "training" in sections and sections & _TORCHTITAN_SECTIONS:
        return "torchtitan"
    leaves = {path.rsplit(".", 1)[-1] for path in flat}
    scores = {name: len(leaves & keys) for name, keys in _SIGNATURES.items()}
    best = max(scores, key=lambda name: scores[name])
    if scores[best] >= 2:
        return best
    if set(raw) & (set(CONFIG_KEYS) - {"source_format", "key_sources"}) or "stabscope" in sections:
        return "stabscope"
    return "unknown"


def _positive(value: Any) -> Any:
    return value if is_number(value) and value > 0 else None


def is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def map_megatron(r: SettingsReader, out: MappedConfig) -> None:
    out.copy_from(r, "total_steps", "train_iters")
    gbs = r.value("global_batch_size")
    samples = r.value("train_samples")
    if "total_steps" not in out.values and samples and gbs and is_number(samples[0]) and is_number(gbs[0]):
        out.set("total_steps", int(samples[0] // gbs[0]), f"{samples[1]} / {gbs[1]}")
    _megatron_warmup(r, out, gbs)
    out.copy_from(r, "peak_lr", "lr")
    out.copy_from(r, "min_lr", "min_lr")
    out.default("min_lr", 0.0, "min_lr")
    out.copy_from(r, "lr_decay_style", "lr_decay_style")
    out.default("num_cycles", 1, "Megatron has no LR restarts")
    out.copy_from(r, "max_norm", "clip_grad")
    out.default("max_norm", 1.0, "clip_grad")
    _megatron_precision(r, out)
    out.copy_from(r, "nan_check", "check_for_nan_in_loss_and_grad")
    save = r.find("save")
    if save is not None and save[0] is None:
        out.set("checkpoint_enabled", False, save[1])
    out.copy_from(r, "checkpoint_interval_steps", "save_interval", convert=_positive)
    out.copy_from(r, "gpus", "world_size")
    out.copy_from(r, "global_batch_size", "global_batch_size")
    out.copy_from(r, "seq_len", "seq_length", "encoder_seq_length")
    dp = r.value("data_parallel_size")
    if dp is not None:
        out.set("world_size", dp[0], dp[1])
        if gbs is not None and is_number(dp[0]) and dp[0] > 0 and is_number(gbs[0]):
            out.set("per_rank_batch_size", int(gbs[0] // dp[0]), f"{gbs[1]} / {dp[1]}")
    _megatron_moe(r, out)
    layers, hidden = r.value("num_layers"), r.value("hidden_size")
    if layers and hidden:
        out.set("model", f"Megatron-LM GPT, {layers[0]} layers, hidden {hidden[0]}", "num_layers, hidden_size")


def _megatron_warmup(r: SettingsReader, out: MappedConfig, gbs: tuple[Any, str] | None) -> None:
    """Megatron's rule: lr_warmup_fraction x decay iters if set, else lr_warmup_iters (or samples / gbs).
    Megatron-DeepSpeed's ``lr_warmup_tokens`` (when > 0) wins over a zero iteration count: tokens /
    (global batch x sequence length) when both are known, else the warmup is left to the logged LR."""
    fraction = r.value("lr_warmup_fraction")
    decay = r.value("lr_decay_iters", "train_iters")
    if fraction is not None and decay is not None and is_number(fraction[0]) and is_number(decay[0]):
        out.set("warmup_steps", round(fraction[0] * decay[0]), f"{fraction[1]} x {decay[1]}")
        return
    tokens = r.value("lr_warmup_tokens")
    if tokens is not None and is_number(tokens[0]) and tokens[0] > 0:
        seq = r.value("seq_length", "encoder_seq_length")
        if gbs is not None and seq is not None and is_number(gbs[0]) and is_number(seq[0]) and gbs[0] * seq[0] > 0:
            steps = math.ceil(tokens[0] / (gbs[0] * seq[0]))
            out.set("warmup_steps", steps, f"{tokens[1]} / ({gbs[1]} x {seq[1]})")
        return
    iters = r.value("lr_warmup_iters")
    samples = r.value("lr_warmup_samples")
    if iters is not None and is_number(iters[0]) and (iters[0] > 0 or samples is None or not samples[0]):
        out.set("warmup_steps", int(iters[0]), iters[1])
    elif samples is not None and gbs is not None and is_number(samples[0]) and is_number(gbs[0]):
        out.set("warmup_steps", int(samples[0] // gbs[0]), f"{samples[1]} / {gbs[1]}")


def _megatron_precision(r: SettingsReader, out: MappedConfig) -> None:
    bf16, fp16, fp8 = r.value("bf16"), r.value("fp16"), r.value("fp8")
    if fp8 is not None and isinstance(fp8[0], str) and fp8[0].lower() not in ("none", "false", ""):
        out.set("precision", "fp8", fp8[1])
    elif bf16 is not None and bf16[0] is True:
        out.set("precision", "bf16", bf16[1])
    elif fp16 is not None and fp16[0] is True:
        out.set("precision", "fp16", fp16[1])
        scale = r.find("loss_scale")
        if scale is not None and is_number(scale[0]):
            out.set("loss_scale_mode", "static", scale[1])
        else:
            out.set("loss_scale_mode", "dynamic", "loss_scale (default: dynamic)")
    elif bf16 is not None and fp16 is not None:
        out.set("precision", "fp32", f"{bf16[1]}, {fp16[1]}")
    main_dtype = r.value("main_params_dtype")
    if main_dtype is not None and isinstance(main_dtype[0], str):
        out.set("fp32_master_weights", main_dtype[0].lower() in ("fp32", "float32", "torch.float32"), main_dtype[1])


def _megatron_moe(r: SettingsReader, out: MappedConfig) -> None:
    experts = r.find("num_experts")
    if experts is None:
        layers = r.find("num_layers")
        if layers is not None and is_number(layers[0]):  # the model's arguments name no experts: dense, as
            out.set("num_experts", 1, f"{layers[1]} without num_experts (a dense model)")  # model_experts reads it
        return
    out.set("num_experts", experts[0] if is_number(experts[0]) else 1, experts[1])
    if not is_number(experts[0]):
        return
    z_loss = r.find("moe_z_loss_coeff")
    if z_loss is not None:
        out.set("router_z_loss_coeff", z_loss[0] if is_number(z_loss[0]) else 0.0, z_loss[1])
    balancing = r.value("moe_router_load_balancing_type")
    aux = r.value("moe_aux_loss_coeff")
    if balancing is not None and str(balancing[0]).lower() == "none":
        out.set("router_aux_loss_coeff", 0.0, balancing[1])
    elif aux is not None:
        out.set("router_aux_loss_coeff", aux[0], aux[1])
    out.copy_from(r, "router_bias_balancing", "moe_router_enable_expert_bias")


_HF_SCHEDULE_FLOOR = {
    "linear": 0.0,
    "cosine": 0.0,
    "cosine_with_restarts": 0.0,
    "constant": 1.0,
    "constant_with_warmup": 1.0,
}


def map_hf_trainer(r: SettingsReader, out: MappedConfig) -> None:
    out.copy_from(r, "total_steps", "max_steps", convert=_positive)
    steps = r.value("warmup_steps")
    ratio = r.value("warmup_ratio")
    if steps is not None and is_number(steps[0]) and steps[0] > 0:
        out.set("warmup_steps", int(steps[0]), steps[1])
    elif ratio is not None and is_number(ratio[0]) and "total_steps" in out.values:
        out.set("warmup_steps", round(ratio[0] * out.values["total_steps"]), f"{ratio[1]} x max_steps")
    elif (steps is None or steps[0] == 0) and (ratio is None or ratio[0] == 0):
        out.set("warmup_steps", 0, "warmup_steps (default)" if steps is None else steps[1])
    out.copy_from(r, "peak_lr", "learning_rate")
    _hf_schedule(r, out)
    out.copy_from(r, "max_norm", "max_grad_norm")
    out.default("max_norm", 1.0, "max_grad_norm")
    bf16, fp16 = r.value("bf16"), r.value("fp16")
    if bf16 is not None and bf16[0] is True:
        out.set("precision", "bf16", bf16[1])
    elif fp16 is not None and fp16[0] is True:
        out.set("precision", "fp16", fp16[1])
        out.set("loss_scale_mode", "dynamic", f"{fp16[1]} (torch GradScaler)")
    strategy = r.value("save_strategy")
    if strategy is not None and str(strategy[0]).lower() == "no":
        out.set("checkpoint_enabled", False, strategy[1])
    elif strategy is None or str(strategy[0]).lower() == "steps":
        out.copy_from(r, "checkpoint_interval_steps", "save_steps", convert=_hf_save_steps)
    per_device, accumulation = r.value("per_device_train_batch_size"), r.value("gradient_accumulation_steps")
    if per_device is not None and is_number(per_device[0]):
        factor = accumulation[0] if accumulation is not None and is_number(accumulation[0]) else 1
        source = per_device[1] + (f" x {accumulation[1]}" if accumulation is not None else "")
        out.set("per_rank_batch_size", int(per_device[0] * factor), source)


def _hf_save_steps(value: Any) -> Any:
    # HF reads save_steps < 1 as a fraction of max_steps; only absolute step counts are mapped.
    return int(value) if is_number(value) and value >= 1 else None


def _hf_schedule(r: SettingsReader, out: MappedConfig) -> None:
    found = r.value("lr_scheduler_type")
    kind, source = (str(found[0]).lower(), found[1]) if found is not None else ("linear", "lr_scheduler_type (default)")
    kind = kind.removeprefix("schedulertype.")
    out.set("lr_decay_style", kind, source)
    kwargs_found = r.value("lr_scheduler_kwargs")
    kwargs: Mapping[str, Any] = {}
    if kwargs_found is not None and isinstance(kwargs_found[0], Mapping):
        kwargs = kwargs_found[0]
    else:
        kwargs = {p.rsplit(".", 1)[-1]: v for p, v in r.flat.items() if p.startswith("lr_scheduler_kwargs.")}
    if kind in _HF_SCHEDULE_FLOOR:
        out.set("min_lr_ratio", _HF_SCHEDULE_FLOOR[kind], source)
    elif kind == "cosine_with_min_lr":
        peak = out.values.get("peak_lr")
        if is_number(kwargs.get("min_lr_rate")):
            out.set("min_lr_ratio", kwargs["min_lr_rate"], "lr_scheduler_kwargs.min_lr_rate")
        elif is_number(kwargs.get("min_lr")) and is_number(peak) and peak > 0:
            out.set("min_lr_ratio", kwargs["min_lr"] / peak, "lr_scheduler_kwargs.min_lr / learning_rate")
    elif kind == "polynomial":
        peak = out.values.get("peak_lr")
        lr_end = kwargs.get("lr_end", 1e-7)
        if is_number(lr_end) and is_number(peak) and peak > 0:
            out.set("min_lr_ratio", lr_end / peak, "lr_scheduler_kwargs.lr_end / learning_rate")
    elif kind == "warmup_stable_decay":
        ratio = kwargs.get("min_lr_ratio", 0.0)
        if is_number(ratio):
            out.set("min_lr_ratio", ratio, "lr_scheduler_kwargs.min_lr_ratio")
    if kind == "cosine_with_restarts":
        cycles = kwargs.get("num_cycles", 1)
        if is_number(cycles):
            out.set("num_cycles", int(cycles), "lr_scheduler_kwargs.num_cycles")
        # HF's hard restarts jump straight back to the peak: no restart warmup.
        out.set("restart_warmup_steps", 0, source)
    elif kind in _HF_SCHEDULE_FLOOR or kind in ("cosine_with_min_lr", "polynomial", "warmup_stable_decay"):
        out.set("num_cycles", 1, source)


def map_hf_model(r: SettingsReader, out: MappedConfig) -> None:
    out.copy_from(r, "model", "model_type")
    experts = r.value("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts")
    if experts is None:
        if r.value("model_type") is not None and "num_experts" not in out.values:
            out.set("num_experts", 1, "no expert count in the model config")
        return
    out.set("num_experts", experts[0], experts[1])
    aux = r.value("router_aux_loss_coef", "aux_loss_alpha")
    logits = r.value("output_router_logits")
    if aux is not None and logits is not None and logits[0] is False:
        # Mixtral-style models add the balance loss only when router logits are output.
        out.set("router_aux_loss_coeff", 0.0, logits[1])
    elif aux is not None:
        out.set("router_aux_loss_coeff", aux[0], aux[1])
    out.copy_from(r, "router_z_loss_coeff", "router_z_loss_coef")
    topk = r.value("topk_method")
    if topk is not None:
        out.set("router_bias_balancing", str(topk[0]).lower() == "noaux_tc", topk[1])


def map_torchtitan(r: SettingsReader, out: MappedConfig) -> None:
    out.copy_from(r, "total_steps", "training.steps")
    out.copy_from(r, "warmup_steps", "lr_scheduler.warmup_steps")
    out.copy_from(r, "peak_lr", "optimizer.lr")
    out.copy_from(r, "min_lr_ratio", "lr_scheduler.min_lr_factor", "lr_scheduler.lr_min")
    out.default("min_lr_ratio", 0.0, "lr_scheduler.min_lr_factor")
    out.copy_from(r, "lr_decay_style", "lr_scheduler.decay_type")
    out.default("num_cycles", 1, "torchtitan has no LR restarts")
    out.copy_from(r, "max_norm", "training.max_norm")
    out.default("max_norm", 1.0, "training.max_norm")
    dtype = r.value("training.dtype")
    param = r.value("training.mixed_precision_param")
    if dtype is not None and str(dtype[0]).lower() in ("bfloat16", "bf16"):
        # training.dtype = bfloat16 keeps parameters and optimizer states in bf16, without fp32 weights.
        out.set("precision", "bf16", dtype[1])
        out.set("fp32_master_weights", False, dtype[1])
    elif param is not None:
        kind = str(param[0]).lower()
        out.set("precision", {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(kind, kind), param[1])
        out.set("fp32_master_weights", True, f"{param[1]} (FSDP keeps fp32 sharded parameters)")
    enabled = r.value("checkpoint.enable", "checkpoint.enable_checkpoint")
    if enabled is not None:
        out.set("checkpoint_enabled", bool(enabled[0]), enabled[1])
    else:
        out.set("checkpoint_enabled", False, "checkpoint.enable (default)")
    out.copy_from(r, "checkpoint_interval_steps", "checkpoint.interval", convert=_positive)
    out.copy_from(r, "per_rank_batch_size", "training.local_batch_size", "training.batch_size")
    out.copy_from(r, "global_batch_size", "training.global_batch_size", convert=_positive)
    out.copy_from(r, "seq_len", "training.seq_len")
    all_ranks = r.value("metrics.save_for_all_ranks")
    if all_ranks is not None:
        out.set("per_rank_metrics_logged", bool(all_ranks[0]), all_ranks[1])
    name, flavor = r.value("model.name"), r.value("model.flavor")
    if name is not None:
        out.set("model", f"{name[0]} {flavor[0]}" if flavor else str(name[0]), name[1])


def map_native(raw: Mapping[str, Any], out: MappedConfig, *, top_level: bool) -> None:
    """Normalised keys given directly: in a ``stabscope`` section (which wins), and at the top level
    when no trainer was recognised (a trainer's own ``world_size`` or ``warmup_steps`` may mean
    something else than the normalised key of that name)."""
    sections: list[tuple[Mapping[str, Any], str]] = [(raw, "")] if top_level else []
    native = next((v for k, v in raw.items() if _norm_key(k) == "stabscope" and isinstance(v, Mapping)), None)
    if native is not None:
        sections.append((native, "stabscope."))
    for section, prefix in sections:
        for key, value in section.items():
            name = _norm_key(key)
            if name in CONFIG_KEYS and name not in ("source_format", "key_sources") and value is not None:
                out.set(name, value, f"{prefix}{key}")


def derive(out: MappedConfig) -> None:
    values = out.values
    peak, floor = values.get("peak_lr"), values.get("min_lr")
    if "min_lr_ratio" not in values and is_number(peak) and is_number(floor) and peak > 0:
        out.set("min_lr_ratio", floor / peak, f"{out.sources.get('min_lr', 'min_lr')} / peak_lr")
    if values.get("lr_decay_style") == "constant":
        out.set("min_lr_ratio", 1.0, out.sources.get("lr_decay_style", "lr_decay_style"))
