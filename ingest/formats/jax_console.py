"""JAX / Flax trainers' consoles, often under SLURM and absl logging:

- CLU's ``LoggingWriter`` (``clu/metric_writers/logging_writer.py``), used by many Flax trainers:
  ``[100] learning_rate=0.001, train/loss=2.3021`` (behind absl's ``I0501 10:00:00.123456 1234
  logging_writer.py:48] ``);
- the ``Step N: key=value, key=value`` line of trainers that log a step's info dict themselves
  (openpi's ``train.py``: ``Step 100: grad_norm=0.1234, loss=0.5678, param_norm=123.4``, which its log
  formatter follows with ``(pid:file:line)``).

Names keep their meaning through the alias table (``loss``, ``train/loss``, ``learning_rate``,
``grad_norm``); a step time in seconds (``step_time``, ``sec_per_step``) is ``step_time_s``.
"""

from __future__ import annotations

from typing import Final

from ingest.formats.aliases import canonical_name
from ingest.formats.numbers import NUMBER
from ingest.formats.textlog import LineKind, TextLogReader

_ABSL: Final = (
    r"(?:[IWEF][0-9]{4}[ \t]+[0-9:.]+[ \t]+[0-9]+[ \t]+[^\]\n]*\][ \t]*"
    r"|[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?[ \t]+\[[DIWEC]\][ \t]+)?"
)
"""absl's ``I0501 10:00:00.123456 140000 file.py:48] `` or openpi's ``10:00:00.123 [I] `` before the message."""
_PAIRS: Final = r"(?P<key>[A-Za-z_][A-Za-z0-9_/.@\-]*)=(?P<val>" + NUMBER + r")(?=,|[ \t]|\r|$)"
_TIME_KEYS: Final = {"sec_per_step", "seconds_per_step", "step_time", "time_per_step", "train/step_time"}


def _jax_key(key: str) -> tuple[str, str | None]:
    if key in _TIME_KEYS:
        return ("step_time_s", "s")
    return canonical_name(key)


class JaxConsoleReader(TextLogReader):
    name = "jax_console"
    description = "JAX/Flax console: CLU's '[N] train/loss=x, learning_rate=x' or 'Step N: loss=x, grad_norm=x'"
    kinds = (
        LineKind(
            name="clu",
            prefix=_ABSL + r"\[(?P<step>[0-9]+)\][ \t]+(?=[A-Za-z_][A-Za-z0-9_/.@\-]*=)",
            pairs=_PAIRS,
            keymap=_jax_key,
            run_level=True,
        ),
        LineKind(
            name="step",
            prefix=_ABSL + r"[Ss]tep[ \t]+(?P<step>[0-9]+):[ \t]+(?=[A-Za-z_][A-Za-z0-9_/.@\-]*=)",
            pairs=_PAIRS,
            keymap=_jax_key,
            run_level=True,
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.9 if n_metric_lines >= 2 else 0.75
