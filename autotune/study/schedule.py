"""A speculation schedule per load: the per-level winners' draft depths as one SGLang adaptive
config or one vLLM per-batch-size setting, and the verdict of racing it against each level's static
winner.

The arrow it owns: a levels study's records -> :func:`build` (a tier per level, the flags every tier
shares, the config JSON SGLang 0.5.23 reads) -> fresh launches (:mod:`autotune.study.schedule_race`)
-> :func:`judge` (per level, the schedule's gain over that level's static winner with the race's
interval from :func:`autotune.study.confirm.fit`) -> a profile. Each slot of the config lists ONE
candidate step, the depth measured best at that load, so SGLang's EMA controller has nothing to
move: the schedule is the measured one, not a guess of the controller's. On vLLM 0.33 the same tiers
become ``--speculative-config``'s ``num_speculative_tokens_per_batch_size`` (inclusive batch ranges
``[start, end, k]``; vLLM looks the running batch's request count up in them every step). Pure functions.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from itertools import pairwise

from pydantic import Field

from autotune.engines import vllm
from autotune.engines.sglang import ADAPTIVE, ADAPTIVE_CONFIG, ALGORITHM, DRAFT, STEPS, TOPK
from autotune.measure.statistics import t95
from autotune.models import Frozen
from autotune.records import TrialRecord
from autotune.space import FlagValue
from autotune.study.confirm import Gain, fit
from autotune.study.levels import LoadLevels, level_best, measured

# speculative/adaptive_spec_params.py (0.5.23): adaptive runs EAGLE and EAGLE3 (NEXTN becomes EAGLE).
RUNS_ADAPTIVE = ("EAGLE", "EAGLE3", "NEXTN")
# What differs between tiers; every other flag is one value for the whole server.
PER_TIER = frozenset({STEPS, TOPK, DRAFT, ADAPTIVE, ADAPTIVE_CONFIG})
# vllm/config/vllm.py (0.33) _maybe_disable_dynamic_sd_for_v1: the methods Model Runner V1 schedules
# per batch size (others fall back to static k there, with a warning); ngram_gpu is not among them.
VLLM_RUNS_PER_BATCH = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
PER_BATCH = vllm.DOTTED + "num_speculative_tokens_per_batch_size"
VLLM_PER_TIER = frozenset({vllm.TOKENS, PER_BATCH})
DATA_PARALLEL = "data-parallel-size"
SCHEDULE = -1
"""The schedule's key among the race's configurations (trial numbers are 0 or more)."""

AdaptiveConfig = dict[str, dict[str, list[int]]]
BatchRanges = list[list[int]]
"""vLLM's ``num_speculative_tokens_per_batch_size``: ``[start, end, k]`` per inclusive batch range."""


class Tier(Frozen):
    """One load level's depth: the configuration measured best there that adaptive can run."""

    concurrency: int = Field(description="the load level (users at once) it was measured at")
    trial: int
    label: str
    steps: int = Field(description="draft steps at this load (0: no drafting)")
    value: float | None = Field(default=None, description="its first measurement at this level")


