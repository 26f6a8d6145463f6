"""How fast the CLI answers: each command's wall time as a ratio to ``python -c pass`` (issue 18).

Builds a 300-trial study first (the study runner's front door, the twin's landscape as launcher,
SQLite storage: the same database a real study writes), then runs each command ``--repeat`` times
and prints the median. Targets: ``--help`` and ``<cmd> --help`` under 0.3 s, ``show`` under 1 s.
The runner keeps the parameter importance in the study, so ``show`` reads it; a ``--reuse`` study
written by an older autotune has none, and ``show`` computes it (importing Optuna) every time.

    .venv/bin/python benchmarks/cli_timing.py [--trials 300] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AUTOTUNE = str(Path(sys.executable).parent / "autotune")
TARGETS = {"help": 0.3, "show": 1.0}
# As on a user's machine: Python keeps the bytecode it compiles (a development shell may have
# PYTHONDONTWRITEBYTECODE set, which recompiles every changed module on every command); the first
# of the runs writes it, the median is of warm runs.
USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def build_study(folder: Path, trials: int) -> str:
    if str(ROOT) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, str(ROOT))
    from autotune.study import make_sampler, open_storage
    from benchmarks.nights import LandscapeLauncher, make_runner
    from benchmarks.problems import load_problem

    space = ROOT / "search_spaces" / "qwen3.6-27b-2xa6000-twin.yaml"
    problem = load_problem("qwen3.6-27b-2xa6000", space)
    launcher = LandscapeLauncher(problem, problem.landscape(1), random.Random(1))
    storage = open_storage(f"sqlite:///{folder}/bench.db")
    runner = make_runner(problem, folder, sampler=make_sampler("random", 1), launcher=launcher, storage=storage)
    runner.prepare()
    runner.run(trials=None, timeout_s=None, total_trials=trials)  # a study of ``trials`` trials, launched or not
    return "bench"


def timed(argv: list[str], repeat: int) -> tuple[float, float]:
    """Median wall and CPU (user + system) seconds of ``repeat`` runs. On a busy machine the wall time
    mostly measures the wait for a core; the CPU time is the work the command itself does."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=USER_ENV)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reuse", type=Path, help="a folder holding bench.db from an earlier run (kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="autotune-cli-timing-") as tmp:
        folder = args.reuse or Path(tmp)
        name = "bench"
        if args.reuse is None:
            started = time.perf_counter()
            build_study(folder, args.trials)
            print(f"built a {args.trials}-trial study in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        where = ["--studies-dir", str(folder)]
        commands: list[tuple[str, list[str], str | None]] = [
            ("python -c pass", [sys.executable, "-c", "pass"], None),
            ("autotune --help", [AUTOTUNE, "--help"], "help"),
        ]
        for cmd in ("study", "show", "export", "confirm", "check", "bench", "gpus", "dashboard", "report"):
            commands.append((f"autotune {cmd} --help", [AUTOTUNE, cmd, "--help"], "help"))
        commands += [
            (f"autotune show ({args.trials} trials)", [AUTOTUNE, "show", name, *where], "show"),
            ("autotune show --json", [AUTOTUNE, "show", name, "--json", *where], "show"),
            ("autotune show --trial 7", [AUTOTUNE, "show", name, "--trial", "7", *where], "show"),
            ("autotune export -f sh", [AUTOTUNE, "export", name, "-f", "sh", *where], None),
        ]
        base, base_cpu = timed(commands[0][1], args.repeat)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; medians of {args.repeat} runs")
        print(f"\n{'command':<34} {'wall s':>7} {'x pass':>7} {'cpu s':>6} {'x pass':>7} {'target s':>9}  verdict")
        for label, argv, target in commands:
            seconds, cpu = (base, base_cpu) if label == "python -c pass" else timed(argv, args.repeat)
            limit = TARGETS.get(target or "")
            verdict = "" if limit is None else ("ok" if seconds <= limit else "OVER")
            limit_text = f"{limit:.1f}" if limit else ""
            print(
                f"{label:<34} {seconds:>7.3f} {seconds / base:>7.1f} {cpu:>6.3f} {cpu / base_cpu:>7.1f} "
                f"{limit_text:>9}  {verdict}"
            )


if __name__ == "__main__":
    main()
