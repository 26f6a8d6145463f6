"""Measurement protocol vs a fixed 8-prompt x 512-token run, on the SGLang twin or a real llama-server.

For each repeat, one server is measured two ways:
- autotune's protocol (warm-up, rounds of the suite until the 95% CI is within ±2%);
- a fixed run like SGLang's bench_speculative.py: 8 prompts x 512 tokens (ignore_eos), one pass,
  the mean of the requests' decode tok/s.
It prints, per method: tokens and seconds per estimate (median), the estimate's mean, its spread
over the repeats (standard deviation and max - min, relative to the mean), and how often the protocol
said it reached its precision. With ``--diagnose`` it also prints where the protocol's round-to-round
noise comes from: each prompt's decode rate per round as the client timed it and as the server
logged it (llama-server's ``eval time`` lines), the first round against the others, and the
spread of completion lengths.

    python benchmarks/measurement_protocol.py --repeats 4                      # the twin (simulated)
    python benchmarks/measurement_protocol.py --llama-server BIN --model T.gguf --draft D.gguf \\
        --flag spec-type=draft-simple --flag gpu-layers=999 --repeats 3 --diagnose
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from autotune.engines import get_engine  # noqa: E402
from autotune.engines.base import Engine  # noqa: E402
from autotune.engines.llamacpp import parse_request_logs  # noqa: E402
from autotune.measure.client import Measurement, run_measurement  # noqa: E402
from autotune.measure.protocol import MeasureSettings  # noqa: E402
from autotune.measure.suites import Suite, load_suite  # noqa: E402
from autotune.server import ServerProcess, find_free_port  # noqa: E402
from autotune.space import FlagValue  # noqa: E402

TWIN_FLAGS = ["--tp-size", "2", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
              "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--mem-fraction-static",
              "0.88", "--context-length", "131072", "--max-running-requests", "16", "--mamba-full-memory-ratio",
              "0.5"]  # fmt: skip


@dataclass
class Run:
    value: float
    tokens: int
    seconds: float
    precision_reached: bool
    measurement: Measurement


def run_once(engine: Engine, base_url: str, suite: Suite, settings: MeasureSettings) -> Run:
    started = time.monotonic()
    result = asyncio.run(run_measurement(engine, base_url, suite, settings))
    tokens = sum(r.completion_tokens for r in result.requests)
    return Run(result.value, tokens, time.monotonic() - started, result.precision_reached, result)


def _flag_value(text: str) -> FlagValue:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return True if text == "" else text


def server_argv(args: argparse.Namespace, port: int) -> tuple[Engine, list[str], str]:
    """The engine, the server's command line and what the table calls it."""
    if args.llama_server is None:
        argv = [sys.executable, "-m", "autotune_twin", "--model-path", "Qwen/Qwen3.6-27B", "--port", str(port),
                *TWIN_FLAGS]  # fmt: skip
        return get_engine("sglang"), argv, "twin, simulated"
    engine = get_engine("llamacpp")
    flags: dict[str, FlagValue] = {}
    for item in args.flag:
        name, _, value = item.partition("=")
        flags[name] = _flag_value(value)
    if args.draft:
        flags["spec-draft-model"] = args.draft
    plan = engine.normalise(flags)
    argv = engine.build_argv([args.llama_server], model=args.model, plan=plan, host="127.0.0.1", port=port)
    return engine, argv, f"llama-server, {Path(args.model).name}"


