"""StabScope on a held-out corpus of real public training logs, against golden answers written blind
(issues #31 and #32; ``tests/corpus/golden/*.json``, how they were written: ``tests/corpus/README.md``).

``python -m bench.corpus_eval --corpus DIR [--json]`` imports each log of ``DIR/<name>/`` into a
temporary store as ``stabscope import`` does (the analyses run on each import), and compares:

- **import**: runs (segments) found against the golden runs; rollback events where the log has no
  resume from a checkpoint; records of the run's main metric within
  1 %; canonical metrics present or missing; junk metrics (a stored name that none of the log's field
  names explains, or one the golden file says must not be a metric); first and last values within
  rounding; a refusal where the log holds a run.
- **incidents** (spike incidents, the overfitting/throughput findings aside; an incident whose
  ``severity`` is ``blip`` is outside the default view): required ones found or missed, incidents
  matching no golden incident (invented), incidents inside a span that must not be flagged, and the
  incidents shown on healthy runs.
- **statements**: phrases the golden file says must not be said, looked for in the run status and
  every text of the run's incidents; and every statement judged against the golden ``facts``
  (``bench.statement_eval``).
- **baselines**: llm.c's, OLMo-core's and Megatron-LM's spike rules on each stored run's series, scored
  as StabScope's incidents are, with the samples each required incident has before it.

``--fallback-only`` imports each log with only the readers a layout nobody wrote a reader for still
meets (``ingest.formats.FALLBACK_READERS``: the generic reader and the metrics-file readers keyed on no
trainer): the measure of that fallback (docs/diagnosis.md, "Import: the generic reader").

Totals for the whole corpus, the held-out logs, the logs tuned on and each golden ``batch``
(``bench.corpus_scores``).

The logs are not in the repository (their licences vary): each folder holds the file the golden
``provenance`` names, checked by its sha256. docs/diagnosis.md ("Current figures on the corpus") quotes the table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

import numpy as np

from bench.corpus_scores import (
    LogScore,
    batch_label,
    details,
    detector_table,
    split_table,
    split_totals,
    statements_tables,
    table,
    unjudged,
)
from bench.statement_eval import RunSaid, judge_log, judged_json, missed_findings
from stab_core.baselines import BASELINES, baseline_incidents
from stab_core.metrics import CANONICAL_METRICS, POLICY_LOSSES

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "golden"
REQUIRED_KEYS = ("name", "provenance", "format_hint", "import", "incidents", "statements")
RECORDS_TOLERANCE = 0.01
"""Records of a run's main metric may differ from the golden count by this fraction."""
VALUE_TOLERANCE = 5e-4
"""Relative difference at which a first/last value no longer counts as the same number rounded."""
FINDINGS = ("overfitting", "throughput_loss")
"""``spikes --json`` entries that are findings beside the incidents, not incidents."""


