"""SGLang (``python -m sglang.launch_server`` / ``sglang serve``): flags, launch rules, protocol.

The rules applied in :meth:`SGLangEngine.normalise` are the ones SGLang 0.5.23 applies at launch
(read off its installed package, ``sglang/srt/arg_groups/``); autotune applies them first so equal
effective configs are measured once and configs SGLang would refuse are never launched.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.engines import base
from autotune.engines.base import Engine, InvalidConfig, LaunchPlan, first_rank_search, flag_argv, sse_events
from autotune.engines.failures import CAPTURING, LOADING_WEIGHTS, SERVING, SIZING_POOLS, FailureRules
from autotune.engines.sglang_logs import decode_group, parse_decode_line
from autotune.engines.speculation import ScheduleConfig, ScheduleForm, SpeculationFlags
from autotune.errors import MeasurementError
from autotune.feasibility import MemoryRules
from autotune.headroom_figures import oom_shortfall_bytes
from autotune.measure.suites import Prompt
from autotune.space import FlagValue

if TYPE_CHECKING:
    import httpx

STEPS = "speculative-num-steps"
TOPK = "speculative-eagle-topk"
DRAFT = "speculative-num-draft-tokens"
ALGORITHM = "speculative-algorithm"
KV_DTYPE = "kv-cache-dtype"
DRAFT_MODEL = "speculative-draft-model-path"
DFLASH_BLOCK = "speculative-dflash-block-size"
ADAPTIVE = "speculative-adaptive"
ADAPTIVE_CONFIG = "speculative-adaptive-config"
# speculative/adaptive_spec_params.py (0.5.23) DEFAULT_ADAPTIVE_CONFIG: the union of its slots' steps.
DEFAULT_ADAPTIVE_STEPS = (0, 1, 3, 5, 7)
RADIX_STRATEGY = "mamba-radix-cache-strategy"
CONTEXT = "context-length"
DISABLE_OVERLAP = "disable-overlap-schedule"
TRACK_INTERVAL = "mamba-track-interval"
DEFAULT_TRACK_INTERVAL = 256
# Below 1.0 SGLang accepts draft tokens the target would reject (1.0, the default, is lossless).
LOSSY_THRESHOLDS = ("speculative-accept-threshold-single", "speculative-accept-threshold-acc")
GRAPH_BATCH = "cuda-graph-max-bs-decode"
RUNNING = "max-running-requests"
# arg_groups/memory_hook.py (0.5.23): the default decode graph batch below each GPU size (GiB), at
# TP < 4 and at TP >= 4; 256 and 512 above. A default batch is lowered to the running requests, and
# graphs are captured only up to them, an explicit batch included.
_DEFAULT_GRAPH_BATCH = ((20, 8, 8), (35, 24, 80), (60, 32, 160))
# With speculative decoding and no --max-running-requests, SGLang runs at most 48 requests.
SPEC_DEFAULT_RUNNING = 48


def _default_graph_batch(gpu_total_bytes: float, tp: FlagValue) -> int:
    small_tp = not isinstance(tp, int) or tp < 4
    for below_gib, small, large in _DEFAULT_GRAPH_BATCH:
        if gpu_total_bytes / 2**30 < below_gib:
            return small if small_tp else large
    return 256 if small_tp else 512


# What SGLang 0.5.23 prints on its way up and when it fails (the classifier is
# autotune.engines.failures): an out-of-memory error while the weights load or the pools are sized
# means the fraction left too little; from graph capture on, that it left too little outside.
# A pool-memory death's figures (SGLang's "Not enough memory ..." line; the twin adds the tokens).
_SHORT_FRACTION = re.compile(r"(?:mem_fraction_static|--mem-fraction-static)=(?P<fraction>[0-9.]*[0-9])")
_SHORT_TOKENS = re.compile(r"holds (?P<pool>\d+) tokens, fewer than one context_length=(?P<needed>\d+) request")

FAILURES = FailureRules(
    stages=(
        (r"Load weight begin|[Ll]oading (?:safetensors checkpoint )?shards|, in load_model$", LOADING_WEIGHTS),
        (
            r"Load weight end|Memory pool|KV Cache is allocated|Mamba Cache is allocated"
            r"|, in (?:init_memory_pool|profile_max_num_token)$",
            SIZING_POOLS,
        ),
        (
            r"Capture (?:piecewise )?cuda graph (?:begin|bs)|Capturing batches|, in (?:init_cuda_graphs|capture)$",
            CAPTURING,
        ),
        (
            r"Capture (?:piecewise )?cuda graph end|max_total_num_tokens=|fired up and ready|(?:Prefill|Decode) batch"
            r"|POST /generate|, in (?:event_loop_\w+|run_batch|_wait_and_warmup)$",
            SERVING,
        ),
    ),
    too_low=(
        r"Loaded weights leave no GPU memory for the KV cache",
        r"Not enough memory\. Please try to increase --mem-fraction-static",
        r"Not enough memory to allocate KV cache",  # the wording proposed in sglang#23181
        r"Not enough GPU memory for hybrid \(mamba/linear-attention\) state cache",
        r"Hybrid \(mamba/linear-attention\) state cache is too small to serve any requests",
        r"larger than the profiled value -\d",  # the pool profile came out negative
        # the pool holds less than one request: SGLang cuts the request slots to 0, then asserts
        r"max_running_requests was reduced from the requested \d+ to 0 ",
        r"max_running_request is zero",
    ),
    wrappers=(
        r"Initialization failed\. (?:Please )?see the error messages above",
        r"scheduler is dead|Child process unexpectedly failed|Received sigquit",
    ),
    prefixes=(r"^Capture (?:piecewise )?cuda graph failed:\s*",),
)

_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_LENGTH = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<suffix>Ki|Mi|Gi|Ti|k|M|G|T)?$")


def parse_context_length(value: FlagValue) -> int:
    """SGLang 0.5.23's spelling: ``131072``, SI ``128k`` (x1000, decimals allowed) or IEC ``128Ki``
    (x1024); suffixes are case-sensitive, so ``128K`` is refused, as SGLang's argparse does."""
    if isinstance(value, bool):
        raise InvalidConfig(f"--{CONTEXT} must be a number, not {value!r}")
    if isinstance(value, int):
        return value
    match = _LENGTH.match(str(value).strip())
    if match is None or ("." in match["number"] and match["suffix"] not in _SI):
        raise InvalidConfig(f"--{CONTEXT} {value!r} is not a length (e.g. 131072, 128Ki or 131k)")
    scale = _IEC.get(match["suffix"] or "") or _SI.get(match["suffix"] or "") or 1
    return int(float(match["number"]) * scale)