class Schedule(Frozen):
    """What ``--speculative-adaptive`` runs: a tier per level and the flags the tiers share."""

    study: str
    engine: str = Field(default="sglang", description="sglang: an adaptive config; vllm: batch ranges")
    primary: int = Field(description="the study's primary level: its tier's steps start the server")
    tiers: list[Tier] = Field(description="one per level, in the space's order")
    flags: dict[str, FlagValue] = Field(description="the shared flags, without the per-tier speculative ones")
    shared_from: int = Field(description="the trial whose shared flags the schedule runs")
    decisions: list[str] = Field(default_factory=list, description="what was decided where the levels disagree")

    @property
    def start_steps(self) -> int:
        return next(t.steps for t in self.tiers if t.concurrency == self.primary)

    def slots(self) -> dict[int, Tier]:
        """Batch-size slot -> tier. SGLang routes a batch to the largest slot at or below its size, so
        each level's slot starts halfway (geometrically) from the level below: a batch between two
        measured levels runs the nearer one's depth, and a level's own ramp (users arriving, answers
        ending) stays on its depth until it is nearer the level below. Neighbours of one depth share a slot."""
        ordered = sorted(self.tiers, key=lambda t: t.concurrency)
        keys = [1] + [math.ceil(math.sqrt(a.concurrency * b.concurrency)) for a, b in pairwise(ordered)]
        slots: dict[int, Tier] = {}
        for key, tier in zip(keys, ordered, strict=True):
            if not slots or list(slots.values())[-1].steps != tier.steps:  # a slot per change of depth
                slots[key] = tier
        return slots

    def adaptive_config(self) -> AdaptiveConfig | None:
        """``--speculative-adaptive-config``'s JSON: one slot per level, one candidate step each (None on
        vLLM, whose schedule travels inside ``--speculative-config``)."""
        if self.engine == "vllm":
            return None
        return {str(key): {"candidate_steps": [tier.steps]} for key, tier in self.slots().items()}

    def batch_ranges(self) -> BatchRanges:
        """vLLM's ranges: a slot's range runs to the batch before the next slot's, the last to
        ``max-num-seqs`` (vLLM would carry its k through the tail anyway; written out, the range says
        what runs). vLLM 0.33's rules (v1/spec_decode/dynamic/utils.py): positive, sorted, not
        overlapping, the first starting at 1, k >= 0; a k above num_speculative_tokens is capped."""
        keys = list(self.slots().items())
        top = self.flags.get(vllm.MAX_SEQS)
        last = top if isinstance(top, int) and not isinstance(top, bool) else keys[-1][0]
        ends = [key - 1 for key, _ in keys[1:]] + [max(last, keys[-1][0])]
        return [[key, end, tier.steps] for (key, tier), end in zip(keys, ends, strict=True)]

    def launch_flags(self, config_path: str) -> dict[str, FlagValue]:
        """The server's flags. SGLang: the config at ``config_path`` (topk 1 and draft tokens = steps + 1,
        as SGLang resolves them under adaptive; the start step is one of the candidates). vLLM: the
        ranges inline, num_speculative_tokens the deepest tier's k (vLLM caps every range's k at it and
        sizes the per-request buffers for it)."""
        if self.engine == "vllm":
            deepest = max(t.steps for t in self.tiers)
            return {**self.flags, vllm.TOKENS: deepest, PER_BATCH: json.dumps(self.batch_ranges())}
        start = self.start_steps
        return {**self.flags, ADAPTIVE: True, ADAPTIVE_CONFIG: config_path, STEPS: start, TOPK: 1, DRAFT: start + 1}

    def config_text(self) -> str:
        """What the engine reads, as the output shows it."""
        if self.engine == "vllm":
            return f"num_speculative_tokens_per_batch_size {json.dumps(self.batch_ranges())}"
        return json.dumps(self.adaptive_config())

    def text(self) -> str:
        unit = "token" if self.engine == "vllm" else "step"  # vLLM's k counts draft tokens
        return ", ".join(f"{t.steps} {unit}{'' if t.steps == 1 else 's'} at {t.concurrency}" for t in self.tiers)


class NoSchedule(Frozen):
    """Why the study gives no schedule to race, and the static configuration to run instead."""

    reason: str
    run: int | None = Field(default=None, description="the trial to run instead")


def tier_steps(record: TrialRecord, engine: str = "sglang") -> int | str:
    """The draft steps adaptive would run ``record`` at, or why it cannot: adaptive runs EAGLE/NEXTN
    drafts with topk 1 only, and a run without drafting is the 0-step tier. On vLLM: its
    num_speculative_tokens, for a method the per-batch setting runs, without data parallelism."""
    flags = record.flags
    if engine == "vllm":
        return _vllm_tier(flags)
    algorithm = flags.get(ALGORITHM)
    if algorithm is None:
        return 0
    if algorithm not in RUNS_ADAPTIVE:
        return f"{algorithm} (adaptive runs {'/'.join(RUNS_ADAPTIVE)} only)"
    if flags.get(TOPK, 1) != 1:
        return f"topk {flags.get(TOPK)} (adaptive runs topk 1 only)"
    if flags.get(ADAPTIVE) is True:
        return "adaptive itself (its depth moves at run time)"
    steps = flags.get(STEPS)
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else "no explicit steps"


def _vllm_tier(flags: dict[str, FlagValue]) -> int | str:
    dp = flags.get(DATA_PARALLEL, 1)
    if isinstance(dp, int) and dp > 1:
        return f"data-parallel-size {dp} (vLLM turns the per-batch setting off under data parallelism)"
    method = flags.get(vllm.METHOD)
    if method is None and flags.get(vllm.DRAFT_MODEL) is None:
        return 0
    if method not in VLLM_RUNS_PER_BATCH:
        return f"method {method} (the per-batch setting runs {'/'.join(VLLM_RUNS_PER_BATCH)} only)"
    if flags.get(PER_BATCH) is not None:
        return "a per-batch setting itself"
    k = flags.get(vllm.TOKENS)
    return k if isinstance(k, int) and not isinstance(k, bool) else "no explicit num_speculative_tokens"


