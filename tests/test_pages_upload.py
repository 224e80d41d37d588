"""Upload page (AppTest): a preview of what will be imported (format, metrics, steps, rejected lines), then
the import; size bound, unreadable input and a run config for the checklist."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store
from pages.parts import uploads
from tests.app_pages import open_in_app
from tests.conftest import open_page

REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"
CSV = b"step,loss,lr\n1,2.50,0.001\n2,2.25,0.002\n3,2.00,0.003\n"
JSONL = b'{"step": 1, "loss": 2.5}\nnot json\n{"step": 2, "loss": 2.25}\n{"step": 3, "loss": 2.0}\n'


@pytest.fixture
def empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setenv("STABSCOPE_STORE", str(tmp_path / "store"))
    return open_analysed_store(tmp_path / "store")


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_preview_then_import(empty_store: Store) -> None:
    at = open_page("upload").run()
    assert "Drop one or more log files" in at.info[0].value
    at.file_uploader(key="up_files").upload("../../my run.jsonl", JSONL, "application/json").run()
    assert not at.exception
    assert at.text_input(key="up_name").value == "my_run"  # the browser's path is never used
    m = _metrics(at)
    assert m["Format"] == "jsonl" and m["Rows"] == "3" and m["Steps"] == "1–3" and m["Rejected lines"] == "1"
    summary = at.dataframe[1].value.set_index("metric")
    assert summary.loc["loss", "rows"] == 3 and summary.loc["loss", "min"] == 2.0
    rejected = at.dataframe[2].value
    assert list(rejected["file"]) == ["my_run.jsonl"] and list(rejected["line"]) == [2]
    assert "not a JSON object" in rejected["reason"].iloc[0]
    assert empty_store.list_runs() == []  # nothing stored before the user commits
    at.button(key="up_import").click().run()
    assert "Imported 3 rows into run **my_run**" in at.success[0].value
    np.testing.assert_allclose(empty_store.read_series("my_run", "loss").values, [2.5, 2.25, 2.0])
    assert empty_store.run_info("my_run").rejected == 1


def test_real_hf_trainer_state(empty_store: Store) -> None:
    path = REAL_LOGS / "hf_trainer_state_tinyllama_sft" / "trainer_state.json"
    if not path.exists():
        pytest.skip("../shared absent: the real public logs are not on this machine")
    at = open_page("upload").run()
    at.file_uploader(key="up_files").upload(path.name, path.read_bytes(), "application/json").run()
    assert not at.exception
    assert str(at.selectbox(key="up_format").value).startswith("auto-detect (hf_trainer_state")
    assert _metrics(at)["Steps"] == "15–2,800"  # PROVENANCE: 186 train entries 15..2790, eval to 2800
    summary = at.dataframe[1].value.set_index("metric")
    assert summary.loc["loss", "rows"] == 186 and summary.loc["val_loss", "rows"] == 14
    at.text_input(key="up_name").input("tinyllama").run()
    at.button(key="up_import").click().run()
    loss = empty_store.read_series("tinyllama", "loss")
    assert loss.values[0] == pytest.approx(2.0762) and loss.steps[0] == 15


def test_oversized_and_unreadable_uploads_are_refused(empty_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", 50)
    at = open_in_app("upload", monkeypatch).run()
    at.file_uploader(key="up_files").upload("big.csv", CSV, "text/csv").run()
    assert "the limit is" in at.error[0].value and "stabscope import" in at.error[0].value
    assert not at.button  # nothing staged, nothing to import
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", 10**6)
    at = open_page("upload").run()
    at.file_uploader(key="up_files").upload("noise.bin", bytes(range(256)) * 8).run()
    assert not at.exception
    assert at.error and not at.button  # a clear message and nothing to import


def test_run_config_is_kept_for_the_checklist(empty_store: Store) -> None:
    at = open_page("upload").run()
    at.file_uploader(key="up_files").upload("run.csv", CSV, "text/csv").run()
    config = b"train_iters: 10000\nlr_warmup_iters: 500\nclip_grad: 1.0\nmin_lr: 3.0e-5\nlr: 3.0e-4\nbf16: true\n"
    at.file_uploader(key="up_config").upload("megatron.yaml", config, "text/yaml").run()
    assert not at.exception
    assert any("checklist keys mapped" in c.value for c in at.caption)
    at.button(key="up_import").click().run()
    meta = empty_store.run_info("run").meta
    assert meta["config_filename"] == "megatron.yaml" and "train_iters: 10000" in meta["config_text"]


def test_keras_train_and_validation_files_uploaded_together(empty_store: Store) -> None:
    folder = REAL_LOGS / "tfevents_keras_mnist_toy"
    files = sorted(folder.glob("*/events.out.tfevents.*"))
    if len(files) != 2:
        pytest.skip("../shared absent: the real Keras tfevents files are not on this machine")
    at = open_page("upload").run()
    uploader = at.file_uploader(key="up_files")
    for f in files:  # the browser sends the names only: train/ and validation/ are lost
        uploader.upload(f.name, f.read_bytes(), "application/octet-stream")
    at.run()
    assert not at.exception and not at.error
    m = _metrics(at)
    assert m["Format"] == "tensorboard" and m["Rows"] == "60" and m["Steps"] == "0–15,000"
    assert not any("events:" in c.value for c in at.caption)  # no rollback invented across the two files
    summary = at.dataframe[1].value.set_index("metric")
    assert summary.loc["loss", "rows"] == 10 and summary.loc["val_loss", "rows"] == 10  # #21 item 3
    at.text_input(key="up_name").input("keras").run()
    at.button(key="up_import").click().run()
    # PROVENANCE.txt: train epoch_loss 0.2974 -> 0.0319 over steps 0..9; validation's own 10 points
    train = empty_store.read_series("keras", "loss")
    val = empty_store.read_series("keras", "val_loss")
    assert list(train.steps) == list(range(10)) and list(val.steps) == list(range(10))
    assert train.values[0] == pytest.approx(0.2974, abs=1e-4) and train.values[-1] == pytest.approx(0.0319, abs=1e-4)
    assert val.values[0] == pytest.approx(0.1429, abs=1e-4)
    assert not [e for e in empty_store.events("keras") if e["kind"] == "rollback"]


def test_a_run_folder_upload_skips_what_is_not_a_log(empty_store: Store) -> None:
    folder = REAL_LOGS / "lightning_csv_slm_124m"
    if not folder.is_dir():
        pytest.skip("../shared absent: the real public logs are not on this machine")
    at = open_page("upload").run()
    uploader = at.file_uploader(key="up_files")
    for name in ("metrics.csv", "hparams.yaml", "PROVENANCE.txt"):
        uploader.upload(name, (folder / name).read_bytes(), "text/plain")
    at.run()
    assert not at.exception and not at.error
    assert _metrics(at)["Format"] == "lightning_csv"
    assert str(at.selectbox(key="up_format").value).startswith("auto-detect (lightning_csv")
    skipped = at.dataframe[-1].value  # after the preview and any rejected lines
    assert skipped.to_dict("records") == [{"file": "PROVENANCE.txt", "why": "documentation, not a training log"}]
    assert any("run config: hparams.yaml" in c.value for c in at.caption)
    at.button(key="up_import").click().run()
    assert empty_store.run_info(at.text_input(key="up_name").value).meta["config_filename"] == "hparams.yaml"


def test_an_unrecognised_upload_speaks_of_the_format_box(empty_store: Store) -> None:
    at = open_page("upload").run()
    at.file_uploader(key="up_files").upload("notes.txt", b"shopping list\n- eggs\n").run()
    [error] = at.error
    assert "choose the format in the Format box" in error.value
    assert "--format" not in error.value and "stabscope-upload-" not in error.value
    assert error.value.startswith("notes.txt, line 1: format not recognised")


CUSTOM = b"step,my_objective,lr\n1,2.50,0.001\n2,2.25,0.002\n3,2.00,0.003\n"


def test_a_metric_mapped_to_a_role_is_remembered(empty_store: Store) -> None:
    """The Upload page's 'Use a metric as' select does what `import --map` does (#21 item 3)."""
    at = open_page("upload").run()
    at.file_uploader(key="up_files").upload("objective.csv", CUSTOM, "text/csv").run()
    assert not at.exception
    assert at.selectbox(key="up_map_metric").options == ["(keep every name)", "my_objective"]  # lr has its role
    at.selectbox(key="up_map_metric").select("my_objective").run()
    at.selectbox(key="up_map_role").select("lr").run()  # the log has lr already: refused on the page
    assert "the log already has lr" in at.error[0].value and "--map" not in at.error[0].value
    at.selectbox(key="up_map_role").select("loss").run()
    assert not at.error
    assert any("**my_objective** will be stored as **loss**" in c.value for c in at.caption)
    at.button(key="up_import").click().run()
    assert "Imported 6 rows into run **objective**" in at.success[0].value
    assert empty_store.read_series("objective", "loss").values.tolist() == [2.5, 2.25, 2.0]
    assert empty_store.run_info("objective").meta["metric_map"] == {"my_objective": "loss"}
    # a later upload into the run is mapped the same way without choosing again
    at = open_page("upload").run()
    later = b"step,my_objective,lr\n4,1.75,0.004\n"
    at.file_uploader(key="up_files").upload("objective.csv", later, "text/csv").run()
    assert any("As before in this run: **my_objective** is stored as **loss**" in c.value for c in at.caption)
    at.button(key="up_import").click().run()
    assert empty_store.read_series("objective", "loss").values.tolist() == [2.5, 2.25, 2.0, 1.75]
    assert "my_objective" not in empty_store.run_info("objective").metrics


def test_a_log_no_format_matches_is_previewed_with_the_generic_mapping(empty_store: Store) -> None:
    """#31 item 9: the generic reader's proposed mapping is shown, applied on import, and corrected
    with the 'Use a metric as' select."""
    log = (Path(__file__).resolve().parent / "fixtures" / "logs" / "generic_custom.log").read_bytes()
    at = open_page("upload").run()
    at.file_uploader(key="up_files").upload("custom.log", log).run()
    assert not at.exception and not at.error
    assert _metrics(at)["Format"] == "generic"
    assert any("read by the generic reader" in i.value for i in at.info)
    [mapping] = [d.value for d in at.dataframe if "role" in d.value.columns]
    assert dict(zip(mapping["role"], mapping["key in the log"], strict=True))["loss"] == "train_ce_loss"
    assert dict(zip(mapping["role"], mapping["key in the log"], strict=True))["step"] == "it"
    at.button(key="up_import").click().run()
    run = at.text_input(key="up_name").value
    np.testing.assert_allclose(empty_store.read_series(run, "loss").values, [4.8812, 4.553, 4.3107, 4.1022])
    np.testing.assert_allclose(empty_store.read_series(run, "step_time_s").values, [0.4125, 0.4091, 0.4107, 0.4088])
