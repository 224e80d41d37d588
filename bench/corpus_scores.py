"""The scores of the corpus evaluation (``bench.corpus_eval``) and their tables: one log's comparison
with its golden file (:class:`LogScore`), the totals of the whole corpus, of its held-out logs (golden
``"tuned_on": false``) and of the logs tuned on (issue #32: reported apart), StabScope against the
baseline rules on each part, and the statement precision (``bench.statement_eval``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.statement_eval import INVENTED, counts, kind_table, precision_table
from stab_core.baselines import LLMC_WINDOW, OLMO_WINDOW

STABSCOPE = "StabScope"
BASELINE_WINDOW = min(LLMC_WINDOW, OLMO_WINDOW)
"""Samples the llm.c and OLMo-core rules need before they flag anything (samples)."""


@dataclass
class LogScore:
    """One log's comparison with its golden file; each list holds readable findings (empty is perfect)."""

    name: str
    runs_expected: int = 0
    runs_found: int = 0
    refused: str | None = None
    import_faults: dict[str, list[str]] = field(default_factory=dict)
    required: int = 0
    found: int = 0
    missed: list[str] = field(default_factory=list)
    invented: list[str] = field(default_factory=list)
    quiet_flagged: list[str] = field(default_factory=list)
    reported: int = 0
    healthy: bool = False
    statements_broken: list[str] = field(default_factory=list)
    error: str | None = None
    baselines: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per baseline rule (``stab_core.baselines``) on the same stored loss and grad norm: required,
    found, invented, shown; scored as StabScope's incidents are."""
    tuned_on: bool = True
    """False only where the golden file says ``"tuned_on": false`` (held out); a golden file without the
    key was tuned on (the first 33 were, last round)."""
    statements: list[dict[str, Any]] = field(default_factory=list)
    """Every statement said about the log's runs, judged against the golden ``facts``
    (``bench.statement_eval.Judged`` as dicts)."""
    statements_note: str | None = None
    """Why the statements were not judged (a golden file without ``facts``)."""
    findings_missed: list[str] = field(default_factory=list)
    """Overfitting and throughput drops the facts state that no finding reports."""
    required_samples_before: list[int] = field(default_factory=list)
    """Per required incident, the finite loss or grad-norm samples logged before it in its run
    (``bench.corpus_eval.samples_before``): a baseline's 128-sample window is full only from 128."""
    batch: str = "old"
    """The golden file's ``batch`` (6, 7, ... as text); "old" for the first batches (1-5), whose files
    have none."""

    @property
    def statement_counted(self) -> bool:
        """Were this log's statements judged (read, with a golden that has facts)?"""
        return self.error is None and self.statements_note is None

    def fault(self, kind: str, text: str) -> None:
        self.import_faults.setdefault(kind, []).append(text)


def _actions_false(scores: Sequence[LogScore], *, matched_only: bool) -> int:
    """Actions judged false; ``matched_only``: only on incidents that match a golden one (an invented
    incident's actions are false with it; these are the ones whose own premise fails)."""
    return sum(
        1
        for s in scores
        for j in s.statements
        if j["kind"] == "action" and j["verdict"] == "false" and not (matched_only and j["fact"] == INVENTED)
    )


def totals(scores: Sequence[LogScore]) -> dict[str, Any]:
    """The corpus totals docs/diagnosis.md quotes."""
    faults: dict[str, int] = {}
    for s in scores:
        for kind, items in s.import_faults.items():
            faults[kind] = faults.get(kind, 0) + len(items)
    required = sum(s.required for s in scores)
    found = sum(s.found for s in scores)
    return {
        "logs": len(scores),
        "logs_unreadable": sum(1 for s in scores if s.error),
        "logs_with_import_faults": sum(1 for s in scores if s.import_faults),
        "import_faults": faults,
        "required_incidents": required,
        "found": found,
        "recall": found / required if required else None,
        "invented": sum(len(s.invented) for s in scores),
        "quiet_spans_flagged": sum(len(s.quiet_flagged) for s in scores),
        "healthy_logs": sum(1 for s in scores if s.healthy),
        "shown_on_healthy": sum(s.reported for s in scores if s.healthy),
        "statements_broken": sum(len(s.statements_broken) for s in scores),
        "statements": counts(j for s in scores for j in s.statements),
        "logs_with_facts": sum(1 for s in scores if s.statements_note is None and not s.error),
        "findings_missed": sum(len(s.findings_missed) for s in scores),
        "actions_false": _actions_false(scores, matched_only=False),
        "actions_false_matched": _actions_false(scores, matched_only=True),
        "baselines": detector_rows(scores),
        "required_with_baseline_window": sum(
            1 for s in scores for n in s.required_samples_before if n >= BASELINE_WINDOW
        ),
    }


