"""Break-even acceptance: what accept length a drafter must reach on this machine to beat the best.

One stream decodes in cycles: a target verify pass plus the drafter's steps, yielding ``accept
length`` tokens. So tok/s ≈ L / (t_pass + steps · t_step). Each measured trial gives its cycle time
(L / tok/s); per drafter, a least-squares line through (steps, cycle) gives t_pass and t_step; with
one depth measured, t_pass is the bare pass of the trials without speculation. The break-even accept
length of a drafter at a depth is then best tok/s × its cycle time. The roofline adds a floor: no
pass reads its bytes faster than the bandwidth, so even a free drafter needs best × that time.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from pydantic import Field

from autotune.engines import get_engine
from autotune.models import Frozen
from autotune.records import TrialRecord
from autotune.space import FlagValue


class SpeedPoint(Frozen):
    """One measured trial, as the fit reads it."""

    trial: int
    drafter: str | None = Field(description="algorithm and draft model; None: no speculation")
    steps: int = Field(ge=0, description="draft steps per verify pass (0 without speculation)")
    tok_s: float = Field(gt=0, description="decode tok/s of one stream")
    accept_length: float = Field(ge=1, description="tokens per verify pass (1 without speculation)")
    roofline_share: float | None = Field(default=None, description="tok/s / bandwidth ceiling")
    separate_draft: bool = Field(default=False, description="reads a draft model's weights besides the target's")

    @property
    def cycle_s(self) -> float:
        return self.accept_length / self.tok_s


class DrafterFit(Frozen):
    """cycle = pass_s + steps · step_s for one drafter, and what it needs to beat the best."""

    drafter: str
    trials: list[int]
    pass_s: float
    step_s: float
    pass_from: str = Field(description="'fit' or 'bare pass' (one depth measured: the intercept is the bare pass)")
    rms_rel: float = Field(description="root-mean-square relative error of the fitted cycle times")
    steps: int = Field(description="the depth of its fastest trial, where break_even is given")
    break_even: float = Field(description="accept length at its fastest trial's measured cycle that equals the best")
    measured_accept: float = Field(description="accept length of its fastest trial")
    measured_tok_s: float

    def predicted_tok_s(self, accept_length: float, steps: int | None = None) -> float:
        return accept_length / (self.pass_s + (self.steps if steps is None else steps) * self.step_s)


class BreakEven(Frozen):
    """The answer, or why there is none (``note``)."""

    best_tok_s: float | None = None
    best_trial: int | None = None
    bare_pass_s: float | None = Field(default=None, description="mean cycle of the trials without speculation")
    bare_trials: list[int] = Field(default_factory=list)
    roofline_pass_s: float | None = Field(default=None, description="a pass at full bandwidth (trials without a draft)")
    drafters: list[DrafterFit] = Field(default_factory=list)
    points: list[SpeedPoint] = Field(default_factory=list)
    note: str | None = None

    @property
    def floor(self) -> float | None:
        """The accept length even a drafter costing nothing would need at the bandwidth ceiling."""
        if self.roofline_pass_s is None or self.best_tok_s is None:
            return None
        return self.best_tok_s * self.roofline_pass_s


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b·x (intercept, slope)."""
    x_mean, y_mean = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - x_mean) ** 2 for x in xs)
    slope = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True)) / sxx
    return y_mean - slope * x_mean, slope


def fit_drafter(
    drafter: str, points: list[SpeedPoint], *, bare_pass_s: float | None, best_tok_s: float
) -> DrafterFit | None:
    """One drafter's line through its trials; None when it cannot be fitted (one depth, no bare pass)."""
    xs = [float(p.steps) for p in points]
    ys = [p.cycle_s for p in points]
    if len(set(xs)) >= 2:
        pass_s, step_s = _line(xs, ys)
        pass_from = "fit"
    elif bare_pass_s is not None and xs[0] > 0:
        pass_s, step_s = bare_pass_s, (statistics.fmean(ys) - bare_pass_s) / xs[0]
        pass_from = "bare pass"
    else:
        return None
    errors = [(pass_s + x * step_s - y) / y for x, y in zip(xs, ys, strict=True)]
    fastest = max(points, key=lambda p: p.tok_s)
    return DrafterFit(
        drafter=drafter,
        trials=[p.trial for p in points],
        pass_s=pass_s,
        step_s=step_s,
        pass_from=pass_from,
        rms_rel=(statistics.fmean(e * e for e in errors)) ** 0.5,
        steps=fastest.steps,
        break_even=best_tok_s * fastest.cycle_s,  # its measured cost, not the line's: the best ties itself
        measured_accept=fastest.accept_length,
        measured_tok_s=fastest.tok_s,
    )


def break_even(points: list[SpeedPoint], *, best_tok_s: float | None, best_trial: int | None) -> BreakEven:
    """Fit every drafter measured and give the accept length each must reach to beat ``best_tok_s``."""
    if best_tok_s is None or not points:
        return BreakEven(note="no measured trial to compare with")
    bare = [p for p in points if p.drafter is None]
    bare_pass_s = statistics.fmean(p.cycle_s for p in bare) if bare else None
    # A pass at full bandwidth: share × cycle, from trials that read no separate draft model.
    roofline = [p.roofline_share * p.cycle_s for p in points if p.roofline_share and not p.separate_draft]
    drafters = sorted({p.drafter for p in points if p.drafter is not None})
    fits = [
        fit
        for name in drafters
        if (
            fit := fit_drafter(
                name, [p for p in points if p.drafter == name], bare_pass_s=bare_pass_s, best_tok_s=best_tok_s
            )
        )
        is not None
    ]
    note = None
    if not drafters:
        note = "no speculative trial measured: nothing to fit"
    elif not fits:
        note = "too few speculative trials to fit: a drafter needs two depths, or one and a run without speculation"
    return BreakEven(
        best_tok_s=best_tok_s,
        best_trial=best_trial,
        bare_pass_s=bare_pass_s,
        bare_trials=[p.trial for p in bare],
        roofline_pass_s=min(roofline) if roofline else None,
        drafters=fits,
        points=points,
        note=note,
    )


def speed_point(record: TrialRecord, *, engine: str) -> SpeedPoint | None:
    """A measured trial as the fit reads it (its flags as the server resolved them); None when it
    was not measured, or measured no speed or, speculating, no accept length."""
    tok_s, accept = record.metric_value("decode_tok_s"), record.metric_value("accept_length")
    if record.outcome != "ok" or record.reused_from is not None or not tok_s:
        return None
    spelling = get_engine(record.engine or engine).speculation
    if spelling is None:
        return None

    def flag(name: str) -> FlagValue | None:
        return record.launch.effective.get(name, record.flags.get(name))

    algorithm, draft_model = flag(spelling.method), flag(spelling.draft_model)
    if algorithm in (None, "", "none", "None"):
        return SpeedPoint(
            trial=record.number,
            drafter=None,
            steps=0,
            tok_s=tok_s,
            accept_length=1.0,
            roofline_share=record.measurement.roofline_share,
        )
    steps = flag(spelling.depth)
    if accept is None or accept < 1 or not isinstance(steps, int) or isinstance(steps, bool):
        return None
    drafter = f"{algorithm} {Path(str(draft_model)).name}" if draft_model else str(algorithm)
    return SpeedPoint(
        trial=record.number,
        drafter=drafter,
        steps=steps,
        tok_s=tok_s,
        accept_length=accept,
        roofline_share=record.measurement.roofline_share,
        separate_draft=bool(draft_model),
    )
