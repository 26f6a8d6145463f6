"""The study report: what a study found, from Optuna storage to a folder a person can open.

Arrow: Optuna storage -> report folder (``index.html``, PNG figures, ``summary.json``,
``best-profile.yaml``). The numbers are computed first, into a :class:`StudySummary`: trial records
(:func:`autotune.study.records`), Optuna's parameter importance (PED-ANOVA, its default), and the
per-category statistics kept in each trial's measurement artifact. Drawing (matplotlib with the
headless ``Agg`` backend, imported only when drawing) and the HTML page present that summary and
compute nothing of their own. ``autotune show`` reuses the computing half.
"""

from __future__ import annotations

import html
import re
import shlex
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import optuna
from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta
from optuna.trial import FrozenTrial, TrialState
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.errors import AutotuneError, UserError
from autotune.measure import OBJECTIVE_UNITS, CategoryStats, Measurement
from autotune.profile import Profile, render_shell, render_yaml
from autotune.records import TrialRecord
from autotune.space import FlagValue
from autotune.study import MeasurementList, best_record, build_profile, records

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MEASUREMENT_SUFFIX = ".measurement.json"
# The knobs the issue names; a figure about one is drawn only when the study tuned it.
MEM_FRACTION = "mem-fraction-static"
DRAFT_DEPTH = "speculative-num-steps"
DRAFT_TOKENS = "speculative-num-draft-tokens"
TOPK = "speculative-eagle-topk"
# User attrs shown as the winner's readings when a study recorded them (e.g. "roofline_share", "memory_kv_gb").
READING_PREFIXES = ("roofline", "memory")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Importance(_Frozen):
    """Which tuned flags mattered for the objective, as shares that add up to 1."""

    method: str = "PED-ANOVA"
    values: dict[str, float] = Field(default_factory=dict, description="flag -> share, largest first")
    trials_used: int = 0
    note: str | None = Field(default=None, description="why there are no values, or a caveat about them")


class TrialCategories(_Frozen):
    """Per prompt category numbers of one measured trial (at the objective's concurrency)."""

    trial: int
    label: str
    categories: list[CategoryStats]


class BaselineComparison(_Frozen):
    name: str
    trial: int
    outcome: str
    value: float | None
    best_gain: float | None = Field(default=None, description="(best - baseline) / baseline")


class ParetoPoint(_Frozen):
    trial: int
    values: list[float]
    on_front: bool


class StudySummary(_Frozen):
    """Everything the report shows, computed from one study."""

    study: str
    generated_at: datetime
    simulated: bool
    engine: str | None
    model: str | None
    gpus: list[str]
    objective: str
    objective_metric: str
    objective_unit: str
    directions: list[str]
    tuned: list[str]
    stop_reason: str | None
    trials: list[TrialRecord]
    outcome_counts: dict[str, int]
    best: TrialRecord | None
    baselines: list[BaselineComparison]
    importance: Importance
    categories: list[TrialCategories] = Field(description="the best trial first, then measured baselines")
    launch_s_total: float
    measure_s_total: float
    best_readings: dict[str, float | int | str] = Field(
        default_factory=dict, description="the best trial's roofline share and memory readings, when recorded"
    )
    profile: Profile | None
    launch_script: str | None
    pareto: list[ParetoPoint] | None = Field(default=None, description="only for studies with two objectives")
    notes: list[str] = Field(default_factory=list)

    @property
    def best_value(self) -> float | None:
        return self.best.metric_value(self.objective_metric) if self.best else None

    @property
    def best_ci95(self) -> float | None:
        if self.best is None:
            return None
        ci = self.best.metrics.get(self.objective_metric, {}).get("ci95")
        return float(ci) if isinstance(ci, (int, float)) else None


# ---------------------------------------------------------------- computing


def artifact_store(folder: Path | None) -> FileSystemArtifactStore | None:
    """The study's file-system artifact store, if it has one (a study of only invalid configs has none)."""
    if folder is None or not folder.is_dir():
        return None
    return FileSystemArtifactStore(str(folder))


