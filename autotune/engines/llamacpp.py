"""llama.cpp's ``llama-server``: flags, launch rules, protocol.

Facts measured on llama.cpp as vendored in llama-cpp-python 0.3.36 (``scripts/build-llama-server.sh``
builds it): ``--help`` lists entries as ``-md,   --model-draft FNAME`` starting at column 0;
``/health`` answers 503 ``Loading model`` until the model is loaded, then 200; ``/props`` holds
what the server resolved; ``/completion`` streams ``tokens_predicted`` cumulatively and a final
event with ``timings`` (``predicted_per_second``, ``draft_n``, ``draft_n_accepted``); ``--metrics``
serves Prometheus counters prefixed ``llamacpp:``; a bad flag exits 1 with ``invalid argument``,
memory that cannot be had logs ``failed to allocate``, a taken port ``couldn't bind``. A draft
model (``-md``) speculates only with ``--spec-type draft-simple``; ``--draft-max``/``--draft-min``
were removed in favour of ``--spec-draft-n-max``/``--spec-draft-n-min`` (``--spec-draft-p-min``
is the draft's confidence floor). On a CPU, ``--threads 1`` keeps a 2-core machine measurable.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping

import httpx
from pydantic import BaseModel, ConfigDict

from autotune.engines import base
from autotune.engines.base import Engine, FlagSet, InvalidConfig, LaunchPlan, flag_argv, run_help, sse_events
from autotune.engines.failures import FailureRules
from autotune.engines.speculation import SpeculationFlags
from autotune.errors import MeasurementError
from autotune.measure.suites import Prompt
from autotune.space import FlagValue

SPEC_TYPE = "spec-type"
DRAFT_MODEL = "spec-draft-model"
DRAFT_N_MAX = "spec-draft-n-max"
BATCH = "batch-size"
UBATCH = "ubatch-size"
DEFAULT_BATCH = 2048  # llama.cpp's default for --batch-size
NO_SPECULATION = "none"
METRICS_PREFIX = "llamacpp:"

# Aliases of the flags a space is likely to name, used until ``read_flag_set`` has read the
# launcher's own (which knows every alias): alias -> the canonical long name.
_KNOWN_ALIASES: dict[str, str] = {
    "c": "ctx-size",
    "b": BATCH,
    "ub": UBATCH,
    "np": "parallel",
    "t": "threads",
    "tb": "threads-batch",
    "md": DRAFT_MODEL,
    "model-draft": DRAFT_MODEL,
    "draft-p-min": "spec-draft-p-min",
    "draft-p-split": "spec-draft-p-split",
    "ngl": "gpu-layers",
    "n-gpu-layers": "gpu-layers",
    "ngld": "spec-draft-ngl",
    "gpu-layers-draft": "spec-draft-ngl",
    "n-gpu-layers-draft": "spec-draft-ngl",
    "fa": "flash-attn",
    "ctk": "cache-type-k",
    "ctv": "cache-type-v",
    "cb": "cont-batching",
    "nocb": "no-cont-batching",
    "kvu": "kv-unified",
    "no-kvu": "no-kv-unified",
    "m": "model",
}

# Flags whose --help says "the argument has been removed": name -> its replacement.
_REMOVED = {
    "draft": "spec-draft-n-max",
    "draft-n": "spec-draft-n-max",
    "draft-max": "spec-draft-n-max",
    "draft-min": "spec-draft-n-min",
    "draft-n-min": "spec-draft-n-min",
}

# What llama-server prints when it fails (the classifier is autotune.engines.failures). It has no
# memory fraction: memory it cannot get (``failed to allocate`` a buffer for the KV cache, weights
# or compute) is memory asked beyond what the machine has, like a too-large --ctx-size: too high.
FAILURES = FailureRules(
    too_high=(r"failed to allocate", r"cudaMalloc failed", r"out of memory"),
    invalid=(
        r"error: invalid argument: ",
        r"error while handling argument ",
        r"error while handling environment variable ",
        r"the argument has been removed",
        r"unknown speculative type: ",
    ),
)


# Its start-up memory lines, by release: the weights as "load_tensors: CUDA0 model buffer size = X MiB"
# (older: "llm_load_tensors: CUDA0 buffer size = X MiB"), one line per device, host included; the KV
# cache as one total ("llama_kv_cache: size = X MiB (N cells, ...", older "llama_new_context_with_model:
# KV self size = X MiB") after one "KV buffer size" line per device.
_MODEL_BUFFER = re.compile(
    r"^(?:llm_)?load_tensors:\s+\S+ (?:model )?buffer size\s*=\s*(?P<mib>[\d.]+) MiB", re.MULTILINE
)
_KV_TOTAL = re.compile(
    r"(?:KV self size|llama_kv_cache(?:_unified)?: size)\s*=\s*(?P<mib>[\d.]+) MiB"
    r"(?: \(\s*(?P<cells>\d+) cells)?"
)
_KV_BUFFER = re.compile(r"^llama_kv_cache\w*:\s+\S+ KV buffer size\s*=\s*(?P<mib>[\d.]+) MiB", re.MULTILINE)
_MIB = 2**20
# The KV cache it could not allocate: the allocation that failed, then the KV cache's own complaint.
_KV_ALLOC_FAILED = re.compile(
    r"allocating (?P<mib>[\d.]+) MiB on device \d+: cudaMalloc failed.*?\n[^\n]*failed to allocate buffer for kv cache",
    re.IGNORECASE,
)


def memory_facts_of(log_text: str) -> base.MemoryFacts | None:
    """The weights (every device's model buffer, host included) and the KV cache (its total line, else
    the sum of its per-device buffers) a llama-server log states; None where it states neither."""
    lines = "\n".join(line.strip() for line in log_text.splitlines())
    weights = [float(m["mib"]) for m in _MODEL_BUFFER.finditer(lines)]
    total = _KV_TOTAL.search(lines)
    kv = float(total["mib"]) if total else sum(float(m["mib"]) for m in _KV_BUFFER.finditer(lines)) or None
    if not weights and kv is None:
        return None
    return base.MemoryFacts(
        weights_bytes=sum(weights) * _MIB if weights else None,
        kv_pool_bytes=kv * _MIB if kv is not None else None,
        kv_tokens=int(total["cells"]) if total and total["cells"] else None,
    )


class RequestTimings(BaseModel):
    """The ``timings`` object llama-server sends with the last event of a generation."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    predicted_per_second: float = 0.0
    draft_n: int | None = None
    draft_n_accepted: int | None = None

    @property
    def accept_length(self) -> float | None:
        """Tokens per target decode step (see :meth:`LlamaCppEngine.stream_generate`)."""
        if self.draft_n is None or self.draft_n_accepted is None:
            return None
        decoded = self.predicted_n - 1  # the first token comes from the prompt's logits
        steps = decoded - self.draft_n_accepted
        return decoded / steps if decoded > 0 and steps > 0 else None

    @property
    def decode_tok_s(self) -> float | None:
        """Tokens after the first per second of generation, as the client's figure counts them (the
        first token comes with the prompt's evaluation)."""
        if self.predicted_n < 2 or not self.predicted_ms:
            return None
        return (self.predicted_n - 1) / (self.predicted_ms / 1000)

    @property
    def draft_acceptance(self) -> float | None:
        """Accepted drafted tokens / drafted tokens."""
        if not self.draft_n or self.draft_n_accepted is None:
            return None
        return self.draft_n_accepted / self.draft_n


