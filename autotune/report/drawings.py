"""The report's drawings, each a figure of a :class:`StudySummary` (matplotlib with the headless ``Agg``
backend, imported only when drawing); they present the summary and compute nothing of their own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from autotune.engines.names import short_name
from autotune.records import TrialRecord
from autotune.report.summary import StudySummary
from autotune.space import FlagValue
from autotune.study.confirm import Finalist

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


class Look(NamedTuple):
    """How an outcome is drawn. Markers differ as well as colours, so the figures read in greyscale."""

    colour: str
    marker: str
    label: str
    hollow: bool = False  # predicted, never launched

    def style(self, size: float) -> dict[str, Any]:
        """Keyword arguments for ``Axes.plot`` / ``errorbar``."""
        face = "none" if self.hollow else self.colour
        return {
            "color": self.colour,
            "marker": self.marker,
            "markerfacecolor": face,
            "markersize": size,
            "linestyle": "",
        }


_OUTCOME_LOOK = {
    "ok": Look("#2a9d3a", "o", "ok (measured)"),
    "infeasible-memory-low": Look("#e69f00", "v", "memory: too little for the KV pools"),
    "infeasible-memory-high": Look("#d55e00", "^", "memory: too much, CUDA graphs failed"),
    "invalid-config": Look("#8e44ad", "s", "invalid flag combination"),
    "diverged": Look("#7f7f7f", "D", "diverged: greedy text differs from the reference"),
}


_FAILED_LOOK = Look("#c0392b", "X", "failed (crash, timeout, interrupted)")


def outcome_look(outcome: str) -> Look:
    """How an outcome is drawn; ``predicted-X`` (never launched) is X's look, hollow."""
    measured = outcome.removeprefix("predicted-")
    if measured != outcome and measured in _OUTCOME_LOOK:
        look = _OUTCOME_LOOK[measured]
        return look._replace(label=f"{look.label} (predicted, not launched)", hollow=True)
    return _OUTCOME_LOOK.get(outcome, _FAILED_LOOK)


def flag_value(record: TrialRecord, name: str) -> float | None:
    """A flag's value as the server ran it (read back), else as requested; None when unknown."""
    value: FlagValue | None = record.launch.effective.get(name, record.flags.get(name))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _new_figure(width: float = 8.0, height: float = 4.5) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    return fig, fig.add_subplot()


def _outcome_legend(ax: Axes, outcomes: set[str]) -> None:
    from matplotlib.lines import Line2D

    handles = []
    for outcome in sorted(outcomes, key=lambda o: (o != "ok", o)):
        look = outcome_look(outcome)
        handles.append(Line2D([], [], label=look.label, **look.style(8)))
    if handles:
        ax.legend(handles=handles, fontsize=8, loc="best", framealpha=0.9)


def _value_label(s: StudySummary) -> str:
    return f"{s.objective_metric} [{s.objective_unit}]" if s.objective_unit else s.objective_metric


def draw_history(s: StudySummary) -> Figure:
    from matplotlib.ticker import MaxNLocator

    fig, ax = _new_figure()
    best_so_far: list[tuple[int, float]] = []
    current: float | None = None
    for r in s.trials:
        value = r.metric_value(s.objective_metric) if r.outcome == "ok" else 0.0
        ci = r.metric_ci95(s.objective_metric) if r.outcome == "ok" else None
        if value is None:
            continue
        yerr = ci if isinstance(ci, (int, float)) else None
        ax.errorbar(r.number, value, yerr=yerr, capsize=3, **outcome_look(r.outcome).style(8))
        if r.baseline:
            ax.annotate(r.baseline, (r.number, value), textcoords="offset points", xytext=(6, 6), fontsize=8)
        if r.feasible and r.value is not None and (current is None or r.value > current):
            current = r.value
        if current is not None:
            best_so_far.append((r.number, current))
    if best_so_far:
        xs, ys = zip(*best_so_far, strict=True)
        ax.step(xs, ys, where="post", color="#1f4e9c", linewidth=1.5, label="best feasible so far")
    _outcome_legend(ax, {r.outcome for r in s.trials})
    handles, labels = ax.get_legend_handles_labels()
    legend = ax.get_legend()
    if legend is not None and handles:
        ax.legend(handles=[*legend.legend_handles, *handles], fontsize=8, loc="best", framealpha=0.9)
    ax.set_xlabel("trial number")
    ax.set_ylabel(_value_label(s))
    ax.set_title("Optimisation history (failed and infeasible trials drawn at 0)")
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=-1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def predicted_trials(s: StudySummary) -> list[tuple[TrialRecord, float, float]]:
    """(trial, rate predicted before its launch, rate measured) of the model-guided search's measured trials."""
    pairs = []
    for r in s.trials:
        measured = r.metric_value(s.objective_metric) if r.served else None
        if r.proposal.predicted is not None and measured:
            pairs.append((r, r.proposal.predicted.tok_s, measured))
    return pairs


