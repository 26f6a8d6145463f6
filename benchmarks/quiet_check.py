"""Is this machine's CPU quiet enough to record a landscape that can judge a 2 % search?

    python benchmarks/quiet_check.py [--cores 0,2] [--seconds 60] [--window-s 5] [--launch-s 10] [--resolve 0.02] \
        [--launches 3]

One process per core, each pinned to its core, repeats a fixed piece of work (a pure-Python loop and
a copy of a buffer larger than the caches, the two ways a CPU server's decode can be limited) and
notes its speed. The speed of each window of ``--window-s`` seconds against the core's mean gives
the sd a measurement of that length would show from the machine alone, with nothing about the
engine in it. A recorded landscape needs that sd well below the differences it is to judge:
naming the better of two configurations ``--resolve`` apart (95 %, two-sided) takes
``2 (1.96 sd / resolve)^2`` launches of each. The correlation of each core's windows with the
other cores' says whether a reference process running beside the recording could take the drift
out (high) or not (near 0: each core is slowed on its own). The last line says whether the noisiest
core allows ``--launches`` per configuration (the recorder's default, 3).

``--json FILE`` keeps every window.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

LOOP_ITERATIONS = 200_000
COPY_BYTES = 64 * 2**20  # larger than a server CPU's last-level cache per core
Z95 = 1.96


def _work(core: int, seconds: float, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    os.sched_setaffinity(0, {core})
    source = bytearray(COPY_BYTES)
    samples: list[tuple[float, float, float]] = []  # (monotonic time, loop s, copy s)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        total = 0
        for i in range(LOOP_ITERATIONS):
            total += i * i % 7
        looped = time.perf_counter()
        bytes(source)
        samples.append((time.monotonic(), looped - started, time.perf_counter() - looped))
    queue.put((core, samples))


def window_rates(samples: Sequence[tuple[float, float]], window_s: float) -> list[float]:
    """Work done per second in each full window of ``window_s`` (samples: (end time, seconds taken))."""
    if not samples:
        return []
    start = samples[0][0] - samples[0][1]

    def window(at: float, took: float) -> int:  # the window of the piece's middle
        return int((at - took / 2 - start) // window_s)

    windows: dict[int, list[float]] = {}
    for at, took in samples:
        windows.setdefault(window(at, took), []).append(took)
    last = window(*samples[-1])
    # The last window is cut short by the end of the run: its rate is from too few samples.
    return [len(took) / sum(took) for index, took in sorted(windows.items()) if index < last]


def relative_sd(values: Sequence[float]) -> float | None:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else None


def launches_needed(sd: float, resolve: float) -> int:
    """Launches of each of two configurations ``resolve`` apart to name the better at 95 %."""
    return math.ceil(2 * (Z95 * sd / resolve) ** 2)


def correlation(a: Sequence[float], b: Sequence[float]) -> float | None:
    n = min(len(a), len(b))
    if n < 3:
        return None
    a, b = a[:n], b[:n]
    try:
        return statistics.correlation(a, b)
    except statistics.StatisticsError:  # a constant series
        return None


@dataclass(frozen=True)
class CoreReport:
    """One core under one load: what the table shows and ``--json`` keeps."""

    core: int
    windows: list[float]  # each window's speed against the core's mean
    sd_window: float | None
    sd_launch: float | None
    correlation_with_other_cores: float | None
    launches_needed: int | None


def core_report(
    core: int, rates: list[float], others: list[list[float]], launch_rates: list[float], resolve: float
) -> CoreReport:
    mean_of_others = [statistics.fmean(column) for column in zip(*others, strict=False)] if others else []
    sd_launch = relative_sd(launch_rates)
    return CoreReport(
        core=core,
        windows=[round(r / statistics.fmean(rates), 4) for r in rates] if rates else [],
        sd_window=relative_sd(rates),
        sd_launch=sd_launch,
        correlation_with_other_cores=correlation(rates, mean_of_others) if mean_of_others else None,
        launches_needed=launches_needed(sd_launch, resolve) if sd_launch is not None else None,
    )


def parse_cores(text: str | None) -> list[int]:
    allowed = sorted(os.sched_getaffinity(0))
    if text is None:  # up to four cores spread over the machine
        step = max(1, len(allowed) // 4)
        return allowed[::step][:4]
    cores = [int(part) for part in text.split(",") if part.strip()]
    outside = [core for core in cores if core not in allowed]
    if outside or not cores:
        raise ValueError(f"--cores {text}: this process may run on cores {allowed}")
    return cores


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", default=None, help="comma-separated cores (default: up to 4, spread)")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run (default 60)")
    parser.add_argument("--window-s", type=float, default=5.0, help="window of the speed readings (default 5)")
    parser.add_argument("--launch-s", type=float, default=10.0, help="length of one launch's measurement (default 10)")
    parser.add_argument("--resolve", type=float, default=0.02, help="difference a landscape must judge (default 0.02)")
    parser.add_argument("--launches", type=int, default=3, help="launches per configuration planned (default 3)")
    parser.add_argument("--json", type=Path, default=None, help="write every window here")
    args = parser.parse_args(argv)
    try:
        cores = parse_cores(args.cores)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not (0 < args.window_s <= args.launch_s <= args.seconds / 3):
        print("error: need 0 < --window-s <= --launch-s <= --seconds / 3 (three launches at least)", file=sys.stderr)
        return 2
    print(f"{len(cores)} pinned workers on cores {cores}, {args.seconds:.0f} s ...", flush=True)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_work, args=(core, args.seconds, queue)) for core in cores]
    for worker in workers:
        worker.start()
    results = dict(queue.get() for _ in workers)
    for worker in workers:
        worker.join()
    reports: dict[str, list[CoreReport]] = {}
    for load, column in (("loop", 1), ("copy", 2)):
        series = {core: [(s[0], s[column]) for s in samples] for core, samples in results.items()}
        rates = {core: window_rates(points, args.window_s) for core, points in series.items()}
        launch = {core: window_rates(points, args.launch_s) for core, points in series.items()}
        reports[load] = [
            core_report(core, rates[core], [r for c, r in rates.items() if c != core], launch[core], args.resolve)
            for core in cores
        ]
    print_table(reports, args)
    print(verdict(reports, args.launches, args.resolve))
    if args.json is not None:
        rows = {load: [asdict(row) for row in load_rows] for load, load_rows in reports.items()}
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json), "cores": cores},
                                         "cpu": cpu_name(), "reports": rows}, indent=1))  # fmt: skip
    return 0


def verdict(reports: dict[str, list[CoreReport]], launches: int, resolve: float) -> str:
    needed = [row.launches_needed for rows in reports.values() for row in rows if row.launches_needed is not None]
    worst = max(needed, default=None)
    if worst is None:
        return "too few windows to judge: run longer"
    quiet = "quiet enough" if worst <= launches else "not quiet enough"
    return (f"{quiet} to judge {resolve:.0%} with {launches} launches per configuration: "
            f"the noisiest core needs {worst}")  # fmt: skip


def cpu_name() -> str:
    """The CPU's model name, as Linux reports it (record_landscape.py labels CPU landscapes with it too)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    fallback = platform.processor() or "unknown CPU"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), fallback)


def print_table(reports: dict[str, list[CoreReport]], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    def pct(value: float | None) -> str:
        return f"{value:.1%}" if value is not None else "-"

    table = Table(
        title=f"CPU speed, {cpu_name()}: sd of {args.window_s:g} s and {args.launch_s:g} s windows",
        caption=f"launches needed: of each of two configurations {args.resolve:.0%} apart to name the better (95 %); "
        "correlation: with the other cores' windows (high: a reference beside the recording could take the drift "
        "out).",
    )
    for header in ("load", "core", f"sd, {args.window_s:g} s", f"sd, {args.launch_s:g} s", "correlation",
                   "launches needed", "windows (against the core's mean)"):  # fmt: skip
        table.add_column(header, justify="left" if header in ("load", "windows (against the core's mean)") else "right")
    for load, rows in reports.items():
        for row in rows:
            corr = row.correlation_with_other_cores
            table.add_row(load, str(row.core), pct(row.sd_window), pct(row.sd_launch),
                          f"{corr:.2f}" if corr is not None else "-", str(row.launches_needed or "-"),
                          " ".join(f"{w:.2f}" for w in row.windows))  # fmt: skip
    Console(width=max(Console().width, 140)).print(table)


if __name__ == "__main__":
    sys.exit(main())
