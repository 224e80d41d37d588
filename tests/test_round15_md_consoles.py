"""Consoles pasted in Markdown notes and READMEs (issues #31/#32; docs/diagnosis.md, "Import: the generic reader"): an
epoch counter in brackets without its total, one block of lines per epoch for several models in turn."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import detect, read_log
from ingest.formats.generic import line_pairs


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_bracketed_epoch_without_its_total_is_the_step(tmp_path: Path) -> None:
    assert ("Epoch", 4.0, None) in line_pairs("Epoch [4], train_loss: 0.5, val_loss: 0.7, val_acc: 0.61")
    lines = ["A small CNN on a toy set", "", "**Epoch results**", "", "```"]
    lines += [f"Epoch [{e}], train_loss: {2 - e / 10:.4f}, val_loss: {2.1 - e / 20:.4f}" for e in range(12)]
    lines += ["```", "", "**Loss Plot**", "", "![image](https://example.org/plot.png)"]
    log = read_log([_write(tmp_path, "README.md", lines)])
    steps, loss = log.series("loss")
    assert steps.tolist() == list(range(12)) and loss[0] == 2.0 and loss[-1] == 0.9
    assert log.series("val_loss")[1][-1] == 1.55


def test_epoch_blocks_of_models_trained_in_turn_are_runs_with_test_lines_as_validation(tmp_path: Path) -> None:
    lines = ["# notes", "", "```", "$ python train.py", "net-a: 1.5 GFlops - 20.1 MB", "{'train': 500, 'test': 100}"]
    for model, base in (("net-a", 3.0), ("net-b", 2.5)):
        for e in range(1, 7):
            lines += [
                f"{model} - Epoch {e}/6",
                "----------",
                f"lr: [{0.001 * e:.4f}]",
                f"train Loss: {base - e / 10:.4f} Top-1 Acc: {10.0 * e:.4f} Top-5 Acc: {15.0 * e:.4f}",
                f"test Loss: {base + 0.1 - e / 10:.4f} Top-1 Acc: {9.0 * e:.4f} Top-5 Acc: {14.0 * e:.4f}",
            ]
        lines += [f"Training {model} complete in 12m 5s", "Best test Top-1 Acc: 54.000000", f"train {model} done"]
    lines.append("```")
    path = _write(tmp_path, "log-compare.md", lines)
    assert detect([path])[0][0] == "epoch_blocks"
    log = read_log([path])
    # the second model's epochs 1..6 are another run, not an overwrite of the first's
    assert len(log.segments) == 1
    for run, base in ((log, 3.0), (log.segments[0], 2.5)):
        steps, loss = run.series("loss")
        assert steps.tolist() == list(range(1, 7)) and loss[0] == base - 0.1 and loss[-1] == base - 0.6
        assert run.series("val_loss")[1][0] == base and run.series("lr")[1][2] == 0.003
        assert not {"val_val_loss", "Best_test_Top-1_Acc"} & set(run.metrics)


def test_a_phase_timed_on_the_epoch_line_is_the_step_time_and_the_evaluation_timer_kept_out(tmp_path: Path) -> None:
    lines = ["## net on a toy set", "", "```", "train start"]
    for e in range(1, 21):
        line = f"Epoch {e:03d} loss {9 - e / 4:8.4f} | train 2.{e % 3}s"
        if e % 5 == 0:
            line += f" | Acc {10 + e:.2f}% | infer 4.5s"
        lines.append(line)
    lines.append("```")
    log = read_log([_write(tmp_path, "log_toy.md", lines)])
    steps, step_time = log.series("train_s")
    assert steps.tolist() == list(range(1, 21)) and step_time[0] == 2.1
    assert log.meta["proposed_map"] == {"train_s": "step_time_s"}  # applied on import
    assert log.series("loss")[1][-1] == 4.0
    assert not any(name.startswith("infer") for name in log.metrics)


def test_comma_separated_key_value_items_and_a_flat_validation_score_are_series(tmp_path: Path) -> None:
    assert ("loss_train", 0.75, None) in line_pairs("epoch 2, phase train, step 30, loss_train, 0.75")
    lines = ["Start time: 2025-01-01 00:00:00.000000", "reading train images..."]
    for e in range(1, 7):
        lines.append(f"epoch {e}, phase train, total step {(e - 1) * 40}")
        lines += [
            f"epoch {e}, phase train, step {s}, loss_train, {0.9 - s / 1000:.3f}"
            for s in range((e - 1) * 40 + 10, e * 40 + 1, 10)
        ]
        lines += [
            f"epoch {e}, phase valid, total step {e * 40}",
            f"epoch {e} | val_accuracy: 0.0125",
            f"epoch {e} | val_loss: {0.8 - e / 100:.4f}",
        ]
    log = read_log([_write(tmp_path, "train.md", lines)])
    steps, loss = log.series("loss")
    assert steps.tolist() == list(range(10, 241, 10)) and loss[0] == 0.89
    # one value on every epoch is the score the model got, not a setting of the run
    assert log.series("val_accuracy")[1].tolist() == [0.0125] * 6
    assert log.series("val_loss")[0].tolist() == list(range(40, 241, 40))


def test_step_lines_with_a_batch_loss_are_the_records_beside_per_epoch_summaries(tmp_path: Path) -> None:
    lines = ["> [!INFO]", ">     ```"]
    lines += [f">     [0] rank info world_rank={r} local_rank={r} world_size=8" for r in range(8)]
    step = 1
    for e in range(1, 7):
        for _ in range(2):
            lines.append(
                f">     [2024-01-01 10:00:0{e},000][trainer][INFO] - [0] [{e}/6: 0/100 (0%)] epoch={e}.0000 "
                f"step={step}.0000 dt=0.0{e}00 batch_acc=0.{e}000 batch_loss=0.0{9 - e}00 running_loss=0.00{e}0"
            )
            step += 4
        lines.append(f">     [2024-01-01 10:00:0{e},500][trainer][INFO] - [TRAIN]  loss=0.000{e}  acc={e}%")
    lines.append(">     ```")
    log = read_log([_write(tmp_path, "notes.md", lines)])
    steps, loss = log.series("batch_loss")
    assert steps.tolist() == list(range(1, 48, 4)) and loss[0] == 0.08 and loss[-1] == 0.03
    assert log.meta["proposed_map"]["batch_loss"] == "loss"  # not the running average beside it


def test_runs_under_headings_naming_other_network_depths_are_no_siblings(tmp_path: Path) -> None:
    from ingest.formats.run_settings import stated_settings
    from ingest.importing.importer import import_logs
    from ingest.services.run_analyses import open_analysed_store
    from ingest.services.run_findings import stored_findings

    said = stated_settings(["## MNIST resnet18 backbone", "Namespace(backbone='ResNet-50', lr=0.1)"])
    assert said == [(1, "model resnet", "18"), (2, "model resnet", "50")]
    lines = []
    for heading, seconds in (("## toy set resnet18 backbone", 2.2), ("## toy set resnet50 backbone", 5.6)):
        lines += [heading, "```", "train start"]
        lines += [f"Epoch {e:03d} loss {9 - e / 8:8.4f} | train {seconds}s" for e in range(1, 41)]
        lines += ["```", ""]
    path = _write(tmp_path, "log_toy.md", lines)
    store = open_analysed_store(tmp_path / "store")
    report = import_logs(store, [path], run="toy")[0]
    names = [report["run"]] + [s["run"] for s in report.get("segments") or []]
    assert len(names) == 2
    # the deeper network's slower epochs are no throughput loss against the shallower one
    assert all(stored_findings(store, store.run_info(n)).get("throughput_siblings") is None for n in names)
