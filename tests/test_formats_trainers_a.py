"""Readers for fairseq/metaseq, OLMo and NeMo on logs written in each trainer's exact line shapes
(taken from fairseq/logging/progress_bar.py and fairseq_cli/train.py, metaseq's progress bars,
OLMo's olmo/train.py ``log_metrics_to_console`` and olmo/util.py's formatter, NeMo 2's
ProgressPrinter and NeMo 1's MegatronProgressBar with Lightning's tqdm postfix)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ingest.formats import AMBIGUITY_MARGIN, FORMATS, detect, read_log
from ingest.formats.raw_text import read_head

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"
LN2 = math.log(2.0)
MINE = ("fairseq", "olmo", "nemo", "nemo_tqdm")


def _series(parsed, metric: str, rank: int = -1) -> tuple[list[int], list[float]]:
    steps, values = parsed.series(metric, rank)
    return steps.tolist(), values.tolist()


def _picked(path: Path) -> str:
    """The format detection picks for ``path``, asserting no other reader comes within the margin."""
    found = detect([path])
    assert found, f"{path.name}: no format detected"
    if len(found) > 1:
        assert found[1][1] < found[0][1] - AMBIGUITY_MARGIN, found
    return found[0][0]


# ---------------------------------------------------------------------------- fairseq / metaseq


def test_fairseq_json_log_steps_are_num_updates_and_losses_become_nats() -> None:
    path = FIXTURES / "fairseq_json.log"
    assert _picked(path) == "fairseq"
    parsed = read_log([path])
    assert parsed.format == "fairseq"
    steps, loss = _series(parsed, "loss")
    assert steps == [100, 200, 300]
    assert loss == pytest.approx([9.276 * LN2, 8.512 * LN2, 7.901 * LN2], rel=1e-12)
    assert _series(parsed, "grad_norm") == ([100, 200, 300], [2.345, 1.877, 12.5])
    assert _series(parsed, "lr") == ([100, 200, 300], [1.25e-05, 2.5e-05, 3.75e-05])
    assert _series(parsed, "loss_scale") == ([100, 200, 300], [128.0, 128.0, 64.0])
    assert _series(parsed, "throughput_tok_s") == ([100, 200, 300], [45213.2, 45390.7, 45105.9])
    # bookkeeping (epoch, `update`, bsz, wpb, wall, train_wall) is no series; the step time is 1/ups
    assert "epoch" not in parsed.metrics and "train_wall" not in parsed.metrics
    assert _series(parsed, "step_time_s")[1] == pytest.approx([1 / 0.79] * 3)
    assert _series(parsed, "nll_loss") == ([100, 200, 300], [9.102, 8.301, 7.640])  # bits, as logged
    # the validation record at num_updates 300
    val_steps, val = _series(parsed, "val_loss")
    assert val_steps == [300]
    assert val == pytest.approx([7.654 * LN2], rel=1e-12)
    assert _series(parsed, "valid_ppl") == ([300], [169.13])
    # the end-of-epoch summary keeps its own names (an epoch's average never overwrites the interval's)
    assert _series(parsed, "epoch_train_loss") == ([300], [8.563])
    assert "epoch_train_wall" not in parsed.metrics
    assert "num_updates" not in parsed.metrics and "train_num_updates" not in parsed.metrics
    assert parsed.meta["planned_steps"] == 300000
    assert parsed.meta["world_size"] == 8
    assert "max_norm" not in parsed.meta  # clip_norm 0.0: clipping off
    assert "bits" in parsed.meta["loss_unit_note"]


def test_fairseq_simple_and_epoch_pipes_forms() -> None:
    path = FIXTURES / "fairseq_simple.log"
    assert _picked(path) == "fairseq"
    parsed = read_log([path])
    steps, loss = _series(parsed, "loss")
    assert steps == [50, 100, 150]
    assert loss == pytest.approx([12.418 * LN2, 11.207 * LN2, 9.874 * LN2], rel=1e-12)
    assert _series(parsed, "grad_norm") == ([50, 100, 150], [2.781, 1.902, 1.654])
    assert _series(parsed, "lr") == ([50, 100, 150], [8.80e-06, 1.75e-05, 2.625e-05])
    # `| epoch 001 | loss 10.613 | ... | num_updates 110 | ...`: the epoch's summary at its num_updates
    assert _series(parsed, "epoch_train_loss") == ([110], [10.613])
    assert _series(parsed, "epoch_train_gnorm") == ([110], [2.102])
    val_steps, val = _series(parsed, "val_loss")
    assert val_steps == [110]
    assert val == pytest.approx([10.245 * LN2], rel=1e-12)
    assert _series(parsed, "valid_ppl") == ([110], [1015.01])
    assert parsed.meta["planned_steps"] == 4000
    assert parsed.meta["max_norm"] == 0.1


def test_fairseq_hydra_and_new_simple_lines_pasted_indented_among_prose(tmp_path: Path) -> None:
    """hydra_train's `[time][train_inner][INFO] - {...}` and fairseq >= 0.10's simple form, indented
    in a note among prose (one line of prose mentions `loss=` and `num_updates` too)."""
    path = tmp_path / "notes.md"
    path.write_text(
        "# Run 17 post-mortem\n\nThe loss=9 plateau lasted a while before num_updates reached 1200.\n\n"
        '    [2022-05-02 10:00:01,123][train_inner][INFO] - {"epoch": 2, "update": 1.05, "loss": "4.12", '
        '"ppl": "17.39", "wps": "101234", "num_updates": "1100", "lr": "0.0003", "gnorm": "0.512", '
        '"train_wall": "61", "wall": "7200"}\n'
        "    2022-05-02 10:01:02 | INFO | train_inner | epoch 002:    120 / 1000 loss=4.09, ppl=17.03, "
        "wps=101876, num_updates=1200, lr=0.0003, gnorm=7.875, train_wall=60, wall=7261\n"
        "\nThen gnorm jumped.\n"
    )
    assert _picked(path) == "fairseq"
    parsed = read_log([path])
    steps, loss = _series(parsed, "loss")
    assert steps == [1100, 1200]
    assert loss == pytest.approx([4.12 * LN2, 4.09 * LN2], rel=1e-12)
    assert _series(parsed, "grad_norm") == ([1100, 1200], [0.512, 7.875])
    assert _series(parsed, "lr") == ([1100, 1200], [0.0003, 0.0003])
    assert parsed.skipped == 3  # the three prose lines


def test_fairseq_09_bare_json_lines_are_fairseq_not_jsonl(tmp_path: Path) -> None:
    """fairseq <= 0.9 printed the JSON records bare (no logger prefix): a JSON-lines file to the eye."""
    path = tmp_path / "train.log"
    path.write_text(
        '{"epoch": 1, "update": 0.091, "loss": "11.204", "nll_loss": "11.112", "ppl": "2213.57", "wps": "20481", '
        '"num_updates": "100", "lr": "1.25e-05", "gnorm": "3.187", "clip": "1", "oom": "0", "loss_scale": "64"}\n'
        '{"epoch": 1, "update": 0.182, "loss": "9.804", "nll_loss": "9.651", "ppl": "804.22", "wps": "20610", '
        '"num_updates": "200", "lr": "2.5e-05", "gnorm": "1.954", "clip": "1", "oom": "0", "loss_scale": "64"}\n'
        '{"epoch": 1, "valid_loss": "9.301", "valid_nll_loss": "9.152", "valid_ppl": "568.99", '
        '"valid_num_updates": "200"}\n'
    )
    assert _picked(path) == "fairseq"
    parsed = read_log([path])
    steps, loss = _series(parsed, "loss")
    assert steps == [100, 200]
    assert loss == pytest.approx([11.204 * LN2, 9.804 * LN2], rel=1e-12)
    assert _series(parsed, "grad_norm") == ([100, 200], [3.187, 1.954])
    assert _series(parsed, "val_loss")[1] == pytest.approx([9.301 * LN2], rel=1e-12)


# ---------------------------------------------------------------------------- OLMo


def test_olmo_console_header_then_indented_metrics_with_thousands_separators() -> None:
    path = FIXTURES / "olmo_console.log"
    assert _picked(path) == "olmo"
    parsed = read_log([path])
    assert parsed.format == "olmo"
    assert _series(parsed, "loss") == ([1, 2, 3], [11.04, 10.73, 10.41])
    assert _series(parsed, "grad_norm") == ([1, 2, 3], [4.512, 3.875, 1.2e-05])
    assert _series(parsed, "lr") == ([1, 2, 3], [2.0e-07, 4.0e-07, 6.0e-07])
    assert _series(parsed, "tokens") == ([1, 2, 3], [4194304.0, 8388608.0, 12582912.0])
    assert _series(parsed, "train_ppl") == ([1, 2, 3], [62333.0, 45773.0, 33214.0])
    # the printing device's own rate: rank 0's, not the run's
    assert _series(parsed, "throughput_tok_s", rank=0) == ([2, 3], [8791.0, 8802.0])
    assert _series(parsed, "throughput_tok_s") == ([], [])
    # evaluation lines take the step of the header before them
    assert _series(parsed, "eval/v3-small-c4_en-validation/CrossEntropyLoss") == ([2], [10.69])
    # decimal megabytes as OLMo logs them; the pre-train line has no step and is not placed
    # the peak GPU memory (a per-rank kind), from MB (docs/diagnosis.md, "Import: readers and prefixes")
    steps, gib = _series(parsed, "gpu_mem_gb", 0)
    assert steps == [1, 2] and gib == pytest.approx([45773.0 * 1e6 / 2**30] * 2)  # review 12: not MiB
    assert _series(parsed, "optim/learning_rate_group1") == ([1, 2], [2.0e-07, 4.0e-07])
    assert parsed.meta["planned_steps"] == 739328


def test_olmo_pasted_among_prose_ignores_prose_with_equals_signs(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text(
        "Second attempt, with lr = 4e-4 and warmup=2000 (config below).\n"
        "  x = model(batch=3)\n"
        "    [step=2500/739328]\n"
        "        train/CrossEntropyLoss=3.412\n"
        "        optim/total_grad_norm=0.2871\n"
        "    the next one spiked:\n"
        "    [step=2510/739328]\n"
        "        train/CrossEntropyLoss=5.118\n"
        "        optim/total_grad_norm=14.63\n"
        "        throughput/total_tokens=10,485,760,000\n"
    )
    assert _picked(path) == "olmo"
    parsed = read_log([path])
    assert _series(parsed, "loss") == ([2500, 2510], [3.412, 5.118])
    assert _series(parsed, "grad_norm") == ([2500, 2510], [0.2871, 14.63])
    assert _series(parsed, "tokens") == ([2510], [10485760000.0])
    assert set(parsed.metrics) == {"loss", "grad_norm", "tokens"}


def test_olmo_core_console_names_eta_and_suffixed_values(tmp_path: Path) -> None:
    """OLMo-core's ConsoleLoggerCallback: `,eta=` in the header, `???` for an unknown max_steps, its
    own metric names, `1.20E-05`, and `1.050B` (over 1e9, rounded with a suffix: skipped, not misread)."""
    path = tmp_path / "olmo_core.log"
    path.write_text(
        "2025-03-02 08:00:01.000\tnode-0:0\tolmo_core.train.callbacks.console_logger:79\tINFO\t"
        "[step=1/10000,epoch=0]\n"
        "    train/CE loss=10.92\n    train/PPL=55,331\n    optim/total grad norm=3.104\n"
        "    optim/LR (group 0)=1.20E-05\n    throughput/total tokens=4,194,304\n    throughput/device/TPS=31,285\n"
        "2025-03-02 08:10:01.000\tnode-0:0\tolmo_core.train.callbacks.console_logger:79\tINFO\t"
        "[step=250/10000,epoch=0,eta=11h2m]\n"
        "    train/CE loss=4.218\n    optim/total grad norm=0.3817\n    optim/LR (group 0)=0.0003\n"
        "    throughput/total tokens=1.050B\n    throughput/device/TPS=31,402\n"
        "2025-03-02 08:20:01.000\tnode-0:0\tolmo_core.train.callbacks.console_logger:79\tINFO\t"
        "[step=500/???,epoch=0]\n"
        "    train/CE loss=3.907\n"
    )
    assert _picked(path) == "olmo"
    parsed = read_log([path])
    assert _series(parsed, "loss") == ([1, 250, 500], [10.92, 4.218, 3.907])
    assert _series(parsed, "grad_norm") == ([1, 250], [3.104, 0.3817])
    assert _series(parsed, "lr") == ([1, 250], [1.20e-05, 0.0003])
    assert _series(parsed, "tokens") == ([1], [4194304.0])
    assert _series(parsed, "throughput_tok_s", rank=0) == ([1, 250], [31285.0, 31402.0])
    assert _series(parsed, "train/PPL") == ([1], [55331.0])
    assert parsed.meta["planned_steps"] == 10000


# ---------------------------------------------------------------------------- NeMo


def test_nemo2_progress_printer_lines() -> None:
    path = FIXTURES / "nemo2_progress.log"
    assert _picked(path) == "nemo"
    parsed = read_log([path])
    assert parsed.format == "nemo"
    assert _series(parsed, "loss") == ([0, 1, 2, 3, 4], [11.03, 11.02, 10.97, 10.81, 10.52])
    assert _series(parsed, "lr") == ([0, 1, 2, 3, 4], [1.5e-07, 3e-07, 4.5e-07, 6e-07, 7.5e-07])
    assert _series(parsed, "step_time_s") == ([0, 1, 2, 3, 4], [14.12, 4.387, 4.391, 4.39, 4.402])
    assert _series(parsed, "val_loss") == ([4], [10.49])
    assert _series(parsed, "consumed_samples") == ([1, 2, 3, 4], [1024.0, 1536.0, 2048.0, 2560.0])
    assert "global_step" not in parsed.metrics
    assert parsed.meta["planned_steps"] == 100  # `iteration 7/99` prints max_steps - 1


def test_nemo1_tqdm_bar_global_step_and_counter_fallback() -> None:
    path = FIXTURES / "nemo1_tqdm.log"
    assert _picked(path) == "nemo_tqdm"
    parsed = read_log([path])
    assert parsed.format == "nemo_tqdm"
    # global_step=1e+3 (tqdm's short form) is placed by the bar's counter 1001 - 1
    assert _series(parsed, "loss") == ([0, 1, 2, 999, 1000, 1001], [11.5, 11.4, 11.2, 3.21, 3.19, 3.18])
    assert _series(parsed, "grad_norm") == ([2, 999, 1000, 1001], [9.87, 0.412, 0.409, 0.415])
    assert _series(parsed, "step_time_s") == ([0, 1, 2, 999, 1000, 1001], [49.5, 8.61, 8.6, 8.62, 8.61, 8.6])
    assert _series(parsed, "pl_running_loss") == ([1001], [3.2])  # Lightning's running mean, not `loss`
    assert parsed.meta["planned_steps"] == 2500


def test_nemo1_bar_redrawn_with_carriage_returns_reads_the_last_redraw(tmp_path: Path) -> None:
    """Off a terminal tqdm redraws on one line: no value lands on another redraw's step."""
    bar = "Epoch 0: :   0%|          | {n}/2500 [00:5{n}<36:20:11, reduced_train_loss={loss}, global_step={g}.000]"
    line = "\r".join(bar.format(n=n, loss=loss, g=n - 1) for n, loss in ((1, "11.50"), (2, "11.40"), (3, "11.20")))
    path = tmp_path / "slurm-1234.out"
    path.write_text(line + "\n")
    parsed = read_log([path], format="nemo_tqdm")
    steps, loss = _series(parsed, "loss")
    if steps != [0, 1, 2]:  # a common layer that splits redraws gives all three; else the last
        assert (steps, loss) == ([2], [11.2])


