"""RL fine-tuning consoles: verl's (PPO, GRPO, DAPO ...) metric line, printed by its console
logger behind Ray's process prefix::

    (TaskRunner pid=2671) step:12 - actor/pg_loss:-0.0123 - actor/ppo_kl:0.0004 - actor/grad_norm:0.41 - ...

(``verl/utils/tracking.py``'s console backend joins ``step:N`` and every numeric ``key:value`` of the
step with `` - ``; older versions run it in ``(main_task pid=...)``, an un-prefixed driver prints it
bare). Roles: ``actor/grad_norm`` is ``grad_norm``, ``actor/lr`` is ``lr``, ``timing_s/step`` (the
whole step, seconds) is ``step_time_s`` and ``perf/throughput`` (tokens/s per GPU) is
``throughput_tok_s``. The policy loss (``actor/pg_loss``) is the run's ``loss``: a verl step line
carries no other loss of the model being trained (the critic's ``critic/vf_loss`` trains the value
model beside it), so the objective the run minimises is the one the pages and detectors read; a
blow-up of it (a policy collapsing to one-token answers) is the run's incident. The KL
(``actor/ppo_kl``, ``actor/kl_loss``), the reward (``critic/score/mean``, ``critic/rewards/mean``) and
the response length (``response_length/mean``) keep their names. Values printed through numpy's or
torch's repr (``np.float64(0.02)``, ``np.int32(16)``, ``tensor(0.41)``) are their numbers.
"""

from __future__ import annotations

from typing import Final

from ingest.formats.aliases import canonical_name
from ingest.formats.numbers import NUMBER
from ingest.formats.textlog import LineKind, TextLogReader

RAY_PREFIX: Final = r"(?:\((?:[A-Za-z_][A-Za-z0-9_.]*[ \t]+)?pid=[0-9]+(?:,[ \t]*ip=[0-9A-Fa-f.:]+)?\)[ \t]*)?"
"""Ray's ``(TaskRunner pid=123)``, ``(RayWorker pid=1, ip=10.0.0.2)``, ``(pid=123)`` before a worker's line."""

_WRAPPER: Final = r"(?:(?:np|numpy)\.(?:float|int|uint)(?:8|16|32|64)\(|tensor\()?"
"""numpy's and torch's repr around a number (``np.float64(``, ``np.int32(``, ``tensor(``); its ``)`` follows."""

_ROLES: Final[dict[str, tuple[str, str | None]]] = {
    "actor/pg_loss": ("loss", None),
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
                r"(?P<key>[A-Za-z_][A-Za-z0-9_/@.\-]*):" + _WRAPPER + r"(?P<val>" + NUMBER + r")\)?"
                r"(?=[ \t]+-[ \t]|[ \t\r]*$)"
            ),
            keymap=_verl_key,
            run_level=True,
        ),
    )

    def score(self, n_metric_lines: int, text: str) -> float:
        return 0.95 if n_metric_lines >= 2 else 0.8