def trial_measurements(
    study: optuna.Study, trial: FrozenTrial, store: FileSystemArtifactStore | None
) -> list[Measurement]:
    """The measurements a trial uploaded as ``trial-NNNN.measurement.json`` (one per concurrency level).

    A trial that reused another's measurement (same effective config) reads the original's.
    """
    if store is None:
        return []
    original = trial.user_attrs.get("duplicate_of")
    if isinstance(original, int):
        trial = study.get_trials(deepcopy=False)[original]
    for meta in get_all_artifact_meta(trial, storage=study._storage):
        if not meta.filename.endswith(MEASUREMENT_SUFFIX):
            continue
        try:
            with store.open_reader(meta.artifact_id) as reader:
                return MeasurementList.model_validate_json(reader.read()).root
        except (OSError, ValidationError, optuna.artifacts.exceptions.ArtifactNotFound):
            return []
    return []


def _objective_measurement(measurements: Sequence[Measurement], concurrency: int) -> Measurement | None:
    return next((m for m in measurements if m.concurrency == concurrency), measurements[0] if measurements else None)


def trial_categories(
    study: optuna.Study, number: int, label: str, store: FileSystemArtifactStore | None
) -> TrialCategories | None:
    """Per-category statistics of trial ``number`` at the objective's concurrency, from its artifact."""
    concurrency = int(study.user_attrs.get("space", {}).get("objective", {}).get("concurrency", 1))
    trial = study.get_trials(deepcopy=False)[number]
    measurement = _objective_measurement(trial_measurements(study, trial, store), concurrency)
    if measurement is None or not measurement.categories:
        return None
    return TrialCategories(trial=number, label=label, categories=list(measurement.categories))


def param_importance(study: optuna.Study) -> Importance:
    """Optuna's parameter importance (PED-ANOVA) over the completed trials; infeasible ones count as 0.

    Optuna's warnings (e.g. too few trials in some regime) become the note instead of going to stderr.
    """
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.params]
    if len(study.directions) != 1:
        return Importance(note="importance is computed for single-objective studies only")
    if len(complete) < 2:
        return Importance(trials_used=len(complete), note="needs at least 2 completed trials")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            values = optuna.importance.get_param_importances(study)
        except (ValueError, RuntimeError) as exc:
            return Importance(trials_used=len(complete), note=f"Optuna could not compute it: {exc}")
    note = None
    if caught:
        named = sorted({m for w in caught for m in re.findall(r"`([^`]+)`", str(w.message))})
        where = f" of {', '.join('--' + n for n in named)}" if named else ""
        note = (
            f"a rough estimate from {len(complete)} completed trials: Optuna warns that some value ranges{where} "
            "hold fewer than 2 trials"
            if named
            else f"a rough estimate from {len(complete)} completed trials (Optuna: {caught[0].message})"
        )
    ordered = dict(sorted(((k, float(v)) for k, v in values.items()), key=lambda kv: -kv[1]))
    return Importance(values=ordered, trials_used=len(complete), note=note)


def _pareto(study: optuna.Study) -> list[ParetoPoint] | None:
    if len(study.directions) != 2:
        return None
    front = {t.number for t in study.best_trials}
    return [
        ParetoPoint(trial=t.number, values=list(t.values), on_front=t.number in front)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.values is not None
    ]


