"""Several runs in one wide table, each column named ``<run label> - <metric>`` with ``__MIN``/``__MAX``
band companions, are read by the fallback as one run per label (issue #31; docs/diagnosis.md, "Import: metrics files").
Tables of that shape, written here."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import FALLBACK_READERS, read_log
from ingest.formats.labelled_runs import run_labels


def _export(path: Path, labels: list[str], lengths: list[int]) -> Path:
    header = ["Step"] + [f"{lab} - train/loss{band}" for lab in labels for band in ("", "__MIN", "__MAX")]
    rows = [",".join(header)]
    for step in range(max(lengths)):
        cells = [str(step)]
        for i, n in enumerate(lengths):
            value = f"{3.0 + i - 0.02 * step:.4f}" if step < n else ""
            cells += [value, value, value]
        rows.append(",".join(cells))
    path.write_text("\n".join(rows) + "\n")
    return path


def test_each_label_is_a_run(tmp_path: Path) -> None:
    path = _export(tmp_path / "export.csv", ["alpha-relu", "beta-gelu", "gamma"], [40, 25, 60])
    parsed = read_log([path], reader_set=FALLBACK_READERS)
    runs = [parsed, *parsed.segments]
    assert [r.meta["run_label"] for r in runs] == ["alpha-relu", "beta-gelu", "gamma"]
    assert [r.step_range for r in runs] == [(0, 39), (0, 24), (0, 59)]
    assert all(r.metrics == ["loss"] for r in runs)


def test_one_label_names_the_run(tmp_path: Path) -> None:
    parsed = read_log([_export(tmp_path / "export.csv", ["solo"], [30])], reader_set=FALLBACK_READERS)
    assert parsed.metrics == ["loss"] and not parsed.segments


def test_a_lone_dashed_name_among_plain_metrics_is_a_name() -> None:
    assert run_labels(["step", "loss", "train - val gap"], ["step"]) == []
    assert run_labels(["step", "a - loss", "b - acc"], ["step"]) == []  # no metric shared: not runs
