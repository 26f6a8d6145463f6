"""Verifying a speculation schedule before recommending it: the schedule and each level's static
winner launched afresh in interleaved rounds (A B S, A B S), every launch measuring every level, and
the verdict judged by :func:`autotune.study.schedule.judge` with the race's intervals.

The arrow it owns: a :class:`~autotune.study.schedule.Schedule` -> fresh launches through a
:class:`~autotune.study.launcher.Launcher` (injected, as the study runner's is) -> a
:class:`~autotune.study.schedule.ScheduleVerdict` (the caller keeps it in the study's database,
:func:`autotune.study.attrs.record_schedule_verdict`) -> the schedule's profile (:func:`schedule_profile`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from autotune.engines import get_engine
from autotune.engines.base import InvalidConfig, LaunchPlan
from autotune.errors import StorageError, UserError
from autotune.gpu import check_idle, wait_for
from autotune.outcomes import OutcomeKind
from autotune.profile import Profile, ProfileLevel, ProfileMetric
from autotune.records import TrialRecord
from autotune.secrets import is_secret_flag
from autotune.space import FlagValue
from autotune.study.launcher import Launcher, ReadGpus
from autotune.study.paths import StudyPaths
from autotune.study.preflight_checks import Preflight
from autotune.study.schedule import SCHEDULE, Launches, Schedule, ScheduleVerdict, judge
from autotune.trial import Phase

CONFIG_FILE = "schedule-adaptive.json"


def config_path(paths: StudyPaths) -> Path:
    """Where the race's launches read the adaptive config."""
    return paths.folder / CONFIG_FILE


