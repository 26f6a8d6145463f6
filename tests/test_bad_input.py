"""Every bad input a user can give: one clear line naming what and where, exit code 2, no traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import TWIN_SPACE, autotune_cmd


def twin_space(tmp_path: Path, edit=None, text: str | None = None) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path / "space.yaml"
    if text is not None:
        path.write_text(text)
        return path
    data = yaml.safe_load(TWIN_SPACE.read_text())
    if edit is not None:
        edit(data)
    path.write_text(yaml.safe_dump(data))
    return path


def suite_file(tmp_path: Path, content: str):  # type: ignore[no-untyped-def]
    def edit(data: dict) -> None:  # type: ignore[type-arg]
        (tmp_path / "suite.jsonl").write_text(content)
        data["measurement"]["suite"] = "suite.jsonl"

    return edit


CASES = [
    (
        "malformed YAML",
        lambda t: ["check", str(twin_space(t, text="version: 1\nfixed: {a: [1, 2\n"))],
        ["space.yaml", "malformed YAML", "line 3"],
    ),
    (
        "unknown key",
        lambda t: ["check", str(twin_space(t, lambda d: d.update(colour="blue")))],
        ["space.yaml: colour: unknown key"],
    ),
    (
        "unknown engine flag",
        lambda t: ["check", str(twin_space(t, lambda d: d["fixed"].update({"tp-sise": 2})))],
        ["unknown flag --tp-sise", "did you mean --tp-size?"],
    ),
    (
        "low above high",
        lambda t: [
            "check",
            str(
                twin_space(
                    t, lambda d: d["tuned"].update({"mem-fraction-static": {"type": "float", "low": 0.9, "high": 0.8}})
                )
            ),
        ],
        ["tuned.mem-fraction-static", "low (0.9) is greater than high (0.8)"],
    ),
    (
        "empty prompt suite",
        lambda t: ["check", str(twin_space(t, suite_file(t, "\n")))],
        ["suite.jsonl: the prompt suite is empty"],
    ),
    (
        "malformed prompt suite",
        lambda t: ["check", str(twin_space(t, suite_file(t, '{"id": "a", "category"\n')))],
        ["suite.jsonl: line 1: not valid JSON"],
    ),
    (
        "prompt without text",
        lambda t: ["check", str(twin_space(t, suite_file(t, '{"id": "a", "category": "c"}\n')))],
        ["suite.jsonl: line 1", "give exactly one of 'prompt' or 'messages'"],
    ),
    (
        "unknown built-in suite",
        lambda t: ["check", str(twin_space(t, lambda d: d["measurement"].update(suite="builtin:poetry")))],
        ["no built-in suite 'poetry'", "mixed"],
    ),
    (
        "storage that cannot be opened",
        lambda t: ["study", str(TWIN_SPACE), "--trials", "1", "--storage", "nosuchdb://x"],
        ["cannot open storage 'nosuchdb://x'"],
    ),
    (
        "launcher not found",
        lambda t: ["check", str(twin_space(t, lambda d: d.update(launcher=["/nope/python"])))],
        ["launcher not found: /nope/python"],
    ),
    (
        "unreachable --url",
        lambda t: ["bench", "--url", "http://127.0.0.1:9"],
        ["cannot reach a ready sglang server at http://127.0.0.1:9"],
    ),
    ("study not found (show)", lambda t: ["show", "nope"], ["no study named 'nope'"]),
    ("study not found (export)", lambda t: ["export", "nope"], ["no study named 'nope'"]),
    ("missing space file", lambda t: ["check", str(t / "missing.yaml")], ["missing.yaml: file not found"]),
    ("no stop rule", lambda t: ["study", str(TWIN_SPACE)], ["give --trials N"]),
    ("bad duration", lambda t: ["study", str(TWIN_SPACE), "--timeout", "8 hours"], ["cannot read duration"]),
    (
        "unknown engine",
        lambda t: ["check", str(twin_space(t, lambda d: d.update(engine="tgi")))],
        ["unknown engine 'tgi'", "known engines"],
    ),
]


@pytest.mark.parametrize(("name", "command", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_line(tmp_path: Path, name: str, command, expected: list[str]) -> None:  # type: ignore[no-untyped-def]
    proc = subprocess.run(autotune_cmd(*command(tmp_path)), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("Error: ")
    for fragment in expected:
        assert fragment in proc.stderr, f"{fragment!r} not in {proc.stderr!r}"


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this machine has an NVIDIA driver")
def test_no_nvidia_driver_is_one_clear_line(tmp_path: Path) -> None:
    proc = subprocess.run(autotune_cmd("gpus"), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("Error: cannot read GPUs: no NVIDIA driver")
