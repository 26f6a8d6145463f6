"""What the pass model (:mod:`passmodel`) knows of a study's deployment, read without a network.

The model's ``config.json`` (the space's ``model_config``, else the model's folder or the Hugging Face
cache: :func:`autotune.model_reads.find_config`), each draft model's likewise (``draft_model_configs``),
the GPUs from the inventory (NVML's name and memory; bandwidth and compute from the datasheet table,
:data:`passmodel.setup.KNOWN_GPUS`) and TP from the fixed flags (where the space tunes TP, the setup's
costs are at TP 1 and the model-guided search predicts each candidate at its own TP). What cannot be read is said in one
line (:attr:`PassSetup.missing`); without the model's config or a known GPU there is no model.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from autotune.engines import get_engine
from autotune.gpu import GpuInventory
from autotune.model_reads import find_config, read_config
from autotune.models import Frozen
from autotune.space import SearchSpace
from passmodel.profile import TwinProfile
from passmodel.setup import (
    DEFAULT_COSTS,
    KNOWN_GPUS,
    DrafterFacts,
    GpuFacts,
    ModelFacts,
    Setup,
    dflash_drafter_spec,
    draft_step_ms,
    drafter_spec,
    profile_from_setup,
)

_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8"}


class PassSetup(Frozen):
    """The setup the model is built from, its drafters by the path a launch names, and what is missing."""

    setup: Setup | None = None
    drafters: dict[str, DrafterFacts] = Field(default_factory=dict)
    missing: list[str] = Field(default_factory=list, description="what could not be read, one phrase each")
    tp_tuned: bool = Field(default=False, description="the space tunes TP: each candidate is predicted at its own")

    def summary(self) -> str:
        """One line: what the model is built from, or why there is none."""
        if self.setup is None:
            return "no pass model: " + "; ".join(self.missing)
        gpu = self.setup.gpu.name if isinstance(self.setup.gpu, GpuFacts) else self.setup.gpu
        arch = _architecture(self.setup)
        tp = "each candidate's TP" if self.tp_tuned else f"TP {self.setup.tp}"
        built = f"pass model of {arch} on {self.setup.gpu_count}x {gpu} at {tp}"
        drafters = f", {len(self.drafters)} draft model(s)" if self.drafters else ""
        return built + drafters + (f" (not read: {'; '.join(self.missing)})" if self.missing else "")

    def profile(self) -> TwinProfile | None:
        """The model's profile at the datasheet's figures and the default costs (before any fit)."""
        if self.setup is None:
            return None
        profile = profile_from_setup(self.setup, name="study")
        drafters = []
        for path, facts in self.drafters.items():
            if facts.algorithm == "DFLASH":
                drafters.append(dflash_drafter_spec(facts, DEFAULT_COSTS, self.setup.tp, path=path))
            else:
                spec = drafter_spec(facts, path=path)
                drafters.append(spec.model_copy(update={"step_ms": draft_step_ms(DEFAULT_COSTS, self.setup.tp)}))
        if drafters:
            profile = profile.model_copy(update={"model": profile.model.model_copy(update={"drafters": drafters})})
        return profile


def _architecture(setup: Setup) -> str:
    config = setup.model.config
    names = config.get("architectures") if isinstance(config, dict) else None
    return str(names[0]) if isinstance(names, list) and names else "the model"


def known_gpu(name: str) -> GpuFacts | None:
    """The datasheet of a GPU by the name NVML gives (``NVIDIA RTX A6000``, ``NVIDIA H100 80GB HBM3``)."""
    plain = name.removesuffix(" (simulated)")
    for facts in KNOWN_GPUS.values():
        if facts.name == plain:
            return facts
    # The longest key that appears as a word: "L40S" before "L4", "H100" not inside "GH100X".
    for key in sorted(KNOWN_GPUS, key=len, reverse=True):
        if re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", plain):
            return KNOWN_GPUS[key]
    return None


def _config(space: SearchSpace, named: str | None, model: str) -> tuple[dict[str, Any] | None, str]:
    """(the config, where it was looked for)."""
    path = space.relative_path(named) if named is not None else find_config(model)
    where = str(path) if path is not None else f"{model} (no local folder, not in the Hugging Face cache)"
    return read_config(path), where


def _dtype(config: dict[str, Any]) -> str:
    quant = config.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method"):
        method = str(quant["quant_method"]).lower()
        return "fp8" if "fp8" in method else "int4"
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    raw = str(config.get("torch_dtype") or config.get("dtype") or (text or {}).get("torch_dtype") or "bfloat16")
    return _DTYPES.get(raw, "bf16")


def tp_flag(space: SearchSpace) -> str:
    """The engine's TP flag (its memory rules'), else SGLang's spelling."""
    rules = get_engine(space.engine).memory_rules
    return rules.tp_flag if rules is not None else "tp-size"


