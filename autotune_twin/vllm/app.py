"""The vLLM personality: ``python -m autotune_twin --personality vllm serve MODEL [vLLM 0.33 flags]``.

One simulated ``vllm serve`` from argv to exit, in vLLM's stages and log format
(``(APIServer pid=N) INFO MM-DD HH:MM:SS [file.py:line] message``):

1. argparse (instant; exit 2 with vLLM's usage);
2. config build (a tenth of the load time): a refused configuration ends in a traceback and exit 1;
3. engine start: the requested memory must be free, weights load (``Model loading took``), the
   profile run sizes the KV cache (``Available KV cache memory``, ``GPU KV cache size``), CUDA
   graphs are captured (``Graph capturing finished``), the sampler warms up; a failure here is
   logged by ``EngineCore`` and ends in ``RuntimeError: Engine core initialization failed``;
4. serving: the port (bound at start) listens only now, after uvicorn's
   ``Application startup complete.``; every ``--twin-log-interval`` seconds while busy the
   ``Engine 000: Avg prompt throughput ...`` and ``SpecDecoding metrics: ...`` lines.

SIGTERM/SIGINT stop it promptly with exit 0. Everything it prints is a simulation; its first line
says so.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import threading
import time
import traceback

from autotune_twin.cli import TwinOptions, prepare
from autotune_twin.faults import Fault, diverges
from autotune_twin.gpu_state import Publisher, visible_devices
from autotune_twin.launch import LaunchError
from autotune_twin.lifecycle import Lifecycle
from autotune_twin.memory import MemoryFailure
from autotune_twin.vllm._flags import VLLM_VERSION
from autotune_twin.vllm.config import (
    KvPlan,
    VllmConfig,
    check_free_memory,
    check_sampler,
    profile_run,
    resolve_config,
    size_kv,
)
from autotune_twin.vllm.flags import PROG, build_parser, parse_args
from autotune_twin.vllm.scheduler import Snapshot, VllmScheduler
from autotune_twin.vllm.server import VllmState, start_http
from autotune_twin.web import TwinHTTPServer
from passmodel.physics import GIB
from passmodel.profile import TwinProfile

# Shares of the simulated load time: config build, weights, profile run, graph capture + warm-up.
_CONFIG_SHARE, _WEIGHT_SHARE, _PROFILE_SHARE = 0.1, 0.5, 0.1
_LOGO = (
    "",
    "       █     █     █▄   ▄█",
    f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {VLLM_VERSION}",
    "  █▄█▀ █     █     █     █  model   {model}",
    "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
    "",
)


class VllmLog:
    """vLLM's log lines on stderr, flushed; every line of a multi-line message carries the prefix."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()

    def write(self, process: str, level: str, where: str, message: str) -> None:
        prefix = f"({process} pid={self.pid}) {level} {time.strftime('%m-%d %H:%M:%S')} [{where}] "
        self._emit("".join(prefix + line + "\n" for line in message.splitlines() or [""]))

    def raw(self, process: str, text: str) -> None:
        """Unformatted output of a process (a traceback, uvicorn's own lines)."""
        self._emit("".join(f"({process} pid={self.pid}) {line}\n" for line in text.splitlines()))

    def _emit(self, text: str) -> None:
        with self.lock:
            sys.stderr.write(text)
            sys.stderr.flush()


def configure_logging() -> None:
    """The shared twin code logs through ``autotune_twin``: give it the APIServer's format."""
    formatter = logging.Formatter(
        "(APIServer pid=%(process)d) %(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s",
        datefmt="%m-%d %H:%M:%S",
    )
    for name in ("autotune_twin", "autotune_twin.main"):
        logger = logging.getLogger(name)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(formatter)
        logger.handlers[:] = [handler]
        logger.setLevel(logging.INFO)
        logger.propagate = False


def _traceback(exc_type: str, message: str) -> str:
    """A traceback through the twin's frames (file, line, function; no source text) ending the way
    vLLM's does (``exc_type: message``)."""
    frames = "".join(
        f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n'
        for frame in traceback.extract_stack(limit=4)[:-1]
    )
    return f"Traceback (most recent call last):\n{frames}{exc_type}: {message}"


