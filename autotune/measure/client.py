"""Measurement: the benchmark client and the summary of its requests (the statistics it uses are
in :mod:`autotune.measure.statistics`).

The protocol: the engine's lifetime counters are reset, warm-up requests are sent and discarded,
then *rounds* run: each round sends every prompt of the suite once, at the configured concurrency.
Each round yields one value of the objective; rounds continue until the 95% confidence interval of
their mean is within the target relative width, or a cap on rounds or time is hit. Early and late
rounds are compared to flag drift. httpx errors are translated here into MeasurementError.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from autotune.engines.base import Engine, ServerStats, StreamChunk
from autotune.errors import MeasurementError
from autotune.measure.protocol import MeasureSettings, ObjectiveMetric
from autotune.measure.statistics import Metric, Steadiness, mean_metric, percentile, relative_ci95, steadiness
from autotune.measure.suites import Prompt, Suite
from autotune.models import Frozen

if TYPE_CHECKING:
    import httpx

# httpx and asyncio (~0.15 s to import) are imported where requests are made: reading a study's
# measurements (show, export, report) needs only the models above.

OBJECTIVE_UNITS: dict[str, str] = {"decode_tok_s": "tok/s", "output_tok_s": "tok/s"}


class RequestRecord(Frozen):
    prompt_id: str
    category: str
    round: int = Field(description="0-based round; -1 for warm-up")
    prompt_tokens: int | None
    completion_tokens: int
    ttft_s: float
    e2e_s: float
    decode_tok_s: float | None = Field(
        description="the rate that counts: the server's own where it reports one, else the stream's timing"
    )
    client_decode_tok_s: float | None = Field(
        default=None, description="tokens after the first streamed update / time after it, as the client saw them"
    )
    server_decode_tok_s: float | None = Field(default=None, description="the server's own figure for this request")
    dropped: str | None = Field(default=None, description="why this request gives no decode rate")
    itl_s: list[float] = Field(default_factory=list, description="inter-token latency, one entry per token")
    accept_length: float | None
    finish_reason: str | None
    resent: str | None = Field(
        default=None, description="why it was sent a second time (its first send got no response)"
    )

    def describe(self) -> str:
        return f"prompt {self.prompt_id!r}" + (f" (round {self.round + 1})" if self.round >= 0 else " (warm-up)")


class CategoryStats(Frozen):
    category: str
    requests: int
    decode_tok_s: Metric
    accept_length: Metric | None


class Measurement(Frozen):
    """One measurement of one server at one concurrency."""

    objective: ObjectiveMetric
    concurrency: int
    max_tokens_cap: int | None
    ignore_eos: bool
    warmup_requests: int
    rounds: int
    round_values: list[float]
    precision_target: float
    precision_reached: bool
    stop_reason: str
    steadiness: Steadiness | None
    metrics: list[Metric]
    categories: list[CategoryStats]
    server: ServerStats | None = None
    duration_s: float
    requests: list[RequestRecord]
    early_stopped: bool = Field(default=False, description="stopped as hopeless against the best so far")
    dropped: list[str] = Field(default_factory=list, description="requests whose decode rate did not count, and why")
    resent: list[str] = Field(
        default_factory=list, description="requests sent a second time on a fresh connection, and why"
    )

    def metric(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)

    @property
    def value(self) -> float:
        metric = self.metric(self.objective)
        assert metric is not None
        return metric.value


def round_throughput(records: Sequence[RequestRecord], wall_s: float) -> float:
    """The round's aggregate output tok/s: it needs no stream timing."""
    return sum(r.completion_tokens for r in records) / wall_s


def round_value(objective: ObjectiveMetric, records: Sequence[RequestRecord], wall_s: float) -> float | None:
    """The round's figure; None when no request of it gave a decode rate (every stream untimed)."""
    if objective == "output_tok_s":
        return round_throughput(records, wall_s)
    rates = [r.decode_tok_s for r in records if r.decode_tok_s is not None]
    return statistics.fmean(rates) if rates else None


def untimed_reason(records: Sequence[RequestRecord]) -> str:
    """Why a round's requests gave no decode rate, as the first of them says."""
    reasons = sorted({r.dropped for r in records if r.dropped}) or ["one streamed update each"]
    return reasons[0]


