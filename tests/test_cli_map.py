"""`stabscope import --map NAME=ROLE`: a metric the alias table does not know stored as a canonical role,
remembered with the run (meta ``metric_map``) and applied again to later imports into it; an unknown
role, a name the log lacks or a role the log already has is refused (exit 2, one paragraph listing the
log's metric names) before anything is written (#21 item 3)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ingest.cli import main
from ingest.errors import EXIT_ERROR
from ingest.services.run_analyses import open_analysed_store

FIRST = "step,my_objective,learning_rate,tok_acc\n1,2.5,0.001,0.1\n2,2.25,0.001,0.2\n3,2.0,0.001,0.3\n"
LATER = "step,my_objective,learning_rate,tok_acc\n4,1.75,0.001,0.4\n5,1.5,0.001,0.5\n"


def _import(store: Path, path: Path, *extra: str) -> int:
    return main(["import", str(path), "--run", "r", "--store", str(store), *extra])


def test_map_round_trip_and_later_imports(tmp_path: Path) -> None:
    first, later = tmp_path / "first.csv", tmp_path / "later.csv"
    first.write_text(FIRST)
    later.write_text(LATER)
    store = tmp_path / "store"
    assert _import(store, first, "--map", "my_objective=loss") == 0
    s = open_analysed_store(store)
    assert s.run_info("r").meta["metric_map"] == {"my_objective": "loss"}
    assert s.read_series("r", "loss").values.tolist() == [2.5, 2.25, 2.0]
    assert "my_objective" not in s.run_info("r").metrics
    # the continuation says nothing: the run remembers (another file into the run: --append says so)
    assert _import(store, later) == 2
    assert _import(store, later, "--append") == 0
    loss = s.read_series("r", "loss")
    assert loss.steps.tolist() == [1, 2, 3, 4, 5] and loss.values.tolist() == [2.5, 2.25, 2.0, 1.75, 1.5]
    assert "my_objective" not in s.run_info("r").metrics
    # a re-import of the first file replaces its steps with the same values
    assert _import(store, first) == 0
    np.testing.assert_array_equal(s.read_series("r", "loss").values, [2.5, 2.25, 2.0, 1.75, 1.5])
    assert s.run_info("r").meta["metric_map"] == {"my_objective": "loss"}


def test_a_second_map_adds_to_the_remembered_one(tmp_path: Path) -> None:
    first, later = tmp_path / "first.csv", tmp_path / "later.csv"
    first.write_text(FIRST)
    later.write_text(LATER)
    store = tmp_path / "store"
    assert _import(store, first, "--map", "my_objective=loss") == 0
    assert _import(store, later, "--map", "tok_acc=val_loss", "--append") == 0
    s = open_analysed_store(store)
    assert s.run_info("r").meta["metric_map"] == {"my_objective": "loss", "tok_acc": "val_loss"}
    assert s.read_series("r", "loss").values.tolist() == [2.5, 2.25, 2.0, 1.75, 1.5]
    assert s.read_series("r", "val_loss").values.tolist() == [0.4, 0.5]


def test_names_as_the_user_types_them(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("step,my objective (nats),lr\n1,3.0,0.1\n2,2.0,0.1\n")
    store = tmp_path / "store"
    # the log keeps it as my_objective_nats: the name as typed in the file is found too
    assert _import(store, path, "--map", "my objective (nats)=loss") == 0
    assert open_analysed_store(store).read_series("r", "loss").values.tolist() == [3.0, 2.0]


@pytest.mark.parametrize(
    ("pair", "says"),
    [
        ("my_objective=lossy", "'lossy' is not a metric role (roles: loss, val_loss, lr"),
        ("nope=loss", "the log has no metric 'nope'"),
        ("my_objective=lr", "the log already has lr"),
        ("my_objective", "is not NAME=ROLE"),
    ],
)
def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str], pair: str, says: str) -> None:
    path = tmp_path / "a.csv"
    path.write_text(FIRST)
    store = tmp_path / "store"
    capsys.readouterr()
    assert _import(store, path, "--map", pair) == EXIT_ERROR
    err = capsys.readouterr().err
    assert says in err
    assert err.count("\n") == 1  # one paragraph
    if "NAME=ROLE" not in says:
        assert "The log's metrics: lr, my_objective, tok_acc." in err  # learning_rate is lr by the alias table
    assert open_analysed_store(store).list_runs() == []  # nothing written


def test_two_names_for_one_role_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.csv"
    path.write_text(FIRST)
    capsys.readouterr()
    args = ["--map", "my_objective=loss", "--map", "tok_acc=loss"]
    assert _import(tmp_path / "store", path, *args) == EXIT_ERROR
    assert "my_objective and tok_acc cannot both be loss" in capsys.readouterr().err


def test_wandb_companions_are_not_stored_beside_the_mapped_metric(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text("Step,run - objective,run - objective__MIN,run - objective__MAX\n1,2.0,1.5,2.5\n2,1.0,0.5,1.5\n")
    store = tmp_path / "store"
    assert _import(store, path, "--map", "objective=loss") == 0
    s = open_analysed_store(store)
    assert s.read_series("r", "loss").values.tolist() == [2.0, 1.0]
    # __MIN/__MAX are the range of the points W&B bucketed into one, not metrics (docs/diagnosis.md, "Import: metrics
    # files")
    assert not {"loss__min", "loss__max", "objective__min"} & set(s.run_view("r").series)


def test_another_file_of_the_same_name_is_not_merged_into_a_run_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``import job1/train.csv`` then ``import job2/train.csv`` both went into run ``train``, the second
    overwriting the first's steps without a word (#33 item 7). The second is refused, naming both files
    and the three ways on; --append and --replace say which the user means; the same file again updates."""
    (tmp_path / "job1").mkdir()
    (tmp_path / "job2").mkdir()
    job1, job2 = tmp_path / "job1" / "train.csv", tmp_path / "job2" / "train.csv"
    job1.write_text("step,loss\n1,2.0\n2,1.9\n")
    job2.write_text("step,loss\n2,3.0\n3,2.8\n")
    store = tmp_path / "store"

    def loss() -> list[tuple[int, float]]:
        series = open_analysed_store(store).read_series("train", "loss")
        return list(zip(series.steps.tolist(), series.values.tolist(), strict=True))

    def imported(path: Path, *extra: str) -> int:
        return main(["import", str(path), "--store", str(store), *extra])

    assert imported(job1) == 0 and loss() == [(1, 2.0), (2, 1.9)]
    capsys.readouterr()
    assert imported(job2) == 2
    error = capsys.readouterr().err
    assert str(job1) in error and str(job2) in error and "--append" in error and "--replace" in error
    assert loss() == [(1, 2.0), (2, 1.9)]  # nothing written
    assert imported(job1) == 0  # the same log again: an update
    assert imported(job2, "--append") == 0 and loss() == [(1, 2.0), (2, 3.0), (3, 2.8)]
    assert imported(job1) == 0  # either of the run's own files may be read again
    assert imported(job2, "--replace") == 0 and loss() == [(2, 3.0), (3, 2.8)]
