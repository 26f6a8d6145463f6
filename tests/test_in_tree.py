"""A benchmark run on one tree's code: the files it loaded named, and a run whose code came from
elsewhere refused (the judgement would otherwise rest on the wrong code without an error)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

IN_TREE = ROOT / "benchmarks" / "in_tree.py"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(IN_TREE), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_a_run_names_each_file_it_loaded_from_the_tree(tmp_path: Path) -> None:
    done = run(str(ROOT), "verdicts", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    markers = [line.split(" ", 2)[2] for line in done.stdout.splitlines() if line.startswith("MARKER loaded ")]
    assert [Path(m).relative_to(ROOT).as_posix() for m in markers] == [
        "autotune/study/guided.py", "autotune/study/race.py", "passmodel/calibrate.py", "benchmarks/verdicts.py"
    ]  # fmt: skip
    assert "--night" in done.stdout  # the module's own main ran, with the arguments after its name


def test_a_tree_that_does_not_hold_the_code_is_refused(tmp_path: Path) -> None:
    done = run(str(tmp_path), "search_efficiency", "--help", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("in_tree.py: loaded from outside the tree: ")
    assert "MARKER" not in done.stdout


def test_a_module_it_does_not_run_is_refused_in_one_line(tmp_path: Path) -> None:
    done = run(str(ROOT), "landscape", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == "usage: in_tree.py TREE {search_efficiency,verdicts} [ARGS...]"