SPLITS = ("all", "held_out", "tuned_on")
"""The corpus, its logs whose golden says ``"tuned_on": false``, and the rest (issue #32: report apart)."""

BATCH_PREFIX = "batch_"
"""A split of one golden batch: ``batch_old`` (batches 1-5, no ``batch`` in their golden), ``batch_6``, ..."""


def batch_label(golden: Any) -> str:
    """The golden file's batch as a split's suffix: its ``batch`` number, "old" without one."""
    batch = golden.get("batch")
    return "old" if batch is None else str(batch)


def splits_of(scores: Sequence[LogScore]) -> list[str]:
    """:data:`SPLITS`, then one split per golden batch present (``batch_old`` first, then by number)."""
    batches = sorted({s.batch for s in scores}, key=lambda b: (b != "old", int(b) if b.isdigit() else 0, b))
    return [*SPLITS, *(BATCH_PREFIX + b for b in batches)]


def split(scores: Sequence[LogScore], which: str) -> list[LogScore]:
    if which == "held_out":
        return [s for s in scores if not s.tuned_on]
    if which == "tuned_on":
        return [s for s in scores if s.tuned_on]
    if which.startswith(BATCH_PREFIX):
        return [s for s in scores if s.batch == which.removeprefix(BATCH_PREFIX)]
    return list(scores)


def split_label(which: str) -> str:
    """A split as a table's column or row says it: "held out", "batch 6", "batch old"."""
    return which.replace("_", " ")


def split_totals(scores: Sequence[LogScore]) -> dict[str, dict[str, Any]]:
    """:func:`totals` of the whole corpus, of its held-out logs, of the logs tuned on and of each batch."""
    return {which: totals(split(scores, which)) for which in splits_of(scores)}


def detector_rows(scores: Sequence[LogScore]) -> dict[str, dict[str, Any]]:
    """StabScope and each baseline rule on ``scores``' logs, scored the same way: required, found,
    invented, healthy_shown, recall."""
    rows: dict[str, dict[str, Any]] = {}
    for s in scores:
        if s.error:
            continue
        mine = {"required": s.required, "found": s.found, "invented": len(s.invented), "shown": s.reported}
        for label, r in [(STABSCOPE, mine), *s.baselines.items()]:
            row = rows.setdefault(label, dict.fromkeys(("required", "found", "invented", "healthy_shown"), 0))
            row["required"] += r["required"]
            row["found"] += r["found"]
            row["invented"] += r["invented"]
            row["healthy_shown"] += r["shown"] if s.healthy else 0
    for row in rows.values():
        row["recall"] = row["found"] / row["required"] if row["required"] else None
    return rows


