"""DeepSpeed-Chat's own console lines (``DeepSpeedExamples/applications/DeepSpeed-Chat/training``),
read by the DeepSpeed console reader next to the engine's lines the same log carries:

- step 1 (SFT), ``--print_loss``: ``Epoch: 0, Step: 10, Rank: 0, loss = 2.3418`` (every rank prints
  its own: rank 0's is kept), ``Model Parameters: 0.331 B, Latency: 0.22s, TFLOPs: 12.34, ...`` (one
  training step: ``step_time_s``); its evaluation: ``ppl: 9.4512, loss: 2.2461`` (``eval_perplexity`` and
  ``val_loss``, at the step of the line before);
- step 2 (reward model) evaluation: ``chosen_last_scores (higher is better) : 2.31, rejected_last_scores
  (lower is better) : -1.07, acc (higher is better) : 0.68``;
- step 3 (PPO): ``Epoch: 0 | Step: 9 | PPO Epoch: 1 | Actor Loss: 0.1274 | Critic Loss: 0.0453 |
  Unsupervised Loss: 0.0``, then ``Average reward score: -2.46 | EMA reward score: -2.51`` and
  ``End-to-End => Latency: 13.41s, TFLOPs: 2.84, Samples/sec: 2.39, ...`` (the whole PPO step:
  ``step_time_s``).

The step is the one these lines print (the dataloader step of the epoch); a line without one takes
the step of the metric line before it. The actor's loss is a policy loss: it keeps its name.
"""

from __future__ import annotations

from typing import Final

from ingest.formats.aliases import sanitise_name
from ingest.formats.textlog import LineKind

_NUM: Final = r"[-+]?(?:[0-9]+\.?[0-9]*(?:[eE][-+]?[0-9]+)?|nan|inf)"

_NAMES: Final[dict[str, tuple[str, str | None]]] = {
    "Actor Loss": ("actor_loss", None),
    "Critic Loss": ("critic_loss", None),
    "Unsupervised Loss": ("unsupervised_loss", None),
    "PPO Epoch": ("ppo_epoch", None),
    "Average reward score": ("reward", None),
    "EMA reward score": ("ema_reward", None),
    "ppl": ("eval_perplexity", None),
    "chosen_last_scores": ("chosen_score", None),
    "rejected_last_scores": ("rejected_score", None),
    "acc": ("reward_accuracy", None),
    "Latency": ("step_time_s", None),
    "TFLOPs": ("tflops_per_gpu", None),
    "Samples/sec": ("samples_per_s", None),
}


def _chat_key(key: str) -> tuple[str, str | None]:
    return _NAMES.get(key) or (sanitise_name(key.lower()), None)


def _eval_key(key: str) -> tuple[str, str | None]:
    return ("val_loss", None) if key == "loss" else _chat_key(key)


DS_CHAT_KINDS: Final = (
    LineKind(
        name="chat_ppo",
        prefix=r"Epoch:[ \t]*[0-9]+[ \t]*\|[ \t]*Step:[ \t]*(?P<step>[0-9]+)[ \t]*\|[ \t]*(?=PPO Epoch:)",
        pairs=r"(?P<key>[A-Za-z][A-Za-z ]*?):[ \t]*(?P<val>" + _NUM + r")",
        keymap=_chat_key,
        run_level=True,
    ),
    LineKind(
        name="chat_reward",
        prefix=r"(?=Average reward score:)",
        pairs=r"(?P<key>(?:Average|EMA) reward score):[ \t]*(?P<val>" + _NUM + r")",
        keymap=_chat_key,
        run_level=True,
    ),
    LineKind(
        name="chat_throughput",
        prefix=r"End-to-End[ \t]*=>[ \t]*",
        pairs=r"(?P<key>Latency|TFLOPs|Samples/sec):[ \t]*(?P<val>" + _NUM + r"s?)(?=,|[ \t]*$)",
        keymap=_chat_key,
        run_level=True,
    ),
    LineKind(
        # step 1's and step 2's print_throughput: one training step
        name="chat_sft_throughput",
        prefix=r"Model Parameters:[ \t]*[0-9.]+[ \t]*B,[ \t]*",
        pairs=r"(?P<key>Latency|TFLOPs|Samples/sec):[ \t]*(?P<val>" + _NUM + r"s?)(?=,|[ \t]*$)",
        keymap=_chat_key,
        run_level=True,
    ),
    LineKind(
        name="chat_sft_loss",
        prefix=r"Epoch:[ \t]*[0-9]+,[ \t]*Step:[ \t]*(?P<step>[0-9]+),[ \t]*Rank:[ \t]*0,[ \t]*",
        pairs=r"(?P<key>loss)[ \t]*=[ \t]*(?P<val>" + _NUM + r")",
        run_level=True,
    ),
    LineKind(
        name="chat_sft_eval",
        prefix=r"(?=ppl:[ \t]*" + _NUM + r",[ \t]*loss:)",
        pairs=r"(?P<key>ppl|loss):[ \t]*(?P<val>" + _NUM + r")",
        keymap=_eval_key,
        run_level=True,
    ),
    LineKind(
        name="chat_reward_eval",
        prefix=r"(?=chosen_last_scores)",
        pairs=r"(?P<key>chosen_last_scores|rejected_last_scores|acc)[^:\n]*:[ \t]*(?P<val>" + _NUM + r")",
        keymap=_chat_key,
        run_level=True,
    ),
)
"""DeepSpeed-Chat's lines (see the module docstring)."""
