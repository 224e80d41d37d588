"""GPU figures of one rank for :class:`ingest.training.monitor.StabilityMonitor`: peak memory every
step; NVML utilisation, temperature and power less often (through ``torch.cuda``, which asks
``pynvml``)."""

from __future__ import annotations

import math
import time

import torch

GIB = float(2**30)


class GpuSampler:
    """GPU memory every step (peak allocated since the previous step, GiB), NVML utilisation,
    temperature and power at most every ``interval_s`` seconds. NVML figures are dropped for good the
    first time NVML is unavailable (no ``pynvml``), so a step never pays for a failing query twice."""

    def __init__(self, device: int, interval_s: float) -> None:
        self.device = device
        self.interval_s = interval_s
        self._nvml = True
        self._last_sample = -math.inf

    def sample(self) -> dict[str, float]:
        """This step's GPU figures under their canonical names (``gpu_mem_gb``, and ``gpu_util``,
        ``gpu_temp_c``, ``gpu_power_w`` when NVML is due and available)."""
        metrics = {"gpu_mem_gb": torch.cuda.max_memory_allocated(self.device) / GIB}
        torch.cuda.reset_peak_memory_stats(self.device)
        now = time.monotonic()
        if self._nvml and now - self._last_sample >= self.interval_s:
            self._last_sample = now
            try:
                metrics["gpu_util"] = float(torch.cuda.utilization(self.device))
                metrics["gpu_temp_c"] = float(torch.cuda.temperature(self.device))
                metrics["gpu_power_w"] = float(torch.cuda.power_draw(self.device)) / 1000.0  # NVML reports mW
            except (ModuleNotFoundError, ImportError, RuntimeError, ValueError):
                self._nvml = False
        return metrics
