"""Round 25, lead: the import report of a file whose reader derives the run's loss from its columns (a YOLO
``results.csv``'s loss parts) counts each row once, and the CLI's summary names the unit the report counts in
(issue #31: "the report's counts add up to the file's line count")."""

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ingest.formats import read_log
from ingest.formats.accounting import import_report, summary_line
from ingest.importing.importer import report_fields

YOLO_HEADER = (
    "epoch,train/box_loss,train/cls_loss,train/dfl_loss,metrics/mAP_0.5,val/box_loss,val/cls_loss,val/dfl_loss"
)


def _yolo_csv(tmp_path: Path, rows: int) -> Path:
    path = tmp_path / "results.csv"
    body = "\n".join(
        f"{e},{1.2 - e / 100:.4f},{0.9 - e / 200:.4f},{1.1 - e / 300:.4f},{e / 100:.4f},1.3,1.0,1.2"
        for e in range(rows)
    )
    path.write_text(YOLO_HEADER + "\n" + body + "\n")
    return path


def test_a_derived_loss_does_not_count_its_rows_again(tmp_path: Path) -> None:
    parsed = read_log([_yolo_csv(tmp_path, 12)])
    assert "loss" in parsed.metrics  # the sum of the three training parts
    report = import_report(parsed)
    assert report is not None and report["unit"] == "records"
    assert report["lines_read"] == 12 and report["parsed"]["lines"] == 12  # was 24: the loss counted as new records


def test_the_summary_names_the_unit_of_the_json_fields(tmp_path: Path) -> None:
    report = import_report(read_log([_yolo_csv(tmp_path, 5)]))
    fields = report_fields(report)  # what `import --json` and the CLI's text print from
    assert fields["lines_unit"] == "records"
    assert summary_line(fields).startswith("5 records: 5 parsed")  # was '5 lines: ...' for a CSV's rows
    assert summary_line(report).startswith("5 records: 5 parsed")


def _event(start: int, recovery_step: int | None) -> Any:
    from stab_core.spikes import build_event

    steps = np.arange(10, dtype=np.int64)
    x = np.array([1.0] * 5 + [3.0, 3.0] + [1.0] * 3)
    return replace(build_event("loss", steps, x, 5, 6, 7, 1.0, 0.1), start=start, recovery_step=recovery_step)


def test_an_episode_back_before_the_incident_began_does_not_date_it() -> None:
    """A start-up overshoot (step 2, back at 4) grouped beside a loss NaN from step 20 to the end: the incident
    starts at 20 (r25c's excursion start took the earliest member, 2, and the NaN incident was judged as the
    overshoot); a finite burst whose highest sample is late still starts at its first step out, dips and all."""
    from stab_core.excursions import excursion_start

    nan, overshoot = replace(_event(20, None), nonfinite=True), _event(2, 4)
    assert excursion_start(nan, [nan, overshoot]) == 20
    assert excursion_start(replace(nan, nonfinite=False), [nan, overshoot]) == 2  # a finite burst's first step out
    peak, first_out = _event(5587, 5594), _event(5579, 5584)
    assert excursion_start(peak, [peak, first_out]) == 5579
