"""Read a run config (YAML, JSON, TOML or a Megatron-LM arguments dump) into the checklist's keys.

The I/O half of the pre-flight checklist (``stab_core.checklist``): text or bytes in (an upload, a
stored run's config text, a file), one normalised dict out whose keys are
``stab_core.checklist.CONFIG_KEYS``. Common keys of three trainers are mapped:

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

import ast
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeGuard

import yaml

from ingest.errors import StabScopeError
from stab_core.checklist import CONFIG_KEYS

ConfigFormat = Literal["yaml", "json", "toml", "megatron-args"]
FORMATS: tuple[ConfigFormat, ...] = ("yaml", "json", "toml", "megatron-args")

MAX_CONFIG_BYTES = 2 * 1024 * 1024
"""Largest config accepted (2 MiB); real trainer configs are a few KiB."""
MAX_LEAVES = 20_000
"""Most leaf values a config may hold after YAML aliases are expanded."""
MAX_DEPTH = 32
"""Deepest nesting accepted."""
MAX_LITERAL_CHARS = 10_000
"""Longest value of an arguments dump that is parsed as a Python literal."""

_ARGS_START = re.compile(r"^-{3,}\s*arguments\s*-{3,}\s*$", re.MULTILINE)
_ARGS_END = re.compile(r"^-{3,}\s*end of arguments\s*-{3,}\s*$", re.MULTILINE)
_ARGS_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s\.{2,}\s(.*?)\s*$")
_TOML_WHERE = re.compile(r"\(at line (\d+), column \d+\)")

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


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


def read_run_config(data: str | bytes, filename: str, fmt: ConfigFormat | None = None) -> dict[str, Any]:
    """Parse ``data`` (the contents of ``filename``) and map it onto the checklist's keys."""
    return normalise_config(parse_config_text(data, filename, fmt), filename=filename)


def read_run_config_file(path: str | os.PathLike[str], fmt: ConfigFormat | None = None) -> dict[str, Any]:
    """Read a config file (at most ``MAX_CONFIG_BYTES``) and normalise it."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise StabScopeError(_too_big(size), path=str(file))
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
    if _ARGS_START.search(text):
        return "megatron-args"
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")) and not re.match(r"\[[A-Za-z_][\w.\-]*\]\s*$", stripped.split("\n", 1)[0]):
        return "json"
    if re.search(r"^\s*\[[A-Za-z_][\w.\-]*\]\s*$", text, re.MULTILINE):
        return "toml"
    return "yaml"


def parse_config_text(data: str | bytes, filename: str, fmt: ConfigFormat | None = None) -> dict[str, Any]:
    """Parse a config into a plain dict with safe loaders only; errors name the file and line."""
    text = _decode(data, filename)
    if fmt is not None and fmt not in FORMATS:
        raise StabScopeError(f"unknown config format {fmt!r}; expected one of {', '.join(FORMATS)}", path=filename)
    chosen = fmt or detect_format(filename, text)
    parsers: dict[ConfigFormat, Callable[[str, str], Any]] = {
        "yaml": _parse_yaml,
        "json": _parse_json,
        "toml": _parse_toml,
        "megatron-args": _parse_megatron_args,
    }
    parsed = parsers[chosen](text, filename)
    if not isinstance(parsed, dict):
        kind = "empty" if parsed is None else f"a {type(parsed).__name__}"
        raise StabScopeError(f"expected a mapping of settings at the top level, found {kind}", path=filename)
    _check_size(parsed, filename)
    return parsed


def normalise_config(raw: Mapping[str, Any], *, filename: str = "<config>") -> dict[str, Any]:
    """Map a parsed trainer config onto ``CONFIG_KEYS`` (absent when the config does not say).

    ``source_format`` names the trainer recognised; ``key_sources`` names, for each key, the source
    key it came from (``'(default)'`` marks a trainer default applied).
    """
    flat = _flatten(raw, filename)
    out = _Mapped()
    source = _detect_source(raw, flat)
    out.set("source_format", source, "")
    if source == "megatron":
        _map_megatron(_Reader(flat), out)
    elif source == "torchtitan":
        _map_torchtitan(_Reader(flat), out)
    elif source == "hf_trainer":
        _map_hf_trainer(_Reader(flat), out)
    if source in ("hf_trainer", "hf_model"):
        _map_hf_model(_Reader(flat), out)
    _map_native(raw, out, top_level=source in ("stabscope", "unknown"))
    _derive(out)
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
"""Normalised config keys (``CONFIG_KEYS``) that are also run metadata keys (``ingest.run_meta``), by name."""


def run_meta_from_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run metadata a normalised config states: planned steps, max_norm, precision, experts, checkpoint
    interval, GPUs, step time, and tokens per step (global batch x sequence length). A value outside a
    metadata key's range (e.g. ``max_norm`` 0 = clipping off, ``fp8``) is left out."""
    from ingest.run_meta import coerce_meta_value

    found: dict[str, Any] = {}
    for config_key, meta_key in _CONFIG_TO_RUN_META:
        if config.get(config_key) is not None:
            found[meta_key] = config[config_key]
    batch, seq = config.get("global_batch_size"), config.get("seq_len")
    if _is_number(batch) and _is_number(seq):
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
    from ingest.run_meta import user_keys

    out = _Mapped()
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
        literal = {str(k): _literal(v) if isinstance(v, str) else v for k, v in args.items()}
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
    _derive(out)
    return {**out.values, "key_sources": dict(out.sources)}


