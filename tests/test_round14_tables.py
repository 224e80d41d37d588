"""Table cells and columns of batch 14's shapes (issue #31; docs/diagnosis.md, "Import: metrics files"): a one-element
list is its number, a GAN's ``disc_loss`` names the discriminator, an epoch-time column is the step time of a per-epoch
table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from ingest.formats import read_log
from ingest.formats.numbers import parse_numbers


def _series(path: Path) -> dict[str, list[float]]:
    log = read_log([path])
    names = log.table.column("metric").to_pylist()
    values = log.table.column("value").to_pylist()
    out: dict[str, list[float]] = {}
    for name, value in zip(names, values, strict=True):
        out.setdefault(name, []).append(value)
    return out


def test_one_element_list_cell_is_its_number() -> None:
    conv = parse_numbers(pa.array(["[2.5]", "[ -1e-3 ]", "[1.0, 2.0]", "[x]", "7"]))
    assert conv.ok.tolist() == [True, True, False, False, True]
    assert np.allclose(conv.values[[0, 1, 4]], [2.5, -1e-3, 7.0])


def test_gan_csv_with_bracketed_generator_loss(tmp_path: Path) -> None:
    path = tmp_path / "losses.csv"
    rows = [f"{e},[{5.0 / e:.6f}],{1.5 - 0.01 * e:.5f}" for e in range(1, 31)]
    path.write_text("epoch,gen_loss,disc_loss\n" + "\n".join(rows) + "\n")
    series = _series(path)
    assert series["loss"][0] == 5.0 and len(series["loss"]) == 30
    assert "disc_loss" in series


def test_epoch_time_is_step_time_of_a_per_epoch_table(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    rows = [f"{e},{1.0 / e:.4f},{12.0 + e % 3:.1f}" for e in range(1, 21)]
    path.write_text("epoch,train_loss,epoch_time_s\n" + "\n".join(rows) + "\n")
    series = _series(path)
    assert series["step_time_s"][:2] == [13.0, 14.0]
    assert "epoch_time_s" not in series


def test_epoch_time_beside_a_step_column_is_no_step_time(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    rows = [f"{s},{s // 10},{1.0 / s:.4f},{50.0}" for s in range(1, 41)]
    path.write_text("step,epoch,loss,epoch_time_ms\n" + "\n".join(rows) + "\n")
    assert "step_time_s" not in _series(path)
