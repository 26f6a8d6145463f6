"""The report's figures in page order: each with its title and how to read it, drawn by
:mod:`autotune.report.drawings`, or skipped with the reason."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from autotune.report.drawings import (
    draw_break_even,
    draw_categories,
    draw_feasibility,
    draw_history,
    draw_importance,
    draw_levels_front,
    draw_pareto,
    draw_predicted,
    draw_schedule,
    draw_verdict,
    draw_versus,
    flag_value,
    predicted_trials,
    verdict_reference,
)
from autotune.report.summary import StudySummary, figure_flags

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class ReportFigure:
    """One figure of the report: its file, its title, how to read it, and why it is missing if it is."""

    file: str
    title: str
    caption: str
    skipped: str | None = None


FigurePlan: TypeAlias = "tuple[ReportFigure, Callable[[], Figure] | None]"


def _tuned(s: StudySummary, flag: str) -> str | None:
    if not flag:
        return f"{s.engine} has no such flag"
    if flag not in s.tuned:
        return f"--{flag} is not tuned in this study"
    if sum(1 for r in s.trials if flag_value(r, flag) is not None) < 2:
        return f"fewer than 2 trials with a known --{flag}"
    return None


def plan_figures(s: StudySummary) -> list[FigurePlan]:
    """The report's figures in page order; each with a drawing function, or None and a reason."""
    return [_verdict_figure(s), *_search_figures(s), *_configuration_figures(s), *_trade_off_figures(s)]


VERDICT_FIGURE = "verdict.png"


def _verdict_figure(s: StudySummary) -> FigurePlan:
    """The race's outcome: each finalist and baseline with its interval, the recommended one marked."""
    confirmation = s.confirmation
    confirmed = [f for f in confirmation.finalists if f.confirmed] if confirmation is not None else []
    reference = verdict_reference(s)
    if reference is not None:
        caption = (
            f"Each finalist's gain in {s.objective_metric} over {reference.label} (the verdict's reference) with the "
            "95% interval the verdict uses (grey dots: each launch against the reference's mean). The intervals are "
            "of the gain, paired by round and widened for the finalists the best was picked from, because an interval "
            "of each mean alone can miss the baseline's while the verdict's crosses zero. The recommended "
            "configuration is drawn in green."
        )
    else:
        caption = (
            f"Each finalist and baseline: the mean {s.objective_metric} over its fresh launches with its 95% interval "
            "(grey dots: each launch; hollow diamond: the search's first measurement, chosen for being high). "
            "The recommended configuration is drawn in green."
        )
    return _plan(
        ReportFigure(VERDICT_FIGURE, "Verdict", caption),
        lambda: draw_verdict(s),
        None if confirmed else "the study has no confirmed finalist",
    )


def _plan(fig: ReportFigure, draw: Callable[[], Figure], skipped: str | None) -> FigurePlan:
    """The figure with its drawing function, or, when it is skipped, with the reason and no drawing."""
    if skipped:
        return ReportFigure(fig.file, fig.title, fig.caption, skipped), None
    return fig, draw


def _search_figures(s: StudySummary) -> list[FigurePlan]:
    """How the search went: the optimisation history and which flags mattered."""
    return [
        _plan(
            ReportFigure(
                "history.png",
                "Optimisation history",
                f"Each trial's {s.objective_metric} with its 95% confidence interval; the line is the best feasible "
                "value so far. Trials that did not fit in memory, were invalid, or failed are drawn at 0.",
            ),
            lambda: draw_history(s),
            None if s.trials else "no trials yet",
        ),
        _plan(
            ReportFigure(
                "importance.png",
                "Parameter importance",
                "How much each tuned flag explains the difference between the best trials and the rest "
                f"(Optuna's {s.importance.method}). Infeasible trials count with value 0, so flags that decide "
                "whether a configuration fits rank high too.",
            ),
            lambda: draw_importance(s),
            None if s.importance.values else (s.importance.note or "not available"),
        ),
        _plan(
            ReportFigure(
                "predicted.png",
                "Predicted against measured",
                f"Each launch's {s.objective_metric} as the model-guided search (--sampler model) predicted it "
                "before the launch, against what it measured; on the diagonal the model was right. Grey: a "
                "launch the model did not choose (a baseline, a relaunch, or TPE's while the model's error was large).",
            ),
            lambda: draw_predicted(s),
            None if len(predicted_trials(s)) >= 2 else "the study did not run --sampler model (no predictions kept)",
        ),
    ]


