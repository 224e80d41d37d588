"""How each pre-flight item is graded (``stab_core.checklist``): one grader per item, from a normalised
run config (``CONFIG_KEYS``) and the run's own facts (``RUN_FACT_KEYS``), each answering pass / fail /
unknown with its evidence.

Sources for the thresholds: restart warmup 1/4-1/3 of the warmup and at most 5 cycles
(``stab_core.schedulers``); min_lr = 0.1 x peak (Hoffmann et al. 2022, Chinchilla); max_norm 1.0 (GPT-3,
Llama, Megatron-LM default); checkpoint interval by Young (1974) / Daly (2006) with failures at the
Llama 3 405B rate (``stab_core.cost``); router z-loss ~1e-3 (Zoph et al. 2022, ST-MoE) or
auxiliary-loss-free bias balancing (Wang et al. 2024; DeepSeek-V3).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

import numpy as np

from stab_core.cost import LLAMA3_405B_FAILURES, daly_interval, expected_waste_per_failure
from stab_core.schedulers import MAX_ADVISED_CYCLES, RESTART_WARMUP_MAX_FRACTION, RESTART_WARMUP_MIN_FRACTION

Status = Literal["pass", "fail", "unknown"]

MAX_WARMUP_FRACTION = 0.25
"""A warmup longer than this fraction of the run spends the budget at low LR."""
SANE_MAX_NORM = (0.05, 5.0)
"""max_norm outside this range clips nearly always (below) or never (above); 1.0 is the common default."""
MAX_CLIP_RATIO = 0.5
"""Clipping more than half of the post-warmup steps means max_norm is too low or the run is sick."""
MIN_LR_RATIO_FLOOR = 0.01
"""min_lr / peak below this is a decay to (practically) zero."""
INTERVAL_TOLERANCE = (0.5, 2.0)
"""Checkpoint interval / optimum within this band costs at most ~25 % more overhead than the optimum."""
MAX_LR_JUMP = 0.5
"""A one-step LR rise above 50 % of the previous LR (or 10 % of peak) is a hard jump."""


# --------------------------------------------------------------------------------------------------
# Reading the inputs
# --------------------------------------------------------------------------------------------------


def _number(source: Mapping[str, Any], key: str) -> float | None:
    value = source.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{key} must be a number, got {value!r} ({type(value).__name__})")
    return float(value)


def _flag(source: Mapping[str, Any], key: str) -> bool | None:
    value = source.get(key)
    if value is None:
        return None
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{key} must be true or false, got {value!r} ({type(value).__name__})")
    return bool(value)


def _first_number(key: str, *sources: Mapping[str, Any]) -> float | None:
    for source in sources:
        value = _number(source, key)
        if value is not None:
            return value
    return None


def _first_flag(key: str, *sources: Mapping[str, Any]) -> bool | None:
    for source in sources:
        value = _flag(source, key)
        if value is not None:
            return value
    return None


def _from(config: Mapping[str, Any], key: str) -> str:
    """' (from clip_grad)' when the normaliser recorded the source key."""
    sources = config.get("key_sources")
    if isinstance(sources, Mapping) and sources.get(key) and sources[key] != key:
        return f" (from {sources[key]})"
    return ""


def _combine(parts: Sequence[Status]) -> Status:
    if "fail" in parts:
        return "fail"
    if "unknown" in parts or not parts:
        return "unknown"
    return "pass"


# --------------------------------------------------------------------------------------------------
# The items
# --------------------------------------------------------------------------------------------------

Grade = tuple[Status, list[str], bool]


WARMUP_START_FRACTION: Final = 0.5
"""A logged LR that starts below this fraction of its peak is warming up, whatever the config's step count
says (a warmup set in tokens or samples reads as 0 steps)."""


def _grade_flag(parts: list[Status], evidence: list[str], flag: bool | None, unknown: str, yes: str, no: str) -> None:
    """Grade a yes/no setting: unknown when ``flag`` is None, pass when true, fail when false; its
    evidence line is ``unknown``, ``yes`` or ``no``."""
    parts.append("unknown" if flag is None else "pass" if flag else "fail")
    evidence.append(unknown if flag is None else yes if flag else no)


def _logged_warmup(facts: Mapping[str, Any]) -> str | None:
    """The logged LR's evidence of a warmup ("the logged LR rises from 5.3e-07 at step 1 to its peak
    0.0003"), or None when it starts near its peak (or is not logged)."""
    first, peak = _number(facts, "lr_first"), _number(facts, "lr_peak")
    if first is None or peak is None or not peak > 0 or first >= WARMUP_START_FRACTION * peak:
        return None
    step = facts.get("lr_first_step")
    at = f" at step {step:,}" if isinstance(step, int) else ""
    return f"the logged LR rises from {first:.3g}{at} to its peak {peak:.3g}"


