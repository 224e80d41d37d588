"""Run configs: safe parsing with file/line errors, and mapping of Megatron-LM, HF and torchtitan keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ingest.errors import StabScopeError
from ingest.importing.configs import (
    MAX_CONFIG_BYTES,
    detect_format,
    normalise_config,
    parse_config_text,
    read_run_config,
    read_run_config_file,
)
from stab_core.checklist import CONFIG_KEYS, evaluate_checklist

REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"

MEGATRON_YAML = """\
# Megatron-LM arguments of a 7B MoE run
train-iters: 500000
lr: 3.0e-4
min-lr: 3.0e-5
lr-decay-style: cosine
lr-warmup-iters: 2000
clip-grad: 1.0
bf16: true
check-for-nan-in-loss-and-grad: true
save-interval: 1000
global-batch-size: 1024
data-parallel-size: 64
world-size: 512
seq-length: 4096
num-experts: 64
moe-aux-loss-coeff: 0.01
moe-z-loss-coeff: null
moe-router-load-balancing-type: aux_loss
"""

HF_TRAINING_ARGS: dict[str, Any] = {
    "output_dir": "out",
    "max_steps": 10000,
    "warmup_ratio": 0.03,
    "warmup_steps": 0,
    "learning_rate": 2e-5,
    "lr_scheduler_type": "cosine",
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 8,
    "bf16": True,
    "fp16": False,
    "save_strategy": "steps",
    "save_steps": 500,
    "logging_steps": 10,
}

TORCHTITAN_TOML = """\
[job]
dump_folder = "./outputs"

[model]
name = "llama3"
flavor = "70B"

[optimizer]
name = "AdamW"
lr = 1.5e-4

[lr_scheduler]
warmup_steps = 2000
decay_type = "cosine"
min_lr_factor = 0.1

[training]
local_batch_size = 4
seq_len = 8192
max_norm = 1.0
steps = 100000
mixed_precision_param = "bfloat16"

[checkpoint]
enable = true
interval = 500

