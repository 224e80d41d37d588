"""Issue #31 (docs/diagnosis.md, "Import: readers and prefixes"): import rules for batch 14's last layouts, each on a
synthetic input."""

from __future__ import annotations

from ingest.formats.generic import line_pairs as pairs_of


def test_a_key_is_never_cut_at_a_non_ascii_arrow() -> None:
    # 'I↔T' names one retrieval direction: neither 'T' nor 'A' alone is a metric
    pairs = pairs_of("Epoch 3/9: Loss=4.2100, Avg R@1=2.50%, I↔T=1.0%, I↔A=3.5%, T↔A=2.0%")
    keys = [k for k, _, _ in pairs]
    assert "T" not in keys and "A" not in keys
    assert "Loss" in keys


def test_a_key_after_a_letter_of_another_script_is_not_cut() -> None:
    keys = [k for k, _, _ in pairs_of("étape=3 loss=1.5")]
    assert "tape" not in keys and "loss" in keys
