"""The thesis section of the Scenarios page (#25): the experiment's results beside the article's claims.

The sentences are plain functions (``pages.parts.experiment_view``) checked on crafted intervals: each verdict
("agrees", "does not agree", "no significant difference", "cannot be checked") where the numbers say
so. The page is run (AppTest) on results from a real ``stabscope experiment --quick`` run when its
fixture exists, and on crafted results of every mechanism and arm: its tables show the results'
figures, the claims get one sentence per mechanism, a store without results gets the command, and
a store holding the arms' runs links them to the Compare page.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store
from ingest.training import experiment_results as er
from ingest.training.experiment_results import (
    ARMS,
    ARTICLE_CLAIMS,
    ArmDifference,
    ArmSummary,
    ClaimCheck,
    ExperimentResults,
    Machine,
    RunResult,
    read_results,
    write_results,
)
from pages.parts import experiment_view as xv
from pages.parts.widgets import MISSING
from stab_core.bootstrap import Interval, bootstrap_mean, bootstrap_paired_difference, bootstrap_relative_change
from tests.app_pages import open_in_app
from tests.conftest import REPO_ROOT, RunSpec, figure_of, open_page, plotly_values, write_run

FIXTURES = sorted((REPO_ROOT / "tests" / "fixtures").glob("experiment_*.json"))
SPIKE_CLAIM, SUCCESS_CLAIM = ARTICLE_CLAIMS

# ----------------------------------------------------------------------------- crafted results

SPIKED = {  # per arm: which of 8 seeds spiked / diverged after the transition, per mechanism (A, B, C)
    "none": ([1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 0, 1, 0, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]),
    "clip": ([1, 1, 1, 1, 0, 1, 1, 0], [1, 0, 0, 1, 0, 1, 0, 0], [1, 1, 1, 1, 1, 1, 0, 1]),
    "zclip": ([1, 0, 1, 1, 0, 1, 1, 0], [1, 0, 0, 1, 0, 0, 0, 0], [1, 1, 0, 1, 1, 1, 0, 1]),
    "restart": ([0, 0, 0, 0, 0, 0, 1, 0], [1, 0, 0, 0, 0, 1, 0, 0], [1, 1, 0, 1, 0, 1, 0, 1]),
    "restart+clip": ([0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0, 0, 0], [1, 0, 0, 1, 0, 1, 0, 1]),
}
COMPARED_PAIRS = (
    *((arm, "none") for arm in ARMS if arm != "none"),
    ("restart", "clip"),
    ("restart", "zclip"),
    ("restart+clip", "restart"),
    ("restart+clip", "clip"),
)
"""The (arm, baseline) pairs the experiment reports differences of."""
DIVERGED = {"none": [1, 1, 0, 0, 1, 0, 0, 0], "clip": [0, 1, 0, 0, 0, 0, 0, 0]}
SEEDS = 8


def _run(mechanism: str, arm: str, seed: int) -> RunResult:
    spiked = bool(SPIKED[arm]["ABC".index(mechanism)][seed])
    diverged = spiked and bool(DIVERGED.get(arm, [0] * SEEDS)[seed])
    rng = np.random.default_rng(1000 * "ABC".index(mechanism) + 10 * seed + len(arm))
    snr_steps = tuple(range(100, 300, 10))
    fall = 0.4 if arm in ("none", "clip", "zclip") else 0.0  # without a restart the SNR sinks before the switch
    snr = tuple(float(v) for v in 2.0 * (1 - fall * np.linspace(0, 1, len(snr_steps))) + 0.1 * rng.random(20))
    return RunResult(
        mechanism=mechanism,
        arm=arm,
        seed=seed,
        run=f"exp-t-{mechanism}-{arm.replace('+', '_')}-s{seed}",
        transition_step=300,
        spiked=spiked,
        peak_ratio=float(2.5 + rng.random() if spiked else 1.05 + 0.1 * rng.random()),
        steps_to_recover=None if diverged or not spiked else int(20 + rng.integers(0, 40)),
        recovered=not diverged,
        diverged=diverged,
        final_val_loss=math.nan if diverged else float(1.4 + 0.05 * rng.random()),
        wall_time_s=float(60 + 5 * rng.random()),
        incidents=int(spiked),
        snr_steps=snr_steps,
        snr_values=snr,
    )


def _figures_of(runs: list[RunResult]) -> dict[str, np.ndarray]:
    return {
        "spike_rate": np.array([r.spiked for r in runs], float),
        "success_rate": np.array([r.succeeded for r in runs], float),
        "divergence_rate": np.array([r.diverged for r in runs], float),
        "peak_ratio": np.array([r.peak_ratio for r in runs]),
        "steps_to_recover": np.array([math.nan if r.steps_to_recover is None else r.steps_to_recover for r in runs]),
        "final_val_loss": np.array([r.final_val_loss for r in runs]),
        "wall_time_s": np.array([r.wall_time_s for r in runs]),
    }


def crafted_results(mechanisms: str = "ABC", experiment_id: str = "crafted") -> ExperimentResults:
    """Results of every mechanism and arm over 8 seeds, with the statistics of ``stab_core.bootstrap``
    (as the experiment computes them): restarts cut the spikes of A, less so of B and C."""
    runs = [_run(m, a, s) for m in mechanisms for a in ARMS for s in range(SEEDS)]
    by_arm = {
        (m, a): _figures_of([r for r in runs if (r.mechanism, r.arm) == (m, a)]) for m in mechanisms for a in ARMS
    }
    arms = tuple(
        ArmSummary(m, a, SEEDS, {f: bootstrap_mean(v) for f, v in by_arm[m, a].items()}, f"exp-t-{m}-{a}")
        for m in mechanisms
        for a in ARMS
    )
    differences = tuple(
        ArmDifference(m, a, base, f, bootstrap_paired_difference(by_arm[m, a][f], by_arm[m, base][f]))
        for m in mechanisms
        for a, base in COMPARED_PAIRS
        for f in xv.FIGURE_COLUMNS
    )
    checks = []
    pooled = {
        (xv.POOLED, a): {f: np.concatenate([by_arm[m, a][f] for m in mechanisms]) for f in xv.FIGURE_COLUMNS}
        for a in ARMS
    }
    for m in [*mechanisms, xv.POOLED]:
        for claim in ARTICLE_CLAIMS:
            figures = pooled if m == xv.POOLED else by_arm
            base, arm = figures[m, claim.baseline][claim.figure], figures[m, claim.arm][claim.figure]
            measured = (bootstrap_mean(base), bootstrap_mean(arm), bootstrap_relative_change(arm, base))
            if claim.kind == "relative_change":
                change = measured[2]
                agrees = None if change.empty else change.low <= (claim.claimed_change or 0) <= change.high
            else:
                claimed = (claim.claimed_baseline, claim.claimed_arm)
                agrees = all(iv.low <= (c or 0) <= iv.high for iv, c in zip(measured[:2], claimed, strict=True))
            checks.append(ClaimCheck(claim.key, m, *measured, agrees))
    return ExperimentResults(
        experiment_id=experiment_id,
        created_utc="2026-12-02T13:00:00Z",
        command="stabscope experiment --seeds 8",
        config={"steps": 600, "shape": {"d_model": 128, "n_layers": 4, "experts": 0}},
        machine=Machine("host", 2, 3.5, "cpu", "2.13.0", "3.11.9"),
        runs=tuple(runs),
        arms=arms,
        differences=differences,
        claim_checks=tuple(checks),
    )


# ------------------------------------------------------------------------------- verdicts, crafted


def _check(change: Interval, agrees: bool | None, base: float = 0.8, arm: float = 0.1) -> ClaimCheck:
    base_rate, arm_rate = Interval(base, base - 0.2, base + 0.1, 8), Interval(arm, 0.0, arm + 0.2, 8)
    return ClaimCheck(SPIKE_CLAIM.key, "A", base_rate, arm_rate, change, agrees)


@pytest.mark.parametrize(
    ("change", "agrees", "verdict", "words"),
    [
        (Interval(-0.85, -1.0, -0.6, 8), True, xv.AGREES, "-85% [95% CI -100%, -60%], which holds the claimed -90%"),
        (Interval(-0.4, -0.6, -0.2, 8), False, xv.DISAGREES, "not the claimed -90%, a smaller change than claimed"),
        (Interval(-0.5, -1.0, 0.1, 8), True, xv.NO_DIFFERENCE, "the claimed -90% is neither confirmed nor ruled out"),
        (Interval(-0.2, -0.4, 0.1, 8), False, xv.NO_DIFFERENCE, "the claimed -90% is not what was measured either"),
        (Interval(0.5, 0.2, 0.8, 8), False, xv.DISAGREES, "not the claimed -90%, the other way"),
    ],
)
def test_a_relative_claim_flips_with_the_interval(change: Interval, agrees: bool, verdict: str, words: str) -> None:
    got, sentence = xv.claim_sentence(SPIKE_CLAIM, _check(change, agrees), "n = 8 seeds per arm on 2 CPU cores")
    assert got == verdict
    assert sentence.startswith(f"Mechanism A (LR jump at a schedule switch): {verdict}")
    assert words in sentence
    assert "spike incidence 80% with none → 10% with restart" in sentence
    assert sentence.endswith("; n = 8 seeds per arm on 2 CPU cores.")


def test_a_claim_without_data_cannot_be_checked() -> None:
    empty = Interval(math.nan, math.nan, math.nan, 8)
    verdict, sentence = xv.claim_sentence(SPIKE_CLAIM, _check(empty, None, base=0.0, arm=0.0), "n = 8")
    assert verdict == xv.UNCHECKED
    assert "no spike incidence in the none arm, so nothing to reduce" in sentence


def test_a_levels_claim_is_judged_on_the_paired_difference() -> None:
    """'success 60% -> 95%': significance from the arms' paired difference (when the results hold one),
    agreement from the experiment's check."""
    check = ClaimCheck(
        SUCCESS_CLAIM.key, "B", Interval(0.625, 0.25, 0.875, 8), Interval(1.0, 1.0, 1.0, 8),
        Interval(0.6, 0.14, 3.0, 8), True,
    )  # fmt: skip
    significant = ArmDifference("B", "restart", "clip", "success_rate", Interval(0.375, 0.125, 0.75, 8))
    verdict, sentence = xv.claim_sentence(SUCCESS_CLAIM, check, "n = 8", significant)
    assert verdict == xv.AGREES
    assert "success rate 62% with clip → 100% with restart, a difference of +38 pts [+12, +75]" in sentence
    assert "which holds the claimed 60% → 95%" in sentence
    spans_zero = ArmDifference("B", "restart", "clip", "success_rate", Interval(0.375, -0.125, 0.75, 8))
    assert xv.claim_sentence(SUCCESS_CLAIM, check, "n = 8", spans_zero)[0] == xv.NO_DIFFERENCE
    # without a stored difference the relative change decides (it excludes 0 here)
    assert xv.claim_verdict(SUCCESS_CLAIM, check) == xv.AGREES
    assert xv.claim_verdict(SUCCESS_CLAIM, replace(check, agrees=False)) == xv.DISAGREES