def _check_warmup(config: Mapping[str, Any], facts: Mapping[str, Any]) -> Grade:
    warmup = _number(config, "warmup_steps")
    origin = _from(config, "warmup_steps") or " (config)"
    if warmup is None:
        warmup = _number(facts, "warmup_steps")
        origin = " (the run's LR series)"
    total = _first_number("total_steps", config, facts)
    logged = _logged_warmup(facts)
    if warmup is None:
        if logged is not None:
            return "pass", [f"{logged}: a warmup ran (its length is not known)"], True
        return "unknown", ["no warmup setting found in the config or the LR series; tick once checked"], True
    if warmup <= 0:
        if logged is not None:
            # the run's own LR contradicts the step count: the warmup is set in other units (tokens)
            return (
                "pass",
                [
                    f"warmup_steps = 0{origin}, but {logged}: a warmup ran, set in other units "
                    "(e.g. lr_warmup_tokens or lr_warmup_samples)"
                ],
                True,
            )
        return "fail", [f"warmup_steps = 0{origin}: the first updates run at full LR"], True
    if total is None or total <= 0:
        return "pass", [f"warmup {warmup:,.0f} steps{origin}; total steps unknown, compare by hand"], True
    fraction = warmup / total
    evidence = [f"warmup {warmup:,.0f} steps = {100 * fraction:.2f} % of {total:,.0f} total steps{origin}"]
    if fraction > MAX_WARMUP_FRACTION:
        evidence.append(f"longer than {100 * MAX_WARMUP_FRACTION:.0f} % of the run: the budget is spent at low LR")
        return "fail", evidence, True
    return "pass", evidence, True


def _check_clipping(config: Mapping[str, Any], facts: Mapping[str, Any]) -> Grade:
    parts: list[Status] = []
    evidence: list[str] = []
    max_norm = _first_number("max_norm", config, facts)
    low, high = SANE_MAX_NORM
    if max_norm is None:
        parts.append("unknown")
        evidence.append("max_norm not found; tick once clipping is confirmed on")
    elif not math.isfinite(max_norm) or max_norm <= 0:
        parts.append("fail")
        evidence.append(f"clipping is off (max_norm = {max_norm:g}{_from(config, 'max_norm')})")
    elif not low <= max_norm <= high:
        parts.append("fail")
        evidence.append(f"max_norm = {max_norm:g}{_from(config, 'max_norm')} is outside {low:g}-{high:g}")
    else:
        parts.append("pass")
        evidence.append(f"max_norm = {max_norm:g}{_from(config, 'max_norm')}")
    logged = _flag(facts, "clip_ratio_logged")
    _grade_flag(
        parts,
        evidence,
        logged,
        "no run data: confirm grad_norm (pre-clip) or clip_coef is logged every step",
        "clip ratio is known from the run (grad_norm or clip_coef logged)",
        "the run logs neither grad_norm nor clip_coef: the clip ratio is invisible",
    )
    ratio = _number(facts, "clip_ratio")
    if ratio is not None and math.isfinite(ratio):
        if ratio > MAX_CLIP_RATIO:
            parts.append("fail")
            evidence.append(
                f"{100 * ratio:.0f} % of post-warmup steps were clipped (> {100 * MAX_CLIP_RATIO:.0f} %): "
                "max_norm is too low or the run is sick"
            )
        else:
            evidence.append(f"{100 * ratio:.1f} % of post-warmup steps were clipped")
    return _combine(parts), evidence, True