_GIB = 2**30
_WEIGHTS_LINE = re.compile(r"Load weight end\..*?mem usage=(?P<gb>[\d.]+) GB")
_KV_LINE = re.compile(r"KV Cache is allocated\.(?P<fields>.*)$", re.MULTILINE)
_TOTAL_TOKENS_LINE = re.compile(r"max_total_num_tokens=(?P<tokens>\d+)")
_GRAPH_LINE = re.compile(r"Capture (?:cuda|CUDA) graph end\..*?mem usage=(?P<gb>[\d.]+) GB")
_FREE_LINE = re.compile(r"Load weight begin\. avail mem=(?P<gb>[\d.]+) GB")
_LOADED_LINE = re.compile(r"Load weight end\..*?avail mem=(?P<gb>[\d.]+) GB")
_POOLS_LINE = re.compile(r"Memory pool end\. avail mem=(?P<gb>[\d.]+) GB")
_CAPTURE_LINE = re.compile(r"Capture cuda graph bs \[(?P<sizes>[\d, ]+)\]")
_MAMBA_LINE = re.compile(r"Mamba Cache is allocated\..*?max_mamba_cache_size: (?P<slots>\d+)")
_SIZE = re.compile(r"(?P<key>#tokens|K size|V size|KV size):\s*(?P<value>[\d.]+)\s*(?P<unit>GB|MB)?")


