"""Folder imports (issue #20 item 13): the logs among a folder's files are read, a config is the run's
config, the rest is listed as skipped with why; logs of two formats are combined without losing rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ingest.errors import StabScopeError
from ingest.importing.import_inputs import read_inputs
from ingest.importing.importer import import_logs
from ingest.services.run_analyses import open_analysed_store

REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"


def _real(name: str) -> Path:
    folder = REAL_LOGS / name
    if not folder.is_dir():
        pytest.skip(f"../shared absent: the real public log folder {name} is not on this machine")
    return folder


def test_lightning_folder_reads_the_log_takes_the_config_and_skips_provenance(tmp_path: Path) -> None:
    folder = _real("lightning_csv_slm_124m")
    store = open_analysed_store(tmp_path / "store")
    [res] = import_logs(store, [folder], run="slm")
    assert res["format"] == "lightning_csv" and res["logs"] == ["metrics.csv"]
    assert res["config"] == "hparams.yaml"
    assert res["skipped_files"] == [{"file": "PROVENANCE.txt", "why": "documentation, not a training log"}]
    meta = store.run_info("slm").meta
    assert meta["config_filename"] == "hparams.yaml" and "d_model: 768" in meta["config_text"]
    # 2,824 epoch cells: an axis, no rows (docs/diagnosis.md, "Import: settings and counters")
    assert res["rows"] == 5698 and res["steps"] == [49, 140739]


@pytest.mark.parametrize(
    ("name", "fmt", "log"),
    [
        ("mng_llmc_gpt2_124m", "llmc_main", "main.log"),
        ("torchtitan_qwen3_14b_run217", "torchtitan", "run.log"),
        ("megatron_mixtral8x7b_h100", "megatron_golden", "golden_values_dev_dgx_h100.json"),
        # its PROVENANCE.txt quotes log lines: documentation all the same, never more log
        ("bigscience_megds_perf_log", "megatron_deepspeed", "meg_ds_3d_gpt2_perf_n16-ds-off.out"),
    ],
)
def test_a_log_beside_its_provenance_imports(name: str, fmt: str, log: str) -> None:
    read = read_inputs([_real(name)])
    assert read.parsed.format == fmt
    assert read.summary()["logs"] == [log]
    assert read.inputs.skipped == [("PROVENANCE.txt", "documentation, not a training log")]


def test_the_same_run_in_two_formats_is_kept_once() -> None:
    # PROVENANCE: trainer_log.jsonl and trainer_state.json log the same 1,742 losses (steps 5..8710)
    read = read_inputs([_real("llamafactory_luojiu7b_cpt")])
    assert read.parsed.format == "llamafactory+hf_trainer_state"
    steps, values = read.parsed.series("loss")
    assert steps.size == 1742 and steps[0] == 5 and steps[-1] == 8710
    assert values[0] == pytest.approx(1.7484)
    assert any(n.startswith("loss: trainer_state.json repeats trainer_log.jsonl at 1742 steps") for n in read.notes)
    assert "elapsed_time_s" in read.parsed.metrics  # what only one of them logs is kept too


def test_logs_that_disagree_are_both_kept_and_named(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("".join(f'{{"step": {s}, "loss": {4 - s / 10}}}\n' for s in range(1, 6)))
    (tmp_path / "b.log").write_text("".join(f"s:{s} trl:{3 - s / 10}\n" for s in range(4, 8)))
    read = read_inputs([tmp_path])
    assert read.parsed.series("loss")[0].tolist() == [1, 2, 3, 4, 5]
    steps, values = read.parsed.series("b/loss")
    assert steps.tolist() == [4, 5, 6, 7]
    np.testing.assert_allclose(values, [2.6, 2.5, 2.4, 2.3])
    [note] = read.notes
    assert note == "loss: b.log and a.jsonl disagree at 2 steps (4, 5); both kept, b.log's as b/loss"


def test_a_folder_without_a_log_names_each_file_and_why(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# my run\n")
    (tmp_path / "notes.txt").write_text("shopping list\n")
    (tmp_path / "config.yaml").write_text("train_iters: 1000\nlr: 0.001\n")
    with pytest.raises(StabScopeError) as err:
        read_inputs([tmp_path])
    message = str(err.value)
    assert message.startswith("no training log among the inputs (config.yaml: a run config, not a log; ")
    assert "README.md: documentation, not a training log" in message
    assert "notes.txt: not a training log (its first line 'shopping list' is no known log format)" in message


def test_the_keras_folder_lists_what_it_skipped(tmp_path: Path) -> None:
    read = read_inputs([_real("tfevents_keras_mnist_toy")])
    assert read.parsed.table.num_rows == 60 and read.parsed.events == []
    assert [p.split("/")[0] for p in read.summary()["logs"]] == ["train", "validation"]
    assert read.inputs.skipped == [("PROVENANCE.txt", "documentation, not a training log")]


def test_a_file_given_twice_is_read_once(tmp_path: Path) -> None:
    log = tmp_path / "a" / "train.jsonl"
    log.parent.mkdir()
    log.write_text("".join(f'{{"step": {s}, "loss": {4 - s / 10}}}\n' for s in range(1, 6)))
    copy = tmp_path / "b" / "train.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(log.read_bytes())
    read = read_inputs([log, copy])
    assert read.parsed.series("loss")[0].tolist() == [1, 2, 3, 4, 5]
    assert read.parsed.events == []  # its steps "repeating" in the copy are no restart
    assert read.inputs.skipped == [("b/train.jsonl", "a copy of a/train.jsonl")]


def test_a_checkpoint_folder_reads_the_last_trainer_state(tmp_path: Path) -> None:
    real = _real("hf_trainer_state_tinyllama_sft") / "trainer_state.json"
    state = json.loads(real.read_text())
    early = dict(state, log_history=[e for e in state["log_history"] if e.get("step", 0) <= 200])
    (tmp_path / "checkpoint-200").mkdir()
    (tmp_path / "checkpoint-200" / "trainer_state.json").write_text(json.dumps(early))
    (tmp_path / "checkpoint-2800").mkdir()
    (tmp_path / "checkpoint-2800" / "trainer_state.json").write_bytes(real.read_bytes())
    (tmp_path / "checkpoint-2800" / "optimizer.pt").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "checkpoint-2800" / "tokenizer.json").write_text('{"version": "1.0", "model": {}}')
    (tmp_path / "checkpoint-2800" / "config.json").write_text('{"model_type": "llama", "hidden_size": 2048}')
    read = read_inputs([tmp_path])
    assert read.parsed.format == "hf_trainer_state"
    assert read.parsed.series("loss")[0].size == 186  # the last checkpoint's whole history, once
    assert read.inputs.config is not None and read.inputs.config.name == "config.json"
    assert dict(read.inputs.skipped) == {
        "checkpoint-200/trainer_state.json": "an earlier trainer_state.json: "
        "checkpoint-2800/trainer_state.json is read",
        "checkpoint-2800/optimizer.pt": "not a training log (binary, no known format)",
        "checkpoint-2800/tokenizer.json": "not a training log (its first line "
        + repr('{"version": "1.0", "model": {}}')
        + " is no known log format)",
    }


def test_two_trainer_states_that_disagree_are_both_kept(tmp_path: Path) -> None:
    real = _real("hf_trainer_state_tinyllama_sft") / "trainer_state.json"
    state = json.loads(real.read_text())
    other = json.loads(real.read_text())
    for entry in other["log_history"]:
        if entry.get("step") == 15 and "loss" in entry:
            entry["loss"] = 9.5  # another run's first logged loss (the real one is 2.0762)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "trainer_state.json").write_text(json.dumps(state))
    (tmp_path / "b" / "trainer_state.json").write_text(json.dumps(other))
    read = read_inputs([tmp_path / "a" / "trainer_state.json", tmp_path / "b" / "trainer_state.json"])
    assert read.parsed.format == "hf_trainer_state"
    assert read.parsed.series("loss")[1][0] == pytest.approx(2.0762)
    steps, values = read.parsed.series("b/trainer_state/loss")
    assert steps.size == 186 and values[0] == 9.5  # the second file's series, whole
    assert (
        "loss: b/trainer_state.json and a/trainer_state.json disagree at 1 steps (15); "
        "both kept, b/trainer_state.json's as b/trainer_state/loss"
    ) in read.notes
    repeated = "val_loss: b/trainer_state.json repeats a/trainer_state.json at 14 steps"
    assert any(n.startswith(repeated) for n in read.notes)


def test_a_chosen_format_reads_the_logs_not_the_readme(tmp_path: Path) -> None:
    log = tmp_path / "train.txt"
    log.write_text("".join(f"s:{s} trl:{3 - s / 10}\n" for s in range(1, 5)))
    readme = tmp_path / "README.md"
    readme.write_text("s:99 trl:0.1\n")  # quotes a log line: still documentation
    config = tmp_path / "config.yaml"
    config.write_text("train_iters: 1000\n")
    read = read_inputs([log, readme, config], fmt="llmc_main")
    assert read.parsed.series("loss")[0].tolist() == [1, 2, 3, 4]
    assert read.inputs.skipped == [("README.md", "documentation, not a training log")]
    assert read.parsed.meta["config_filename"] == "config.yaml"


def test_an_unreadable_log_beside_a_readable_one_is_listed(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text("".join(f'{{"step": {s}, "loss": {4 - s / 10}}}\n' for s in range(1, 4)))
    (tmp_path / "trainer_state.json").write_text('{"log_history": [{"step": 1, "loss": 2.0}')  # cut short
    read = read_inputs([tmp_path])
    assert read.parsed.series("loss")[0].tolist() == [1, 2, 3]
    [(name, why)] = read.inputs.skipped
    assert name == "trainer_state.json" and why.startswith("unreadable: ") and "JSON" in why


def test_a_provenance_file_given_first_does_not_name_the_run(tmp_path: Path) -> None:
    """``stabscope import folder/*`` lists PROVENANCE.txt before the log: the run is named by the log."""
    (tmp_path / "PROVENANCE.txt").write_text("repository: example/repo\npath: train.jsonl\n")
    log = tmp_path / "my-run.jsonl"
    log.write_text("".join(f'{{"step": {s}, "loss": {4 - s / 10}}}\n' for s in range(1, 30)))
    store = open_analysed_store(tmp_path / "store")
    [res] = import_logs(store, [tmp_path / "PROVENANCE.txt", log])
    assert res["run"] == "my-run"
    assert res["skipped_files"] == [{"file": "PROVENANCE.txt", "why": "documentation, not a training log"}]
    with pytest.raises(StabScopeError, match="run name"):
        import_logs(store, [log], run="../escape")


def test_a_log_only_the_generic_reader_reads_imports_beside_a_readme(tmp_path: Path) -> None:
    """See docs/diagnosis.md, "Import: settings and counters": a console no format recognises but the generic reader
    reads (``Epoch [E/N], Train Loss:``) was read when given alone and refused as "not a training log" when given with a
    README or PROVENANCE."""
    folder = tmp_path / "run"
    folder.mkdir()
    lines = ["Data loaded and split"]
    lines += [f"Epoch [{e}/40], Train Loss: {2.0 / e:.4f}, Validation Loss: {2.2 / e:.4f}" for e in range(1, 41)]
    (folder / "out.log").write_text("\n".join(lines) + "\n")
    (folder / "PROVENANCE.txt").write_text("repository: example/painn\npath: out.log\n")
    read = read_inputs([folder / "PROVENANCE.txt", folder / "out.log"])
    assert read.parsed.format == "generic"
    assert read.summary()["logs"] == ["out.log"]
    assert read.inputs.skipped == [("PROVENANCE.txt", "documentation, not a training log")]
    steps, values = read.parsed.series("loss")
    assert steps.tolist() == list(range(1, 41)) and values[0] == 2.0
