"""Decision tree: the 5-node root-cause tree, the path a detected spike took with its evidence, or a manual walk.

The walk is drawn as the tree's own column of questions (each a bordered box with its answer, its
question and the numbers behind the answer), so the text stays the page's size at any width; the
graph of the whole tree is one click away.
"""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import re
from typing import Any

import streamlit as st

from pages.parts.incident_view import diagnosis_of, dot_with_evidence, evidence_text
from pages.parts.store_access import get_store, list_runs, read_spikes
from pages.parts.widgets import pick_run
from stab_core.analysis import outcome
from stab_core.decision_tree import DECISION_TREE
from stab_core.tree_walk import tree_to_dot, walk_tree

ANSWERS = ["no", "yes", "unknown"]
# an answer's badge colour: a "yes" names the cause, a "no" rules one out, "unknown" leaves it open
BADGE_COLOURS = {"yes": "red", "no": "green", "unknown": "orange"}


def manual_walk() -> Any:
    """Ask each node's question in the tree's order until a "yes" reaches a leaf; returns the Diagnosis."""
    answers: dict[str, str] = {}
    recovered = None
    current = DECISION_TREE.root
    while not DECISION_TREE.is_leaf(current):
        node = DECISION_TREE.node(current)
        answer = st.radio(
            f"{node.number}. {node.title}",
            ANSWERS,
            key=f"tree_q_{node.id}",
            horizontal=True,
            help=f"{node.question}\n\nSettled by: {node.settled_by}",
        )
        answers[node.id] = answer
        label = answer
        if node.id == "snr_collapse" and answer == "yes":
            recovered = (
                st.radio("Did the loss recover?", ["recovered", "diverged"], key="tree_recovered", horizontal=True)
                == "recovered"
            )
            label = "yes, recovered" if recovered else "yes, diverged"
        current = node.target(label)
    return walk_tree(answers, recovered)


def leaf_title(leaf_id: str, cause: str) -> str:
    """The leaf's title; for a verdict the tree has no leaf for (an early instability), its own name."""
    if DECISION_TREE.is_leaf(leaf_id):
        return DECISION_TREE.leaf(leaf_id).title
    return (leaf_id.removeprefix("leaf_") or cause).replace("_", " ").capitalize()


def show_walk(diagnosis: Any, *, manual: bool) -> None:
    """Every question of the tree in order: asked ones with their answer and evidence, the rest greyed."""
    visits = {visit.node: visit for visit in diagnosis.path}
    for node in DECISION_TREE.nodes:
        visit = visits.get(node.id)
        with st.container(border=True, key=f"tree_node_{node.id}"):
            # by hand there are no numbers to show: the question keeps the box's whole width
            text, numbers = (st.container(), None) if manual else st.columns([3, 2])
            with text:
                if visit is None:
                    st.markdown(f"**{node.number}. {node.title}** :gray-badge[not asked]")
                else:
                    colour = BADGE_COLOURS.get(visit.answer, "gray")
                    st.markdown(f"**{node.number}. {node.title}** :{colour}-badge[{visit.answer}]")
                yes = [
                    f"{e.answer} → {leaf_title(e.target, e.target)}" for e in node.edges if e.answer.startswith("yes")
                ]
                st.caption(f"{node.question}  \n*{' · '.join(yes)}*")
            if numbers is None:
                continue
            with numbers:
                if visit is None:
                    st.caption("Not asked: the walk ended at an earlier question.")
                else:
                    st.code(evidence_text(dict(visit.evidence), limit=50) or "no data", language=None)
    with st.container(border=True, key="tree_leaf"):
        st.markdown(f"**Reached: {leaf_title(diagnosis.leaf, diagnosis.cause)}** :red-badge[{diagnosis.cause}]")


_PLACEHOLDER = re.compile(r"\{([A-Za-z_]*)[^{}]*\}")


def _needs_a_step(template: str) -> bool:
    """Whether a leaf action's text names a step of the run (``{start}``, ``{transition_step}``...)."""
    return any("step" in name or name in ("start", "end", "peak") for name in _PLACEHOLDER.findall(template))


def _template_pattern(template: str) -> re.Pattern[str]:
    """A leaf action's text with each ``{placeholder}`` matching anything: finds the action it became."""
    return re.compile(".+?".join(re.escape(part) for part in _PLACEHOLDER.split(template)[::2]), re.S)


def actions_for(diagnosis: Any, *, manual: bool) -> list[str]:
    """The diagnosis's actions; on a walk by hand, none that needs a step of the run (there is no
    run: such an action would read "around step of the spike")."""
    if not manual or not DECISION_TREE.is_leaf(diagnosis.leaf):
        return list(diagnosis.actions)
    needs_step = [_template_pattern(t) for t in DECISION_TREE.leaf(diagnosis.leaf).actions if _needs_a_step(t)]
    return [a for a in diagnosis.actions if not any(p.fullmatch(a) for p in needs_step)]


