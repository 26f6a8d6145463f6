"""The study report: what a study found, from Optuna storage to a folder a person can open.

Arrow: Optuna storage -> :mod:`autotune.report.summary` (the numbers) -> :mod:`autotune.report.figures`
(PNG figures) -> this page (``index.html``), ``summary.json`` and ``best-profile.yaml``. The page
presents the summary and computes nothing of its own.
"""

from __future__ import annotations

import html
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autotune.engines.names import short_name
from autotune.errors import UserError
from autotune.profile import render_yaml
from autotune.report.console import break_even_text, schedule_comparison
from autotune.report.drawings import outcome_look
from autotune.report.figures import VERDICT_FIGURE, ReportFigure, plan_figures
from autotune.report.summary import StudySummary, summarise
from autotune.report.trials_table import trial_note
from autotune.study.schedule import ScheduleVerdict
from autotune.study.view import StudyView


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


# The stored readings' names, as a person reads them.
READING_NAMES = {
    "memory_weights_gib": "weights per GPU (GiB)",
    "memory_kv_pool_gib": "KV pool per GPU (GiB)",
    "memory_graph_gib": "CUDA graphs (GiB)",
    "memory_graph_batch": "CUDA graph batch size",
    "memory_server_free_gib": "free GPU memory at launch (GiB)",
    "memory_runtime_gib": "run-time memory besides graphs (GiB)",
    "memory_release_s": "memory released after (s)",
    "memory_released": "memory released",
    "roofline_share": "share of the bandwidth ceiling",
    "roofline_unknown": "bandwidth ceiling unknown",
}


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
            (
                "confirmed",
                f'<span id="best-confirmed">{s.best.measurement.confirmed_launches or 0}</span> launches'
                if s.best.measurement.confirmed_launches
                else '<span id="best-confirmed">0</span> launches: <b>UNCONFIRMED</b>, a single measurement',
            ),
        ]
        for key, value in s.best_readings.items():
            rows.append((e(READING_NAMES.get(key, key.replace("_", " "))), e(_fmt(value))))
    else:
        rows.append(("best trial", "none feasible yet"))
    for b in s.baselines:
        if s.best is not None and b.trial == s.best.number:
            gain = " — the best trial"
        else:
            gain = f" — the best is {b.best_gain:+.0%}" if b.best_gain is not None else ""
        shown = f"{_num(b.value, 2)} {e(s.objective_unit)}" if b.value is not None else e(b.outcome)
        shown += " (confirmed mean)" if b.confirmed else ""
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
        note = trial_note(r)
        ci = r.metric_ci95(s.objective_metric)
        colour = outcome_look(r.outcome).colour
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
.verdict { font-size: 1.15rem; font-weight: 600; }
"""


def render_html(s: StudySummary, figures: Sequence[ReportFigure]) -> str:
    """The report page: summary, winner, per-category table, figures, importance, every trial."""
    parts = [*_heading_html(s, figures), *_confirmation_html(s)]
    if s.load_levels is not None:
        parts += ["<h2>Per load level</h2>", _levels_html(s)]
    if s.schedule is not None:
        parts += ["<h2>Speculation schedule</h2>", _schedule_html(s)]
    if s.break_even is not None:  # the same lines as ``autotune show``; the figure is with the others
        parts += ["<h2>Break-even accept length</h2>", f"<pre>{html.escape(break_even_text(s.break_even).plain)}</pre>"]
    parts += _winner_html(s)
    parts += _categories_html(s)
    parts += _figures_html([f for f in figures if f.file != VERDICT_FIGURE])
    parts += _importance_html(s)
    parts += _every_trial_html(s)
    parts.append("</body></html>")
    return "\n".join(parts)


def _heading_html(s: StudySummary, figures: Sequence[ReportFigure]) -> list[str]:
    """The page's head, title, the simulated banner, the verdict and the summary table."""
    e = html.escape
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>autotune report: {e(s.study)}</title>"
        f"<style>{_CSS}</style></head><body>",
        f"<h1>autotune report: {e(s.study)}</h1>",
    ]
    if s.simulated:
        parts.append(
            '<p class="banner">Simulated: these numbers were measured on the autotune twin, '
            "a performance model, not on real GPUs.</p>"
        )
    parts += _verdict_html(s, figures)
    parts.append("<h2>Summary</h2>")
    parts.append(_table(["", ""], _summary_rows(s), cls="kv").replace("<thead><tr><th></th><th></th></tr></thead>", ""))
    return parts


