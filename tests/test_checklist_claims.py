"""Checklist verdicts checked against the run and read from the dump the user has (issue #32 item 7): a
warmup set in tokens whose logged LR rises from 5.3e-7 is not "warmup_steps = 0"; a Megatron argument
dump behind ``[default0]:`` prefixes is read in full; one interleaved WARNING line is passed over and
reported, not a rejection."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ingest.errors import StabScopeError
from ingest.importing.configs import read_run_config, read_run_config_file
from stab_core.checklist import evaluate_checklist
from stab_core.checklist_facts import run_facts
from stab_core.runview import RunView, Series

SETTINGS = {
    "adam_beta1": "0.9",
    "adam_beta2": "0.95",
    "bf16": "True",
    "clip_grad": "1.0",
    "fp16": "False",
    "global_batch_size": "512",
    "lr": "0.0003",
    "lr_decay_iters": "None",
    "lr_decay_style": "cosine",
    "lr_decay_tokens": "260000000000",
    "lr_warmup_fraction": "None",
    "lr_warmup_iters": "0",
    "lr_warmup_samples": "0",
    "lr_warmup_tokens": "375000000",
    "micro_batch_size": "1",
    "min_lr": "3e-05",
    "pipeline_model_parallel_size": "2",
    "save_interval": "1000",
    "seq_length": "2048",
    "tensor_model_parallel_size": "2",
    "train_iters": "None",
    "train_samples": "300000000",
}


def _dump(prefix: str = "", warning_after: str | None = None, drop: tuple[str, ...] = ()) -> str:
    lines = [f"{prefix}using world size: 64, data-parallel-size: 16", f"{prefix}{'-' * 24} arguments {'-' * 24}"]
    for name, value in SETTINGS.items():
        if name in drop:
            continue
        lines.append(f"{prefix}  {name} {'.' * (48 - len(name))} {value}")
        if name == warning_after:
            lines.append(f"{prefix}WARNING: overriding the default number of workers: 2 -> 8")
    lines.append(f"{prefix}{'-' * 20} end of arguments {'-' * 21}")
    return "\n".join(lines) + "\n"


def test_a_dump_behind_rank_prefixes_is_read_in_full() -> None:
    bare = read_run_config(_dump(), "args.log")
    prefixed = read_run_config(_dump("[default0]:"), "args.log")
    assert prefixed == bare
    assert prefixed["source_format"] == "megatron"
    for key, value in {
        "precision": "bf16",
        "max_norm": 1.0,
        "peak_lr": 3e-4,
        "min_lr": 3e-5,
        "global_batch_size": 512,
        "seq_len": 2048,
        "checkpoint_interval_steps": 1000,
        "total_steps": 585_937,  # 300M samples / 512
    }.items():
        assert prefixed[key] == value, key


def test_warmup_in_tokens_is_steps_of_the_global_batch() -> None:
    config = read_run_config(_dump("[default0]:"), "args.log")
    # 375M tokens / (512 x 2048 tokens per step) = 357.6 -> 358 steps, not lr_warmup_iters' 0
    assert config["warmup_steps"] == 358
    assert config["key_sources"]["warmup_steps"] == "lr_warmup_tokens / (global_batch_size x seq_length)"
    # without the sequence length the steps are unknown: the logged LR decides
    assert "warmup_steps" not in read_run_config(_dump(drop=("seq_length",)), "args.log")


def _warming_run() -> RunView:
    steps = np.arange(1, 2001)
    lr = np.minimum(steps * 5.3e-7, 3e-4)
    lr[600:] = 3e-4 * (0.5 + 0.5 * np.cos(np.pi * (steps[600:] - 600) / 1400))
    return RunView("tokens-warmup", {"lr": Series(steps, lr)})


def _warmup_item(config: dict[str, object], facts: dict[str, object]) -> tuple[str, str]:
    (item,) = [r for r in evaluate_checklist(config, facts) if r.id == "warmup"]
    return item.status, " ".join(item.evidence)


def test_a_logged_lr_rising_from_5_3e_7_is_a_warmup_whatever_the_step_count_says() -> None:
    facts = run_facts(_warming_run())
    assert facts["lr_first"] == pytest.approx(5.3e-7) and facts["lr_first_step"] == 1
    status, evidence = _warmup_item({"warmup_steps": 0, "key_sources": {"warmup_steps": "lr_warmup_iters"}}, facts)
    assert status == "pass"
    assert "warmup_steps = 0 (from lr_warmup_iters), but the logged LR rises from 5.3e-07 at step 1" in evidence
    # with no LR logged the config's 0 still fails, and a logged LR starting at its peak does not save it
    assert _warmup_item({"warmup_steps": 0}, {})[0] == "fail"
    flat = run_facts(RunView("flat", {"lr": Series(np.arange(100), np.full(100, 3e-4))}))
    assert _warmup_item({"warmup_steps": 0}, flat)[0] == "fail"
    status, evidence = _warmup_item({}, {"lr_first": 5.3e-7, "lr_peak": 3e-4})
    assert status == "pass" and "a warmup ran" in evidence


def test_one_interleaved_warning_line_is_passed_over_and_reported(tmp_path: Path) -> None:
    text = _dump("[default0]:", warning_after="lr_decay_style")
    config = read_run_config(text, "args.log")
    assert config["peak_lr"] == 3e-4 and config["warmup_steps"] == 358 and config["precision"] == "bf16"
    (skipped,) = config["skipped_lines"]
    line_no = text.splitlines().index("[default0]:WARNING: overriding the default number of workers: 2 -> 8") + 1
    assert skipped == f"line {line_no}: WARNING: overriding the default number of workers: 2 -> 8"
    path = tmp_path / "pretrain.log"
    path.write_text(text)
    assert read_run_config_file(path)["skipped_lines"] == [skipped]
    # a line that is neither a setting nor a log message is still an error with file and line
    broken = _dump().replace("  clip_grad ", "  clip grad here ")
    with pytest.raises(StabScopeError, match=r"expected 'name \.\.\.\. value'") as caught:
        read_run_config(broken, "args.log")
    assert caught.value.line is not None


def test_each_checklist_verdict_is_a_claim() -> None:
    facts = run_facts(_warming_run())
    results = {r.id: r for r in evaluate_checklist({"warmup_steps": 0}, facts)}
    claim = results["warmup"].claim()
    assert claim.kind == "checklist" and claim.holds is True
    assert claim.text.startswith("Warmup configured: pass: warmup_steps = 0 (config), but the logged LR rises")
    assert claim.evidence == {"item": "warmup", "status": "pass", "applicable": True}
    unknown = evaluate_checklist(None, None)[0].claim()
    assert unknown.holds is None and unknown.to_log == evaluate_checklist(None, None)[0].item.how_to_check
