"""The trial table draws its rows as ready lines (or, in a terminal too narrow for it, as one row of
tall cells): it must draw exactly what Rich draws for the same table with a row per trial: every
character and the style of every visible one, at any width (a narrow terminal shrinks the columns)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.style import Style
from rich.table import Table
from rich.text import Text

from autotune.decision import Reuse
from autotune.records import MetricRecord, TrialRecord
from autotune.report.trials_table import TrialTable, trials_table
from autotune.testing.records import trial_record

FLAGS = ["speculative-algorithm", "speculative-draft-model-path", "speculative-num-steps", "mem-fraction-static",
         "max-running-requests", "cuda-graph-max-bs-decode"]  # fmt: skip


def records(*, hosts: int = 1) -> list[TrialRecord]:
    """Trials of every kind the table spells: measured, refused, predicted, duplicated, a baseline,
    long reasons and paths, values that do not fit their column, a flag value of two lines."""
    speed = {"decode_tok_s": MetricRecord(value=52.25, unit="tok/s", ci95=1.1, n=4),
             "accept_length": MetricRecord(value=3.2, unit="", n=4)}  # fmt: skip
    outcomes = ["ok", "infeasible-memory-low", "predicted-infeasible-memory-high", "invalid-config",
                "launch-timeout", "interrupted", "crashed", "ok"]  # fmt: skip
    found = []
    for number in range(40):
        outcome = outcomes[number % len(outcomes)]
        flags = {
            "speculative-algorithm": ["NEXTN", "DFLASH", "EAGLE3"][number % 3],
            "speculative-draft-model-path": f"/models/org/draft-{'x' * (number % 30)}/" if number % 4 else "",
            "speculative-num-steps": number % 5 + 1,
            "mem-fraction-static": 0.7 + number / 200,
            "max-running-requests": 2 ** (number % 9),
            "cuda-graph-max-bs-decode": "line one\nline two" if number == 5 else number * 1000,
        }
        found.append(trial_record(
            number, outcome=outcome, flags=flags,
            reason=f"RuntimeError: not enough memory for the KV cache at step {number} " * (number % 3),
            baseline="hand-found" if number == 1 else None,
            decision=Reuse(rule="duplicate", trial=3, same_config=True) if number == 11 else None,
            metrics=speed if outcome == "ok" else {}, roofline_share=0.42 if number % 2 else None,
            host=f"gpu-node-{number % hosts}", gpus=["NVIDIA RTX A6000", "NVIDIA RTX A6000"],
        ))  # fmt: skip
    return found


def one_row_per_trial(trials: TrialTable) -> Table:
    """The same table as Rich's own, a row per trial."""
    table = trials.table()
    reference = Table(title=table.title, title_justify=table.title_justify, box=table.box, pad_edge=False,
                      collapse_padding=True, caption=table.caption, caption_justify=table.caption_justify)  # fmt: skip
    for column in table.columns:
        reference.add_column(column.header, justify=column.justify, no_wrap=column.no_wrap, width=column.width,
                             overflow=column.overflow)  # fmt: skip
    lines = []
    for column in table.columns:
        (cell,) = column.cells
        assert isinstance(cell, Text)
        lines.append(cell.split("\n", allow_blank=True))
    for row in zip(*lines, strict=True):
        reference.add_row(*row)
    return reference


class AsciiTerminal(io.StringIO):
    encoding = "ascii"  # Rich draws its tables with ASCII boxes


def drawn(
    table: TrialTable | Table, width: int, *, ascii_only: bool = False
) -> tuple[str, list[tuple[str, Style | None]]]:
    """The characters a terminal of ``width`` columns shows, and the style of each visible one (no style
    and the null style alike)."""
    terminal = AsciiTerminal() if ascii_only else io.StringIO()
    console = Console(file=terminal, width=width, force_terminal=True, color_system="truecolor")
    segments = list(console.render(table))
    styled = [(char, segment.style or None) for segment in segments for char in segment.text if char != " "]
    return "".join(segment.text for segment in segments), styled


@pytest.mark.parametrize("hosts", [1, 3])
@pytest.mark.parametrize("width", [50, 66, 80, 120, 200])
def test_the_table_draws_what_rich_draws_with_a_row_per_trial(width: int, hosts: int) -> None:
    table = trials_table(records(hosts=hosts), flag_names=FLAGS, best=7, priority=FLAGS[::-1], width=width)
    assert drawn(table, width) == drawn(one_row_per_trial(table), width)


def test_an_ascii_terminal_gets_the_ascii_table() -> None:
    table = trials_table(records(), flag_names=FLAGS, best=7, width=120)
    in_ascii = drawn(table, 120, ascii_only=True)
    assert "|---+" in in_ascii[0]
    assert in_ascii == drawn(one_row_per_trial(table), 120, ascii_only=True)


def test_a_study_without_trials_draws_no_row() -> None:
    table = trials_table([], flag_names=FLAGS, width=120)
    assert drawn(table, 120) == drawn(table.table(), 120)
    assert not table.table().rows
