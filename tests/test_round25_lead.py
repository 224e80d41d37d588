"""Round 25, lead: the import report of a file whose reader derives the run's loss from its columns (a YOLO
``results.csv``'s loss parts) counts each row once, and the CLI's summary names the unit the report counts in
(issue #31: "the report's counts add up to the file's line count")."""

from pathlib import Path

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