def _check_min_lr(config: Mapping[str, Any], facts: Mapping[str, Any]) -> Grade:
    ratio = _number(config, "min_lr_ratio")
    if ratio is None:
        min_lr, peak = _number(config, "min_lr"), _number(config, "peak_lr")
        if min_lr is not None and peak:
            ratio = min_lr / peak
    evidence = [] if ratio is None else [f"min_lr_ratio = {ratio:.3g}{_from(config, 'min_lr_ratio')}"]
    logged, peak_lr, low_step = (_number(facts, k) for k in ("lr_floor_ratio", "lr_peak", "lr_floor_step"))
    if logged is not None and peak_lr is not None and low_step is not None:
        seen = f"the logged LR ends at {logged:.3g} x its peak {peak_lr:.3g} (step {low_step:,.0f})"
        if logged < MIN_LR_RATIO_FLOOR:
            # what the run did answers the item, whatever its config says
            evidence.append(f"{seen}: below {MIN_LR_RATIO_FLOOR:g}, it decays to practically 0 (use 0.1)")
            return "fail", evidence, True
        evidence.append(seen)
    if ratio is None:
        return (
            "unknown",
            [*evidence, "no LR floor found in the config; tick once min_lr / peak_lr > 0 is confirmed"],
            True,
        )
    if ratio < MIN_LR_RATIO_FLOOR:
        evidence[0] += f": below {MIN_LR_RATIO_FLOOR:g}, the LR decays to practically 0 (use 0.1)"
        return "fail", evidence, True
    return "pass", evidence, True


def _check_checkpoints(config: Mapping[str, Any], facts: Mapping[str, Any]) -> Grade:
    if _flag(config, "checkpoint_enabled") is False:
        return "fail", ["checkpointing is disabled in the config"], True
    parts: list[Status] = []
    evidence: list[str] = []
    interval_steps = _number(config, "checkpoint_interval_steps")
    step_time = _first_number("step_time_s", config, facts)
    write_s = _number(config, "checkpoint_write_s")
    mtbf = _number(config, "mtbf_hours")
    gpus = _first_number("gpus", config, facts)
    if mtbf is None and gpus:
        mtbf = LLAMA3_405B_FAILURES.mtbf_hours_at(int(gpus))
        mtbf_text = f"MTBF {mtbf:.2f} h (Llama 3 405B failure rate scaled to {gpus:,.0f} GPUs)"
    else:
        mtbf_text = f"MTBF {mtbf:.2f} h (config)" if mtbf is not None else ""
    if interval_steps is not None and interval_steps <= 0:
        parts.append("fail")
        evidence.append("checkpoint interval is 0: no periodic checkpoints")
    elif None in (interval_steps, step_time, write_s, mtbf):
        missing = [
            name
            for name, value in (
                ("checkpoint_interval_steps", interval_steps),
                ("step_time_s", step_time),
                ("checkpoint_write_s", write_s),
                ("mtbf_hours or gpus", mtbf),
            )
            if value is None
        ]
        parts.append("unknown")
        evidence.append("cannot size the interval without " + ", ".join(missing))
    else:
        assert interval_steps is not None and step_time is not None and write_s is not None and mtbf is not None
        interval_h = interval_steps * step_time / 3600.0
        optimum_h = daly_interval(write_s / 3600.0, mtbf)
        ratio = interval_h / optimum_h
        evidence.append(
            f"every {interval_steps:,.0f} steps x {step_time:g} s = {interval_h:.2f} h; Daly optimum "
            f"{optimum_h:.2f} h for a {write_s:g} s write and {mtbf_text} ({ratio:.2f}x)"
        )
        low, high = INTERVAL_TOLERANCE
        if low <= ratio <= high:
            parts.append("pass")
        else:
            parts.append("fail")
            waste_now = expected_waste_per_failure(interval_h, 0.0)
            waste_best = expected_waste_per_failure(optimum_h, 0.0)
            evidence.append(
                f"outside {low:g}-{high:g}x of the optimum: {waste_now:.2f} h redone per failure vs "
                f"{waste_best:.2f} h at the optimum"
                if ratio > high
                else f"outside {low:g}-{high:g}x of the optimum: checkpoint writes eat the run"
            )
    rehearsed = _flag(config, "restore_rehearsed")
    _grade_flag(
        parts,
        evidence,
        rehearsed,
        "tick once a restore from checkpoint has been rehearsed end to end",
        "restore rehearsed",
        "restore not rehearsed",
    )
    return _combine(parts), evidence, True