class RequestLog(BaseModel):
    """What llama-server logs when a request ends (``print_timings``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    eval_ms: float
    eval_tokens: int
    eval_tok_s: float
    draft_acceptance: float | None = None
    draft_accepted: int | None = None
    draft_generated: int | None = None
    mean_accept_length: float | None = None


# print_timings' generation line, by release: "eval time = X ms / N tokens (...)" since the server's
# log rewrite (late 2024), "generation eval time = X ms / N runs   (...)" in the 2024 builds (also as
# the "msg" of their --log-format json lines, whose other fields repeat it), "eval time = ... runs"
# before them. Any prefix (a slot tag, a timestamp, a process id) may lead.
_EVAL = re.compile(
    r"(?<!prompt )eval time =\s*(?P<ms>[\d.]+) ms /\s*(?P<n>\d+) (?:tokens|runs)"
    r"\s*\(\s*[\d.]+ ms per token,\s*(?P<tps>[\d.]+|inf|nan) tokens per second\)"
)
# The draft's line after it: "draft acceptance rate = R (A accepted / G generated)" (server speculation
# from Dec 2024), then "draft acceptance = R (...), mean len = L", and in the EAGLE3 builds "...,
# mean acceptance length = L, acceptance rate per position = (...)"; L is 1 + accepted / verify steps.
_DRAFT = re.compile(
    r"draft acceptance(?: rate)? = (?P<rate>[\d.]+) \(\s*(?P<acc>\d+) accepted /\s*(?P<gen>\d+) generated\)"
    r"(?:, mean (?:len|acceptance length) =\s*(?P<len>[\d.]+))?"
)


def parse_request_logs(log_text: str) -> list[RequestLog]:
    """Every finished request's ``eval time`` line, with the ``draft acceptance`` line after it. Where
    the draft line prints no mean length, the accept length is tokens per target step from the eval
    line's tokens and the accepted count, as a streamed request's ``timings`` give it."""
    found: list[RequestLog] = []
    for line in log_text.splitlines():
        eval_match = _EVAL.search(line)
        if eval_match is not None:
            tps = eval_match["tps"]
            found.append(
                RequestLog(
                    eval_ms=float(eval_match["ms"]),
                    eval_tokens=int(eval_match["n"]),
                    eval_tok_s=float(tps) if tps not in ("inf", "nan") else 0.0,
                )
            )
            continue
        draft_match = _DRAFT.search(line)
        if draft_match is not None and found and found[-1].draft_acceptance is None:
            accepted, generated = int(draft_match["acc"]), int(draft_match["gen"])
            mean = draft_match["len"]
            steps = RequestTimings(predicted_n=found[-1].eval_tokens, draft_n=generated, draft_n_accepted=accepted)
            found[-1] = found[-1].model_copy(
                update={
                    "draft_acceptance": float(draft_match["rate"]),
                    "draft_accepted": accepted,
                    "draft_generated": generated,
                    "mean_accept_length": float(mean) if mean is not None else steps.accept_length,
                }
            )
    return found


class HelpEntry(BaseModel):
    """One option of llama-server's ``--help``: its names (without dashes) and whether it takes a value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    names: list[str]
    long_names: list[str]
    takes_value: bool
    removed: bool