def summarise(study: optuna.Study, *, artifacts_dir: Path | None) -> StudySummary:
    """Compute every number of the report from the study's storage and artifact store."""
    attrs = study.user_attrs
    space: dict[str, Any] = attrs.get("space", {})
    metric = str(space.get("objective", {}).get("metric", "decode_tok_s"))
    store = artifact_store(artifacts_dir)
    notes: list[str] = []
    if store is None:
        notes.append(f"no artifact store at {artifacts_dir}: per-category numbers are not shown")
    multi = len(study.directions) > 1
    all_records = [] if multi else records(study)
    best = None if multi else best_record(study)
    if multi:
        notes.append("this study has several objectives: the trial table and the winner are not shown")

    baselines = []
    for r in all_records:
        if r.baseline is None or r.state != "COMPLETE":
            continue
        value = r.metric_value(metric) if r.outcome == "ok" else None
        best_value = best.metric_value(metric) if best else None
        gain = (best_value - value) / value if best_value is not None and value else None
        baselines.append(
            BaselineComparison(name=r.baseline, trial=r.number, outcome=r.outcome, value=value, best_gain=gain)
        )

    categories = []
    if best is not None:
        found = trial_categories(study, best.number, f"best (#{best.number})", store)
        if found is not None:
            categories.append(found)
        elif store is not None:
            notes.append(f"trial {best.number} has no readable measurement artifact: no per-category numbers")
    for b in baselines:
        if b.outcome == "ok" and (best is None or b.trial != best.number):
            found = trial_categories(study, b.trial, f"{b.name} (#{b.trial})", store)
            if found is not None:
                categories.append(found)

    profile = launch_script = None
    readings: dict[str, float | int | str] = {}
    if best is not None:
        for key, value in study.get_trials(deepcopy=False)[best.number].user_attrs.items():
            if (
                key.startswith(READING_PREFIXES)
                and isinstance(value, (int, float, str))
                and not isinstance(value, bool)
            ):
                readings[key] = value
    if best is not None and "space" in attrs:
        profile = build_profile(study, best)
        try:
            launch_script = render_shell(profile, host="127.0.0.1", port=30000)
        except AutotuneError as exc:
            notes.append(f"the winner's launch command cannot be rendered here: {exc.message}")

    measured = [r for r in all_records if r.duplicate_of is None]
    return StudySummary(
        study=study.study_name,
        generated_at=datetime.now(timezone.utc),
        simulated=bool(attrs.get("simulated", False)),
        engine=attrs.get("engine"),
        model=attrs.get("model"),
        gpus=list(attrs.get("gpus", [])),
        objective=str(attrs.get("objective", metric)),
        objective_metric=metric,
        objective_unit=OBJECTIVE_UNITS.get(metric, ""),
        directions=[d.name.lower() for d in study.directions],
        tuned=list(space.get("tuned", {})),
        stop_reason=attrs.get("last_stop_reason"),
        trials=all_records,
        outcome_counts=dict(Counter(r.outcome for r in all_records)),
        best=best,
        baselines=baselines,
        importance=param_importance(study),
        categories=categories,
        launch_s_total=round(sum(r.launch_s or 0.0 for r in measured), 1),
        measure_s_total=round(sum(r.measure_s or 0.0 for r in measured), 1),
        best_readings=readings,
        profile=profile,
        launch_script=launch_script,
        pareto=_pareto(study),
        notes=notes,
    )


# ---------------------------------------------------------------- drawing (matplotlib, Agg)


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
}
_FAILED_LOOK = Look("#c0392b", "X", "failed (crash, timeout, interrupted)")


def _look(outcome: str) -> Look:
    """How an outcome is drawn; ``predicted-X`` (never launched) is X's look, hollow."""
    measured = outcome.removeprefix("predicted-")
    if measured != outcome and measured in _OUTCOME_LOOK:
        look = _OUTCOME_LOOK[measured]
        return look._replace(label=f"{look.label} (predicted, not launched)", hollow=True)
    return _OUTCOME_LOOK.get(outcome, _FAILED_LOOK)


def _flag(record: TrialRecord, name: str) -> float | None:
    """A flag's value as the server ran it (read back), else as requested; None when unknown."""
    value: FlagValue | None = record.effective.get(name, record.flags.get(name))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


@dataclass(frozen=True)
class ReportFigure:
    """One figure of the report: its file, its title, how to read it, and why it is missing if it is."""

    file: str
    title: str
    caption: str
    skipped: str | None = None


def _new_figure(width: float = 8.0, height: float = 4.5) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    return fig, fig.add_subplot()


def _outcome_legend(ax: Axes, outcomes: set[str]) -> None:
    from matplotlib.lines import Line2D

    handles = []
    for outcome in sorted(outcomes, key=lambda o: (o != "ok", o)):
        look = _look(outcome)
        handles.append(Line2D([], [], label=look.label, **look.style(8)))
    if handles:
        ax.legend(handles=handles, fontsize=8, loc="best", framealpha=0.9)


def _value_label(s: StudySummary) -> str:
    return f"{s.objective_metric} [{s.objective_unit}]" if s.objective_unit else s.objective_metric


