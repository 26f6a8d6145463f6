"""The held-out runner's arguments: trees, rows and slices read as given, a row naming no tree or a slice
of another form refused in one line (exit 2), and each row of each slice one process with its own report."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import family, heldout


def test_each_row_of_each_slice_is_one_process_writing_its_own_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(tmp_path), "--tree", "new=HEAD", "--tree", "bp=HEAD~1", "--row", "autotune-model=new:autotune-model",
            "--row", "branch-point-model=bp:autotune-model", "--slice", "all:50000:12:20",
            "--slice", "tight:50100:6:60", "--dry-run"]  # fmt: skip
    assert heldout.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert lines[0] == (
        f"new --family 12 --family-seed 50000 --family-case all --budget 20 --methods autotune-model --unmodelled "
        f"--json {tmp_path}/all-20-autotune-model-50000.json"
    )
    assert lines[3].startswith("bp --family 6 --family-seed 50100 --family-case tight --budget 60")
    assert lines[3].endswith(f"--json {tmp_path}/tight-60-branch-point-model-50100.json")
    assert not list(tmp_path.iterdir())  # a dry run writes nothing


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--row", "m=other:autotune-model", "--slice", "all:1:2:20"], "--row names a tree no --tree gives: other"),
        (["--row", "m=new:autotune-model", "--slice", "huge:1:2:20"], "slice 'huge:1:2:20': expected"),
        (["--row", "m=new:autotune-model", "--slice", "all:1:two:20"], "slice 'all:1:two:20': expected"),
        (["--row", "m=new", "--slice", "all:1:2:20"], "row 'm=new': expected NAME=TREE:METHOD"),
    ],
)
def test_a_row_or_slice_of_another_form_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        heldout.main([str(tmp_path), "--tree", "new=HEAD", *args, "--dry-run"])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


def test_a_wide_trees_slice_runs_the_first_wide_trees_members_from_its_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(tmp_path), "--tree", "new=HEAD", "--row", "m=new:autotune-model", "--slice", "wide-trees:51100:2:20",
            "--dry-run"]  # fmt: skip
    assert heldout.main(argv) == 0
    assert "--family 2 --family-seed 51100 --family-case wide-trees --budget 20" in capsys.readouterr().out


def test_the_wide_trees_case_takes_the_first_members_of_that_case_in_seed_order() -> None:
    chosen = family.wide_trees_members(3, 51100)
    assert [m.case for m in chosen] == ["wide-trees"] * 3
    skipped = range(51100, chosen[-1].seed)
    assert [s for s in skipped if family.member(s).case == "wide-trees"] == [m.seed for m in chosen[:-1]]