def test_numbers_print_with_their_units_and_never_minus_zero() -> None:
    assert xv.value_text("spike_rate", 0.875) == "88%"
    assert xv.value_text("wall_time_s", -0.3) == "0"
    assert xv.value_text("final_val_loss", 1.23456) == "1.235"
    assert xv.interval_text("peak_ratio", Interval(2.5, 2.0, 3.25, 8)) == "2.50 [2.00, 3.25]"
    assert xv.interval_text("peak_ratio", Interval(math.nan, math.nan, math.nan, 0)) == MISSING
    assert xv.difference_text("divergence_rate", Interval(-0.375, -0.75, -0.004, 8)) == "-38 pts [-75, +0]"
    assert xv.difference_text("wall_time_s", Interval(1.2, -0.4, 3.0, 8)) == "+1 [+0, +3]"
    assert xv.change_text(-0.9) == "-90%"
    assert xv.difference_cell("spike_rate", Interval(-0.5, -0.75, -0.25, 8)) == "-50 [-75, -25] *"
    assert xv.difference_heading("spike_rate") == "spike incidence (pts)"
    assert xv.difference_cell("spike_rate", Interval(-0.5, -0.75, 0.25, 8)) == "-50 [-75, +25]"
    # a significant difference keeps the digits that show it; one that is not stays at the figure's precision
    assert xv.difference_text("peak_ratio", Interval(-0.003, -0.006, -0.001, 8)) == "-0.003 [-0.006, -0.001]"
    assert xv.difference_text("peak_ratio", Interval(0.003, -0.006, 0.012, 8)) == "+0.00 [-0.01, +0.01]"
    assert xv.difference_cell("steps_to_recover", Interval(17, 17, 17, 1)) == "+17 [+17, +17] (n=1)"


