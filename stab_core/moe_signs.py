"""Does anything in a run's log or settings name a mixture-of-experts: a stated expert count, an MoE
flag, a series or setting named for experts, a router or MoE, or a model name of an MoE family? The
MoE router question (node 4 of ``stab_core.decision_tree``) is one to ask a run about only when it may
have a router: a run whose log and settings name none (an RL critic, a GAN, a vision or a dense
language model's log) is not asked to log an expert load it cannot have.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

from stab_core.runview import RunView

MOE_WORDS: Final = re.compile(
    r"moe|expert|router|routing|mixtral|switch[-_ ]?transformer|\d+x\d+(\.\d+)?b\b|\d+b[-_]a\d+(\.\d+)?b\b",
    re.IGNORECASE,
)
"""Names that say a model has experts: "moe", "expert", "router"/"routing" (a router's loss or load),
Mixtral, a Switch Transformer, an "8x7B"-style size or a "30B-A3B"-style active-parameter size."""


def _strings(value: object, depth: int = 0) -> Iterable[str]:
    """Every key and string value of a (nested) setting, bounded in depth."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping) and depth < 3:
        for key, item in value.items():
            yield str(key)
            yield from _strings(item, depth + 1)
    elif isinstance(value, list | tuple) and depth < 3:
        for item in value[:50]:
            yield from _strings(item, depth + 1)


def names_moe(view: RunView) -> bool:
    """True when the run states more than one expert or an MoE flag, or a series, per-rank metric or
    setting (key or value) of the run names experts, a router or an MoE model. The run's own name is not
    read: it is the user's label, not the log's."""
    experts = view.meta.get("num_experts")
    if isinstance(experts, int | float) and not isinstance(experts, bool) and experts > 1:
        return True
    if view.meta.get("moe") is True:
        return True
    names = [*view.series, *view.per_rank]
    meta = {k: v for k, v in view.meta.items() if k != "suspect_lines"}
    return any(MOE_WORDS.search(text) for text in [*names, *_strings(meta)])