# --------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------


def _too_big(size: int) -> str:
    return f"config is {size:,} bytes; the limit is {MAX_CONFIG_BYTES:,} bytes (is this really a config?)"


def _decode(data: str | bytes, filename: str) -> str:
    size = len(data.encode("utf-8")) if isinstance(data, str) else len(data)
    if size > MAX_CONFIG_BYTES:
        raise StabScopeError(_too_big(size), path=filename)
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise StabScopeError(
            f"not UTF-8 text (byte offset {exc.start}); configs must be YAML, JSON or TOML text",
            path=filename,
            line=line,
        ) from None


def _parse_yaml(text: str, filename: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise StabScopeError(f"invalid YAML: {exc.problem or exc}", path=filename, line=line) from None
    except yaml.YAMLError as exc:
        raise StabScopeError(f"invalid YAML: {exc}", path=filename) from None


def _parse_json(text: str, filename: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise StabScopeError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=filename, line=exc.lineno) from None
    except ValueError as exc:
        raise StabScopeError(f"invalid JSON: {exc}", path=filename) from None


def _reject_constant(name: str) -> float:
    # NaN/Infinity are not JSON; a config holding them is broken, not a number to grade.
    raise ValueError(f"{name} is not a valid JSON value in a config")


def _parse_toml(text: str, filename: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = _TOML_WHERE.search(message)
        line = int(where.group(1)) if where else None
        raise StabScopeError(
            f"invalid TOML: {_TOML_WHERE.sub('', message).strip()}", path=filename, line=line
        ) from None


def _parse_megatron_args(text: str, filename: str) -> dict[str, Any]:
    """The ``---- arguments ----`` block of a Megatron-LM log: ``  name ........ value`` per line (a config
    upload: a line of another shape, or a block that never ends, is an error with file and line)."""
    return megatron_args(text, filename, strict=True)


def megatron_args(text: str, filename: str = "<log>", *, strict: bool = False) -> dict[str, Any]:
    """The arguments Megatron-LM dumps at start-up (``  name ........ value`` lines between
    ``---- arguments ----`` and ``---- end of arguments ----``), values as Python literals. The one
    parser of that block, for config uploads (``strict``: any other line is an error) and for the text
    log readers (lenient: other lines, e.g. another rank's interleaved output, are passed over; a block
    cut short ends where the text does; no block gives ``{}``)."""
    start = _ARGS_START.search(text)
    if start is None:
        if strict:
            raise StabScopeError("no '---- arguments ----' block found (a Megatron-LM start-up log)", path=filename)
        return {}
    end = _ARGS_END.search(text, start.end())
    if end is None and strict:
        header_line = text.count("\n", 0, start.start()) + 1
        raise StabScopeError(
            "the arguments block never ends ('end of arguments' missing)", path=filename, line=header_line
        )
    first_line = text.count("\n", 0, start.end()) + 1
    args: dict[str, Any] = {}
    block = text[start.end() : end.start() if end is not None else len(text)]
    for offset, line in enumerate(block.splitlines()):
        if not line.strip():
            continue
        match = _ARGS_LINE.match(line)
        if match is None:
            if strict:
                raise StabScopeError(
                    f"expected 'name .... value' in the arguments block, found {line.strip()[:80]!r}",
                    path=filename,
                    line=first_line + offset,
                )
            continue
        args[match.group(1)] = _literal(match.group(2))
    return args


def _literal(value: str) -> Any:
    """A dumped Python value (None, True, 1e-05, [...], 'text'), else the text itself."""
    if len(value) > MAX_LITERAL_CHARS:
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


def _check_size(parsed: dict[str, Any], filename: str) -> None:
    """Refuse configs whose expanded size or depth is absurd (YAML alias bombs)."""
    stack: list[tuple[Any, int]] = [(parsed, 0)]
    leaves = 0
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise StabScopeError(f"config nests deeper than {MAX_DEPTH} levels", path=filename)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            leaves += 1
        else:
            for child in children:
                leaves += 1
                if leaves > MAX_LEAVES:
                    raise StabScopeError(f"config holds more than {MAX_LEAVES:,} values", path=filename)
                stack.append((child, depth + 1))


# --------------------------------------------------------------------------------------------------
# Flattening and lookup
# --------------------------------------------------------------------------------------------------


def _norm_key(key: Any) -> str:
    return str(key).strip().lstrip("-").replace("-", "_").lower()


def _flatten(raw: Mapping[str, Any], filename: str, prefix: str = "") -> dict[str, Any]:
    """Nested mappings to ``{"section.key": value}`` with normalised keys (``--clip-grad`` -> clip_grad)."""
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        path = f"{prefix}{_norm_key(key)}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, filename, path + "."))
        else:
            flat[path] = value
    return flat


class _Reader:
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


class _Mapped:
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

    def copy_from(self, reader: _Reader, key: str, *names: str, convert: Callable[[Any], Any] | None = None) -> None:
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


def _detect_source(raw: Mapping[str, Any], flat: Mapping[str, Any]) -> str:
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


# --------------------------------------------------------------------------------------------------
# Trainer mappings
# --------------------------------------------------------------------------------------------------


def _positive(value: Any) -> Any:
    return value if _is_number(value) and value > 0 else None


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _map_megatron(r: _Reader, out: _Mapped) -> None:
    out.copy_from(r, "total_steps", "train_iters")
    gbs = r.value("global_batch_size")
    samples = r.value("train_samples")
    if "total_steps" not in out.values and samples and gbs and _is_number(samples[0]) and _is_number(gbs[0]):
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
        if gbs is not None and _is_number(dp[0]) and dp[0] > 0 and _is_number(gbs[0]):
            out.set("per_rank_batch_size", int(gbs[0] // dp[0]), f"{gbs[1]} / {dp[1]}")
    _megatron_moe(r, out)
    layers, hidden = r.value("num_layers"), r.value("hidden_size")
    if layers and hidden:
        out.set("model", f"Megatron-LM GPT, {layers[0]} layers, hidden {hidden[0]}", "num_layers, hidden_size")


def _megatron_warmup(r: _Reader, out: _Mapped, gbs: tuple[Any, str] | None) -> None:
    """Megatron's rule: lr_warmup_fraction x decay iters if set, else lr_warmup_iters (or samples / gbs)."""
    fraction = r.value("lr_warmup_fraction")
    decay = r.value("lr_decay_iters", "train_iters")
    if fraction is not None and decay is not None and _is_number(fraction[0]) and _is_number(decay[0]):
        out.set("warmup_steps", round(fraction[0] * decay[0]), f"{fraction[1]} x {decay[1]}")
        return
    iters = r.value("lr_warmup_iters")
    samples = r.value("lr_warmup_samples")
    if iters is not None and _is_number(iters[0]) and (iters[0] > 0 or samples is None or not samples[0]):
        out.set("warmup_steps", int(iters[0]), iters[1])
    elif samples is not None and gbs is not None and _is_number(samples[0]) and _is_number(gbs[0]):
        out.set("warmup_steps", int(samples[0] // gbs[0]), f"{samples[1]} / {gbs[1]}")


def _megatron_precision(r: _Reader, out: _Mapped) -> None:
    bf16, fp16, fp8 = r.value("bf16"), r.value("fp16"), r.value("fp8")
    if fp8 is not None and isinstance(fp8[0], str) and fp8[0].lower() not in ("none", "false", ""):
        out.set("precision", "fp8", fp8[1])
    elif bf16 is not None and bf16[0] is True:
        out.set("precision", "bf16", bf16[1])
    elif fp16 is not None and fp16[0] is True:
        out.set("precision", "fp16", fp16[1])
        scale = r.find("loss_scale")
        if scale is not None and _is_number(scale[0]):
            out.set("loss_scale_mode", "static", scale[1])
        else:
            out.set("loss_scale_mode", "dynamic", "loss_scale (default: dynamic)")
    elif bf16 is not None and fp16 is not None:
        out.set("precision", "fp32", f"{bf16[1]}, {fp16[1]}")
    main_dtype = r.value("main_params_dtype")
    if main_dtype is not None and isinstance(main_dtype[0], str):
        out.set("fp32_master_weights", main_dtype[0].lower() in ("fp32", "float32", "torch.float32"), main_dtype[1])


def _megatron_moe(r: _Reader, out: _Mapped) -> None:
    experts = r.find("num_experts")
    if experts is None:
        return
    out.set("num_experts", experts[0] if _is_number(experts[0]) else 1, experts[1])
    if not _is_number(experts[0]):
        return
    z_loss = r.find("moe_z_loss_coeff")
    if z_loss is not None:
        out.set("router_z_loss_coeff", z_loss[0] if _is_number(z_loss[0]) else 0.0, z_loss[1])
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


def _map_hf_trainer(r: _Reader, out: _Mapped) -> None:
    out.copy_from(r, "total_steps", "max_steps", convert=_positive)
    steps = r.value("warmup_steps")
    ratio = r.value("warmup_ratio")
    if steps is not None and _is_number(steps[0]) and steps[0] > 0:
        out.set("warmup_steps", int(steps[0]), steps[1])
    elif ratio is not None and _is_number(ratio[0]) and "total_steps" in out.values:
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
    if per_device is not None and _is_number(per_device[0]):
        factor = accumulation[0] if accumulation is not None and _is_number(accumulation[0]) else 1
        source = per_device[1] + (f" x {accumulation[1]}" if accumulation is not None else "")
        out.set("per_rank_batch_size", int(per_device[0] * factor), source)


def _hf_save_steps(value: Any) -> Any:
    # HF reads save_steps < 1 as a fraction of max_steps; only absolute step counts are mapped.
    return int(value) if _is_number(value) and value >= 1 else None


def _hf_schedule(r: _Reader, out: _Mapped) -> None:
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
        if _is_number(kwargs.get("min_lr_rate")):
            out.set("min_lr_ratio", kwargs["min_lr_rate"], "lr_scheduler_kwargs.min_lr_rate")
        elif _is_number(kwargs.get("min_lr")) and _is_number(peak) and peak > 0:
            out.set("min_lr_ratio", kwargs["min_lr"] / peak, "lr_scheduler_kwargs.min_lr / learning_rate")
    elif kind == "polynomial":
        peak = out.values.get("peak_lr")
        lr_end = kwargs.get("lr_end", 1e-7)
        if _is_number(lr_end) and _is_number(peak) and peak > 0:
            out.set("min_lr_ratio", lr_end / peak, "lr_scheduler_kwargs.lr_end / learning_rate")
    elif kind == "warmup_stable_decay":
        ratio = kwargs.get("min_lr_ratio", 0.0)
        if _is_number(ratio):
            out.set("min_lr_ratio", ratio, "lr_scheduler_kwargs.min_lr_ratio")
    if kind == "cosine_with_restarts":
        cycles = kwargs.get("num_cycles", 1)
        if _is_number(cycles):
            out.set("num_cycles", int(cycles), "lr_scheduler_kwargs.num_cycles")
        # HF's hard restarts jump straight back to the peak: no restart warmup.
        out.set("restart_warmup_steps", 0, source)
    elif kind in _HF_SCHEDULE_FLOOR or kind in ("cosine_with_min_lr", "polynomial", "warmup_stable_decay"):
        out.set("num_cycles", 1, source)


def _map_hf_model(r: _Reader, out: _Mapped) -> None:
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


def _map_torchtitan(r: _Reader, out: _Mapped) -> None:
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


def _map_native(raw: Mapping[str, Any], out: _Mapped, *, top_level: bool) -> None:
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


def _derive(out: _Mapped) -> None:
    values = out.values
    peak, floor = values.get("peak_lr"), values.get("min_lr")
    if "min_lr_ratio" not in values and _is_number(peak) and _is_number(floor) and peak > 0:
        out.set("min_lr_ratio", floor / peak, f"{out.sources.get('min_lr', 'min_lr')} / peak_lr")
    if values.get("lr_decay_style") == "constant":
        out.set("min_lr_ratio", 1.0, out.sources.get("lr_decay_style", "lr_decay_style"))


# --------------------------------------------------------------------------------------------------
# Validation of the normalised dict
# --------------------------------------------------------------------------------------------------


def _validated(out: _Mapped, filename: str) -> dict[str, Any]:
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
        if _is_number(value) and float(value).is_integer() and value >= 0:
            return int(value)
        raise bad("a whole number >= 0")
    if key in _FLOAT_KEYS:
        if _is_number(value) and value >= 0:
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
        if isinstance(value, list) and all(_is_number(v) and float(v).is_integer() and v >= 0 for v in value):
            return [int(v) for v in value]
        raise bad("a list of steps")
    raise bad("a known key")  # pragma: no cover - every CONFIG_KEYS entry is handled above
