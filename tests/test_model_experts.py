"""A dense model stated by the log's own model arguments settles question 4 (MoE router seesaw?)
(issue #32, claims5 item 1): the importer reads the expert count from the argument dump a log prints
(Megatron's ``---- arguments ----`` block, an argparse ``Namespace``, a dataclass repr, llm.c's
parameter table) into ``meta['num_experts']``; a dump with a layer count and no expert key is a dense
model (1); a banner naming a model, or no dump, states nothing. Logs of those shapes, written here."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.formats import read_log
from ingest.formats.model_experts import stated_num_experts
from stab_core.runview import RunView, Series
from stab_core.tree_nodes import node_router

NAMESPACE = (
    "Namespace(batch_size=20, bptt=35, clip=0.25, cuda=True, data='./data/wikitext-2', dropout=0.2, "
    "emsize=200, epochs=10, log_interval=200, lr=20, model='RNN_TANH', nhead=2, nhid=200, nlayers=1, "
    "seed=1111, tied=False)"
)
TORCHTITAN = (
    "[I][blendcorpus/train:174:__init__] Building Llama-2-7b with TransformerModelArgs(dim=4096, "
    "n_layers=6, n_heads=32, n_kv_heads=None, vocab_size=32000, max_seq_len=4096, eos_id=0)"
)
LLMC_TABLE = "| num_layers L          | 12                                                 |\n| num_heads NH | 12 |"


def _megatron_block(experts_line: str) -> str:
    rows = [
        "  checkpoint_num_layers ........................... 1",
        "  clip_grad ....................................... 1.0",
        "  global_batch_size ............................... 512",
        "  hidden_size ..................................... 1024",
        "  micro_batch_size ................................ 4",
        "  num_layers ...................................... 24",
        "  seq_length ...................................... 2048",
        "  train_iters ..................................... 1000",
    ]
    if experts_line:
        rows.append(experts_line)
    return (
        "------------------------ arguments ------------------------\n"
        + "\n".join(rows)
        + ("\n-------------------- end of arguments ---------------------\n")
    )


def test_a_model_dump_without_experts_states_a_dense_model() -> None:
    assert stated_num_experts(NAMESPACE) == 1
    assert stated_num_experts(TORCHTITAN) == 1
    assert stated_num_experts(LLMC_TABLE) == 1
    assert stated_num_experts(_megatron_block("")) == 1
    assert stated_num_experts(_megatron_block("  num_experts ..................................... None")) == 1
    assert stated_num_experts('{"num_hidden_layers": 24, "hidden_size": 896}') == 1


MINGPT_CONFIG = """model:
    model_type: gpt-nano
    n_layer: None
    n_head: None
    n_embd: None
    vocab_size: None
    embd_pdrop: 0.1
trainer:
    batch_size: 64
    learning_rate: 0.0005
"""


def test_a_config_leaving_the_layer_count_to_a_named_preset_states_a_dense_model() -> None:
    """minGPT prints every model argument and leaves ``n_layer: None`` when ``model_type`` sets the
    size: no expert key in that dump is a dense model. Before: None (the question stayed open)."""
    assert stated_num_experts(MINGPT_CONFIG) == 1
    assert stated_num_experts(MINGPT_CONFIG + "    n_experts: 8\n") == 8
    assert stated_num_experts("model:\n    model_type: gpt-nano\n") is None  # no argument listed


def test_an_expert_count_is_read_as_stated() -> None:
    assert stated_num_experts(_megatron_block("  num_experts ..................................... [8]")) == 8
    assert stated_num_experts(_megatron_block("  num_experts ..................................... 8")) == 8
    assert stated_num_experts('{"num_hidden_layers": 32, "num_local_experts": 8}') == 8
    assert stated_num_experts("ModelArgs(n_layers=27, n_routed_experts=64, n_shared_experts=2)") == 64


def test_without_a_dump_or_with_moe_switched_on_nothing_is_stated() -> None:
    assert stated_num_experts("Starting job: Llama 3 debug training\n[SPTokenizer] model path ./Llama-2-7b") is None
    assert stated_num_experts("  checkpoint_num_layers ........................... 1") is None  # not the model's
    assert stated_num_experts("TransformerModelArgs(n_layers=6, moe_enabled=True)") is None


def _wlm_log(tmp_path: Path, head: str, padding_lines: int = 0) -> Path:
    path = tmp_path / "wlm.log"
    lines = [head] + ["launcher: starting worker"] * padding_lines
    lines += [
        f"| epoch   1 | {200 * i:5d}/ 2983 batches | lr 20.0000 | ms/batch  7.44 | loss {6.0 - 0.01 * i:.2f} |"
        for i in range(1, 30)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_imported_run_carries_the_dense_model_and_question_4_is_answered(tmp_path: Path) -> None:
    parsed = read_log([_wlm_log(tmp_path, NAMESPACE)])
    assert parsed.meta["num_experts"] == 1
    steps = np.arange(0, 300, 10)
    view = RunView("run", {"loss": Series(steps, np.full(steps.size, 2.0))}, meta=dict(parsed.meta))
    spike = type("Spike", (), {"onset": 150, "peak": 160})()
    answer = node_router(view, spike, None)  # type: ignore[arg-type]
    assert answer.answer == "no" and answer.evidence == {"moe": False, "num_experts": 1}


def test_a_banner_naming_a_model_states_nothing(tmp_path: Path) -> None:
    parsed = read_log([_wlm_log(tmp_path, "Training Llama-2-7b (a dense model) on wikitext-2")])
    assert "num_experts" not in parsed.meta


def test_a_megatron_dump_past_the_first_chunk_is_read(tmp_path: Path) -> None:
    """32 ranks' start-up lines can push Megatron's arguments block 100 KB into the log."""
    head = "\n".join(["[launcher] rank setup line with some padding text ........"] * 2000) + "\n"
    parsed = read_log([_wlm_log(tmp_path, head + _megatron_block(""))])
    assert parsed.meta["num_experts"] == 1


def test_the_same_dump_uploaded_as_a_config_states_the_same_dense_model() -> None:
    from ingest.importing.configs import read_run_config

    assert read_run_config(_megatron_block(""), "args.txt", "megatron-args")["num_experts"] == 1
    dump = _megatron_block("  num_experts ..................................... 8")
    assert read_run_config(dump, "args.txt", "megatron-args")["num_experts"] == 8


def test_a_head_of_metric_lines_states_nothing_and_a_dump_under_it_is_still_read() -> None:
    # a head without 'layer', 'expert' or 'moe' is passed over in one scan; one dump line brings the search back
    metrics = [f" iteration {i}/ 1000 | consumed samples: {8 * i} | lm loss: 2.5E+00 |" for i in range(5000)]
    assert stated_num_experts("\n".join(metrics)) is None
    assert stated_num_experts("\n".join([*metrics, NAMESPACE])) == 1
    assert stated_num_experts("\n".join([*metrics, "moe_enabled=True"])) is None
    assert stated_num_experts("\n".join([*metrics, "num_experts:", "  8"])) == 8
