"""Conformance check: do the real SGLang 0.5.23 / vLLM 0.34 accept these command lines?

Run by the conformance env's python (scripts/conformance-env.sh), never by autotune's: it must not
import autotune. Input: JSON on stdin (or a file argument), a list of objects
``{"id": ..., "engine": "sglang" | "vllm", "argv": [...], "gpu": {"memory_mib": 49140, "count": 2}}``;
``argv`` is the launch command as autotune builds it (launcher words are dropped up to
``sglang.launch_server`` / ``autotune_twin`` / ``serve``). Output: JSON, one verdict per item:
``{"id", "engine", "accepted": bool, "stage": "parse" | "resolve" | "config" | null, "error": str | null,
"resolved": {...}}``.

What runs for real:
- SGLang: ``prepare_server_args(argv)`` (its argparse parser) then ``ServerArgs.resolve_once()``, the
  whole resolution pipeline (``sglang/srt/arg_groups/pipeline.py``), against the model folder's
  config.json. GPU queries are stubbed (``_fake_gpu``): CUDA is "available", with the given memory.
- vLLM: ``vllm serve``'s parser (``make_arg_parser``) then the parts of config building that need no
  GPU and no weights: ``SchedulerConfig`` (chunked-prefill rules) from the parsed args, and
  ``SpeculativeConfig``'s own field types and ``_verify_args`` (num_speculative_tokens,
  rejection_sample_method with its synthetic and FLy keys) on the ``--speculative-config`` given: its
  ``__post_init__``, which reads the target's and the draft's model configs, does not run.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import os
import sys
import traceback
import types
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # vLLM picks a platform at import; CPU is the only one here
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


# -- stubs ------------------------------------------------------------------------------------------


class _Absent:
    """A name from a stubbed module: attribute access works (module-level constants), calls fail."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Absent(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name} is a stub in the conformance env")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every ``torchvision.*`` import as an empty package of :class:`_Absent` names.

    Also every ``sgl_kernel.*`` import. Both are GPU-side modules that argument resolution imports but
    never runs:
    - torchvision: PyPI's build does not load beside the CPU torch 2.13.0 ('operator torchvision::nms
      does not exist'); SGLang imports it at module level (sglang/srt/multimodal/internvl_utils.py)
      for image preprocessing;
    - sgl_kernel (sglang-kernel, CUDA kernels): imported by sglang/srt/layers/layernorm.py:102 once
      the stubbed platform says CUDA; resolution loads the module but calls no kernel."""

    roots = frozenset({"torchvision", "sgl_kernel"})

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)

        def absent(attr: str, _name: str = spec.name) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _Absent(f"{_name}.{attr}")

        module.__getattr__ = absent  # type: ignore[method-assign]
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _install_stubs() -> None:
    # transformers must not think torchvision is there (it would import its real submodules).
    import transformers.utils as tu
    import transformers.utils.import_utils as tiu

    for module in (tu, tiu):
        module.is_torchvision_available = lambda: False  # type: ignore[attr-defined]
    sys.meta_path.insert(0, _StubFinder())


class _Props:
    def __init__(self, gpu: dict[str, Any]) -> None:
        self.name = gpu.get("name", "NVIDIA RTX A6000")
        self.total_memory = int(gpu["memory_mib"]) * 2**20
        self.major, self.minor = gpu.get("capability", (8, 6))
        self.multi_processor_count = gpu.get("sms", 84)
        self.L2_cache_size = 6 * 2**20


@contextlib.contextmanager
def _fake_gpu(gpu: dict[str, Any]):
    """CUDA as SGLang's resolution sees it: every loaded sglang module's device queries, and
    torch.cuda's, answer for ``gpu`` (memory in MiB, count, capability). Restored afterwards."""
    import torch

    memory = float(gpu["memory_mib"])
    capability = tuple(gpu.get("capability", (8, 6)))
    answers: dict[str, Any] = {
        "is_cuda": lambda *a, **k: True,
        "is_cuda_alike": lambda *a, **k: True,
        "get_device": lambda *a, **k: "cuda",
        "get_device_memory_capacity": lambda *a, **k: memory,
        "get_nvgpu_memory_capacity": lambda *a, **k: memory,
        "get_device_capability": lambda *a, **k: capability,
        "get_device_sm": lambda *a, **k: capability[0] * 10 + capability[1],
        "get_device_name": lambda *a, **k: gpu.get("name", "NVIDIA RTX A6000"),
        "get_device_count": lambda *a, **k: int(gpu.get("count", 1)),
    }
    saved: list[tuple[Any, str, Any]] = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("sglang") or module is None:
            continue
        for attr, value in answers.items():
            if attr in vars(module):
                saved.append((module, attr, vars(module)[attr]))
                setattr(module, attr, value)
    cuda = {
        "is_available": lambda: True,
        "device_count": lambda: int(gpu.get("count", 1)),
        "get_device_capability": lambda *a, **k: capability,
        "get_device_name": lambda *a, **k: gpu.get("name", "NVIDIA RTX A6000"),
        "get_device_properties": lambda *a, **k: _Props(gpu),
        "current_device": lambda: 0,
        "mem_get_info": lambda *a, **k: (int(memory * 2**20), int(memory * 2**20)),
    }
    for attr, value in cuda.items():
        saved.append((torch.cuda, attr, getattr(torch.cuda, attr)))
        setattr(torch.cuda, attr, value)
    saved.append((torch.version, "cuda", torch.version.cuda))
    torch.version.cuda = "13.0"
    try:
        yield
    finally:
        for module, attr, value in reversed(saved):
            setattr(module, attr, value)


