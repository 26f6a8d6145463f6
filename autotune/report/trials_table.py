"""The trial table of ``show`` and ``study``: a row per trial, the flags that fit in 120 columns, drawn
fast (a long study's rows as ready lines); and the cells other views share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, JustifyMethod, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from autotune.engines.names import short_flag
from autotune.records import TrialRecord
from autotune.space import ENGINE_PARAM, FlagValue
from autotune.study.attrs import ROOFLINE_UNKNOWN

OUTCOME_STYLE = {
    "ok": "green",
    "infeasible-memory-low": "yellow",
    "infeasible-memory-high": "yellow",
    "predicted-infeasible-memory-low": "yellow",
    "predicted-infeasible-memory-high": "yellow",
    "invalid-config": "magenta",
    "predicted-failure": "magenta",
    "interrupted": "dim",
}


def value_text(value: FlagValue | None) -> str:
    """A flag's value for people: a float without trailing zeros, nothing for unset."""
    if isinstance(value, float):
        return f"{value:g}"
    return "" if value is None else str(value)


def speed_text(record: TrialRecord) -> str:
    """The decode speed with its 95% CI, or "-"."""
    value = record.metric_value("decode_tok_s")
    if value is None:
        return "-"
    ci = record.metric_ci95("decode_tok_s")
    return f"{value:.1f}" + (f" ± {ci:.1f}" if isinstance(ci, (int, float)) else "")


# Outcomes as the trial table spells them (the stored spelling is in `show --json` and `show --trial N`).
_OUTCOME_SHORT = {
    "infeasible-memory-low": "mem-low",
    "infeasible-memory-high": "mem-high",
    "predicted-infeasible-memory-low": "pred mem-low",
    "predicted-infeasible-memory-high": "pred mem-high",
    "invalid-config": "invalid",
    "predicted-failure": "pred fail",
    "measurement-failed": "measure-fail",
    "launch-timeout": "launch-t/o",
}
NOTE_WIDTH = 36


def _header(name: str, width: int = 9) -> str:
    """A flag's column header on several short lines, broken at hyphens (tables fit 120 columns)."""
    lines: list[str] = []
    for part in short_flag(name).split("-"):
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += "-" + part
        else:
            lines.append(part)
    return "\n".join(lines)


def _shorten(text: str, width: int) -> str:
    """Cut at a word boundary, never mid-word; the full text is in ``show --trial N``."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[: width - 1].rsplit(" ", 1)[0] if " " in text[: width - 1] else text[: width - 1]
    return cut.rstrip(",;:") + "…"


TABLE_WIDTH = 120
NOTE_MIN_WIDTH = 12


def _cell(name: str, value: FlagValue | None) -> str:
    """A flag's value in the table: a path by its last part (the full path: ``show --trial N``)."""
    text = value_text(value).replace("\n", " ").replace("\t", " ")  # one line per trial, as TrialTable draws it
    return text.rstrip("/").rsplit("/", 1)[-1] if name.endswith(("-path", "-model")) and "/" in text else text


def _flag_cell(record: TrialRecord, name: str) -> str:
    return _cell(name, record.engine if name == ENGINE_PARAM else record.flags.get(name))


def fitting_flags(
    flag_widths: Mapping[str, int], flag_names: Sequence[str], *, priority: Sequence[str] = (), room: int
) -> list[str]:
    """The flag columns that fit in ``room`` (each takes its width and two columns between): the most
    important first (``priority``, e.g. by parameter importance, then the space's order), shown in
    the space's order."""
    kept: set[str] = set()
    for name in [*[p for p in priority if p in flag_names], *flag_names]:
        if name not in kept and flag_widths[name] + 2 <= room:
            kept.add(name)
            room -= flag_widths[name] + 2
    return [name for name in flag_names if name in kept]


def trials_table(
    records: Sequence[TrialRecord],
    *,
    flag_names: Sequence[str],
    best: int | None = None,
    priority: Sequence[str] = (),
    width: int = TABLE_WIDTH,
) -> TrialTable:
    """One row per trial, ``width`` columns wide: the flags that fit, the most important first (the
    others, and full reasons: ``show --trial N``)."""
    hosts = sorted({r.launch.host for r in records if r.launch.host})
    several_hosts = len(hosts) > 1  # then show where each trial ran, so hardware differences are visible
    rows = [_trial_row(r, flag_names, best=best, with_host=several_hosts) for r in records]
    headers = [
        "#",
        "outcome",
        *(_header(n) for n in flag_names),
        "decode tok/s",
        "accept\nlen",
        "roof-\nline",
        *(["host"] if several_hosts else []),
        "note",
    ]
    # Widths computed here, once, from the cells: Rich would otherwise measure every cell of a long
    # study (most of show's time at 300 trials). They also decide which flags fit.
    widths = [max([*map(len, h.splitlines()), *(len(row[i].plain) for row in rows)]) for i, h in enumerate(headers)]
    if several_hosts:
        widths[-2] = min(widths[-2], 16)
    flags_at = range(2, 2 + len(flag_names))
    others = [w for i, w in enumerate(widths[:-1]) if i not in flags_at]
    # One column spare; the note at its narrowest.
    room = width - 1 - sum(w + 2 for w in others) - (NOTE_MIN_WIDTH + 2)
    shown = fitting_flags(dict(zip(flag_names, widths[2:], strict=False)), flag_names, priority=priority, room=room)
    keep = [i for i in range(len(headers)) if i not in flags_at or flag_names[i - 2] in shown]
    headers, widths, rows = [headers[i] for i in keep], [widths[i] for i in keep], [[r[i] for i in keep] for r in rows]
    # The note takes what is left, up to NOTE_WIDTH.
    widths[-1] = max(NOTE_MIN_WIDTH, min(widths[-1], NOTE_WIDTH, width - 1 - sum(w + 2 for w in widths) + widths[-1]))
    left_out = [name for name in flag_names if name not in shown]
    caption = f"not shown (see show --trial N): {', '.join(short_flag(n) for n in left_out)}" if left_out else None
    justify: list[JustifyMethod] = ["left" if h in ("outcome", "host", "note") else "right" for h in headers]
    return TrialTable(headers=headers, widths=widths, justify=justify, rows=rows, caption=caption)