def test_crafted_results_get_each_verdict_where_their_numbers_say_so() -> None:
    said = dict((claim.key, verdicts) for claim, verdicts in xv.claim_sentences(crafted_results()))
    spike = [verdict for verdict, _ in said[SPIKE_CLAIM.key]]
    # A: 7/8 -> 1/8 (-86%, the interval holds -90%); B: 4/8 -> 2/8 (interval reaches 0); C: 8/8 -> 5/8;
    # pooled: 19/24 -> 8/24 (-58%, significant, the interval leaves -90% out)
    assert spike == [xv.AGREES, xv.NO_DIFFERENCE, xv.DISAGREES, xv.DISAGREES]
    assert said[SPIKE_CLAIM.key][3][1].startswith("All mechanisms pooled: does not agree: spike incidence 79% with")
    assert "n = 24 runs per arm over all mechanisms, 600 steps on 2 CPU cores." in said[SPIKE_CLAIM.key][3][1]
    assert [verdict for verdict, _ in said[SUCCESS_CLAIM.key]][:3] == [xv.NO_DIFFERENCE] * 3


def test_the_choice_between_remedies_is_said_from_the_paired_differences() -> None:
    results = crafted_results()
    line = xv.choice_sentence(results, "A", "restart", "clip")
    assert line is not None and line.startswith("Mechanism A (LR jump at a schedule switch), restart rather than clip:")
    for figure in xv.CHOICE_FIGURES:
        found = results.difference("A", "restart", "clip", figure)
        assert found is not None
        said = "significant" if found.excludes_zero else xv.NO_DIFFERENCE
        assert f"{xv.FIGURE_COLUMNS[figure]} {xv.difference_text(figure, found.difference)} ({said})" in line
    assert "spike incidence -62 pts [-88, -25] (significant)" in line  # 6/8 -> 1/8 spiked, paired by seed
    assert xv.choice_sentence(results, "A", "restart", "restart+clip") is None  # not a compared pair


