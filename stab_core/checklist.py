"""The pre-flight checklist: eight things to settle before launching a long pre-training run.

P0 items must pass before launch, P1 items should. Each item is graded from a normalised run config
(``CONFIG_KEYS``; ``ingest.importing.configs`` maps Megatron-LM, Hugging Face Trainer and torchtitan files onto
it) and from facts read off the run's own data (``RUN_FACT_KEYS``; ``stab_core.checklist_facts.run_facts``
computes them from a ``RunView``). What neither can answer is left ``unknown`` for the user to tick by hand, with
the evidence that was found. :func:`checklist_markdown` renders the results for a launch review.
How each item is graded, and the sources of its thresholds, is in ``stab_core.checklist_grades``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from stab_core.checklist_grades import GRADERS, Status
from stab_core.claims import Claim
from stab_core.tree_actions import Evidence

Priority = Literal["P0", "P1"]


@dataclass(frozen=True)
class ChecklistItem:
    """One pre-flight item: ``id``, ``priority`` (P0 must, P1 should), ``title``, ``why`` (one
    sentence), ``how_to_check`` (what to look at, in the config or the run)."""

    id: str
    priority: Priority
    title: str
    why: str
    how_to_check: str


@dataclass(frozen=True)
class ItemResult:
    """How one item fared: ``status`` pass / fail / unknown (left for the user to tick),
    ``evidence`` (what was found, with numbers and units), ``applicable`` (False when the item does
    not concern this run, e.g. MoE checks on a dense model; such items pass)."""

    item: ChecklistItem
    status: Status
    evidence: tuple[str, ...]
    applicable: bool = True

    @property
    def id(self) -> str:
        """The item's id."""
        return self.item.id

    @property
    def priority(self) -> Priority:
        """The item's priority."""
        return self.item.priority

    def claim(self) -> Claim:
        """The verdict as a checked claim (kind ``checklist``): it holds for pass and fail (the check read
        the config or the run: the evidence says what), and is unknown for an item the inputs could not
        settle, with what to check by hand."""
        text = f"{self.item.title}: {self.status}" + (": " + "; ".join(self.evidence) if self.evidence else ".")
        unknown = self.status == "unknown"
        evidence: Evidence = {"item": self.id, "status": self.status, "applicable": self.applicable}
        return Claim(
            "checklist", text, None if unknown else True, evidence, self.item.how_to_check if unknown else None
        )


CHECKLIST: tuple[ChecklistItem, ...] = (
    ChecklistItem(
        "warmup",
        "P0",
        "Warmup configured",
        "Adam's second-moment estimates are noise in the first steps, and full-LR updates on them blow up.",
        "Set warmup_steps > 0 and at most a quarter of the run (common: 0.1-2 % of total steps, e.g. 2,000).",
    ),
    ChecklistItem(
        "grad_clipping",
        "P0",
        "Gradient clipping on, sane max_norm, clip ratio logged",
        "Clipping caps the update a single bad batch can make, and its clip ratio is the early warning.",
        "max_norm between 0.05 and 5 (1.0 is the default); log grad_norm (pre-clip) or clip_coef each step.",
    ),
    ChecklistItem(
        "min_lr_ratio",
        "P0",
        "LR floor above zero (min_lr_ratio > 0)",
        "Decaying to zero lets gradient noise drive the tail of the run and makes any restart an unbounded jump.",
        "min_lr / peak_lr > 0; 0.1 is the default (Megatron min_lr, torchtitan min_lr_factor, HF cosine_with_min_lr).",
    ),
    ChecklistItem(
        "checkpoint_interval",
        "P0",
        "Checkpoint interval sized by Young/Daly, restore rehearsed",
        "Each failure or rollback redoes half an interval on every GPU; a restore never tried fails when needed.",
        "Interval within 0.5-2x of the Young/Daly optimum ~sqrt(2 x write time x MTBF); rehearse one restore.",
    ),
    ChecklistItem(
        "nonfinite_guard",
        "P0",
        "Non-finite guard",
        "A NaN or Inf that reaches the weights is unrecoverable without a rollback.",
        "NaN/Inf check on loss and grads, and dynamic loss scaling (fp16) or bf16 with fp32 master weights.",
    ),
    ChecklistItem(
        "restart_warmup",
        "P1",
        "Warmup restarts at schedule transitions",
        "A hard LR jump at a cycle restart or data switch is the classic trigger of a loss spike.",
        "At each cycle restart / data switch, re-warm over 1/4-1/3 of the warmup; num_cycles <= 5.",
    ),
    ChecklistItem(
        "moe_router",
        "P1",
        "MoE: router z-loss or bias balancing, expert load logged",
        "Router logits that grow unchecked make expert loads seesaw and the loss spike.",
        "Router z-loss (~1e-3) or auxiliary-loss-free bias balancing on; log expert load max/mean per step.",
    ),
    ChecklistItem(
        "per_rank_provenance",
        "P1",
        "Per-rank metrics and batch provenance logged",
        "Without them a spike cannot be traced to a rank (hardware) or a batch (data).",
        "Each rank logs its local grad norm and loss; the data loader logs which samples formed each batch.",
    ),
)
"""The eight items in launch-review order (P0 first)."""