def _verdict_html(s: StudySummary, figures: Sequence[ReportFigure]) -> list[str]:
    """The study's answer first: the verdict in one sentence, the gain over each baseline, its figure."""
    e = html.escape
    confirmation = s.confirmation
    if confirmation is None:
        return [
            '<p class="verdict">No verdict: the finalists were not measured again, so the best is a single '
            "first measurement (<code>autotune confirm STUDY</code> races them).</p>"
        ]
    parts = ["<h2>Verdict</h2>", f'<p class="verdict" id="verdict">{e(confirmation.note)}.</p>']
    if confirmation.gains:
        parts.append("<ul>" + "".join(f"<li>trial {g.trial}: {e(g.text())}</li>" for g in confirmation.gains) + "</ul>")
    parts += _figures_html([f for f in figures if f.file == VERDICT_FIGURE], heading=None)
    return parts


def _confirmation_html(s: StudySummary) -> list[str]:
    """The race's table: every configuration raced, each launch, the mean with its interval."""
    e = html.escape
    confirmation = s.confirmation
    if confirmation is None:
        return []
    return [
        "<h2>Confirmation</h2>",
        f"<p>Finalists and baselines raced on fresh, interleaved launches: {confirmation.rounds} rounds, margin "
        f"±{confirmation.margin:.0%}; the search's first measurement is not in the mean (it was chosen for being "
        "high).</p>",
        _table(
            [
                "configuration",
                "first",
                "launches",
                f"{e(s.objective_unit)} per launch",
                "mean ± 95% CI",
                "flags changed",
            ],
            [
                [
                    e(f"{f.label} (#{f.trial})") + (" ★" if f.trial == confirmation.best else ""),
                    _num(f.first, 1),
                    str(len(f.values)) + (f" (+{len(f.failed)} failed)" if f.failed else ""),
                    e(" ".join(f"{v:.1f}" for v in f.values)),
                    f"{_num(f.mean, 2)} ± {_num(f.ci95, 2)}" if f.confirmed else "not confirmed",
                    str(f.changed_flags),
                ]
                for f in confirmation.finalists
            ],
        ),
    ]


def _winner_html(s: StudySummary) -> list[str]:
    """The best trial: its flags as given and as the server ran them, its metrics, its launch script."""
    e = html.escape
    parts = ["<h2>The winner</h2>"]
    if s.best is None:
        parts.append("<p>No feasible trial has been measured yet.</p>")
        return parts
    flag_rows = []
    for name, value in s.best.flags.items():
        ran = s.best.launch.effective.get(name)
        changed = name in s.best.launch.effective and ran != value
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
            _num(m.value, 3),
            _num(m.ci95, 3),
            e(m.unit),
            e(_fmt(m.n)),
        ]
        for name, m in s.best.measurement.metrics.items()
    ]
    parts.append(_table(["metric", "value", "±95% CI", "unit", "n"], metric_rows))
    if s.launch_script:
        parts.append(
            "<p>Launch script (<code>autotune export "
            f"{e(s.study)} --format sh</code>):</p><pre>{e(_one_flag_a_line(s.launch_script))}</pre>"
        )
    return parts


def _categories_html(s: StudySummary) -> list[str]:
    """Decode speed and accept length per prompt category (nothing without categories)."""
    e = html.escape
    if not s.categories:
        return []
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
    return [
        "<h2>Per prompt category</h2>",
        _table(["trial", "category", "requests", "decode tok/s", "accept length [tok/step]"], rows),
    ]


def _figures_html(figures: Sequence[ReportFigure], *, heading: str | None = "Figures") -> list[str]:
    """Each figure with its caption, or a line saying why it was not drawn."""
    e = html.escape
    parts = [f"<h2>{heading}</h2>"] if heading else []
    for fig in figures:
        if fig.skipped:
            parts.append(f'<p class="skipped">{e(fig.title)}: not drawn ({e(fig.skipped)}).</p>')
            continue
        parts.append(
            f'<figure id="{e(fig.file.removesuffix(".png"))}"><img src="{e(fig.file)}" alt="{e(fig.title)}">'
            f"<figcaption><b>{e(fig.title)}.</b> {e(fig.caption)}</figcaption></figure>"
        )
    return parts