def _shared(record: TrialRecord, engine: str) -> dict[str, FlagValue]:
    per_tier = VLLM_PER_TIER if engine == "vllm" else PER_TIER
    return {name: value for name, value in record.flags.items() if name not in per_tier}


def build(
    records: Sequence[TrialRecord], levels: LoadLevels, *, study: str, engine: str = "sglang"
) -> Schedule | NoSchedule:
    """The schedule of a levels study: each level's winner as its tier (else that level's best that
    adaptive can run, said so); the shared flags of the deepest tier's trial, whose launch held the
    deepest drafts' buffers (SGLang sizes them for the widest tier). Declined without a launch when
    a level has no tier or every tier drafts the same depth."""
    by_number = {r.number: r for r in records}
    primary = next((w for w in levels.winners if w.concurrency == levels.primary), None)
    run = primary.trial if primary is not None else None
    runnable = [r for r in measured(records) if isinstance(tier_steps(r, engine), int)]
    what = "vLLM's per-batch setting" if engine == "vllm" else "adaptive"
    tiers: list[Tier] = []
    decisions: list[str] = []
    for winner in levels.winners:
        record = by_number.get(winner.trial) if winner.trial is not None else None
        if record is None:
            return NoSchedule(reason=f"no trial keeps the SLO at concurrency {winner.concurrency}", run=run)
        steps = tier_steps(record, engine)
        if isinstance(steps, str):
            substitute = level_best(runnable, winner.concurrency, metric=levels.metric)
            if substitute is None:
                return NoSchedule(reason=f"the winner at concurrency {winner.concurrency} runs {steps}, and no "
                                  f"measured configuration {what} can run keeps the SLO there", run=run)  # fmt: skip
            decisions.append(f"concurrency {winner.concurrency}: its winner ({_label(record)}) runs {steps}; the tier "
                             f"is the best {what} can run there, {_label(substitute)}")  # fmt: skip
            record, steps = by_number[substitute.number], int(tier_steps(substitute, engine))
        level = record.levels.get(winner.concurrency)
        value = level.metric_value(levels.metric) if level is not None else None
        tiers.append(Tier(concurrency=winner.concurrency, trial=record.number, label=_label(record), steps=steps,
                          value=value))  # fmt: skip
    if len({t.steps for t in tiers}) == 1:
        return NoSchedule(reason=f"every level's best drafts {tiers[0].steps} steps: one static configuration "
                          "serves them all", run=run)  # fmt: skip
    deepest = max(tiers, key=lambda t: (t.steps, t.concurrency == levels.primary))
    shared = _shared(by_number[deepest.trial], engine)
    drafts = shared.get(vllm.METHOD) or shared.get(vllm.DRAFT_MODEL) if engine == "vllm" else shared.get(ALGORITHM)
    if not drafts:
        return NoSchedule(reason=f"no tier drafts: nothing for {what} to schedule", run=run)
    for tier in tiers:
        theirs = _shared(by_number[tier.trial], engine)
        differ = sorted(k for k in {*shared, *theirs} if shared.get(k) != theirs.get(k))
        if differ:
            ran = ", ".join(f"--{k} {theirs.get(k, 'unset')}" for k in differ)
            decisions.append(f"concurrency {tier.concurrency}: its tier ({tier.label}) ran {ran}; the schedule runs"
                             f" the deepest tier's ({deepest.label}): its launch held the deepest drafts")  # fmt: skip
    return Schedule(study=study, engine=engine, primary=levels.primary, tiers=tiers, flags=shared,
                    shared_from=deepest.trial, decisions=decisions)  # fmt: skip


def _label(record: TrialRecord) -> str:
    return f"baseline {record.baseline} (#{record.number})" if record.baseline else f"trial {record.number}"


# ---------------------------------------------------------------- the verdict


class Comparison(Frozen):
    """The schedule against one static configuration at one level, paired by interleaved round."""

    trial: int
    label: str
    values: list[float] = Field(description="its figure per round that served")
    mean: float | None = None
    ci95: float | None = Field(default=None, description="from the race's fit: relative sd x mean")
    slots: int | None = Field(default=None, description="requests its server ran at once (fewest over its launches)")
    gain: Gain | None = Field(default=None, description="the schedule over it, 95 % interval")
    better: bool = Field(
        default=False, description="the schedule significantly faster (interval widened for the levels)"
    )
    worse: bool = Field(
        default=False, description="the schedule significantly slower at 95 %, by more than the practical margin"
    )