_DESCRIPTION_COLUMN = 40  # common_arg::to_string pads the invocation to 40 columns
_ENTRY_START = re.compile(r"^-{1,2}[A-Za-z0-9]")
_OPTION = re.compile(r"^-{1,2}[A-Za-z0-9][\w-]*$")


def parse_help_entries(help_text: str) -> list[HelpEntry]:
    """Read llama-server's ``--help``: entries start at column 0 (``-md,   --model-draft FNAME``),
    their description continues on lines indented by 40 spaces; section rules (``----- x -----``)
    are skipped. Only the invocation part counts, so a flag merely mentioned in a description is
    not taken as valid."""
    entries: list[HelpEntry] = []
    lines = help_text.splitlines()
    for index, line in enumerate(lines):
        if not _ENTRY_START.match(line) or line.startswith("---"):
            continue
        if len(line) > _DESCRIPTION_COLUMN and line[_DESCRIPTION_COLUMN - 3 : _DESCRIPTION_COLUMN] == "   ":
            invocation, description = line[:_DESCRIPTION_COLUMN], line[_DESCRIPTION_COLUMN:]
        else:  # an invocation too long for its column has its description on the next line
            following = lines[index + 1] if index + 1 < len(lines) else ""
            invocation, description = line, following.strip() if following.startswith(" ") else ""
        names: list[str] = []
        takes_value = False
        for part in invocation.split(","):
            words = part.split()
            if not words:
                continue
            if _OPTION.match(words[0]):
                names.append(words[0])
                takes_value = takes_value or len(words) > 1
        if not names:
            continue
        entries.append(
            HelpEntry(
                names=[n.lstrip("-") for n in names],
                long_names=[n[2:] for n in names if n.startswith("--")],
                takes_value=takes_value,
                removed="the argument has been removed" in description,
            )
        )
    return entries


def canonical_names(entries: list[HelpEntry]) -> dict[str, str]:
    """alias -> canonical long name: the first ``--`` name of its entry with the same ``no-`` sense."""
    mapping: dict[str, str] = {}
    for entry in entries:
        for name in entry.names:
            negated = name.startswith("no-")
            target = next((n for n in entry.long_names if n.startswith("no-") == negated), None)
            if target is not None and target != name:
                mapping[name] = target
    return mapping


