"""The published-tables judge (benchmarks/spec_tables.py): fitted on the plain, the shallowest and
the deepest draft row, judged on the others; a row-to-row sign counted only past 3 %.

The tables are written here with the twin's own rates for each row (from the table's setup), so
a fit on the anchors has nothing to correct and a row set off by a known factor is off by exactly
that factor in the judge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import spec_tables


def _write(path: Path, table_id: str, engine: str, rows: list[dict[str, Any]]) -> None:
    raw = {"id": table_id, "engine": engine, "gpu": None, "rows": rows}
    path.write_text(json.dumps(raw) + "\n", encoding="utf-8")


def _twin_table(
    tmp_path: Path,
    table_id: str,
    engine: str,
    settings: list[dict[str, Any]],
    batches: list[str] | None,
    off: dict[tuple[int, str], float],
) -> spec_tables.Table:
    """The table of ``settings`` with the twin's own rate in every cell, times ``off[(row, batch)]``."""
    path = tmp_path / "tables.jsonl"

    def rates(values: dict[str, float]) -> float | dict[str, float]:
        return values if batches else values["1"]

    _write(
        path, table_id, engine, [{"setting": s, "tok_s": rates(dict.fromkeys(batches or ["1"], 1.0))} for s in settings]
    )
    (table,) = spec_tables.load_tables(path)
    profile = spec_tables.build(table, spec_tables.DEFAULT_COSTS)
    own: dict[int, dict[str, float]] = {}
    for cell in table.cells:
        batch = str(cell.point.concurrency) if batches else "1"
        rate = spec_tables.calibrate.predict_point(profile, cell.point).tok_s
        own.setdefault(cell.row, {})[batch] = rate * off.get((cell.row, batch), 1.0)
    _write(path, table_id, engine, [{"setting": s, "tok_s": rates(own[i])} for i, s in enumerate(settings)])
    (table,) = spec_tables.load_tables(path)
    return table


def test_a_table_with_a_plain_row_is_fitted_on_it_and_its_shallowest_and_deepest_draft_row(tmp_path: Path) -> None:
    # Depth is K, not the table's order; the K=2 row is published 10 % above the twin.
    settings = [{"K": 0}, {"K": 3}, {"K": 1}, {"K": 5}, {"K": 2}]
    table = _twin_table(tmp_path, "kyuz0-53-strixhalo-mtp", "vllm", settings, None, {(4, "1"): 1.1})
    verdict = spec_tables.judge(table, spec_tables.build(table, spec_tables.DEFAULT_COSTS))
    assert verdict.anchors == spec_tables.Anchors(plain=0, shallowest=2, deepest=3)
    assert verdict.other.count == 2  # the K=3 and K=2 rows
    assert verdict.other.worst == pytest.approx(1 - 1 / 1.1, abs=1e-3)
    assert verdict.other.median == pytest.approx((1 - 1 / 1.1) / 2, abs=1e-3)


def test_a_table_without_a_plain_row_is_fitted_on_its_shallowest_and_deepest_row(tmp_path: Path) -> None:
    settings = [{"steps": s, "topk": 1, "draft_tokens": s + 1} for s in (2, 1, 4, 3)]
    # The 3-step row at batch 8 is published 20 % above the twin; the fitted rows are fitted at both batches.
    table = _twin_table(tmp_path, "sgl-22246-qwen3-235b", "sglang", settings, ["1", "8"], {(3, "8"): 1.2})
    verdict = spec_tables.judge(table, spec_tables.build(table, spec_tables.DEFAULT_COSTS))
    assert verdict.anchors == spec_tables.Anchors(plain=None, shallowest=1, deepest=2)
    assert verdict.other.count == 4
    assert verdict.other.worst == pytest.approx(1 - 1 / 1.2, abs=1e-3)
    assert verdict.first.count == 2  # the other rows at batch 1, the table's first concurrency
    assert verdict.first.worst == pytest.approx(0.0, abs=1e-3)
    assert verdict.spanned.count == 4


def test_ties_in_depth_go_to_the_row_first_in_the_table(tmp_path: Path) -> None:
    settings = [
        {"spec": False},
        {"algo": "E3", "K": 2},
        {"algo": "E1", "K": 2},
        {"algo": "E1", "K": 4},
        {"algo": "E3", "K": 4},
    ]
    table = _twin_table(tmp_path, "vllm-20780-tpot-k", "vllm", settings, None, {})
    verdict = spec_tables.judge(table, spec_tables.build(table, spec_tables.DEFAULT_COSTS))
    assert verdict.anchors == spec_tables.Anchors(plain=0, shallowest=1, deepest=3)


def test_a_sign_counts_only_where_the_published_rates_differ_by_more_than_3_percent() -> None:
    assert not spec_tables.counted_sign(100.0, 102.9)
    assert not spec_tables.counted_sign(102.9, 100.0)
    assert spec_tables.counted_sign(100.0, 103.1)
    assert spec_tables.counted_sign(103.1, 100.0)
    # 100 -> 102 and 110 -> 107.5 are within 3 %: drawn the wrong way, they are not counted.
    assert spec_tables.signs([100.0, 102.0, 110.0, 107.5], [100.0, 99.0, 111.0, 112.0]) == (1, 1)
    assert spec_tables.signs([100.0, 110.0, 100.0], [100.0, 99.0, 98.0]) == (1, 2)


def test_the_judge_counts_signs_past_3_percent_only(tmp_path: Path) -> None:
    # The K=2 row published 1 % above the K=1 row: not counted, whatever the twin draws between them.
    settings = [{"K": 0}, {"K": 1}, {"K": 2}]
    table = _twin_table(tmp_path, "kyuz0-53-strixhalo-mtp", "vllm", settings, None, {})
    rates = [c.point.tok_s for c in table.cells]
    close = rates[1] * 1.01
    path = tmp_path / "tables.jsonl"
    rows = [{"setting": s, "tok_s": r} for s, r in zip(settings, [rates[0], rates[1], close], strict=True)]
    _write(path, "kyuz0-53-strixhalo-mtp", "vllm", rows)
    (table,) = spec_tables.load_tables(path)
    verdict = spec_tables.judge(table, spec_tables.build(table, spec_tables.DEFAULT_COSTS), calibrated=False)
    counted = [spec_tables.counted_sign(a, b) for a, b in ((rates[0], rates[1]), (rates[1], close))]
    assert verdict.signs == sum(counted) == 1
