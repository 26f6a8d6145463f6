"""Every bad input a user can give: one clear line naming what and where, exit code 2, no traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import optuna
import pytest
import yaml

from tests.conftest import SPACES, TWIN_SPACE, autotune_cmd


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


def vllm_space(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    data = yaml.safe_load((SPACES / "qwen3.6-27b-2xa6000-vllm-twin.yaml").read_text())
    edit(data)
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def fly_in_the_json(data: dict) -> None:  # type: ignore[type-arg]
    """The speculative settings as one --speculative-config JSON, verified by FLy (lossy)."""
    for name in ("speculative-method", "num-speculative-tokens", "rejection-sample-method"):
        data["fixed"].pop(name, None)
        data["tuned"].pop(name, None)
    data["baselines"] = []
    spec = {"method": "mtp", "num_speculative_tokens": 3, "rejection_sample_method": "fly"}
    data["fixed"]["speculative-config"] = json.dumps(spec)


def suite_file(tmp_path: Path, content: str):  # type: ignore[no-untyped-def]
    def edit(data: dict) -> None:  # type: ignore[type-arg]
        (tmp_path / "suite.jsonl").write_text(content)
        data["measurement"]["suite"] = "suite.jsonl"

    return edit


EMPTY_SECOND_PROMPT = '{"id": "a", "category": "c", "prompt": "hi"}\n{"id": "b", "category": "c", "prompt": " "}\n'

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
    (
        "export --port into a profile",
        lambda t: ["export", "nope", "--port", "8000"],
        ["--host and --port go into a launch command: use --format sh or systemd"],
    ),
    (
        "export --schedule with --trial",
        lambda t: ["export", "nope", "--schedule", "--trial", "1"],
        ["--schedule exports the schedule: leave out --trial and --concurrency"],
    ),
    (
        "export --schedule-config without --schedule",
        lambda t: ["export", "nope", "--format", "sh", "--schedule-config", "a.json"],
        ["--schedule-config names where --schedule writes its config: add --schedule or leave it out"],
    ),
    ("missing space file", lambda t: ["check", str(t / "missing.yaml")], ["missing.yaml: file not found"]),
    ("no stop rule", lambda t: ["study", str(TWIN_SPACE)], ["give --trials N"]),
    ("bad duration", lambda t: ["study", str(TWIN_SPACE), "--timeout", "8 hours"], ["cannot read duration"]),
    (
        "unknown engine",
        lambda t: ["check", str(twin_space(t, lambda d: d.update(engine="tgi")))],
        ["unknown engine 'tgi'", "known engines"],
    ),
    (
        "GPU the inventory does not have",
        lambda t: ["check", str(twin_space(t, lambda d: d["gpus"].update(devices=[0, 5])))],
        ["space.yaml: gpus.devices: GPU 5 is not in the inventory; it has GPUs [0, 1]"],
    ),
    (
        "empty prompt",
        lambda t: ["check", str(twin_space(t, suite_file(t, EMPTY_SECOND_PROMPT)))],
        ["suite.jsonl: line 2: prompt 'b' is empty"],
    ),
    (
        "empty chat messages",
        lambda t: ["check", str(twin_space(t, suite_file(t, '{"id": "m", "category": "c", "messages": []}\n')))],
        ["suite.jsonl: line 1: prompt 'm' is empty"],
    ),
    (
        "unknown type of a tuned flag",
        lambda t: ["check", str(twin_space(t, lambda d: d["tuned"]["mem-fraction-static"].update(type="integer")))],
        ["tuned.mem-fraction-static: unknown type 'integer'; the known types are int, float, categorical"],
    ),
    (
        "tuned flag without a type",
        lambda t: ["check", str(twin_space(t, lambda d: d["tuned"]["mem-fraction-static"].pop("type")))],
        ["tuned.mem-fraction-static: 'type' is missing; give one of the known types: int, float, categorical"],
    ),
    (
        "unreachable --url without a scheme",
        lambda t: ["bench", "--url", "127.0.0.1:9"],
        ["cannot reach a ready sglang server at http://127.0.0.1:9"],
    ),
    (
        "a lossy verification tuned without allow_lossy_speculation",
        lambda t: [
            "check",
            str(vllm_space(t, lambda d: d["tuned"]["rejection-sample-method"].update(choices=["block", "fly"]))),
        ],
        [
            "vllm.yaml: tuned.rejection-sample-method: rejection_sample_method fly changes the model's outputs; "
            "set allow_lossy_speculation: true if changed outputs are acceptable"
        ],
    ),
    (
        "a lossy verification fixed in the JSON, at study",
        lambda t: ["study", str(vllm_space(t, fly_in_the_json)), "--trials", "1"],
        ["vllm.yaml: fixed.speculative-config: rejection_sample_method fly changes the model's outputs"],
    ),
    (
        "a lossy SGLang acceptance threshold tuned without allow_lossy_speculation",
        lambda t: [
            "check",
            str(
                twin_space(
                    t,
                    lambda d: d["tuned"].update(
                        {"speculative-accept-threshold-acc": {"type": "float", "low": 0.5, "high": 1.0}}
                    ),
                )
            ),
        ],
        [
            "space.yaml: tuned.speculative-accept-threshold-acc: speculative-accept-threshold-acc 0.5 below 1.0 "
            "changes the model's outputs; set allow_lossy_speculation: true if changed outputs are acceptable"
        ],
    ),
    (
        "--url of another protocol",
        lambda t: ["bench", "--url", "ftp://127.0.0.1:9"],
        ["--url ftp://127.0.0.1:9: give an http:// or https:// address, not ftp://"],
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


# ---------------------------------------------------------------- storage the user cannot write


def one_error_line(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_sqlite_folder_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    url = f"sqlite:///{tmp_path}/a-file/sub/x.db"
    proc = subprocess.run(autotune_cmd("study", str(TWIN_SPACE), "--trials", "1", "--storage", url), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    line = one_error_line(proc)
    assert f"cannot open storage {url!r}: cannot create folder" in line and "Not a directory" in line


def as_read_only(folder: Path, argv: list[str]) -> list[str]:
    """Run ``argv`` with ``folder`` read-only: a read-only bind mount in a private mount namespace
    for root (who ignores file modes), the folder's and files' modes otherwise."""
    if os.geteuid() != 0:
        for path in [*folder.iterdir(), folder]:
            path.chmod(0o555 if path.is_dir() else 0o444)
        return argv
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to make a read-only folder as root")
    mount = f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} {folder} && exec \"$@\""
    return ["unshare", "-m", "sh", "-c", mount, "sh", *argv]


def test_read_only_database_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    url = f"sqlite:///{folder}/x.db"
    optuna.create_study(study_name="ro", storage=url)  # an existing study, then made read-only
    study = autotune_cmd("study", str(TWIN_SPACE), "--name", "ro", "--trials", "1", "--storage", url)
    argv = as_read_only(folder, study)
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    if proc.returncode != 2 and "unshare" in argv[0] and "Operation not permitted" in proc.stderr:
        pytest.skip("mount namespaces are not allowed here")
    line = one_error_line(proc)
    assert url in line and ("not writable" in line or "readonly database" in line), line


@pytest.mark.twin
@pytest.mark.slow
def test_full_disk_for_artifacts_keeps_the_measurement_and_is_one_line(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a small tmpfs")
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["study"] = "full"
    data["measurement"].update({"warmup_requests": 0, "prompts_per_round": 1, "max_tokens": 16, "max_rounds": 2})
    data["baselines"] = data["baselines"][1:]  # hand-found: measured
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data))
    small = tmp_path / "small"
    small.mkdir()
    mount = f"mount -t tmpfs -o size=8k tmpfs {small} && exec \"$@\""
    argv = ["unshare", "-m", "sh", "-c", mount, "sh",
            *autotune_cmd("study", str(space), "--trials", "3", "--artifacts", str(small))]  # fmt: skip
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    if "Operation not permitted" in proc.stderr and proc.returncode != 2:
        pytest.skip("mount namespaces are not allowed here")
    line = one_error_line(proc)
    assert "cannot keep trial 0's artifacts" in line and "No space left on device" in line, line
    trials = optuna.load_study(study_name="full", storage=f"sqlite:///{tmp_path}/studies/full.db").trials
    assert len(trials) == 1 and trials[0].state.name == "COMPLETE" and trials[0].value  # the measurement is kept
    assert trials[0].user_attrs["outcome"] == "ok"