def load_goldens(folder: Path = GOLDEN) -> list[dict[str, Any]]:
    """Every golden file of ``folder``, sorted by name."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def golden_problems(golden: Mapping[str, Any]) -> list[str]:
    """What a golden file lacks (the keys this scorer reads); empty when it is complete."""
    problems = [f"no {key!r}" for key in REQUIRED_KEYS if key not in golden]
    if problems:
        return problems
    for key in ("repo", "commit", "path", "sha256", "file"):
        if not golden["provenance"].get(key):
            problems.append(f"provenance has no {key!r}")
    if not re.fullmatch(r"[0-9a-f]{40}", str(golden["provenance"].get("commit", ""))):
        problems.append("provenance commit is not 40 hex digits")
    for i, run in enumerate(golden["import"].get("runs", [])):
        for key in ("steps", "records_metric", "records", "metrics", "first", "last"):
            if key not in run:
                problems.append(f"run {i} has no {key!r}")
    incidents = golden["incidents"]
    for key in ("must_find", "must_not_flag", "healthy"):
        if key not in incidents:
            problems.append(f"incidents has no {key!r}")
    if incidents.get("healthy") and incidents.get("must_find"):
        problems.append("a healthy run has required incidents")
    for inc in incidents.get("must_find", []) + incidents.get("may_find", []):
        if not {"step", "metric", "tolerance_steps"} <= set(inc):
            problems.append(f"incident {inc} lacks step, metric or tolerance_steps")
    if "must_not_say" not in golden["statements"]:
        problems.append("statements has no 'must_not_say'")
    overfitting = (golden.get("facts") or {}).get("overfitting")
    if isinstance(overfitting, Mapping):  # the keys statement_eval judges an overfitting finding with
        missing = [k for k in OVERFITTING_FACT_KEYS if not isinstance(overfitting.get(k), (int, float))]
        problems += [f"facts.overfitting has no number {k!r}" for k in missing]
    return problems


OVERFITTING_FACT_KEYS: Final = ("best_val_step", "val_rising_from", "val_rising_to")
"""What a golden's ``facts.overfitting`` gives (Facts v2): the best evaluation's step and the span it rises over."""


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _canonical(metric: str) -> str:
    """The name StabScope stores a golden's metric under by the shared naming rules
    (:func:`ingest.formats.aliases.canonical_name`): a golden that spells the tokens-per-second rate
    ``tokens_per_s`` names the series stored as ``throughput_tok_s``, its ``num_tokens`` the ``tokens`` count."""
    from ingest.formats.aliases import canonical_name

    return canonical_name(metric)[0]


def _series_for(series: Mapping[str, Any], metric: str) -> Any:
    """The stored series of ``metric``: its name, else its canonical name (:func:`_canonical`), else
    the first whose name contains it."""
    if metric in series:
        return series[metric]
    if _canonical(metric) in series:
        return series[_canonical(metric)]
    for name in sorted(series):
        if _norm(metric) in _norm(name):
            return series[name]
    return None


def _close(a: float, b: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(a, b, rel_tol=VALUE_TOLERANCE, abs_tol=1e-12)


_PER_SECOND = re.compile(r"(?:_per)?_sec(?:ond)?s?(?=_|$)")


def _unit_spelled(name: str) -> str:
    """A normalised name with 'per second' spelled one way (``samples/sec``, ``samples per second`` and
    StabScope's ``samples_per_s`` name one field: the stored name abbreviates the unit the log spells)."""
    return _PER_SECOND.sub("_per_s", name)


_UNIT_SUFFIXES: Final = ("s", "tok_s", "gb", "c", "w")
"""The unit a canonical name ends in (``step_time_s``, ``throughput_tok_s``, ``gpu_mem_gb``)."""


def _unit_named(metric: str, series: Mapping[str, Any]) -> bool:
    """Whether a stored canonical metric is ``metric`` with its unit added: a golden's ``throughput`` is the canonical
    ``throughput_tok_s`` (the golden lists the canonical metrics an import stores; the alias table leaves a bare
    ``throughput`` field unmapped, Megatron's being TFLOP/s, so the name alone does not reach it)."""
    return any(f"{metric}_{unit}" in CANONICAL_METRICS and f"{metric}_{unit}" in series for unit in _UNIT_SUFFIXES)


def _throughput_named(metric: str, series: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Whether a golden's ``throughput`` is stored under the field its ``median_throughput`` names: a run that logs
    samples per second (Megatron's ``samples/sec``) has a throughput, stored as ``samples_per_s``; tokens per second
    would need the sequence length, which the log line does not carry."""
    named = want.get("median_throughput")
    if metric != "throughput" or not isinstance(named, Mapping):
        return False
    stored = {_unit_spelled(_norm(name)) for name in series}
    return any(_unit_spelled(_norm(str(field))) in stored for field in named)


PRINTED_PERCENT: Final = frozenset({"mfu"})
"""Canonical metrics stored as a fraction (0-1) that consoles print as a percentage with the ``%`` after the number,
not in the field's name (nanoGPT's ``mfu 21.00%``, llm.c's ``21.0% bf16 MFU``, torchtitan's ``mfu: 39.51%``)."""


def not_measured(metric: str, value: float) -> bool:
    """Whether a golden's first/last ``value`` is a placeholder the log prints before it has measured
    ``metric``, which the import stores no record of (so there is no stored value to compare): a negative MFU
    (nanoGPT's and llm.c's ``-100.00%`` over their first iterations; a share of the peak FLOPs is never below 0)."""
    return metric in PRINTED_PERCENT and value < 0


def _in_stored_unit(metric: str, value: float, golden_import: Mapping[str, Any]) -> list[float]:
    """A golden's first/last ``value`` of ``metric`` as written and in StabScope's canonical unit: the golden writes
    the value the log prints, in the unit the log's field name states (``step_time_ms: 308.9``, or ``step_time:
    308.9`` beside a known field ``step_time_ms``), while the stored series is in the canonical unit (seconds)."""
    from ingest.formats.aliases import canonical_name, to_canonical_unit

    if metric in PRINTED_PERCENT:
        # the log prints this one as a percentage after the number (nanoGPT's `mfu 21.00%`), which the golden
        # writes as printed; the canonical unit is a fraction, and a fraction is written as itself
        return [value, float(to_canonical_unit(metric, "%", np.array([value]))[1][0])]
    if metric in CANONICAL_METRICS:
        return [value]  # the canonical name is in the canonical unit
    canonical, unit = canonical_name(metric)
    # a name that states its unit is in that unit; a bare one (``step_time``) in a unit the log's field names state
    units = (
        {unit}
        if unit
        else {
            u for field in golden_import.get("known_fields", []) for c, u in [canonical_name(field)] if c == canonical
        }
    )
    out = [value]
    for u in sorted(x for x in units if x):
        out.append(float(to_canonical_unit(canonical, u, np.array([value]))[1][0]))
    return out


def junk_metrics(stored: Sequence[str], golden_import: Mapping[str, Any], run: Mapping[str, Any]) -> list[str]:
    """Stored metric names that are junk: named by the golden file as never a metric, or explained by
    none of the log's field names, canonical metrics or trainer-specific names (the unit 'per second'
    compared however it is spelled)."""
    explain = [_unit_spelled(_norm(t)) for t in (*golden_import.get("known_fields", []), *run.get("metrics_like", []))]
    banned = {_norm(t) for t in golden_import.get("must_not_be_metrics", [])}
    junk = []
    for name in stored:
        n = _norm(name)
        # a canonical metric (or its max/min companion) is a role the reader gave a field, not a new name
        canonical = re.sub(r"_(max|min)(?=_|$)", "", n) in CANONICAL_METRICS
        # a name the golden run requires is never banned by a prefix ('step' bans step_*, not step_time_s):
        # required by its metrics, or a canonical metric whose quantity its records_by_metric counts
        # (``step_time``: the canonical ``step_time_s``, its unit cut)
        by_metric = run.get("records_by_metric") or {}
        counted = n in by_metric or n.removesuffix("_s") in by_metric
        required = name in run.get("metrics", []) or (canonical and counted)
        if n in banned or (not required and any(n.startswith(b + "_") for b in banned if b not in CANONICAL_METRICS)):
            junk.append(f"{name} (must not be a metric)")
        elif (
            name not in run.get("metrics", [])
            and not canonical
            and not any(t and t in _unit_spelled(n) for t in explain)
        ):
            junk.append(name)
    return junk


def score_import(result: LogScore, golden: Mapping[str, Any], stored_runs: Sequence[Mapping[str, Any]]) -> None:
    """Compare the stored runs (each ``{"run", "series": {metric: (steps, values)}, "events": [kind, ...]}``)
    with the golden runs."""
    expected = list(golden["import"]["runs"])
    result.runs_expected, result.runs_found = len(expected), len(stored_runs)
    # a golden run that resumes from a checkpoint says so ("rollbacks": n); every other rollback is invented
    rollbacks = sum(1 for run in stored_runs for kind in run.get("events", ()) if kind == "rollback")
    if rollbacks > sum(int(run.get("rollbacks", 0)) for run in expected):
        result.fault("rollbacks", f"{rollbacks} rollback events stored, the log has no resume from a checkpoint")
    if not expected:  # a log without training metrics: a refusal or runs without a loss are right
        for run in stored_runs:
            for name in run["series"]:
                if _norm(name) in {_norm(t) for t in golden["import"].get("must_not_be_metrics", [])}:
                    result.fault("junk", f"{run['run']}: {name} (must not be a metric)")
        return
    if len(stored_runs) != len(expected):
        result.fault("runs", f"{len(stored_runs)} runs stored, {len(expected)} in the log")
    for want, got in zip(expected, stored_runs, strict=False):
        series = got["series"]
        for metric in want["metrics"]:
            if (
                metric not in series
                and _canonical(metric) not in series
                and not _unit_named(metric, series)
                and not _throughput_named(metric, series, want)
            ):
                result.fault("missing", f"{metric}")
        for token in want.get("metrics_like", []):
            if _series_for({k: v for k, v in series.items() if k not in want["metrics"]}, token) is None:
                result.fault("missing", f"{token} (any name)")
        for junk in junk_metrics(sorted(series), golden["import"], want):
            result.fault("junk", junk)
        main = _series_for(series, want["records_metric"])
        if main is None:
            continue  # counted as missing above
        steps = main[0]
        if abs(len(steps) - want["records"]) > RECORDS_TOLERANCE * want["records"]:
            result.fault(
                "records", f"{want['records_metric']}: {len(steps)} records stored, {want['records']} in the log"
            )
        for label, index in (("first", 0), ("last", -1)):
            for metric, value in want[label].items():
                got_series = _series_for(series, metric)
                if value is None or got_series is None or len(got_series[1]) == 0 or not_measured(metric, value):
                    continue
                stored = float(got_series[1][index])
                if not any(_close(stored, v) for v in _in_stored_unit(metric, float(value), golden["import"])):
                    result.fault("values", f"{label} {metric}: stored {stored:.6g}, log {value:.6g}")


def _span(incident: Mapping[str, Any]) -> tuple[int, int]:
    start = int(incident.get("start", incident.get("peak", 0)))
    end = int(incident.get("until", incident.get("end", start)) or start)
    return start, max(start, end)


def _describe(incident: Mapping[str, Any]) -> str:
    metrics = incident.get("metrics") or [incident.get("metric", "?")]
    peak = incident.get("peak", incident.get("start"))
    return f"{incident.get('kind', 'spike')} {'+'.join(map(str, metrics))} at {peak}"


def default_view(incidents: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The incidents a user sees by default: not a finding (overfitting, throughput), not a blip."""
    return [i for i in incidents if i.get("kind") not in FINDINGS and i.get("severity") != "blip"]


