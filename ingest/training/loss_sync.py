"""The cross-rank mean of every logged loss, all-reduced in batches without blocking the training step.

:class:`LossReducer` queues each step's loss and sends the losses of about ``LOSS_MEAN_INTERVAL_S``
seconds of steps in one asynchronous all-reduce; :class:`LossMean` is one step's mean, readable once
its batch has arrived. The protocol that keeps every rank cutting its batches at the same steps is
described on :class:`LossReducer`. Used by :class:`ingest.training.monitor.StabilityMonitor` under a
process group of more than one rank.
"""

from __future__ import annotations

import time
from collections import deque

import torch
import torch.distributed as dist

from ingest.errors import StabScopeError

LOSS_MEAN_INTERVAL_S = 0.5
"""About how often (rank 0's wall time) the ranks all-reduce the losses logged since the last time."""
_MAX_LOSS_BATCH = 64
"""Most steps one loss all-reduce carries (bounds how far the run-level rows lag on fast steps)."""
_PROPOSAL_LEAD = 8
"""A batch proposes the size of the batch this many after it, so a rank may run that many batches
ahead of the slowest before it waits for a proposal."""
_MAX_BATCHES_IN_FLIGHT = 100
"""Loss all-reduces that may be outstanding before ``log`` waits (a rank that far behind is stuck,
and the rows must not pile up)."""


class LossMean:
    """The cross-rank mean of one step's loss: known once the all-reduce carrying it has arrived."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.batch: _LossBatch | None = None
        """The all-reduce carrying this loss; None until the batch it belongs to is full."""
        self.mean: float | None = None

    def arrived(self) -> bool:
        """True once the mean can be read without waiting."""
        return self.mean is not None or (self.batch is not None and self.batch.arrived())

    def value(self) -> float:
        """The mean (nats/token), waiting for its all-reduce if it is on the way."""
        if self.mean is None:
            if self.batch is None:
                raise StabScopeError(
                    f"the cross-rank loss mean of step {self.step} is all-reduced together with the next "
                    f"steps' losses (about every {LOSS_MEAN_INTERVAL_S} s) and has not been sent yet: read "
                    "it after the monitor's close(), or read this rank's loss from rank_metrics"
                )
            self.batch.finish()
        assert self.mean is not None
        return self.mean


class _LossBatch:
    """One asynchronous all-reduce of several steps' losses, plus rank 0's proposal for the size of a
    later batch (the other ranks add 0, so the sum is rank 0's number, the same on every rank)."""

    def __init__(
        self,
        means: list[LossMean],
        losses: list[float],
        proposal: int,
        world_size: int,
        device: torch.device,
        group: dist.ProcessGroup | None,
    ) -> None:
        self._means = means
        for mean in means:
            mean.batch = self
        self._tensor = torch.tensor([*losses, float(proposal)], dtype=torch.float64, device=device)
        self._work = dist.all_reduce(self._tensor, group=group, async_op=True)
        self._world_size = world_size
        self.proposal = 0

    def arrived(self) -> bool:
        return self._work is None or bool(self._work.is_completed())

    def finish(self) -> None:
        """Wait for the all-reduce and hand each step its mean."""
        if self._work is None:
            return
        self._work.wait()
        self._work = None
        *sums, proposal = self._tensor.tolist()
        for mean, total in zip(self._means, sums, strict=True):
            mean.mean = total / self._world_size
        self.proposal = int(proposal)


class LossReducer:
    """The cross-rank mean of every logged loss, without a collective on every step.

    One scalar all-reduce a step cost several percent of the 2-rank gloo demo's step (each rank
    pinned to a core; the collective's threads share it with the training step), whether ``log``
    waited for it or not (``python -m bench --goals 5`` measures the monitor's cost). So the losses
    of about ``LOSS_MEAN_INTERVAL_S`` seconds of steps go in one all-reduce: one a step for steps
    that long or longer, up to ``_MAX_LOSS_BATCH`` for fast ones.

    Every rank must cut its batches at the same steps, and only rank 0's clock decides: the first
    ``_PROPOSAL_LEAD`` batches hold one step each, and each batch carries rank 0's proposal for the
    size of the batch that many after it. Every rank reads a proposal before it needs it; a rank
    waits for one only when it runs that many batches ahead of another (DDP keeps ranks within a
    step of each other).
    """

    def __init__(self, rank: int, world_size: int, device: torch.device, group: dist.ProcessGroup | None) -> None:
        self._rank, self._world_size, self._device, self._group = rank, world_size, device, group
        self._sizes: deque[int] = deque([1] * _PROPOSAL_LEAD)
        """Agreed sizes of the next batches, the one being filled first."""
        self._filling: list[tuple[LossMean, float]] = []
        self._in_flight: deque[_LossBatch] = deque()
        self._step_times: deque[float] = deque(maxlen=8)
        self.reductions = 0
        """How many all-reduces of losses this rank has started."""

    def add(self, step: int, loss: float, step_time: float | None) -> LossMean:
        """Queue this step's loss; sends the batch once it holds the agreed number of steps."""
        if step_time is not None:
            self._step_times.append(step_time)
        mean = LossMean(step)
        self._filling.append((mean, loss))
        if len(self._filling) >= self._next_size():
            self._sizes.popleft()
            self._send()
        return mean

    def collect(self, *, wait: bool) -> None:
        """Read the batches that arrived (all sent ones with ``wait``), in order: their proposals
        are the sizes of later batches."""
        while self._in_flight and (
            wait or self._in_flight[0].arrived() or len(self._in_flight) > _MAX_BATCHES_IN_FLIGHT
        ):
            batch = self._in_flight.popleft()
            batch.finish()
            self._sizes.append(batch.proposal)

    def settle(self, timeout_s: float) -> None:
        """Read the batches that arrive within ``timeout_s`` (a failed run's exit: a batch that a
        failed rank never joined does not arrive)."""
        deadline = time.monotonic() + timeout_s
        while self._in_flight and time.monotonic() < deadline:
            self.collect(wait=False)
            if self._in_flight and not self._in_flight[0].arrived():
                time.sleep(0.01)

    def send_the_rest(self) -> None:
        """Send the losses of a batch that is not full yet (``sync`` and ``close``, which every rank
        calls after the same steps, so every rank sends the same rest and skips the same size)."""
        if self._filling:
            self._sizes.popleft()
            self._send()

    def _next_size(self) -> int:
        while not self._sizes:  # the batch that proposes it was sent _PROPOSAL_LEAD batches ago
            self.collect(wait=False)
            if not self._sizes:
                self._in_flight[0].finish()
        return self._sizes[0]

    def _send(self) -> None:
        means = [mean for mean, _ in self._filling]
        losses = [loss for _, loss in self._filling]
        self._filling = []
        proposal = self._proposal() if self._rank == 0 else 0
        self._in_flight.append(_LossBatch(means, losses, proposal, self._world_size, self._device, self._group))
        self.reductions += 1

    def _proposal(self) -> int:
        if not self._step_times:
            return 1
        typical = sorted(self._step_times)[len(self._step_times) // 2]
        return max(1, min(_MAX_LOSS_BATCH, round(LOSS_MEAN_INTERVAL_S / max(typical, 1e-9))))
