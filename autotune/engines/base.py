"""The engine interface: everything that differs between inference servers.

An engine turns a :class:`~autotune.space.Candidate` into a :class:`LaunchPlan` and speaks the
server's HTTP protocol. :class:`Engine`'s sections are its phases, in the order the tuner uses them:
valid flags, normalise, argv, readiness, effective config, failure classification, requests and
server-side figures (docs/how-it-works.md, "Engines").
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
import statistics
import subprocess
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from autotune.engines.failures import FailureRules, classify, failure_in
from autotune.engines.speculation import ScheduleForm, SpeculationFlags
from autotune.errors import FlagError, LauncherError, MeasurementError
from autotune.measure.suites import Prompt
from autotune.memory_types import MemoryRules
from autotune.models import Frozen
from autotune.outcomes import OutcomeKind
from autotune.space import FlagValue

if TYPE_CHECKING:
    import httpx

# httpx and prometheus_client are imported where a server is asked: reading a study (show, export,
# report) imports this module for its models only.


class DraftReads(Frozen):
    model: str = Field(description="the draft model's path, as the flag gives it")
    passes_per_verify: float = Field(description="draft forward passes per verify pass, at most")


class PoolShortfall(Frozen):
    """What a launch that ran out of pool memory printed: the fraction it ran at (None where the
    message does not say it, as vLLM's; the launch's flag or the engine's default does) and, where
    printed, what its KV pool held against what one request needs, in tokens and in bytes."""

    fraction: float | None = None
    pool_tokens: int | None = None
    needed_tokens: int | None = None
    pool_bytes: float | None = Field(default=None, description="the KV cache memory it had, where printed")
    needed_bytes: float | None = Field(default=None, description="the KV cache memory one request needs")

    @property
    def cell_bytes(self) -> float | None:
        """KV bytes per token, where the bytes one request needs were printed with its tokens."""
        return self.needed_bytes / self.needed_tokens if self.needed_bytes and self.needed_tokens else None


class Failure(Frozen):
    kind: OutcomeKind
    reason: str = Field(description="the log line or rule that decided the kind")


class InvalidConfig(Exception):
    """Raised by ``normalise`` when the engine would refuse this combination of flags."""


class FlagSet(Frozen):
    """The flags a launcher accepts, read from its ``--help``."""

    flags: frozenset[str]
    switches: frozenset[str] = frozenset()

    def check(self, names: list[str], *, engine: str, renamed: Mapping[str, str] | None = None) -> None:
        for name in names:
            if name in self.flags:
                continue
            hint = None
            if renamed and name in renamed:
                hint = f"it was renamed to --{renamed[name]}"
            else:
                close = difflib.get_close_matches(name, sorted(self.flags), n=1)
                if close:
                    hint = f"did you mean --{close[0]}?"
            raise FlagError(
                f"unknown flag --{name}: the {engine} behind this launcher does not accept it", flag=name, hint=hint
            )


class LaunchPlan(Frozen):
    """Everything needed to start one server, after the engine's rules were applied."""

    engine: str
    flags: dict[str, FlagValue] = Field(description="effective flags, after the engine's normalisation")
    notes: list[str] = Field(default_factory=list, description="rewrites the engine's rules applied")

    @property
    def config_key(self) -> str:
        """Identity of the effective configuration: two plans with one key are measured once."""
        canonical = json.dumps({"engine": self.engine, "flags": self.flags}, sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def rate_key(plan: LaunchPlan, sizing: Mapping[str, int]) -> str:
    """Identity of a plan's single-stream decode rate: its config key without the flags in ``sizing``
    (flag -> the smallest value that still serves one stream; below it the flag stays in the key)."""
    kept = {
        name: value
        for name, value in plan.flags.items()
        if not (name in sizing and (not isinstance(value, int) or isinstance(value, bool) or value >= sizing[name]))
    }
    return plan.model_copy(update={"flags": kept, "notes": []}).config_key


class EffectiveConfig(Frozen):
    """What the running server reports it resolved."""

    version: str | None
    values: dict[str, FlagValue | None]


class ServerStats(Frozen):
    """The server's own figures over a measurement window (to cross-check the client's)."""

    gen_tok_s: float | None = Field(default=None, description="median logged generation throughput while busy")
    accept_length: float | None = Field(default=None, description="mean logged accept length")
    log_lines: int = 0
    generated_tokens: float | None = Field(default=None, description="counter delta from /metrics")
    metrics_accept_length: float | None = None


class LogFigures(Frozen):
    """The figures of a server's periodic log lines over a window, line by line, in log order.

    Only lines of busy intervals count, and of each data-parallel group only one rank's lines (the
    others repeat them)."""

    gen_tok_s: dict[str, list[float]] = Field(
        default_factory=dict, description="generation throughput per line, per data-parallel group or engine"
    )
    accept_lengths: list[float] = Field(default_factory=list, description="accept length per line")
    accept_weights: list[float] | None = Field(
        default=None, description="how much each accept length weighs (verify steps); None: equally"
    )

    @property
    def lines(self) -> int:
        return sum(len(values) for values in self.gen_tok_s.values())

    @property
    def total_gen_tok_s(self) -> float | None:
        """The groups run side by side: the sum of each group's median."""
        groups = [values for values in self.gen_tok_s.values() if values]
        return sum(statistics.median(values) for values in groups) if groups else None

    @property
    def accept_length(self) -> float | None:
        if not self.accept_lengths:
            return None
        weights = self.accept_weights
        if weights is None or len(weights) != len(self.accept_lengths) or not sum(weights):
            return statistics.fmean(self.accept_lengths)
        return sum(a * w for a, w in zip(self.accept_lengths, weights, strict=True)) / sum(weights)


class MetricNames(Frozen):
    """Which Prometheus series hold an engine's generated tokens and its acceptance."""

    generated: str = Field(description="counter of generated tokens")
    drafts: str | None = Field(default=None, description="counter of verify steps with a draft")
    accepted: str | None = Field(default=None, description="counter of accepted draft tokens")
    accept_length: str | None = Field(default=None, description="gauge of the accept length, when served as one")


def counter_totals(text: str) -> dict[str, float]:
    """Sum of every sample per name over its labels (engines, ranks, positions), with prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def metric_figures(names: MetricNames, before: str, after: str) -> tuple[float | None, float | None]:
    """Generated tokens (counter delta) and accept length (the gauge, else 1 + Δaccepted / Δdrafts)
    between two scrapes; no accept length (None) where no verify step happened."""
    first, last = counter_totals(before), counter_totals(after)

    def delta(name: str | None) -> float | None:
        return last[name] - first.get(name, 0.0) if name is not None and name in last else None

    accept = last.get(names.accept_length) if names.accept_length is not None else None
    if accept is not None and accept <= 0:
        # SGLang serves the gauge at its default 0.0 until a verify step sets it (a server without
        # speculation never does): absent, not an accept length of 0.
        accept = None
    drafts, accepted = delta(names.drafts), delta(names.accepted)
    if accept is None and drafts and accepted is not None:
        accept = 1.0 + accepted / drafts
    return delta(names.generated), accept


_RANK_TAG = re.compile(r"(?:DP|TP|PP|EP|rank=)(\d+)")


def first_rank_search(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The match of ``pattern`` on the lowest rank's line (``TP0`` before ``TP1``; ``Worker_TP0``,
    ``rank=0``; untagged lines count as rank 0), the earliest among equals: ranks log the same
    start-up line in any order, and a per-GPU figure is the first rank's."""
    best: tuple[tuple[int, ...], int] | None = None
    chosen: re.Match[str] | None = None
    for match in pattern.finditer(text):
        prefix = text[text.rfind("\n", 0, match.start()) + 1 : match.start()]
        key = (tuple(int(n) for n in _RANK_TAG.findall(prefix)) or (0,), match.start())
        if best is None or key < best:
            best, chosen = key, match
    return chosen


class MemoryFacts(Frozen):
    """Memory figures a server logged at start-up (per GPU)."""

    weights_bytes: float | None = None
    kv_pool_bytes: float | None = None
    kv_tokens: int | None = None
    graph_bytes: float | None = None
    free_at_start_bytes: float | None = Field(default=None, description="free memory the server saw before loading")
    avail_after_pools_bytes: float | None = Field(default=None, description="memory left once the pools were sized")
    graph_batch: int | None = Field(default=None, description="largest batch size captured in a CUDA graph")
    state_slots: int | None = Field(
        default=None, description="requests the hybrid (mamba / linear-attention) state cache holds (SGLang)"
    )
    max_concurrency: float | None = Field(
        default=None, description="requests of the full model length the KV cache holds at once (vLLM)"
    )
    shortfall: PoolShortfall | None = Field(default=None, description="what a memory death printed of its pool")
    oom_shortfall_bytes: float | None = Field(
        default=None, description="the least an out-of-memory death's need exceeded the free memory, as it printed"
    )

    @property
    def kv_bytes_per_token(self) -> float | None:
        return self.kv_pool_bytes / self.kv_tokens if self.kv_pool_bytes and self.kv_tokens else None


class StreamChunk(Frozen):
    """One streamed update of a generation."""

    completion_tokens: int
    prompt_tokens: int | None = None
    finished: bool = False
    accept_length: float | None = None
    finish_reason: str | None = None
    server_decode_tok_s: float | None = Field(
        default=None, description="the server's own decode rate for this request (tokens after the first / time)"
    )


_HELP_ENTRY = re.compile(r"^ {1,6}-")
_LONG_OPTION = re.compile(r"--[A-Za-z0-9][\w-]*")


def parse_help_flags(help_text: str) -> FlagSet:
    """Collect the long options of an argparse-style ``--help``.

    Only the invocation part of each entry counts (text before the description column), so a flag
    merely mentioned in a description is not taken as valid.
    """
    flags: set[str] = set()
    switches: set[str] = set()
    for line in help_text.splitlines():
        if not _HELP_ENTRY.match(line):
            continue
        invocation = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        for alternative in invocation.split(", "):
            parts = alternative.split(maxsplit=1)
            match = _LONG_OPTION.fullmatch(parts[0].split("=")[0])
            if match is None:
                continue
            name = match.group(0)[2:]
            flags.add(name)
            if len(parts) == 1 and "=" not in parts[0]:
                switches.add(name)
    return FlagSet(flags=frozenset(flags), switches=frozenset(switches - {"help"}))


def run_help(argv: list[str], *, env: Mapping[str, str] | None = None, timeout_s: float = 120.0) -> str:
    """Run ``argv`` (a launcher plus ``--help``) and return what it printed."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **(env or {})},
            check=False,
        )
    except FileNotFoundError:
        raise LauncherError(f"launcher not found: {argv[0]}", hint="check 'launcher' in the search space") from None
    except PermissionError:
        raise LauncherError(f"launcher is not executable: {argv[0]}") from None
    except subprocess.TimeoutExpired:
        raise LauncherError(f"'{' '.join(argv)}' did not finish within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise LauncherError(f"'{' '.join(argv)}' failed with exit code {proc.returncode}: {tail[0]}")
    return proc.stdout


class Engine(ABC):
    """Base class of every engine; see the module docstring for the phases."""

    name: ClassVar[str]
    memory_rules: ClassVar[MemoryRules | None] = None
    """How feasibility moves with the engine's flags (None: no prediction for this engine)."""
    renamed_flags: ClassVar[Mapping[str, str]] = {}
    reserved_flags: ClassVar[frozenset[str]] = frozenset()
    """Flags autotune sets itself (model, host, port); a space may not set them."""
    failure_rules: ClassVar[FailureRules] = FailureRules()
    """What the engine prints when it fails (see :mod:`autotune.engines.failures`)."""
    metric_names: ClassVar[MetricNames | None] = None
    """Where its ``/metrics`` keep generated tokens and acceptance (None: not read)."""
    speculation: ClassVar[SpeculationFlags | None] = None
    """How it spells a draft (None: it does not speculate)."""
    schedule_form: ClassVar[ScheduleForm | None] = None
    """How it runs a speculation schedule per load (None: it cannot)."""
    verdict_memory_flag: ClassVar[str | None] = None
    """The flag whose value the race reports as a finalist's memory where no peak was logged (less
    memory wins among equals; None: peak GiB only)."""

    def read_flag_set(self, launcher: list[str], *, env: Mapping[str, str] | None = None) -> FlagSet:
        return parse_help_flags(run_help([*launcher, "--help"], env=env))

    def check_flags(self, names: list[str], flag_set: FlagSet) -> None:
        for name in names:
            if name in self.reserved_flags:
                raise FlagError(f"--{name} is set by autotune itself; remove it from the search space", flag=name)
        flag_set.check(names, engine=self.name, renamed=self.renamed_flags)

    @abstractmethod
    def normalise(self, flags: Mapping[str, FlagValue]) -> LaunchPlan:
        """Apply the engine's own rules; raise :class:`InvalidConfig` for what it would refuse."""

    @abstractmethod
    def build_argv(self, launcher: list[str], *, model: str, plan: LaunchPlan, host: str, port: int) -> list[str]:
        """The full command line that starts the server."""

    def is_ready(self, client: httpx.Client, base_url: str) -> bool:
        """One readiness probe: ``GET /health`` answers 200 (SGLang, vLLM and llama.cpp all answer 503
        or refuse the connection while loading); connection errors count as not ready."""
        import httpx

        try:
            return client.get(f"{base_url}/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    @abstractmethod
    def effective_config(self, client: httpx.Client, base_url: str, plan: LaunchPlan) -> EffectiveConfig:
        """Read back what the server resolved for the plan's flags."""

    def classify_failure(self, *, exit_code: int | None, log_text: str, timed_out: bool) -> Failure:
        """Decide why a launch failed from its exit code and log, by :attr:`failure_rules`."""
        kind, reason = classify(self.failure_rules, exit_code=exit_code, log_text=log_text, timed_out=timed_out)
        return Failure(kind=kind, reason=reason)

    memory_sizing_flags: ClassVar[Mapping[str, int]] = {}
    """Flags that size memory pools and limits but do not change one stream's decode rate, each with
    the smallest value that still serves that stream (empty: the engine claims none)."""

    def rate_key(self, plan: LaunchPlan) -> str | None:
        """Two plans with one rate key decode a single stream at the same rate (they differ only in
        :attr:`memory_sizing_flags`); None where the engine claims no such flags."""
        return rate_key(plan, self.memory_sizing_flags) if self.memory_sizing_flags else None

    def draft_reads(self, flags: Mapping[str, FlagValue]) -> DraftReads | None:
        """The separate draft model a plan runs and its forward passes per verify pass (for the
        roofline: each pass reads the draft's weights); None without one (or with built-in heads)."""
        return None

    def pool_shortfall(self, reason: str) -> PoolShortfall | None:
        """The figures a pool-memory death's message printed; None where it printed none."""
        return None

    def graph_tokens_captured(self, flags: Mapping[str, FlagValue], *, gpu_total_bytes: float | None) -> float | None:
        """Tokens the largest decode CUDA graph of a launch with ``flags`` captures (batch x tokens per
        sequence), with the engine's own batch where ``flags`` leave it unset; None where unknown. An engine
        that knows it reserves headroom for those graphs when it picks its own memory fraction."""
        return None

    def verify_tokens(self, flags: Mapping[str, FlagValue]) -> float:
        """Tokens each sequence runs through the target in one decode pass (the draft tokens it
        verifies; 1 without speculation): a mixture of experts routes each of them."""
        return 1.0

    def calibration_flags(self, flags: Mapping[str, FlagValue]) -> dict[str, Any] | None:
        """A launch's speculative flags as the twin's calibration points spell them (docs/twin-profile.md,
        "Calibrating and predicting"): names without their leading dashes, numbers as numbers, ``{}``
        without speculation; None where the twin does not simulate this engine."""
        return None

    def set_accept_length(self, flags: Mapping[str, FlagValue]) -> float | None:
        """The accept length a launch fixed by itself (drafts accepted at a set rate, whatever the
        models say), which a calibration point carries instead of the measured one; None otherwise."""
        return None

    def lossy_speculation(self, flags: Mapping[str, FlagValue]) -> str | None:
        """Why these flags would change the model's outputs (a verification that accepts tokens the
        target would reject), or None: a space offers that only when it allows lossy speculation."""
        return None

    def failure_in(self, log_text: str) -> Failure | None:
        """The failure a log names, by :attr:`failure_rules`; None when it shows none (a healthy log)."""
        found = failure_in(self.failure_rules, log_text)
        return Failure(kind=found[0], reason=found[1]) if found is not None else None

    @abstractmethod
    def stream_generate(
        self, client: httpx.AsyncClient, base_url: str, prompt: Prompt, *, max_tokens: int, ignore_eos: bool
    ) -> AsyncIterator[StreamChunk]:
        """Send one prompt and yield an update per streamed event."""

    async def reset_stats(self, client: httpx.AsyncClient, base_url: str) -> None:
        """Reset the server's lifetime counters (e.g. average accept length) before measuring."""
        return None

    async def scrape_metrics(self, client: httpx.AsyncClient, base_url: str) -> str | None:
        """The server's Prometheus text from ``GET /metrics`` (SGLang, vLLM and llama.cpp all serve
        it there), or None where it is not served."""
        response = await client.get(f"{base_url}/metrics")
        return response.text if response.status_code == 200 else None

    def log_figures(self, log_window: str) -> LogFigures:
        """The throughput and acceptance of the engine's periodic (or per-request) log lines."""
        return LogFigures()

    def server_stats(
        self, *, log_window: str, metrics_before: str | None, metrics_after: str | None
    ) -> ServerStats | None:
        """The server's own throughput and acceptance over a window of its log and metrics (None
        when the window logged no busy line and the metrics count no generated token)."""
        logged = self.log_figures(log_window)
        generated = accept = None
        if self.metric_names is not None and metrics_before is not None and metrics_after is not None:
            generated, accept = metric_figures(self.metric_names, metrics_before, metrics_after)
        if not logged.lines and generated is None:
            return None
        return ServerStats(
            gen_tok_s=logged.total_gen_tok_s,
            accept_length=logged.accept_length,
            log_lines=logged.lines,
            generated_tokens=generated,
            metrics_accept_length=accept,
        )

    def memory_facts(self, log_text: str) -> MemoryFacts | None:
        """Weights, pools and graph memory the server logged while starting (None: not logged)."""
        return None


async def sse_events(
    client: httpx.AsyncClient,
    url: str,
    *,
    server: str,
    body: Mapping[str, object],
    headers: Mapping[str, str] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """POST ``body`` and yield each server-sent ``data: {json}`` event until ``data: [DONE]``.

    A request the server refuses raises :class:`MeasurementError` naming ``server`` and its message,
    whether refused in the stream (an ``error`` event after HTTP 200, as real SGLang does for a
    prompt longer than the context) or by an HTTP error status with a JSON error body."""
    async with client.stream("POST", url, json=body, headers=headers) as response:
        if response.is_error:
            await response.aread()
            refusal = error_of(response.content)
            if refusal is not None:
                raise refused(server, refusal, status=response.status_code)
            response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            event: dict[str, Any] = json.loads(data)
            if "error" in event:
                raise refused(server, event["error"])
            yield event


# What engines answer for a prompt that does not fit the context: SGLang "The input (7355 tokens) is
# longer than the model's context length (4096 tokens).", vLLM "This model's maximum context length
# is 4096 tokens ...", llama.cpp "the request exceeds the available context size ...".
_CONTEXT_TOO_SHORT = re.compile(
    r"longer than the model's context length|maximum context length is|exceeds the available context size", re.I
)


def error_of(content: bytes) -> object | None:
    """The error a JSON error body carries (``error``, FastAPI's ``detail``, vLLM's top-level
    ``message``); None when the body is not such JSON."""
    try:
        data = json.loads(content)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    return next((data[key] for key in ("error", "detail", "message") if data.get(key)), None)


def refused(server: str, error: object, *, status: int | None = None) -> MeasurementError:
    """A request the server refused, as one line naming the server's own message; a prompt longer
    than the context is named as what it means for the study (the suite does not fit this config)."""
    message = error.get("message") if isinstance(error, Mapping) else None
    text = " ".join(str(message or error).split())  # the server's message may span lines: the reason is one
    said = f"{server} answered HTTP {status}" if status is not None else f"{server} streamed an error"
    if _CONTEXT_TOO_SHORT.search(text):
        return MeasurementError(f"the prompt suite does not fit this config's context: {said}: {text}")
    return MeasurementError(f"{said}: {text}")


def scalar(text: str) -> FlagValue | None:
    """A value written as text (a Prometheus label, a command-line word) read back: ``None``,
    ``True``/``False``, an int, a float, else the text itself."""
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def as_number(value: Any) -> Any:
    """A value kept as text that reads as a number (``"3"``, ``"0.5"``) as that number; else as it is."""
    read = scalar(value) if isinstance(value, str) else value
    if isinstance(read, (int, float)) and not isinstance(read, bool) and math.isfinite(read):
        return read
    return value


def flag_argv(flags: Mapping[str, FlagValue]) -> list[str]:
    """``{"tp-size": 2, "enable-metrics": True}`` -> ``["--tp-size", "2", "--enable-metrics"]``."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is False:
            continue
        argv.append(f"--{name}")
        if value is not True:
            argv.append(str(value))
    return argv