def _check_nonfinite(config: Mapping[str, Any], facts: Mapping[str, Any]) -> Grade:
    parts: list[Status] = []
    evidence: list[str] = []
    precision = config.get("precision")
    master = _flag(config, "fp32_master_weights")
    mode = config.get("loss_scale_mode")
    if precision is None:
        parts.append("unknown")
        evidence.append("precision not found in the config")
    elif precision == "fp16":
        if mode == "dynamic":
            parts.append("pass")
            evidence.append("fp16 with dynamic loss scaling (overflowing steps are skipped)")
        elif mode == "static":
            parts.append("fail")
            evidence.append("fp16 with a static loss scale: an overflow goes straight into the weights")
        else:
            parts.append("unknown")
            evidence.append("fp16 but the loss-scaling mode is unknown; confirm it is dynamic")
    elif precision in ("bf16", "fp8"):
        if master is False:
            parts.append("fail")
            evidence.append(f"{precision} without fp32 master weights: small updates round away and errors pile up")
        else:
            parts.append("pass")
            note = "" if master else " (framework default)"
            evidence.append(f"{precision} with fp32 master weights{note}")
    elif precision == "fp32":
        parts.append("pass")
        evidence.append("fp32 training")
    else:
        parts.append("unknown")
        evidence.append(f"unrecognised precision {precision!r}")
    nan_check = _flag(config, "nan_check")
    guard_logged = _flag(facts, "nonfinite_guard_logged")
    if nan_check is True:
        parts.append("pass")
        evidence.append("NaN/Inf check on loss and grads enabled" + _from(config, "nan_check"))
    elif nan_check is False:
        parts.append("fail")
        evidence.append("NaN/Inf check disabled" + _from(config, "nan_check"))
    elif guard_logged:
        parts.append("pass")
        evidence.append("the run logs loss scale or skipped/non-finite step counts")
    else:
        parts.append("unknown")
        evidence.append("no evidence of a NaN/Inf check; tick once the trainer checks loss and grads")
    nonfinite_steps = _number(facts, "nonfinite_steps")
    if nonfinite_steps:
        evidence.append(f"{nonfinite_steps:.0f} logged steps had a non-finite loss or grad norm")
    return _combine(parts), evidence, True


def _check_restart_warmup(config: Mapping[str, Any], facts: Mapping[str, Any]) -> Grade:
    parts: list[Status] = []
    evidence: list[str] = []
    cycles = _number(config, "num_cycles")
    switches = config.get("transition_steps") or []
    if not isinstance(switches, list | tuple):
        raise ValueError(f"transition_steps must be a list of steps, got {switches!r}")
    if cycles is not None and cycles > MAX_ADVISED_CYCLES:
        parts.append("fail")
        evidence.append(f"num_cycles = {cycles:.0f} > {MAX_ADVISED_CYCLES}: restarts too many, cycles too short")
    has_transitions = (cycles is not None and cycles > 1) or len(switches) > 0
    warmup = _first_number("warmup_steps", config, facts)
    restart = _number(config, "restart_warmup_steps")
    if has_transitions:
        planned = f"{cycles:.0f} cycles" if cycles and cycles > 1 else ""
        if switches:
            planned += (", " if planned else "") + f"{len(switches)} planned switch(es) at step(s) "
            planned += ", ".join(f"{int(s):,}" for s in switches)
        if restart is None or warmup is None:
            parts.append("unknown")
            evidence.append(f"{planned}; restart warmup or warmup length unknown")
        else:
            low, high = RESTART_WARMUP_MIN_FRACTION * warmup, RESTART_WARMUP_MAX_FRACTION * warmup
            text = f"{planned}; restart warmup {restart:,.0f} steps vs 1/4-1/3 of warmup = {low:,.0f}-{high:,.0f}"
            ok = low - 0.5 <= restart <= high + 0.5
            parts.append("pass" if ok else "fail")
            evidence.append(text + ("" if ok else " (a hard LR jump)" if restart < low else " (too long)"))
    elif cycles is not None:
        parts.append("pass")
        evidence.append("one LR cycle and no planned switches: no transitions to re-warm")
    jump = _number(facts, "max_lr_jump")
    if jump is not None:
        step = _number(facts, "max_lr_jump_step")
        where = f" at step {step:,.0f}" if step is not None else ""
        if jump > MAX_LR_JUMP:
            parts.append("fail")
            evidence.append(f"the run's LR rose {100 * jump:.0f} % in one logged step{where}: a hard LR jump")
        else:
            parts.append("pass")
            evidence.append("no hard LR jump in the run's LR series")
    if not parts:
        return "unknown", ["no schedule settings or LR series; tick once restarts are re-warmed"], True
    return _combine(parts), evidence, True