def draw_predicted(s: StudySummary) -> Figure:
    """Each launch's rate as the model predicted it before the launch, against what was measured."""
    fig, ax = _new_figure(6.0, 5.0)
    pairs = predicted_trials(s)
    for r, predicted, measured in pairs:
        sampled = r.proposal.predicted is not None and r.proposal.predicted.search == "model"
        ax.scatter(measured, predicted, color="#1f4e9c" if sampled else "#999999", s=28, zorder=3)
        ax.annotate(str(r.number), (measured, predicted), textcoords="offset points", xytext=(4, 4), fontsize=7)
    top = max(max(p, m) for _, p, m in pairs) * 1.08
    ax.plot([0, top], [0, top], color="#444444", linewidth=1, label="predicted = measured")
    ax.fill_between([0, top], [0, 0.93 * top], [0, 1.07 * top], color="#1f4e9c", alpha=0.08, label="within 7 %")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel(f"measured {_value_label(s)}")
    ax.set_ylabel(f"predicted before the launch {_value_label(s)}")
    ax.set_title("The pass model's prediction against the measurement (blue: proposed by the model)")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    return fig


def draw_importance(s: StudySummary) -> Figure:
    from matplotlib.ticker import PercentFormatter

    names = list(s.importance.values)[::-1]
    shares = [s.importance.values[n] for n in names]
    fig, ax = _new_figure(8.0, 0.5 * len(names) + 1.6)
    bars = ax.barh(names, shares, color="#1f4e9c")
    ax.bar_label(bars, labels=[f"{v:.0%}" for v in shares], padding=3, fontsize=9)
    ax.set_xlim(0, min(max(max(shares) * 1.15, 0.05), 1.12))
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel(f"share of importance for {s.objective_metric} ({s.importance.method})")
    ax.set_title(f"Which flags mattered ({s.importance.trials_used} completed trials)")
    ax.grid(axis="x", alpha=0.3)
    return fig


def _annotate_groups(ax: Axes, points: Sequence[tuple[float, float, str]]) -> None:
    """Label points, one label per cluster, so trials that landed close together do not print over each other.

    Points closer than ~2 % of the axis span in x and ~4 % in y share one label.
    """
    if not points:
        return
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    dx, dy = (max(xs) - min(xs)) * 0.02 or 1e-9, (max(ys) - min(ys)) * 0.04 or 1e-9
    clusters: list[tuple[float, float, list[str]]] = []
    for x, y, text in points:
        for cx, cy, texts in clusters:
            if abs(x - cx) <= dx and abs(y - cy) <= dy:
                texts.append(text)
                break
        else:
            clusters.append((x, y, [text]))
    for x, y, texts in clusters:
        ax.annotate(", ".join(texts), (x, y), textcoords="offset points", xytext=(6, 4), fontsize=7, color="#555555")


_SERIES = ["#1f4e9c", "#17becf", "#9467bd", "#7f7f7f", "#bcbd22", "#8c564b"]  # no green: that is "ok"


def draw_versus(s: StudySummary, flag: str, *, colour_by: str | None = None) -> Figure:
    from matplotlib.lines import Line2D

    fig, ax = _new_figure()
    outcomes: set[str] = set()
    groups = sorted({g for r in s.trials if r.outcome == "ok" and (g := flag_value(r, colour_by or "")) is not None})
    labels: list[tuple[float, float, str]] = []
    for r in s.trials:
        x = flag_value(r, flag)
        value = r.metric_value(s.objective_metric) if r.outcome == "ok" else 0.0
        if x is None or value is None:
            continue
        look = outcome_look(r.outcome)
        group = flag_value(r, colour_by) if colour_by else None
        if r.outcome == "ok" and group is not None:
            colour = _SERIES[groups.index(group) % len(_SERIES)]
            look = look._replace(colour=colour)
        else:
            outcomes.add(r.outcome)
        ax.plot(x, value, **look.style(8))
        labels.append((x, value, f"#{r.number}"))
    _annotate_groups(ax, labels)
    _outcome_legend(ax, outcomes)
    if colour_by and groups:
        handles = [
            Line2D(
                [],
                [],
                color=_SERIES[i % len(_SERIES)],
                marker="o",
                linestyle="",
                markersize=8,
                label=f"ok, {short_name(colour_by)} {g:g}",
            )
            for i, g in enumerate(groups)
        ]
        legend = ax.get_legend()
        ax.legend(
            handles=[*handles, *(legend.legend_handles if legend else [])], fontsize=8, loc="best", framealpha=0.9
        )
    ax.set_xlabel(f"--{flag} (as the server ran it)")
    ax.set_ylabel(_value_label(s))
    ax.set_title(f"{s.objective_metric} vs --{flag} (failed and infeasible trials at 0)")
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=-1)
    return fig


