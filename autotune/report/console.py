"""Rich output: the live view of a running study, a trial in full, summaries and verdicts (the trial
table: :mod:`autotune.report.trials_table`).

Presentation only: every number shown was computed elsewhere and arrives in a model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from autotune.decision import Adjusted, Launch, Reuse, Skip
from autotune.engines import DEFAULT_ENGINE, get_engine
from autotune.measure.client import CategoryStats, Measurement
from autotune.records import TrialRecord
from autotune.report.pool import pool_text
from autotune.report.trials_table import OUTCOME_STYLE, speed_text, value_text
from autotune.space import Candidate
from autotune.study.attrs import ROOFLINE_UNKNOWN
from autotune.study.breakeven import BreakEven
from autotune.study.confirm import Confirmation, Finalist
from autotune.study.events import StudyEvents
from autotune.study.levels import LoadLevels
from autotune.study.schedule import Comparison, LevelVerdict, ScheduleVerdict

if TYPE_CHECKING:
    from autotune.gpu import GpuInventory
    from autotune.study.guided import ModelFit


def adjustment_text(change: Adjusted) -> str:
    """One rule's change to what was launched, for people."""
    values = ", ".join(
        f"--{a.flag} {value_text(a.launched) or 'unset'} (sampled {value_text(a.sampled) or 'unset'})"
        for a in change.values
    )
    return f"launched {values}: {change.why}"


def decision_text(record: TrialRecord) -> str:
    """What the study decided before launching the trial, and why."""
    decision = record.decision
    if isinstance(decision, Reuse):
        how = "the same effective config" if decision.same_config else "a config the objective cannot tell apart"
        return f"not launched: reuses trial {decision.trial}'s measurement, {how} (rule {decision.rule})"
    if isinstance(decision, Skip):
        return f"not launched: {decision.reason} (rule {decision.rule})"
    if record.confirm_of is not None:
        return f"launched exactly as trial {record.confirm_of} was, to measure it again"
    changes = "; ".join(f"{adjustment_text(change)} (rule {change.rule})" for change in record.adjusted)
    return changes or "launched as sampled"


def _roofline_text(record: TrialRecord) -> str:
    """The share of the bandwidth ceiling, or why the ceiling is unknown."""
    if record.measurement.roofline_share is not None:
        return f"{record.measurement.roofline_share:.0%} of the memory-bandwidth ceiling"
    return f"ceiling unknown: {record.measurement.readings[ROOFLINE_UNKNOWN]}"


def trial_detail(record: TrialRecord, finalist: Finalist | None = None) -> Group:
    """Everything stored about one trial, nothing cut: outcome and full reason, flags, argv, metrics;
    with ``finalist``, what the race's relaunches of it measured beside its first measurement."""
    rows = Table(box=None, show_header=False, pad_edge=False)
    rows.add_column(style="bold", no_wrap=True)
    rows.add_column(overflow="fold")
    rows.add_row("trial", f"{record.number} ({record.state})")
    rows.add_row("outcome", record.outcome)
    if record.reason:
        rows.add_row("reason", record.reason)
    for label, value in (
        ("baseline", record.baseline),
        ("retry of", record.proposal.retry_of),
        ("confirms", record.confirm_of),
        ("engine", record.engine),
        ("host", record.launch.host),
    ):
        if value is not None:
            rows.add_row(label, str(value))
    if record.decision is not None:
        rows.add_row("decided", decision_text(record))
    for dropped in record.measurement.dropped_requests:
        rows.add_row("dropped", dropped)
    for resent in record.measurement.resent_requests:
        rows.add_row("resent", resent)
    if record.value is not None:
        rows.add_row("value", f"{record.value:g} ({'feasible' if record.feasible else 'infeasible'})")
    if finalist is not None and finalist.confirmed:
        ci = f" ± {finalist.ci95:.3g}" if finalist.ci95 is not None else ""
        rows.add_row(
            "race",
            f"{finalist.mean:.4g}{ci} over {len(finalist.values)} relaunches (the verdict's figure; the value "
            "above is the first measurement)",
        )
    for name, metric in record.measurement.metrics.items():
        ci = f" ± {metric.ci95:.3g}" if metric.ci95 is not None else ""
        shown = f"{metric.value:.4g}" if metric.value is not None else "-"
        rows.add_row(name, f"{shown}{ci} {metric.unit}".strip())
    predicted = record.proposal.predicted
    if predicted is not None:
        rows.add_row("predicted", f"{predicted.tok_s:.4g} tok/s before the launch (search: {predicted.search})")
    if record.measurement.roofline_share is not None or ROOFLINE_UNKNOWN in record.measurement.readings:
        rows.add_row("roofline", _roofline_text(record))
    pool = pool_text(record)
    if pool is not None:
        rows.add_row("KV pool", pool)
    if record.measurement.agreement is not None:
        rows.add_row("output check", agreement_text(record))
        for index, text in enumerate(record.measurement.agreement.outputs):
            rows.add_row(f"output {index + 1}", repr(text))
    for flag, setting in record.flags.items():
        rows.add_row(f"--{flag}", value_text(setting))
    if record.launch.argv:
        rows.add_row("argv", " ".join(record.launch.argv))
    return Group(rows)