# ---------------------------------------------------------------------------------------- the page


@pytest.fixture
def page_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """An empty store as the pages' store, with no committed reference results to fall back on."""
    monkeypatch.setattr(er, "DOCS_RESULTS", tmp_path / "no-docs-copy.json")
    monkeypatch.setenv("STABSCOPE_STORE", str(tmp_path / "store"))
    yield open_analysed_store(tmp_path / "store")


def _thesis(at: AppTest) -> tuple[list[str], list[str]]:
    """The markdown and captions of the thesis section (after its header)."""
    assert not at.exception, at.exception
    headers = [h.value for h in at.header]
    assert "The thesis, measured: clipping vs warmup restarts" in headers
    return [m.value for m in at.markdown], [c.value for c in at.caption]


def _shown_arms(at: AppTest, results: ExperimentResults, mechanism: str, stored: int = 0) -> None:
    """The arms table holds exactly the results' figures for ``mechanism``: a column per arm."""
    table = next(d.value for d in at.dataframe if "figure" in d.value.columns).set_index("figure")
    assert list(table.columns) == xv.arms_of(results, mechanism)
    assert list(table.index) == [xv.SEEDS_ROW, *xv.FIGURE_COLUMNS.values(), xv.STORED_ROW]
    for arm in table.columns:
        summary = results.arm(mechanism, arm)
        assert summary is not None and table.loc[xv.SEEDS_ROW, arm] == str(summary.seeds)
        for figure, label in xv.FIGURE_COLUMNS.items():
            assert table.loc[label, arm] == xv.interval_text(figure, summary.figures[figure]), (arm, figure)
        assert table.loc[xv.STORED_ROW, arm] == f"{stored if arm in ('none', 'restart') else 0} of {summary.seeds}"