def _draw_history(s: StudySummary) -> Figure:
    from matplotlib.ticker import MaxNLocator

    fig, ax = _new_figure()
    best_so_far: list[tuple[int, float]] = []
    current: float | None = None
    for r in s.trials:
        value = r.metric_value(s.objective_metric) if r.outcome == "ok" else 0.0
        ci = r.metrics.get(s.objective_metric, {}).get("ci95") if r.outcome == "ok" else None
        if value is None:
            continue
        yerr = ci if isinstance(ci, (int, float)) else None
        ax.errorbar(r.number, value, yerr=yerr, capsize=3, **_look(r.outcome).style(8))
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


def _draw_importance(s: StudySummary) -> Figure:
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


def _draw_versus(s: StudySummary, flag: str, *, colour_by: str | None = None) -> Figure:
    from matplotlib.lines import Line2D

    fig, ax = _new_figure()
    outcomes: set[str] = set()
    groups = sorted({g for r in s.trials if r.outcome == "ok" and (g := _flag(r, colour_by or "")) is not None})
    labels: list[tuple[float, float, str]] = []
    for r in s.trials:
        x = _flag(r, flag)
        value = r.metric_value(s.objective_metric) if r.outcome == "ok" else 0.0
        if x is None or value is None:
            continue
        look = _look(r.outcome)
        group = _flag(r, colour_by) if colour_by else None
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


def _draw_categories(s: StudySummary) -> Figure:
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


def _draw_feasibility(s: StudySummary, x_flag: str, y_flag: str) -> Figure:
    from matplotlib.ticker import MaxNLocator

    fig, ax = _new_figure()
    outcomes: set[str] = set()
    labels: list[tuple[float, float, str]] = []
    for r in s.trials:
        x, y = _flag(r, x_flag), _flag(r, y_flag)
        if x is None or y is None:
            continue
        outcomes.add(r.outcome)
        ax.plot(x, y, alpha=0.85, **_look(r.outcome).style(10))
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


def _draw_pareto(s: StudySummary) -> Figure:
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


def _tuned(s: StudySummary, flag: str) -> str | None:
    if flag not in s.tuned:
        return f"--{flag} is not tuned in this study"
    if sum(1 for r in s.trials if _flag(r, flag) is not None) < 2:
        return f"fewer than 2 trials with a known --{flag}"
    return None


def plan_figures(s: StudySummary) -> list[tuple[ReportFigure, Callable[[], Figure] | None]]:
    """The report's figures in page order; each with a drawing function, or None and a reason."""
    plans: list[tuple[ReportFigure, Callable[[], Figure] | None]] = []

    def add(fig: ReportFigure, draw: Callable[[], Figure], skipped: str | None) -> None:
        if skipped:
            plans.append((ReportFigure(fig.file, fig.title, fig.caption, skipped), None))
        else:
            plans.append((fig, draw))

    add(
        ReportFigure(
            "history.png",
            "Optimisation history",
            f"Each trial's {s.objective_metric} with its 95% confidence interval; the line is the best feasible "
            "value so far. Trials that did not fit in memory, were invalid, or failed are drawn at 0.",
        ),
        lambda: _draw_history(s),
        None if s.trials else "no trials yet",
    )
    add(
        ReportFigure(
            "importance.png",
            "Parameter importance",
            "How much each tuned flag explains the difference between the best trials and the rest "
            f"(Optuna's {s.importance.method}). Infeasible trials count with value 0, so flags that decide "
            "whether a configuration fits rank high too.",
        ),
        lambda: _draw_importance(s),
        None if s.importance.values else (s.importance.note or "not available"),
    )
    add(
        ReportFigure(
            "speed-vs-mem-fraction.png",
            f"{s.objective_metric} vs {MEM_FRACTION}",
            "Share of GPU memory SGLang reserves for weights and KV cache. Too low and the pools do not fit; "
            "too high and CUDA graphs run out of memory.",
        ),
        lambda: _draw_versus(s, MEM_FRACTION),
        _tuned(s, MEM_FRACTION),
    )
    add(
        ReportFigure(
            "speed-vs-draft-depth.png",
            f"{s.objective_metric} vs draft depth ({DRAFT_DEPTH})",
            "Deeper drafts propose more tokens per verify step but each further token is accepted less "
            "often and costs a draft pass. Labels give the trial and its tree width (topk).",
        ),
        lambda: _draw_versus(s, DRAFT_DEPTH, colour_by=TOPK),
        _tuned(s, DRAFT_DEPTH),
    )
    add(
        ReportFigure(
            "accept-by-category.png",
            "Accept length per prompt category",
            "Mean accepted tokens per verify step, per prompt category of the suite, for the best trial and "
            "the measured baselines (error bars: 95% CI).",
        ),
        lambda: _draw_categories(s),
        None if s.categories else "no per-category measurements stored",
    )
    feasibility_skip = _tuned(s, MEM_FRACTION) or (
        None
        if sum(1 for r in s.trials if _flag(r, MEM_FRACTION) is not None and _flag(r, DRAFT_TOKENS) is not None) >= 2
        else f"fewer than 2 trials with both --{MEM_FRACTION} and --{DRAFT_TOKENS} known"
    )
    add(
        ReportFigure(
            "feasibility.png",
            "Feasibility map",
            f"Every tried configuration by --{MEM_FRACTION} and --{DRAFT_TOKENS}, coloured by outcome: where "
            "the memory boundary lies and which draft sizes ran.",
        ),
        lambda: _draw_feasibility(s, MEM_FRACTION, DRAFT_TOKENS),
        feasibility_skip,
    )
    add(
        ReportFigure("pareto.png", "Pareto front", "Trials on the front are not beaten on both objectives at once."),
        lambda: _draw_pareto(s),
        None if s.pareto else f"the study has {len(s.directions)} objective; a Pareto front needs two",
    )
    return plans