def draw_categories(s: StudySummary) -> Figure:
    names = sorted({c.category for tc in s.categories for c in tc.categories})
    fig, ax = _new_figure(8.0, 4.0)
    width = min(0.8 / len(s.categories), 0.25)
    palette = ["#1f4e9c", "#9aa7b8", "#c9b27c", "#6c8f6b", "#b07aa1"]
    for i, tc in enumerate(s.categories):
        by_name = {c.category: c for c in tc.categories}
        xs, heights, errors = [], [], []
        for j, name in enumerate(names):
            stats = by_name.get(name)
            if stats is None or stats.accept_length is None:
                continue
            xs.append(j + (i - (len(s.categories) - 1) / 2) * width)
            heights.append(stats.accept_length.value)
            errors.append(stats.accept_length.ci95 or 0.0)
        bars = ax.bar(xs, heights, width, yerr=errors, capsize=3, label=tc.label, color=palette[i % len(palette)])
        ax.bar_label(bars, labels=[f"{h:.2f}" for h in heights], padding=2, fontsize=8)
    ax.set_xticks(range(len(names)), names)
    ax.set_xlim(-0.7, len(names) - 0.3)
    ax.set_ylim(
        0,
        max(
            (
                c.accept_length.value + (c.accept_length.ci95 or 0)
                for tc in s.categories
                for c in tc.categories
                if c.accept_length
            ),
            default=1.0,
        )
        * 1.15,
    )
    ax.set_xlabel("prompt category")
    ax.set_ylabel("accept length [tok/step]")
    ax.set_title("Accepted tokens per verify step, by prompt category")
    ax.legend(fontsize=8, loc="lower right", framealpha=0.9)
    ax.grid(axis="y", alpha=0.3)
    return fig


def draw_feasibility(s: StudySummary, x_flag: str, y_flag: str) -> Figure:
    from matplotlib.ticker import MaxNLocator

    fig, ax = _new_figure()
    outcomes: set[str] = set()
    labels: list[tuple[float, float, str]] = []
    for r in s.trials:
        x, y = flag_value(r, x_flag), flag_value(r, y_flag)
        if x is None or y is None:
            continue
        outcomes.add(r.outcome)
        ax.plot(x, y, alpha=0.85, **outcome_look(r.outcome).style(10))
        speed = r.metric_value(s.objective_metric)
        shown = f" ({speed:.0f})" if speed is not None and r.outcome == "ok" else ""
        labels.append((x, y, f"#{r.number}{shown}"))
    _annotate_groups(ax, labels)
    _outcome_legend(ax, outcomes)
    ax.set_xlabel(f"--{x_flag}")
    ax.set_ylabel(f"--{y_flag}")
    ax.set_title(f"Tried configurations by outcome (label: #trial ({s.objective_unit}))")
    ax.grid(alpha=0.3)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def draw_pareto(s: StudySummary) -> Figure:
    assert s.pareto is not None
    fig, ax = _new_figure()
    for point in s.pareto:
        ax.plot(*point.values[:2], marker="o", linestyle="", color="#1f4e9c" if point.on_front else "#bbbbbb")
    front = sorted((p.values for p in s.pareto if p.on_front), key=lambda v: v[0])
    if front:
        ax.plot([v[0] for v in front], [v[1] for v in front], color="#1f4e9c", linewidth=1, label="Pareto front")
        ax.legend(fontsize=8)
    ax.set_xlabel(f"objective 1 ({s.directions[0]})")
    ax.set_ylabel(f"objective 2 ({s.directions[1]})")
    ax.set_title("Pareto front")
    ax.grid(alpha=0.3)
    return fig


