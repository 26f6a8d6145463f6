"""Greedy outputs on real twin processes over HTTP: the text is a function of the prompt and the
token count only, whatever the speculative config; the ``diverge`` fault and a drafter marked
``diverges: true`` make it depart after the first few tokens, and only when speculation is on."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml

from autotune_twin.faults import DIVERGE_AFTER_TOKENS, SCHEDULE_ENV
from passmodel.profile import PROFILE_DIR
from tests.twin.processes import serving

pytestmark = [pytest.mark.twin, pytest.mark.slow]

MODEL = ["--model-path", "Qwen/Qwen3.6-27B", "--tp-size", "2", "--context-length", "131072",
         "--twin-load-seconds", "0.2"]  # fmt: skip
PROMPT = "Implement an LRU cache in Python without using functools.lru_cache or OrderedDict."
TOKENS = 40
NEXTN = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "4"]  # fmt: skip
DFLASH = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "z-lab/Qwen3.6-27B-DFlash",
          "--speculative-dflash-block-size", "10"]  # fmt: skip


def generate(tmp_path: Path, *flags: str, tokens: int = TOKENS) -> str:
    """Launch a twin with these flags and return its greedy text for PROMPT (temperature 0, as autotune sends)."""
    body = {
        "text": PROMPT,
        "sampling_params": {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True},
        "stream": True,
    }
    with serving(tmp_path, *MODEL, *flags, name="greedy") as server, httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{server.url}/generate", json=body) as response:
            events = [json.loads(line[6:]) for line in response.iter_lines() if line and line != "data: [DONE]"]
    assert events[-1]["meta_info"]["completion_tokens"] == tokens
    return str(events[-1]["text"])


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    return generate(tmp_path_factory.mktemp("greedy"))


def test_greedy_text_is_the_same_for_every_speculative_config(tmp_path: Path, reference: str) -> None:
    assert reference
    for flags in (NEXTN, DFLASH, ["--speculative-algorithm", "NEXTN", "--speculative-adaptive"]):
        assert generate(tmp_path, *flags) == reference, flags
    # a shorter request is the same text, cut: a function of the prompt and the token count
    assert reference.startswith(generate(tmp_path, *NEXTN, tokens=TOKENS // 2))


def test_diverge_fault_departs_after_a_few_tokens_only_with_speculation(
    tmp_path: Path, reference: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert generate(tmp_path, "--twin-fault", "diverge") == reference  # no speculation: no effect
    bad = generate(tmp_path, *NEXTN, "--twin-fault", "diverge")
    assert bad != reference
    # the first few tokens are still the greedy ones
    assert generate(tmp_path, *NEXTN, "--twin-fault", "diverge", tokens=DIVERGE_AFTER_TOKENS) == generate(
        tmp_path, tokens=DIVERGE_AFTER_TOKENS
    )
    # from the fault schedule too, for any drafter: the same wrong text (deterministic, like a bug)
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(["diverge"]))
    monkeypatch.setenv(SCHEDULE_ENV, str(schedule))
    assert generate(tmp_path, *DFLASH) == bad


def test_a_drafter_marked_diverges_departs_from_the_greedy_text(tmp_path: Path, reference: str) -> None:
    data = yaml.safe_load((PROFILE_DIR / "qwen3.6-27b-2xa6000.yaml").read_text())
    data["model"]["drafters"][1]["diverges"] = True  # the user's earlier checkpoint is broken
    profile = tmp_path / "broken.yaml"
    profile.write_text(yaml.safe_dump(data))
    broken = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
              data["model"]["drafters"][1]["path"], "--twin-profile", str(profile)]  # fmt: skip
    assert generate(tmp_path, *broken) != reference
    good = ["--twin-profile", str(profile), *DFLASH]
    assert generate(tmp_path, *good) == reference
