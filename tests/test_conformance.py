"""Conformance with the real engines (issue 17 item 4): every command line that the shipped spaces'
baselines, a short twin study and ``autotune export`` produce goes through the REAL SGLang 0.5.23 /
vLLM 0.34.0 argument parsers (and SGLang's server-args resolution) in their own venv
(scripts/conformance-env.sh), via scripts/conformance_check.py. A rule that autotune's engine or twin
applies and the real server does not (or the reverse) fails here.

The env is provided before the run (the ``conformance`` tier of :mod:`tests.tiers`), never skipped.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.engines import get_engine
from autotune.engines.base import InvalidConfig, LaunchPlan, flag_argv
from autotune.space import load_space
from tests.tiers import path_of

ROOT = Path(__file__).resolve().parent.parent
CHECKER = ROOT / "scripts" / "conformance_check.py"
MODELS = ROOT / "tests" / "fixtures" / "conformance"

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.slow,
    pytest.mark.tier("conformance"),
]

# Stand-in model folders (config.json only) for the spaces' models. Qwen3.6-122B-A10B is a MoE of the
# same hybrid GDN + MTP family: the 27B config stands in for it (its launch rules are the same).
STAND_IN = {
    "Qwen/Qwen3.6-27B": MODELS / "qwen3.6-27b",
    "Qwen/Qwen3.6-122B-A10B": MODELS / "qwen3.6-27b",
    "meta-llama/Llama-3.1-8B-Instruct": MODELS / "llama3.1-8b",
    "z-lab/Llama-3.1-8B-DFlash": MODELS / "llama3.1-8b-dflash",  # a DFlash drafter (its config names the block)
    # The seed space's DFlash checkpoints (a public one and a user's own) stand in as one drafter config.
    "z-lab/Qwen3.6-27B-DFlash": MODELS / "qwen3.6-27b-dflash",
    "/models/qwen3.6-27b-dflash/checkpoint-2000": MODELS / "qwen3.6-27b-dflash",
}
# The GPU each space targets, as SGLang's resolution sees it (MiB per GPU, count).
GPUS = {
    "2xa6000": {"memory_mib": 49140, "count": 2, "name": "NVIDIA RTX A6000", "capability": [8, 6]},
    "1xh100": {"memory_mib": 81559, "count": 1, "name": "NVIDIA H100 80GB HBM3", "capability": [9, 0]},
    "4xa100": {"memory_mib": 81920, "count": 4, "name": "NVIDIA A100-SXM4-80GB", "capability": [8, 0]},
}
LAUNCHERS = {"sglang": ["python", "-m", "sglang.launch_server"], "vllm": ["vllm", "serve"]}
# autotune policies that are not server rules: the real server accepts these, autotune refuses them
# on purpose (say why next to each).
POLICY = (
    "give both",  # vLLM: --max-num-seqs/--max-num-batched-tokens defaults depend on the GPU; trials must compare
    "disable-log-stats",  # vLLM: turns off the metrics autotune reads
)


def gpu_of(space_path: Path) -> dict[str, Any]:
    return next(gpu for key, gpu in GPUS.items() if key in space_path.name)


def model_of(name: str) -> Path:
    for key, folder in STAND_IN.items():
        if key.split("/")[-1].lower() in name.lower() or name.lower() in key.lower():
            return folder
    raise AssertionError(f"no stand-in model config for {name} under {MODELS}")


def stand_in(argv: list[str], model: str) -> list[str]:
    """The argv with the space's model, and any draft model named in STAND_IN, as local folders."""
    names = {model: str(model_of(model)), **{name: str(folder) for name, folder in STAND_IN.items()}}
    return [names.get(word, word) for word in argv]