def agreement_text(record: TrialRecord) -> str:
    """The greedy-output check of a trial, in one line."""
    check = record.measurement.agreement
    if check is None:
        return "not run"
    if check.error is not None:
        return f"failed: {check.error}"
    if check.share is None:
        return "unchecked: no reference output yet (a baseline or a run without speculation becomes it)"
    shares = ", ".join(f"{s:.0%}" for s in check.shares)
    return f"{check.share:.0%} leading agreement with trial {check.reference_trial}'s greedy text (each: {shares})"


def break_even_text(result: BreakEven) -> Text:
    """What accept length each measured drafter needs to beat the best, and what the fit used."""
    text = Text("Break-even accept length", style="bold")
    if result.note is not None or result.best_tok_s is None:
        return text.append(f": {result.note}", style="default")
    bare = (
        f"bare pass {result.bare_pass_s * 1e3:.1f} ms (trials {', '.join(map(str, result.bare_trials))})"
        if result.bare_pass_s is not None
        else "no run without speculation"
    )
    floor = f"; at full bandwidth even a free drafter needs {result.floor:.2f}" if result.floor is not None else ""
    text.append(f" to beat trial {result.best_trial} ({result.best_tok_s:.1f} tok/s); {bare}{floor}\n", style="default")
    for fit in result.drafters:
        source = "bare" if fit.pass_from == "bare pass" else "fit"
        text.append(f"  {fit.drafter}: needs {fit.break_even:.2f} at {fit.steps} steps ", style="bold")
        text.append(
            f"(measured {fit.measured_accept:.2f} -> {fit.measured_tok_s:.1f} tok/s); "
            f"pass {fit.pass_s * 1e3:.1f} ms ({source}) + {fit.step_s * 1e3:.1f} ms/step, "
            f"{len(fit.trials)} trials, fit ±{fit.rms_rel:.1%}\n"
        )
    return text


def engines_table(records: Sequence[TrialRecord]) -> Table | None:
    """The best of each engine on the same suite, when a study weighed several."""
    engines = sorted({r.engine for r in records if r.engine})
    if len(engines) < 2:
        return None
    table = Table(title="best of each engine (same GPUs, same prompt suite)", title_justify="left")
    for column in ("engine", "best trial", "decode tok/s", "accept len", "measured", "infeasible"):
        table.add_column(column, justify="left" if column == "engine" else "right")
    for engine in engines:
        mine = [r for r in records if r.engine == engine]
        ok = [r for r in mine if r.feasible and r.value is not None]
        best = max(ok, key=lambda r: r.value or 0.0) if ok else None
        accept = best.metric_value("accept_length") if best else None
        table.add_row(
            engine,
            str(best.number) if best else "-",
            speed_text(best) if best else "-",
            f"{accept:.2f}" if accept is not None else "-",
            str(len(ok)),
            str(sum(1 for r in mine if r.outcome != "ok" and r.state == "COMPLETE")),
        )
    return table