def score_incidents(result: LogScore, golden: Mapping[str, Any], incidents: Sequence[Mapping[str, Any]]) -> None:
    """Found / missed / invented against ``must_find`` and ``may_find``; incidents in quiet spans."""
    spec = golden["incidents"]
    shown = default_view(incidents)
    result.reported = len(shown)
    result.healthy = bool(spec.get("healthy"))
    matched: set[int] = set()
    for truth, required in [(t, True) for t in spec.get("must_find", [])] + [
        (t, False) for t in spec.get("may_find", [])
    ]:
        step, tol = int(truth["step"]), int(truth["tolerance_steps"])
        hits = [i for i, inc in enumerate(shown) if _span(inc)[0] - tol <= step <= _span(inc)[1] + tol]
        matched.update(hits)
        if required:
            result.required += 1
            if hits:
                result.found += 1
            else:
                result.missed.append(f"{truth['metric']} at {step}: {truth.get('why', '')}")
    result.invented = [_describe(inc) for i, inc in enumerate(shown) if i not in matched]
    for lo, hi in spec.get("must_not_flag", []):
        for inc in shown:
            peak = int(inc.get("peak", _span(inc)[0]))
            if lo <= peak <= hi:
                result.quiet_flagged.append(f"{_describe(inc)} in quiet span {lo}-{hi}")


