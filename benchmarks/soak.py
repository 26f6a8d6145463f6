"""A night, compressed: a twin study of many trials with random faults and SIGKILLs of the tuner.

The tuner (``autotune study``, a real process) runs a twin study with short measurements; the twin
fails at random launches (``AUTOTUNE_TWIN_FAULT_SCHEDULE``: crash on start, never ready, death or
hang mid-measurement, the port taken before the bind); meanwhile, at random moments, another
process takes the simulated GPUs for a few seconds (the twin's inventory shows it, as NVML would)
and the SQLite database is locked for a few seconds (another writer, a backup); the tuner is killed
with SIGKILL at random moments and started again, as a machine reboot or an OOM kill would. At the
end it prints:

- the faults the twin injected, by kind; the GPU-busy spells and storage locks, and how the tuner
  met them (trials that waited for the GPUs, the longest wait);
- every measured trial present exactly once, none lost or changed by a kill;
- no server process left (the test's marker is searched in every process's environment);
- the tuner's memory (RSS) and open files at the start and end of its longest run (flat or not);
- the database and artifact folder sizes;
- the best value before each kill and after the restart (unchanged, or better).

    .venv/bin/python benchmarks/soak.py                      # 300 trials, 20 kills
    .venv/bin/python benchmarks/soak.py --trials 30 --kills 3  # a few minutes
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import yaml

from autotune.decision import Launch
from autotune.study.attrs import trial_record
from autotune_twin import gpu_state

ROOT = Path(__file__).resolve().parent.parent
AUTOTUNE = str(Path(sys.executable).parent / "autotune")
STUDY = "soak"
FAULTS = ["exit-on-start", "never-ready", "die-mid-measurement", "hang-mid-measurement", "port-taken"]
# A GPU-busy spell or a database lock lasts a few seconds: well inside the tuner's busy wait and
# SQLite's 30 s lock timeout.
SPELL_S = (2.0, 8.0)


@dataclass
class Sample:
    trials: int
    rss_kb: int
    open_files: int


@dataclass
class Soak:
    folder: Path
    trials: int
    kills: int
    fault_rate: float
    seed: int
    busy_chance: float = 0.01  # each second: another process takes the GPUs for a spell
    lock_chance: float = 0.01  # each second: another writer locks the database for a spell
    rng: random.Random = field(init=False)
    samples: list[list[Sample]] = field(default_factory=list)
    kill_checks: list[tuple[float | None, float | None]] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    busy_spells: int = 0
    locks: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    @property
    def twin_host(self) -> str:
        """One simulated host for every tuner run (the twin keys GPUs by the parent pid otherwise)."""
        return f"soak-{os.getpid()}-{self.seed}"

    @property
    def url(self) -> str:
        return f"sqlite:///{self.folder}/studies/{STUDY}.db"

    def space(self) -> Path:
        data = yaml.safe_load((ROOT / "search_spaces" / "qwen3.6-27b-2xa6000-twin.yaml").read_text())
        data["study"] = STUDY
        schedule = self.folder / "faults.json"
        # round(rate x trials) faults at random launches among the first ``trials`` (so a short soak
        # meets some too), then the same rate for the launches after them (retries, restarts)
        kinds = ["none"] * self.trials + [
            self.rng.choice(FAULTS) if self.rng.random() < self.fault_rate else "none" for _ in range(3 * self.trials)
        ]
        for at in self.rng.sample(range(self.trials), round(self.fault_rate * self.trials)):
            kinds[at] = self.rng.choice(FAULTS)
        schedule.write_text(json.dumps(kinds))
        data["env"] = {"AUTOTUNE_TWIN_FAULT_SCHEDULE": str(schedule), "AUTOTUNE_SOAK_MARK": str(self.folder)}
        # 4 requests: the twin's mid-measurement faults strike at the 3rd (with 2 they never struck)
        # Time compressed: short chat prompts, a quick simulated start-up, no output check (3 more
        # requests a trial); the loop, the faults and the kills are the night's.
        data["measurement"].update({"suite": "builtin:chat", "warmup_requests": 0, "prompts_per_round": 2,
                                    "max_tokens": 8, "min_rounds": 2, "max_rounds": 2, "request_timeout_s": 5,
                                    "agreement": {"enabled": False}})  # fmt: skip
        data["launcher"] = [*data["launcher"], "--twin-load-seconds", "0.5"]
        # Two users at once: every configuration is a launch (at one stream, one that differs only in
        # memory sizing would borrow a measured rate instead, and a night would hold few launches).
        data["measurement"]["concurrency"] = 2
        data["objective"] = {"metric": "decode_tok_s", "concurrency": 2}
        data["launch"] = {"timeout_s": 8, "stop_timeout_s": 2}
        path = self.folder / "space.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    def measured(self) -> dict[int, float]:
        """Trial number -> value of every measured (ok) trial, read as a user would."""
        if not (self.folder / "studies" / f"{STUDY}.db").exists():
            return {}
        try:
            trials = optuna.load_study(study_name=STUDY, storage=self.url).trials
        except (KeyError, Exception):  # the tuner is creating the study right now
            return {}
        ok = [t for t in trials if t.state.name == "COMPLETE" and t.user_attrs.get("outcome") == "ok"]
        return {t.number: float(t.value) for t in ok if t.value is not None}

    def finished(self) -> int:
        try:
            trials = optuna.load_study(study_name=STUDY, storage=self.url).trials
        except Exception:
            return 0
        return sum(1 for t in trials if t.state.name in ("COMPLETE", "FAIL"))

    def injected(self) -> dict[str, int]:
        """Faults the twin injected: the schedule's entries up to its launch counter, by kind."""
        schedule = self.folder / "faults.json"
        counter = schedule.with_name(schedule.name + ".count")
        launches = int(counter.read_text()) if counter.exists() else 0
        kinds = json.loads(schedule.read_text())[:launches]
        return {"launches": launches, **{k: kinds.count(k) for k in FAULTS if k in kinds}}

    def run(self) -> None:
        space = self.space()
        # kill points inside the night: close to its end, two kills could fall after the last trial
        last = max(2, round(0.95 * self.trials))
        kill_at = sorted(self.rng.sample(range(1, last), min(self.kills, last - 1)))
        run_number = 0
        while self.finished() < self.trials:
            run_number += 1
            # No confirmation: the soak counts each measured config once (confirmation relaunches finalists).
            tuner = subprocess.Popen([AUTOTUNE, "study", str(space), "--total-trials", str(self.trials), "--seed",
                                      str(run_number), "--confirm-top", "0"], cwd=self.folder,
                                     env={**os.environ, gpu_state.HOST_ENV: self.twin_host},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            samples: list[Sample] = []
            self.samples.append(samples)
            target = kill_at.pop(0) if kill_at else None
            while tuner.poll() is None:
                done = self.finished()
                samples.append(Sample(done, _rss_kb(tuner.pid), _open_files(tuner.pid)))
                if target is not None and done >= target:
                    time.sleep(self.rng.uniform(0.0, 5.0))  # a random moment inside the next trial
                    before = self.measured()
                    tuner.send_signal(signal.SIGKILL)
                    tuner.wait()
                    after = self.measured()
                    self.lost += [f"trial {n} lost or changed by kill" for n, v in before.items() if after.get(n) != v]
                    self.kill_checks.append((max(before.values(), default=None), max(after.values(), default=None)))
                    break
                if self.rng.random() < self.busy_chance:
                    self.gpus_busy(self.rng.uniform(*SPELL_S))
                elif self.rng.random() < self.lock_chance:
                    self.lock_storage(self.rng.uniform(*SPELL_S))
                else:
                    time.sleep(1.0)

    def gpus_busy(self, seconds: float) -> None:
        """Another process holds memory on every simulated GPU for ``seconds``, as NVML would show it."""
        holder = subprocess.Popen(["sleep", str(seconds)])
        holding = gpu_state.Holding(
            pid=holder.pid, started=gpu_state.start_time(holder.pid), used_bytes={i: 8 << 30 for i in range(2)}
        )
        folder = gpu_state.state_dir(self.twin_host)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{holder.pid}.json").write_text(holding.model_dump_json())
        holder.wait()  # the inventory drops a dead holder's file
        self.busy_spells += 1

    def lock_storage(self, seconds: float) -> None:
        """Hold the database's write lock for ``seconds`` (another writer, a backup): the tuner must wait."""
        path = self.folder / "studies" / f"{STUDY}.db"
        if not path.exists():
            return
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            db.execute("BEGIN EXCLUSIVE")
            time.sleep(seconds)
            db.execute("COMMIT")
            self.locks.append(seconds)
        finally:
            db.close()

    def report(self) -> int:
        trials = optuna.load_study(study_name=STUDY, storage=self.url).trials
        # a configuration the search measured twice is a lost lesson (a re-measurement of a close
        # challenger, confirm_of, is on purpose; a reuse launches nothing)
        records = [trial_record(t) for t in trials]
        measured = [r for r in records if r.outcome == "ok" and isinstance(r.decision, Launch) and r.confirm_of is None]
        keys = [r.launch.config_key for r in measured]
        leftover = processes_with(str(self.folder))
        db = (self.folder / "studies" / f"{STUDY}.db").stat().st_size
        artifacts = sum(p.stat().st_size for p in (self.folder / "studies" / STUDY).rglob("*") if p.is_file())
        # memory and open files once the tuner is past its imports and first trial, to its end
        longest = [x for x in max(self.samples, key=len) if x.trials > max(self.samples, key=len)[0].trials]
        outcomes: dict[str, int] = {}
        for t in trials:
            outcomes[str(t.user_attrs.get("outcome"))] = outcomes.get(str(t.user_attrs.get("outcome")), 0) + 1
        print(f"trials: {len(trials)} ({', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))})")
        print(f"tuner runs: {len(self.samples)}, SIGKILLs: {len(self.kill_checks)}")
        faults = self.injected()
        launches = faults.pop("launches")
        print(f"faults injected: {sum(faults.values())} in {launches} twin launches "
              f"({', '.join(f'{k} {v}' for k, v in faults.items()) or 'none'})")  # fmt: skip
        # busy_wait_s includes the inventory read (about 0.5 s for the twin's command): a wait is longer
        waits = [w for t in trials if (w := float(t.user_attrs.get("busy_wait_s") or 0)) >= 1.0]
        print(
            f"GPUs taken by another process: {self.busy_spells} spells; trials that waited for them: {len(waits)} "
            f"(longest wait {max(waits, default=0):.0f} s, skipped-busy {outcomes.get('skipped-busy', 0)})"
        )
        longest_lock = max(self.locks, default=0)
        print(f"database locked by another writer: {len(self.locks)} times (longest {longest_lock:.0f} s)")
        print(f"measured configs: {len(measured)}, each once: {len(keys) == len(set(keys))}")
        print(f"measured trials lost or changed by a kill: {len(self.lost)}")
        print(f"server processes left: {len(leftover)}")
        if longest:
            first, last = longest[0], longest[-1]
            print(f"tuner, longest run ({len(longest)} samples, trials {first.trials}->{last.trials}): "
                  f"RSS {first.rss_kb / 1024:.0f} -> {last.rss_kb / 1024:.0f} MiB (max "
                  f"{max(s.rss_kb for s in longest) / 1024:.0f}), open files {first.open_files} -> {last.open_files}"
                  f" (max {max(s.open_files for s in longest)})")  # fmt: skip
        print(f"database: {db / 1e6:.2f} MB, study folder (logs, artifacts): {artifacts / 1e6:.2f} MB")
        changed = [(b, a) for b, a in self.kill_checks if b is not None and (a is None or a < b)]
        print(f"best before/after each kill: {len(self.kill_checks) - len(changed)}/{len(self.kill_checks)} unchanged")
        ok = not self.lost and not leftover and len(keys) == len(set(keys)) and not changed
        print("soak:", "PASS" if ok else "FAIL")
        return 0 if ok else 1


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _open_files(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker`` (a scratch path no other process has)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                stat = (entry / "stat").read_text()
                if stat[stat.rindex(")") + 2] != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--fault-rate", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--busy-chance", type=float, default=0.01, help="per second: the GPUs taken for a spell")
    parser.add_argument("--lock-chance", type=float, default=0.01, help="per second: the database locked for a spell")
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="autotune-soak-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        soak = Soak(folder=folder.resolve(), trials=args.trials, kills=args.kills, fault_rate=args.fault_rate,
                    seed=args.seed, busy_chance=args.busy_chance, lock_chance=args.lock_chance)  # fmt: skip
        started = time.monotonic()
        soak.run()
        print(f"soak of {args.trials} trials, {args.kills} kills: {time.monotonic() - started:.0f} s")
        code = soak.report()
        for pid in processes_with(str(soak.folder)):  # never leave a server behind, even on FAIL
            os.kill(pid, signal.SIGKILL)
    sys.exit(code)


if __name__ == "__main__":
    main()
