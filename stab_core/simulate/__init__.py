"""The one generator of synthetic training runs: every simulated run in StabScope comes from here
(the demo runs and the playbook scenarios, the detection measurement, the tests and the benchmarks).

Two noise models feed one output, :class:`SimulatedRun` (per-rank and run-level arrays, events and
meta, with its ground truth apart in ``truth``: the :class:`InjectedSpike` s and the gradient
moments), which :meth:`SimulatedRun.to_view` turns into the ``RunView`` the analyses read:

- the physical model (:mod:`~stab_core.simulate.model`, :func:`simulate_run` of a :class:`SimSpec`):
  a multi-rank run from a loss law, the two-batch gradient-noise model, timing, telemetry and fp16
  loss scaling, with injectable mechanisms (:mod:`~stab_core.simulate.spec`); the shipped runs are
  its specs (:mod:`~stab_core.simulate.presets`);
- the signature model (:mod:`~stab_core.simulate.signatures`, :func:`synthetic_run` of a
  :class:`SyntheticRunSpec`): each spike class with the signature its node of the decision tree looks
  for, one class per segment, for the detection measurement (:mod:`stab_core.evaluation`).

Both are pure (numpy in, arrays out) and deterministic for a seed. The spike causes are the names of
:mod:`stab_core.causes`.
"""

from stab_core.simulate.model import simulate_run
from stab_core.simulate.output import InjectedSpike, SimTruth, SimulatedRun
from stab_core.simulate.presets import Scenario, demo_specs, scenario_specs, scenarios
from stab_core.simulate.schedule import checkpoint_steps
from stab_core.simulate.signatures import SPIKE_CLASSES, SyntheticRunSpec, cause_of, random_spec, synthetic_run
from stab_core.simulate.spec import (
    OPTIONAL_PER_RANK_METRICS,
    PER_RANK_METRICS,
    BatchSkip,
    DataOutlierSpike,
    LrJumpSpike,
    Mechanism,
    NumericalFault,
    RankFault,
    RankGap,
    RouterSeesawSpike,
    SimSpec,
    Straggler,
    WarmupRestart,
)

__all__ = [
    "OPTIONAL_PER_RANK_METRICS",
    "PER_RANK_METRICS",
    "SPIKE_CLASSES",
    "BatchSkip",
    "DataOutlierSpike",
    "InjectedSpike",
    "LrJumpSpike",
    "Mechanism",
    "NumericalFault",
    "RankFault",
    "RankGap",
    "RouterSeesawSpike",
    "Scenario",
    "SimSpec",
    "SimTruth",
    "SimulatedRun",
    "Straggler",
    "SyntheticRunSpec",
    "WarmupRestart",
    "cause_of",
    "checkpoint_steps",
    "demo_specs",
    "random_spec",
    "scenario_specs",
    "scenarios",
    "simulate_run",
    "synthetic_run",
]
