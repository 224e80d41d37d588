"""Run metadata: `stabscope meta` and `import --meta` set typed keys, a log's argument dump fills them in,
the user's value wins over a parsed one, and a change re-runs the analyses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.cli import main
from ingest.errors import EXIT_ERROR
from ingest.services.run_analyses import open_analysed_store

REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"
MEGDS = REAL_LOGS / "bigscience_megds_perf_log" / "meg_ds_3d_gpt2_perf_n16-ds-off.out"
LLMC = REAL_LOGS / "mng_llmc_gpt2_124m" / "main.log"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real log {path} is absent (the shared real_logs folder is not on this machine)")
    return path


def _meta_json(store: Path, run: str, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    capsys.readouterr()
    assert main(["meta", run, *extra, "--json", "--store", str(store)]) == 0
    return json.loads(capsys.readouterr().out)


def test_megatron_argument_dump_fills_the_run_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the dump of this .out says: world_size 64, TP 4, PP 16, train_iters 1000, fp16 True / bf16 False,
    # clip_grad 1.0, global_batch_size 1024 x seq_length 1024, save_interval 500; no expert argument: a dense model (1)
    assert main(["import", str(_need(MEGDS)), "--run", "megds", "--store", str(tmp_path)]) == 0
    meta = _meta_json(tmp_path, "megds", capsys)
    assert meta == {
        "num_experts": 1,
        "max_norm": 1.0,
        "precision": "fp16",
        "tokens_per_step": 1024 * 1024,
        "planned_steps": 1000,
        "world_size": 64,
        "tensor_parallel_size": 4,
        "pipeline_parallel_size": 16,
        "save_interval": 500,
    }


def test_meta_round_trip_removal_and_reanalysis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(_need(MEGDS)), "--run", "megds", "--store", str(tmp_path)]) == 0
    store = open_analysed_store(tmp_path)
    assert store.run_info("megds").meta["analysis"]["max_norm"] == 1.0
    meta = _meta_json(tmp_path, "megds", capsys, "gpus=64", "usd_per_gpu_hour=2.5", "max_norm=0.5", "precision=BF16")
    assert (meta["gpus"], meta["usd_per_gpu_hour"], meta["max_norm"], meta["precision"]) == (64, 2.5, 0.5, "bf16")
    info = store.run_info("megds")
    # the analyses re-ran with the new threshold, and are current again
    assert info.meta["analysis"]["max_norm"] == 0.5 and info.analysis_gen == info.gen
    assert _meta_json(tmp_path, "megds", capsys) == meta  # printed as stored
    meta = _meta_json(tmp_path, "megds", capsys, "gpus=")
    assert "gpus" not in meta and meta["usd_per_gpu_hour"] == 2.5
    # a second import of the same log states max_norm 1.0 and fp16 again: the user's values win
    assert main(["import", str(MEGDS), "--run", "megds", "--store", str(tmp_path)]) == 0
    meta = _meta_json(tmp_path, "megds", capsys)
    assert (meta["max_norm"], meta["precision"], meta["planned_steps"]) == (0.5, "bf16", 1000)


@pytest.mark.parametrize(
    ("pair", "words"),
    [
        ("gpus=0", "gpus = '0' is not valid: expected a whole number > 0"),
        ("gpus=2.5", "expected a whole number > 0"),
        ("usd_per_gpu_hour=-1", "expected a number >= 0"),
        ("max_norm=0", "expected a number > 0"),
        ("precision=fp8", "expected one of fp16, bf16, fp32"),
        ("num_experts=0", "expected a whole number >= 1"),
        ("colour=red", "unknown metadata key 'colour'"),
        ("gpus", "is not KEY=VALUE"),
    ],
)
def test_bad_metadata_exits_2_with_one_paragraph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pair: str, words: str
) -> None:
    store = open_analysed_store(tmp_path)
    store.ensure_run("r", "test")
    assert main(["meta", "r", pair, "--store", str(tmp_path)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err
    assert "gpus" not in store.run_info("r").meta  # nothing was written


def test_import_meta_sets_keys_and_a_bad_one_imports_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = str(_need(LLMC))
    assert main(["import", log, "--run", "llmc", "--meta", "gpus=ten", "--store", str(tmp_path)]) == EXIT_ERROR
    assert not open_analysed_store(tmp_path).has_run("llmc")
    args = ["--meta", "gpus=8", "--meta", "tokens_per_step=524288", "--meta", "max_norm=1.0"]
    assert main(["import", log, "--run", "llmc", *args, "--store", str(tmp_path)]) == 0
    meta = _meta_json(tmp_path, "llmc", capsys)
    assert meta == {"gpus": 8, "max_norm": 1.0, "tokens_per_step": 524288}
    info = open_analysed_store(tmp_path).run_info("llmc")
    assert info.meta["analysis"].get("max_norm") == 1.0  # the clip statistics now run on llm.c's 1.0


def test_import_meta_runs_the_analyses_once_on_the_users_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One user action, one analyses pass: ``import --meta`` commits the user's keys with the rows, so the
    analyses run once, and store what ``import`` followed by ``stabscope meta`` stores."""
    import stab_core.analysis as analysis  # run_analyses imports it when it first analyses (lazily)

    log = str(_need(LLMC))
    real_analyze = analysis.analyze_run
    seen: list[object] = []

    def counted(view, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(view.meta.get("max_norm"))  # what the pass saw: the user's value (the log states none)
        return real_analyze(view, *args, **kwargs)

    monkeypatch.setattr(analysis, "analyze_run", counted)
    args = ["--meta", "gpus=8", "--meta", "max_norm=0.5", "--meta", "sensitivity=high"]
    assert main(["import", log, "--run", "llmc", *args, "--store", str(tmp_path / "one")]) == 0
    assert seen == [0.5]
    # the two-command way: import (a pass), then meta (a second pass); the same stored result
    assert main(["import", log, "--run", "llmc", "--store", str(tmp_path / "two")]) == 0
    assert main(["meta", "llmc", "gpus=8", "max_norm=0.5", "sensitivity=high", "--store", str(tmp_path / "two")]) == 0
    assert seen == [0.5, None, 0.5]
    one = open_analysed_store(tmp_path / "one").run_info("llmc")
    two = open_analysed_store(tmp_path / "two").run_info("llmc")
    assert one.meta == two.meta and one.meta["analysis"]["max_norm"] == 0.5
    assert one.analysis_gen == one.gen == two.gen == 1
    store_one, store_two = open_analysed_store(tmp_path / "one"), open_analysed_store(tmp_path / "two")
    assert store_one.spikes("llmc") == store_two.spikes("llmc") and store_one.spikes("llmc")


def _compact_tiny_run(store: Path, shards: Path, run: str) -> None:
    from ingest.store.shards import ShardWriter

    with ShardWriter(shards / run, rank=0, flush_interval_s=0.0) as writer:
        for step in range(5):
            writer.write(step, {"step_time_s": 0.1}, run_level={"loss": 3.0 - 0.1 * step})
    assert main(["compact", str(shards / run), "--run", run, "--store", str(store)]) == 0


def test_tags_and_notes_are_set_filtered_and_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    for run in ("base", "tuned", "other"):
        _compact_tiny_run(store, tmp_path / "shards", run)
    meta = _meta_json(store, "base", capsys, "tags=ablation, lr-sweep ,ablation", "notes=  warmup 2k, clip 1.0  ")
    assert meta["tags"] == ["ablation", "lr-sweep"] and meta["notes"] == "warmup 2k, clip 1.0"
    _meta_json(store, "tuned", capsys, "tags=lr-sweep")
    capsys.readouterr()
    assert main(["runs", "--tag", "lr-sweep", "--json", "--store", str(store)]) == 0
    listed = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(listed) == {"base", "tuned"}
    assert (listed["base"]["tags"], listed["base"]["notes"]) == (["ablation", "lr-sweep"], "warmup 2k, clip 1.0")
    assert (listed["tuned"]["tags"], listed["tuned"]["notes"]) == (["lr-sweep"], "")
    assert main(["runs", "--tag", "lr-sweep", "--tag", "ablation", "--json", "--store", str(store)]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["base"]
    assert main(["runs", "--tag", "nothing", "--store", str(store)]) == 0
    assert "have the tags nothing" in capsys.readouterr().out
    assert main(["show", "base", "--store", str(store)]) == 0
    text = capsys.readouterr().out
    assert "      tags: ablation, lr-sweep" in text and "     notes: warmup 2k, clip 1.0" in text
    assert main(["show", "other", "--json", "--store", str(store)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["tags"], shown["notes"]) == ([], "")
    # KEY= removes the label like any other key
    meta = _meta_json(store, "base", capsys, "tags=")
    assert "tags" not in meta and meta["notes"] == "warmup 2k, clip 1.0"


@pytest.mark.parametrize("assignment", ["tags=has space", "tags=,", "tags=-leading", "notes=" + "x" * 2001])
def test_a_bad_tag_or_note_is_one_paragraph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], assignment: str
) -> None:
    _compact_tiny_run(tmp_path / "store", tmp_path / "shards", "r")
    capsys.readouterr()
    assert main(["meta", "r", assignment, "--store", str(tmp_path / "store")]) == EXIT_ERROR
    err = capsys.readouterr().err
    key = assignment.split("=")[0]
    assert f"metadata {key} = " in err and "expected" in err and "Traceback" not in err
