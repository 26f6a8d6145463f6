"""The round tables: a model-sampler round's README tables printed from its committed JSON reports."""

from __future__ import annotations

import pytest

from benchmarks import round_tables
from tests.conftest import ROOT

RESULTS = ROOT / "benchmarks" / "results"


def test_the_branch_point_s_model_row_is_named_apart_and_paired(capsys: pytest.CaptureFixture[str]) -> None:
    round_tables.main([str(RESULTS / "model-sampler-2026-12-08"), "--branch-point", "ac62c90"])
    out = capsys.readouterr().out
    assert "## Night of 20 launches, 22 members" in out and "## Night of 60 launches, 22 members" in out
    assert out.count("This round's model row against the branch point's") == 2
    assert "| autotune-model at the branch point (ac62c90) |" in out
    round_tables.main([str(RESULTS / "model-sampler-2026-12-08")])  # unnamed, still a row of its own
    assert "| autotune-model at the branch point |" in capsys.readouterr().out


def test_a_round_with_one_report_per_row_and_recordings(capsys: pytest.CaptureFixture[str]) -> None:
    round_tables.main([str(RESULTS / "model-sampler-2026-12-06")])
    out = capsys.readouterr().out
    assert "## Night of 20 launches" in out and "branch point" not in out
    assert "## h200-llamacpp-deep" in out and "## h200-llamacpp-drafts" in out


def test_a_wide_trees_slice_is_pooled_with_the_family_and_tight_members(capsys: pytest.CaptureFixture[str]) -> None:
    # round 12: family 51900-51907 and tight 52000-52005 (14 members) and 8 wide-trees members in their own slice
    round_tables.main([str(RESULTS / "verify-sibling-2026-12-06"), "--branch-point", "7acff48"])
    out = capsys.readouterr().out
    assert "## Night of 20 launches, 22 members" in out and "## Night of 60 launches, 22 members" in out
    assert "| wide-trees (9) |" in out  # the slice's eight and the family's one