class LevelVerdict(Frozen):
    """One level of the race: the schedule's figure and each static configuration's beside it."""

    concurrency: int
    steps: int = Field(description="the schedule's tier here, the depth of this level's winner")
    winner: int = Field(description="this level's static winner (a trial)")
    schedule_values: list[float] = Field(description="the schedule's figure per round that served")
    schedule_mean: float | None = None
    schedule_ci95: float | None = None
    statics: list[Comparison] = Field(description="every static winner of the study, measured at this level")
    slo_broken: list[str] = Field(default_factory=list, description="the SLO limits the schedule broke here")
    slots: int | None = Field(default=None, description="requests the schedule's server ran at once")

    @property
    def against_winner(self) -> Comparison:
        return next(c for c in self.statics if c.trial == self.winner)

    @property
    def queues(self) -> bool:
        """The schedule runs fewer of this level's users at once than its winner does (its buffers are
        sized for the deepest tier): the rest wait, and a per-user decode rate leaves the wait out."""
        theirs = self.against_winner.slots
        return self.slots is not None and theirs is not None and self.slots < min(self.concurrency, theirs)

    @property
    def worse(self) -> bool:
        """Slower than this level's own winner, queueing more of its users, or breaking the SLO: the
        schedule loses here."""
        return bool(self.slo_broken) or self.queues or self.against_winner.worse


class ScheduleVerdict(Frozen):
    """Recommend the schedule, or say which static configuration to run and why."""

    schedule: Schedule
    config: AdaptiveConfig | None = Field(description="SGLang's adaptive config; None on vLLM (its flags hold it)")
    rounds: int
    levels: list[LevelVerdict]
    failed: list[str] = Field(default_factory=list, description="launches that did not serve, and why")
    recommended: bool
    run_trial: int | None = Field(description="the static trial to run instead (None: run the schedule)")
    note: str = Field(description="the verdict in one sentence")


Launches = dict[int, dict[int, dict[int, float]]]
"""level -> configuration (a trial, or :data:`SCHEDULE`) -> round -> objective value."""


def judge(
    schedule: Schedule,
    launches: Launches,
    *,
    rounds: int,
    failed: Sequence[str] = (),
    slo_broken: dict[int, list[str]] | None = None,
    slots: dict[int, int] | None = None,
    margin: float = 0.02,
) -> ScheduleVerdict:
    """The verdict. The schedule runs each level's winning depth, so at each level it must not be
    significantly slower than that level's winner by more than ``margin`` (else the engine's
    switching costs what the depth gains; at the winner's own depth a bare 95 % test would decline
    it on launch noise one race in forty); and a deployment runs one configuration for every load,
    so each static winner must be significantly slower than the schedule at some level (that
    interval widened for picking the level), else that static configuration serves as well and is
    the one to run."""
    broken = slo_broken or {}
    statics = list(dict.fromkeys(t.trial for t in schedule.tiers))
    labels = {t.trial: t.label for t in schedule.tiers}
    verdicts = [
        _level(tier, launches.get(tier.concurrency, {}), statics, labels, comparisons=len(schedule.tiers),
               slo_broken=broken.get(tier.concurrency, []), slots=slots or {}, margin=margin)
        for tier in schedule.tiers
    ]  # fmt: skip
    primary = next(t for t in schedule.tiers if t.concurrency == schedule.primary)
    unbeaten = [s for s in statics if not any(c.better for v in verdicts for c in v.statics if c.trial == s)]
    worse = [v for v in verdicts if v.worse]
    open_ = [v for v in verdicts if any(c.gain is None or c.gain.low is None for c in v.statics)]
    recommended = not worse and not unbeaten and not open_
    run = None
    if not recommended:  # the primary level's winner (the study's best) unless another static serves as well
        run = primary.trial if primary.trial in unbeaten or not unbeaten else unbeaten[0]
    note = _note(schedule, verdicts, worse=worse, unbeaten=unbeaten, open_=open_, run=run, labels=labels,
                 failed=failed)  # fmt: skip
    return ScheduleVerdict(
        schedule=schedule, config=schedule.adaptive_config(), rounds=rounds, levels=verdicts, failed=list(failed),
        recommended=recommended, run_trial=run, note=note,
    )  # fmt: skip