def inventory_table(inventory: GpuInventory) -> Table:
    title = f"GPUs (driver {inventory.driver_version})" + (" [simulated]" if inventory.simulated else "")
    table = Table(title=title, title_justify="left")
    for column in ("#", "name", "total GiB", "used GiB", "free GiB", "bandwidth GB/s", "processes"):
        table.add_column(column, justify="left" if column in ("name", "processes") else "right")
    gib = 1024**3
    for gpu in inventory.gpus:
        processes = ", ".join(
            f"{p.pid} ({p.used_memory_bytes / gib:.1f} GiB)" if p.used_memory_bytes is not None else str(p.pid)
            for p in gpu.processes
        )
        table.add_row(
            str(gpu.index),
            gpu.name,
            f"{gpu.memory_total_bytes / gib:.1f}",
            f"{gpu.memory_used_bytes / gib:.1f}",
            f"{gpu.memory_free_bytes / gib:.1f}",
            f"{gpu.bandwidth_bytes_per_s / 1e9:.0f}" if gpu.bandwidth_bytes_per_s else "-",
            processes or "-",
        )
    return table


def measurement_table(measurement: Measurement, *, title: str = "measurement") -> Group:
    """Overall metrics, per-category numbers and the server's own figures of one measurement."""
    overall = Table(title=title, title_justify="left")
    for column in ("metric", "value", "±95% CI", "unit", "n"):
        overall.add_column(column, justify="left" if column in ("metric", "unit") else "right")
    for m in measurement.metrics:
        overall.add_row(
            m.name,
            f"{m.value:.3f}" if m.value < 10 else f"{m.value:.1f}",
            f"{m.ci95:.3f}" if m.ci95 is not None else "-",
            m.unit,
            str(m.n),
        )
    categories = Table(title="per category", title_justify="left")
    for column in ("category", "requests", "decode tok/s", "accept len"):
        categories.add_column(column, justify="left" if column == "category" else "right")
    for c in measurement.categories:
        ci = f" ± {c.decode_tok_s.ci95:.1f}" if c.decode_tok_s.ci95 is not None else ""
        categories.add_row(
            c.category,
            str(c.requests),
            f"{c.decode_tok_s.value:.1f}{ci}",
            f"{c.accept_length.value:.2f}" if c.accept_length else "-",
        )
    lines = [
        f"concurrency {measurement.concurrency}, {measurement.rounds} rounds after {measurement.warmup_requests} "
        f"warm-up requests; stopped: {measurement.stop_reason}; precision ±{measurement.precision_target:.0%} "
        + ("reached" if measurement.precision_reached else "NOT reached"),
        "generation: "
        + ("fixed length (ignore_eos)" if measurement.ignore_eos else "natural length (EOS respected)")
        + (f", capped at {measurement.max_tokens_cap} tokens" if measurement.max_tokens_cap else ""),
    ]
    if measurement.steadiness is not None:
        st = measurement.steadiness
        lines.append(
            f"steadiness: early {st.early:.1f}, late {st.late:.1f} ({st.drift:+.1%}) "
            + ("steady" if st.steady else "DRIFT: the server got faster or slower while measured")
        )
    server = measurement.server
    if server is not None and server.gen_tok_s is not None:
        lines.append(
            f"server's own figures: gen throughput {server.gen_tok_s:.1f} tok/s over {server.log_lines} log "
            "lines" + (f", accept len {server.accept_length:.2f}" if server.accept_length else "")
        )
    return Group(overall, categories, Text("\n".join(lines)))