# ---------------------------------------------------------------- the page


def short_name(flag: str) -> str:
    return flag.removeprefix("speculative-").replace("num-", "")


def _fmt(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _num(value: float | None, digits: int = 1, ci: float | None = None) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f}" + (f" ± {ci:.{digits}f}" if ci is not None else "")


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], *, cls: str = "") -> str:
    """An HTML table; cells are already escaped (or built from escaped parts)."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _summary_rows(s: StudySummary) -> list[tuple[str, str]]:
    e = html.escape
    counts = ", ".join(f"{n} {e(o)}" for o, n in sorted(s.outcome_counts.items(), key=lambda kv: -kv[1]))
    rows = [
        ("study", e(s.study)),
        ("engine / model", e(f"{s.engine or '?'} / {s.model or '?'}")),
        (
            "GPUs",
            e(", ".join(s.gpus) or "?")
            + (" <b>(simulated)</b>" if s.simulated and not any("simulated" in g for g in s.gpus) else ""),
        ),
        ("objective", e(s.objective)),
        ("trials", f"{len(s.trials)} ({counts})" if s.trials else "0"),
    ]
    if s.best is not None:
        accept = s.best.metric_value("accept_length")
        rows += [
            (
                "best trial",
                f'<span id="best-trial">{s.best.number}</span>'
                + (f" (baseline {e(s.best.baseline)})" if s.best.baseline else ""),
            ),
            (
                f"best {e(s.objective_metric)}",
                f'<span id="best-value">{_num(s.best_value, 2)}</span> ± '
                f'<span id="best-ci">{_num(s.best_ci95, 2)}</span> {e(s.objective_unit)} (95% CI)',
            ),
            ("best accept length", f'<span id="best-accept">{_num(accept, 2)}</span> tok/step'),
        ]
        for key, value in s.best_readings.items():
            rows.append((e(key.replace("_", " ")), e(_fmt(value))))
    else:
        rows.append(("best trial", "none feasible yet"))
    for b in s.baselines:
        if s.best is not None and b.trial == s.best.number:
            gain = " — the best trial"
        else:
            gain = f" — the best is {b.best_gain:+.0%}" if b.best_gain is not None else ""
        shown = f"{_num(b.value, 2)} {e(s.objective_unit)}" if b.value is not None else e(b.outcome)
        rows.append((f"baseline {e(b.name)}", f"trial {b.trial}: {shown}{gain}"))
    rows += [
        ("time spent", f"{s.launch_s_total / 60:.1f} min launching, {s.measure_s_total / 60:.1f} min measuring"),
        ("stopped because", e(s.stop_reason or "–")),
        ("generated", e(s.generated_at.strftime("%Y-%m-%d %H:%M UTC"))),
    ]
    return rows


def _trials_rows(s: StudySummary) -> list[list[str]]:
    e = html.escape
    rows = []
    for r in s.trials:
        note = r.baseline or ""
        if r.duplicate_of is not None:
            note = (note + "; " if note else "") + f"same effective config as #{r.duplicate_of}"
        elif r.outcome != "ok" and r.reason:
            note = (note + ": " if note else "") + r.reason
        ci = r.metrics.get(s.objective_metric, {}).get("ci95")
        colour = _look(r.outcome).colour
        rows.append(
            [
                f"{r.number}" + (" ★" if s.best is not None and r.number == s.best.number else ""),
                f'<span style="color:{colour}">{e(r.outcome)}</span>',
                *(e(_fmt(r.flags.get(n))) for n in s.tuned),
                _num(r.metric_value(s.objective_metric), 1, ci if isinstance(ci, (int, float)) else None),
                _num(r.metric_value("accept_length"), 2),
                e(note),
            ]
        )
    return rows


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #222; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
.banner { background: #fff4d6; border: 1px solid #e6c36a; padding: .6rem 1rem; border-radius: 4px; }
table { border-collapse: collapse; margin: .6rem 0; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { background: #f3f5f8; } table.kv td:first-child { font-weight: 600; background: #fafbfc; }
td.num, table.trials td { font-variant-numeric: tabular-nums; }
figure { margin: 1.5rem 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: .9rem; max-width: 60rem; }
pre { background: #f6f8fa; padding: .8rem; overflow-x: auto; font-size: .85rem; }
.skipped { color: #777; font-style: italic; }
"""