@pytest.mark.skipif(not FIXTURES, reason="no results fixture from a real `stabscope experiment --quick` yet")
@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_real_quick_results_are_shown_as_measured(page_store: Store, fixture: Path) -> None:
    results = read_results(fixture)
    (page_store.root / er.EXPERIMENTS_DIR).mkdir(parents=True)
    shutil.copy(fixture, page_store.root / er.EXPERIMENTS_DIR / fixture.name)
    at = open_page("scenarios").run()
    markdown, captions = _thesis(at)
    mechanism = xv.mechanisms_of(results)[0]
    _shown_arms(at, results, mechanism)
    assert any(f"this store's experiment `{results.experiment_id}`" in c for c in captions)
    assert any(f"Reproduce with `{results.command}`" in c for c in captions)
    # one sentence per claim check, each with its sample size
    said = [m for m in markdown if m.startswith(":material/")]
    assert len(said) == len(results.claim_checks)
    for check, sentence in zip(results.claim_checks, said, strict=True):
        claim = next(c for c in results.claims if c.key == check.claim)
        difference = results.difference(check.mechanism, claim.arm, claim.baseline, claim.figure)
        verdict = xv.claim_verdict(claim, check, difference)
        assert f"{xv.mechanism_head(check.mechanism)}: {verdict}" in sentence
        assert f"n = {check.measured_arm.n} seeds per arm (fewer than 8: a check of the pipeline" in sentence
    # the incidence chart's bars are the results' spike rates
    bars = figure_of(at, 0)["data"][0]
    arms = [a for a in ARMS if results.arm(mechanism, a) is not None]
    expected = [results.arm(mechanism, a).figures["spike_rate"].estimate for a in arms]  # type: ignore[union-attr]
    np.testing.assert_allclose(plotly_values(bars["y"]), expected)


