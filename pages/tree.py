"""Decision tree: the 5-node root-cause tree, the path a detected spike took with its evidence, or a manual walk."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
from typing import Any

import streamlit as st

from pages.common import diagnosis_of, dot_with_evidence, evidence_text, get_store, list_runs, pick_run, read_spikes
from stab_core.diagnosis import DECISION_TREE, tree_to_dot, walk_tree

ANSWERS = ["no", "yes", "unknown"]


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


st.title("Decision tree")
mode = st.radio(
    "Mode",
    ["A detected spike", "Walk it by hand"],
    horizontal=True,
    key="tree_mode",
    help="Walk it by hand for a spike seen elsewhere (another tool, a paper, a colleague's run)",
)
diagnosis, spike = None, None
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
        "Spike",
        range(len(spikes)),
        index=default,
        key="tree_spike",
        format_func=lambda i: (
            f"#{i}: {spikes[i]['metric']} at step {spikes[i]['peak']} x{float(spikes[i].get('ratio') or 0):.1f}"
        ),
    )
    spike = spikes[idx]
    st.session_state["selected_spike"] = (info.name, idx)
    diagnosis = diagnosis_of(spike)
    st.graphviz_chart(dot_with_evidence(tree_to_dot(diagnosis), diagnosis))
    left, right = st.columns([3, 2])
else:
    questions, graph = st.columns([2, 3])
    with questions:
        st.caption("Answer each question from what you saw; the walk stops at the first yes.")
        diagnosis = manual_walk()
    with graph:
        st.graphviz_chart(dot_with_evidence(tree_to_dot(diagnosis), None))
    left, right = st.columns([3, 2])

with left:
    leaf = DECISION_TREE.leaf(diagnosis.leaf)
    st.markdown(f"### {leaf.title}")
    st.markdown(f"Cause **`{diagnosis.cause}`** · confidence **{diagnosis.confidence:.0%}**")
    st.markdown("**What to do**\n" + "\n".join(f"1. {a}" for a in diagnosis.actions))
    if diagnosis.missing:
        st.caption("Data that would settle the unknown nodes: " + "; ".join(diagnosis.missing))
with right:
    if spike is not None:
        st.caption(
            f"{spike['metric']} spike, steps {spike['start']}–{spike['end']}, "
            f"{'recovered' if spike['recovered'] else 'diverged'}. Every number behind each answer:"
        )
        for visit in diagnosis.path:
            with st.expander(f"{visit.number}. {DECISION_TREE.node(visit.node).title} → {visit.answer}"):
                st.code(evidence_text(dict(visit.evidence), limit=50) or "no data", language=None)