def test_nemo2_lines_pasted_indented_among_prose(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_text(
        "Loss blew up around iteration 40 | see below\n\n"
        "    Training epoch 0, iteration 39/999 | lr: 0.0003 | global_step: 39 | reduced_train_loss: 2.118\n"
        "    Training epoch 0, iteration 40/999 | lr: 0.0003 | global_step: 40 | reduced_train_loss: 7.904\n"
    )
    assert _picked(path) == "nemo"
    parsed = read_log([path])
    assert _series(parsed, "loss") == ([39, 40], [2.118, 7.904])
    assert parsed.meta["planned_steps"] == 1000


# ---------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in FIXTURES.glob("*.log") if not p.name.startswith(("fairseq", "olmo", "nemo"))),
)
def test_these_readers_take_no_other_fixture(name: str) -> None:
    path = FIXTURES / name
    head = read_head(path)
    assert {n: FORMATS[n].sniff_path(path, head) for n in MINE} == dict.fromkeys(MINE, 0.0)


REAL_LOGS = Path("/work/shared/data/real_logs")


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason="the real public logs are not on this machine")
def test_these_readers_take_no_real_log() -> None:
    files = [p for p in REAL_LOGS.rglob("*") if p.is_file() and p.name != "PROVENANCE.txt"]
    assert files
    taken = {(p.name, n): s for p in files for n in MINE if (s := FORMATS[n].sniff_path(p, read_head(p))) > 0}
    assert taken == {}