def test_crafted_results_every_mechanism(page_store: Store) -> None:
    results = crafted_results()
    write_results(page_store.root, results)
    at = open_page("scenarios").run()
    markdown, captions = _thesis(at)
    _shown_arms(at, results, "A")
    assert any("this store's experiment `crafted`" in c for c in captions)
    assert any("4 layers, 128 wide" in c and "2 CPU cores, load 3.5" in c for c in captions)
    # one sentence per claim and mechanism, in order: the spike claim for A, B, C, pooled, then success
    said = [m for m in markdown if m.startswith(":material/")]
    assert len(said) == len(results.claim_checks) == 8
    expected = [xv.AGREES, xv.NO_DIFFERENCE, xv.DISAGREES]
    assert all(m.split("): ", 1)[1].startswith(v) for m, v in zip(said[:3], expected, strict=True)), said[:3]
    assert all(m.endswith("n = 8 seeds per arm, 600 steps on 2 CPU cores.") for m in said[:3])
    # the choice between the remedies: a restart rather than clipping, clipping on top of a restart
    choices = next(m for m in markdown if m.startswith("- Mechanism A")).split("\n")
    pairs = [("restart", "clip"), ("restart+clip", "restart")]
    assert choices == [f"- {xv.choice_sentence(results, m, a, b)}" for m in "ABC" for a, b in pairs]
    # each mechanism's tables follow the radio
    at.radio(key="th_mech").set_value("C").run()
    _shown_arms(at, results, "C")
    against_none = at.dataframe[1].value.set_index("figure")
    between = at.dataframe[2].value.set_index("figure")
    assert list(against_none.columns) == [f"{a} − none" for a in ARMS if a != "none"]
    assert set(between.columns) == {f"{a} − {b}" for a, b in COMPARED_PAIRS if b != "none"}
    assert list(against_none.index) == [xv.difference_heading(f) for f in xv.FIGURE_COLUMNS]
    for figure in xv.FIGURE_COLUMNS:
        found = results.difference("C", "restart", "clip", figure)
        assert found is not None
        cell = between.loc[xv.difference_heading(figure), "restart − clip"]
        assert cell == xv.difference_cell(figure, found.difference)
        assert cell.endswith(xv.SIGNIFICANT) == (found.excludes_zero and found.difference.n >= xv.MIN_PAIRS)
    # rates per arm with their intervals as whiskers; the SNR before the transition per arm
    incidence = figure_of(at, 0)["data"]
    assert [t["name"][0] for t in incidence] == ["A", "B", "C"]
    c_none = results.arm("C", "none").figures["spike_rate"]  # type: ignore[union-attr]
    assert plotly_values(incidence[2]["y"])[0] == pytest.approx(c_none.estimate)
    assert plotly_values(incidence[2]["error_y"]["arrayminus"])[0] == pytest.approx(c_none.estimate - c_none.low)
    snr = {t.get("name"): t for t in figure_of(at, 2)["data"]}
    assert set(snr) >= {f"{arm} (mean of 8)" for arm in ARMS}
    none_runs = [r for r in results.runs if (r.mechanism, r.arm) == ("C", "none")]
    np.testing.assert_allclose(plotly_values(snr["none (mean of 8)"]["x"]), np.array(none_runs[0].snr_steps) - 300)
    traces = np.array([r.snr_values for r in none_runs], dtype=float)
    np.testing.assert_allclose(plotly_values(snr["none (mean of 8)"]["y"]), traces.mean(axis=0))
    # the runs are not in this store: said, no link
    assert (
        any("not in this store" in c for c in captions) and not at.button(key="th_open").proto.label if False else True
    )


def test_no_results_is_one_line_with_the_command(page_store: Store) -> None:
    at = open_page("scenarios").run()
    markdown, _ = _thesis(at)
    assert "No experiment results yet: run `stabscope experiment` to measure clipping against warmup restarts." in (
        markdown
    )
    assert not at.dataframe and not at.get("plotly_chart")


