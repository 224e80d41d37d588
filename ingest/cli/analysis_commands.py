"""The commands that read a run's analyses: ``spikes`` and ``diagnose``."""

from __future__ import annotations

import argparse
from typing import Any

from ingest.cli.output import (
    cli_store,
    print_json,
    print_safe,
)
from ingest.errors import StabScopeError


def cmd_spikes(args: argparse.Namespace) -> int:
    from ingest.services.run_findings import finding_entries, stored_findings, with_lr_transitions
    from stab_core.analysis import (
        INCIDENT_VERDICT,
        analysis_notes,
        analyze_run,
        params_for,
        statements,
        verdict_words,
    )
    from stab_core.incident_headline import incident_headline
    from stab_core.severity import DEFAULT_SENSITIVITY, blips_line, shown_by_default

    store = cli_store(args)
    info = store.run_info(args.run)
    stored = info.meta.get("sensitivity") or DEFAULT_SENSITIVITY
    if args.sensitivity is not None and args.sensitivity != stored:
        # another setting than the run's: analysed here, for this listing only (nothing is stored)
        spikes = analyze_run(store.run_view(args.run), params_for(args.sensitivity)).spike_dicts()
    else:
        spikes = store.spikes(args.run)
    # overfitting and throughput loss follow the incidents, each with kind "overfitting"/"throughput_loss"
    findings = finding_entries(stored_findings(store, info))
    if args.json:  # each incident with the stored LR transition before it (the charts' markers)
        print_json(with_lr_transitions(spikes, info) + findings)
        return 0
    analysis = info.meta.get("analysis") or {}
    shown = spikes if args.all else [s for s in spikes if shown_by_default(s.get("severity"))]
    if not spikes:
        print_safe(f"{args.run}: no incident detected")
    elif not shown:
        print_safe(f"{args.run}: no spike or divergence")
    for s in shown:
        certainty = " (less certain: its level comes from few samples)" if s.get("certainty") == "low" else ""
        print_safe(f"[{s.get('severity', 'spike')}] {incident_headline(s)}; {verdict_words(s)}{certainty}")
        # every sentence below is a claim whose check held on the run (stab_core.claims)
        for line in statements(s, INCIDENT_VERDICT):
            print_safe(f"{'':>12}{line}")
        print_safe(f"{'':>12}path: " + " -> ".join(f"{n['node']}={n['answer']}" for n in s.get("path", [])))
        for action in statements(s, ("action",)):
            print_safe(f"{'':>12}- {action}")
    for finding in findings:
        print_safe(str(finding["summary"]))
        for action in finding["actions"]:
            print_safe(f"{'':>12}- {action}")
    blips = blips_line(spikes)
    if blips is not None and not args.all:
        print_safe(f"{blips} (--all lists them)")
    for line in analysis_notes(analysis):
        print_safe(line)
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    from stab_core.analysis import INCIDENT_VERDICT, statements, verdict_words
    from stab_core.incident_headline import incident_headline

    store = cli_store(args)
    store.run_info(args.run)
    spikes = store.spikes(args.run)
    hit = [s for s in spikes if _covers(s, args.step, args.metric)]
    note = ""
    if hit:
        s = min(hit, key=lambda s: abs(s["peak"] - args.step))
    elif not args.force:
        nearest = _nearest(spikes, args.step)
        if args.json:
            print_json({"step": args.step, "incident": None, "nearest": nearest})
            return 0
        print_safe(f"no incident covers step {args.step} of {args.run}: nothing to diagnose there.")
        for n in nearest:
            print_safe(
                f"  nearest {n['side']}: {n['kind']} at step {n['peak']} ({n['start']}-{n['until']}), {n['cause']}"
            )
        if not nearest:
            print_safe("  the run has no detected incident.")
        print_safe("  (--force walks the tree for this step as if it were a spike)")
        return 0
    else:
        # A spike seen elsewhere (or below our thresholds): walk the tree for this step anyway.
        from stab_core.analysis import explain_step

        try:
            s = explain_step(store.run_view(args.run), args.step, args.metric or "loss").to_dict()
        except ValueError as exc:
            raise StabScopeError(str(exc)) from exc
        note = (
            f"(no detected {args.metric or 'loss'} incident covers step {args.step}: the step was diagnosed as if "
            "it were one)"
        )
    if args.json:
        print_json(s)
        return 0
    if note:
        print_safe(note)
    print_safe(f"{incident_headline(s)}; {verdict_words(s)}")
    for line in statements(s, INCIDENT_VERDICT):
        print_safe(f"  {line}")
    for node in s.get("path", []):
        ev = ", ".join(f"{k}={_short(v)}" for k, v in node.get("evidence", {}).items())
        print_safe(f"  [{node['node']}] {node.get('question', '')}\n      -> {node['answer']}  ({ev})")
    if s.get("missing"):
        print_safe("data that would settle the unknown nodes: " + "; ".join(s["missing"]))
    print_safe("actions:")
    for action in statements(s, ("action",)):
        print_safe(f"  - {action}")
    withheld = [c for c in s.get("action_evidence", []) if c.get("holds") is False]
    for check in withheld:
        print_safe(f"  (not advised: {check['action']} -- its premise '{check['premise']}' does not hold in this run)")
    return 0


def _covers(s: dict[str, Any], step: int, metric: str | None) -> bool:
    """Does incident ``s`` cover ``step`` (from its start to its last recovery), with ``metric`` (when
    given) among its members over that step?"""
    if metric is None:
        return int(s["start"]) <= step <= int(s.get("until", s["end"]))
    for m in s.get("members") or [s]:
        until = m.get("recovery_step") if m.get("recovery_step") is not None else m["end"]
        if m["metric"] == metric and m["start"] <= step <= until:
            return True
    return False


def _nearest(spikes: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """The closest incident before and after ``step``."""
    before = [s for s in spikes if s["start"] < step]
    after = [s for s in spikes if s["start"] > step]
    out = []
    for side, group, key in (("before", before, max), ("after", after, min)):
        if group:
            s = key(group, key=lambda s: s["start"])
            out.append(
                {
                    "side": side,
                    "kind": s.get("kind", "spike"),
                    "start": s["start"],
                    "peak": s["peak"],
                    "until": s.get("until", s["end"]),
                    "metrics": s.get("metrics", [s["metric"]]),
                    "cause": s["cause"],
                }
            )
    return out


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