def _configuration_figures(s: StudySummary) -> list[FigurePlan]:
    """What the configurations did: speed against two flags, accept length per category, the feasibility map."""
    knobs = figure_flags(s.engine)
    mem_fraction, draft_depth, draft_tokens, topk = knobs.memory, knobs.depth, knobs.draft_tokens, knobs.width
    known = [r for r in s.trials if flag_value(r, mem_fraction) is not None]
    feasibility_skip = _tuned(s, mem_fraction) or (
        None
        if sum(1 for r in known if flag_value(r, draft_tokens) is not None) >= 2
        else f"fewer than 2 trials with both --{mem_fraction} and --{draft_tokens} known"
    )
    return [
        _plan(
            ReportFigure(
                "speed-vs-mem-fraction.png",
                f"{s.objective_metric} vs {mem_fraction or 'the memory fraction'}",
                "Share of GPU memory the engine reserves for weights and KV cache. Too low and the pools do not fit; "
                "too high and CUDA graphs run out of memory.",
            ),
            lambda: draw_versus(s, mem_fraction),
            _tuned(s, mem_fraction),
        ),
        _plan(
            ReportFigure(
                "speed-vs-draft-depth.png",
                f"{s.objective_metric} vs draft depth" + (f" ({draft_depth})" if draft_depth else ""),
                "Deeper drafts propose more tokens per verify step but each further token is accepted less "
                "often and costs a draft pass. Labels give the trial and its tree width (topk).",
            ),
            lambda: draw_versus(s, draft_depth, colour_by=topk),
            _tuned(s, draft_depth),
        ),
        _plan(
            ReportFigure(
                "accept-by-category.png",
                "Accept length per prompt category",
                "Mean accepted tokens per verify step, per prompt category of the suite, for the best trial and "
                "the measured baselines (error bars: 95% CI).",
            ),
            lambda: draw_categories(s),
            None if s.categories else "no per-category measurements stored",
        ),
        _plan(
            ReportFigure(
                "feasibility.png",
                "Feasibility map",
                f"Every tried configuration by --{mem_fraction} and --{draft_tokens}, coloured by outcome: where "
                "the memory boundary lies and which draft sizes ran.",
            ),
            lambda: draw_feasibility(s, mem_fraction, draft_tokens),
            feasibility_skip,
        ),
    ]


def _trade_off_figures(s: StudySummary) -> list[FigurePlan]:
    """The trade-offs: a levels study's (per user against per GPU, the schedule), the Pareto front, break-even."""
    pareto_skip = (
        None
        if s.pareto
        else "a levels study: see the per-user vs per-GPU figure"
        if s.load_levels
        else f"the study has {len(s.directions)} objective; a Pareto front needs two"
    )
    break_even = s.break_even
    break_even_skip = (
        None if break_even is not None and break_even.drafters else (break_even.note if break_even else "not computed")
    )
    return [
        *_levels_figures(s),
        _plan(
            ReportFigure(
                "pareto.png", "Pareto front", "Trials on the front are not beaten on both objectives at once."
            ),
            lambda: draw_pareto(s),
            pareto_skip,
        ),
        _plan(
            ReportFigure(
                "break-even.png",
                "Break-even accept length",
                "Predicted decode tok/s = accept length / cycle time, at the cycle (pass + drafting) each drafter's "
                "fastest trial measured; points are its measured trials. Where a line crosses the best (dashed) is "
                "the accept length that drafter must reach to beat it.",
            ),
            lambda: draw_break_even(s),
            break_even_skip,
        ),
    ]


def _levels_figures(s: StudySummary) -> list[FigurePlan]:
    """A levels study's: per user against per GPU, the speculation schedule against each static winner."""
    plans = []
    if s.load_levels is not None:
        plans.append(
            _plan(
                ReportFigure(
                    "levels-front.png",
                    "Tokens/s per user against tokens/s per GPU",
                    "Every measured trial at every load level (colour). Up is faster for each user, right is more "
                    "throughput from each GPU; the line joins the points no other point beats on both. Large "
                    "markers are each level's winner.",
                ),
                lambda: draw_levels_front(s),
                None if any(p.on_front for p in s.load_levels.front) else "no trial measured at every level yet",
            )
        )
    if s.schedule is not None:
        plans.append(
            _plan(
                ReportFigure(
                    "schedule.png",
                    "Speculation schedule against each static winner",
                    f"{s.objective_metric} at each load level on fresh, interleaved launches: the schedule (green, "
                    "each level's best depth) beside every static winner, each mean with its 95% interval; grey "
                    "dots are the single launches.",
                ),
                lambda: draw_schedule(s),
                None if any(v.schedule_values for v in s.schedule.levels) else "the schedule never served",
            )
        )
    return plans