def accept_length(records: Sequence[RequestRecord]) -> Metric | None:
    """Accepted tokens per verify step as the engines report it over a window: the ratio of sums
    (every request's tokens over every request's steps), not the mean of per-request ratios."""
    pairs = [(r.completion_tokens, r.accept_length) for r in records if r.accept_length]
    if not pairs:
        return None
    per_request = mean_metric("accept_length", "tok/step", [length for _, length in pairs])
    steps = sum(tokens / length for tokens, length in pairs)
    value = sum(tokens for tokens, _ in pairs) / steps if steps else per_request.value
    return per_request.model_copy(update={"value": value})


def summarise(
    records: Sequence[RequestRecord],
    round_values: Sequence[float],
    settings: MeasureSettings,
    *,
    stop_reason: str,
    duration_s: float,
    early_stopped: bool = False,
    round_output_tok_s: Sequence[float] = (),
) -> Measurement:
    measured = [r for r in records if r.round >= 0]
    objective = mean_metric(settings.objective, OBJECTIVE_UNITS[settings.objective], round_values)
    rel = objective.rel_ci95
    return Measurement(
        objective=settings.objective,
        concurrency=settings.concurrency,
        max_tokens_cap=settings.max_tokens,
        ignore_eos=settings.ignore_eos,
        warmup_requests=settings.warmup_requests,
        rounds=len(round_values),
        round_values=list(round_values),
        precision_target=settings.target_rel_ci,
        precision_reached=rel is not None and rel <= settings.target_rel_ci,
        stop_reason=stop_reason,
        steadiness=steadiness(round_values, tolerance=settings.drift_tolerance),
        metrics=[objective, *_other_metrics(records, settings, round_output_tok_s)],
        categories=_categories(measured),
        duration_s=duration_s,
        requests=list(records),
        early_stopped=early_stopped,
        dropped=[f"{r.describe()}: {r.dropped}" for r in measured if r.dropped],
        resent=[f"{r.describe()}: {r.resent}" for r in records if r.resent],
    )


def _other_metrics(
    records: Sequence[RequestRecord], settings: MeasureSettings, round_output_tok_s: Sequence[float]
) -> list[Metric]:
    """The figures beside the objective: the other rate, the accept length, p95 latencies, tokens out and in."""
    measured = [r for r in records if r.round >= 0]
    metrics = []
    if settings.objective != "output_tok_s" and round_output_tok_s:
        # Aggregate throughput at this load: with the per-request speed, the two axes of a load level.
        metrics.append(mean_metric("output_tok_s", "tok/s", round_output_tok_s))
    if settings.objective != "decode_tok_s":
        rates = [r.decode_tok_s for r in measured if r.decode_tok_s is not None]
        if rates:
            metrics.append(mean_metric("decode_tok_s", "tok/s", rates))
    accepted = accept_length(measured)
    if accepted is not None:
        metrics.append(accepted)
    ttfts = [r.ttft_s for r in measured]
    itls = [gap for r in measured for gap in r.itl_s]
    metrics.append(
        Metric(name="p95_ttft_s", unit="s", value=percentile(ttfts, 95), n=len(ttfts), higher_is_better=False)
    )
    if itls:
        metrics.append(
            Metric(name="p95_itl_s", unit="s", value=percentile(itls, 95), n=len(itls), higher_is_better=False)
        )
    metrics.append(
        Metric(name="completion_tokens", unit="tok", value=sum(r.completion_tokens for r in records), n=len(records))
    )
    prompts = [r.prompt_tokens for r in records if r.prompt_tokens is not None]
    if prompts:
        metrics.append(Metric(name="prompt_tokens", unit="tok", value=sum(prompts), n=len(prompts)))
    return metrics


def _categories(measured: Sequence[RequestRecord]) -> list[CategoryStats]:
    """Decode rate and accept length per prompt category (those with a decode rate)."""
    categories = []
    for category in sorted({r.category for r in measured}):
        group = [r for r in measured if r.category == category]
        rates = [r.decode_tok_s for r in group if r.decode_tok_s is not None]
        if rates:
            categories.append(
                CategoryStats(
                    category=category,
                    requests=len(group),
                    decode_tok_s=mean_metric("decode_tok_s", "tok/s", rates),
                    accept_length=accept_length(group),
                )
            )
    return categories


