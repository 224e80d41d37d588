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
from ingest.formats.numbers import NUMBER
from ingest.formats.textlog import LineKind

_NAMES: Final[dict[str, tuple[str, str | None] | None]] = {
    "Actor Loss": ("actor_loss", None),
    "Critic Loss": ("critic_loss", None),
    "Unsupervised Loss": ("unsupervised_loss", None),
    "PPO Epoch": ("ppo_epoch", None),
    "Average reward score": ("reward", None),
    "EMA reward score": ("ema_reward", None),
    "ppl": ("eval_ppl", None),
    "Perplexity": ("eval_ppl", None),
    "act_loss": ("act_loss", None),
    "cri_loss": ("cri_loss", None),
    "unsuper_loss": ("unsuper_loss", None),
    "ppo_ep": ("ppo_epoch", None),
    "average reward score": ("reward", None),
    "chosen_last_scores": ("chosen_score", None),
    "rejected_last_scores": ("rejected_score", None),
    "acc": ("reward_accuracy", None),
    "Latency": ("step_time_s", None),
    # DS-Chat's TFLOPs is its own estimate from a FLOP formula, printed by every rank without a rank
    # id: no analysis uses it, so it stays out (the "a role or stays out")
    "TFLOPs": None,
    "Samples/sec": ("samples_per_s", None),
    # the compact PPO timing line: the whole PPO step (generation + training) and its parts, seconds
    "E2E latency": ("step_time_s", "s"),
    "Gather latency": ("gather_latency", "s"),
    "Generate time": ("generate_time", "s"),
    "Training time": ("training_time", "s"),
    "Others": ("other_time", "s"),
    "CurSamplesPerSec": ("samples_per_s", None),
    "AvgSamplesPerSec": ("avg_samples_per_s", None),
}


def _chat_key(key: str) -> tuple[str, str | None] | None:
    if key in _NAMES:
        return _NAMES[key]
    return sanitise_name(key.lower()), None


def _eval_key(key: str) -> tuple[str, str | None] | None:
    return ("val_loss", None) if key == "loss" else _chat_key(key)


def _dpo_eval_key(key: str) -> tuple[str, str | None] | None:
    # step 2 DPO's evaluation: the preference loss and the chosen/rejected rewards on the eval set
    return f"dpo_eval_{key}", None


DS_CHAT_KINDS: Final = (
    LineKind(
        name="chat_ppo",
        prefix=r"Epoch:[ \t]*[0-9]+[ \t]*\|[ \t]*Step:[ \t]*(?P<step>[0-9]+)[ \t]*\|[ \t]*(?=PPO Epoch:)",
        pairs=r"(?P<key>[A-Za-z][A-Za-z ]*?):[ \t]*(?P<val>" + NUMBER + r")",
        keymap=_chat_key,
        run_level=True,
    ),
    LineKind(
        name="chat_reward",
        prefix=r"(?=Average reward score:)",
        pairs=r"(?P<key>(?:Average|EMA) reward score):[ \t]*(?P<val>" + NUMBER + r")",
        keymap=_chat_key,
        run_level=True,
    ),
    LineKind(
        name="chat_throughput",
        prefix=r"End-to-End[ \t]*=>[ \t]*",
        pairs=r"(?P<key>Latency|TFLOPs|Samples/sec):[ \t]*(?P<val>" + NUMBER + r"s?)(?=,|[ \t]*$)",
        keymap=_chat_key,
        run_level=True,
    ),
    LineKind(
        # step 1's and step 2's print_throughput: one training step
        name="chat_sft_throughput",
        prefix=r"Model Parameters:[ \t]*" + NUMBER + r"[ \t]*B,[ \t]*",
        pairs=r"(?P<key>Latency|TFLOPs|Samples/sec):[ \t]*(?P<val>" + NUMBER + r"s?)(?=,|[ \t]*$)",
        keymap=_chat_key,
        run_level=True,
    ),
    LineKind(
        name="chat_sft_loss",
        prefix=r"Epoch:[ \t]*[0-9]+,[ \t]*Step:[ \t]*(?P<step>[0-9]+),[ \t]*Rank:[ \t]*0,[ \t]*",
        pairs=r"(?P<key>loss)[ \t]*=[ \t]*(?P<val>" + NUMBER + r")",
        run_level=True,
    ),
    LineKind(
        name="chat_sft_eval",
        prefix=r"(?=ppl:[ \t]*" + NUMBER + r",[ \t]*loss:)",
        pairs=r"(?P<key>ppl|loss):[ \t]*(?P<val>" + NUMBER + r")",
        keymap=_eval_key,
        run_level=True,
        step_before_first=0,  # the evaluation before training
    ),
    LineKind(
        name="chat_reward_eval",
        prefix=r"(?=chosen_last_scores)",
        pairs=r"(?P<key>chosen_last_scores|rejected_last_scores|acc)[^:\n]*:[ \t]*(?P<val>" + NUMBER + r")",
        keymap=_chat_key,
        run_level=True,
        step_before_first=0,  # the evaluation before training
    ),
)
"""DeepSpeed-Chat's lines (see the module docstring)."""