def best_summary(record: TrialRecord | None, *, simulated: bool) -> RenderableType:
    if record is None:
        return Text("No feasible trial measured yet.", style="yellow")
    accept = record.metric_value("accept_length")
    confirmed = (
        f"confirmed over {record.measurement.confirmed_launches} launches"
        if record.measurement.confirmed_launches
        else "UNCONFIRMED: a single measurement (autotune confirm STUDY measures the finalists again)"
    )
    lines = [
        f"best: trial {record.number}" + (f" (baseline {record.baseline})" if record.baseline else ""),
        f"decode: {speed_text(record)} tok/s" + (f", accept length {accept:.2f}" if accept is not None else ""),
        confirmed,
        "flags: " + " ".join(f"--{k} {value_text(v)}" if v is not True else f"--{k}" for k, v in record.flags.items()),
    ]
    if simulated:
        lines.append("(simulated: measured on the autotune twin, not on real GPUs)")
    return Panel("\n".join(lines), title="result", title_align="left", border_style="green", expand=False)


def confirmation_table(confirmation: Confirmation, *, unit: str = "tok/s") -> RenderableType:
    """The race: each configuration's first measurement, every relaunch that served, the mean; with a
    baseline to compare with, each configuration's gain over it with the interval the verdict uses (a
    per-configuration interval could look clear of the baseline's while the verdict's crosses zero);
    then the verdict and the gain over each baseline."""
    table = Table(
        title="confirmation: finalists and baselines raced on fresh, interleaved launches", title_justify="left"
    )
    reference = confirmation.finalist(confirmation.reference)
    versus = {g.trial: g for g in confirmation.versus}
    compared = reference is not None and bool(versus)
    last = f"vs {reference.label} (verdict's 95% CI)" if compared and reference else "mean ± 95% CI"
    for column in (
        "configuration",
        "first",
        "relaunches",
        unit,
        "mean" if compared else last,
        "flags changed",
        "memory",
        *([last] if compared else []),
    ):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    for f in confirmation.finalists:
        mark = " *" if f.trial == confirmation.best else ""
        launched = str(len(f.values)) + (f" (+{len(f.failed)} failed)" if f.failed else "")
        joined = f" (challenger from round {f.joined_after + 1})" if f.joined_after is not None else ""
        dropped = f" (behind after round {f.dropped_after + 1})" if f.dropped_after is not None else ""
        if compared:
            mean = f"{f.mean:.1f}" if f.confirmed else "not confirmed"
        else:
            mean = (
                (f"{f.mean:.1f}" + (f" ± {f.ci95:.1f}" if f.ci95 is not None else ""))
                if f.confirmed
                else "not confirmed"
            )
        gain = (
            "reference"
            if f.trial == confirmation.reference
            else (versus[f.trial].interval_text() if f.trial in versus else "-")
        )
        table.add_row(
            f"{f.label} (#{f.trial}){mark}{joined}{dropped}",
            f"{f.first:.1f}" if f.first is not None else "-",
            launched,
            " ".join(f"{v:.1f}" for v in f.values) or "-",
            mean,
            str(f.changed_flags),
            f"{f.memory:g}" if f.memory is not None else "-",
            *([gain] if compared else []),
        )
    return Group(table, *_verdict_lines(confirmation))


def _verdict_lines(confirmation: Confirmation) -> list[Text]:
    """Under the race's table: the verdict, the gains, the relaunches that failed, the noise."""
    lines = [Text(f"verdict: {confirmation.note}", style="bold")]
    lines += [Text(f"  trial {g.trial}: {g.text()}") for g in confirmation.gains]
    lines += [
        Text(f"  {f.label} (#{f.trial}) relaunch failed: {reason}", style="red")
        for f in confirmation.finalists
        for reason in f.failed
    ]
    noise, parts = confirmation.noise, [f"{confirmation.rounds} rounds, margin ±{confirmation.margin:.0%}"]
    if noise.between_launches is not None:
        parts.append(f"noise between launches ±{noise.between_launches:.1%} sd ({noise.launches} relaunches)")
    if noise.within_launch is not None:
        parts.append(f"between rounds ±{noise.within_launch:.1%} sd")
    return [*lines, Text("; ".join(parts), style="dim")]