def draw_levels_front(s: StudySummary) -> Figure:
    assert s.load_levels is not None
    levels = s.load_levels
    fig, ax = _new_figure()
    concurrencies = sorted({p.concurrency for p in levels.front})
    winners = {(w.trial, w.concurrency) for w in levels.winners}
    for p in levels.front:
        colour = _SERIES[concurrencies.index(p.concurrency) % len(_SERIES)]
        ax.plot(
            p.per_gpu_tok_s,
            p.per_user_tok_s,
            marker="o" if not p.slo_broken else "x",
            linestyle="",
            color=colour,
            alpha=1.0 if p.on_front else 0.35,
            markersize=8 if (p.trial, p.concurrency) in winners else 5,
        )
    on_front = sorted((p for p in levels.front if p.on_front), key=lambda p: p.per_gpu_tok_s)
    if on_front:
        ax.plot(
            [p.per_gpu_tok_s for p in on_front],
            [p.per_user_tok_s for p in on_front],
            color="#333333",
            linewidth=1,
            label="front (no trial better on both)",
        )
    _annotate_groups(ax, [(p.per_gpu_tok_s, p.per_user_tok_s, f"#{p.trial}") for p in on_front])
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], marker="o", linestyle="", color=_SERIES[i % len(_SERIES)], label=f"concurrency {c}")
        for i, c in enumerate(concurrencies)
    ]
    if any(p.slo_broken for p in levels.front):
        handles.append(Line2D([], [], marker="x", linestyle="", color="#555555", label="breaks the SLO"))
    ax.legend(handles=[*handles, *ax.get_legend_handles_labels()[0]], fontsize=8, loc="best", framealpha=0.9)
    ax.set_xlabel(f"tokens/s per GPU (output tok/s ÷ {levels.gpus} GPUs)")
    ax.set_ylabel("tokens/s per user (decode tok/s)")
    ax.set_title("Per user against per GPU, every measured trial at every load level")
    ax.grid(alpha=0.3)
    return fig


def draw_schedule(s: StudySummary) -> Figure:
    """Grouped by level: the schedule's mean and every static winner's, with intervals and launches."""
    assert s.schedule is not None
    verdict = s.schedule
    fig, ax = _new_figure()
    statics = list(dict.fromkeys(c.trial for level in verdict.levels for c in level.statics))
    width = 0.8 / (len(statics) + 1)
    for x, level in enumerate(verdict.levels):
        bars = [("schedule", level.schedule_mean, level.schedule_ci95, level.schedule_values, "#2a9d3a")]
        bars += [
            (c.label, c.mean, c.ci95, c.values, _SERIES[statics.index(c.trial) % len(_SERIES)]) for c in level.statics
        ]
        for i, (label, mean, ci95, values, colour) in enumerate(bars):
            at = x - 0.4 + width * (i + 0.5)
            if mean is not None:
                ax.errorbar(
                    [at],
                    [mean],
                    yerr=[[ci95 or 0.0], [ci95 or 0.0]],
                    fmt="o",
                    color=colour,
                    capsize=4,
                    markersize=8,
                    label=label if x == 0 else None,
                )
            ax.plot([at] * len(values), values, ".", color="#999999")
    ax.set_xticks(range(len(verdict.levels)))
    ax.set_xticklabels([f"{v.concurrency} users\n(schedule: {v.steps} steps)" for v in verdict.levels])
    ax.set_ylabel(_value_label(s))
    ax.set_title("recommended" if verdict.recommended else "declined", fontsize=10)
    ax.legend(fontsize=8, loc="best", framealpha=0.9)
    ax.grid(axis="y", alpha=0.3)
    return fig