# -- the engines --------------------------------------------------------------------------------------


def _strip_launcher(argv: list[str], markers: tuple[str, ...]) -> list[str]:
    for index, word in enumerate(argv):
        if word in markers:
            rest = argv[index + 1 :]
            # the twin's own options (--personality vllm serve, --twin-profile X) are not the engine's
            while rest and rest[0] in ("--personality", "--twin-profile"):
                rest = rest[2:]
            if rest and rest[0] == "serve":
                rest = rest[1:]
            return rest
    return argv


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _parse_error(stderr: str, code: Any) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"argparse exit {code}"


def check_sglang(argv: list[str], gpu: dict[str, Any]) -> dict[str, Any]:
    import sglang.srt.arg_groups.pipeline  # noqa: F401  (loads the resolution hooks before _fake_gpu patches them)
    from sglang.srt.server_args import prepare_server_args

    args = _strip_launcher(argv, ("sglang.launch_server", "autotune_twin", "serve"))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            server_args = prepare_server_args(args)
    except SystemExit as exc:
        return {"accepted": False, "stage": "parse", "error": _parse_error(err.getvalue(), exc.code)}
    try:
        with _fake_gpu(gpu), contextlib.redirect_stdout(io.StringIO()):
            server_args.resolve_once()
        resolved = server_args.resolved_dict()
    except Exception as exc:  # the real server dies here too: AssertionError, TypeError, ValueError...
        return {
            "accepted": False,
            "stage": "resolve",
            "error": _error_line(exc),
            "where": traceback.extract_tb(exc.__traceback__)[-1].filename.split("site-packages/")[-1]
            + f":{traceback.extract_tb(exc.__traceback__)[-1].lineno}",
        }
    keep = (
        "mem_fraction_static",
        "max_running_requests",
        "chunked_prefill_size",
        "speculative_algorithm",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "mamba_radix_cache_strategy",
        "disable_overlap_schedule",
        "context_length",
    )
    out = {key: resolved.get(key) for key in keep}
    if resolved.get("speculative_adaptive"):
        # The schedule's slots as the server's controller builds them from the config (the hook above
        # read only the union of its steps).
        from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

        config = resolved.get("speculative_adaptive_config")
        try:
            params = AdaptiveSpeculativeParams(initial_steps=resolved["speculative_num_steps"], cfg_path=config)
        except Exception as exc:
            return {"accepted": False, "stage": "config", "error": _error_line(exc)}
        out["speculative_adaptive"] = True
        out["adaptive_slots"] = {bs: params.get_steps_for_batch(bs) for bs in (1, 2, 4, 8, 16, 32)}
    graphs = resolved.get("cuda_graph_config")
    if isinstance(graphs, dict) and isinstance(graphs.get("decode"), dict):
        out["cuda_graph_decode_max_bs"] = graphs["decode"].get("max_bs")
    return {"accepted": True, "stage": None, "error": None, "resolved": _jsonable(out)}