class TrialTable:
    """The trial table: what Rich draws for a table with a row per trial, its rows drawn as ready lines.

    Rich lays out every cell of a table through its whole renderer (0.3 s for 300 trials of 12
    cells). Here Rich draws the title, headers, rules and caption (the table without rows), and each
    trial is one line of cells cut and aligned by the same :class:`~rich.text.Text` calls as Rich's
    cells, two columns apart (the table's padding and column divider)."""

    def __init__(
        self,
        *,
        headers: list[str],
        widths: list[int],
        justify: list[JustifyMethod],
        rows: list[list[Text]],
        caption: str | None,
    ) -> None:
        self.headers, self.widths, self.justify, self.rows, self.caption = headers, widths, justify, rows, caption

    def table(self, *, rows: bool = True, caption: bool = True) -> Table:
        """The same table as Rich's own: the rows in one row of tall cells, a line per trial (Rich cuts
        and aligns a cell line by line, as separate cells; every cell here is one line)."""
        table = Table(
            title="trials",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            collapse_padding=True,
            caption=self.caption if caption else None,
            caption_justify="left",
        )
        for header, width, justify in zip(self.headers, self.widths, self.justify, strict=True):
            table.add_column(header, justify=justify, no_wrap=True, width=width, overflow="ellipsis")
        if rows and self.rows:
            table.add_row(*(Text("\n").join(column) for column in zip(*self.rows, strict=True)))
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if sum(w + 2 for w in self.widths) > options.max_width:  # Rich narrows every column: it draws the rows
            yield self.table()
            return
        # The title, top edge, headers and rule, then the bottom edge and caption: the rows go between.
        framed = console.render_lines(self.table(rows=False), options, pad=False)
        split = len(console.render_lines(self.table(rows=False, caption=False), options, pad=False)) - 1
        edges = box.SIMPLE_HEAD.substitute(options, safe=console.safe_box)
        middle = (edges.mid_left, edges.mid_vertical, edges.mid_right)
        last = (edges.foot_left, edges.foot_vertical, edges.foot_right)
        new_line = Segment.line()
        for line in framed[:split]:
            yield from line
            yield new_line
        for number, row in enumerate(self.rows, start=1):
            left, divider, right = last if number == len(self.rows) else middle
            drawn = Text(left)
            for index, (cell, width, justify) in enumerate(zip(row, self.widths, self.justify, strict=True)):
                drawn.append_text(_fitted(cell, width, justify))
                drawn.append(right if index == len(row) - 1 else " " + divider)
            yield from drawn.render(console)
            yield new_line
        for line in framed[split:]:
            yield from line
            yield new_line


def _fitted(cell: Text, width: int, justify: JustifyMethod) -> Text:
    """A one-line cell cut to ``width`` (with "…") and aligned as Rich fits a table's cell (``Lines.justify``)."""
    fitted = cell.copy()
    if justify == "left":
        fitted.truncate(width, overflow="ellipsis", pad=True)
    else:
        fitted.rstrip()
        fitted.truncate(width, overflow="ellipsis")
        fitted.pad_left(width - cell_len(fitted.plain))
    return fitted


def trial_note(r: TrialRecord) -> str:
    """A trial's note in the tables: its baseline, whose launch it confirms or reuses, why it failed."""
    parts = [r.baseline or ""]
    if r.confirm_of is not None:
        parts.append(f"confirmation launch of #{r.confirm_of}")
    if r.reused_from is not None:
        parts.append(f"same as #{r.reused_from}")
    note = "; ".join(part for part in parts if part)
    if r.reused_from is None and r.outcome != "ok" and r.reason:
        note = (note + ": " if note else "") + r.reason
    return note


def _trial_row(r: TrialRecord, flag_names: Sequence[str], *, best: int | None, with_host: bool) -> list[Text]:
    accept = r.metric_value("accept_length")
    note = trial_note(r)
    mark = "★" if best is not None and r.number == best else ""
    cells = [
        Text(f"{r.number}{mark}"),
        Text(_OUTCOME_SHORT.get(r.outcome, r.outcome), style=OUTCOME_STYLE.get(r.outcome, "red")),
        *(Text(_flag_cell(r, n)) for n in flag_names),
        Text(speed_text(r)),
        Text(f"{accept:.2f}" if accept is not None else "-"),
        Text(_roofline_cell(r)),
    ]
    if with_host:
        host, gpus = r.launch.host, r.launch.gpus
        cells.append(Text(f"{host} ({', '.join(sorted(set(gpus)))})" if gpus else host or "-"))
    cells.append(Text(_shorten(note, NOTE_WIDTH)))
    return cells


def _roofline_cell(record: TrialRecord) -> str:
    if record.measurement.roofline_share is not None:
        return f"{record.measurement.roofline_share:.0%}"
    return "unknown" if ROOFLINE_UNKNOWN in record.measurement.readings else "-"