NOT_SAID: Final = frozenset({"question"})
"""Keys of an incident's JSON whose text is not a statement: the decision tree's questions ("Is the loss
or grad norm non-finite around the spike ...?") are asked of every incident and assert nothing."""


def _texts(value: Any) -> Iterator[str]:
    """The texts an incident's JSON asserts: not the tree's questions (:data:`NOT_SAID`), nor a claim or
    action check whose premise failed (``holds`` False: checked and not said, ``Claim.words`` is None; an
    action whose premise fails is kept in the JSON as evidence of what was not advised, docs/diagnosis.md, "Scorer")."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        if value.get("holds") is False:
            return
        for k, v in value.items():
            if k not in NOT_SAID:
                yield from _texts(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _texts(v)


def score_statements(result: LogScore, golden: Mapping[str, Any], said: Mapping[str, Sequence[str]]) -> None:
    """Each must-not-say phrase found (case-insensitive) in ``said`` {where: texts}, where a word starts
    with it: "NaN" is not said by "resonance", "diverge" is by "diverged"."""
    for phrase in golden["statements"].get("must_not_say", []):
        needle = re.compile(r"(?<![^\W_])" + re.escape(phrase), re.IGNORECASE)
        for where, texts in said.items():
            if any(needle.search(t) for t in texts):
                result.statements_broken.append(f"{phrase!r} in {where}")


def log_path(corpus: Path, golden: Mapping[str, Any]) -> Path:
    return corpus / str(golden["name"]) / str(golden["provenance"]["file"])


def run_name(golden: Mapping[str, Any]) -> str:
    return "c-" + re.sub(r"[^A-Za-z0-9.-]+", "-", str(golden["name"]))[:100]


PANEL_METRICS: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "val_loss", *POLICY_LOSSES),
    "grad_norm": ("grad_norm", "grad_norm_clipped"),
    "lr": ("lr",),
    "clip": ("clip_ratio", "clip_coef"),
}
"""The overview's panels (pages/overview.py PANELS) by the quantity each draws: a panel none of whose
metrics the run has says "not in this run"."""


def run_said(store: Any, name: str, status: str, spikes: Sequence[Mapping[str, Any]]) -> RunSaid:
    """What StabScope says about the stored run ``name``: ``spikes --json``'s entries (its incidents and
    findings), the status, the overview's "not in this run" panels, the Cost page's "logs no step time"
    and the analysis notes the CLI prints after the incidents."""
    from ingest.services.run_cost import run_cost_inputs, skipped_timing_lines
    from ingest.services.run_findings import finding_entries, stored_findings
    from ingest.store.report_meta import suspect_lines
    from stab_core.analysis import analysis_notes
    from stab_core.metrics import unread_line_naming

    info = store.run_info(name)
    analysis = info.meta.get("analysis") or {}
    have = set(info.metrics) | ({"clip_ratio"} if analysis.get("overall_clip_ratio") is not None else set())
    missing = [
        quantity
        for quantity, metrics in PANEL_METRICS.items()
        if not have & set(metrics) and unread_line_naming(quantity, suspect_lines(info.meta)) is None
    ]
    if run_cost_inputs(store, info).step_time_s is None and not skipped_timing_lines(info):
        # the Cost page says "logs no step time" only when the import skipped no line that may carry one
        missing.append("step_time")
    entries = [dict(s) for s in spikes] + finding_entries(stored_findings(store, info))
    return RunSaid(name, status, missing, analysis_notes(analysis), entries)


def judge_statements(result: LogScore, golden: Mapping[str, Any], runs: Sequence[RunSaid]) -> None:
    """Every statement said about the log's runs against the golden facts; skipped, with a note, for a
    golden file without ``facts``."""
    if "facts" not in golden:
        result.statements_note = "the golden file has no facts: statements not judged"
        return
    result.statements = judged_json(judge_log(golden, runs))
    result.findings_missed = missed_findings(golden, runs)


def evaluate_log(
    store: Any, corpus: Path, golden: Mapping[str, Any], reader_set: Collection[str] | None = None
) -> LogScore:
    """Import one corpus log into ``store`` with the built-in readers of ``reader_set`` (None: all)
    and score it."""
    from ingest.errors import ReaderFailed, StabScopeError
    from ingest.importing.importer import import_logs
    from ingest.services.run_status import run_status

    result = LogScore(str(golden["name"]), tuned_on=golden.get("tuned_on") is not False, batch=batch_label(golden))
    path = log_path(corpus, golden)
    if not path.is_file():
        result.error = f"{path}: missing (fetch {golden['provenance']['repo']}@{golden['provenance']['commit']})"
        return result
    if hashlib.sha256(path.read_bytes()).hexdigest() != golden["provenance"]["sha256"]:
        result.error = f"{path}: sha256 differs from the golden file's: not the log the answers were written for"
        return result
    try:
        reports = import_logs(store, [path], run=run_name(golden), reader_set=reader_set)
    except Exception as exc:  # a crash is scored as this log's fault, not the whole evaluation's
        refused = isinstance(exc, StabScopeError) and not isinstance(exc, ReaderFailed)
        result.refused = (str(exc) if refused else f"crashed: {type(exc).__name__}: {exc}").splitlines()[0][:200]
        if golden["import"]["runs"] or not refused:
            result.fault("refused" if refused else "crashed", result.refused)
        result.runs_expected = len(golden["import"]["runs"])
        score_incidents(result, golden, [])
        judge_statements(result, golden, [])  # nothing was said about a run; the facts' misses still count
        return result
    names = [reports[0]["run"]] + [s["run"] for s in reports[0].get("segments") or []]
    stored, incidents, said, runs_said = [], [], {}, []
    for name in names:
        view = store.run_view(name)
        series = {m: (s.steps, s.values) for m, s in view.series.items()}
        stored.append({"run": name, "series": series, "events": [e.kind for e in view.events]})
        spikes = store.spikes(name)
        incidents.extend(spikes)
        said[f"{name} status"] = [run_status(store, name)]
        said[f"{name} incidents"] = list(_texts(default_view(spikes)))
        runs_said.append(run_said(store, name, said[f"{name} status"][0], spikes))
    score_import(result, golden, stored)
    score_incidents(result, golden, incidents)
    score_statements(result, golden, said)
    judge_statements(result, golden, runs_said)
    result.baselines = baseline_scores(golden, stored)
    result.required_samples_before = [samples_before(stored, truth) for truth in golden["incidents"]["must_find"]]
    return result


def samples_before(stored: Sequence[Mapping[str, Any]], truth: Mapping[str, Any]) -> int:
    """The finite samples a baseline rule has seen before golden incident ``truth``: of the run whose
    loss or grad norm spans its step (within its tolerance), the most of either logged before the
    tolerance window opens. The 128-sample rules see nothing before that many."""
    step, tol = int(truth["step"]), int(truth["tolerance_steps"])
    most = 0
    for run in stored:
        for metric in ("loss", "grad_norm"):
            if metric not in run["series"]:
                continue
            steps, values = (np.asarray(a) for a in run["series"][metric])
            if steps.size and steps[0] - tol <= step <= steps[-1] + tol:
                most = max(most, int((np.isfinite(values) & (steps < step - tol)).sum()))
    return most


def baseline_scores(golden: Mapping[str, Any], stored: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Each baseline rule (``stab_core.baselines``) run on each stored run's series (``{"run", "series":
    {metric: (steps, values)}}``) apart, as its trainer would see that run, and the incidents of every run
    scored together as StabScope's are: required, found, invented, shown."""
    out = {}
    for label, (rule, metrics) in BASELINES.items():
        theirs = LogScore(str(golden["name"]))
        incidents = [
            incident
            for run in stored
            for incident in baseline_incidents(rule, metrics, {m: s for m, s in run["series"].items() if m in metrics})
        ]
        score_incidents(theirs, golden, incidents)
        out[label] = {
            "required": theirs.required,
            "found": theirs.found,
            "invented": len(theirs.invented),
            "shown": theirs.reported,
        }
    return out


