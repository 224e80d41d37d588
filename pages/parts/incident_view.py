"""A stored incident (a spike dict of ``stabscope spikes --json``) for display: its words and span, its
verdict as a ``Diagnosis``, the evidence behind each answer, and the decision tree drawn with it."""

from __future__ import annotations

import itertools
from typing import Any


def incident_span(s: dict[str, Any]) -> tuple[int, int]:
    """First and last step of an incident out of its band: over all its members (a grad-norm spike that
    led the loss starts the incident)."""
    members = s.get("members") or [s]
    return min(int(m["start"]) for m in members), max(int(m["end"]) for m in members)


def shown_incidents(spikes: list[dict[str, Any]], show_blips: bool) -> list[int]:
    """Indices of the incidents a page lists: spikes and divergences, and the blips only on demand."""
    from stab_core.severity import shown_by_default

    return [i for i, s in enumerate(spikes) if show_blips or shown_by_default(s.get("severity"))]


def incident_metrics(spikes: list[dict[str, Any]]) -> list[str]:
    """The metrics the incidents a page shows by default are on, in order, each once (an RL run's
    return, a VAE's KL term: a panel the overview opens for them, since no default panel holds them)."""
    metrics = [m for i in shown_incidents(spikes, False) for m in spikes[i].get("metrics") or [spikes[i]["metric"]]]
    return list(dict.fromkeys(metrics))


def incident_words(s: dict[str, Any]) -> str:
    """An incident's kind and metrics in a few words ("loss + grad_norm", "early instability: loss")."""
    metrics = " + ".join(s.get("metrics") or [s["metric"]])
    kind = str(s.get("kind") or "spike")
    return metrics if kind == "spike" else f"{kind.replace('_', ' ')}: {metrics}"


def diagnosis_of(spike: dict[str, Any]) -> Any:
    """The stored spike's verdict as a ``stab_core.tree_walk.Diagnosis`` (for ``tree_to_dot``)."""
    from stab_core.tree_walk import Diagnosis, NodeVisit

    path = [
        NodeVisit(p["node"], int(p.get("number", i + 1)), p.get("question", ""), p["answer"], p.get("evidence") or {})
        for i, p in enumerate(spike.get("path", []))
    ]
    leaf = spike.get("leaf") or f"leaf_{spike['cause']}"
    return Diagnosis(
        cause=spike["cause"],
        confidence=float(spike["confidence"]),
        path=path,
        leaf=leaf,
        actions=list(spike.get("actions", [])),
        missing=list(spike.get("missing", [])),
    )


def evidence_text(evidence: dict[str, Any], limit: int = 6) -> str:
    """``key = value`` lines of a node's evidence, numbers to 4 significant digits, unknowns left out."""
    lines = []
    for key, value in evidence.items():
        if value is None or key == "manual":
            continue
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        lines.append(f"{key} = {shown}")
    return "\n".join(lines[:limit] + ([f"… {len(lines) - limit} more"] if len(lines) > limit else []))


def dot_with_evidence(dot: str, diagnosis: Any | None) -> str:
    """``tree_to_dot`` output laid out for a page: the questions in one column with each "yes" leaf
    beside its question (a second "yes" leaf below that one), the leaves of a question whose every answer
    is a leaf (node 5) stacked below it rather than
    side by side (a narrower graph is scaled down less to fit a column: larger text), and each
    visited node's evidence drawn as a note on the left of it."""
    from stab_core.decision_tree import DECISION_TREE

    # a white canvas keeps the black labels readable in the dark theme too
    extra = ['  graph [nodesep=0.3, ranksep=0.35, fontsize=11, bgcolor="white"];', "  node [fontsize=11];"]
    for node in DECISION_TREE.nodes:
        yes = [e.target for e in node.edges if e.answer.startswith("yes")]
        if len(yes) > 1 and all(DECISION_TREE.is_leaf(e.target) for e in node.edges):  # node 5: every answer a leaf
            leaves = list(dict.fromkeys(e.target for e in node.edges))
            extra += [f"  {a} -> {b} [style=invis];" for a, b in itertools.pairwise(leaves)]
        else:  # the first "yes" leaf beside its question, another (node 1's from-the-first-step) below it
            extra.append(f"  {{rank=same; {node.id}; {yes[0]}}}")
            extra += [f"  {a} -> {b} [style=invis];" for a, b in itertools.pairwise(yes)]
    for visit in diagnosis.path if diagnosis is not None else []:
        text = evidence_text(dict(visit.evidence))
        if not text:
            continue
        note = f"ev_{visit.node}"
        label = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\l") + "\\l"
        extra += [
            f'  {note} [shape=note, fontsize=9, color="#868e96", fontcolor="#343a40", label="{label}"];',
            f'  {note} -> {visit.node} [style=dashed, arrowhead=none, color="#adb5bd"];',
            f"  {{rank=same; {note}; {visit.node}}}",
        ]
    body = dot.rstrip().rstrip("}")
    return "\n".join(map(_rounded_question, body.split("\n"))) + "\n".join(line for line in extra if line) + "\n}\n"


def _rounded_question(line: str) -> str:
    """A question drawn as a rounded box rather than a diamond: about a third as wide around the same
    text, so the graph is scaled down less to fit a page column."""
    if "shape=diamond" not in line:
        return line
    if 'style="filled,bold"' in line:  # on the path
        return line.replace("shape=diamond", "shape=box").replace('style="filled,bold"', 'style="filled,bold,rounded"')
    return line.replace("shape=diamond", 'shape=box, style="rounded"')