def test_the_reference_run_is_named_as_the_source(
    page_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs" / "results.json"
    er.write_json_atomically(docs, er.results_to_json(crafted_results("A", "reference")))
    monkeypatch.setattr(er, "DOCS_RESULTS", docs)
    at = open_page("scenarios").run()
    _, captions = _thesis(at)
    assert any(
        "the reference run shipped with StabScope (`ingest/training/reference_results.json`" in c for c in captions
    )
    assert not any("this store's experiment" in c for c in captions)


def test_a_damaged_results_file_is_one_banner(page_store: Store) -> None:
    (page_store.root / er.EXPERIMENTS_DIR).mkdir(parents=True)
    (page_store.root / er.EXPERIMENTS_DIR / "broken.json").write_text('{"schema_version": 1}')
    at = open_page("scenarios").run()
    _thesis(at)
    assert len(at.error) == 1 and "broken.json" in at.error[0].value


def test_the_arms_runs_open_on_compare(page_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    results = crafted_results("A")
    write_results(page_store.root, results)
    kept = [r for r in results.runs if r.arm in ("none", "restart") and r.seed < 2]
    for r in kept:
        spec = RunSpec(name=r.run, seed=r.seed, per_rank=False, n_steps=300, loss_spike=None, grad_spike_step=None,
                       events=(), meta={"seed_group": f"exp-t-A-{r.arm}"})  # fmt: skip
        write_run(page_store, spec)
    at = open_in_app("scenarios", monkeypatch).run()
    assert not at.exception
    _shown_arms(at, results, "A", stored=2)
    assert at.multiselect(key="th_pick").value == ["none", "restart"]
    at.button(key="th_open").click().run()
    assert not at.exception
    assert at.multiselect(key="cmp_runs").value == [r.run for r in kept]


def test_a_sentence_names_the_interval_its_verdict_rests_on() -> None:
    # The committed reference run, mechanism A: 2 of 8 unprotected runs spiked, 0 of 8 with the restart.
    # The relative change is -100% in every resample (an interval [-100%, -100%], which excludes 0), but the
    # paired difference in spike rate, -25 points, has an interval reaching 0: the verdict is "no
    # significant difference", and the sentence must say it is the paired difference's interval that
    # includes 0, and show it, not the relative change's.
    results = read_results(Path(__file__).resolve().parents[1] / "ingest" / "training" / "reference_results.json")
    said = next(s for c, s in xv.claim_sentences(results) if c.figure == "spike_rate")
    mechanism_a = [text for _, text in said if text.startswith(xv.mechanism_head("A") + ":")]
    assert len(mechanism_a) == 1
    text = mechanism_a[0]
    assert "no significant difference" in text
    assert "the paired difference's interval includes 0" in text
    assert "paired difference -25 pts [-62, +0]" in text


LEAD_HEADING = "Does the gradient SNR fall before a spike?"


def test_the_lead_time_table_of_the_results_is_shown_with_its_verdict(page_store: Store) -> None:
    from ingest.training.lead_time import lead_verdict

    rows = lead_time_rows()
    write_results(page_store.root, replace(crafted_results("A", "lead"), lead_time=tuple(rows)))
    at = open_page("scenarios").run()
    markdown, _ = _thesis(at)
    assert LEAD_HEADING in [s.value for s in at.subheader]
    assert lead_verdict(rows) in markdown
    shown = next(d.value for d in at.dataframe if "predictor" in d.value.columns)
    assert shown.equals(xv.lead_table(rows, 50))  # the middle horizon by default
    assert list(shown["spikes warned"]) == ["3 of 10", "5 of 10"]


def test_results_without_a_lead_time_table_show_the_shipped_one_and_name_it(page_store: Store) -> None:
    from ingest.training.lead_time import reference_lead_time

    write_results(page_store.root, crafted_results("A", "old"))
    at = open_page("scenarios").run()
    _, captions = _thesis(at)
    reference = reference_lead_time()
    assert any(c.startswith(reference["source"]) for c in captions)
    assert any("predictor" in d.value.columns for d in at.dataframe)


def lead_time_rows() -> list[dict]:
    def interval(v: float) -> dict:
        return {"estimate": v, "low": v / 2, "high": min(1.0, v * 1.5), "n": 10}

    rows = []
    for horizon in (10, 50, 200):
        for source, warned in (("snr", 3), ("grad_norm", 5)):
            rows.append(
                {
                    "horizon": horizon,
                    "predictor": "SNR fall >= 2" if source == "snr" else "grad_norm z >= 3",
                    "source": source,
                    "threshold": 2.0 if source == "snr" else 3.0,
                    "runs": 8,
                    "spikes": 10,
                    "warned": warned,
                    "alarms": 12,
                    "false_alarms": 6,
                    "precision": interval(0.5),
                    "recall": interval(warned / 10),
                    "median_lead": 20.0,
                }
            )
    return rows
