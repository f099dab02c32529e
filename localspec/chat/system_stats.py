"""Memory and CPU for the gauges: VRAM per GPU through NVML (nvidia-ml-py), RAM and CPU
through psutil. No textual here.

Every NVML failure (package missing, no driver, no NVIDIA GPU) becomes a plain sentence in
:attr:`SystemStats.gpu_note`; sampling never raises.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    used: int
    total: int


@dataclass(frozen=True)
class SystemStats:
    gpus: tuple[GpuMemory, ...] = ()
    gpu_note: str = ""               # why there is no VRAM figure, when there is none
    ram_used: int = 0
    ram_total: int = 0
    process_rss: int = 0             # this process (models on the CPU live here)
    cpu_percent: float = 0.0         # whole machine, since the previous sample
    cpu_count: int = 0


def _decode(x) -> str:
    return x.decode("utf-8", errors="replace") if isinstance(x, bytes) else str(x)


class SystemMonitor:
    """Samples memory and CPU; NVML is initialised once, lazily."""

    def __init__(self, nvml=None, psutil_module=None):
        self._nvml = nvml
        self._nvml_ready = False
        self._nvml_note = ""
        self._handles: list = []
        self._psutil = psutil_module
        self._proc = None
        self._started = False

    def _init_nvml(self) -> None:
        self._started = True
        nv = self._nvml
        if nv is None:
            try:
                import pynvml as nv  # the nvidia-ml-py package
            except ImportError:
                self._nvml_note = "VRAM: no GPU monitoring (nvidia-ml-py is not installed)"
                return
        try:
            nv.nvmlInit()
            n = nv.nvmlDeviceGetCount()
            self._handles = [(i, nv.nvmlDeviceGetHandleByIndex(i)) for i in range(n)]
        except Exception as exc:
            reason = str(exc) or type(exc).__name__
            self._nvml_note = f"no NVIDIA GPU ({reason}): models run in RAM"
            return
        if not self._handles:
            self._nvml_note = "no NVIDIA GPU found; models run in RAM"
            return
        self._nvml = nv
        self._nvml_ready = True

    def sample(self) -> SystemStats:
        if not self._started:
            self._init_nvml()
        gpus: list[GpuMemory] = []
        note = self._nvml_note
        if self._nvml_ready:
            nv = self._nvml
            for i, h in self._handles:
                try:
                    mem = nv.nvmlDeviceGetMemoryInfo(h)
                    gpus.append(GpuMemory(i, _decode(nv.nvmlDeviceGetName(h)), int(mem.used), int(mem.total)))
                except Exception as exc:
                    note = f"VRAM of GPU {i} unreadable ({exc})"
        ps = self._psutil
        if ps is None:
            import psutil as ps

            self._psutil = ps
        try:
            vm = ps.virtual_memory()
            if self._proc is None:
                self._proc = ps.Process(os.getpid())
                ps.cpu_percent(None)  # the first call only starts the measurement
            rss = int(self._proc.memory_info().rss)
            cpu = float(ps.cpu_percent(None))
            return SystemStats(tuple(gpus), note, int(vm.total - vm.available), int(vm.total), rss, cpu,
                               ps.cpu_count() or 0)
        except Exception:
            return SystemStats(tuple(gpus), note)

    def close(self) -> None:
        if self._nvml_ready:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml_ready = False


@dataclass
class StaticMonitor:
    """A monitor that always reports the same figures (tests, screenshots)."""

    stats: SystemStats = field(default_factory=SystemStats)

    def sample(self) -> SystemStats:
        return self.stats

    def close(self) -> None:
        pass