# ---------------------------------------------------------------- the client


async def measure_request(
    engine: Engine,
    client: httpx.AsyncClient,
    base_url: str,
    prompt: Prompt,
    *,
    max_tokens: int,
    ignore_eos: bool,
    round_index: int,
    clock: Callable[[], float] = time.perf_counter,
) -> RequestRecord:
    """Stream one prompt and time every update; sent once more on a fresh connection when the first
    send got no response (see :mod:`autotune.connection`)."""
    import httpx

    from autotune.connection import counting_resends

    timed = _TimedStream(clock())
    resent: list[str] = []
    try:
        with counting_resends() as resent:
            stream = engine.stream_generate(client, base_url, prompt, max_tokens=max_tokens, ignore_eos=ignore_eos)
            async for chunk in stream:
                timed.update(chunk, clock())
    except httpx.TimeoutException:
        raise MeasurementError(f"request for prompt {prompt.id!r} timed out") from None
    except httpx.HTTPStatusError as exc:
        raise MeasurementError(f"prompt {prompt.id!r}: server answered HTTP {exc.response.status_code}") from None
    except httpx.HTTPError as exc:
        again = f" (sent twice: the first got no response: {resent[0]})" if resent else ""
        raise MeasurementError(f"prompt {prompt.id!r}: {type(exc).__name__}: {exc}{again}") from None
    except MeasurementError as exc:  # the server refused it: which prompt matters (a long one may not fit)
        raise MeasurementError(f"prompt {prompt.id!r}: {exc.message}") from None
    return timed.record(prompt, round_index, resent=resent[0] if resent else None)


class _TimedStream:
    """One request's stream as it arrives: when each update came, and what the chunks said."""

    def __init__(self, started: float) -> None:
        self.started = self.last_at = started
        self.first_at: float | None = None
        self.first_tokens = self.tokens = 0
        self.itl: list[float] = []
        self.prompt_tokens: int | None = None
        self.accept: float | None = None
        self.finish: str | None = None
        self.server_rate: float | None = None

    def update(self, chunk: StreamChunk, now: float) -> None:
        if chunk.completion_tokens > self.tokens:  # a chunk may carry several tokens (a verify step's)
            if self.first_at is None:
                self.first_at, self.first_tokens = now, chunk.completion_tokens
            else:
                new = chunk.completion_tokens - self.tokens
                self.itl.extend([(now - self.last_at) / new] * new)
            self.last_at = now
            self.tokens = chunk.completion_tokens
        self.prompt_tokens = chunk.prompt_tokens if chunk.prompt_tokens is not None else self.prompt_tokens
        self.accept = chunk.accept_length if chunk.accept_length is not None else self.accept
        self.finish = chunk.finish_reason or self.finish
        if chunk.server_decode_tok_s is not None:
            self.server_rate = chunk.server_decode_tok_s

    def record(self, prompt: Prompt, round_index: int, *, resent: str | None) -> RequestRecord:
        if self.first_at is None:
            raise MeasurementError(f"prompt {prompt.id!r}: the server streamed no tokens")
        ttft, e2e = self.first_at - self.started, self.last_at - self.started
        client_rate, burst = stream_rate(self.first_tokens, self.tokens, ttft, e2e)
        return RequestRecord(
            prompt_id=prompt.id,
            category=prompt.category,
            round=round_index,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.tokens,
            ttft_s=ttft,
            e2e_s=e2e,
            decode_tok_s=self.server_rate if self.server_rate is not None else client_rate,
            client_decode_tok_s=client_rate,
            server_decode_tok_s=self.server_rate,
            dropped=burst if self.server_rate is None else None,
            itl_s=self.itl,
            accept_length=self.accept,
            finish_reason=self.finish,
            resent=resent,
        )