def schedule_table(verdict: ScheduleVerdict, *, metric: str = "decode_tok_s", unit: str = "tok/s") -> RenderableType:
    """The speculation schedule per level beside every static winner, on fresh interleaved launches:
    each mean with its interval and the schedule's gain with its own (* marks the level's winner)."""
    schedule = verdict.schedule
    table = Table(
        title=f"speculation schedule ({metric}, {unit}) against each level's static winner, "
        f"{verdict.rounds} interleaved rounds",
        title_justify="left",
    )
    for column in ("concurrency", "schedule", "± 95% CI", "static", "± 95% CI ", "schedule's gain (95%)", "verdict"):
        table.add_column(column, justify="left" if column in ("static", "verdict") else "right")
    speculation = get_engine(schedule.engine).speculation
    depth_unit = speculation.unit if speculation is not None else "step"
    for level in verdict.levels:
        for index, static in enumerate(level.statics):
            interval, said = schedule_comparison(level, static)
            first = index == 0
            table.add_row(
                str(level.concurrency) if first else "",
                f"{level.steps} {depth_unit}{'' if level.steps == 1 else 's'}" if first else "",
                _mean(level.schedule_mean, level.schedule_ci95) if first else "",
                static.label + (" *" if static.trial == level.winner else ""),
                _mean(static.mean, static.ci95),
                interval,
                said,
                end_section=index == len(level.statics) - 1,
            )
    style = "bold green" if verdict.recommended else "bold yellow"
    lines = [Text(f"verdict: {verdict.note}", style=style)]
    lines += [Text(f"  decided: {decision}") for decision in schedule.decisions]
    lines += [Text(f"  launch failed: {reason}", style="red") for reason in verdict.failed]
    lines.append(Text(schedule.config_label() + schedule.config_text(), style="dim"))
    return Group(table, *lines)


def depths_table(records: Sequence[TrialRecord], levels: LoadLevels) -> RenderableType:
    """Each measured trial's figure at each level beside its draft steps (* the level's winner): why a
    study gives no schedule to race."""
    table = Table(title=f"{levels.metric} per load level, every measured configuration", title_justify="left")
    table.add_column("configuration", justify="left")
    table.add_column("steps", justify="right")
    for winner in levels.winners:
        table.add_column(f"at {winner.concurrency}", justify="right")
    winners = {(w.trial, w.concurrency) for w in levels.winners}
    for record in records:
        if record.outcome != "ok" or not record.measurement.levels or record.confirm_of is not None:
            continue
        cells = []
        for winner in levels.winners:
            level = record.measurement.levels.get(winner.concurrency)
            value = level.metric_value(levels.metric) if level is not None else None
            mark = " *" if (record.number, winner.concurrency) in winners else ""
            cells.append(f"{value:.1f}{mark}" if value is not None else "-")
        label = f"baseline {record.baseline} (#{record.number})" if record.baseline else f"trial {record.number}"
        speculation = get_engine(record.engine or DEFAULT_ENGINE).speculation
        depth = record.flags.get(speculation.depth, "-") if speculation is not None else "-"
        table.add_row(label, str(depth), *cells)
    return table


def schedule_comparison(level: LevelVerdict, static: Comparison) -> tuple[str, str]:
    """The schedule's gain over one static winner at one level with its interval, and the verdict word
    (the console table and the HTML report share it)."""
    gain = static.gain
    interval = "-"
    if gain is not None and gain.low is not None and gain.high is not None:
        interval = f"{gain.gain:+.1%} ({gain.low:+.1%} to {gain.high:+.1%})"
    said = "slower" if static.worse else "faster" if static.better else "same" if gain else "not measured"
    if said == "same" and gain is not None and gain.low is not None and gain.low > 0:
        said = (
            "same depth (a gain here is noise)"
            if static.same_depth
            else "same (faster here alone, not across the levels)"
        )
    if level.slo_broken:
        said = f"breaks the SLO ({', '.join(level.slo_broken)})"
    elif level.queues and static.trial == level.winner:
        said = f"queues: {level.slots} at once, it {static.slots}"
    return interval, said


