"""Real-GPU check of the headroom learned from a served launch (needs an NVIDIA GPU and PyTorch).

``python benchmarks/headroom_check.py [--weights-gib 40] [--activation-gib 6]``

A stand-in server (a separate PyTorch process) sizes its memory the way SGLang does and prints
SGLang's startup lines: the free memory before loading, weights, a static pool of
``fraction x free - weights``, CUDA graphs captured for a range of batch sizes, then, when asked to
measure, a prefill-sized activation that the caching allocator keeps. autotune reads that log with
the SGLang engine, samples NVML the way a trial does, and derives the run-time memory outside the
graphs. The feasibility model then names the largest fraction it expects to fit; the stand-in is
launched just above and just below it to see whether the GPU agrees.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass

from autotune.engines.sglang import SGLangEngine
from autotune.feasibility import FeasibilityModel
from autotune.gpu import read_nvml, used_bytes
from autotune.headroom_figures import headroom_use

GIB = 2**30

SERVER = r"""
import sys, time, torch
fraction, weights_gib, act_gib = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
GIB = 2**30
say = lambda text: print(text, flush=True)
torch.zeros(1, device="cuda")  # the CUDA context, before the server measures free memory
free = torch.cuda.mem_get_info()[0]
say(f"Load weight begin. avail mem={free / GIB:.2f} GB")
weights = torch.empty(int(weights_gib * GIB), dtype=torch.uint8, device="cuda")
after = torch.cuda.mem_get_info()[0]
say(f"Load weight end. type=StandIn, dtype=torch.bfloat16, avail mem={after / GIB:.2f} GB, "
    f"mem usage={(free - after) / GIB:.2f} GB.")
rest = fraction * free - weights.numel()
if rest <= 0:
    raise ValueError(f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={fraction}")
pool = torch.empty(int(rest), dtype=torch.uint8, device="cuda")
half = rest / 2 / GIB
say(f"KV Cache is allocated. #tokens: {int(rest) // 65536}, K size: {half:.2f} GB, V size: {half:.2f} GB")
say(f"Memory pool end. avail mem={torch.cuda.mem_get_info()[0] / GIB:.2f} GB")
hidden, sizes = 8192, [1, 2, 4, 8, 16, 32, 48]
w1 = torch.randn(hidden, 4 * hidden, device="cuda", dtype=torch.bfloat16)
w2 = torch.randn(4 * hidden, hidden, device="cuda", dtype=torch.bfloat16)
before = torch.cuda.mem_get_info()[0]
say(f"Capture cuda graph begin. This can take up to several minutes. avail mem={before / GIB:.2f} GB")
say(f"Capture cuda graph bs {sizes}")
shared, graphs = torch.cuda.graph_pool_handle(), []
started = time.monotonic()
for bs in reversed(sizes):  # largest first, one pool, as SGLang captures
    x = torch.randn(bs * 4, hidden, device="cuda", dtype=torch.bfloat16)  # 4 tokens per request
    for _ in range(2):
        (x @ w1).relu() @ w2  # warm-up outside the graph
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=shared):
        y = (x @ w1).relu() @ w2
    graphs.append((graph, x, y))
end = torch.cuda.mem_get_info()[0]
say(f"Capture cuda graph end. Time elapsed: {time.monotonic() - started:.2f} s. "
    f"mem usage={(before - end) / GIB:.2f} GB. avail mem={end / GIB:.2f} GB.")
say("The server is fired up and ready to roll!")
for line in sys.stdin:
    if line.strip() == "measure":
        for graph, _, _ in graphs:
            graph.replay()
        activation = torch.empty(int(act_gib * GIB), dtype=torch.uint8, device="cuda")
        activation.fill_(1)
        torch.cuda.synchronize()
        del activation  # freed, but the caching allocator keeps it, as after a real prefill
        say("measured")
    else:
        break
