"""Read a run config (YAML, JSON, TOML or a Megatron-LM arguments dump) into the checklist's keys.

The I/O half of the pre-flight checklist (``stab_core.checklist``): text or bytes in (an upload, a
stored run's config text, a file), one normalised dict out whose keys are
``stab_core.checklist.CONFIG_KEYS``; and the facts a config and a run's metadata share (the noise
scale's batch, the planned steps...). The text is parsed by :mod:`ingest.formats.config_parsing` and mapped by
the per-trainer readers of :mod:`ingest.importing.config_trainers`; this module validates the result. Common
keys of three trainers are mapped:

- Megatron-LM arguments (``train_iters``, ``lr_warmup_*``, ``min_lr``, ``clip_grad``, ``bf16``/``fp16``,
  ``loss_scale``, ``save_interval``, ``num_experts``, ``moe_*``), as YAML/JSON or as the
  ``---- arguments ----`` block Megatron prints at start-up;
- Hugging Face ``TrainingArguments`` (``max_steps``, ``warmup_*``, ``lr_scheduler_type``,
  ``max_grad_norm``, ``save_steps``) and model ``config.json`` MoE fields (``num_local_experts``,
  ``router_aux_loss_coef``, ``router_z_loss_coef``, ``topk_method``);
- torchtitan TOML (``[training]``, ``[optimizer]``, ``[lr_scheduler]``, ``[checkpoint]``).

A ``stabscope`` section (or top-level keys that already are normalised names) adds what no trainer
config says, e.g. ``checkpoint_write_s``, ``restore_rehearsed`` or ``mtbf_hours``, and overrides the
mapped values. Where a trainer's documented default decides an item (Megatron ``min_lr`` 0,
``clip_grad`` 1.0; HF ``max_grad_norm`` 1.0, ``lr_scheduler_type`` linear), the default is applied
and ``key_sources`` says so.

Only safe loaders are used (``yaml.safe_load``, ``json``, ``tomllib``, ``ast.literal_eval`` on short
values); input is bounded (``MAX_CONFIG_BYTES``) and nesting/size limits stop alias bombs. Every
failure raises ``StabScopeError`` naming the file and, where the parser reports one, the line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from ingest.errors import StabScopeError
from ingest.formats.config_parsing import (
    ARGS_START,
    MAX_CONFIG_BYTES,
    SKIPPED_LINES_KEY,
    check_size,
    decode_config,
    literal_value,
    megatron_args,
    parse_json,
    parse_megatron_args_config,
    parse_toml,
    parse_yaml,
    too_big,
)
from ingest.formats.raw_text import strip_launcher_prefixes
from ingest.importing.config_trainers import (
    MappedConfig,
    SettingsReader,
    derive,
    detect_source,
    flatten,
    is_number,
    map_hf_model,
    map_hf_trainer,
    map_megatron,
    map_native,
    map_torchtitan,
)
from stab_core.checklist import CONFIG_KEYS

__all__ = [
    "FORMATS",
    "MAX_CONFIG_BYTES",
    "ConfigFormat",
    "config_from_run_meta",
    "detect_format",
    "megatron_args",
    "meta_with_config_facts",
    "normalise_config",
    "parse_config_text",
    "read_run_config",
    "read_run_config_file",
    "run_meta_from_config",
]

ConfigFormat = Literal["yaml", "json", "toml", "megatron-args"]


FORMATS: tuple[ConfigFormat, ...] = ("yaml", "json", "toml", "megatron-args")


_INT_KEYS = frozenset(
    {
        "total_steps",
        "warmup_steps",
        "num_cycles",
        "restart_warmup_steps",
        "checkpoint_interval_steps",
        "gpus",
        "world_size",
        "per_rank_batch_size",
        "global_batch_size",
        "seq_len",
        "num_experts",
    }
)


_FLOAT_KEYS = frozenset(
    {
        "peak_lr",
        "min_lr",
        "min_lr_ratio",
        "max_norm",
        "checkpoint_write_s",
        "mtbf_hours",
        "step_time_s",
        "router_z_loss_coeff",
        "router_aux_loss_coeff",
    }
)


_BOOL_KEYS = frozenset(
    {
        "fp32_master_weights",
        "nan_check",
        "checkpoint_enabled",
        "restore_rehearsed",
        "router_bias_balancing",
        "expert_load_logged",
        "per_rank_metrics_logged",
        "batch_provenance_logged",
    }
)


_STR_KEYS = frozenset({"source_format", "model", "lr_decay_style", "precision", "loss_scale_mode"})


_PRECISIONS = frozenset({"bf16", "fp16", "fp8", "fp32"})


def read_run_config(data: str | bytes, filename: str, fmt: ConfigFormat | None = None) -> dict[str, Any]:
    """Parse ``data`` (the contents of ``filename``) and map it onto the checklist's keys. Lines passed
    over in a Megatron argument dump (an interleaved WARNING) are listed under ``skipped_lines``."""
    parsed = parse_config_text(data, filename, fmt)
    skipped = parsed.pop(SKIPPED_LINES_KEY, None)
    config = normalise_config(parsed, filename=filename)
    if skipped:
        config["skipped_lines"] = list(skipped)
    return config


def read_run_config_file(path: str | os.PathLike[str], fmt: ConfigFormat | None = None) -> dict[str, Any]:
    """Read a config file (at most ``MAX_CONFIG_BYTES``) and normalise it."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise StabScopeError(too_big(size), path=str(file))
        with file.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise StabScopeError(f"cannot read the config: {exc.strerror or exc}", path=str(file)) from None
    return read_run_config(data, str(file), fmt)