def _check_moe(config: Mapping[str, Any], facts: Mapping[str, Any]) -> Grade:
    experts = _number(config, "num_experts")
    load_logged = _first_flag("expert_load_logged", facts, config)
    if experts is None and load_logged:
        experts = math.nan
    if experts is None:
        return "unknown", ["number of experts unknown; tick if dense, or check router settings if MoE"], True
    if math.isfinite(experts) and experts <= 1:
        return "pass", ["dense model: not applicable"], False
    parts: list[Status] = []
    evidence: list[str] = [f"MoE with {experts:.0f} experts" if math.isfinite(experts) else "MoE (expert load logged)"]
    z_loss = _number(config, "router_z_loss_coeff")
    bias = _flag(config, "router_bias_balancing")
    aux = _number(config, "router_aux_loss_coeff")
    if (z_loss or 0) > 0 or bias:
        parts.append("pass")
        on = [f"z-loss {z_loss:g}" if z_loss else "", "bias balancing" if bias else ""]
        evidence.append("router stabilised: " + ", ".join(t for t in on if t))
    elif z_loss is not None or bias is not None:
        parts.append("fail")
        evidence.append("neither router z-loss nor bias balancing is on: nothing bounds the router logits")
    else:
        parts.append("unknown")
        evidence.append("router z-loss / bias balancing settings not found")
    if aux is not None:
        evidence.append(f"auxiliary balance loss {aux:g}")
    _grade_flag(
        parts,
        evidence,
        load_logged,
        "tick once expert load (max/mean) is logged per step",
        "expert load is logged",
        "expert load is not logged: a seesaw cannot be seen",
    )
    return _combine(parts), evidence, True


def _check_per_rank(config: Mapping[str, Any], facts: Mapping[str, Any]) -> Grade:
    parts: list[Status] = []
    evidence: list[str] = []
    per_rank = _first_flag("per_rank_metrics", facts)
    if per_rank is None:
        per_rank = _flag(config, "per_rank_metrics_logged")
    _grade_flag(
        parts,
        evidence,
        per_rank,
        "tick once each rank logs its local grad norm and loss",
        "per-rank metrics logged",
        "only run-level metrics are logged",
    )
    provenance = _first_flag("batch_provenance_logged", facts, config)
    _grade_flag(
        parts,
        evidence,
        provenance,
        "tick once the data loader logs which samples formed each batch",
        "batch provenance logged",
        "batch provenance not logged",
    )
    return _combine(parts), evidence, True


GRADERS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], Grade]] = {
    "warmup": _check_warmup,
    "grad_clipping": _check_clipping,
    "min_lr_ratio": _check_min_lr,
    "checkpoint_interval": _check_checkpoints,
    "nonfinite_guard": _check_nonfinite,
    "restart_warmup": _check_restart_warmup,
    "moe_router": _check_moe,
    "per_rank_provenance": _check_per_rank,
}
"""The grader of each checklist item by its id: (config, facts) -> (status, evidence, applicable)."""