def detector_table(scores: Sequence[LogScore]) -> str:
    """StabScope and each baseline rule on the corpus, scored the same way: one row per detector, with
    the held-out logs' figures beside the rest's."""
    parts = {which: detector_rows(split(scores, which)) for which in splits_of(scores)}
    lines = [
        "| detector | logs | recall | found / required | invented | shown on healthy runs |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label in parts["all"]:
        for which in parts:
            r = parts[which].get(label)
            if r is None:
                continue
            recall = f"{r['recall']:.2f}" if r["recall"] is not None else "-"
            lines.append(
                f"| {label} | {split_label(which)} | {recall} | {r['found']} / {r['required']} | {r['invented']} "
                f"| {r['healthy_shown']} |"
            )
    return "\n".join(lines)


def split_table(scores: Sequence[LogScore]) -> str:
    """The figures of issue #32's "done when", for all logs, the held-out ones, the ones tuned on and each
    golden batch."""
    parts = {which: totals(split(scores, which)) for which in splits_of(scores)}

    def row(label: str, cell: Any) -> str:
        return f"| {label} | " + " | ".join(cell(t) for t in parts.values()) + " |"

    def ratio(value: float | None) -> str:
        return f"{value:.2f}" if value is not None else "-"

    lines = [
        "| | " + " | ".join(split_label(which) for which in parts) + " |",
        "| --- |" + " --- |" * len(parts),
        row("logs (with facts)", lambda t: f"{t['logs']} ({t['logs_with_facts']})"),
        row(
            "statement precision (true / all)",
            lambda t: f"{ratio(t['statements']['precision'])} ({t['statements']['true']} / {t['statements']['all']})",
        ),
        row(
            "statements false / unsupported / unjudged",
            lambda t: f"{t['statements']['false']} / {t['statements']['unsupported']} / {t['statements']['unjudged']}",
        ),
        row("actions false (on matched incidents)", lambda t: f"{t['actions_false']} ({t['actions_false_matched']})"),
        row(
            "required incidents found (recall)",
            lambda t: f"{t['found']}/{t['required_incidents']} ({ratio(t['recall'])})",
        ),
        row(
            f"required with >= {BASELINE_WINDOW} samples before (a baseline's window)",
            lambda t: str(t["required_with_baseline_window"]),
        ),
        row("incidents invented", lambda t: str(t["invented"])),
        row("shown on healthy runs (healthy logs)", lambda t: f"{t['shown_on_healthy']} ({t['healthy_logs']})"),
        row("incidents in spans that must not be flagged", lambda t: str(t["quiet_spans_flagged"])),
        row("must-not-say phrases said", lambda t: str(t["statements_broken"])),
        row("findings missed (overfitting, throughput)", lambda t: str(t["findings_missed"])),
        row("logs with import faults", lambda t: str(t["logs_with_import_faults"])),
    ]
    return "\n".join(lines)


def statements_tables(scores: Sequence[LogScore]) -> str:
    """Statement precision per split, then per log, then per kind of statement (all logs)."""
    rows = [(split_label(which), totals(split(scores, which))["statements"]) for which in splits_of(scores)]
    per_log = [
        (f"`{s.name}`{'' if s.tuned_on else ' (held out)'}", counts(s.statements))
        for s in scores
        if s.statement_counted
    ]
    skipped = [s.name for s in scores if s.statements_note is not None]
    by_kind = kind_table(counts(j for s in scores for j in s.statements))
    out = [precision_table(rows), "", precision_table(per_log), "", by_kind]
    if skipped:
        out += ["", f"Statements not judged (golden without facts): {len(skipped)} logs: {', '.join(skipped)}"]
    return "\n".join(out)


def table(scores: Sequence[LogScore]) -> str:
    """One row per log: runs, import faults, incidents and statements."""
    lines = [
        "| log | runs stored / in log | import faults | required found | invented | in quiet spans | shown (healthy?) "
        "| must-not-say broken |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in scores:
        if s.error:
            lines.append(f"| `{s.name}` | {s.error} | | | | | | |")
            continue
        faults = ", ".join(f"{k} {len(v)}" for k, v in sorted(s.import_faults.items())) or "0"
        runs = "refused" if s.refused else f"{s.runs_found} / {s.runs_expected}"
        lines.append(
            f"| `{s.name}` | {runs} | {faults} | {s.found}/{s.required} | {len(s.invented)} | {len(s.quiet_flagged)} "
            f"| {s.reported} ({'healthy' if s.healthy else 'not healthy'}) | {len(s.statements_broken)} |"
        )
    return "\n".join(lines)


def details(scores: Sequence[LogScore]) -> str:
    out = []
    for s in scores:
        for kind, items in sorted(s.import_faults.items()):
            out.extend(f"- {s.name}: import {kind}: {item}" for item in items)
        out.extend(f"- {s.name}: missed {m}" for m in s.missed)
        out.extend(f"- {s.name}: quiet span flagged: {q}" for q in s.quiet_flagged)
        out.extend(f"- {s.name}: must not say: {b}" for b in s.statements_broken)
        if s.invented:
            shown = ", ".join(s.invented[:8]) + (f" (+{len(s.invented) - 8} more)" if len(s.invented) > 8 else "")
            out.append(f"- {s.name}: invented {len(s.invented)}: {shown}")
        out.extend(f"- {s.name}: finding missed: {m}" for m in s.findings_missed)
        for verdict in ("false", "unsupported"):
            out.extend(
                f"- {s.name}: {verdict}: {j['where']}: [{j['kind']}] {j['text']} ({j['fact']})"
                for j in s.statements
                if j["verdict"] == verdict
            )
    return "\n".join(out)


def unjudged(scores: Sequence[LogScore]) -> str:
    """The statements no fact judges, for a human to judge (they count in precision's "all")."""
    return "\n".join(
        f"- {s.name}: {j['where']}: [{j['kind']}] {j['text']} ({j['fact']})"
        for s in scores
        for j in s.statements
        if j["verdict"] == "unjudged"
    )
