"""The alias map and unit conversion every reader relies on."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from ingest.formats._common import parse_numbers, parse_timestamps
from ingest.formats.aliases import canonical_name, sanitise_name, to_canonical_unit
from stab_core.metrics import CANONICAL_METRICS, is_valid_metric_name


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("lm loss", "loss"),
        ("train_loss", "loss"),
        ("trl", "loss"),
        ("train/loss", "loss"),
        ("grad norm", "grad_norm"),
        ("norm", "grad_norm"),
        ("grad_norm", "grad_norm"),
        ("grad-norm", "grad_norm"),
        ("learning rate", "lr"),
        ("learning_rate", "lr"),
        ("learning-rate", "lr"),
        ("lr", "lr"),
        ("tel", "val_loss"),
        ("eval_loss", "val_loss"),
        ("val_loss", "val_loss"),
        ("eval/loss", "val_loss"),
        ("loss scale", "loss_scale"),
        ("number of skipped iterations", "skipped_iterations"),
        ("number of nan iterations", "nan_iterations"),
        ("consumed tokens", "tokens"),
        ("num_tokens", "tokens"),
        ("tok/s", "throughput_tok_s"),
        ("tps", "throughput_tok_s"),
        ("MFU", "mfu"),
        ("memory", "gpu_mem_gb"),
        ("iteration-time", "step_time_s"),
        ("z_loss", "router_z_loss"),
    ],
)
def test_aliases(raw: str, expected: str) -> None:
    assert canonical_name(raw)[0] == expected


def test_every_alias_target_is_canonical() -> None:
    from ingest.formats.aliases import ALIASES

    assert set(ALIASES.values()) <= set(CANONICAL_METRICS)


def test_unit_in_key_and_unknown_names_kept() -> None:
    assert canonical_name("elapsed time per iteration (ms)") == ("step_time_s", "ms")
    assert canonical_name("iter time (s)") == ("step_time_s", "s")
    assert canonical_name("mem-allocated-bytes") == ("gpu_mem_gb", "B")
    assert canonical_name("eval_mean_token_accuracy") == ("eval_mean_token_accuracy", None)
    assert canonical_name("grad_norm/layer.3") == ("grad_norm/layer.3", None)
    assert sanitise_name("weird name (x) !!") == "weird_name_x"
    assert is_valid_metric_name(sanitise_name("  .. a b .. c"))


def test_units_to_canonical() -> None:
    name, v = to_canonical_unit("step_time_s", "ms", np.array([1500.0]))
    assert name == "step_time_s" and v[0] == pytest.approx(1.5)
    name, v = to_canonical_unit("train_time", "ms", np.array([8410.0]))
    assert name == "train_time_s" and v[0] == pytest.approx(8.41)
    name, v = to_canonical_unit("gpu_mem_gb", "MB", np.array([2048.0]))
    assert name == "gpu_mem_gb" and v[0] == 2.0
    name, v = to_canonical_unit("mfu", "%", np.array([39.51]))
    assert v[0] == pytest.approx(0.3951)
    name, v = to_canonical_unit("gpu_util", "%", np.array([80.0]))
    assert v[0] == 80.0


def test_parse_numbers_units_commas_nan() -> None:
    conv = parse_numbers(pa.array(["10,550", "nanms", "160.86GiB(90.19%)", "-nan", "1.2E+01", "abc", "inf"]))
    assert conv.values[0] == 10550.0
    assert np.isnan(conv.values[1]) and conv.ok[1]
    assert conv.values[2] == pytest.approx(160.86) and conv.pct is not None and conv.pct[2] == pytest.approx(90.19)
    assert np.isnan(conv.values[3]) and conv.ok[3]
    assert conv.values[4] == 12.0
    assert not conv.ok[5]
    assert np.isinf(conv.values[6])
    units = dict(conv.units)
    assert units["ms"].tolist() == [False, True, False, False, False, False, False]
    assert units["GiB"][2]


def test_parse_timestamps() -> None:
    secs = parse_timestamps(pa.array(["2026-05-20 02:22:56,141", "2024-06-14 10:00:10", "garbage"]))
    assert secs[0] == pytest.approx(1779243776.141)
    assert secs[1] == pytest.approx(1718359210.0)
    assert np.isnan(secs[2])