def _mean(mean: float | None, ci95: float | None) -> str:
    if mean is None:
        return "-"
    return f"{mean:.1f}" + (f" ± {ci95:.1f}" if ci95 is not None else "")


class LiveView(StudyEvents):
    """What a user watches during ``autotune study``: current trial, phase, best so far, ETA."""

    def __init__(self, console: Console, *, total: int | None, timeout_s: float | None, simulated: bool) -> None:
        self.console = console
        self.total = total
        self.timeout_s = timeout_s
        self.simulated = simulated
        self.started = time.monotonic()
        self.finished = 0  # launches: what --trials counts
        self.current: str = "preparing"
        self.phase_text = ""
        self.best: TrialRecord | None = None
        self.live = Live(console=console, refresh_per_second=4, transient=True, get_renderable=self._render)

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def _eta(self) -> str:
        elapsed = time.monotonic() - self.started
        if self.total and self.finished:
            remaining = elapsed / self.finished * (self.total - self.finished)
            if self.timeout_s is not None:
                remaining = min(remaining, max(0.0, self.timeout_s - elapsed))
            return f"ETA {remaining / 60:.1f} min"
        if self.timeout_s is not None:
            return f"time left {max(0.0, self.timeout_s - elapsed) / 60:.1f} min"
        return ""

    def _render(self) -> RenderableType:
        total = f"/{self.total}" if self.total else ""
        head = Text.assemble(
            ("launch ", "bold"),
            (f"{self.finished + 1}{total}", "bold cyan"),
            f"  {self.current}  ",
            (self.phase_text, "yellow"),
            f"  {self._eta()}",
        )
        best = (
            "best so far: -"
            if self.best is None
            else (f"best so far: {speed_text(self.best)} tok/s (trial {self.best.number})")
        )
        label = " [simulated]" if self.simulated else ""
        return Group(head, Text(best + label, style="green"))

    def trial_started(self, number: int, candidate: Candidate) -> None:
        shown = candidate.params or candidate.flags
        label = f"baseline {candidate.baseline}: " if candidate.baseline else ""
        self.current = f"#{number} {label}" + " ".join(f"{k}={value_text(v)}" for k, v in shown.items())
        self.phase_text = "planning"

    def phase(self, name: str, detail: str) -> None:
        self.phase_text = f"{name} {detail}".strip()

    def note(self, text: str) -> None:
        self.console.print(text, highlight=False)

    def trial_finished(self, record: TrialRecord) -> None:
        self.finished += isinstance(record.decision, Launch)
        if (
            record.feasible
            and record.value is not None
            and (self.best is None or record.value > (self.best.value or 0))
        ):
            self.best = record
        style = OUTCOME_STYLE.get(record.outcome, "red")
        extra = f"{speed_text(record)} tok/s" if record.outcome == "ok" else (record.reason or "")
        if record.confirm_of is not None:
            extra += f" (confirmation launch of #{record.confirm_of})"
        if record.reused_from is not None and record.outcome == "ok" and record.reason:
            extra += f" ({record.reason})"  # a rate borrowed from a config differing only in memory sizing
        elif record.reused_from is not None:
            extra += f" (same effective config as #{record.reused_from}, not relaunched)"
        for change in record.adjusted:  # the values launched instead of the sampled ones: show --trial N
            extra += f" (launched with {change.why})"
        self.console.print(f"trial {record.number:>3} [{style}]{record.outcome}[/{style}] {extra}", highlight=False)