def _level(
    tier: Tier, launches: dict[int, dict[int, float]], statics: Sequence[int], labels: dict[int, str], *,
    comparisons: int, slo_broken: list[str], slots: dict[int, int], margin: float,
) -> LevelVerdict:  # fmt: skip
    mine = launches.get(SCHEDULE, {})
    served = {c: v for c, v in launches.items() if v}
    model = fit(served) if SCHEDULE in served and len(served) > 1 else None

    def ci(values: Sequence[float]) -> float | None:
        if model is None or model.sd is None or not model.dof or not values:
            return None
        return statistics.fmean(values) * t95(model.dof) * model.sd / math.sqrt(len(values))

    compared = []
    for trial in statics:
        theirs = launches.get(trial, {})
        values = [theirs[r] for r in sorted(theirs)]
        comparison = Comparison(trial=trial, label=labels[trial], values=values, slots=slots.get(trial),
                                mean=statistics.fmean(values) if values else None, ci95=ci(values))  # fmt: skip
        if model is not None and trial in served:
            # The pair's own fit, not the level's pooled one: a shallow draft's launches scatter far less
            # than a deep one's (1.5 % against 8 % sd at one user), so a pooled sd made the schedule's
            # interval against its deep winner too narrow and declined it on noise.
            pair = fit({SCHEDULE: mine, trial: theirs})
            difference, half = pair.interval(SCHEDULE, trial)
            _, widened = pair.interval(SCHEDULE, trial, comparisons=comparisons)
            gain = Gain(
                trial=SCHEDULE, baseline=labels[trial], baseline_trial=trial, gain=math.exp(difference) - 1,
                low=math.exp(difference - half) - 1 if half is not None else None,
                high=math.exp(difference + half) - 1 if half is not None else None,
                rounds=len(set(mine) & set(theirs)),
            )  # fmt: skip
            comparison = comparison.model_copy(
                update={"gain": gain, "better": widened is not None and difference - widened > 0 and not slo_broken,
                        "worse": half is not None and difference + half < math.log(1 - margin)}
            )  # fmt: skip
        compared.append(comparison)
    values = [mine[r] for r in sorted(mine)]
    return LevelVerdict(
        concurrency=tier.concurrency, steps=tier.steps, winner=tier.trial, schedule_values=values,
        schedule_mean=statistics.fmean(values) if values else None, schedule_ci95=ci(values), statics=compared,
        slo_broken=slo_broken, slots=slots.get(SCHEDULE),
    )  # fmt: skip


def _note(
    schedule: Schedule, verdicts: Sequence[LevelVerdict], *, worse: Sequence[LevelVerdict], unbeaten: Sequence[int],
    open_: Sequence[LevelVerdict], run: int | None, labels: dict[int, str], failed: Sequence[str],
) -> str:  # fmt: skip
    shown = f"schedule ({schedule.text()})"
    instead = f"run {labels[run]}" if run is not None else ""
    if worse:
        where = "; ".join(f"at {v.concurrency}: {_against(v.against_winner, v)}" for v in worse)
        return f"{shown} declined: it loses to the level's own winner {where}; {instead}"
    if open_:
        lost = f" ({'; '.join(failed)})" if failed else ""
        levels = ", ".join(str(v.concurrency) for v in open_)
        return f"{shown} declined: the race has no interval at concurrency {levels}{lost}; {instead}"
    if unbeaten:
        names = " and ".join(labels[s] for s in unbeaten)
        verb = "is" if len(unbeaten) == 1 else "are each"
        return (f"{shown} declined: {names} {verb} significantly slower than it at no level (one static "
                f"configuration serves every load as well); {instead}")  # fmt: skip
    beats = []
    for static in dict.fromkeys(c.trial for v in verdicts for c in v.statics):
        wins = [(c.gain.gain, v.concurrency, c) for v in verdicts for c in v.statics
                if c.trial == static and c.better and c.gain is not None]  # fmt: skip
        _, level, best = max(wins, key=lambda win: win[0])
        beats.append(f"{_against(best, None)} at {level}")
    return f"run the {shown}: no level slower than its own winner; {'; '.join(beats)}"


def _against(comparison: Comparison, level: LevelVerdict | None) -> str:
    if level is not None and level.slo_broken:
        return f"breaks the SLO ({', '.join(level.slo_broken)})"
    if level is not None and level.queues:
        return (f"runs {level.slots} of its {level.concurrency} users at once where {comparison.label} runs "
                f"{comparison.slots} (the rest wait)")  # fmt: skip
    return comparison.gain.text() if comparison.gain is not None else f"not measured against {comparison.label}"