def race(
    checked: Preflight,
    paths: StudyPaths,
    schedule: Schedule,
    records: Sequence[TrialRecord],
    *,
    launch: Launcher,
    rounds: int,
    read_gpus: ReadGpus | None = None,
    on_phase: Phase | None = None,
) -> ScheduleVerdict:
    """Launch the schedule and the distinct static winners ``rounds`` times each, interleaved, and
    judge. A schedule the engine's rules refuse is judged on no launch of its own."""
    space = checked.space
    engine = checked.engines[space.engine].engine
    path = config_path(paths)
    adaptive = schedule.adaptive_config()  # None where the schedule travels in the engine's flags
    running_flag = engine.schedule_form.running_flag if engine.schedule_form is not None else None
    try:
        paths.folder.mkdir(parents=True, exist_ok=True)
        if adaptive is not None:
            path.write_text(json.dumps(adaptive, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"cannot write the adaptive config {path}: {exc.strerror}") from None
    by_number = {r.number: r for r in records}
    plans: dict[int, LaunchPlan] = {}
    failed: list[str] = []
    for tier in schedule.tiers:
        flags = _with_secrets(by_number[tier.trial].flags, space.fixed)
        plans.setdefault(tier.trial, LaunchPlan(engine=space.engine, flags=flags))
    levels = [t.concurrency for t in schedule.tiers]
    try:
        plans[SCHEDULE] = engine.normalise(_with_secrets(schedule.launch_flags(str(path.resolve())), space.fixed))
    except InvalidConfig as exc:  # nothing to race: judged on no launch at all
        return judge(schedule, {}, rounds=0, failed=[f"the schedule: engine rule: {exc}"])
    launches: Launches = {level: {config: {} for config in plans} for level in levels}
    slo_broken: dict[int, list[str]] = {}
    slots: dict[int, int] = {}
    phase: Phase = on_phase or (lambda _phase, _detail: None)
    paths.logs.mkdir(parents=True, exist_ok=True)
    for round_index in range(rounds):
        if round_index == 1 and not any(launches[level][SCHEDULE] for level in levels):
            break  # the schedule did not serve in the first round: the statics alone decide nothing
        for config, plan in plans.items():
            name = "schedule" if config == SCHEDULE else f"trial-{config:04d}"
            if on_phase is not None:
                on_phase("schedule race", f"round {round_index + 1}/{rounds}: {name}")
            busy = _wait_idle(checked, read_gpus)
            if busy is not None:
                failed.append(f"{name}, round {round_index + 1}: {busy}")
                continue
            outcome = launch(plan, paths.logs / f"schedule-race-r{round_index + 1}-{name}.log", phase, None)
            if outcome.kind is not OutcomeKind.OK:
                failed.append(f"{name}, round {round_index + 1}: {outcome.kind.value}: {outcome.reason}")
                continue
            resolved = outcome.effective.values if outcome.effective is not None else {}
            running = resolved.get(running_flag) if running_flag is not None else None
            if isinstance(running, int) and not isinstance(running, bool):
                slots[config] = min(running, slots.get(config, running))
            for measurement in outcome.measurements:
                if measurement.concurrency not in launches:
                    continue
                broken = space.slo.broken({m.name: m.value for m in measurement.metrics})
                if broken and config == SCHEDULE:
                    slo_broken.setdefault(measurement.concurrency, []).extend(broken)
                if not broken and measurement.value > 0:
                    launches[measurement.concurrency][config][round_index] = measurement.value
    return judge(schedule, launches, rounds=rounds, failed=failed, slo_broken=slo_broken, slots=slots,
                 margin=space.measurement.target_rel_ci)  # fmt: skip


def _with_secrets(flags: Mapping[str, FlagValue], fixed: Mapping[str, FlagValue]) -> dict[str, FlagValue]:
    """What storage holds, with the secret values it never held put back from the space."""
    return {**flags, **{name: value for name, value in fixed.items() if is_secret_flag(name) and name in flags}}


def _wait_idle(checked: Preflight, read_gpus: ReadGpus | None) -> str | None:
    """None once the GPUs are idle (as at the study's start); else why not, after the space's wait."""
    if read_gpus is None or checked.inventory is None:
        return None
    inventory = checked.inventory
    verdict, _ = wait_for(read_gpus, lambda now: check_idle(now, inventory), timeout_s=checked.space.gpus.busy_wait_s)
    return None if verdict.idle else f"skipped, GPUs busy: {verdict.reason}"


def schedule_profile(base: Profile, verdict: ScheduleVerdict, *, config_file: Path, metric: str, unit: str) -> Profile:
    """The schedule as a profile: ``base`` (the trial whose shared flags it runs) with the schedule's
    flags reading ``config_file`` (SGLang; vLLM's flags hold the ranges themselves), the race's
    figures per level, and its verdict. The config is written to ``config_file`` first (the engine's
    rules read it).

    Raises:
        UserError: the file cannot be written, or the engine's rules refuse the schedule.
    """
    try:
        if verdict.config is not None:  # vLLM's schedule has no file: its flags hold the ranges
            config_file.parent.mkdir(parents=True, exist_ok=True)
            config_file.write_text(json.dumps(verdict.config, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write the adaptive config {config_file}: {exc.strerror}") from None
    schedule = verdict.schedule
    try:
        plan = get_engine(base.engine).normalise(schedule.launch_flags(str(config_file.resolve())))
    except InvalidConfig as exc:
        raise UserError(f"the schedule breaks an engine rule: {exc}") from None

    def figure(values: Sequence[float], ci95: float | None) -> dict[str, ProfileMetric]:
        mean = statistics.fmean(values)
        return {metric: ProfileMetric(value=mean, unit=unit, ci95=ci95, n=len(values))}

    levels = [
        ProfileLevel(concurrency=v.concurrency, metrics=figure(v.schedule_values, v.schedule_ci95))
        for v in verdict.levels
        if v.schedule_values
    ]
    primary = next((level for level in levels if level.concurrency == schedule.primary), None)
    return base.model_copy(
        update={
            "trial": schedule.shared_from,
            "flags": plan.flags,
            "metrics": primary.metrics if primary is not None else {},
            "confirmed_launches": len(verdict.levels[0].schedule_values) if verdict.levels else None,
            "verdict": verdict.note,
            "levels": levels,
            "adaptive_config": verdict.config,
        }
    )
