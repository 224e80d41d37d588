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
  total loss (``total_loss``, ``loss/total``, ``train/total_loss``) proposes it as ``loss`` (the other
  losses keep their names); the proposal is ``meta['proposed_map']`` and ``--map`` corrects it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from ingest.formats.aliases import canonical_name

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


def proposed_loss(columns: Sequence[str]) -> dict[str, str]:
    """``{column: 'loss'}`` for a total-loss column of a table that has no loss column; else empty."""
    if any(canonical_name(c)[0] == "loss" for c in columns):
        return {}
    for column in columns:
        words = _words(column)
        if "loss" in words and "total" in words and set(words) <= {"loss", "total", "train", "training"}:
            return {column: "loss"}
    return {}
