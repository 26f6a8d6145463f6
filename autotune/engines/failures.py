"""Why a launch failed, read from its log: one classifier, driven by each engine's rules as data.

The log is read as a person reads it: each line's decoration stripped, the root exception found
beneath its wrappers, the start-up stage it happened in named, and a decision taken in a fixed order
(:func:`failure_in`; docs/how-it-works.md, "How a failed launch is read").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from autotune.models import Frozen
from autotune.outcomes import OutcomeKind


@dataclass(frozen=True)
class Stage:
    """A part of a server's start (or its serving), and the memory side an out-of-memory error has
    there: too low while the weights and pools are placed, too high where what the fraction left
    outside the pools runs out (graph capture, warm-up, the first requests)."""

    doing: str
    side: OutcomeKind


STARTING = Stage("starting", OutcomeKind.MEMORY_TOO_HIGH)
LOADING_WEIGHTS = Stage("loading the weights", OutcomeKind.MEMORY_TOO_LOW)
SIZING_POOLS = Stage("sizing the KV / state pools", OutcomeKind.MEMORY_TOO_LOW)
PROFILING = Stage("profiling activations", OutcomeKind.MEMORY_TOO_HIGH)
ALLOCATING_KV = Stage("allocating the KV cache", OutcomeKind.MEMORY_TOO_HIGH)
CAPTURING = Stage("capturing CUDA graphs", OutcomeKind.MEMORY_TOO_HIGH)
SERVING = Stage("warming up or serving", OutcomeKind.MEMORY_TOO_HIGH)

OUT_OF_MEMORY = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation"
    r"|HIP out of memory|CUBLAS_STATUS_ALLOC_FAILED|RESOURCE_EXHAUSTED: Out of memory",
    re.IGNORECASE,
)
ARGPARSE = re.compile(
    r"error: (?:unrecognized arguments|ambiguous option|argument \S+: |the following arguments are required)[^\n]*"
)
USAGE = re.compile(r"^usage: \S+ \[-h\]")
"""The first line of argparse's usage text, which it prints on a launch only when it refuses the
command line: a quote that ends before argparse's ``error:`` line still shows a refusal."""
PORT_IN_USE = re.compile(
    r"address already in use|port \d+ is (?:already )?in use|port is already in use|couldn't bind HTTP server socket",
    re.IGNORECASE,
)
VALIDATION = frozenset({"ValueError", "AssertionError", "TypeError", "NotImplementedError", "ValidationError"})
"""Exceptions the engines raise when they refuse their arguments while checking them."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m|\[(?:\d+;)?\d+m")
_DECORATION = re.compile(
    r"^(?:"
    r"[\w.-]+\s+\|\s+"  # docker compose: "vllm-1  | "
    r"|\|\s+"  # a CI log's column
    r"|\d{4}-\d\d-\d\dT[\d:.]+Z\s+"  # docker / cloud timestamps
    r"|\[\d{4}-\d\d-\d\dT[\d:.]+Z\]\s*"
    r"|\(\w[\w-]*(?: rank=\d+)?\s*pid=\d+(?:, ip=[\d.]+)?\)\s*"  # (EngineCore_DP0 pid=7), (VllmWorker rank=1 pid=9)
    r"|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+(?:\[[^\]]*\]|\S+:\d+\])\s*"
    r"|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL):\s+"  # uvicorn
    # SGLang: [2025-01-01 10:00:00 DP0 TP0], [01-01 10:00:00.123 PP1 ATTN_CP2 TP2]
    r"|\[(?:(?:\d{4}-)?\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z]+(?:_[A-Z]+)*\d+)*\]\s*"
    r"|\[[A-Z]+(?:_[A-Z]+)*\d+(?: [A-Z]+(?:_[A-Z]+)*\d+)*\]\s*"  # a bare rank tag
    r"|\[[\w./-]+\.py:\d+\]\s*"  # [multiproc_executor.py:492]
    r"|\[\d+\]\s*|\[rank\d+\]:?\s*"  # [3], torchrun's [rank0]:
    r"|\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\s*(?:\|\s*)?"
    r")+"
)
FATAL = re.compile(
    r"Traceback \(most recent call last\)|Scheduler hit an exception|Segmentation fault|Fatal Python error"
    r"|core dumped|Failed: Cuda error|Assertion `.*` failed|EngineCore failed to start|WorkerProc hit an exception"
    r"|Engine core initialization failed|Received sigquit"
)
"""Lines that say a process died, whatever of."""
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*(?P<name>(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt|Fault))(?::\s*(?P<message>.*))?$"
)
_ERRORISH = re.compile(r"\w*(?:Error|Exception)\b|Fatal|Segmentation fault|Aborted|core dumped|\bfailed\b", re.I)


# tqdm's "| 1/37 [00:02<01:39": items done of the total
_PROGRESS = re.compile(r"\| *(?P<done>\d+)/(?P<total>\d+) \[")
PROGRESS_LOOKAHEAD = 3


def clean_line(line: str) -> str:
    """A log line without its decoration: colours, timestamps, rank tags, process and level prefixes."""
    return _DECORATION.sub("", _ANSI.sub("", line.strip())).strip()


class RootException(Frozen):
    name: str
    message: str
    line: str
    position: int


@dataclass(frozen=True)
class FailureRules:
    """What one engine prints, as data: the classifier in this module does the rest.

    Attributes:
        stages: start-up milestones (regex, stage entered), e.g. SGLang's ``Load weight begin``.
        too_low, too_high: messages that name their memory side themselves (regexes).
        retryable: messages of a failure the config is not at fault for and that may pass.
        wrappers: regexes of exception messages that only wrap the root cause.
        prefixes: regexes of text that prefixes the real exception inside a message
            (``Capture cuda graph failed: ``).
        invalid: regexes of other refusals of the configuration.
    """

    stages: Sequence[tuple[str, Stage]] = ()
    too_low: Sequence[str] = ()
    too_high: Sequence[str] = ()
    retryable: Sequence[str] = ()
    wrappers: Sequence[str] = ()
    prefixes: Sequence[str] = ()
    invalid: Sequence[str] = ()
    _compiled: dict[str, re.Pattern[str]] = field(default_factory=dict, compare=False, repr=False)

    def pattern(self, text: str) -> re.Pattern[str]:
        if text not in self._compiled:
            self._compiled[text] = re.compile(text)
        return self._compiled[text]

    def first(self, patterns: Sequence[str], lines: Sequence[str]) -> tuple[int, str] | None:
        """The first line (index, text) matching any of ``patterns``."""
        compiled = [self.pattern(p) for p in patterns]
        for index, line in enumerate(lines):
            if any(p.search(line) for p in compiled):
                return index, line
        return None

    def stage_at(self, lines: Sequence[str], position: int) -> Stage:
        """The last stage entered at or before line ``position``; or one whose progress bar, still
        short of its total, follows within a few lines (a bar is redrawn on its own stream, so it can
        land after the error it preceded)."""
        stage = STARTING
        compiled = [(self.pattern(p), s) for p, s in self.stages]
        for line in lines[: position + 1]:
            for pattern, entered in compiled:
                if pattern.search(line):
                    stage = entered
        for line in lines[position + 1 : position + 1 + PROGRESS_LOOKAHEAD]:
            bar = _PROGRESS.search(line)
            if bar is not None and int(bar["done"]) < int(bar["total"]):
                stage = next((entered for pattern, entered in compiled if pattern.search(line)), stage)
        return stage

    def exception_in(self, line: str) -> tuple[str, str] | None:
        """``(name, message)`` of an exception line, prefixes peeled: ``Exception: Capture cuda graph
        failed: RuntimeError: x`` is ``("RuntimeError", "x")``; None for other lines."""
        match = _EXCEPTION.match(line)
        for _ in range(4):
            if match is None:
                return None
            name, message = match["name"], (match["message"] or "").strip()
            peeled = message
            for prefix in self.prefixes:
                peeled = self.pattern(prefix).sub("", peeled, count=1).strip()
            inner = _EXCEPTION.match(peeled)
            if inner is None or (peeled == message and name != "Exception"):
                return name, peeled
            match = inner
        return None

    def root_exception(self, lines: Sequence[str]) -> RootException | None:
        """The first exception line of the log that is not a wrapper of another."""
        wrappers = [self.pattern(p) for p in self.wrappers]
        for index, line in enumerate(lines):
            found = self.exception_in(line)
            if found is None or any(w.search(found[1]) for w in wrappers):
                continue
            name, message = found
            if name == "ValidationError":  # pydantic: "1 validation error for X", then the field and why
                line = " ".join(lines[index : index + 3])
            return RootException(name=name, message=message, line=line, position=index)
        return None


def failure_in(rules: FailureRules, log_text: str) -> tuple[OutcomeKind, str] | None:
    """What the log itself says went wrong (see the module text), or None when it shows no failure."""
    lines = [clean for clean in (clean_line(raw) for raw in log_text.splitlines()) if clean]
    retry = rules.first(rules.retryable, lines)
    if retry is not None:
        return OutcomeKind.CRASHED, f"retryable: {retry[1]}"
    low, high = rules.first(rules.too_low, lines), rules.first(rules.too_high, lines)
    named = [
        (hit[0], kind, hit[1])
        for hit, kind in ((low, OutcomeKind.MEMORY_TOO_LOW), (high, OutcomeKind.MEMORY_TOO_HIGH))
        if hit
    ]
    if named:
        _, kind, line = min(named)
        return kind, line
    root = rules.root_exception(lines)
    oom = next(((i, line) for i, line in enumerate(lines) if OUT_OF_MEMORY.search(line)), None)
    if oom is not None and (root is None or OUT_OF_MEMORY.search(root.message) or root.position >= oom[0]):
        stage = rules.stage_at(lines, oom[0])
        return stage.side, f"{oom[1]} (while {stage.doing})"
    port = next((line for line in lines if PORT_IN_USE.search(line)), None)
    if port is not None:
        return OutcomeKind.PORT_IN_USE, port
    refused = next((m.group(0) for line in lines if (m := ARGPARSE.search(line))), None)
    if refused is None:
        refused = next((f"argparse printed its usage: {line[:160]}" for line in lines if USAGE.match(line)), None)
    if refused is None:
        refused = next((line for line in lines if rules.first(rules.invalid, [line])), None)
    if refused is not None:
        return OutcomeKind.INVALID_CONFIG, refused
    if root is not None and root.name in VALIDATION and rules.stage_at(lines, root.position) is STARTING:
        return OutcomeKind.INVALID_CONFIG, root.line
    if root is not None:
        return OutcomeKind.CRASHED, root.line
    fatal = [line for line in lines if FATAL.search(line)]
    if fatal:
        errors = [line for line in lines if _ERRORISH.search(line) and not FATAL.search(line)]
        return OutcomeKind.CRASHED, (errors or fatal)[-1]
    return None


def classify(rules: FailureRules, *, exit_code: int | None, log_text: str, timed_out: bool) -> tuple[OutcomeKind, str]:
    """The outcome kind of a failed launch and the line that decided it: what the log names (memory
    and a taken port outrank a deadline), else a deadline, else a crash with the last error line."""
    found = failure_in(rules, log_text)
    if found is not None and (found[0].is_memory or found[0] is OutcomeKind.PORT_IN_USE or not timed_out):
        kind, reason = found
        return kind, f"exit code {exit_code}: {reason}" if kind is OutcomeKind.CRASHED else reason
    if timed_out:
        return OutcomeKind.LAUNCH_TIMEOUT, "the server did not become ready before the deadline"
    lines = [clean for clean in (clean_line(raw) for raw in log_text.splitlines()) if clean]
    errors = [line for line in lines if _ERRORISH.search(line)]
    last = (errors or lines or ["(empty log)"])[-1]
    return OutcomeKind.CRASHED, f"exit code {exit_code}: {last}"