"""


@dataclass
class Run:
    fraction: float
    served: bool
    log: str
    peak_used: float | None = None
    last_line: str = ""


def serve(fraction: float, weights_gib: float, activation_gib: float) -> Run:
    """Launch the stand-in, measure once (sampling NVML like a trial), stop it, wait for the release."""
    before = used_bytes(read_nvml())
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(fraction), str(weights_gib), str(activation_gib)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    lines: list[str] = []
    peak = None
    for line in proc.stdout:
        lines.append(line)
        if "fired up" in line:
            proc.stdin.write("measure\n")
            proc.stdin.flush()
        elif line.strip() == "measured":
            peak = used_bytes(read_nvml())  # the "stopping" sample of a trial
            proc.stdin.write("stop\n")
            proc.stdin.flush()
    proc.wait()
    deadline = time.monotonic() + 60
    while used_bytes(read_nvml()) > before + 256 * 2**20 and time.monotonic() < deadline:
        time.sleep(0.1)
    text = "".join(lines)
    last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
    return Run(fraction=fraction, served=peak is not None and proc.returncode == 0, log=text, peak_used=peak,
               last_line=last[:160])  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights-gib", type=float, default=40.0)
    parser.add_argument("--activation-gib", type=float, default=6.0)
    parser.add_argument("--fraction", type=float, default=0.80, help="the first, served launch")
    args = parser.parse_args()
    inventory = read_nvml()
    gpu = inventory.gpus[0]
    print(f"GPU: {gpu.name}, {gpu.memory_total_bytes / GIB:.1f} GiB, {gpu.memory_free_bytes / GIB:.1f} GiB free")
    engine = SGLangEngine()
    model = FeasibilityModel(engine.memory_rules, free_bytes=gpu.memory_free_bytes,
                             total_bytes=gpu.memory_total_bytes, weight_bytes=args.weights_gib * GIB)  # fmt: skip
    flags = {"mem-fraction-static": args.fraction, "cuda-graph-max-bs-decode": 48, "speculative-num-draft-tokens": 4}
    first = serve(args.fraction, args.weights_gib, args.activation_gib)
    facts = engine.memory_facts(first.log)
    print(first.log)
    if not first.served or facts is None or first.peak_used is None:
        print(f"the first launch did not serve: {first.last_line}")
        return 1
    assert facts.free_at_start_bytes and facts.avail_after_pools_bytes is not None and facts.graph_bytes is not None
    use = headroom_use(flags, server_free_bytes=facts.free_at_start_bytes,
                       avail_after_pools_bytes=facts.avail_after_pools_bytes, graph_bytes=facts.graph_bytes,
                       free_at_peak_bytes=gpu.memory_total_bytes - first.peak_used, trial=0)  # fmt: skip
    model.observe_server_free(facts.free_at_start_bytes)
    model.observe_graph(facts.graph_bytes, flags=flags, logged_batch=facts.graph_batch)
    model.observe_headroom(use)
    print(
        f"server free at start {facts.free_at_start_bytes / GIB:.2f} GiB, graphs {facts.graph_bytes / GIB:.2f} GiB "
        f"(batch {facts.graph_batch}), NVML peak {first.peak_used / GIB:.2f} GiB"
    )
    print(
        f"run-time memory outside the graphs: {use.runtime_bytes / GIB:.2f} GiB "
        f"(the stand-in's activation: {args.activation_gib:.2f} GiB)"
    )
    feasible = [f / 100 for f in range(50, 100) if model.predict({**flags, "mem-fraction-static": f / 100}).feasible]
    boundary = max(feasible)
    print(f"largest fraction predicted to fit: {boundary:.2f}")
    print("| fraction | predicted | on the GPU | last line |")
    print("|---|---|---|---|")
    agree = True
    for fraction in (boundary, round(boundary + 0.01, 2), round(boundary + 0.02, 2)):
        predicted = model.predict({**flags, "mem-fraction-static": fraction})
        run = serve(fraction, args.weights_gib, args.activation_gib)
        agree &= predicted.feasible or not run.served  # never call a launch that serves infeasible
        print(
            f"| {fraction:.2f} | {'fits' if predicted.feasible else 'infeasible'} | "
            f"{'served' if run.served else 'died'} | {run.last_line} |"
        )
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