def run_checker(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done = subprocess.run(
        [path_of("conformance"), str(CHECKER)],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    verdicts = json.loads(done.stdout)
    broken = [v for v in verdicts if v["accepted"] is None]
    assert not broken, f"the checker itself failed: {broken}"
    return verdicts


def autotune(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "autotune"), *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"autotune {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def shipped_spaces() -> list[Path]:
    # llama.cpp is not SGLang or vLLM; the CPU SGLang space's argv is checked by the real server itself
    # (tests/test_sglang_real.py)
    return sorted(p for p in (ROOT / "search_spaces").glob("*.yaml") if "llamacpp" not in p.name
                  and p.name != "sglang-cpu.yaml")  # fmt: skip


def baseline_items(tmp: Path) -> list[dict[str, Any]]:
    """The baselines' argv of every shipped space: ``autotune check --json`` where the launcher runs
    here (the twin spaces); for spaces whose launcher is a real engine's venv (absent here), the same
    normalise + build_argv that ``check`` runs, with a stand-in launcher."""
    items = []
    for path in shipped_spaces():
        space = load_space(path)
        if all("autotune_twin" in " ".join(space.launcher_for(name)) for name in space.engine_names()):
            for baseline in json.loads(autotune("check", str(path), "--json", cwd=tmp))["baselines"]:
                argv = stand_in(baseline["argv"], space.model)
                items.append({"id": f"{path.name}:{baseline['name']}", "engine": baseline["engine"], "argv": argv})
            continue
        for baseline in space.baselines:
            name, flags = space.split_engine({**space.fixed, **baseline.flags})
            engine = get_engine(name)
            plan = engine.normalise(flags)
            argv = engine.build_argv(LAUNCHERS[name], model=space.model, plan=plan, host="127.0.0.1", port=30000)
            items.append({"id": f"{path.name}:{baseline.name}", "engine": name, "argv": stand_in(argv, space.model)})
    for item in items:
        item["gpu"] = gpu_of(Path(item["id"].split(":")[0]))
    return items


@pytest.fixture(scope="module")
def twin_study(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A short SGLang twin study, its records (argv per launched trial) and its exported script."""
    tmp = tmp_path_factory.mktemp("conformance")
    space = ROOT / "search_spaces" / "qwen3.6-27b-2xa6000-twin.yaml"
    name = "conformance"
    autotune(
        "study", str(space), "--trials", "4", "--seed", "1", "--confirm-top", "0", "--name", name,
        "--studies-dir", str(tmp / "s"), cwd=tmp,
    )  # fmt: skip
    shown = json.loads(autotune("show", name, "--json", "--studies-dir", str(tmp / "s"), cwd=tmp))
    script = autotune("export", name, "--format", "sh", "--studies-dir", str(tmp / "s"), cwd=tmp)
    return {"space": space, "trials": shown["trials"], "script": script, "tmp": tmp}


def exported_argv(script: str) -> list[str]:
    """The launch command of an exported shell script (its ``exec`` line, continuations joined)."""
    text = script.replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.strip().startswith("exec "))
    return shlex.split(line.strip())[1:]


def test_every_argv_autotune_launches_or_exports_is_accepted_by_the_real_engines(twin_study, tmp_path):
    model = load_space(twin_study["space"]).model
    gpu = gpu_of(twin_study["space"])
    items = baseline_items(tmp_path)
    refused: list[dict[str, Any]] = []
    for trial in twin_study["trials"]:
        if trial["argv"] and trial["outcome"] != "invalid-config":
            items.append({"id": f"trial {trial['number']}", "engine": "sglang", "argv": stand_in(trial["argv"], model)})
        elif trial["outcome"] == "invalid-config":
            argv = trial["argv"] or [*LAUNCHERS["sglang"], "--model-path", model, *flag_argv(trial["flags"])]
            refused.append(
                {
                    "id": f"refused trial {trial['number']}",
                    "engine": "sglang",
                    "argv": stand_in(argv, model),
                    "gpu": gpu,
                }
            )
    items.append({"id": "export sh", "engine": "sglang", "argv": stand_in(exported_argv(twin_study["script"]), model)})
    for item in items:
        item.setdefault("gpu", gpu)
    assert len(items) >= 10, items
    verdicts = run_checker(items + refused)
    print(json.dumps(verdicts, indent=1))  # shown with -s / on failure: the real resolution's values
    wrong = [v for v in verdicts[: len(items)] if not v["accepted"]]
    assert not wrong, f"autotune launched/exported command lines the real engine refuses: {wrong}"
    accepted_refusals = [
        (v, t)
        for v, t in zip(verdicts[len(items) :], refused, strict=True)
        if v["accepted"] and not any(p in str(t) for p in POLICY)
    ]
    assert not accepted_refusals, f"autotune refused command lines the real engine accepts: {accepted_refusals}"


# Rules autotune's engines apply, each with a command line on either side of it: autotune's verdict
# (normalise) must equal the real engine's.
VLLM_MTP3 = {"max-num-seqs": 8, "max-num-batched-tokens": 4096, "speculative-method": "mtp",
             "num-speculative-tokens": 3}  # fmt: skip
RULES: list[tuple[str, str, dict[str, Any]]] = [
    ("sglang", "qwen", {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "speculative-eagle-topk": 1}),
    ("sglang", "qwen", {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3}),  # partial set
    ("sglang", "qwen", {"speculative-algorithm": "NEXTN", "speculative-eagle-topk": 2}),  # partial set
    ("sglang", "qwen", {"speculative-algorithm": "NEXTN", "speculative-num-draft-tokens": 4}),  # partial set
    ("sglang", "qwen", {"speculative-algorithm": "MTP", "speculative-num-steps": 1, "speculative-eagle-topk": 1}),
    ("sglang", "qwen", {"mamba-radix-cache-strategy": "no_buffer", "disable-overlap-schedule": True}),
    ("sglang", "qwen", {"mamba-radix-cache-strategy": "no_buffer"}),
    (
        "sglang",
        "qwen",
        {
            "speculative-algorithm": "NEXTN",
            "speculative-num-steps": 4,
            "speculative-eagle-topk": 4,
            "speculative-num-draft-tokens": 12,
            "mamba-radix-cache-strategy": "extra_buffer",
            "mamba-track-interval": 8,
        },
    ),
    (
        "sglang",
        "qwen",
        {
            "speculative-algorithm": "NEXTN",
            "speculative-num-steps": 4,
            "speculative-eagle-topk": 4,
            "speculative-num-draft-tokens": 12,
            "mamba-track-interval": 16,
        },
    ),
    ("sglang", "qwen", {"context-length": "128k"}),
    ("vllm", "qwen", {"max-num-seqs": 8, "max-num-batched-tokens": 4096, "max-model-len": 8192}),
    (
        "vllm",
        "qwen",
        {"max-num-seqs": 8, "max-num-batched-tokens": 4096, "max-model-len": 8192, "enable-chunked-prefill": False},
    ),
    ("vllm", "qwen", {"max-num-seqs": 64, "max-num-batched-tokens": 32}),
    (
        "vllm",
        "qwen",
        {"max-num-seqs": 8, "max-num-batched-tokens": 4096, "speculative-method": "mtp", "num-speculative-tokens": 2},
    ),
    # SpeculativeConfig.rejection_sample_method and the keys that go with it (both sides of each rule)
    *(
        ("vllm", "qwen", {**VLLM_MTP3, "rejection-sample-method": method, **extra})
        for method, extra in (
            ("block", {}),
            ("greedy", {}),
            ("synthetic", {}),
            ("synthetic", {"speculative-config.synthetic_acceptance_length": 2.5}),
            ("synthetic", {"speculative-config.synthetic_acceptance_length": 4.5}),
            ("synthetic", {"speculative-config.synthetic_acceptance_rates": "[0.9, 0.6, 0.3]"}),
            ("synthetic", {"speculative-config.synthetic_acceptance_rates": "[0.5, 0.6, 0.1]"}),
            ("synthetic", {"speculative-config.synthetic_acceptance_rates": "[0.5]"}),
            ("standard", {"speculative-config.synthetic_acceptance_length": 2.0}),
            ("fly", {}),
            ("fly", {"speculative-config.fly_window_size": 2}),
            ("fly", {"speculative-config.fly_window_size": 3}),
            ("fly", {"num-speculative-tokens": 1}),
        )
    ),
]


def agreement(cases: list[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """autotune's verdict next to the real engine's for each case; the disagreements."""
    items, ours = [], []
    for index, (engine_name, model_key, flags) in enumerate(cases):
        engine = get_engine(engine_name)
        model = str(MODELS / ("qwen3.6-27b" if model_key == "qwen" else "llama3.1-8b"))
        try:
            plan, accepted = engine.normalise(flags), True
        except InvalidConfig as exc:
            plan, accepted = LaunchPlan(engine=engine_name, flags=dict(flags)), False
            if any(p in str(exc) for p in POLICY):
                continue
        argv = engine.build_argv(LAUNCHERS[engine_name], model=model, plan=plan, host="127.0.0.1", port=30000)
        items.append({"id": index, "engine": engine_name, "argv": argv, "gpu": GPUS["2xa6000"]})
        ours.append(accepted)
    verdicts = run_checker(items)
    return [
        {"case": cases[v["id"]], "autotune": mine, "real": v["accepted"], "real_error": v.get("error")}
        for v, mine in zip(verdicts, ours, strict=True)
        if v["accepted"] != mine
    ]


def test_autotune_rules_agree_with_the_real_engines():
    disagreements = agreement(RULES)
    assert not disagreements, json.dumps(disagreements, indent=1)


def test_a_seeded_disagreement_fails_the_check(monkeypatch):
    """Toggle one rule off (SGLang's partial speculative set) in autotune's engine: the check must see
    autotune accept a command line that the real SGLang refuses."""
    from autotune.engines.sglang import SGLangEngine

    def permissive(self, flags):
        return LaunchPlan(engine=self.name, flags=dict(flags))

    monkeypatch.setattr(SGLangEngine, "normalise", permissive)
    seeded = [("sglang", "qwen", {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3})]
    disagreements = agreement(seeded)
    assert len(disagreements) == 1
    assert disagreements[0]["autotune"] is True and disagreements[0]["real"] is False
    assert "Error" in disagreements[0]["real_error"]


def test_an_exported_speculation_schedule_and_its_config_are_accepted_by_real_sglang(tmp_path):
    """``export --schedule``'s command line and adaptive config through the real parser, resolution and
    the controller's own config reader: each batch size routed to the tier autotune meant."""
    from autotune.profile import Profile, render
    from autotune.study.schedule import SCHEDULE, judge, schedule_profile
    from tests.test_schedule import deep_alone_shallow_loaded, race, schedule_of

    schedule = schedule_of(deep_alone_shallow_loaded())
    truth = {
        1: {SCHEDULE: 57.0, 1: 57.0, 2: 53.0, 0: 47.0},
        4: {SCHEDULE: 48.0, 1: 45.0, 2: 48.0, 0: 43.0},
        16: {SCHEDULE: 25.0, 1: 20.0, 2: 23.0, 0: 25.0},
    }
    verdict = judge(schedule, race(truth), rounds=3)
    assert verdict.recommended
    base = Profile(study="s", trial=1, engine="sglang", model="Qwen/Qwen3.6-27B", launcher=LAUNCHERS["sglang"],
                   flags={"context-length": 131072})  # fmt: skip
    profile = schedule_profile(base, verdict, config_file=tmp_path / "s-adaptive.json", metric="decode_tok_s",
                               unit="tok/s")  # fmt: skip
    argv = stand_in(exported_argv(render(profile, "sh")), "Qwen/Qwen3.6-27B")
    [checked] = run_checker([{"id": "schedule", "engine": "sglang", "argv": argv, "gpu": GPUS["2xa6000"]}])
    assert checked["accepted"], checked
    resolved = checked["resolved"]
    assert resolved["speculative_adaptive"] and resolved["speculative_eagle_topk"] == 1
    assert (resolved["speculative_num_steps"], resolved["speculative_num_draft_tokens"]) == (5, 6)
    # slots 1, 2 and 8 (batches between levels take the nearer level's depth)
    assert resolved["adaptive_slots"] == {"1": 5, "2": 3, "4": 3, "8": 2, "16": 2, "32": 2}


def test_an_exported_vllm_speculation_schedule_is_accepted_by_real_vllm():
    """``export --schedule`` on vLLM: the command line through vLLM 0.34's parser and the scheduler's own
    per-batch-size table builder: each batch size runs the k autotune meant."""
    from autotune.profile import Profile, render
    from autotune.study.schedule import SCHEDULE, judge, schedule_profile
    from tests.test_schedule import race, vllm_record, vllm_schedule_of

    schedule = vllm_schedule_of([
        vllm_record(0, 2, {1: 47.0, 4: 43.0, 16: 25.0}),
        vllm_record(1, 5, {1: 57.0, 4: 45.0, 16: 20.0}),
        vllm_record(2, 3, {1: 53.0, 4: 48.0, 16: 23.0}),
    ])  # fmt: skip
    truth = {
        1: {SCHEDULE: 57.0, 1: 57.0, 2: 53.0, 0: 47.0},
        4: {SCHEDULE: 48.0, 1: 45.0, 2: 48.0, 0: 43.0},
        16: {SCHEDULE: 25.0, 1: 20.0, 2: 23.0, 0: 25.0},
    }
    verdict = judge(schedule, race(truth), rounds=3)
    assert verdict.recommended
    base = Profile(study="s", trial=1, engine="vllm", model="Qwen/Qwen3.6-27B", launcher=LAUNCHERS["vllm"],
                   flags={"max-model-len": 131072})  # fmt: skip
    profile = schedule_profile(base, verdict, config_file=Path("unused.json"), metric="decode_tok_s", unit="tok/s")
    assert profile.adaptive_config is None
    argv = stand_in(exported_argv(render(profile, "sh")), "Qwen/Qwen3.6-27B")
    [checked] = run_checker([{"id": "vllm-schedule", "engine": "vllm", "argv": argv, "gpu": GPUS["2xa6000"]}])
    assert checked["accepted"], checked
    # ranges [1,1,5], [2,7,3], [8,32,2]: batches between levels take the nearer level's k
    assert checked["resolved"]["dynamic_sd_lookup"] == [0, 5, *[3] * 6, *[2] * 25]
