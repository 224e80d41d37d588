"""The fallback readers alone (``ingest.formats.FALLBACK_READERS``, ``--fallback-only`` of the corpus
scorer) and the rules that let them read layouts no reader was written for (#31)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc

from ingest.formats import FALLBACK_READERS, FORMATS, detect, read_log
from ingest.formats.generic import line_pairs
from ingest.formats.generic_lines import spelled_columns


def _series(parsed, metric: str) -> list[float]:
    rows = parsed.table.filter(pc.equal(parsed.table["metric"], metric))
    return rows["value"].to_pylist()


def _columns_log(tmp_path: Path) -> Path:
    lines = [
        f" iteration {i:>6}/ 100 | consumed samples: {i * 8:>6} | learning rate: {1e-4 * i:.3E} |"
        f" lm loss: {9.0 - i * 0.1:.6E} | loss scale: 4096.0 | grad norm: {1.5 + i * 0.01:.3f} |"
        " number of skipped iterations: 0 | number of nan iterations: 0 |"
        for i in range(10, 60, 10)
    ]
    path = tmp_path / "train.out"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fallback_set_leaves_specific_readers_out(tmp_path: Path) -> None:
    path = _columns_log(tmp_path)
    assert "megatron" in FORMATS and "megatron" not in FALLBACK_READERS
    assert "megatron" in dict(detect([path]))
    assert "megatron" not in dict(detect([path], reader_set=FALLBACK_READERS))
    assert read_log([path]).format == "megatron"
    assert read_log([path], reader_set=FALLBACK_READERS).format == "generic"


def test_fallback_set_names_registered_readers() -> None:
    assert set(FALLBACK_READERS) <= set(FORMATS)
    assert {"generic", "jsonl", "csv_wide"} <= set(FALLBACK_READERS)
    assert not {"hf_trainer_state", "hf_console", "tensorboard_csv", "kv_tables"} & set(FALLBACK_READERS)


def test_import_passes_the_reader_set(tmp_path: Path) -> None:
    from ingest.importing.import_inputs import read_inputs

    path = _columns_log(tmp_path)
    assert read_inputs([path], reader_set=FALLBACK_READERS).parsed.format == "generic"
    assert read_inputs([path, tmp_path], reader_set=FALLBACK_READERS).parsed.format == "generic"


def test_a_column_of_several_words_is_one_key() -> None:
    pairs = line_pairs(
        " iteration 30/ 1000 | learning rate: 1.5E-04 | lm loss: 2.6E+00 | number of nan iterations: 0 |"
    )
    keys = [k for k, _, _ in pairs]
    assert keys == ["iteration", "learning_rate", "lm_loss", "number_of_nan_iterations"]
    assert "of" not in keys


def test_columns_of_a_repeated_layout_read_by_the_generic_reader(tmp_path: Path) -> None:
    parsed = read_log([_columns_log(tmp_path)], reader_set=FALLBACK_READERS)
    assert _series(parsed, "lr") == [1e-3, 2e-3, 3e-3, 4e-3, 5e-3]
    assert _series(parsed, "loss_scale") == [4096.0] * 5
    assert not {"of", "rate", "scale", "norm"} & set(parsed.table["metric"].to_pylist())


def test_a_split_label_column_names_the_columns_after_it() -> None:
    pairs = line_pairs(" validation loss at iteration 100 | lm loss value: 8.1E+00 | lm loss PPL: 3.3E+03 | ")
    assert [k for k, _, _ in pairs] == ["iteration", "validation_lm_loss", "validation_lm_loss_PPL"]


def test_a_line_with_one_worded_column_is_left_as_it_was() -> None:
    text = "Saved to | best model: 3 | done"
    assert spelled_columns(text) == text


def test_a_word_of_prose_before_a_number_is_no_key() -> None:
    pairs = line_pairs("Evaluating on 320 samples at step 100: loss 1.36, acc 0.5")
    assert "on" not in {k for k, _, _ in pairs}
    assert ("loss", 1.36, None) in pairs


def test_a_head_flooded_with_other_pair_lines_still_proposes_a_mapping() -> None:
    from ingest.formats.generic import HEAD_LINES, propose

    warning = "W0530 14:48:26.433000 2622492 site-packages/torch/convert_frame.py:1233] WON'T CONVERT model.py line 80"
    noise = [warning] * (HEAD_LINES + 100)
    steps = [f"step:{s}/100 train_loss:{3.0 - s / 100:.4f} lr:0.001" for s in range(1, 11)]
    found = propose(noise + steps)
    assert found is not None
    assert found.step == "step"
    assert found.roles.get("loss") == "train_loss"


def test_the_scorer_takes_the_fallback_option(tmp_path: Path, monkeypatch) -> None:
    import bench.corpus_eval as corpus_eval

    seen = {}

    def fake_evaluate(corpus, goldens, reader_set=None):
        seen["reader_set"] = reader_set
        return []

    monkeypatch.setattr(corpus_eval, "load_goldens", lambda: [])
    monkeypatch.setattr(corpus_eval, "evaluate", fake_evaluate)
    monkeypatch.setattr(corpus_eval, "split_totals", lambda scores: {"all": {}})
    assert corpus_eval.main(["--corpus", str(tmp_path), "--fallback-only", "--json"]) == 0
    assert seen["reader_set"] == FALLBACK_READERS
    assert "megatron" not in seen["reader_set"]


def test_a_timed_step_keeps_its_duration() -> None:
    assert [k for k, _, _ in line_pairs("[timing] sample processed in 276.79s")] == ["in"]
    assert ("after", 3.2, "s") in line_pairs("saved after 3.2s, loss 1.5")
