"""Real-GPU check of autotune's NVML side: inventory, a foreign process seen as busy, release wait.

Run on a machine with an NVIDIA GPU and PyTorch: ``python benchmarks/gpu_busy_check.py [--gib 4]``.
It reads the inventory, starts a separate process that allocates GiBs with PyTorch, checks that
autotune's idle check calls the GPU busy (naming the process when NVML lists it), ends that process
and measures how long NVML takes to show the memory released.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from autotune.gpu import IDLE_TOLERANCE_BYTES, Busy, check_idle, read_nvml, used_bytes, wait_for

HOG = """
import sys, time, torch
x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda")
x.fill_(1); torch.cuda.synchronize()
print("allocated", flush=True)
time.sleep(600)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=4.0)
    args = parser.parse_args()
    baseline = read_nvml()
    print("inventory:", baseline.model_dump_json(indent=2))
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(args.gib)], stdout=subprocess.PIPE, text=True)
    assert hog.stdout is not None
    started = time.monotonic()
    line = hog.stdout.readline().strip()  # the allocation is done when it says so
    print(f"foreign process {hog.pid}: {line} after {time.monotonic() - started:.1f} s")
    busy = read_nvml()
    verdict = check_idle(busy, baseline)
    print(
        "while it runs:",
        json.dumps(
            {
                "idle": verdict.idle,
                "reason": verdict.reason,
                "processes": [[p.model_dump() for p in g.processes] for g in busy.gpus],
                "used_gib": [round(g.memory_used_bytes / 2**30, 2) for g in busy.gpus],
            }
        ),
    )
    hog.kill()
    hog.wait()
    before = used_bytes(baseline)
    released, waited = wait_for(
        read_nvml, lambda inv: Busy(idle=used_bytes(inv) <= before + IDLE_TOLERANCE_BYTES), timeout_s=120, poll_s=0.05
    )
    print(
        f"after it ended: memory released={released.idle} after {waited:.2f} s "
        f"(used now {used_bytes(read_nvml()) / 2**30:.2f} GiB, before {before / 2**30:.2f} GiB)"
    )
    print("idle again:", check_idle(read_nvml(), baseline).model_dump())
    return 0 if not verdict.idle and released.idle else 1


if __name__ == "__main__":
    sys.exit(main())
