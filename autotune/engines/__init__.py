"""Inference engines behind one interface (see :mod:`autotune.engines.base`), found by name.

The registry names each engine's module and class; a module is imported only when its engine is
asked for, so reading a study or printing ``--help`` imports none. An engine is added here alone:
its module, a line below, and its case in ``tests/engines/cases.py`` (the contract suite runs it).
What the study needs of it beyond launching (its draft spelling, its schedule, the memory flag the
race reports) it declares on its class (:mod:`autotune.engines.speculation`)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from autotune.errors import UserError

if TYPE_CHECKING:
    from autotune.engines.base import Engine

_REGISTRY: dict[str, tuple[str, str]] = {
    "sglang": ("autotune.engines.sglang", "SGLangEngine"),
    "llamacpp": ("autotune.engines.llamacpp", "LlamaCppEngine"),
    "vllm": ("autotune.engines.vllm", "VLLMEngine"),
}
DEFAULT_ENGINE = "sglang"
"""The engine a space, a ``bench --url`` or an old record that names none runs."""


def engine_names() -> list[str]:
    return list(_REGISTRY)


def get_engine(name: str) -> Engine:
    """The engine called ``name``; an unknown name lists the known ones."""
    if name not in _REGISTRY:
        raise UserError(f"unknown engine {name!r}; known engines: {', '.join(engine_names())}")
    module, cls = _REGISTRY[name]
    engine: Engine = getattr(import_module(module), cls)()
    return engine