def render_html(s: StudySummary, figures: Sequence[ReportFigure]) -> str:
    """The report page: summary, winner, per-category table, figures, importance, every trial."""
    e = html.escape
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>autotune report: {e(s.study)}</title>"
        f"<style>{_CSS}</style></head><body>",
        f"<h1>autotune report: {e(s.study)}</h1>",
    ]
    if s.simulated:
        parts.append(
            '<p class="banner">Simulated: these numbers were measured on the autotune SGLang twin, '
            "a performance model, not on real GPUs.</p>"
        )
    parts.append("<h2>Summary</h2>")
    parts.append(_table(["", ""], _summary_rows(s), cls="kv").replace("<thead><tr><th></th><th></th></tr></thead>", ""))

    parts.append("<h2>The winner</h2>")
    if s.best is None:
        parts.append("<p>No feasible trial has been measured yet.</p>")
    else:
        flag_rows = []
        for name, value in s.best.flags.items():
            ran = s.best.effective.get(name)
            changed = name in s.best.effective and ran != value
            shown = f"<b>{e(_fmt(ran))}</b> (the server changed it)" if changed else e(_fmt(ran))
            flag_rows.append([f"--{e(name)}", e(_fmt(value)), shown])
        parts.append(
            f'<p>Trial {s.best.number}. Saved as <a href="best-profile.yaml">best-profile.yaml</a> '
            f"(the same as <code>autotune export {e(s.study)}</code>).</p>"
        )
        parts.append(_table(["flag", "value", "as the server ran it"], flag_rows))
        metric_rows = [
            [
                e(name),
                _num(_as_float(m.get("value")), 3),
                _num(_as_float(m.get("ci95")), 3),
                e(str(m.get("unit", ""))),
                e(_fmt(m.get("n"))),
            ]
            for name, m in s.best.metrics.items()
        ]
        parts.append(_table(["metric", "value", "±95% CI", "unit", "n"], metric_rows))
        if s.launch_script:
            parts.append(
                "<p>Launch script (<code>autotune export "
                f"{e(s.study)} --format sh</code>):</p><pre>{e(_one_flag_a_line(s.launch_script))}</pre>"
            )

    if s.categories:
        parts.append("<h2>Per prompt category</h2>")
        rows = []
        for tc in s.categories:
            for c in tc.categories:
                rows.append(
                    [
                        e(tc.label),
                        e(c.category),
                        str(c.requests),
                        _num(c.decode_tok_s.value, 1, c.decode_tok_s.ci95),
                        _num(c.accept_length.value, 2, c.accept_length.ci95) if c.accept_length else "–",
                    ]
                )
        parts.append(_table(["trial", "category", "requests", "decode tok/s", "accept length [tok/step]"], rows))

    parts.append("<h2>Figures</h2>")
    for fig in figures:
        if fig.skipped:
            parts.append(f'<p class="skipped">{e(fig.title)}: not drawn ({e(fig.skipped)}).</p>')
            continue
        parts.append(
            f'<figure id="{e(fig.file.removesuffix(".png"))}"><img src="{e(fig.file)}" alt="{e(fig.title)}">'
            f"<figcaption><b>{e(fig.title)}.</b> {e(fig.caption)}</figcaption></figure>"
        )

    parts.append("<h2>Parameter importance</h2>")
    if s.importance.values:
        rows = [[f"--{e(k)}", f"{v:.1%}"] for k, v in s.importance.values.items()]
        parts.append(_table(["flag", "importance"], rows))
    if s.importance.note:
        parts.append(f"<p>{e(s.importance.note)}</p>")

    parts.append("<h2>Every trial</h2>")
    head = [
        "#",
        "outcome",
        *(e(short_name(n)) for n in s.tuned),
        f"{e(s.objective_metric)} [{e(s.objective_unit)}]",
        "accept length",
        "note",
    ]
    parts.append(_table(head, _trials_rows(s), cls="trials"))
    parts.append(
        "<p>– in a flag column: the flag was not passed, so the engine's default applied. ★ marks the best "
        "feasible trial. Server logs and "
        f"measurement JSON of every trial: <code>autotune dashboard {e(s.study)}</code>.</p>"
    )
    if s.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in s.notes) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _one_flag_a_line(script: str) -> str:
    """The script's long ``exec`` line broken before each flag, so it reads without scrolling."""
    lines = []
    for line in script.splitlines():
        if line.startswith("exec ") and len(line) > 100:
            groups: list[list[str]] = [[]]
            for token in shlex.split(line):
                if token.startswith("--"):
                    groups.append([])
                groups[-1].append(shlex.quote(token))
            line = " \\\n    ".join(" ".join(g) for g in groups if g)
        lines.append(line)
    return "\n".join(lines)


