"""What a run's ``loss`` is: a language model's token cross-entropy (nats/token), a stand-in ingest
stored as the run's loss (a detector's summed parts, an actor-critic's critic loss, a GAN generator's
loss: meta ``loss_source``, ``ingest.formats.run_loss``), a column mapped to ``loss`` (meta ``mapping`` /
``metric_map``), or a loss of unknown kind. Pages title the loss axis from it, and actions that rest on
"a healthy loss falls from the first steps" ask whether the run's loss is one that does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

TOKEN_UNIT: Final = "nats/token"

LM_METRICS: Final = frozenset(
    {"throughput_tok_s", "tokens", "tokens_seen", "tokens_per_s", "ppl", "val_ppl", "perplexity", "token_acc"}
)
"""Series only a language model's run logs (tokens per second, tokens seen, perplexity, token accuracy)."""
LM_SETTINGS: Final = frozenset({"seq_len", "seq_length", "max_seq_len", "vocab_size", "tokens_per_step"})
"""Settings only a language model's run states."""

MOVING_TARGET: Final = re.compile(
    r"(?:^|/|_)(?:value|vf|qf|critic|actor|policy|policy_gradient|pg|entropy|dis|disc|d|discriminator)_?loss$"
    r"|(?:^|/)loss_(?:critic|actor|dis|disc|d)$|(?:^|/)(?:ep_rew\w*|episode_reward\w*|rollout/return\w*|\w*_return)$",
    re.IGNORECASE,
)
"""Series of a run whose objective moves as it trains: an RL run's value / policy / entropy losses or
its returns and rewards, a GAN's discriminator loss. Their loss does not fall from the first steps as a
supervised loss does (a critic's targets grow with the returns; a generator plays against a
discriminator)."""
MOVING_SOURCES: Final = frozenset({"critic", "generator"})
"""``loss_source`` kinds whose loss has a moving target (see :data:`MOVING_TARGET`)."""


def loss_source(meta: Mapping[str, object]) -> tuple[str | None, str | None]:
    """(the raw name(s) the run's loss was read from, its kind) as the run states them: meta
    ``loss_source`` (a stand-in: kind ``detection_parts``, ``critic``, ``generator`` or ``aggregate``), else the raw
    column the import mapped to ``loss`` (kind None); (None, None) when neither is stated."""
    source = meta.get("loss_source")
    if isinstance(source, Mapping) and isinstance(source.get("name"), str):
        kind = source.get("kind")
        return str(source["name"]), kind if isinstance(kind, str) else None
    for key in ("metric_map", "mapping"):
        mapping = meta.get(key)
        if isinstance(mapping, Mapping):
            raw = next((str(k) for k, v in mapping.items() if v == "loss"), None)
            if raw is not None and raw != "loss":
                return raw, None
    return None, None


def moving_target(meta: Mapping[str, object], metrics: Iterable[str]) -> bool:
    """Is the run's loss one with a moving target (an RL or GAN objective), which need not fall from the
    first steps? From the stand-in's kind, else from the series logged beside it."""
    if loss_source(meta)[1] in MOVING_SOURCES:
        return True
    return any(MOVING_TARGET.search(m) for m in metrics)


def token_cross_entropy(meta: Mapping[str, object], metrics: Iterable[str]) -> bool:
    """Is the run's loss a language model's token cross-entropy? Where the run states ``loss_unit``, that
    says; a stand-in or a moving-target objective is not; else a series or setting only a language model
    logs (tokens, perplexity, sequence length, vocabulary) says it is."""
    unit = meta.get("loss_unit")
    if isinstance(unit, str) and unit:
        return unit == TOKEN_UNIT
    names = set(metrics)
    if loss_source(meta)[1] is not None or moving_target(meta, names):
        return False
    return bool(names & LM_METRICS) or any(key in meta for key in LM_SETTINGS)


def loss_axis_title(meta: Mapping[str, object], metrics: Iterable[str]) -> str:
    """The loss panel's y-axis title: ``loss (nats/token)`` for a language model's token cross-entropy,
    else ``loss`` with the name it was read from (``loss (sum of box+cls+dfl)`` for a detector's parts,
    ``loss (train/loss_critic)``), else ``loss``."""
    names = list(metrics)
    if token_cross_entropy(meta, names):
        return f"loss ({TOKEN_UNIT})"
    unit = meta.get("loss_unit")
    name, kind = loss_source(meta)
    if isinstance(unit, str) and unit:
        return f"loss ({unit})"
    if name and kind == "detection_parts":
        # train/box_loss+train/cls_loss+train/dfl_loss -> "sum of box+cls+dfl": the axis has room for ~30 characters
        parts = [p.rpartition("/")[2].removesuffix("_loss") for p in name.split("+")]
        name = "sum of " + "+".join(parts)
    if name and len(name) > TITLE_NAME_CHARS:
        name = name[: TITLE_NAME_CHARS - 1] + "…"
    return f"loss ({name})" if name else "loss"


TITLE_NAME_CHARS: Final = 30
"""The most characters of a source name an axis title shows (a panel is ~200 px high)."""
