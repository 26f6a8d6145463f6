"""Measurement protocol vs a fixed 8-prompt x 512-token run, on the SGLang twin.

For each repeat, one twin server (the hand-found Qwen3.6-27B config) is measured two ways:
- autotune's protocol (warm-up, rounds of the suite until the 95% CI is within ±2%);
- a fixed run like SGLang's bench_speculative.py: 8 prompts x 512 tokens (ignore_eos), one pass,
  the mean of the requests' decode tok/s.
It prints, per method: tokens generated per estimate (median), the estimate's mean, its spread over
the repeats (standard deviation and max - min, relative to the mean), and how often the protocol
said it reached its precision. Run: ``python benchmarks/measurement_protocol.py [--repeats 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from autotune.engines.sglang import SGLangEngine
from autotune.measure import MeasureSettings, run_measurement
from autotune.server import ServerProcess, find_free_port
from autotune.workload import Suite, load_suite

FLAGS = ["--tp-size", "2", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.88",
         "--context-length", "131072", "--max-running-requests", "16", "--mamba-full-memory-ratio", "0.5"]  # fmt: skip


def run_once(base_url: str, suite: Suite, settings: MeasureSettings) -> tuple[float, int, bool]:
    """(estimate, tokens generated including warm-up, precision reached)."""
    result = asyncio.run(run_measurement(SGLangEngine(), base_url, suite, settings))
    tokens = sum(r.completion_tokens for r in result.requests)
    return result.value, tokens, result.precision_reached


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--suite", default="builtin:coding", help="suite for autotune's protocol")
    parser.add_argument("--prompts-per-round", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--target", type=float, default=0.02)
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args()

    protocol = MeasureSettings(
        warmup_requests=1,
        prompts_per_round=args.prompts_per_round,
        max_tokens=args.max_tokens,
        target_rel_ci=args.target,
        min_rounds=3,
        max_rounds=12,
        max_seconds=900,
    )
    fixed = MeasureSettings(warmup_requests=0, max_tokens=512, ignore_eos=True, min_rounds=1, max_rounds=1)
    fixed_suite = Suite(name="fixed-8", prompts=load_suite("builtin:mixed").prompts[:8])
    suite = load_suite(args.suite)
    results: dict[str, list[tuple[float, int, bool]]] = {"autotune protocol": [], "fixed 8 x 512": []}
    console = Console()
    with tempfile.TemporaryDirectory() as scratch:
        port = find_free_port()
        argv = [sys.executable, "-m", "autotune_twin", "--model-path", "Qwen/Qwen3.6-27B", "--port", str(port), *FLAGS]
        server = ServerProcess(argv, env={}, log_path=Path(scratch) / "twin.log", records_dir=Path(scratch) / "rec")
        base_url = f"http://127.0.0.1:{port}"
        with server, httpx.Client() as client:
            if not server.wait_ready(lambda: SGLangEngine().is_ready(client, base_url), timeout_s=120).ready:
                console.print("the twin did not start")
                return 1
            for repeat in range(args.repeats):
                results["autotune protocol"].append(run_once(base_url, suite, protocol))
                results["fixed 8 x 512"].append(run_once(base_url, fixed_suite, fixed))
                console.print(
                    f"repeat {repeat + 1}/{args.repeats}: "
                    + ", ".join(f"{k} {v[-1][0]:.1f}" for k, v in results.items())
                )
    table = Table(title=f"measurement protocol vs fixed run, {args.repeats} repeats (twin, simulated)")
    for column in (
        "method",
        "tokens / estimate (median)",
        "estimate mean tok/s",
        "spread sd",
        "spread max-min",
        "precision reached",
    ):
        table.add_column(column, justify="left" if column == "method" else "right")
    summary = {}
    for method, runs in results.items():
        values = [v for v, _, _ in runs]
        mean = statistics.fmean(values)
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        row = {
            "tokens_median": statistics.median(t for _, t, _ in runs),
            "mean": mean,
            "sd_rel": sd / mean,
            "range_rel": (max(values) - min(values)) / mean,
            "precision_reached": sum(p for _, _, p in runs) if method == "autotune protocol" else None,
            "values": values,
        }
        summary[method] = row
        table.add_row(
            method,
            f"{row['tokens_median']:.0f}",
            f"{mean:.1f}",
            f"{row['sd_rel']:.1%}",
            f"{row['range_rel']:.1%}",
            f"{row['precision_reached']}/{len(runs)}" if row["precision_reached"] is not None else "-",
        )
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
