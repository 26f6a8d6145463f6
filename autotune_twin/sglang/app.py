"""One twin server's life: launch rules, simulated loading, memory sizing, serving, shutdown.

Mirrors what ``python -m sglang.launch_server`` prints and when: argument errors before anything
else, launch-rule failures right after start, memory failures after the (simulated) weights have
loaded, then KV/mamba pool sizing, CUDA graph capture, warm-up and the ready line. Every log line
goes to stderr in SGLang's format, flushed, and the first one says this is a simulation.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import queue
import sys
import time
import traceback

from autotune_twin import memory
from autotune_twin.cli import prepare
from autotune_twin.faults import NO_FAULT, Fault, diverges
from autotune_twin.gpu_state import Publisher, visible_devices
from autotune_twin.launch import LaunchError, resolve_launch
from autotune_twin.lifecycle import Lifecycle
from autotune_twin.memory import MemoryFailure, MemoryPlan
from autotune_twin.sglang.flags import PROG, parse_args
from autotune_twin.sglang.scheduler import SglangScheduler
from autotune_twin.sglang.server import TwinState, start_http
from passmodel import physics
from passmodel.config import LaunchConfig
from passmodel.physics import GIB
from passmodel.profile import TwinProfile

log = logging.getLogger("autotune_twin")
# The launcher (main) process logs without a rank tag; the scheduler ("TP0") process with one.
main_log = logging.getLogger("autotune_twin.main")

# Share of the simulated load time spent loading weights; the rest is CUDA graph capture.
_WEIGHT_SHARE = 0.8
_WARMUP_TEXT = "The capital city of France is"
_CAPTURE_SOLUTIONS = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)


def configure_logging(tp_size: int, level: str) -> None:
    """SGLang's prefix: ``[YYYY-MM-DD HH:MM:SS]``, with `` TP0`` only when tp-size > 1."""
    numeric = logging.getLevelName(level.upper())
    for logger, tag in ((log, " TP0" if tp_size > 1 else ""), (main_log, "")):
        handler = logging.StreamHandler(sys.stderr)  # flushes after every record
        handler.setFormatter(logging.Formatter(f"[%(asctime)s{tag}] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
        logger.handlers[:] = [handler]
        logger.setLevel(numeric if isinstance(numeric, int) else logging.INFO)
        logger.propagate = False


def _exception_text(exc: BaseException, exc_type: str, message: str) -> str:
    """A traceback through the twin's frames that ends the way SGLang's does (``exc_type: message``)."""
    frames = "".join(traceback.format_tb(exc.__traceback__))
    last = f"{exc_type}: {message}" if message else exc_type
    return f"Traceback (most recent call last):\n{frames}{last}"


class TwinApp(Lifecycle):
    """Startup sequence and lifetime of one simulated server."""

    state: TwinState | None

    def __init__(
        self,
        *,
        args: argparse.Namespace,
        profile: TwinProfile,
        seed: int,
        load_seconds: float,
        fault: Fault = NO_FAULT,
        drift: float = 0.0,
    ) -> None:
        super().__init__()
        self.args = args
        self.profile = profile
        self.seed = seed
        self.load_seconds = max(load_seconds, 0.0)
        self.fault = fault
        self.drift = drift
        self.gpus = Publisher(visible_devices(profile.gpus.count, args.tp_size))

    def run(self) -> int:
        self.handle_signals()
        args, profile = self.args, self.profile
        log.info(
            "autotune SGLang twin (simulation, not real SGLang): profile %s, %dx %s (simulated), model %s",
            profile.name,
            profile.gpus.count,
            profile.gpus.name,
            profile.model.name,
        )
        try:
            cfg = resolve_launch(args, profile)
        except LaunchError as err:
            sys.stderr.write(_exception_text(err, err.exc_type, err.message) + "\n")
            sys.stderr.flush()
            return 1
        for note in cfg.notes:
            log.warning(note)
        if self.fault.active:
            log.warning("twin fault injected: %s", self.fault.kind)
        if self.fault.kind == "exit-on-start":
            self._wait(self.load_seconds / 2)
            message = "NCCL error: unhandled system error (twin fault)"
            self._fail(_exception_text(RuntimeError(), "RuntimeError", message))
            return 1
        log.info("server_args=ServerArgs(%s)", ", ".join(f"{k}={v!r}" for k, v in sorted(vars(args).items())))
        state = self.state = TwinState(args=args, profile=profile, cfg=cfg, seed=self.seed, fault=self.fault)
        try:
            if self.fault.kind == "port-taken":
                raise OSError(errno.EADDRINUSE, "address already in use")
            httpd = start_http(state, host=args.host, port=args.port, log_http=log.isEnabledFor(logging.INFO))
        except OSError as err:
            log.error(
                "ERROR: [Errno %s] error while attempting to bind on address (%r, %d): %s",
                err.errno,
                args.host,
                args.port,
                err.strerror,
            )
            return 1
        try:
            return self._serve(state, cfg)
        finally:
            state.stopping()
            httpd.shutdown()
            httpd.server_close()
            self.gpus.release()

    def _serve(self, state: TwinState, cfg: LaunchConfig) -> int:
        plan = self._load_and_size(cfg)
        if plan is None:
            return 0 if self.stop_event.is_set() else 1
        scheduler = SglangScheduler(
            profile=self.profile,
            cfg=cfg,
            plan=plan,
            seed=self.seed,
            decode_log_interval=self.args.decode_log_interval,
            drift=self.drift,
            diverges=diverges(self.fault, cfg.spec),
        )
        scheduler.start()
        try:
            self._announce(cfg, plan)
            state.attach(plan, scheduler)
            if not self.args.skip_server_warmup and not self._warm_up(scheduler):
                return 0
            if self.fault.kind == "never-ready":
                self.stop_event.wait()
                return 0
            log.info("The server is fired up and ready to roll!")
            state.ready()  # after the line, so a 200 from /health means the log says ready too
            scheduler.mark_ready()
            self.stop_event.wait()
            return 0
        finally:
            scheduler.stop()

    def _fail(self, text: str) -> None:
        log.error("Scheduler hit an exception: %s", text)
        main_log.error("Received sigquit from a child process. It usually means the child failed.")

    def _load_and_size(self, cfg: LaunchConfig) -> MemoryPlan | None:
        """Simulated loading, pool sizing and graph capture; None when it failed (logged) or was stopped."""
        profile = self.profile
        free = memory.free_bytes_at_start(profile)
        weights = physics.weight_bytes_per_gpu(profile, cfg)
        log.info("Load weight begin. avail mem=%.2f GB", free / GIB)
        started = time.monotonic()
        self.gpus.hold(profile.gpus.runtime_reserved_bytes)
        if not self._wait(self.load_seconds * _WEIGHT_SHARE):
            return None
        if weights <= free:
            self.gpus.hold(profile.gpus.runtime_reserved_bytes + weights)
        try:
            plan = memory.plan_memory(profile, cfg)
        except MemoryFailure as failure:
            if failure.stage != "load":
                self._log_weights(started, free, weights)
            self._fail(_exception_text(failure, failure.exc_type, failure.message))
            return None
        self._log_weights(started, free, weights)
        self._log_pools(plan)
        self.gpus.hold(memory.held_bytes(profile, plan, ready=False))
        if cfg.disable_cuda_graph:
            log.info("Disable cuda graph.")
            try:
                memory.check_headroom(profile, plan)
            except MemoryFailure as failure:
                self._fail(_exception_text(failure, failure.exc_type, failure.message))
                return None
            self.gpus.hold(memory.held_bytes(profile, plan, ready=True))
            return plan
        avail = (plan.free_bytes - plan.weight_bytes - plan.pool_bytes) / GIB
        log.info("Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB", avail)
        capture_started = time.monotonic()
        if not self._wait(self.load_seconds * (1 - _WEIGHT_SHARE)):
            return None
        log.info("Capture cuda graph bs %s", memory.capture_sizes(plan.cuda_graph_bs))
        try:
            memory.check_headroom(profile, plan)
        except MemoryFailure as failure:
            # SGLang wraps the OOM: "Capture cuda graph failed: <OOM>" first, then the torch error.
            frames = "".join(traceback.format_tb(failure.__traceback__))
            self._fail(
                f"Traceback (most recent call last):\n{frames}"
                f"Exception: Capture cuda graph failed: {failure.message}\n{_CAPTURE_SOLUTIONS}\n"
                f"{failure.exc_type}: {failure.message}"
            )
            return None
        self.gpus.hold(memory.held_bytes(profile, plan, ready=True))
        log.info(
            "Capture cuda graph end. Time elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB.",
            time.monotonic() - capture_started,
            plan.graph_bytes / GIB,
            avail - plan.graph_bytes / GIB,
        )
        return plan

    def _log_weights(self, started: float, free: int, weights: int) -> None:
        arch = self.profile.model.architectures[0]
        log.info(
            "Load weight end. elapsed=%.2f s, type=%s, dtype=torch.%s, avail mem=%.2f GB, mem usage=%.2f GB.",
            time.monotonic() - started,
            arch,
            self.profile.model.dtype,
            (free - weights) / GIB,
            weights / GIB,
        )

    def _log_pools(self, plan: MemoryPlan) -> None:
        kv_gb = plan.kv_pool_bytes / GIB
        log.info(
            "KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB",
            plan.max_total_num_tokens,
            kv_gb / 2,
            kv_gb / 2,
        )
        if self.profile.model.hybrid:
            mamba_gb = plan.mamba_pool_bytes / GIB
            log.info(
                "Mamba Cache is allocated. max_mamba_cache_size: %d, conv_state size: %.2f GB, ssm_state size: %.2f GB",
                plan.max_mamba_cache_size,
                mamba_gb * 0.02,
                mamba_gb * 0.98,
            )
        log.info("Memory pool end. avail mem=%.2f GB", (plan.free_bytes - plan.weight_bytes - plan.pool_bytes) / GIB)

    def _announce(self, cfg: LaunchConfig, plan: MemoryPlan) -> None:
        available = (plan.headroom_bytes - plan.graph_bytes) / GIB
        log.info(
            "max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, max_running_requests=%d, "
            "context_len=%d, available_gpu_mem=%.2f GB",
            plan.max_total_num_tokens,
            cfg.chunked_prefill_size,
            self.args.max_prefill_tokens,
            plan.max_running_requests,
            cfg.context_length,
            available,
        )
        if cfg.max_running_requests is not None and plan.max_running_requests < cfg.max_running_requests:
            log.warning(
                "max_running_requests was reduced from the requested %d to %d (per dp worker) due to the "
                "available KV cache capacity.",
                cfg.max_running_requests,
                plan.max_running_requests,
            )
        host, port = self.args.host, self.args.port
        for line in (
            f"Started server process [{os.getpid()}]",
            "Waiting for application startup.",
            "Application startup complete.",
            f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)",
        ):
            sys.stderr.write(f"INFO:     {line}\n")
        sys.stderr.flush()

    def _warm_up(self, scheduler: SglangScheduler) -> bool:
        """SGLang's warm-up request; False if a stop came first."""
        request = scheduler.make_request(_WARMUP_TEXT, max_new_tokens=8, ignore_eos=False)
        scheduler.submit(request)
        while not self.stop_event.is_set():
            try:
                if request.updates.get(timeout=0.2).finished:
                    return True
            except queue.Empty:
                continue
        request.aborted = True
        return False


def main(argv: list[str]) -> int:
    """SGLang flags (and ``--twin-*`` options) to exit code, as ``python -m sglang.launch_server``."""
    launch = prepare(argv, parse=parse_args, prog=PROG)
    if isinstance(launch, int):
        return launch
    args, twin, profile = launch.args, launch.twin, launch.profile
    configure_logging(args.tp_size, args.log_level)
    load_seconds = twin.load_seconds if twin.load_seconds is not None else profile.timing.load_seconds
    app = TwinApp(
        args=args, profile=profile, seed=twin.seed, load_seconds=load_seconds, fault=launch.fault, drift=twin.drift
    )
    return app.run()