def _kv_figures(line: str) -> tuple[int | None, float | None]:
    """``#tokens`` and the pool size (``K size`` + ``V size``, or one ``KV size``) of a ``KV Cache is
    allocated.`` line, by field: releases add fields (``dtype: torch.bfloat16``) and reorder them."""
    tokens: int | None = None
    gib = 0.0
    sized = False
    for match in _SIZE.finditer(line):
        if match["key"] == "#tokens":
            tokens = int(float(match["value"]))
        else:
            gib += float(match["value"]) / (1024 if match["unit"] == "MB" else 1)
            sized = True
    return tokens, gib * _GIB if sized else None


_LOG_NOISE = frozenset({"enable-metrics", "decode-log-interval", "log-level", "random-seed", "served-model-name"})
# The DFLASH block size equals the draft tokens, so it orders memory the same way.
_SPEC_DEMAND = frozenset({STEPS, TOPK, DRAFT, DFLASH_BLOCK})


def _adaptive_rules(out: dict[str, FlagValue], algorithm: str | None, notes: list[str]) -> None:
    """``--speculative-adaptive`` as SGLang 0.5.23 resolves it (arg_groups/speculative_hook.py:1374-1426),
    applied to ``out`` in place. Raises InvalidConfig for a start step outside the candidates."""
    topk = out.get(TOPK)
    supported = algorithm in ("EAGLE", "EAGLE3", "NEXTN") and topk in (None, 1)
    if not supported:
        # SGLang only warns and serves static steps: the effective config is the static one.
        notes.append(f"--{ADAPTIVE} needs EAGLE/EAGLE3/NEXTN with topk 1; SGLang ignores it here (dropped)")
        out.pop(ADAPTIVE)
        out.pop(ADAPTIVE_CONFIG, None)
        return
    candidates = _adaptive_steps(out.get(ADAPTIVE_CONFIG))
    if candidates is None:  # a config autotune cannot read here: the launch will tell
        if STEPS in out:
            out[TOPK] = 1
        return
    out[TOPK] = 1
    steps = out.setdefault(STEPS, candidates[len(candidates) // 2])
    if steps not in candidates:
        raise InvalidConfig(
            f"--{STEPS} {steps} is not one of the adaptive candidate steps {list(candidates)} "
            f"(a ValueError in SGLang); pass one of those"
        )
    out[DRAFT] = int(steps) + 1


def _adaptive_steps(config: FlagValue | None) -> tuple[int, ...] | None:
    """The union of the adaptive config's candidate steps (SGLang's default without a config);
    None when the file cannot be read here (another host, a typo): the launch reports that."""
    if config is None:
        return DEFAULT_ADAPTIVE_STEPS
    try:
        data = json.loads(Path(str(config)).read_text(encoding="utf-8"))
        steps = {int(s) for key, entry in data.items() if key.isdigit() for s in entry["candidate_steps"]}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return tuple(sorted(steps)) or None


def _given_flags(flags: Mapping[str, FlagValue]) -> dict[str, FlagValue]:
    """The flags as SGLang reads them: false switches and kv-cache-dtype auto dropped, floats rounded, lengths read."""
    out: dict[str, FlagValue] = {}
    for name, value in flags.items():
        if value is False:
            continue
        out[name] = round(value, 6) if isinstance(value, float) else value
    if CONTEXT in out:
        out[CONTEXT] = parse_context_length(out[CONTEXT])
    if out.get(KV_DTYPE) == "auto":  # SGLang's default: the same launch as leaving it unset, one config
        del out[KV_DTYPE]
    return out


def _dflash_rules(out: dict[str, FlagValue], notes: list[str]) -> None:
    """DFLASH's rules, applied to ``out`` in place: a draft model, steps and topk 1, block size = draft tokens."""
    if DRAFT_MODEL not in out:
        raise InvalidConfig("DFLASH needs --speculative-draft-model-path")
    for forced in (STEPS, TOPK):
        if out.get(forced, 1) != 1:
            notes.append(f"DFLASH forces --{forced} 1 (was {out[forced]})")
        out[forced] = 1
    if DFLASH_BLOCK in out and DRAFT in out and out[DFLASH_BLOCK] != out[DRAFT]:
        raise InvalidConfig(f"--{DFLASH_BLOCK} must equal --{DRAFT}")
    if DRAFT not in out and DFLASH_BLOCK in out:
        out[DRAFT] = out[DFLASH_BLOCK]
    if DRAFT not in out:  # SGLang reads the block size from the drafter's config (else 16)
        notes.append("DFLASH block size: the drafter's own (its config.json, else 16)")
        for forced in (STEPS, TOPK):  # forced to 1 either way; alone they would need draft tokens
            del out[forced]


def _draft_tree_rules(out: dict[str, FlagValue], algorithm: str | None, notes: list[str]) -> None:
    """Steps, topk and draft tokens, in place: topk 1 means steps + 1 draft tokens; all three or none."""
    if algorithm not in (None, "DFLASH") and out.get(TOPK) == 1 and STEPS in out:
        implied = int(out[STEPS]) + 1
        if DRAFT in out and out[DRAFT] != implied:
            notes.append(f"topk 1: --{DRAFT} {out[DRAFT]} becomes steps + 1 = {implied}")
        out[DRAFT] = implied
    given = [f for f in (STEPS, TOPK, DRAFT) if f in out]
    if given and len(given) < 3:
        missing = ", ".join(f"--{f}" for f in (STEPS, TOPK, DRAFT) if f not in out)
        raise InvalidConfig(f"speculative steps, topk and draft tokens go together; missing {missing}")
    if given and algorithm is None:
        raise InvalidConfig(f"speculative flags given without --{ALGORITHM}")


def _mamba_rules(out: Mapping[str, FlagValue], algorithm: str | None) -> None:
    """Refuse what the mamba radix-cache strategy asserts: overlap off for no_buffer, draft tokens <= track interval."""
    # sglang/srt/arg_groups/mamba_hook.py (0.5.23): no_buffer asserts the overlap scheduler is off
    # (:158); the extra_buffer strategies (and auto, which becomes extra_buffer on Qwen3.5/3.6)
    # assert mamba-track-interval >= draft tokens (:133; the interval defaults to 256).
    strategy = str(out.get(RADIX_STRATEGY, "auto"))
    if strategy == "no_buffer" and out.get(DISABLE_OVERLAP) is not True:
        raise InvalidConfig(f"--{RADIX_STRATEGY} no_buffer needs --{DISABLE_OVERLAP} (an AssertionError in SGLang)")
    if algorithm is not None and strategy in ("auto", "extra_buffer", "extra_buffer_lazy"):
        interval = int(out.get(TRACK_INTERVAL, DEFAULT_TRACK_INTERVAL))
        if int(out.get(DRAFT, 0)) > interval:
            raise InvalidConfig(
                f"--{RADIX_STRATEGY} {strategy} allows at most {interval} draft tokens "
                f"(--{TRACK_INTERVAL} {interval}; got {out[DRAFT]})"
            )


# speculative/adaptive_spec_params.py (0.5.23): adaptive runs EAGLE and EAGLE3 (NEXTN becomes EAGLE).
RUNS_ADAPTIVE = ("EAGLE", "EAGLE3", "NEXTN")


class AdaptiveSchedule(ScheduleForm):
    """SGLang's ``--speculative-adaptive``: a config file with one slot per level and ONE candidate
    step each (the depth measured best at that load), so SGLang's EMA controller has nothing to move:
    the schedule is the measured one, not a guess of the controller's. SGLang routes a batch to the
    largest slot at or below its size."""

    what = "adaptive"
    config_label = "adaptive config: "
    per_tier = frozenset({STEPS, TOPK, DRAFT, ADAPTIVE, ADAPTIVE_CONFIG})
    config_flag = ADAPTIVE_CONFIG
    running_flag = "max-running-requests"  # as the server resolved it: what the memory left room for

    def tier_depth(self, flags: Mapping[str, FlagValue]) -> int | str:
        """Adaptive runs EAGLE/NEXTN drafts with topk 1 only; a run without drafting is the 0-step tier."""
        algorithm = flags.get(ALGORITHM)
        if algorithm is None:
            return 0
        if algorithm not in RUNS_ADAPTIVE:
            return f"{algorithm} (adaptive runs {'/'.join(RUNS_ADAPTIVE)} only)"
        if flags.get(TOPK, 1) != 1:
            return f"topk {flags.get(TOPK)} (adaptive runs topk 1 only)"
        if flags.get(ADAPTIVE) is True:
            return "adaptive itself (its depth moves at run time)"
        steps = flags.get(STEPS)
        return steps if isinstance(steps, int) and not isinstance(steps, bool) else "no explicit steps"

    def drafts(self, shared: Mapping[str, FlagValue]) -> bool:
        return bool(shared.get(ALGORITHM))

    def config(self, slots: Mapping[int, int]) -> ScheduleConfig:
        return {str(key): {"candidate_steps": [steps]} for key, steps in slots.items()}

    def launch_flags(
        self, shared: Mapping[str, FlagValue], slots: Mapping[int, int], *, start: int, config_path: str
    ) -> dict[str, FlagValue]:
        """Topk 1 and draft tokens = steps + 1, as SGLang resolves them under adaptive; the start step
        is one of the candidates."""
        return {**shared, ADAPTIVE: True, ADAPTIVE_CONFIG: config_path, STEPS: start, TOPK: 1, DRAFT: start + 1}

    def config_text(self, shared: Mapping[str, FlagValue], slots: Mapping[int, int]) -> str:
        return json.dumps(self.config(slots))


class SGLangEngine(Engine):
    name = "sglang"
    speculation = SpeculationFlags(
        method=ALGORITHM, depth=STEPS, draft_model=DRAFT_MODEL, draft_tokens=DRAFT, width=TOPK
    )
    schedule_form = AdaptiveSchedule()
    verdict_memory_flag = "mem-fraction-static"
    # In SGLang 0.5.23 these size the KV/mamba pools, the request pool, prefill chunks and the
    # CUDA-graph batches; one stream decodes alike under any of them that still admits it (a
    # prompt longer than the context is a failure, not a rate: context-length is not among them).
    memory_sizing_flags = {
        "mem-fraction-static": 0,
        "max-running-requests": 1,
        "cuda-graph-max-bs-decode": 1,
        "cuda-graph-max-bs-prefill": 0,
        "chunked-prefill-size": -1,
        "mamba-full-memory-ratio": 0,
        "max-mamba-cache-size": 1,
    }
    # SGLang's memory split: the pool (fraction x free - weights) must hold KV for the context and
    # the mamba state of the running requests (more with more draft tokens); the headroom
    # ((1 - fraction) x free) must hold activations and CUDA graphs (batch x draft tokens).
    memory_rules = MemoryRules(
        fraction_flag="mem-fraction-static",
        pool_demand=_SPEC_DEMAND | {CONTEXT, "max-running-requests", "max-mamba-cache-size"},
        pool_irrelevant=_LOG_NOISE | {"cuda-graph-max-bs-decode", "cuda-graph-max-bs-prefill"},
        # auto is the model's dtype (bf16 for most checkpoints): never smaller than fp8.
        pool_scale={
            KV_DTYPE: {
                "auto": 2.0,
                "bf16": 2.0,
                "bfloat16": 2.0,
                "fp16": 2.0,
                "float16": 2.0,
                "fp8_e4m3": 1.0,
                "fp8_e5m2": 1.0,
                "fp4_e2m1": 0.5,
            }
        },
        headroom_demand=_SPEC_DEMAND | {"cuda-graph-max-bs-decode", "max-running-requests", "chunked-prefill-size"},
        headroom_irrelevant=_LOG_NOISE | {"mamba-full-memory-ratio", "max-mamba-cache-size", CONTEXT},
        graph_batch_flag="cuda-graph-max-bs-decode",
        graph_batch_cap_flag="max-running-requests",
        graph_width_flag=DRAFT,
        # With the graph batch and draft tokens known, the steps, the tree width and the running
        # requests no longer change what the graphs hold.
        graph_ignored=_LOG_NOISE
        | {
            "mamba-full-memory-ratio",
            "max-mamba-cache-size",
            CONTEXT,
            STEPS,
            TOPK,
            "max-running-requests",
            "cuda-graph-max-bs-decode",
            DRAFT,
            DFLASH_BLOCK,
        },
        # Outside the graphs, run-time memory is mostly the prefill chunk's activations.
        activation_demand=frozenset({"chunked-prefill-size", "max-prefill-tokens"}),
        headroom_added=frozenset({ALGORITHM, DRAFT_MODEL}),
        weights_flags=frozenset({ALGORITHM, DRAFT_MODEL, "quantization", "dtype", "load-format"}),
        # The KV pool is fraction x free - weights, over a cell of the target's and drafter's KV layers;
        # one request needs its context. The draft's shape, the running requests and the graphs size
        # other things (the headroom, the request slots).
        per_token_neutral=_SPEC_DEMAND | {RUNNING, GRAPH_BATCH, "cuda-graph-max-bs-prefill", "chunked-prefill-size"},
        per_token_coupled=frozenset({"max-mamba-cache-size"}),
        context_flag=CONTEXT,
        kv_share_flag="mamba-full-memory-ratio",
        kv_share_default=0.9,
        # A hybrid's state cache is the ratio's share of the pool over the state a request needs, with the
        # speculative intermediate state per draft token and running request: the draft's steps and tree
        # width matter only through the draft tokens; the context, graphs and backend not at all.
        state_short=(
            r"Not enough GPU memory for hybrid \(mamba/linear-attention\) state cache",
            r"Hybrid \(mamba/linear-attention\) state cache is too small to serve any requests",
        ),
        state_demand=frozenset({DRAFT, DFLASH_BLOCK, RUNNING}),
        state_kept=frozenset({"max-mamba-cache-size", RADIX_STRATEGY}),
    )
    renamed_flags = {
        "mamba-scheduler-strategy": RADIX_STRATEGY,
        "cuda-graph-max-bs": "cuda-graph-max-bs-decode",
    }
    reserved_flags = frozenset({"model-path", "model", "host", "port"})
    failure_rules = FAILURES
    metric_names = base.MetricNames(
        generated="sglang:generation_tokens_total", accept_length="sglang:spec_accept_length"
    )

    def normalise(self, flags: Mapping[str, FlagValue]) -> LaunchPlan:
        """SGLang's launch-time rules (0.5.23):

        - steps, topk and draft tokens are given all together or not at all;
        - topk == 1 => draft tokens = steps + 1 (SGLang rewrites it silently; autotune fills it in);
        - DFLASH needs a draft model, forces steps and topk to 1, and its block size equals the
          draft tokens (neither given: the drafter's config says, else 16);
        - ``MTP`` parses but fails at launch (NEXTN is the name for built-in MTP heads);
        - ``--speculative-adaptive`` runs only EAGLE/EAGLE3/NEXTN with topk 1 (else SGLang warns and
          serves static steps, so autotune drops it); topk defaults to 1, steps to the middle of the
          config's candidate steps and must be one of them, draft tokens = steps + 1;
        - mamba strategy ``no_buffer`` needs ``--disable-overlap-schedule``; under ``extra_buffer``
          (and ``auto``, which becomes it on Qwen3.5/3.6) draft tokens <= ``--mamba-track-interval``;
        - context lengths with SI/IEC suffixes (``128Ki``) are read as numbers.
        """
        out = _given_flags(flags)
        notes: list[str] = []
        algorithm = str(out[ALGORITHM]).upper() if ALGORITHM in out else None
        if algorithm == "MTP":
            raise InvalidConfig("--speculative-algorithm MTP fails at launch; use NEXTN for built-in MTP heads")
        if out.get(ADAPTIVE) is True:
            _adaptive_rules(out, algorithm, notes)
        if algorithm == "DFLASH":
            _dflash_rules(out, notes)
        _draft_tree_rules(out, algorithm, notes)
        _mamba_rules(out, algorithm)
        return LaunchPlan(engine=self.name, flags=out, notes=notes)

    def draft_reads(self, flags: Mapping[str, FlagValue]) -> base.DraftReads | None:
        """A separate draft model (EAGLE, EAGLE3, DFLASH) runs once per draft step; NEXTN's heads live
        in the target's weights (already counted)."""
        if DRAFT_MODEL not in flags:
            return None
        return base.DraftReads(model=str(flags[DRAFT_MODEL]), passes_per_verify=float(flags.get(STEPS, 1)))

    def pool_shortfall(self, reason: str) -> base.PoolShortfall | None:
        """SGLang prints the fraction it sized the pool at (its own when none was given); the twin also
        prints the tokens the pool held against one request's."""
        fraction = _SHORT_FRACTION.search(reason)
        if fraction is None:
            return None
        tokens = _SHORT_TOKENS.search(reason)
        return base.PoolShortfall(
            fraction=float(fraction["fraction"]),
            pool_tokens=int(tokens["pool"]) if tokens else None,
            needed_tokens=int(tokens["needed"]) if tokens else None,
        )

    def graph_tokens_captured(self, flags: Mapping[str, FlagValue], *, gpu_total_bytes: float | None) -> float | None:
        """The decode graphs' batch (SGLang's default by the GPU's memory and the TP size when unset),
        capped by the running requests (48 with speculation when unset), times the draft tokens; unknown
        under adaptive speculation (a set of graphs per step tier)."""
        if flags.get("disable-cuda-graph") is True:
            return 0.0
        if flags.get(ADAPTIVE) is True:
            return None
        batch = flags.get(GRAPH_BATCH)
        if not isinstance(batch, int) or isinstance(batch, bool):
            if batch is not None or gpu_total_bytes is None:
                return None
            batch = _default_graph_batch(gpu_total_bytes, flags.get("tp-size", 1))
        running = flags.get(RUNNING, SPEC_DEFAULT_RUNNING if ALGORITHM in flags else None)
        if isinstance(running, int) and not isinstance(running, bool):
            batch = min(batch, running)
        return batch * self.verify_tokens(flags)

    def verify_tokens(self, flags: Mapping[str, FlagValue]) -> float:
        """The draft tokens a verify pass checks (1 without speculation)."""
        value = flags.get(DRAFT)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 1.0

    def calibration_flags(self, flags: Mapping[str, FlagValue]) -> dict[str, Any]:
        """Every speculative flag (they all start ``speculative-``), as launched."""
        return {name: base.as_number(value) for name, value in flags.items() if name.startswith("speculative-")}

    def lossy_speculation(self, flags: Mapping[str, FlagValue]) -> str | None:
        """An acceptance threshold below 1.0: a draft token is accepted at a probability the target
        model would not give it."""
        for name in LOSSY_THRESHOLDS:
            value = base.as_number(flags.get(name, 1.0))
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 1.0:
                return f"{name} {value} below 1.0 changes the model's outputs"
        return None

    def build_argv(self, launcher: list[str], *, model: str, plan: LaunchPlan, host: str, port: int) -> list[str]:
        # /metrics feeds the cross-check of the client's numbers; it costs nothing measurable.
        metrics = [] if "enable-metrics" in plan.flags else ["--enable-metrics"]
        return [*launcher, "--model-path", model, "--host", host, "--port", str(port), *flag_argv(plan.flags), *metrics]

    def effective_config(self, client: httpx.Client, base_url: str, plan: LaunchPlan) -> base.EffectiveConfig:
        import httpx  # here, not at import: reading a study loads the engines for their models only

        try:
            info = client.get(f"{base_url}/server_info", timeout=30.0).raise_for_status().json()
        except (httpx.HTTPError, ValueError) as exc:
            raise MeasurementError(f"cannot read the effective config from /server_info: {exc}") from None
        wanted = list(plan.flags) + [STEPS, TOPK, DRAFT, "mem-fraction-static", "max-running-requests", CONTEXT]
        values: dict[str, FlagValue | None] = {}
        for flag in dict.fromkeys(wanted):
            key = flag.replace("-", "_")
            if key in info and (info[key] is None or isinstance(info[key], (str, int, float, bool))):
                values[flag] = info[key]
        version = info.get("version")
        return base.EffectiveConfig(version=str(version) if version is not None else None, values=values)

    def memory_facts(self, log_text: str) -> base.MemoryFacts | None:
        """The start-up memory lines of the first rank; any one of them is worth keeping (a log may stop
        before the KV line, or come from a release whose ``Load weight end`` has no ``mem usage``:
        then the weights are the drop in ``avail mem`` from ``Load weight begin`` to its end)."""
        weights, kv, graph, total, free, loaded, pools, capture, mamba = (
            first_rank_search(p, log_text)
            for p in (
                _WEIGHTS_LINE,
                _KV_LINE,
                _GRAPH_LINE,
                _TOTAL_TOKENS_LINE,
                _FREE_LINE,
                _LOADED_LINE,
                _POOLS_LINE,
                _CAPTURE_LINE,
                _MAMBA_LINE,
            )
        )
        oom = oom_shortfall_bytes(log_text)
        if all(m is None for m in (weights, kv, graph, total, free, loaded, pools, oom)):
            return None
        sizes = [int(size) for size in capture["sizes"].split(",") if size.strip()] if capture else []
        kv_tokens, kv_bytes = _kv_figures(kv["fields"]) if kv else (None, None)
        weights_gb = float(weights["gb"]) if weights else None
        if weights_gb is None and free and loaded:
            weights_gb = float(free["gb"]) - float(loaded["gb"])
        return base.MemoryFacts(
            weights_bytes=weights_gb * _GIB if weights_gb is not None else None,
            kv_pool_bytes=kv_bytes,
            kv_tokens=kv_tokens if kv_tokens is not None else int(total["tokens"]) if total else None,
            graph_bytes=float(graph["gb"]) * _GIB if graph else None,
            free_at_start_bytes=float(free["gb"]) * _GIB if free else None,
            avail_after_pools_bytes=float(pools["gb"]) * _GIB if pools else None,
            graph_batch=max(sizes) if sizes and graph else None,
            state_slots=int(mamba["slots"]) if mamba else None,
            oom_shortfall_bytes=oom,
        )

    async def reset_stats(self, client: httpx.AsyncClient, base_url: str) -> None:
        response = await client.post(f"{base_url}/flush_cache")
        # SGLang refuses the flush (400) while any request runs or waits, as on a server that others
        # use (bench --url): nothing is reset then, and the measurement goes on; the figures read
        # (log lines, metric counter deltas) cover the measured window either way.
        if response.status_code != 400:  # Bad Request
            response.raise_for_status()

    def log_figures(self, log_window: str) -> base.LogFigures:
        """``Decode batch`` lines with running requests; every rank of a data-parallel group prints
        the same step, so per group (``DP1``) only its first rank's lines count, and the groups,
        which decode side by side, are summed by :class:`base.LogFigures`."""
        lines = [p for p in map(parse_decode_line, log_window.splitlines()) if p is not None and p.running_req > 0]
        first: dict[str, tuple[int, ...]] = {}
        for line in lines:
            group, place = decode_group(line.rank)
            first[group] = min(first.get(group, place), place)
        groups: dict[str, list[float]] = {}
        accepts: list[float] = []
        for line in lines:
            group, place = decode_group(line.rank)
            if place == first[group]:
                groups.setdefault(group, []).append(line.gen_throughput)
                if line.accept_len is not None:
                    accepts.append(line.accept_len)
        return base.LogFigures(gen_tok_s=groups, accept_lengths=accepts)

    async def stream_generate(
        self, client: httpx.AsyncClient, base_url: str, prompt: Prompt, *, max_tokens: int, ignore_eos: bool
    ) -> AsyncIterator[base.StreamChunk]:
        sampling = {"max_new_tokens": max_tokens, "temperature": prompt.temperature, "ignore_eos": ignore_eos}
        body = {"text": prompt.text, "sampling_params": sampling, "stream": True}
        async for event in sse_events(client, f"{base_url}/generate", server="SGLang", body=body):
            meta = event.get("meta_info", {})
            finish = meta.get("finish_reason")
            accept = meta.get("spec_accept_length")
            # With --enable-metrics the last event carries the request's own rate, timed from the
            # scheduler's first token: a loaded host that stalls the HTTP process flushes the whole answer
            # at once, which no client can time, while this figure still holds.
            rate = meta.get("decode_throughput") if finish is not None else None
            yield base.StreamChunk(
                completion_tokens=int(meta.get("completion_tokens", 0)),
                prompt_tokens=meta.get("prompt_tokens"),
                finished=finish is not None,
                accept_length=float(accept) if accept is not None else None,
                finish_reason=finish.get("type") if isinstance(finish, dict) else finish,
                server_decode_tok_s=float(rate) if isinstance(rate, (int, float)) and rate > 0 else None,
            )