def detect_format(filename: str, text: str) -> ConfigFormat:
    """The format of a config from its file name's suffix, else from its first characters."""
    suffix = Path(filename).suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "yaml"
    if suffix == ".json":
        return "json"
    if suffix == ".toml":
        return "toml"
    if ARGS_START.search(text) or ARGS_START.search(strip_launcher_prefixes(text[:1_000_000])):
        return "megatron-args"
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")) and not re.match(r"\[[A-Za-z_][\w.\-]*\]\s*$", stripped.split("\n", 1)[0]):
        return "json"
    if re.search(r"^\s*\[[A-Za-z_][\w.\-]*\]\s*$", text, re.MULTILINE):
        return "toml"
    return "yaml"


def parse_config_text(data: str | bytes, filename: str, fmt: ConfigFormat | None = None) -> dict[str, Any]:
    """Parse a config into a plain dict with safe loaders only; errors name the file and line."""
    text = decode_config(data, filename)
    if fmt is not None and fmt not in FORMATS:
        raise StabScopeError(f"unknown config format {fmt!r}; expected one of {', '.join(FORMATS)}", path=filename)
    chosen = fmt or detect_format(filename, text)
    parsers: dict[ConfigFormat, Callable[[str, str], Any]] = {
        "yaml": parse_yaml,
        "json": parse_json,
        "toml": parse_toml,
        "megatron-args": parse_megatron_args_config,
    }
    try:
        parsed = parsers[chosen](text, filename)
    except RecursionError:  # brackets nested thousands deep: the parsers recurse per level
        from ingest.formats._tabular import nesting_refusal

        raise nesting_refusal(text, filename, f"{chosen} config") from None
    if not isinstance(parsed, dict):
        kind = "empty" if parsed is None else f"a {type(parsed).__name__}"
        raise StabScopeError(f"expected a mapping of settings at the top level, found {kind}", path=filename)
    check_size(parsed, filename)
    return parsed


def normalise_config(raw: Mapping[str, Any], *, filename: str = "<config>") -> dict[str, Any]:
    """Map a parsed trainer config onto ``CONFIG_KEYS`` (absent when the config does not say).

    ``source_format`` names the trainer recognised; ``key_sources`` names, for each key, the source
    key it came from (``'(default)'`` marks a trainer default applied).
    """
    flat = flatten(raw, filename)
    out = MappedConfig()
    source = detect_source(raw, flat)
    out.set("source_format", source, "")
    if source == "megatron":
        map_megatron(SettingsReader(flat), out)
    elif source == "torchtitan":
        map_torchtitan(SettingsReader(flat), out)
    elif source == "hf_trainer":
        map_hf_trainer(SettingsReader(flat), out)
    if source in ("hf_trainer", "hf_model"):
        map_hf_model(SettingsReader(flat), out)
    map_native(raw, out, top_level=source in ("stabscope", "unknown"))
    derive(out)
    return _validated(out, filename)


_CONFIG_TO_RUN_META: tuple[tuple[str, str], ...] = (
    ("total_steps", "planned_steps"),
    ("max_norm", "max_norm"),
    ("precision", "precision"),
    ("num_experts", "num_experts"),
    ("checkpoint_interval_steps", "save_interval"),
    ("gpus", "gpus"),
    ("step_time_s", "step_time_s"),
)
"""Normalised config keys (``CONFIG_KEYS``) that are also run metadata keys (``ingest.store.run_meta``), by name."""


def run_meta_from_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run metadata a normalised config states: planned steps, max_norm, precision, experts, checkpoint
    interval, GPUs, step time, and tokens per step (global batch x sequence length). A value outside a
    metadata key's range (e.g. ``max_norm`` 0 = clipping off, ``fp8``) is left out."""
    from ingest.store.run_meta import coerce_meta_value

    found: dict[str, Any] = {}
    for config_key, meta_key in _CONFIG_TO_RUN_META:
        if config.get(config_key) is not None:
            found[meta_key] = config[config_key]
    batch, seq = config.get("global_batch_size"), config.get("seq_len")
    if is_number(batch) and is_number(seq):
        found["tokens_per_step"] = batch * seq
    meta: dict[str, Any] = {}
    for key, value in found.items():
        try:
            meta[key] = coerce_meta_value(key, value)
        except StabScopeError:
            continue
    return meta