ITEMS_BY_ID: dict[str, ChecklistItem] = {item.id: item for item in CHECKLIST}

CONFIG_KEYS: dict[str, str] = {
    "source_format": "where the config came from: megatron, hf_trainer, hf_model, torchtitan, stabscope",
    "model": "model name or description (text)",
    "total_steps": "optimizer steps of the whole run",
    "warmup_steps": "LR warmup length (steps)",
    "peak_lr": "peak learning rate",
    "min_lr": "LR floor at the end of the decay",
    "min_lr_ratio": "min_lr / peak_lr (0-1)",
    "lr_decay_style": "decay shape (cosine, linear, wsd, constant, ...)",
    "num_cycles": "LR cycles (1 = no restarts)",
    "restart_warmup_steps": "re-warmup length at each cycle restart or data switch (steps)",
    "transition_steps": "steps of planned data-recipe switches or schedule transitions (list of steps)",
    "max_norm": "gradient clipping threshold (L2 norm; 0 = off)",
    "precision": "training precision: bf16, fp16, fp8 or fp32",
    "fp32_master_weights": "fp32 master copy of the weights kept (bool)",
    "loss_scale_mode": "fp16 loss scaling: dynamic or static",
    "nan_check": "NaN/Inf check on loss and gradients enabled (bool)",
    "checkpoint_enabled": "checkpointing enabled (bool)",
    "checkpoint_interval_steps": "steps between checkpoints",
    "checkpoint_write_s": "time to write one checkpoint (s)",
    "restore_rehearsed": "a restore from checkpoint was rehearsed end to end (bool)",
    "mtbf_hours": "mean time between job interruptions (h); default from the Llama 3 405B rate",
    "step_time_s": "wall time of one optimizer step (s)",
    "gpus": "GPUs in the job (count)",
    "world_size": "data-parallel ranks (count)",
    "per_rank_batch_size": "samples per data-parallel rank per step",
    "global_batch_size": "samples per optimizer step",
    "seq_len": "tokens per sample",
    "num_experts": "MoE experts per layer (1 or absent = dense)",
    "router_z_loss_coeff": "MoE router z-loss coefficient (0 = off)",
    "router_aux_loss_coeff": "MoE load-balancing auxiliary loss coefficient (0 = off)",
    "router_bias_balancing": "MoE auxiliary-loss-free bias balancing on (bool)",
    "expert_load_logged": "MoE expert load logged per step (bool)",
    "per_rank_metrics_logged": "each rank logs its own metrics (bool)",
    "batch_provenance_logged": "the samples of each batch are logged (bool)",
    "key_sources": "for each key above, the source key it was read from (dict)",
    "skipped_lines": "lines of the config file passed over as log output, e.g. an interleaved WARNING ('line N: text')",
}
"""The normalised run-config keys the checklist reads; every key is optional."""