def _tp(space: SearchSpace) -> int:
    for name in ("tp-size", "tp", "tensor-parallel-size"):
        value = space.fixed.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return 1


def _draft_paths(space: SearchSpace) -> list[str]:
    """The draft model paths the space can launch: fixed, tuned choices, baselines."""
    speculation = get_engine(space.engine).speculation
    if speculation is None:
        return []
    name = speculation.draft_model
    paths: list[Any] = [space.fixed.get(name)] + [b.flags.get(name) for b in space.baselines]
    tuned = space.tuned.get(name)
    if tuned is not None:
        paths += list(getattr(tuned, "choices", []))
    return sorted({str(p) for p in paths if isinstance(p, str) and p})


def _algorithm_of(config: dict[str, Any]) -> str:
    names = " ".join(str(a) for a in config.get("architectures") or []).lower()
    if "dflash" in names:
        return "DFLASH"
    return "EAGLE3" if "eagle3" in names or config.get("draft_vocab_size") else "EAGLE"


def read_pass_setup(space: SearchSpace, inventory: GpuInventory) -> PassSetup:
    """The pass model's setup of ``space`` on ``inventory`` (module docstring)."""
    missing: list[str] = []
    engines = space.engine_names()
    # An engine whose launches the pass model reads gives calibration flags (llama.cpp's it does not).
    if all(get_engine(engine).calibration_flags({}) is None for engine in engines):
        return PassSetup(missing=[f"the pass model does not describe {', '.join(engines)}"])
    config, where = _config(space, space.config_json, space.model)
    if config is None:
        missing.append(f"the model's config.json ({where})")
    gpu = known_gpu(inventory.gpus[0].name) if inventory.gpus else None
    if gpu is None:
        missing.append(f"the datasheet of {inventory.gpus[0].name if inventory.gpus else 'the GPUs'}")
    elif inventory.gpus:  # NVML's memory, not the datasheet's nominal size
        gpu = gpu.model_copy(update={"memory_gb": inventory.gpus[0].memory_total_bytes / 2**30})
    drafters: dict[str, DrafterFacts] = {}
    for path in _draft_paths(space):
        draft, draft_where = _config(space, space.draft_model_configs.get(path), path)
        if draft is None:
            missing.append(f"draft model {path}'s config.json ({draft_where})")
        else:
            drafters[path] = DrafterFacts(algorithm=_algorithm_of(draft), config=draft)
    if config is None or gpu is None:
        return PassSetup(missing=missing)
    has_heads = bool(config.get("num_nextn_predict_layers") or config.get("mtp_num_hidden_layers"))
    setup = Setup(
        gpu=gpu,
        gpu_count=max(len(inventory.gpus), _tp(space)),
        tp=_tp(space),
        model=ModelFacts(config=config, dtype=_dtype(config)),
        drafter=DrafterFacts(algorithm="NEXTN") if has_heads else None,
    )
    return PassSetup(setup=setup, drafters=drafters, missing=missing, tp_tuned=tp_flag(space) in space.tuned)
