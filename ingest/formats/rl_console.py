"""RL fine-tuning consoles: verl's (PPO, GRPO, DAPO ...) metric line, printed by its console
logger behind Ray's process prefix::

    (TaskRunner pid=2671) step:12 - actor/pg_loss:-0.0123 - actor/ppo_kl:0.0004 - actor/grad_norm:0.41 - ...

(``verl/utils/tracking.py``'s console backend joins ``step:N`` and every numeric ``key:value`` of the
step with `` - ``; older versions run it in ``(main_task pid=...)``, an un-prefixed driver prints it
bare). Roles: ``actor/grad_norm`` is ``grad_norm``, ``actor/lr`` is ``lr``, ``timing_s/step`` (the
whole step, seconds) is ``step_time_s`` and ``perf/throughput`` (tokens/s per GPU) is
``throughput_tok_s``. The policy loss (``actor/pg_loss``), the KL (``actor/ppo_kl``, ``actor/kl_loss``),
the reward (``critic/score/mean``, ``critic/rewards/mean``) and the response length
(``response_length/mean``) keep their names: a policy-gradient loss is not a language-model loss, so
the loss detectors do not read it as one.
"""

from __future__ import annotations

from typing import Final

from ingest.formats.aliases import canonical_name
from ingest.formats.numbers import NUMBER
from ingest.formats.textlog import LineKind, TextLogReader

RAY_PREFIX: Final = r"(?:\((?:[A-Za-z_][A-Za-z0-9_.]*[ \t]+)?pid=[0-9]+(?:,[ \t]*ip=[0-9A-Fa-f.:]+)?\)[ \t]*)?"
"""Ray's ``(TaskRunner pid=123)``, ``(RayWorker pid=1, ip=10.0.0.2)``, ``(pid=123)`` before a worker's line."""

_ROLES: Final[dict[str, tuple[str, str | None]]] = {
    "actor/grad_norm": ("grad_norm", None),
    "actor/lr": ("lr", None),
    "timing_s/step": ("step_time_s", "s"),
    "perf/throughput": ("throughput_tok_s", None),
}


def _verl_key(key: str) -> tuple[str, str | None]:
    return _ROLES.get(key) or canonical_name(key)


class VerlConsoleReader(TextLogReader):
    name = "verl_console"
    description = "verl (RL fine-tuning) console: '(TaskRunner pid=N) step:N - actor/pg_loss:x - critic/score/mean:x'"
    kinds = (
        LineKind(
            name="step",
            prefix=RAY_PREFIX + r"step:(?P<step>[0-9]+)[ \t]+-[ \t]+(?=[A-Za-z_])",
            pairs=(
                r"(?P<key>[A-Za-z_][A-Za-z0-9_/@.\-]*):(?:np\.float(?:16|32|64)\()?(?P<val>" + NUMBER + r")\)?"
                r"(?=[ \t]+-[ \t]|[ \t\r]*$)"
            ),
            keymap=_verl_key,
            run_level=True,
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.95 if n_metric_lines >= 2 else 0.8