RUN_FACT_KEYS: dict[str, str] = {
    "clip_ratio_logged": "grad_norm (pre-clip) or clip_coef is logged, so the clip ratio is known (bool)",
    "clip_ratio": "fraction of post-warmup steps that were clipped (0-1)",
    "max_norm": "clipping threshold from the run's metadata (L2 norm)",
    "per_rank_metrics": "at least one metric is logged per rank, for more than one rank (bool)",
    "batch_provenance_logged": "batch provenance is logged (bool)",
    "expert_load_logged": "expert_load_max_over_mean is logged (bool)",
    "nonfinite_guard_logged": "loss_scale, nonfinite_grads, skipped or NaN iteration counts are logged (bool)",
    "nonfinite_steps": "logged steps with a non-finite loss or grad norm (count)",
    "max_lr_jump": "largest one-step relative LR rise found in the lr series (fraction; 9 = 10x)",
    "max_lr_jump_step": "step where that rise landed",
    "warmup_steps": "steps until the LR first peaks (steps)",
    "total_steps": "last logged step + 1 (steps)",
    "step_time_s": "median step time (s)",
    "gpus": "GPUs in the job, from the run's metadata (count)",
    "lr_first": "first logged LR (a warmup starts well below the peak)",
    "lr_first_step": "step of that first logged LR",
    "lr_peak": "highest logged LR",
    "lr_floor_ratio": "last logged LR / the highest (0-1; ~0 = the LR decays to zero)",
    "lr_floor_step": "step of that last logged LR",
}
"""Facts about a run's own data that answer checklist items (see ``stab_core.checklist_facts.run_facts``)."""


def evaluate_checklist(config: Mapping[str, Any] | None, metrics: Mapping[str, Any] | None) -> list[ItemResult]:
    """Grade the eight items, in ``CHECKLIST`` order.

    ``config``: a normalised run config (keys in ``CONFIG_KEYS``, all optional; None when there is
    none). ``metrics``: facts from the run's data (keys in ``RUN_FACT_KEYS``; ``stab_core.checklist_facts.run_facts``).
    Raises ValueError when a key holds a value of the wrong type.
    """
    cfg: Mapping[str, Any] = config or {}
    facts: Mapping[str, Any] = metrics or {}
    unknown_keys = sorted(set(cfg) - set(CONFIG_KEYS))
    if unknown_keys:
        raise ValueError(f"unknown config keys {unknown_keys}; the normalised keys are listed in CONFIG_KEYS")
    results = []
    for item in CHECKLIST:
        status, evidence, applicable = GRADERS[item.id](cfg, facts)
        results.append(ItemResult(item=item, status=status, evidence=tuple(evidence), applicable=applicable))
    return results


def failing_p0(results: Sequence[ItemResult]) -> list[ItemResult]:
    """The P0 items that fail: a launch blocker each."""
    return [r for r in results if r.priority == "P0" and r.status == "fail"]


# --------------------------------------------------------------------------------------------------
# Markdown for a launch review
# --------------------------------------------------------------------------------------------------

_STATUS_LABEL: dict[Status, str] = {"pass": "PASS", "fail": "FAIL", "unknown": "TO CHECK (tick by hand)"}


def checklist_markdown(results: Sequence[ItemResult], title: str = "Pre-flight checklist") -> str:
    """The results as a Markdown launch review: a verdict, then P0 and P1 items as task-list entries
    (passed items ticked, failing and unknown ones open) with their evidence, why and how to check."""
    lines = [f"# {title}", ""]
    blockers = failing_p0(results)
    open_p0 = [r for r in results if r.priority == "P0" and r.status == "unknown"]
    if blockers:
        verdict = f"NOT READY: {len(blockers)} P0 item(s) fail ({', '.join(r.id for r in blockers)})."
    elif open_p0:
        verdict = f"NOT YET: {len(open_p0)} P0 item(s) to check by hand ({', '.join(r.id for r in open_p0)})."
    else:
        verdict = "READY: every P0 item passes."
    lines += [f"**Verdict: {verdict}**", ""]
    for priority, heading in (("P0", "P0: must pass before launch"), ("P1", "P1: should pass")):
        chosen = [r for r in results if r.priority == priority]
        if not chosen:
            continue
        counts = {s: sum(r.status == s for r in chosen) for s in ("pass", "fail", "unknown")}
        lines += [
            f"## {heading}",
            "",
            f"{counts['pass']} pass, {counts['fail']} fail, {counts['unknown']} to check by hand.",
            "",
        ]
        for r in chosen:
            box = "x" if r.status == "pass" else " "
            label = _STATUS_LABEL[r.status] + ("" if r.applicable else " (not applicable)")
            lines.append(f"- [{box}] **{r.item.title}** (`{r.id}`): {label}")
            lines += [f"  - {_one_line(e)}" for e in r.evidence]
            lines.append(f"  - Why: {r.item.why}")
            lines.append(f"  - How to check: {r.item.how_to_check}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _one_line(text: str) -> str:
    return " ".join(text.split())
