"""Which columns of a metrics CSV count the run rather than measure it, and which one is its loss.

- **Step-like counters.** Beside the plain step names (``step``, ``global_step``, ``iteration`` ...),
  a column whose last word counts steps (``steps``, ``timesteps``, ``iteration``) after qualifiers only
  (``total``, ``global``, ``env``, ``num`` ...) is a step counter: an RL logger's ``total timesteps``
  or ``total_timesteps``, OpenAI baselines' ``total/steps``; so is one said done so far
  (``steps_done``). The first such column (in header order) is the step axis when no plain step
  column is present.
- **Run clocks.** So qualified, a count of epochs or episodes (``total/epochs``, ``rollout/episodes``,
  ``num_episodes``), an RL log's lone ``episode`` index, a lone ``samples`` column (the samples seen
  so far: OpenAI's guided-diffusion logger) and a percentage of the run done (``Progress``) count the
  run: no metric. A table with no step nor epoch column that has a lone ``episode`` index is logged per
  episode: that index is its axis (docs/diagnosis.md, "Import: metrics files": a PPO logger's row every 10 episodes,
  ``Episode`` 0, 10, ..., 99990), not the row number. An elapsed-time clock (``total/duration``, ``total_time``,
  ``time_elapsed``: seconds since the start) is no metric either: it gives the step time
  (:mod:`ingest.formats.csv_clocks`).
- **The loss, proposed.** A table with no column the alias table reads as ``loss`` but one named a
  total loss (``total_loss``, ``loss/total``, ``train/total_loss``) or the current step's loss
  (``train/current_loss``, round 22) proposes it as ``loss`` (the other losses keep their names); the
  proposal is ``meta['proposed_map']`` and ``--map`` corrects it.
- **Tallies** (round 22, f28a). A key whose last word is a plural of steps or events (``micro_steps``,
  ``steps``, ``straggle_events``), whole numbers only, counts what happened in the run (an epoch
  summary's steps run, its slow-step events): :func:`is_tally`, no metric for the generic reader.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Final

from ingest.formats.aliases import canonical_name
from stab_core.metrics import CANONICAL_METRICS

_QUALIFIERS: Final = frozenset({"total", "global", "env", "environment", "num", "n", "time", "train", "trainer"})
_STEP_WORDS: Final = frozenset({"step", "steps", "timestep", "timesteps", "iteration", "iterations", "iter", "iters"})
_COUNT_WORDS: Final = frozenset({"epoch", "epochs", "episode", "episodes", "updates"})
_COUNT_QUALIFIERS: Final = _QUALIFIERS | {"rollout", "eval"}
_CLOCKS: Final = frozenset({("total", "duration"), ("total", "time"), ("time", "elapsed"), ("elapsed", "time")})
_PROGRESS: Final = frozenset({"progress"})
_DONE: Final = frozenset({"done", "taken", "seen", "completed", "elapsed"})
_SO_FAR: Final = frozenset({*((w, d) for w in _STEP_WORDS for d in _DONE), ("so", "far")})
_LONE_COUNTS: Final = frozenset({"episode", "episodes", "samples"})


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[\s_/\-.]+", name.strip().lower()) if w]


def is_step_like(name: str) -> bool:
    """Whether ``name`` counts steps: a step word after qualifiers only (``total timesteps``), or one
    said to be done so far (``steps_done``, ``timesteps_so_far``; docs/diagnosis.md, "Import: metrics files")."""
    words = _words(name)
    if len(words) > 1 and tuple(words[-2:]) in _SO_FAR:
        words = words[:-2] if words[-2:] == ["so", "far"] else words[:-1]
    return bool(words) and words[-1] in _STEP_WORDS and all(w in _QUALIFIERS for w in words[:-1])


def step_like_column(columns: Sequence[str]) -> str | None:
    """The first step-like column of a header (None when there is none)."""
    return next((c for c in columns if is_step_like(c)), None)


def episode_column(columns: Sequence[str]) -> str | None:
    """The first lone episode index of a header (``Episode``, ``episodes``; None when there is none)."""
    return next((c for c in columns if _words(c) in (["episode"], ["episodes"])), None)


def is_elapsed_clock(name: str) -> bool:
    """Whether ``name`` is an elapsed-time clock (``total/duration``, ``total_time``, ``time/time_elapsed``)."""
    words = _words(name)
    return tuple(words[-2:]) in _CLOCKS and all(w in _COUNT_QUALIFIERS for w in words[:-2])


def is_run_clock(name: str) -> bool:
    """Whether ``name`` counts the run (steps, epochs, episodes, its progress): no metric."""
    words = _words(name)
    if not words:
        return False
    if len(words) == 1 and words[0] in _PROGRESS | _LONE_COUNTS:
        return True  # the run's progress, an RL log's episode index, the samples seen: counts, never a measurement
    counted = words[-1] in _STEP_WORDS | _COUNT_WORDS
    return counted and len(words) > 1 and all(w in _COUNT_QUALIFIERS for w in words[:-1])


_TALLY_WORDS: Final = frozenset({"steps", "iters", "iterations", "events"})
"""Plural nouns that make a key a tally: ``micro_steps``, ``steps``, ``straggle_events``."""


def is_tally(name: str, values: Sequence[float]) -> bool:
    """Whether a key named ``name`` with ``values`` counts things that happened (round 22, f28a): its last
    word is a plural of steps or events (``steps``, ``micro_steps``, ``straggle_events``) and every finite
    value is a whole number. A trainer's epoch summary prints how many steps the epoch ran and how many
    slow-step events it saw: the run's progress and a tally, not a measurement whose level the diagnosis
    may judge. A canonical metric (``skipped_iterations``, counted by the alias table) is never one."""
    words = _words(name)
    if not words or words[-1] not in _TALLY_WORDS or canonical_name(name)[0] in CANONICAL_METRICS:
        return False
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and all(v == int(v) for v in finite)


def proposed_loss(columns: Sequence[str]) -> dict[str, str]:
    """``{column: 'loss'}`` for a total-loss column of a table that has no loss column; else empty."""
    if any(canonical_name(c)[0] == "loss" for c in columns):
        return {}
    for column in columns:
        words = set(_words(column))
        # the loss of the current step ('train/current_loss') is the loss as much as a total is; a
        # running mean ('tot_loss', 'avg_loss') is not, and keeps its name
        named = words <= {"loss", "total", "current", "train", "training"}
        if "loss" in words and words & {"total", "current"} and named:
            return {column: "loss"}
    return {}
