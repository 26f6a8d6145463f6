"""An import shim that lets real SGLang 0.5.23 serve on a CPU without its GPU kernel library.

Put this folder on ``PYTHONPATH`` of the server (the tests do it through the space's ``env:``);
Python imports ``sitecustomize`` at start-up, before SGLang. It serves two module trees as inert
packages whose every name is a stand-in that can be looked up but raises when called:

- ``sgl_kernel.*`` (the sglang-kernel wheel: CUDA kernels and the AMX CPU ops, several GB, no build
  for this CPU-only torch): with ``SGLANG_USE_CPU_ENGINE=1``,
  ``sglang/kernels/ops/kvcache/cache_move.py`` imports one of its CPU ops at import time. Plain
  decoding never calls it; SGLang takes its AMX paths only when
  ``torch.ops.sgl_kernel.convert_weight_packed`` exists, which this shim does not register, so norm,
  activation and attention run on their native PyTorch paths.
- ``torchvision.*``: PyPI's torchvision needs the CUDA torch; SGLang imports it at module level for
  image preprocessing (``sglang/srt/configs/deepseek_ocr.py`` is on every start's path), which a
  text model never runs. transformers is still told torchvision is absent, as it is: it would
  otherwise find the stand-in and fail parsing its version ('N/A').

Nothing else is stubbed: a stand-in called at run time raises and names itself, so a test would see it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

_ROOTS = frozenset({"sgl_kernel", "torchvision"})


class _Inert:
    """A name looked up in a stubbed module: further lookups work, a call raises."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Inert(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name} was called, but it is a stand-in (tests/sglang_cpu/sitecustomize.py)")


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in _ROOTS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []

        def lookup(attr: str) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _Inert(f"{spec.name}.{attr}")

        module.__getattr__ = lookup  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _TransformersWithoutTorchvision(importlib.abc.MetaPathFinder):
    """Loads ``transformers.utils.import_utils`` as usual, then answers its torchvision probe with False."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "transformers.utils.import_utils":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            load(module)
            module.is_torchvision_available = lambda: False  # type: ignore[attr-defined]

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path[:0] = [_InertFinder(), _TransformersWithoutTorchvision()]