def all_answered_no(diagnosis: Any) -> bool:
    """Whether every question of the tree was asked and answered no (every known cause ruled out)."""
    answers = {visit.node: visit.answer for visit in diagnosis.path}
    return all(answers.get(node.id) == "no" for node in DECISION_TREE.nodes)


def verdict_sentence(diagnosis: Any, summary: str) -> str:
    """The verdict in words: the diagnosis's own summary where it has one; for no cause found, whether
    every question was answered no (nothing known matched) or some could not be answered."""
    if summary:
        return summary
    if diagnosis.cause != "unknown":
        return f"Cause **`{diagnosis.cause}`** · confidence **{diagnosis.confidence:.0%}**"
    if all_answered_no(diagnosis):
        return f"No known cause matched: all {len(diagnosis.path)} questions were answered **no**."
    unanswered = sum(visit.answer == "unknown" for visit in diagnosis.path)
    asked, total = len(diagnosis.path), len(DECISION_TREE.nodes)
    return f"Cause not identified: {asked} of {total} questions asked, {unanswered} could not be answered."


def show_verdict(diagnosis: Any, *, manual: bool, summary: str = "") -> None:
    title = leaf_title(diagnosis.leaf, diagnosis.cause)
    if diagnosis.cause == "unknown" and all_answered_no(diagnosis):
        title = "No known cause matched"  # not "not identified": every known cause was ruled out
    st.markdown(f"### {title}")
    if summary.rstrip(".") == title:  # a summary that only repeats the title says nothing more
        summary = ""
    st.markdown(verdict_sentence(diagnosis, summary))
    if summary and diagnosis.cause != "unknown":
        st.markdown(f"Cause **`{diagnosis.cause}`** · confidence **{diagnosis.confidence:.0%}**")
    actions = actions_for(diagnosis, manual=manual)
    if actions:
        st.markdown("**What to do**\n" + "\n".join(f"1. {a}" for a in actions))
    if diagnosis.missing:
        st.caption("Data that would settle the unknown questions: " + "; ".join(diagnosis.missing))


def spike_label(spike: dict[str, Any], i: int) -> str:
    metrics = " + ".join(spike.get("metrics") or [spike["metric"]])
    return f"#{i}: {metrics} at step {spike['peak']} ×{float(spike.get('ratio') or 0):.1f}"


st.title("Decision tree")
mode = st.radio(
    "Mode",
    ["A detected spike", "Walk it by hand"],
    horizontal=True,
    key="tree_mode",
    help="Walk it by hand for a spike seen elsewhere (another tool, a paper, a colleague's run)",
)
if mode == "A detected spike":
    summary = get_store().spike_summary()
    runs = [r for r in list_runs() if summary.get(r.name, {}).get("n_spikes")]
    if not runs:
        st.info(
            "No detected spikes in the store yet (the analyses run after each compaction). Switch to "
            "**Walk it by hand** to diagnose a spike you saw elsewhere."
        )
        st.graphviz_chart(dot_with_evidence(tree_to_dot(), None))
        st.stop()
    wanted = st.session_state.get("selected_spike")
    if wanted and wanted[0] in {r.name for r in runs}:
        st.session_state["selected_run"] = wanted[0]
    info = pick_run("tree_run", runs=runs)
    assert info is not None
    spikes = read_spikes(info)
    default = wanted[1] if wanted and wanted[0] == info.name and wanted[1] < len(spikes) else 0
    idx = st.selectbox(
        "Spike", range(len(spikes)), index=default, key="tree_spike", format_func=lambda i: spike_label(spikes[i], i)
    )
    spike = spikes[idx]
    st.session_state["selected_spike"] = (info.name, idx)
    diagnosis = diagnosis_of(spike)
    st.caption(
        f"{' + '.join(spike.get('metrics') or [spike['metric']])} spike, steps {spike['start']}–{spike['end']}, "
        f"peak at {spike['peak']}, {outcome(spike)}. "
        "The verdict first, then each question with its answer and every number behind it."
    )
    show_verdict(diagnosis, manual=False, summary=str(spike.get("summary") or ""))
    st.markdown("#### How the tree got there")
    show_walk(diagnosis, manual=False)
else:
    questions, walk = st.columns([2, 3])
    with questions:
        st.caption("Answer each question from what you saw; the walk stops at the first yes.")
        diagnosis = manual_walk()
        show_verdict(diagnosis, manual=True, summary=str(getattr(diagnosis, "summary", "") or ""))
    with walk:
        show_walk(diagnosis, manual=True)

with st.expander("The whole tree as a graph"):
    st.graphviz_chart(dot_with_evidence(tree_to_dot(diagnosis), None))