def stream_rate(first_tokens: int, tokens: int, ttft_s: float, e2e_s: float) -> tuple[float | None, str | None]:
    """The decode rate the stream's timing shows (tokens after the first update / time after it),
    or None with the reason when it shows none.

    A server may hold its stream back and flush it late (llama-server on a busy CPU, a proxy's
    buffer): the tokens then arrive in a burst whose span says nothing about decoding. Two shapes:
    most tokens in the first update, or every token after the first inside a sliver of the request's
    time. A speculating server's multi-token chunks are neither: its updates still span the decode."""
    decode_tokens, span = tokens - first_tokens, e2e_s - ttft_s
    if decode_tokens <= 0 or span <= 0:
        return None, "one streamed update: no decode time to divide by" if tokens > 1 else None
    if first_tokens * 2 > tokens:
        return None, f"{first_tokens} of {tokens} tokens arrived in the first update"
    if span < BURST_SHARE * e2e_s:
        return None, (
            f"{decode_tokens} tokens arrived within {span * 1000:.3g} ms of a {e2e_s:.3g} s request "
            "(streamed in a burst)"
        )
    return decode_tokens / span, None


# Below this share of a request's time, the updates after the first came in one flush, not as decoded.
BURST_SHARE = 0.05


Progress = Callable[[str], None]