def draw_break_even(s: StudySummary) -> Figure:
    """Predicted tok/s against accept length per drafter (its fastest trial's cycle time), the
    best as a line, every measured drafting trial as a point, and where each line crosses the best."""
    result = s.break_even
    assert result is not None and result.best_tok_s is not None
    fig, ax = _new_figure()
    top = max([6.0, *(f.break_even + 1 for f in result.drafters), *(p.accept_length + 1 for p in result.points)])
    lengths = [1 + i * (top - 1) / 100 for i in range(101)]
    colours = ["#1f4e9c", "#d55e00", "#2a9d3a", "#8e44ad", "#e69f00", "#555555"]
    for fit, colour in zip(result.drafters, colours * len(result.drafters), strict=False):
        label = f"{fit.drafter}, {fit.steps} steps: needs {fit.break_even:.2f}"
        # at its fastest trial's measured cycle time, the cost the break-even number uses
        cycle_s = fit.measured_accept / fit.measured_tok_s
        ax.plot(lengths, [x / cycle_s for x in lengths], color=colour, linewidth=1.2, label=label)
        ax.plot(fit.break_even, result.best_tok_s, marker="|", markersize=14, color=colour)
        measured = [p for p in result.points if p.drafter == fit.drafter]
        ax.plot(
            [p.accept_length for p in measured],
            [p.tok_s for p in measured],
            marker="o",
            linestyle="",
            color=colour,
            markersize=5,
        )
    ax.axhline(
        result.best_tok_s,
        color="#888888",
        linestyle="--",
        linewidth=1,
        label=f"best: trial {result.best_trial}, {result.best_tok_s:.1f} tok/s",
    )
    ax.set_xlabel("accept length (tokens per verify pass)")
    ax.set_ylabel("decode tok/s (one stream)")
    ax.set_title("Break-even accept length per drafter")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def verdict_reference(s: StudySummary) -> Finalist | None:
    """The baseline the verdict compares with, when the race stored each configuration's gain over it."""
    confirmation = s.confirmation
    if confirmation is None or not confirmation.versus:
        return None
    reference = confirmation.finalist(confirmation.reference)
    return reference if reference is not None and reference.confirmed else None


def draw_verdict(s: StudySummary) -> Figure:
    assert s.confirmation is not None
    confirmation = s.confirmation
    shown = [f for f in confirmation.finalists if f.confirmed][::-1]  # the best at the top
    reference = verdict_reference(s)
    if reference is not None:
        return draw_gains(s, shown, reference)
    fig, ax = _new_figure(8.0, 1.2 + 0.5 * len(shown))
    for row, finalist in enumerate(shown):
        chosen = finalist.trial == confirmation.best
        colour = "#2a9d3a" if chosen else ("#1f5fa8" if finalist.baseline else "#555555")
        ax.errorbar(
            [finalist.mean],
            [row],
            xerr=[[finalist.ci95 or 0.0], [finalist.ci95 or 0.0]],
            fmt="o",
            color=colour,
            markersize=9 if chosen else 7,
            capsize=4,
        )
        ax.plot(finalist.values, [row] * len(finalist.values), ".", color="#999999")
        if finalist.first is not None:
            ax.plot([finalist.first], [row], "D", markerfacecolor="none", color="#999999")
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels([f"{f.label}{' (recommended)' if f.trial == confirmation.best else ''}" for f in shown])
    ax.set_xlabel(_value_label(s))
    ax.grid(axis="x", alpha=0.3)
    return fig


def draw_gains(s: StudySummary, shown: Sequence[Finalist], reference: Finalist) -> Figure:
    """Each finalist's gain over the reference with the verdict's interval; the reference at zero."""
    assert s.confirmation is not None
    confirmation = s.confirmation
    versus = {g.trial: g for g in confirmation.versus}
    fig, ax = _new_figure(8.0, 1.2 + 0.5 * len(shown))
    ax.axvline(0.0, color="#1f5fa8", linewidth=1, alpha=0.6)
    for row, finalist in enumerate(shown):
        chosen = finalist.trial == confirmation.best
        colour = "#2a9d3a" if chosen else ("#1f5fa8" if finalist.baseline else "#555555")
        ax.plot(
            [100 * (v / reference.mean - 1) for v in finalist.values],
            [row] * len(finalist.values),
            ".",
            color="#999999",
        )
        gain = versus.get(finalist.trial)
        if finalist.trial == reference.trial or gain is None:
            ax.plot([0.0 if gain is None else 100 * gain.gain], [row], "o", color=colour, markersize=9 if chosen else 7)
            continue
        low = gain.low if gain.low is not None else gain.gain
        high = gain.high if gain.high is not None else gain.gain
        ax.errorbar(
            [100 * gain.gain],
            [row],
            xerr=[[100 * (gain.gain - low)], [100 * (high - gain.gain)]],
            fmt="o",
            color=colour,
            markersize=9 if chosen else 7,
            capsize=4,
        )
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels([f"{f.label}{' (recommended)' if f.trial == confirmation.best else ''}" for f in shown])
    ax.set_xlabel(f"gain over {reference.label} [%]")
    ax.grid(axis="x", alpha=0.3)
    return fig