[stabscope]
checkpoint_write_s = 300
restore_rehearsed = true
step_time_s = 9.5
gpus = 2048
"""


def test_megatron_yaml_maps_dashed_keys_and_moe_settings() -> None:
    cfg = read_run_config(MEGATRON_YAML, "megatron.yaml")
    assert cfg["source_format"] == "megatron"
    assert cfg["total_steps"] == 500_000
    assert cfg["warmup_steps"] == 2000
    assert cfg["min_lr_ratio"] == pytest.approx(0.1)
    assert cfg["max_norm"] == 1.0
    assert cfg["precision"] == "bf16"
    assert cfg["nan_check"] is True
    assert cfg["checkpoint_interval_steps"] == 1000
    assert cfg["world_size"] == 64 and cfg["gpus"] == 512
    assert cfg["per_rank_batch_size"] == 16
    assert cfg["num_experts"] == 64
    assert cfg["router_z_loss_coeff"] == 0.0  # null in Megatron means off
    assert cfg["router_aux_loss_coeff"] == 0.01
    assert cfg["key_sources"]["max_norm"] == "clip_grad"
    assert set(cfg) <= set(CONFIG_KEYS)
    moe = {r.id: r for r in evaluate_checklist(cfg, {"expert_load_logged": True})}["moe_router"]
    assert moe.status == "fail"  # aux loss alone, no z-loss, no bias balancing


def test_megatron_defaults_apply_when_a_key_is_absent() -> None:
    cfg = read_run_config("train_iters: 1000\nlr: 1.0e-4\nmicro_batch_size: 2\n", "m.yaml")
    assert cfg["source_format"] == "megatron"
    assert cfg["min_lr_ratio"] == 0.0  # Megatron's min_lr defaults to 0
    assert cfg["key_sources"]["min_lr"] == "min_lr (default)"
    assert cfg["max_norm"] == 1.0
    grades = {r.id: r.status for r in evaluate_checklist(cfg, None)}
    assert grades["min_lr_ratio"] == "fail"


def test_megatron_fp16_loss_scale_modes() -> None:
    static = read_run_config("train_iters: 10\nclip_grad: 1.0\nfp16: true\nloss_scale: 12.0\n", "a.yaml")
    dynamic = read_run_config("train_iters: 10\nclip_grad: 1.0\nfp16: true\nloss_scale: null\n", "b.yaml")
    assert static["loss_scale_mode"] == "static"
    assert dynamic["loss_scale_mode"] == "dynamic"


def test_megatron_warmup_fraction_and_samples() -> None:
    fraction = read_run_config(
        json.dumps({"train_iters": 1000, "lr_decay_iters": 800, "lr_warmup_fraction": 0.01}), "x.yaml"
    )
    assert fraction["warmup_steps"] == 8
    samples = read_run_config(
        json.dumps({"train_samples": 1_024_000, "global_batch_size": 1024, "lr_warmup_samples": 2_048_000 // 8}),
        "y.json",
    )
    assert samples["total_steps"] == 1000
    assert samples["warmup_steps"] == 250


def test_hf_training_arguments_json() -> None:
    cfg = read_run_config(json.dumps(HF_TRAINING_ARGS), "training_args.json")
    assert cfg["source_format"] == "hf_trainer"
    assert cfg["total_steps"] == 10_000
    assert cfg["warmup_steps"] == 300  # warmup_ratio x max_steps, since warmup_steps is 0
    assert cfg["peak_lr"] == 2e-5
    assert cfg["min_lr_ratio"] == 0.0  # HF cosine decays to 0
    assert cfg["max_norm"] == 1.0 and cfg["key_sources"]["max_norm"] == "max_grad_norm (default)"
    assert cfg["precision"] == "bf16"
    assert cfg["checkpoint_interval_steps"] == 500
    assert cfg["per_rank_batch_size"] == 32
    assert cfg["num_cycles"] == 1


def test_hf_schedules_with_a_floor_and_with_hard_restarts() -> None:
    with_floor = {
        **HF_TRAINING_ARGS,
        "lr_scheduler_type": "cosine_with_min_lr",
        "lr_scheduler_kwargs": {"min_lr_rate": 0.1},
    }
    assert read_run_config(json.dumps(with_floor), "a.json")["min_lr_ratio"] == pytest.approx(0.1)
    restarts = {
        **HF_TRAINING_ARGS,
        "lr_scheduler_type": "cosine_with_restarts",
        "lr_scheduler_kwargs": {"num_cycles": 4},
    }
    cfg = read_run_config(json.dumps(restarts), "b.json")
    assert cfg["num_cycles"] == 4 and cfg["restart_warmup_steps"] == 0
    assert {r.id: r.status for r in evaluate_checklist(cfg, None)}["restart_warmup"] == "fail"
    no_save = read_run_config(json.dumps({**HF_TRAINING_ARGS, "save_strategy": "no"}), "c.json")
    assert no_save["checkpoint_enabled"] is False


def test_hf_model_config_moe_fields() -> None:
    mixtral = {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "num_local_experts": 8,
        "router_aux_loss_coef": 0.02,
        "output_router_logits": False,
        "torch_dtype": "bfloat16",
    }
    cfg = read_run_config(json.dumps(mixtral), "config.json")
    assert cfg["source_format"] == "hf_model"
    assert cfg["num_experts"] == 8
    assert cfg["router_aux_loss_coeff"] == 0.0  # not applied without router logits
    deepseek = {
        "model_type": "deepseek_v3",
        "n_routed_experts": 256,
        "topk_method": "noaux_tc",
        "aux_loss_alpha": 0.001,
    }
    cfg = read_run_config(json.dumps(deepseek), "config.json")
    assert cfg["num_experts"] == 256 and cfg["router_bias_balancing"] is True
    dense = read_run_config(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}), "config.json")
    assert dense["num_experts"] == 1


def test_torchtitan_toml_with_a_stabscope_section() -> None:
    cfg = read_run_config(TORCHTITAN_TOML.encode(), "llama3_70b.toml")
    assert cfg["source_format"] == "torchtitan"
    assert cfg["total_steps"] == 100_000
    assert cfg["warmup_steps"] == 2000
    assert cfg["peak_lr"] == 1.5e-4
    assert cfg["min_lr_ratio"] == 0.1
    assert cfg["max_norm"] == 1.0
    assert cfg["precision"] == "bf16" and cfg["fp32_master_weights"] is True
    assert cfg["checkpoint_enabled"] is True and cfg["checkpoint_interval_steps"] == 500
    assert cfg["per_rank_batch_size"] == 4 and cfg["seq_len"] == 8192
    assert cfg["model"] == "llama3 70B"
    assert cfg["checkpoint_write_s"] == 300.0 and cfg["restore_rehearsed"] is True
    assert cfg["key_sources"]["checkpoint_write_s"] == "stabscope.checkpoint_write_s"
    checkpoint = {r.id: r for r in evaluate_checklist(cfg, None)}["checkpoint_interval"]
    # 500 steps x 9.5 s = 1.32 h vs Daly 1.98 h (MTBF 24.7 h at 2,048 GPUs): within 0.5-2x.
    assert "Daly optimum 1.98 h" in checkpoint.evidence[0] and "MTBF 24.74 h" in checkpoint.evidence[0]
    assert checkpoint.status == "pass"


def test_torchtitan_bf16_training_dtype_has_no_fp32_master_weights() -> None:
    text = TORCHTITAN_TOML.replace('mixed_precision_param = "bfloat16"', 'dtype = "bfloat16"')
    cfg = read_run_config(text, "t.toml")
    assert cfg["fp32_master_weights"] is False
    assert {r.id: r.status for r in evaluate_checklist(cfg, None)}["nonfinite_guard"] == "fail"


def test_native_keys_round_trip_through_yaml() -> None:
    native = {"total_steps": 6000, "warmup_steps": 300, "max_norm": 1.0, "transition_steps": [3000]}
    cfg = read_run_config("\n".join(f"{k}: {v}" for k, v in native.items()), "run.yaml")
    assert cfg["source_format"] == "stabscope"
    assert {k: cfg[k] for k in native} == native


def test_real_megatron_arguments_dump() -> None:
    path = REAL_LOGS / "bigscience_megds_perf_log" / "meg_ds_3d_gpt2_perf_n16-ds-off.out"
    if not path.exists():
        pytest.skip("../shared absent: real Megatron log not available")
    cfg = read_run_config_file(path)
    assert cfg["source_format"] == "megatron"
    # PROVENANCE: TP4 x PP16 x DP1 on 64 GPUs, global batch 1024, 1000 planned iterations, fp16.
    assert cfg["gpus"] == 64 and cfg["world_size"] == 1 and cfg["global_batch_size"] == 1024
    assert cfg["total_steps"] == 1000
    assert cfg["warmup_steps"] == 8  # lr_warmup_fraction 0.01 x lr_decay_iters 800
    assert cfg["min_lr_ratio"] == pytest.approx(1e-5 / 1.5e-4)
    assert cfg["precision"] == "fp16" and cfg["loss_scale_mode"] == "static"  # loss_scale 12.0
    assert cfg["checkpoint_interval_steps"] == 500
    grades = {r.id: r.status for r in evaluate_checklist(cfg, None)}
    assert grades["nonfinite_guard"] == "fail"  # a static fp16 loss scale; the run blew up
    assert grades["warmup"] == "pass" and grades["min_lr_ratio"] == "pass"


def test_format_detection() -> None:
    assert detect_format("a.yml", "") == "yaml"
    assert detect_format("a.TOML", "") == "toml"
    assert detect_format("upload", '{"lr": 1}') == "json"
    assert detect_format("upload", "[training]\nsteps = 3\n") == "toml"
    assert detect_format("log.out", "x\n---------- arguments ----------\n") == "megatron-args"
    assert detect_format("upload", "lr: 1\n") == "yaml"


@pytest.mark.parametrize(
    ("text", "name", "line", "what"),
    [
        ("lr: 1\nbad: [1, 2\nother: 3\n", "a.yaml", 3, "invalid YAML"),
        ('{\n  "lr": 1,\n  "x": \n}\n', "a.json", 4, "invalid JSON"),
        ("[training]\nsteps = 3\nsteps = 4\n", "a.toml", 3, "invalid TOML"),
        ("--- arguments ---\n  lr ....... 1\n  garbage\n--- end of arguments ---\n", "log.out", 3, "name .... value"),
    ],
)
def test_parse_errors_name_file_and_line(text: str, name: str, line: int, what: str) -> None:
    with pytest.raises(StabScopeError) as caught:
        parse_config_text(text, name)
    assert caught.value.path == name
    assert caught.value.line == line
    assert what in str(caught.value)
    assert str(caught.value).startswith(f"{name}, line {line}: ")


def test_non_mapping_and_binary_and_oversized_inputs() -> None:
    with pytest.raises(StabScopeError, match=r"expected a mapping.*found a list"):
        parse_config_text("- 1\n- 2\n", "l.yaml")
    with pytest.raises(StabScopeError, match="found empty"):
        parse_config_text("", "e.yaml")
    with pytest.raises(StabScopeError, match="not UTF-8") as caught:
        parse_config_text(b"lr: 1\n\xff\xfe", "b.yaml")
    assert caught.value.line == 2
    with pytest.raises(StabScopeError, match="limit"):
        parse_config_text("a: " + "x" * MAX_CONFIG_BYTES, "big.yaml")
    with pytest.raises(StabScopeError, match="NaN is not a valid JSON value"):
        parse_config_text('{"lr": NaN}', "n.json")


def test_yaml_alias_bomb_is_refused() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i, name in enumerate("bcdefg"):
        prev = "a" if i == 0 else "bcdefg"[i - 1]
        bomb += f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]\n"
    with pytest.raises(StabScopeError, match="more than"):
        parse_config_text(bomb, "bomb.yaml")


def test_unsafe_yaml_tags_are_refused() -> None:
    with pytest.raises(StabScopeError, match="invalid YAML") as caught:
        parse_config_text("x: !!python/object/apply:os.system ['true']\n", "evil.yaml")
    assert caught.value.line == 1


def test_wrong_value_types_name_the_source_key() -> None:
    with pytest.raises(StabScopeError, match=r"clip_grad = 'one': expected a number >= 0 for max_norm"):
        read_run_config("train_iters: 10\nclip_grad: one\n", "m.yaml")
    with pytest.raises(StabScopeError, match="expected one of bf16"):
        normalise_config({"precision": "int4"}, filename="n.yaml")


def test_unknown_config_maps_to_nothing_but_its_format() -> None:
    cfg = read_run_config("foo: 1\nbar: {baz: 2}\n", "x.yaml")
    assert cfg == {"source_format": "unknown", "key_sources": {}}


def test_read_run_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(StabScopeError, match="cannot read"):
        read_run_config_file(tmp_path / "missing.yaml")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(StabScopeError, match="limit"):
        read_run_config_file(big)


# ----------------------------------------------------------------------------- configs <-> run metadata


def test_run_meta_from_megatron_and_torchtitan_configs() -> None:
    from ingest.importing.configs import run_meta_from_config

    megatron = run_meta_from_config(read_run_config(MEGATRON_YAML, "megatron.yaml"))
    assert megatron == {
        "planned_steps": 500_000,
        "max_norm": 1.0,
        "precision": "bf16",
        "num_experts": 64,
        "save_interval": 1000,
        "gpus": 512,
        "tokens_per_step": 1024 * 4096,
    }
    titan = run_meta_from_config(read_run_config(TORCHTITAN_TOML.encode(), "llama3_70b.toml"))
    assert titan == {
        "planned_steps": 100_000,
        "max_norm": 1.0,
        "precision": "bf16",
        "save_interval": 500,
        "gpus": 2048,
        "step_time_s": 9.5,
    }


def test_an_attached_config_fills_the_run_metadata_the_log_left_out() -> None:
    from ingest.importing.configs import meta_with_config_facts

    meta = meta_with_config_facts({"max_norm": 0.5, "config_text": TORCHTITAN_TOML, "config_filename": "t.toml"})
    assert meta["max_norm"] == 0.5  # the log's own statement stays
    assert (meta["planned_steps"], meta["gpus"], meta["precision"]) == (100_000, 2048, "bf16")


def test_the_checklist_reads_the_argument_dump_kept_at_import(tmp_path: Path) -> None:
    from ingest.importing.configs import config_from_run_meta
    from ingest.importing.importer import import_logs
    from ingest.services.run_analyses import open_analysed_store

    log = REAL_LOGS / "bigscience_megds_perf_log" / "meg_ds_3d_gpt2_perf_n16-ds-off.out"
    if not log.exists():
        pytest.skip(f"real log {log} is absent (the shared real_logs folder is not on this machine)")
    store = open_analysed_store(tmp_path / "store")
    import_logs(store, [log], run="megds")
    cfg = config_from_run_meta(store.run_info("megds").meta)
    # the dump: train_iters 1000, fp16 True with loss_scale 12, clip_grad 1.0, min_lr 1e-5 of lr 1.5e-4,
    # save_interval 500, world size 64 with data-parallel size 1
    assert (cfg["total_steps"], cfg["precision"], cfg["loss_scale_mode"]) == (1000, "fp16", "static")
    assert (cfg["max_norm"], cfg["checkpoint_interval_steps"], cfg["gpus"], cfg["world_size"]) == (1.0, 500, 64, 1)
    assert cfg["min_lr_ratio"] == pytest.approx(1e-5 / 1.5e-4)
    assert cfg["key_sources"]["total_steps"] == "the log's argument dump: train_iters"
    assert cfg == {**read_run_config_file(log), "source_format": "stored run", "key_sources": cfg["key_sources"]}
    # a value the user set wins over the dump's, and says so
    store.update_meta("megds", {"max_norm": 0.5, "precision": "bf16"})
    cfg = config_from_run_meta(store.run_info("megds").meta)
    assert (cfg["max_norm"], cfg["precision"]) == (0.5, "bf16")
    assert cfg["key_sources"]["max_norm"] == "run metadata max_norm (set by you)"
    assert config_from_run_meta({}) == {}


def test_the_argument_dump_states_the_same_facts_read_as_a_log_or_as_a_config() -> None:
    """One parser for Megatron's argument dump (#22): the log reader and a config upload of the same
    .out agree. megds: TP 4 x PP 16 on 64 GPUs is DP 1, so one replica contributes the whole global
    batch of 1,024 (the micro batch of 4 is not the two-batch estimator's small batch)."""
    from ingest.formats import read_log

    path = REAL_LOGS / "bigscience_megds_perf_log" / "meg_ds_3d_gpt2_perf_n16-ds-off.out"
    if not path.exists():
        pytest.skip(f"../shared absent: {path}")
    meta = read_log([path]).meta
    config = read_run_config_file(path)
    assert meta["per_rank_batch_size"] == config["per_rank_batch_size"] == 1024
    assert meta["micro_batch_size"] == 4 and meta["global_batch_size"] == config["global_batch_size"] == 1024
    assert meta["world_size"] == config["gpus"] == 64 and config["world_size"] == 1  # the checklist's DP ranks
    assert meta["max_norm"] == config["max_norm"] == 1.0 and meta["precision"] == "fp16"
    assert meta["args"]["fp16"] is True and meta["args"]["clip_grad"] == 1.0
