"""Consoles that print one key-value table per logging round (OpenAI baselines' ``logger``,
Stable-Baselines3's ``HumanOutputFormat``)::

    --------------------------------------
    | rollout/return_history  | -1.8e+03 |
    | total/steps             | 2000     |
    | train/loss_critic       | 6.47     |
    | train/param_noise_di... | 0.248    |
    --------------------------------------

    -----------------------------------
    | rollout/           |            |
    |    ep_rew_mean     | -1.2e+03   |
    | time/              |            |
    |    total_timesteps | 4000       |
    -----------------------------------

A table (rows between dashed rules) is one record. Its step is the table's own step counter
(``total/steps``, ``time/total_timesteps``, ...; the first of :data:`_STEP_KEYS` it holds), else the
table's order (1, 2, ...). Counters of the run (``time/total_timesteps``, ``time/episodes``,
``time/iterations``, ``train/n_updates``, ``total/epochs``) and its elapsed clock (``time/time_elapsed``,
``total/duration``) time the run and are no metrics (docs/diagnosis.md, "Import: the generic reader"). A row with an
empty value is a section (SB3's ``rollout/``) whose name
prefixes the indented rows below it. The logger truncates long keys (``param_noise_di...``): the key is
kept as printed, without the dots. Without a plain ``loss`` key, the run's ``loss`` is the critic's value
loss (``train/loss_critic``, SB3's ``critic_loss``/``value_loss``), which keeps its own name too.
Values are printed to 3 significant digits; ``inf``/``nan`` cells
are values (a non-finite statistic is a finding), a text cell is no metric. Every other line (the
preamble, progress prints) is counted as not a table line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

from ingest.formats._common import LogBuilder, iter_whole_lines
from ingest.formats.base import Reader
from ingest.formats.csv_counters import is_elapsed_clock, is_run_clock, is_step_like
from ingest.formats.numbers import parse_number
from ingest.formats.raw_text import decode_head, looks_binary
from ingest.formats.run_loss import note_loss_source, stand_in_loss

_RULE: Final = re.compile(r"^[ \t]*-{8,}[ \t]*$")
_ROW: Final = re.compile(r"^[ \t]*\|(?P<indent>[ \t]*)(?P<key>[^|]*?)[ \t]*\|[ \t]*(?P<value>[^|]*?)[ \t]*\|[ \t]*$")
_STEP_KEYS: Final = (
    "total/steps",
    "time/total_timesteps",
    "total_timesteps",
    "timesteps_total",
    "total/timesteps",
    "timesteps",
    "steps",
)
"""Counters that name a table's step, best first (cumulative environment steps)."""


def _key(section: str, indent: str, key: str) -> str:
    key = key.rstrip(".")
    return section + key if section and indent else key


def _close(
    table: list[tuple[str, float, int]], cols: dict[str, tuple[list[int], list[float], list[int]]], order: list[int]
) -> None:
    """Store the rows of one table at its step (its counter's value, else its order ``order[0]``) and empty it."""
    if not table:
        return
    order[0] += 1
    found = {k: v for k, v, _ in table}
    step = next((int(found[k]) for k in _STEP_KEYS if k in found and np.isfinite(found[k])), order[0])
    for key, value, seq in table:
        col = cols.setdefault(key, ([], [], []))
        col[0].append(step)
        col[1].append(value)
        col[2].append(seq)
    table.clear()


class KeyValueTableReader(Reader):
    name = "kv_tables"
    description = (
        "key-value table console (OpenAI baselines / Stable-Baselines3 logger): '| key | value |' rows between rules"
    )

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        lines = decode_head(head).splitlines()
        rules = rows = 0
        in_table = False
        for line in lines:
            if _RULE.match(line):
                rules += 1
                in_table = not in_table
            elif in_table and (m := _ROW.match(line)) is not None and m["key"]:
                rows += 1
        if rows < 3 or rules < 2:
            return 0.0
        return 0.9 if rules >= 4 else 0.75

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        cols: dict[str, tuple[list[int], list[float], list[int]]] = {}
        order = [0]
        for path in paths:
            builder.source(path)
            line_no = 1
            table: list[tuple[str, float, int]] = []
            section = ""
            in_table = False

            for chunk in iter_whole_lines(path, builder):
                lines = chunk.decode("utf-8", "replace").split("\n")[:-1]
                builder.mark_lines(line_no)
                base = builder.reserve(len(lines))
                for i, raw in enumerate(lines):
                    line = raw.rstrip("\r")
                    parsed, reason = False, None
                    if _RULE.match(line):
                        reason = "table rule"
                        in_table, section = not table, ""  # an opening rule, or one that closes rows
                        _close(table, cols, order)
                    elif in_table and (m := _ROW.match(line)) is not None:
                        key, text = _key(section, m["indent"], m["key"]), m["value"]
                        if not text:
                            section, reason = m["key"].strip(), "table section"
                        elif (value := parse_number(text)) is not None and key:
                            table.append((key, value, base + i))
                            parsed = True
                        else:
                            reason = "text cell"
                    if not parsed and reason is None and line.strip():
                        builder.skip(path, line_no, f"not a key-value table row: {line.strip()[:80]}")
                    builder.account.text_line(str(path), line_no, raw, parsed=parsed, reason=reason)
                    line_no += 1
            _close(table, cols, order)
        for key, (steps, values, seqs) in cols.items():
            if is_run_clock(key) or is_step_like(key) or is_elapsed_clock(key):
                continue  # SB3's time/ counters and clock, baselines' total/ ones: the run's clocks, no metric
            builder.add(key, np.asarray(steps, np.int64), np.asarray(values), seq=np.asarray(seqs, np.int64))
        # the critic's value loss is the run's loss where none is printed (ingest.formats.run_loss)
        if (stand_in := stand_in_loss(cols)) is not None:
            steps, values, seqs = cols[stand_in]
            builder.add(
                "loss",
                np.asarray(steps, np.int64),
                np.asarray(values),
                seq=np.asarray(seqs, np.int64),
                canonical=True,
                origin=stand_in,
            )
            note_loss_source(builder, stand_in, cols)
