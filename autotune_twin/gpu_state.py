"""What the twin's simulated GPUs hold, shared between twin servers and ``--twin-inventory``.

A running twin server publishes the memory it holds on each simulated GPU (CUDA context,
weights, pools, graphs, activations) to a small file; the inventory adds up the files of live
servers, so NVML's view of a real GPU (used memory, the processes holding it) has a twin
counterpart that autotune reads through the same inventory path: the idle check before a launch,
the peak while measuring, the release wait after a stop.

Each autotune process is its own simulated host: servers and inventory calls are keyed by their
parent process (or ``$AUTOTUNE_TWIN_HOST``), so two studies on one machine, as the several-host
tests run them, do not see each other's twins.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from passmodel.profile import TwinProfile

HOST_ENV = "AUTOTUNE_TWIN_HOST"


class Holding(BaseModel):
    """One server's memory on the simulated GPUs it uses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pid: int
    started: str | None
    used_bytes: dict[int, int]


def host_key() -> str:
    return os.environ.get(HOST_ENV) or str(os.getppid())


def state_dir(host: str | None = None) -> Path:
    return Path(tempfile.gettempdir()) / f"autotune-twin-gpus-{os.getuid()}" / (host or host_key())


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (Linux), so a reused pid is not taken for the server."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19] if fields[0] != "Z" else None


def _alive(holding: Holding) -> bool:
    try:
        os.kill(holding.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    started = start_time(holding.pid)
    if Path("/proc").is_dir():
        return started is not None and (holding.started is None or started == holding.started)
    return True


def visible_devices(count: int, needed: int) -> list[int]:
    """The simulated GPUs a server uses: ``CUDA_VISIBLE_DEVICES`` if set, else the first ``needed``."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if raw:
        try:
            devices = [int(part) for part in raw.split(",") if part.strip()]
        except ValueError:
            devices = []
        if devices:
            return [d for d in devices if 0 <= d < count][:needed]
    return list(range(min(needed, count)))


class Publisher:
    """The file one server keeps up to date while it holds memory; removed when it ends."""

    def __init__(self, devices: Sequence[int]) -> None:
        self.devices = list(devices)
        self.pid = os.getpid()
        self.path = state_dir() / f"{self.pid}.json"

    def hold(self, bytes_per_gpu: float) -> None:
        holding = Holding(
            pid=self.pid, started=start_time(self.pid), used_bytes={d: int(bytes_per_gpu) for d in self.devices}
        )
        partial = self.path.with_suffix(".tmp")
        for attempt in range(3):  # this host's last other server may remove the folder meanwhile
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                partial.write_text(holding.model_dump_json())
                partial.replace(self.path)  # readers never see half a file
                return
            except FileNotFoundError:
                if attempt == 2:
                    raise

    def release(self) -> None:
        self.path.unlink(missing_ok=True)
        try:
            self.path.parent.rmdir()  # this host's last server leaves no empty folder behind
        except OSError:
            pass


def holdings(host: str | None = None) -> list[Holding]:
    """Live servers' holdings on this simulated host; files of dead servers are removed."""
    found: list[Holding] = []
    folder = state_dir(host)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            holding = Holding.model_validate(json.loads(path.read_text()))
        except (OSError, ValueError, ValidationError):
            continue  # being replaced or removed right now
        if _alive(holding):
            found.append(holding)
        else:
            path.unlink(missing_ok=True)
    return found


def inventory(profile: TwinProfile, holdings: Sequence[Holding] = ()) -> dict[str, Any]:
    """The simulated GPU inventory, in the schema autotune's GPU reader expects.

    ``holdings``: the memory running twin servers hold (:mod:`autotune_twin.gpu_state`), shown
    as used memory and as the processes holding it, the way NVML shows a real server.
    """
    gpus = profile.gpus

    def gpu(index: int) -> dict[str, Any]:
        held = [(h.pid, h.used_bytes[index]) for h in holdings if index in h.used_bytes]
        used = min(gpus.memory_total_bytes, gpus.idle_used_bytes + sum(b for _, b in held))
        return {
            "index": index,
            "name": f"{gpus.name} (simulated)",
            "uuid": f"TWIN-GPU-{index}",
            "memory_total_bytes": gpus.memory_total_bytes,
            "memory_used_bytes": used,
            "memory_free_bytes": gpus.memory_total_bytes - used,
            "memory_bus_width_bits": gpus.memory_bus_width_bits,
            "memory_max_clock_mhz": gpus.memory_max_clock_mhz,
            "bandwidth_bytes_per_s": gpus.bandwidth_bytes_per_s,
            "processes": [{"pid": pid, "used_memory_bytes": b} for pid, b in held],
        }

    return {
        "driver_version": "twin (simulated)",
        "simulated": True,
        "gpus": [gpu(index) for index in range(gpus.count)],
    }