def _as_float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ReportFiles:
    folder: Path
    page: Path
    images: list[Path]
    skipped: list[str]


def write_report(s: StudySummary, folder: Path) -> ReportFiles:
    """Draw the figures and write the page, ``summary.json`` and ``best-profile.yaml`` into ``folder``.

    Raises:
        UserError: matplotlib (the ``report`` extra) is not installed.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UserError(
            "matplotlib is not installed", hint="install the extra: pip install 'autotune[report]'"
        ) from None
    folder.mkdir(parents=True, exist_ok=True)
    images, shown, skipped = [], [], []
    for fig, draw in plan_figures(s):
        path = folder / fig.file
        if draw is None:
            path.unlink(missing_ok=True)  # a figure of an earlier report that no longer applies
            skipped.append(f"{fig.title}: {fig.skipped}")
            shown.append(fig)
            continue
        drawn = draw()
        drawn.savefig(path)
        images.append(path)
        shown.append(fig)
    (folder / "summary.json").write_text(s.model_dump_json(indent=2) + "\n", encoding="utf-8")
    if s.profile is not None:
        (folder / "best-profile.yaml").write_text(render_yaml(s.profile), encoding="utf-8")
    else:
        (folder / "best-profile.yaml").unlink(missing_ok=True)
    page = folder / "index.html"
    page.write_text(render_html(s, shown), encoding="utf-8")
    return ReportFiles(folder=folder, page=page, images=images, skipped=skipped)


def build_report(study: optuna.Study, *, artifacts_dir: Path | None, folder: Path) -> ReportFiles:
    """Compute the study's summary and write its report folder."""
    return write_report(summarise(study, artifacts_dir=artifacts_dir), folder)


__all__ = [
    "Importance",
    "ReportFiles",
    "StudySummary",
    "TrialCategories",
    "build_report",
    "param_importance",
    "summarise",
    "trial_categories",
    "trial_measurements",
    "write_report",
]
