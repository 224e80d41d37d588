"""The baselines' evaluation (bench/baseline_eval.py) on the real llm.c GPT-2 log: the figures
docs/diagnosis.md quotes for that log, scored as the golden comparison scores StabScope."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.baseline_eval import STABSCOPE, STABSCOPE_DEFAULT_VIEW, evaluate, table
from tests.golden_score import GOLDEN, REAL, build_store, load

LLMC = GOLDEN / "mng_llmc_gpt2_124m.json"


NO_LOGS = "../shared/data/real_logs is absent (the checkout's parent must hold shared)"


@pytest.mark.skipif(not REAL.is_dir(), reason=NO_LOGS)
def test_llmc_log_scored_for_stabscope_and_each_baseline(tmp_path: Path) -> None:
    golden = load(LLMC)
    totals = evaluate([golden], build_store(tmp_path, [golden]))
    stab, llmc = totals[STABSCOPE], totals["llm.c (z > 7 over 128)"]
    olmo, megatron = totals["OLMo-core (mean + 6 sigma over 128)"], totals["Megatron-LM (10x max of first 100)"]
    assert (stab["found"], stab["required"], stab["invented"]) == (4, 4, 0)
    # the default view hides blips: the 4 required one-step grad-norm spikes (loss unmoved) are blips
    view = totals[STABSCOPE_DEFAULT_VIEW]
    assert (view["found"], view["invented"], view["per_run"][str(golden["log"])]["reported"]) == (0, 0, 0)
    assert (llmc["found"], llmc["invented"]) == (4, 17)
    assert (olmo["found"], olmo["invented"]) == (4, 52)
    assert (megatron["found"], megatron["invented"]) == (0, 0)  # a 10x loss never happens after step 100
    assert "| llm.c (z > 7 over 128) | 1.00 | 4 / 0 | 17 | 0 (0) |" in table(totals)