class VllmApp(Lifecycle):
    """Startup sequence and lifetime of one simulated ``vllm serve``."""

    state: VllmState | None

    def __init__(self, *, args: argparse.Namespace, profile: TwinProfile, twin: TwinOptions, fault: Fault) -> None:
        super().__init__()
        self.args = args
        self.profile = profile
        self.twin = twin
        self.fault = fault
        load = twin.load_seconds if twin.load_seconds is not None else profile.timing.load_seconds
        self.load_seconds = max(load, 0.0)
        self.log = VllmLog()
        self.gpus: Publisher | None = None

    def info(self, process: str, where: str, message: str) -> None:
        self.log.write(process, "INFO", where, message)

    # -- stages ----------------------------------------------------------------------------------

    def run(self) -> int:
        self.handle_signals()
        args, profile = self.args, self.profile
        self.info(
            "APIServer",
            "startup.py:30",
            f"autotune vLLM twin (simulation, not real vLLM): profile {profile.name}, {profile.gpus.count}x "
            f"{profile.gpus.name} (simulated), model {profile.model.name}",
        )
        for line in _LOGO:
            self.info("APIServer", "startup.py:38", line.format(model=args.model))
        self.info("APIServer", "startup.py:96", f"non-default args: {self._non_default_args()}")
        if args.moved_model:
            self.log.write(
                "APIServer",
                "WARNING",
                "argparse_utils.py:330",
                "With `vllm serve`, you should provide the model as a positional argument or in a config file "
                "instead of via the `--model` option. The `--model` option will be removed in a future version.",
            )
        host, port = args.host or "0.0.0.0", args.port
        try:
            httpd = start_http(host, port, log_http=args.uvicorn_log_level in ("info", "debug", "trace"))
        except OSError as err:
            self.log.raw("APIServer", _traceback("OSError", f"[Errno {err.errno}] {err.strerror}"))
            return 1
        try:
            return self._start(httpd, host, port)
        finally:
            if self.state is not None:  # serving: stop the loop before closing the socket
                self.state.stopping()
                httpd.shutdown()
            httpd.server_close()
            if self.gpus is not None:
                self.gpus.release()

    def _start(self, httpd: TwinHTTPServer, host: str, port: int) -> int:
        if not self._wait(self.load_seconds * _CONFIG_SHARE):
            return 0
        try:
            vc = resolve_config(self.args, self.profile)
        except LaunchError as err:
            self.log.raw("APIServer", _traceback(err.exc_type, err.message))
            return 1
        for note in vc.notes:
            where = "speculative.py:1256" if "deprecated" in note else "interface.py:580"
            self.log.write("APIServer", "WARNING" if "deprecated" in note else "INFO", where, note)
        self.info(
            "EngineCore",
            "core.py:140",
            f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: {self._config_text(vc)}",
        )
        if self.fault.active:
            self.log.write("EngineCore", "WARNING", "core.py:141", f"twin fault injected: {self.fault.kind}")
        started = time.monotonic()
        engine = self._engine(vc)
        if engine is None:
            return 0 if self.stop_event.is_set() else 1
        vc, kv = engine
        self.info(
            "EngineCore",
            "core.py:285",
            f"init engine (profile, create kv cache, warmup model) took {time.monotonic() - started:.2f} seconds",
        )
        scheduler = VllmScheduler(
            profile=self.profile,
            vc=vc,
            kv=kv,
            seed=self.twin.seed,
            drift=self.twin.drift,
            diverges=diverges(self.fault, vc.cfg.spec),
        )
        scheduler.start()
        try:
            if self.fault.kind == "never-ready":
                self.stop_event.wait()
                return 0
            shown = "localhost" if host == "0.0.0.0" else host
            self.info("APIServer", "entry.py:139", f"Starting vLLM server on http://{shown}:{port}")
            for route, methods in (("/health", "GET"), ("/metrics", "GET"), ("/v1/models", "GET"), ("/version", "GET"),
                                   ("/v1/chat/completions", "POST"), ("/v1/completions", "POST")):  # fmt: skip
                self.info("APIServer", "launcher.py:197", f"Route: {route}, Methods: {methods}")
            for line in (f"Started server process [{os.getpid()}]", "Waiting for application startup.",
                         "Application startup complete."):  # fmt: skip
                self.log.raw("APIServer", f"INFO:     {line}")
            state = self.state = VllmState(
                args=self.args, profile=self.profile, vc=vc, kv=kv, scheduler=scheduler, fault=self.fault
            )
            scheduler.mark_ready()
            httpd.activate(state)  # after the line, so a connection means the log says ready too
            if vc.log_stats:
                threading.Thread(target=self._stats_loop, args=(scheduler,), name="twin-stats", daemon=True).start()
            self.stop_event.wait()
            self.log.raw("APIServer", "INFO:     Shutting down")
            return 0
        finally:
            scheduler.stop()

    def _engine(self, vc: VllmConfig) -> tuple[VllmConfig, KvPlan] | None:
        """Engine start: memory checks, weights, profile run, KV cache, graphs, sampler warm-up."""
        profile, tp = self.profile, vc.cfg.tp_size
        if self.fault.kind == "exit-on-start":
            self._wait(self.load_seconds / 2)
            return self._engine_failed("RuntimeError", "NCCL error: unhandled system error (twin fault)")
        try:
            check_free_memory(profile, vc)
        except MemoryFailure as failure:
            return self._engine_failed(failure.exc_type, failure.message)
        for rank in range(tp):
            self.info(f"Worker_TP{rank}", "gpu_model_runner.py:5040", f"Starting to load model {vc.model}...")
        loading = time.monotonic()
        self.gpus = Publisher(visible_devices(profile.gpus.count, tp))
        self.gpus.hold(profile.gpus.runtime_reserved_bytes)
        if not self._wait(self.load_seconds * _WEIGHT_SHARE):
            return None
        try:
            run = profile_run(profile, vc)
        except MemoryFailure as failure:
            return self._engine_failed(failure.exc_type, failure.message)
        self.gpus.hold(profile.gpus.runtime_reserved_bytes + run.weight_bytes)
        for rank in range(tp):
            self.info(
                f"Worker_TP{rank}",
                "gpu_model_runner.py:5089",
                f"Model loading took {run.weight_bytes / GIB:.2f} GiB memory and "
                f"{time.monotonic() - loading:.6f} seconds",
            )
        if not self._wait(self.load_seconds * _PROFILE_SHARE):
            return None
        for rank in range(tp):
            self.info(
                f"Worker_TP{rank}",
                "gpu_worker.py:773",
                f"Available KV cache memory: {run.available_kv_bytes / GIB:.2f} GiB",
            )
        try:
            kv = size_kv(profile, vc, run)
        except MemoryFailure as failure:
            return self._engine_failed(failure.exc_type, failure.message)
        self.gpus.hold(run.requested_bytes)  # vLLM fills what it asked for with the KV cache
        if kv.auto_fit:
            self.info(
                "EngineCore",
                "kv_cache_planning.py:1396",
                f"Auto-fit max_model_len: reduced from {profile.model.max_context_length} to {kv.max_model_len} "
                f"to fit in available GPU memory ({kv.available_bytes / GIB:.2f} GiB GPU)"
                if kv.max_model_len < profile.model.max_context_length
                else f"Auto-fit max_model_len: full model context length {kv.max_model_len} fits in available "
                f"GPU memory ({kv.available_bytes / GIB:.2f} GiB GPU)",
            )
        vc = vc.with_context(kv.max_model_len)
        self.info(
            "EngineCore",
            "kv_cache_utils.py:1149",
            f"GPU KV cache size: {kv.kv_tokens:,} tokens, Maximum concurrency for {kv.max_model_len:,} tokens per "
            f"request: {kv.max_concurrency:.2f}x",
        )
        capture_started = time.monotonic()
        if not self._wait(self.load_seconds * (1 - _CONFIG_SHARE - _WEIGHT_SHARE - _PROFILE_SHARE)):
            return None
        if vc.cuda_graphs:
            for rank in range(tp):
                self.info(
                    f"Worker_TP{rank}",
                    "gpu_model_runner.py:6517",
                    f"Graph capturing finished in {math.ceil(time.monotonic() - capture_started):.0f} secs, "
                    f"took {run.graph_bytes / GIB:.2f} GiB",
                )
        try:
            check_sampler(profile, vc, run)
        except MemoryFailure as failure:
            return self._engine_failed(failure.exc_type, failure.message)
        return vc, kv

    def _engine_failed(self, exc_type: str, message: str) -> tuple[VllmConfig, KvPlan] | None:
        """Log an engine-start failure as vLLM does; None (no engine)."""
        self.log.write(
            "EngineCore", "ERROR", "core.py:1584", "EngineCore failed to start.\n" + _traceback(exc_type, message)
        )
        self.log.raw(
            "APIServer",
            _traceback(
                "RuntimeError",
                "Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}",
            ),
        )
        return None

    # -- periodic stats ----------------------------------------------------------------------------

    def _stats_loop(self, scheduler: VllmScheduler) -> None:
        """vLLM's LoggingStatLogger: a line per interval while busy (and one after), none when idle."""
        previous = scheduler.snapshot()
        last_prompt = last_gen = 0.0
        while not self.stop_event.wait(self.twin.log_interval_s):
            current = scheduler.snapshot()
            elapsed = max(current.at - previous.at, 1e-9)
            prompt = (current.prompt_tokens - previous.prompt_tokens) / elapsed
            gen = (current.generation_tokens - previous.generation_tokens) / elapsed
            idle = not any((prompt, gen, last_prompt, last_gen))
            last_prompt, last_gen = prompt, gen
            if not idle:
                self.info("APIServer", "loggers.py:283", self._engine_line(current, prompt, gen))
                spec = self._spec_line(previous, current, elapsed)
                if spec is not None:
                    self.info("APIServer", "metrics.py:121", spec)
            previous = current

    def _engine_line(self, snap: Snapshot, prompt: float, gen: float) -> str:
        parts = [
            f"Engine 000: Avg prompt throughput: {prompt:.1f} tokens/s",
            f"Avg generation throughput: {gen:.1f} tokens/s",
            f"Running: {snap.running} reqs",
            f"Waiting: {snap.waiting} reqs",
            f"GPU KV cache usage: {snap.kv_usage * 100:.1f}%",
        ]
        if snap.prefix_queries:
            parts.append(f"Prefix cache hit rate: {snap.prefix_hits / snap.prefix_queries * 100:.1f}%")
        return ", ".join(parts)

    @staticmethod
    def _spec_line(before: Snapshot, after: Snapshot, elapsed: float) -> str | None:
        drafts = after.drafts - before.drafts
        if drafts <= 0:
            return None
        drafted = after.draft_tokens - before.draft_tokens
        accepted = after.accepted_tokens - before.accepted_tokens
        per_pos = [(a - b) / drafts for a, b in zip(after.accepted_per_pos, before.accepted_per_pos, strict=True)]
        return (
            f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, "
            f"Accepted throughput: {accepted / elapsed:.2f} tokens/s, "
            f"Drafted throughput: {drafted / elapsed:.2f} tokens/s, "
            f"Accepted: {accepted} tokens, Drafted: {drafted} tokens, "
            f"Per-position acceptance rate: {', '.join(f'{p:.3f}' for p in per_pos)}, "
            f"Avg Draft acceptance rate: {accepted / drafted * 100 if drafted else float('nan'):.1f}%"
        )

    # -- log text ----------------------------------------------------------------------------------

    def _non_default_args(self) -> dict[str, object]:
        defaults = vars(build_parser().parse_args([]))
        out: dict[str, object] = {"model_tag": self.args.model_tag} if self.args.model_tag else {}
        for key, value in vars(self.args).items():
            if key in ("model_tag", "moved_model") or key.startswith("twin_"):
                continue
            if key in defaults and defaults[key] != value and value is not None:
                out[key] = value
        return out

    def _config_text(self, vc: VllmConfig) -> str:
        spec = (
            f"SpeculativeConfig(method='mtp', model={vc.model!r}, num_spec_tokens={vc.num_speculative_tokens})"
            if vc.speculative
            else "None"
        )
        compilation = {"level": vc.optimization_level, "max_cudagraph_capture_size": vc.capture_size}
        return (
            f"model={vc.model!r}, speculative_config={spec}, tokenizer={vc.model!r}, "
            f"dtype=torch.{self.profile.model.dtype}, "
            f"max_seq_len={vc.max_model_len if vc.max_model_len is not None else -1}, "
            f"tensor_parallel_size={vc.cfg.tp_size}, kv_cache_dtype={vc.kv_cache_dtype}, "
            f"served_model_name={vc.served_model_name}, enable_prefix_caching={vc.enable_prefix_caching}, "
            f"max_num_seqs={vc.max_num_seqs}, max_num_batched_tokens={vc.max_num_batched_tokens}, "
            f"compilation_config={json.dumps(compilation)}"
        )


def main(argv: list[str]) -> int:
    """``serve MODEL [flags]`` to exit code, as ``vllm serve``'s."""
    if not argv or argv[0] != "serve":
        sys.stderr.write(
            "usage: python -m autotune_twin --personality vllm serve [model_tag] [options]\n"
            "vllm: error: the vLLM twin simulates only the 'serve' subcommand\n"
        )
        return 2
    launch = prepare(argv[1:], parse=parse_args, prog=PROG)
    if isinstance(launch, int):
        return launch
    configure_logging()
    return VllmApp(args=launch.args, profile=launch.profile, twin=launch.twin, fault=launch.fault).run()