def _importance_html(s: StudySummary) -> list[str]:
    """Which flags mattered, and the note on how (or why not) that was computed."""
    e = html.escape
    parts = ["<h2>Parameter importance</h2>"]
    if s.importance.values:
        rows = [[f"--{e(k)}", f"{v:.1%}"] for k, v in s.importance.values.items()]
        parts.append(_table(["flag", "importance"], rows))
    if s.importance.note:
        parts.append(f"<p>{e(s.importance.note)}</p>")
    return parts


def _every_trial_html(s: StudySummary) -> list[str]:
    """The table of every trial, its legend and the study's notes."""
    e = html.escape
    head = [
        "#",
        "outcome",
        *(e(short_name(n)) for n in s.tuned),
        f"{e(s.objective_metric)} [{e(s.objective_unit)}]",
        "accept length",
        "note",
    ]
    parts = [
        "<h2>Every trial</h2>",
        _table(head, _trials_rows(s), cls="trials"),
        "<p>– in a flag column: the flag was not passed, so the engine's default applied. ★ marks the best "
        "feasible trial. Server logs and "
        f"measurement JSON of every trial: <code>autotune dashboard {e(s.study)}</code>.</p>",
    ]
    if s.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in s.notes) + "</ul>")
    return parts


def _levels_html(s: StudySummary) -> str:
    """The winner at each load level (export one with ``--concurrency N``)."""
    assert s.load_levels is not None
    e = html.escape
    rows = [
        [
            str(w.concurrency) + (" (primary)" if w.concurrency == s.load_levels.primary else ""),
            f"{w.trial}" + (f" ({e(w.baseline)})" if w.baseline else "")
            if w.trial is not None
            else "none keeps the SLO",
            _num(w.value, 2, w.ci95),
            _num(w.per_user_tok_s, 1),
            _num(w.per_gpu_tok_s, 1),
            _num(w.accept_length, 2),
            f"{w.confirmed_launches} launches" if w.confirmed_launches else "single measurement",
        ]
        for w in s.load_levels.winners
    ]
    head = [
        "concurrency",
        "winner",
        f"{e(s.objective_metric)} [{e(s.objective_unit)}]",
        "tok/s per user",
        "tok/s per GPU",
        "accept length",
        "confirmed",
    ]
    return _table(head, rows) + (
        f"<p>Each level's winner: <code>autotune export {e(s.study)} --concurrency N</code>. Only the primary "
        "level's winner is confirmed on fresh launches.</p>"
    )


def _schedule_html(s: StudySummary) -> str:
    """The schedule against every static winner at each level, and its verdict (``confirm --schedule``)."""
    assert s.schedule is not None
    e = html.escape
    rows = []
    for level in s.schedule.levels:
        for static in level.statics:
            interval, said = schedule_comparison(level, static)
            winner = " (this level's winner)" if static.trial == level.winner else ""
            mine = _num(level.schedule_mean, 1, level.schedule_ci95)
            rows.append(
                [
                    str(level.concurrency),
                    f"{level.steps} steps",
                    mine,
                    e(static.label) + winner,
                    _num(static.mean, 1, static.ci95),
                    interval,
                    e(said),
                ]
            )
    head = [
        "concurrency",
        "schedule's depth",
        "schedule",
        "static",
        "static's figure",
        "schedule's gain (95%)",
        "verdict",
    ]
    export = f"<code>autotune export {e(s.study)} --schedule</code>" if s.schedule.recommended else "not exported"
    return (
        f"<p><b>{e(s.schedule.note)}</b></p>"
        + _table(head, rows)
        + f"<p>The engine reads: <code>{e(s.schedule.schedule.config_text())}</code>; {export}.</p>"
    )


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


def build_report(view: StudyView, *, folder: Path, schedule: ScheduleVerdict | None = None) -> ReportFiles:
    """Compute the study's summary (with its speculation schedule's race, if run) and write its report folder."""
    return write_report(summarise(view, schedule=schedule), folder)


__all__ = ["ReportFiles", "build_report", "write_report"]
