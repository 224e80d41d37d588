"""The loss axis says what the run's loss is (issue #32): nats/token only for a language model's token
cross-entropy; a stand-in loss (a detector's summed parts, a critic's, a GAN generator's) or a mapped
column is titled by the name it was read from. Ingest records the stand-in's source in the run's meta."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import read_log
from stab_core.loss_origin import loss_axis_title, moving_target, token_cross_entropy


def test_the_title_follows_what_the_loss_is() -> None:
    parts = {"loss_source": {"name": "train/box_loss+train/cls_loss+train/dfl_loss", "kind": "detection_parts"}}
    assert loss_axis_title(parts, ["loss", "train/box_loss"]) == "loss (sum of box+cls+dfl)"
    critic = {"loss_source": {"name": "train/loss_critic", "kind": "critic"}}
    assert loss_axis_title(critic, ["loss", "throughput_tok_s"]) == "loss (train/loss_critic)"
    assert loss_axis_title({"mapping": {"Train Loss": "loss"}}, ["loss", "val_loss"]) == "loss (Train Loss)"
    assert loss_axis_title({}, ["loss", "lr", "grad_norm"]) == "loss"  # of unknown kind: no unit claimed
    assert loss_axis_title({}, ["loss", "throughput_tok_s"]) == "loss (nats/token)"
    assert loss_axis_title({"seq_len": 2048}, ["loss"]) == "loss (nats/token)"
    assert loss_axis_title({"loss_unit": "nats/token"}, ["loss"]) == "loss (nats/token)"
    # an RL run's total loss beside its value and policy losses is no token cross-entropy, tokens or not
    rl = ["loss", "value_loss", "policy_gradient_loss", "entropy_loss", "throughput_tok_s"]
    assert not token_cross_entropy({"metric_map": {"total_loss": "loss"}}, rl)
    assert loss_axis_title({"metric_map": {"total_loss": "loss"}}, rl) == "loss (total_loss)"


def test_a_moving_target_is_read_from_the_source_or_the_series_beside_it() -> None:
    assert moving_target({"loss_source": {"name": "loss_gen", "kind": "generator"}}, ["loss"])
    assert moving_target({}, ["loss", "loss_dis", "loss_gen"])
    assert moving_target({}, ["loss", "ep_rew_mean"])
    assert moving_target({}, ["loss", "disc_loss", "PESQ"])  # a speech GAN: the generator's loss beside its critic
    assert not moving_target({"loss_source": {"name": "box_loss+cls_loss", "kind": "detection_parts"}}, ["loss"])
    assert not moving_target({}, ["loss", "lm_loss", "val_loss", "pred_loss"])


def yolo_csv(path: Path) -> Path:
    """A detector's results.csv (Ultralytics' columns): its loss is the sum of the three training parts."""
    rows = ["epoch,train/box_loss,train/cls_loss,train/dfl_loss,metrics/mAP50(B),val/box_loss"]
    rows += [
        f"{e},{1.5 - 0.01 * e:.4f},{2.0 - 0.02 * e:.4f},{1.2 - 0.005 * e:.4f},{0.01 * e:.3f},1.0" for e in range(1, 41)
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_ingest_records_where_a_stand_in_loss_came_from(tmp_path: Path) -> None:
    parsed = read_log([yolo_csv(tmp_path / "results.csv")])
    assert parsed.meta["loss_source"] == {
        "name": "train/box_loss+train/cls_loss+train/dfl_loss",
        "kind": "detection_parts",
    }
    rows = ["step,train/loss_critic,train/loss_actor,rollout/return"]
    rows += [f"{s * 1000},{0.01 * s:.4f},{-0.1 * s:.3f},{2.0 * s:.1f}" for s in range(1, 61)]
    (tmp_path / "progress.csv").write_text("\n".join(rows) + "\n")
    parsed = read_log([tmp_path / "progress.csv"])
    assert parsed.meta["loss_source"] == {"name": "train/loss_critic", "kind": "critic"}


def test_a_key_value_console_records_its_critic_as_the_loss_source(tmp_path: Path) -> None:
    blocks = []
    for i in range(1, 31):
        rows = {
            "total/steps": str(i * 1000),
            "train/loss_actor": f"{-0.1 * i:.3f}",
            "train/loss_critic": f"{0.01 * i:.4f}",
        }
        width = 2 + max(len(k) for k in rows) + 5 + max(len(v) for v in rows.values()) + 2
        blocks.append("-" * width)
        blocks += [f"| {k:<20} | {v:<10} |" for k, v in rows.items()]
        blocks.append("-" * width)
    (tmp_path / "log.txt").write_text("\n".join(blocks) + "\n")
    parsed = read_log([tmp_path / "log.txt"])
    assert parsed.meta["loss_source"] == {"name": "train/loss_critic", "kind": "critic"}