def importance_table(importance: dict[str, float], *, method: str, trials_used: int, note: str | None) -> Group:
    """Which tuned flags mattered (shares adding up to 1), largest first, with Optuna's caveat if any."""
    table = Table(title=f"parameter importance ({method}, {trials_used} completed trials)", title_justify="left")
    table.add_column("flag")
    table.add_column("importance", justify="right")
    table.add_column("", no_wrap=True)
    for name, share in importance.items():
        table.add_row(f"--{name}", f"{share:.1%}", "█" * round(share * 30))
    parts: list[RenderableType] = [table] if importance else []
    if note:
        parts.append(Text(("parameter importance: " if not importance else "") + note, style="dim"))
    return Group(*parts)


def category_table(categories: Sequence[CategoryStats], *, title: str) -> Table:
    """Decode speed and accept length per prompt category of one measurement."""
    table = Table(title=title, title_justify="left")
    for column in ("category", "requests", "decode tok/s", "accept len"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for c in categories:
        ci = f" ± {c.decode_tok_s.ci95:.1f}" if c.decode_tok_s.ci95 is not None else ""
        accept = c.accept_length
        table.add_row(
            c.category,
            str(c.requests),
            f"{c.decode_tok_s.value:.1f}{ci}",
            (f"{accept.value:.2f}" + (f" ± {accept.ci95:.2f}" if accept.ci95 is not None else "")) if accept else "-",
        )
    return table


def levels_table(levels: LoadLevels, *, unit: str = "tok/s") -> Group:
    """The winner per load level, then the trials on the per-user vs per-GPU front."""
    winners = Table(title="best per load level (autotune export STUDY --concurrency N)", title_justify="left")
    metric = f"{levels.metric} [{unit}]"
    for column in ("concurrency", "winner", metric, "per user", "per GPU", "accept len", "confirmed"):
        winners.add_column(column, justify="left" if column == "winner" else "right")
    for w in levels.winners:
        primary = " (primary)" if w.concurrency == levels.primary else ""
        winners.add_row(
            f"{w.concurrency}{primary}",
            (f"#{w.trial}" + (f" {w.baseline}" if w.baseline else "")) if w.trial is not None else "none keeps the SLO",
            (f"{w.value:.1f}" + (f" ± {w.ci95:.1f}" if w.ci95 is not None else "")) if w.value is not None else "-",
            f"{w.per_user_tok_s:.1f}" if w.per_user_tok_s is not None else "-",
            f"{w.per_gpu_tok_s:.1f}" if w.per_gpu_tok_s is not None else "-",
            f"{w.accept_length:.2f}" if w.accept_length is not None else "-",
            f"{w.confirmed_launches} launches" if w.confirmed_launches else "single measurement",
        )
    front = Table(title=f"front: tok/s per user vs tok/s per GPU ({levels.gpus} GPUs)", title_justify="left")
    for column in ("trial", "concurrency", "tok/s per user", "tok/s per GPU"):
        front.add_column(column, justify="right")
    for p in sorted((p for p in levels.front if p.on_front), key=lambda p: -p.per_user_tok_s):
        front.add_row(f"#{p.trial}", str(p.concurrency), f"{p.per_user_tok_s:.1f}", f"{p.per_gpu_tok_s:.1f}")
    note = Text(f"only the primary level (concurrency {levels.primary}) is confirmed on fresh launches", style="dim")
    return Group(winners, note, front)


def model_fit_text(fit: ModelFit) -> str:
    """The model-guided search's fit: its error on each launch, predicted before it, and its best untried guess."""
    lines = [f"model-guided search: {fit.setup}"]
    median = fit.median_error
    if median is not None:
        shown = ", ".join(f"{e:.0%}" for e in fit.errors[-10:])
        lines.append(
            f"  error of the rate predicted before each launch: median {median:.1%} over {len(fit.errors)} ({shown})"
        )
    if fit.fit_error is not None:
        lines.append(f"  fit to every launch so far: {fit.fit_error:.1%} rms")
    if fit.best_untried is not None and fit.best_untried_rate is not None:
        flags = " ".join(f"--{k} {v}" for k, v in fit.best_untried.items())
        lines.append(f"  predicted best untried: {flags or '(no speculation)'}: {fit.best_untried_rate:.4g} tok/s")
    return "\n".join(lines)
