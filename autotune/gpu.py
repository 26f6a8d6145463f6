"""GPU inventory: what the GPUs are, how much memory they have free, and their bandwidth.

Real GPUs are read through NVML (``import pynvml``, from the nvidia-ml-py package). A search space
may name an inventory command instead (the twin's ``--twin-inventory``), which prints the same
schema as JSON; the rest of autotune cannot tell the two apart. NVML errors are translated here.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import Field, ValidationError

from autotune.errors import GPUError
from autotune.models import Frozen
from autotune.space import GPUSpec, resolve_command

T = TypeVar("T")


class GpuProcess(Frozen):
    pid: int
    used_memory_bytes: int | None


class GpuInfo(Frozen):
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


class GpuInventory(Frozen):
    driver_version: str
    simulated: bool = False
    gpus: list[GpuInfo]

    def select(self, devices: Sequence[int] | None, *, source: Path | None = None) -> GpuInventory:
        """The GPUs ``devices`` names (``gpus.devices`` of the space read from ``source``)."""
        if devices is None:
            return self
        known = {g.index for g in self.gpus}
        missing = [d for d in devices if d not in known]
        if missing:
            where = f"{source}: gpus.devices" if source is not None else "gpus.devices"
            raise GPUError(f"{where}: GPU {missing[0]} is not in the inventory; it has GPUs {sorted(known)}")
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


def read_inventory(spec: GPUSpec, *, source: Path | None = None) -> GpuInventory:
    """The GPUs this space (read from ``source``) runs on (only the selected devices)."""
    if spec.inventory == "none":  # a CPU engine: nothing to read, nothing to predict
        return GpuInventory(driver_version="none (CPU)", gpus=[])
    inventory = read_nvml() if spec.inventory == "nvml" else read_command(resolve_command(spec.inventory))
    return inventory.select(spec.devices, source=source)


def check_devices(spec: GPUSpec, *, source: Path | None = None) -> None:
    """Refuse ``gpus.devices`` that the inventory does not have, where it can be read here: an
    inventory command (the twin's) always, NVML only where a driver answers, since a space may be
    checked on another machine than the one it will run on."""
    if spec.devices is None or spec.inventory == "none":
        return
    if spec.inventory == "nvml":
        try:
            inventory = read_nvml()
        except GPUError:
            return
    else:
        inventory = read_command(resolve_command(spec.inventory))
    inventory.select(spec.devices, source=source)


IDLE_TOLERANCE_BYTES = 512 * 2**20


class Busy(Frozen):
    """Why the GPUs are not idle (empty reason: idle)."""

    idle: bool
    reason: str = ""


def check_idle(inventory: GpuInventory, baseline: GpuInventory, *, tolerance: float = IDLE_TOLERANCE_BYTES) -> Busy:
    """Idle: no compute process on the GPUs and no more memory used than at the study's start.

    Another process on one GPU shrinks every rank's budget (SGLang takes the minimum), so a
    trial launched then would be measured wrong.
    """
    before = {g.index: g.memory_used_bytes for g in baseline.gpus}
    for gpu in inventory.gpus:
        if gpu.processes:
            pids = ", ".join(str(p.pid) for p in gpu.processes)
            return Busy(idle=False, reason=f"GPU {gpu.index} is used by process(es) {pids}")
        extra = gpu.memory_used_bytes - before.get(gpu.index, 0)
        if extra > tolerance:
            return Busy(idle=False, reason=f"GPU {gpu.index} has {extra / 2**30:.1f} GiB more in use than at the start")
    return Busy(idle=True)


def wait_for(
    read: Callable[[], GpuInventory],
    condition: Callable[[GpuInventory], Busy],
    *,
    timeout_s: float,
    poll_s: float = 2.0,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> tuple[Busy, float]:
    """Poll the GPUs until ``condition`` says idle or the time is up; (last verdict, seconds waited)."""
    import time

    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    started = clock()
    while True:
        verdict = condition(read())
        waited = clock() - started
        if verdict.idle or waited >= timeout_s:
            return verdict, waited
        sleep(poll_s)


def used_bytes(inventory: GpuInventory) -> float:
    """The most memory used on any of the GPUs (the tightest rank)."""
    return max((g.memory_used_bytes for g in inventory.gpus), default=0)


class Roofline(Frozen):
    """Decode speed against the memory-bandwidth ceiling of the GPUs."""

    ceiling_tok_s: float = Field(description="tok/s if every pass read its bytes at full bandwidth")
    decode_tok_s: float = Field(description="the measured decode tok/s")
    bytes_per_pass: float
    unknown: str | None = Field(
        default=None, description="why the ceiling is unknown (then ceiling_tok_s reads every weight: a floor of it)"
    )

    @property
    def share(self) -> float | None:
        """Measured tok/s / ceiling; None where the ceiling is unknown or the rate passes it (the count is wrong)."""
        share = self.decode_tok_s / self.ceiling_tok_s
        return None if self.unknown is not None or share > 1.0 else share


def roofline(
    *,
    decode_tok_s: float,
    accept_length: float | None,
    weights_bytes_per_gpu: float,
    kv_bytes_per_token_per_gpu: float | None,
    mean_context_tokens: float,
    bandwidth_bytes_per_s: float,
    draft_bytes_per_pass: float = 0.0,
    unknown: str | None = None,
) -> Roofline:
    """Each decode pass reads ``weights_bytes_per_gpu`` (per GPU, in parallel across the TP ranks) plus
    the KV it attends to, plus what its draft passes read, and yields ``accept_length`` tokens."""
    per_pass = weights_bytes_per_gpu + (kv_bytes_per_token_per_gpu or 0.0) * mean_context_tokens + draft_bytes_per_pass
    ceiling = bandwidth_bytes_per_s / per_pass * (accept_length or 1.0)
    return Roofline(ceiling_tok_s=ceiling, decode_tok_s=decode_tok_s, bytes_per_pass=per_pass, unknown=unknown)