class LlamaCppEngine(Engine):
    name = "llamacpp"
    speculation = SpeculationFlags(method=SPEC_TYPE, depth=DRAFT_N_MAX, draft_model=DRAFT_MODEL, unit="token")
    renamed_flags = _REMOVED
    reserved_flags = frozenset({"model", "m", "host", "port"})
    failure_rules = FAILURES
    metric_names = base.MetricNames(
        generated=METRICS_PREFIX + "tokens_predicted_total",
        drafts=METRICS_PREFIX + "spec_decode_num_drafts_total",
        accepted=METRICS_PREFIX + "spec_decode_num_accepted_tokens_total",
    )

    def __init__(self) -> None:
        self._aliases: dict[str, str] = dict(_KNOWN_ALIASES)

    def read_flag_set(self, launcher: list[str], *, env: Mapping[str, str] | None = None) -> FlagSet:
        """Every name of every option in llama-server's ``--help`` (short and long, no dashes),
        except the removed ones (``--draft-max``), which :attr:`renamed_flags` points onwards."""
        entries = parse_help_entries(run_help([*launcher, "--help"], env=env))
        self._aliases = {**_KNOWN_ALIASES, **canonical_names(entries)}
        return flag_set_from_entries(entries)

    def canonical(self, name: str) -> str:
        return self._aliases.get(name, name)

    def normalise(self, flags: Mapping[str, FlagValue]) -> LaunchPlan:
        """llama-server's launch-time rules (llama.cpp in llama-cpp-python 0.3.36): canonical names, a
        draft model only with ``--spec-type draft-simple``, ``none`` drops the draft, micro-batch at most
        the batch (docs/how-it-works.md, "llama.cpp")."""
        out: dict[str, FlagValue] = {}
        notes: list[str] = []
        for raw, value in flags.items():
            name = self.canonical(raw)
            if name != raw:
                notes.append(f"--{raw} is written --{name}")
            if name in out:
                raise InvalidConfig(f"--{name} is given twice (as --{raw} and another alias)")
            if value is False:
                continue
            out[name] = round(value, 6) if isinstance(value, float) else value

        spec_type = str(out[SPEC_TYPE]) if SPEC_TYPE in out else None
        types = {t.strip() for t in spec_type.split(",")} if spec_type is not None else set()
        if NO_SPECULATION in types:
            dropped = [n for n in out if n == DRAFT_MODEL or n.startswith("spec-draft-")]
            for name in dropped:
                del out[name]
            if dropped:
                notes.append(f"--spec-type none speculates nothing: dropped {', '.join('--' + n for n in dropped)}")
            out[SPEC_TYPE] = NO_SPECULATION
        elif DRAFT_MODEL in out and spec_type is None:
            raise InvalidConfig(
                f"--{DRAFT_MODEL} without --{SPEC_TYPE}: llama-server loads the draft and speculates nothing; "
                f"add --{SPEC_TYPE} draft-simple (or none)"
            )
        if "draft-simple" in types and DRAFT_MODEL not in out:
            raise InvalidConfig(f"--{SPEC_TYPE} draft-simple needs a draft model (--{DRAFT_MODEL})")

        if UBATCH in out:
            batch = int(out.get(BATCH, DEFAULT_BATCH))
            if int(out[UBATCH]) > batch:
                notes.append(f"--{UBATCH} {out[UBATCH]} is above the batch size: becomes {batch}")
                out[UBATCH] = batch
        return LaunchPlan(engine=self.name, flags=out, notes=notes)

    def draft_reads(self, flags: Mapping[str, FlagValue]) -> base.DraftReads | None:
        """draft-simple runs the draft model up to ``--spec-draft-n-max`` times (llama.cpp's default 3)
        per verify pass; ``--spec-draft-p-min`` may stop it sooner, so this is an upper bound."""
        types = {t.strip() for t in str(flags.get(SPEC_TYPE, NO_SPECULATION)).split(",")}
        if "draft-simple" not in types or DRAFT_MODEL not in flags:
            return None
        return base.DraftReads(model=str(flags[DRAFT_MODEL]), passes_per_verify=float(flags.get(DRAFT_N_MAX, 3)))

    def build_argv(self, launcher: list[str], *, model: str, plan: LaunchPlan, host: str, port: int) -> list[str]:
        # /metrics feeds the cross-check of the client's numbers; it costs nothing measurable.
        metrics = [] if "metrics" in plan.flags else ["--metrics"]
        return [*launcher, "--model", model, "--host", host, "--port", str(port), *flag_argv(plan.flags), *metrics]

    def effective_config(self, client: httpx.Client, base_url: str, plan: LaunchPlan) -> base.EffectiveConfig:
        """From ``/props``: slots (``parallel``), context per slot, model, build; from ``/slots`` (on
        by default): whether the slots speculate at all (``/props`` shows the request defaults'
        speculative types, not the server's)."""
        try:
            props = client.get(f"{base_url}/props", timeout=30.0).raise_for_status().json()
        except (httpx.HTTPError, ValueError) as exc:
            raise MeasurementError(f"cannot read the effective config from /props: {exc}") from None
        settings = props.get("default_generation_settings", {})
        values: dict[str, FlagValue | None] = {
            "parallel": props.get("total_slots"),
            "ctx-size-per-slot": settings.get("n_ctx"),
            "model": props.get("model_path"),
        }
        try:
            slots = client.get(f"{base_url}/slots", timeout=30.0)
            if slots.status_code == 200 and isinstance(slots.json(), list) and slots.json():
                values["speculative"] = bool(slots.json()[0].get("speculative"))
        except (httpx.HTTPError, ValueError):
            pass
        values = {k: v for k, v in values.items() if v is None or isinstance(v, (str, int, float, bool))}
        build = props.get("build_info")
        return base.EffectiveConfig(version=str(build) if build is not None else None, values=values)

    def memory_facts(self, log_text: str) -> base.MemoryFacts | None:
        return memory_facts_of(log_text)

    def pool_shortfall(self, reason: str) -> base.PoolShortfall | None:
        """llama.cpp allocates the KV cache of its whole context at once: a failed one printed its bytes."""
        found = _KV_ALLOC_FAILED.search(reason)
        return base.PoolShortfall(needed_bytes=float(found["mib"]) * _MIB) if found else None

    def log_figures(self, log_window: str) -> base.LogFigures:
        """Per finished request the log's ``eval time`` (tokens/s) and ``mean len`` (accept length,
        llama.cpp's: 1 + accepted / verify steps)."""
        requests = parse_request_logs(log_window)
        accepts = [r.mean_accept_length for r in requests if r.mean_accept_length is not None]
        return base.LogFigures(
            gen_tok_s={"server": [r.eval_tok_s for r in requests]} if requests else {}, accept_lengths=accepts
        )

    async def stream_generate(
        self, client: httpx.AsyncClient, base_url: str, prompt: Prompt, *, max_tokens: int, ignore_eos: bool
    ) -> AsyncIterator[base.StreamChunk]:
        """``POST /completion`` with ``stream``; one chunk per event.

        The accept length of a request is tokens per target decode step, from the last event's
        ``timings``: ``(predicted_n - 1) / (predicted_n - 1 - draft_n_accepted)`` (the first token
        comes from the prompt's logits; every later target step yields one token plus the drafted
        tokens it accepted). It equals llama.cpp's own ``mean len`` (1 + accepted / verify steps)
        when every step verifies a draft, and counts steps without a draft too (``--spec-draft-p-min``
        can leave a step undrafted), which is what throughput depends on.
        """
        body = {
            "prompt": prompt.text,
            "n_predict": max_tokens,
            "temperature": prompt.temperature,
            "ignore_eos": ignore_eos,
            "stream": True,
            "cache_prompt": True,
        }
        # A fresh connection per request: llama-server (cpp-httplib) may close a kept-alive
        # connection just as the next request is sent on it ("Server disconnected without
        # sending a response"), which would fail a measurement for nothing.
        headers = {"Connection": "close"}
        async for event in sse_events(
            client, f"{base_url}/completion", server="llama-server", body=body, headers=headers
        ):
            finished = bool(event.get("stop"))
            timings = RequestTimings.model_validate(event["timings"]) if "timings" in event else None
            yield base.StreamChunk(
                completion_tokens=int(event.get("tokens_predicted", 0)),
                prompt_tokens=event.get("tokens_evaluated"),
                finished=finished,
                accept_length=timings.accept_length if timings is not None and finished else None,
                finish_reason=_finish_reason(event.get("stop_type")) if finished else None,
                server_decode_tok_s=timings.decode_tok_s if timings is not None and finished else None,
            )


def flag_set_from_entries(entries: list[HelpEntry]) -> FlagSet:
    flags: set[str] = set()
    switches: set[str] = set()
    for entry in entries:
        if entry.removed:
            continue
        flags.update(entry.names)
        if not entry.takes_value:
            switches.update(entry.names)
    return FlagSet(flags=frozenset(flags), switches=frozenset(switches - {"h", "help", "usage"}))


def parse_llamacpp_help(help_text: str) -> FlagSet:
    """The flag set of a llama-server ``--help`` text."""
    return flag_set_from_entries(parse_help_entries(help_text))


def _finish_reason(stop_type: object) -> str | None:
    """llama-server's ``stop_type`` in OpenAI's words: ``limit`` -> length, ``eos``/``word`` -> stop."""
    if stop_type == "limit":
        return "length"
    if stop_type in ("eos", "word"):
        return "stop"
    return str(stop_type) if stop_type else None