async def run_measurement(
    engine: Engine,
    base_url: str,
    suite: Suite,
    settings: MeasureSettings,
    *,
    client: httpx.AsyncClient | None = None,
    on_progress: Progress | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Reset the server's counters, warm up, then run rounds until precise, or until a cap."""
    import httpx

    from autotune.connection import server_client

    own_client = client is None
    client = client or server_client(timeout_s=settings.request_timeout_s)
    prompts = suite.prompts[: settings.prompts_per_round] if settings.prompts_per_round else suite.prompts
    sender = _Sender(engine, client, base_url, settings, clock)
    started = clock()
    rounds = _Rounds()
    try:
        try:
            await engine.reset_stats(client, base_url)
        except httpx.HTTPError as exc:
            raise MeasurementError(f"cannot reset the server's statistics: {exc}") from None
        if settings.warmup_requests:
            _report(on_progress, f"warm-up ({settings.warmup_requests} requests)")
            warm = [prompts[i % len(prompts)] for i in range(settings.warmup_requests)]
            rounds.records += await sender.send(warm, -1)
        await _run_rounds(sender, prompts, settings, rounds, on_progress=on_progress, clock=clock, started=started)
    finally:
        if own_client:
            await client.aclose()
    if not rounds.values:
        raise MeasurementError(f"no round of {len(rounds.untimed)} gave a decode rate: {rounds.untimed[0]}")
    return summarise(
        rounds.records,
        rounds.values,
        settings,
        stop_reason=rounds.stop_reason,
        duration_s=clock() - started,
        early_stopped=rounds.early_stopped,
        round_output_tok_s=rounds.output,
    )


def _report(on_progress: Progress | None, text: str) -> None:
    if on_progress is not None:
        on_progress(text)


class _Sender:
    """Sends a batch of prompts, ``settings.concurrency`` at a time, each streamed and timed."""

    def __init__(
        self,
        engine: Engine,
        client: httpx.AsyncClient,
        base_url: str,
        settings: MeasureSettings,
        clock: Callable[[], float],
    ) -> None:
        self.engine, self.client, self.base_url, self.settings, self.clock = engine, client, base_url, settings, clock

    def cap(self, prompt: Prompt) -> int:
        return min(prompt.max_tokens, self.settings.max_tokens) if self.settings.max_tokens else prompt.max_tokens

    async def send(self, batch: Sequence[Prompt], round_index: int) -> list[RequestRecord]:
        import asyncio

        queue = list(enumerate(batch))
        results: list[RequestRecord | None] = [None] * len(batch)

        async def worker() -> None:
            while queue:
                index, prompt = queue.pop(0)
                results[index] = await measure_request(
                    self.engine,
                    self.client,
                    self.base_url,
                    prompt,
                    max_tokens=self.cap(prompt),
                    ignore_eos=self.settings.ignore_eos,
                    round_index=round_index,
                    clock=self.clock,
                )

        await asyncio.gather(*(worker() for _ in range(min(self.settings.concurrency, len(batch)))))
        return [r for r in results if r is not None]


class _Rounds:
    """What the rounds have measured so far, and why they stopped."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.values: list[float] = []
        self.output: list[float] = []
        self.untimed: list[str] = []  # why each round without a decode rate had none
        self.stop_reason = ""
        self.early_stopped = False


async def _run_rounds(
    sender: _Sender,
    prompts: Sequence[Prompt],
    settings: MeasureSettings,
    rounds: _Rounds,
    *,
    on_progress: Progress | None,
    clock: Callable[[], float],
    started: float,
) -> None:
    """Rounds over the suite until the objective's interval is precise enough, the trial is hopeless,
    or a cap on rounds or time is reached."""
    # A round holds at least one request per concurrent user (the suite repeated), so a level of 16
    # over a suite of 12 prompts measures 16 users at once, not 12.
    round_prompts = [prompts[i % len(prompts)] for i in range(max(len(prompts), settings.concurrency))]
    rounds.stop_reason = f"max rounds ({settings.max_rounds})"
    for round_index in range(settings.max_rounds):
        precision = f", ±{relative_ci95(rounds.values):.1%}" if len(rounds.values) > 1 else ""
        _report(on_progress, f"round {round_index + 1}{precision}")
        round_started = clock()
        batch = await sender.send(round_prompts, round_index)
        rounds.records += batch
        round_s = clock() - round_started
        rounds.output.append(round_throughput(batch, round_s))
        value = round_value(settings.objective, batch, round_s)
        if value is None:  # one stalled round (a flush on a loaded host) is not the measurement's end ...
            rounds.untimed.append(untimed_reason(batch))
            _report(on_progress, f"round {round_index + 1}: no decode rate: {rounds.untimed[-1]}")
            if len(rounds.untimed) > max(len(rounds.values), 1):  # ... but most rounds stalled is the server's way
                rounds.stop_reason = f"{len(rounds.untimed)} rounds without a decode rate"
                return
            continue
        rounds.values.append(value)
        so_far = statistics.fmean(rounds.values)
        if settings.early_stop is not None and settings.early_stop.hopeless(so_far):
            rounds.early_stopped = True
            rounds.stop_reason = (
                f"early stop: {so_far:.3g} cannot plausibly reach the best {settings.early_stop.bar:.3g} "
                f"(noise ±{settings.early_stop.noise_rel:.0%} sd)"
            )
            return
        if len(rounds.values) >= max(settings.min_rounds, 2) and relative_ci95(rounds.values) <= settings.target_rel_ci:
            rounds.stop_reason = f"precision ±{settings.target_rel_ci:.0%} reached"
            return
        if clock() - started >= settings.max_seconds:
            rounds.stop_reason = f"time cap ({settings.max_seconds:.0f} s)"
            return


async def greedy_texts(client: httpx.AsyncClient, base_url: str, prompts: Sequence[str], *, tokens: int) -> list[str]:
    """Each prompt's first ``tokens`` greedy tokens as text, one request at a time (one stream in
    the batch, as the reference ran). OpenAI's ``/v1/completions`` is served alike by SGLang, vLLM
    and llama-server (the model named as ``/v1/models`` lists it), so no engine needs a text path."""
    import httpx

    # llama-server may drop a kept-alive connection just as a request is sent (see llamacpp.py).
    headers = {"Connection": "close"}
    try:
        listed = await client.get(f"{base_url}/v1/models", headers=headers)
        listed.raise_for_status()
        model = listed.json()["data"][0]["id"]
        texts = []
        for prompt in prompts:
            body = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": False}
            response = await client.post(f"{base_url}/v1/completions", json=body, headers=headers)
            response.raise_for_status()
            texts.append(str(response.json()["choices"][0]["text"]))
    except httpx.HTTPStatusError as exc:
        raise MeasurementError(f"output check: server answered HTTP {exc.response.status_code}") from None
    except httpx.HTTPError as exc:
        raise MeasurementError(f"output check: {type(exc).__name__}: {exc}") from None
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise MeasurementError(f"output check: unexpected answer ({type(exc).__name__}: {exc})") from None
    return texts