def check_vllm(argv: list[str], gpu: dict[str, Any]) -> dict[str, Any]:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = _strip_launcher(argv, ("serve",))
    if args and not args[0].startswith("-"):
        args = ["--model", args[0], *args[1:]]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            namespace = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(args)
    except SystemExit as exc:
        return {"accepted": False, "stage": "parse", "error": _parse_error(err.getvalue(), exc.code)}
    try:
        engine_args = EngineArgs.from_cli_args(namespace)
        _vllm_scheduler_rules(engine_args)
        _vllm_speculative_rules(engine_args)
        lookup = _vllm_dynamic_sd(engine_args)
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return {
            "accepted": False,
            "stage": "config",
            "error": _error_line(exc),
            "where": where.filename.split("site-packages/")[-1] + f":{where.lineno}",
        }
    resolved = {"dynamic_sd_lookup": lookup} if lookup is not None else {}
    return {"accepted": True, "stage": None, "error": None, "resolved": resolved}


def _vllm_dynamic_sd(engine_args: Any) -> list[int] | None:
    """``num_speculative_tokens_per_batch_size`` through the real scheduler's own table builder (the
    rules it enforces at engine start): batch size -> k, index 0 unused; None without the field."""
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    spec = engine_args.speculative_config or {}
    schedule = spec.get("num_speculative_tokens_per_batch_size")
    if schedule is None:
        return None
    return build_dynamic_sd_schedule_lookup(schedule, engine_args.max_num_seqs, spec["num_speculative_tokens"])


def _vllm_speculative_rules(engine_args: Any) -> None:
    """``SpeculativeConfig``'s checks that need no model: each given key through its field's type (the
    pydantic validation vLLM runs), then ``_verify_args`` on an instance whose other fields hold their
    defaults (``__post_init__``, which loads the draft's config, is skipped)."""
    from pydantic import TypeAdapter
    from vllm.config import SpeculativeConfig

    given = {str(k).replace("-", "_"): v for k, v in (engine_args.speculative_config or {}).items()}
    for key, value in (("method", engine_args.spec_method), ("model", engine_args.spec_model),
                       ("num_speculative_tokens", engine_args.spec_tokens)):  # fmt: skip
        if value is not None:
            given[key] = value
    if not given:
        return
    fields = SpeculativeConfig.__pydantic_fields__
    config = object.__new__(SpeculativeConfig)
    for name, field in fields.items():
        if name in given:
            value = TypeAdapter(field.annotation).validate_python(given[name])
        elif field.default_factory is not None:
            value = field.default_factory()  # type: ignore[call-arg]
        else:
            value = None if field.is_required() else field.default
        object.__setattr__(config, name, value)
    SpeculativeConfig._verify_args(config)


def _vllm_scheduler_rules(engine_args: Any) -> None:
    """vLLM's SchedulerConfig validation with the values the command line gives (a model-free part of
    ``EngineArgs.create_engine_config``): max-num-batched-tokens against max-num-seqs and, without
    chunked prefill, against max-model-len."""
    from vllm.config import SchedulerConfig

    max_model_len = engine_args.max_model_len
    if engine_args.max_num_batched_tokens is None or engine_args.max_num_seqs is None:
        return  # GPU-dependent defaults: nothing to compare without the GPU's table
    if not isinstance(max_model_len, int) or max_model_len <= 0:
        max_model_len = 8192
    kwargs = dict(
        max_num_batched_tokens=engine_args.max_num_batched_tokens,
        max_num_seqs=engine_args.max_num_seqs,
        max_model_len=max_model_len,
        is_encoder_decoder=False,
    )
    if engine_args.enable_chunked_prefill is not None:
        kwargs["enable_chunked_prefill"] = engine_args.enable_chunked_prefill
    SchedulerConfig(**kwargs)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


def main() -> int:
    source = open(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] != "-" else sys.stdin
    items = json.load(source)
    _install_stubs()
    verdicts = []
    for item in items:
        gpu = {"memory_mib": 49140, "count": 2, **item.get("gpu", {})}
        check = check_sglang if item["engine"] == "sglang" else check_vllm
        try:
            verdict = check(list(item["argv"]), gpu)
        except Exception as exc:  # a checker bug, not a verdict
            verdict = {"accepted": None, "stage": "checker", "error": _error_line(exc)}
        verdicts.append({"id": item.get("id"), "engine": item["engine"], **verdict})
    json.dump(verdicts, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
