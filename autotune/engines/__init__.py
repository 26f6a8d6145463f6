"""Inference engines behind one interface (see :mod:`autotune.engines.base`)."""

from __future__ import annotations

from autotune.engines.base import Engine
from autotune.errors import UserError


def engine_names() -> list[str]:
    return ["sglang", "llamacpp", "vllm"]


def get_engine(name: str) -> Engine:
    """The engine called ``name``; an unknown name lists the known ones."""
    if name == "sglang":
        from autotune.engines.sglang import SGLangEngine

        return SGLangEngine()
    if name == "llamacpp":
        from autotune.engines.llamacpp import LlamaCppEngine

        return LlamaCppEngine()
    if name == "vllm":
        from autotune.engines.vllm import VLLMEngine

        return VLLMEngine()
    raise UserError(f"unknown engine {name!r}; known engines: {', '.join(engine_names())}")