def diagnose(console: Console, results: dict[str, list[Run]], log_text: str) -> dict[str, float]:
    """Where the round-to-round noise of the protocol's estimate comes from."""
    runs = results["autotune protocol"]
    # Requests in the order they were sent (one at a time): each repeat's protocol run, then its fixed
    # run. llama-server logs one eval line per finished request in the same order (the twin none).
    requests = [r for pair in zip(*results.values(), strict=True) for run in pair for r in run.measurement.requests]
    server_rates = [s.eval_tok_s for s in parse_request_logs(log_text)]
    table = Table(title="per prompt: client decode tok/s (server eval tok/s) by round, first repeat")
    first = runs[0].measurement
    prompts = sorted({r.prompt_id for r in first.requests if r.round >= 0})
    rounds = sorted({r.round for r in first.requests if r.round >= 0})
    table.add_column("prompt")
    for index in rounds:
        table.add_column(f"round {index + 1}", justify="right")
    aligned = len(requests) == len(server_rates)
    lookup = {id(r): rate for r, rate in zip(requests, server_rates, strict=False)} if aligned else {}
    for prompt in prompts:
        cells = []
        for index in rounds:
            match = next((r for r in first.requests if r.prompt_id == prompt and r.round == index), None)
            if match is None or match.decode_tok_s is None:
                cells.append("-")
                continue
            server = lookup.get(id(match))
            cells.append(f"{match.decode_tok_s:.1f}" + (f" ({server:.1f})" if server is not None else ""))
        table.add_row(prompt, *cells)
    console.print(table)

    def rel_sd(values: list[float]) -> float:
        return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0

    per_prompt_client = []
    per_prompt_server = []
    for run in runs:
        for prompt in {r.prompt_id for r in run.measurement.requests if r.round >= 0}:
            group = [r for r in run.measurement.requests if r.prompt_id == prompt and r.round >= 0]
            per_prompt_client.append(rel_sd([r.decode_tok_s for r in group if r.decode_tok_s]))
            rates = [lookup[id(r)] for r in group if id(r) in lookup]
            if len(rates) > 1:
                per_prompt_server.append(rel_sd(rates))
    round_sd = [rel_sd(run.measurement.round_values) for run in runs]
    first_vs_rest = [
        run.measurement.round_values[0] / statistics.fmean(run.measurement.round_values[1:]) - 1
        for run in runs
        if len(run.measurement.round_values) > 1
    ]
    lengths = [rel_sd([float(r.completion_tokens) for r in run.measurement.requests if r.round >= 0]) for run in runs]
    figures = {
        "round_values_rel_sd": statistics.fmean(round_sd),
        "same_prompt_client_rel_sd": statistics.fmean(per_prompt_client) if per_prompt_client else 0.0,
        "same_prompt_server_rel_sd": statistics.fmean(per_prompt_server) if per_prompt_server else float("nan"),
        "first_round_vs_rest": statistics.fmean(first_vs_rest) if first_vs_rest else 0.0,
        "completion_tokens_rel_sd": statistics.fmean(lengths),
    }
    summary = Table(title="noise sources (means over repeats)")
    summary.add_column("figure")
    summary.add_column("value", justify="right")
    for name, value in figures.items():
        summary.add_row(name, f"{value:+.2%}" if name == "first_round_vs_rest" else f"{value:.2%}")
    console.print(summary)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--suite", default="builtin:coding", help="suite for autotune's protocol")
    parser.add_argument("--prompts-per-round", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--ignore-eos", action="store_true", help="fixed-length generations in the protocol")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up requests of the protocol")
    parser.add_argument("--target", type=float, default=0.02)
    parser.add_argument("--max-rounds", type=int, default=12, help="the protocol's round cap")
    parser.add_argument("--max-seconds", type=float, default=900, help="the protocol's time cap")
    parser.add_argument("--llama-server", help="a llama-server binary (default: the SGLang twin)")
    parser.add_argument("--model", help="the GGUF model for llama-server")
    parser.add_argument("--draft", help="a draft GGUF model for llama-server")
    parser.add_argument("--flag", action="append", default=[], help="NAME=VALUE, a llama-server flag (repeatable)")
    parser.add_argument("--diagnose", action="store_true", help="print where the protocol's noise comes from")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args()
    if args.llama_server is not None and args.model is None:
        parser.error("--llama-server needs --model")

    protocol = MeasureSettings(
        warmup_requests=args.warmup,
        prompts_per_round=args.prompts_per_round,
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos,
        target_rel_ci=args.target,
        min_rounds=3,
        max_rounds=args.max_rounds,
        max_seconds=args.max_seconds,
    )
    fixed = MeasureSettings(warmup_requests=0, max_tokens=512, ignore_eos=True, min_rounds=1, max_rounds=1)
    short = [p for p in load_suite("builtin:mixed").prompts if not p.category.startswith("long")]  # fits any context
    fixed_suite = Suite(name="fixed-8", prompts=short[:8])
    suite = load_suite(args.suite)
    results: dict[str, list[Run]] = {"autotune protocol": [], "fixed 8 x 512": []}
    console = Console()
    with tempfile.TemporaryDirectory() as scratch:
        port = find_free_port()
        engine, argv, label = server_argv(args, port)
        log = Path(scratch) / "server.log"
        server = ServerProcess(argv, env={}, log_path=log, records_dir=Path(scratch) / "rec")
        base_url = f"http://127.0.0.1:{port}"
        with server, httpx.Client() as client:
            if not server.wait_ready(lambda: engine.is_ready(client, base_url), timeout_s=300).ready:
                console.print(f"the server did not start; its log:\n{log.read_text(errors='replace')[-3000:]}")
                return 1
            for repeat in range(args.repeats):
                results["autotune protocol"].append(run_once(engine, base_url, suite, protocol))
                results["fixed 8 x 512"].append(run_once(engine, base_url, fixed_suite, fixed))
                console.print(
                    f"repeat {repeat + 1}/{args.repeats}: "
                    + ", ".join(f"{k} {v[-1].value:.1f}" for k, v in results.items())
                )
            log_text = log.read_text(errors="replace")
    table = Table(title=f"measurement protocol vs fixed run, {args.repeats} repeats ({label})")
    for column in ("method", "tokens / estimate", "seconds / estimate", "estimate mean tok/s", "spread sd",
                   "spread max-min", "precision reached"):  # fmt: skip
        table.add_column(column, justify="left" if column == "method" else "right")
    summary: dict[str, object] = {"server": label}
    for method, runs in results.items():
        values = [r.value for r in runs]
        mean = statistics.fmean(values)
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        row = {
            "tokens_median": statistics.median(r.tokens for r in runs),
            "seconds_median": statistics.median(r.seconds for r in runs),
            "mean": mean,
            "sd_rel": sd / mean,
            "range_rel": (max(values) - min(values)) / mean,
            "precision_reached": sum(r.precision_reached for r in runs) if method == "autotune protocol" else None,
            "values": values,
            "ci_rel": [r.measurement.metric(r.measurement.objective).rel_ci95 for r in runs],  # type: ignore[union-attr]
        }
        summary[method] = row
        table.add_row(
            method,
            f"{row['tokens_median']:.0f}",
            f"{row['seconds_median']:.1f}",
            f"{mean:.1f}",
            f"{row['sd_rel']:.1%}",
            f"{row['range_rel']:.1%}",
            f"{row['precision_reached']}/{len(runs)}" if row["precision_reached"] is not None else "-",
        )
    console.print(table)
    if args.diagnose:
        summary["diagnosis"] = diagnose(console, results, log_text)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