def meta_with_config_facts(meta: Mapping[str, Any]) -> dict[str, Any]:
    """An imported run's ``meta`` plus what its attached config (``config_text``, kept by the Upload page)
    states (``run_meta_from_config``) where the log itself said nothing. A config that no longer parses
    adds nothing: it was checked when it was attached."""
    text = meta.get("config_text")
    if not isinstance(text, str):
        return dict(meta)
    try:
        config = read_run_config(text, str(meta.get("config_filename") or "config"))
    except StabScopeError:
        return dict(meta)
    return {**run_meta_from_config(config), **meta}


_RUN_META_TO_CONFIG: tuple[tuple[str, str], ...] = (
    ("planned_steps", "total_steps"),
    ("max_norm", "max_norm"),
    ("precision", "precision"),
    ("num_experts", "num_experts"),
    ("save_interval", "checkpoint_interval_steps"),
    ("gpus", "gpus"),
    ("world_size", "gpus"),  # a run's world size is its GPU count; the checklist's world_size is DP ranks
    ("step_time_s", "step_time_s"),
    ("data_parallel", "world_size"),
)


_LOG_ARGS_SOURCE = "the log's argument dump"


def config_from_run_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The checklist config (``CONFIG_KEYS``) a stored run's metadata states, ``{}`` when it states none.

    In order of precedence: the metadata a user set (``stabscope meta``, the Run settings form), the config
    text attached at upload (``config_text``), Megatron's argument dump kept at import (``meta['args']``),
    then the settings a log reader stored (``total_steps``, ``warmup_steps``, ``peak_lr``, ...).
    ``key_sources`` says which one each key came from.
    """
    from ingest.store.run_meta import user_keys

    out = MappedConfig()
    owned = user_keys(meta)
    layers: list[tuple[dict[str, Any], dict[str, str]]] = []
    for run_key, config_key in _RUN_META_TO_CONFIG:
        value = meta.get(run_key)
        if run_key in owned and value is not None:
            layers.append(({config_key: value}, {config_key: f"run metadata {run_key} (set by you)"}))
    text = meta.get("config_text")
    if isinstance(text, str):
        try:
            attached = read_run_config(text, str(meta.get("config_filename") or "config"))
            layers.append((attached, dict(attached.get("key_sources") or {})))
        except StabScopeError:
            pass  # checked when it was attached; a config that no longer parses states nothing
    args = meta.get("args")
    if isinstance(args, Mapping) and args:
        # the format reader keeps the dump's values typed (runs stored before 2026-12-02 hold them as text)
        literal = {str(k): literal_value(v) if isinstance(v, str) else v for k, v in args.items()}
        try:
            dump = normalise_config(literal, filename=_LOG_ARGS_SOURCE)
            if dump.get("source_format") == "megatron":
                layers.append((dump, {k: f"{_LOG_ARGS_SOURCE}: {v}" for k, v in dump["key_sources"].items()}))
        except StabScopeError:
            pass
    stated = {k: v for k, v in meta.items() if k in CONFIG_KEYS and k not in ("world_size", "key_sources")}
    layers.append((stated, {k: f"run metadata {k}" for k in stated}))
    for run_key, config_key in _RUN_META_TO_CONFIG:
        if meta.get(run_key) is not None:
            layers.append(({config_key: meta[run_key]}, {config_key: f"run metadata {run_key}"}))
    for values, sources in layers:
        for key, value in values.items():
            if key in ("source_format", "key_sources") or key in out.values or value is None:
                continue
            try:
                out.set(key, _coerce(key, value, sources.get(key, key), "run metadata"), sources.get(key, key))
            except StabScopeError:
                continue
    if not out.values:
        return {}
    out.set("source_format", "stored run", "")
    derive(out)
    return {**out.values, "key_sources": dict(out.sources)}


def _validated(out: MappedConfig, filename: str) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, value in out.values.items():
        origin = out.sources.get(key, key)
        clean[key] = _coerce(key, value, origin, filename)
    clean["key_sources"] = {k: v for k, v in out.sources.items() if k in clean}
    return clean


def _coerce(key: str, value: Any, origin: str, filename: str) -> Any:
    def bad(expected: str) -> StabScopeError:
        return StabScopeError(f"{origin} = {value!r}: expected {expected} for {key}", path=filename)

    if key in _INT_KEYS:
        if is_number(value) and float(value).is_integer() and value >= 0:
            return int(value)
        raise bad("a whole number >= 0")
    if key in _FLOAT_KEYS:
        if is_number(value) and value >= 0:
            return float(value)
        raise bad("a number >= 0")
    if key in _BOOL_KEYS:
        if isinstance(value, bool):
            return value
        raise bad("true or false")
    if key == "precision":
        text = str(value).lower()
        if text not in _PRECISIONS:
            raise bad("one of " + ", ".join(sorted(_PRECISIONS)))
        return text
    if key == "loss_scale_mode":
        if value not in ("dynamic", "static"):
            raise bad("dynamic or static")
        return value
    if key in _STR_KEYS:
        return str(value)
    if key == "transition_steps":
        if isinstance(value, list) and all(is_number(v) and float(v).is_integer() and v >= 0 for v in value):
            return [int(v) for v in value]
        raise bad("a list of steps")
    raise bad("a known key")  # pragma: no cover - every CONFIG_KEYS entry is handled above