# The lines of the released logs (DeepSpeedExamples@83757d9, ``training_log_output/``) and of
# DeepSpeedExamples' own fine-tunes (data_efficiency, random_ltd), read from the real files
DS_EXAMPLES_KINDS: Final = (
    LineKind(
        # step 3 PPO: ``epoch: 0|step: 0|ppo_ep: 1|act_loss: 0.2099|cri_loss: 0.1204|unsuper_loss: 0.0``
        name="chat_ppo_compact",
        prefix=r"epoch:[ \t]*[0-9]+[ \t]*\|[ \t]*step:[ \t]*(?P<step>[0-9]+)[ \t]*\|[ \t]*(?=ppo_ep:)",
        pairs=r"(?P<key>[a-z_]+):[ \t]*(?P<val>" + NUMBER + r")(?=[ \t]*\||[ \t]*$)",
        keymap=_chat_key,
        run_level=True,
    ),
    LineKind(
        # step 3 PPO's timing after each step, at the step of the line before: ``|E2E latency=3.73s
        # |Gather latency=0.00s (0.00%) |Generate time=2.78s (74.61%) |...|CurSamplesPerSec=17.17 |...``
        name="chat_ppo_latency_compact",
        prefix=r"\|(?=E2E latency=)",
        pairs=r"(?P<key>[A-Za-z][A-Za-z0-9 ]*)=(?P<val>" + NUMBER + r")s?",
        keymap=_chat_key,
        ignore=r"\([ \t]*" + NUMBER + r"%\)",
        run_level=True,
    ),
    LineKind(
        # ``average reward score: -0.679``: the PPO step of the line before
        name="chat_reward_compact",
        prefix=r"(?=average reward score:)",
        pairs=r"(?P<key>average reward score):[ \t]*(?P<val>" + NUMBER + r")[ \t]*$",
        keymap=_chat_key,
        run_level=True,
    ),
    LineKind(
        # step 1 SFT's evaluation, once per epoch: ``ppl: 4998.296`` alone on its line
        name="chat_sft_ppl",
        prefix=r"(?=ppl:[ \t]*" + NUMBER + r"[ \t]*$)",
        pairs=r"(?P<key>ppl):[ \t]*(?P<val>" + NUMBER + r")",
        keymap=_chat_key,
        run_level=True,
        step_before_first=0,  # the evaluation before training
    ),
    LineKind(
        # step 2 DPO's evaluation: ``chosen: -31.93, rejected: -33.96, loss: 0.665``
        name="chat_dpo_eval",
        prefix=r"(?=chosen:[ \t]*" + NUMBER + r",[ \t]*rejected:[ \t]*" + NUMBER + r",[ \t]*loss:)",
        pairs=r"(?P<key>chosen|rejected|loss):[ \t]*(?P<val>" + NUMBER + r")",
        keymap=_dpo_eval_key,
        run_level=True,
        step_before_first=0,  # the evaluation before training
    ),
    LineKind(
        # data_efficiency's GPT fine-tune: ``'step':0, 'ppl': 61.80, 'seq_len': 256, 'consume layer-tokens': ..``
        # (only the perplexity: the curriculum's sequence length and token count are no training metrics)
        name="dse_eval_ppl",
        prefix=r"'step':[ \t]*(?P<step>[0-9]+),[ \t]*(?='ppl':)",
        pairs=r"'(?P<key>ppl)':[ \t]*(?P<val>" + NUMBER + r")",
        keymap=_chat_key,
        run_level=True,
    ),
    LineKind(
        # random_ltd's GPT fine-tune: ``Step at 1 with Perplexity: 61.579``
        name="dse_step_perplexity",
        prefix=r"Step at[ \t]+(?P<step>[0-9]+)[ \t]+with[ \t]+",
        pairs=r"(?P<key>Perplexity):[ \t]*(?P<val>" + NUMBER + r")",
        keymap=_chat_key,
        run_level=True,
    ),
)
"""DeepSpeed-Chat's released logs and DeepSpeedExamples' fine-tunes (see the comments)."""