def evaluate(
    corpus: Path, goldens: Sequence[Mapping[str, Any]], reader_set: Collection[str] | None = None
) -> list[LogScore]:
    """Every golden log of ``corpus`` imported into one temporary store (with the built-in readers of
    ``reader_set``; None: all) and scored."""
    from ingest.services.run_analyses import open_analysed_store

    with tempfile.TemporaryDirectory() as root:
        store = open_analysed_store(Path(root))
        return [evaluate_log(store, corpus, g, reader_set) for g in goldens]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.corpus_eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="folder holding one folder per corpus log")
    parser.add_argument("--json", action="store_true", help="per-log scores and totals as JSON")
    parser.add_argument(
        "--fallback-only",
        action="store_true",
        help="import with only the generic and format-agnostic metrics-file readers (ingest.formats.FALLBACK_READERS)",
    )
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(
            f"no corpus at {args.corpus}: give --corpus DIR (one folder per log, see tests/corpus/README.md)",
            file=sys.stderr,
        )
        return 2
    goldens = load_goldens()
    bad = {str(g.get("name")): golden_problems(g) for g in goldens if golden_problems(g)}
    if bad:
        print(f"golden files incomplete: {bad}", file=sys.stderr)
        return 2
    if args.fallback_only:
        from ingest.formats import FALLBACK_READERS

        scores = evaluate(args.corpus, goldens, FALLBACK_READERS)
    else:
        scores = evaluate(args.corpus, goldens)
    splits = split_totals(scores)
    if args.json:
        report = {"totals": splits["all"], "splits": splits, "logs": [asdict(s) for s in scores]}
        print(json.dumps(report, indent=2))
    else:
        print(table(scores))
        print()
        print(split_table(scores))
        print()
        brief = {which: {k: v for k, v in t.items() if k != "baselines"} for which, t in splits.items()}
        print(json.dumps(brief, indent=2))
        print()
        print(detector_table(scores))
        print()
        print(statements_tables(scores))
        print()
        print(details(scores))
        print()
        print("Unjudged statements (no fact bears on them; a human judges them):")
        print(unjudged(scores))
    return 0


if __name__ == "__main__":
    sys.exit(main())
