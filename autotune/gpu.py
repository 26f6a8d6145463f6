"""GPU inventory: what the GPUs are, how much memory they have free, and their bandwidth.

Real GPUs are read through NVML (``import pynvml``, from the nvidia-ml-py package). A search space
may name an inventory command instead (the twin's ``--twin-inventory``), which prints the same
schema as JSON; the rest of autotune cannot tell the two apart. NVML errors are translated here.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.errors import GPUError
from autotune.space import GPUSpec, resolve_command


T = TypeVar("T")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuProcess(_Frozen):
    pid: int
    used_memory_bytes: int | None


class GpuInfo(_Frozen):
    index: int
    name: str
    uuid: str
    memory_total_bytes: int
    memory_used_bytes: int
    memory_free_bytes: int
    memory_bus_width_bits: int | None = None
    memory_max_clock_mhz: int | None = None
    bandwidth_bytes_per_s: float | None = Field(default=None, description="theoretical memory bandwidth")
    processes: list[GpuProcess] = Field(default_factory=list)


class GpuInventory(_Frozen):
    driver_version: str
    simulated: bool = False
    gpus: list[GpuInfo]

    def select(self, devices: Sequence[int] | None) -> GpuInventory:
        if devices is None:
            return self
        known = {g.index for g in self.gpus}
        missing = [d for d in devices if d not in known]
        if missing:
            raise GPUError(f"GPU {missing[0]} does not exist; this machine has GPUs {sorted(known)}")
        return self.model_copy(update={"gpus": [g for g in self.gpus if g.index in devices]})


def theoretical_bandwidth(bus_width_bits: int, max_memory_clock_mhz: int) -> float:
    """Bytes per second: bus width x memory clock x 2 (double data rate), as NVML reports the clock."""
    return bus_width_bits / 8 * max_memory_clock_mhz * 1e6 * 2


def read_nvml() -> GpuInventory:
    try:
        import pynvml
    except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
        raise GPUError("nvidia-ml-py is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise GPUError(
            f"cannot read GPUs: no NVIDIA driver ({exc})",
            hint="run on a machine with an NVIDIA GPU, or use a twin search space",
        ) from None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            bus = _optional(pynvml.nvmlDeviceGetMemoryBusWidth, handle)
            clock = _optional(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_MEM)
            processes = [
                GpuProcess(pid=p.pid, used_memory_bytes=p.usedGpuMemory)
                for p in _optional(pynvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
            ]
            gpus.append(
                GpuInfo(
                    index=index,
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    memory_total_bytes=memory.total,
                    memory_used_bytes=memory.used,
                    memory_free_bytes=memory.free,
                    memory_bus_width_bits=bus,
                    memory_max_clock_mhz=clock,
                    bandwidth_bytes_per_s=theoretical_bandwidth(bus, clock) if bus and clock else None,
                    processes=processes,
                )
            )
        return GpuInventory(driver_version=_text(driver), gpus=gpus)
    except pynvml.NVMLError as exc:
        raise GPUError(f"NVML error while reading GPUs: {exc}") from None
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _optional(func: Callable[..., T], *args: object) -> T | None:
    import pynvml

    try:
        return func(*args)
    except pynvml.NVMLError:
        return None


def read_command(argv: list[str]) -> GpuInventory:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (FileNotFoundError, PermissionError):
        raise GPUError(f"GPU inventory command not found: {argv[0]}") from None
    except subprocess.TimeoutExpired:
        raise GPUError(f"GPU inventory command timed out: {' '.join(argv)}") from None
    if proc.returncode != 0:
        raise GPUError(f"GPU inventory command failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
    try:
        return GpuInventory.model_validate(json.loads(proc.stdout))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise GPUError(f"GPU inventory command printed an unreadable inventory: {exc}") from None


def read_inventory(spec: GPUSpec) -> GpuInventory:
    """The GPUs this space runs on (only the selected devices)."""
    inventory = read_nvml() if spec.inventory == "nvml" else read_command(resolve_command(spec.inventory))
    return inventory.select(spec.devices)
