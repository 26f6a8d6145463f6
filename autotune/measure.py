"""Measurement: the benchmark client and the statistics over its requests.

Warm-up requests are sent and discarded, then the suite's prompts are sent in order (cycling) at
the configured concurrency. Per request: prompt and completion tokens, time to first token,
decode tok/s over the tokens after the first streamed update, accept length from the engine's
per-request stats. httpx errors are translated here into :class:`MeasurementError`.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Callable, Sequence

import httpx
from pydantic import BaseModel, ConfigDict, Field

from autotune.engines.base import Engine
from autotune.errors import MeasurementError
from autotune.workload import Prompt, Suite


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Metric(_Frozen):
    """A number with its unit, direction and uncertainty."""

    name: str
    unit: str
    value: float
    ci95: float | None = Field(default=None, description="half width of the 95% confidence interval")
    n: int
    higher_is_better: bool = True


class RequestRecord(_Frozen):
    prompt_id: str
    category: str
    prompt_tokens: int | None
    completion_tokens: int
    ttft_s: float
    e2e_s: float
    decode_tok_s: float | None = Field(description="tokens after the first update / time after it")
    accept_length: float | None
    finish_reason: str | None


class CategoryStats(_Frozen):
    category: str
    requests: int
    decode_tok_s: Metric
    accept_length: Metric | None


class Measurement(_Frozen):
    requests: list[RequestRecord]
    warmup_requests: int
    concurrency: int
    metrics: list[Metric]
    categories: list[CategoryStats]
    duration_s: float

    def metric(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)


def mean_metric(name: str, unit: str, values: Sequence[float], *, higher_is_better: bool = True) -> Metric:
    """Mean with a normal-approximation 95% interval (t quantile for small n)."""
    n = len(values)
    mean = statistics.fmean(values)
    ci = None
    if n >= 2:
        t = _t95(n - 1)
        ci = t * statistics.stdev(values) / math.sqrt(n)
    return Metric(name=name, unit=unit, value=mean, ci95=ci, n=n, higher_is_better=higher_is_better)


def _t95(dof: int) -> float:
    # Two-sided 95% Student t quantiles; beyond 30 degrees of freedom the normal value is close.
    table = {
        1: 12.71,
        2: 4.303,
        3: 3.182,
        4: 2.776,
        5: 2.571,
        6: 2.447,
        7: 2.365,
        8: 2.306,
        9: 2.262,
        10: 2.228,
        12: 2.179,
        15: 2.131,
        20: 2.086,
        25: 2.060,
        30: 2.042,
    }
    for limit in sorted(table):
        if dof <= limit:
            return table[limit]
    return 1.96


def summarise(records: Sequence[RequestRecord], *, warmup: int, concurrency: int, duration_s: float) -> Measurement:
    rates = [r.decode_tok_s for r in records if r.decode_tok_s is not None]
    if not rates:
        raise MeasurementError("no request produced more than one streamed update; cannot compute decode tok/s")
    metrics = [
        mean_metric("decode_tok_s", "tok/s", rates),
        mean_metric("ttft_s", "s", [r.ttft_s for r in records], higher_is_better=False),
        Metric(name="completion_tokens", unit="tok", value=sum(r.completion_tokens for r in records), n=len(records)),
    ]
    accepts = [r.accept_length for r in records if r.accept_length is not None]
    if accepts:
        metrics.append(mean_metric("accept_length", "tok/step", accepts))
    categories = []
    for category in sorted({r.category for r in records}):
        group = [r for r in records if r.category == category]
        cat_rates = [r.decode_tok_s for r in group if r.decode_tok_s is not None]
        cat_accepts = [r.accept_length for r in group if r.accept_length is not None]
        if not cat_rates:
            continue
        categories.append(
            CategoryStats(
                category=category,
                requests=len(group),
                decode_tok_s=mean_metric("decode_tok_s", "tok/s", cat_rates),
                accept_length=mean_metric("accept_length", "tok/step", cat_accepts) if cat_accepts else None,
            )
        )
    return Measurement(
        requests=list(records),
        warmup_requests=warmup,
        concurrency=concurrency,
        metrics=metrics,
        categories=categories,
        duration_s=duration_s,
    )


async def measure_request(
    engine: Engine, client: httpx.AsyncClient, base_url: str, prompt: Prompt, *, max_tokens: int
) -> RequestRecord:
    """Stream one prompt and time it."""
    started = time.perf_counter()
    first_at: float | None = None
    first_tokens = 0
    last_at = started
    tokens = 0
    prompt_tokens: int | None = None
    accept: float | None = None
    finish: str | None = None
    try:
        async for chunk in engine.stream_generate(client, base_url, prompt, max_tokens=max_tokens):
            now = time.perf_counter()
            if chunk.completion_tokens > tokens:
                if first_at is None:
                    first_at, first_tokens = now, chunk.completion_tokens
                last_at = now
                tokens = chunk.completion_tokens
            prompt_tokens = chunk.prompt_tokens if chunk.prompt_tokens is not None else prompt_tokens
            accept = chunk.accept_length if chunk.accept_length is not None else accept
            finish = chunk.finish_reason or finish
    except httpx.TimeoutException:
        raise MeasurementError(f"request for prompt {prompt.id!r} timed out") from None
    except httpx.HTTPStatusError as exc:
        raise MeasurementError(f"prompt {prompt.id!r}: server answered HTTP {exc.response.status_code}") from None
    except httpx.HTTPError as exc:
        raise MeasurementError(f"prompt {prompt.id!r}: {type(exc).__name__}: {exc}") from None
    if first_at is None:
        raise MeasurementError(f"prompt {prompt.id!r}: the server streamed no tokens")
    decode_s = last_at - first_at
    decode_tokens = tokens - first_tokens
    return RequestRecord(
        prompt_id=prompt.id,
        category=prompt.category,
        prompt_tokens=prompt_tokens,
        completion_tokens=tokens,
        ttft_s=first_at - started,
        e2e_s=last_at - started,
        decode_tok_s=decode_tokens / decode_s if decode_tokens > 0 and decode_s > 0 else None,
        accept_length=accept,
        finish_reason=finish,
    )


class MeasureSettings(_Frozen):
    warmup_requests: int = 2
    requests: int = 8
    concurrency: int = 1
    max_tokens: int | None = None
    request_timeout_s: float = 300.0


async def run_measurement(
    engine: Engine,
    base_url: str,
    suite: Suite,
    settings: MeasureSettings,
    *,
    client: httpx.AsyncClient | None = None,
    on_request: Callable[[int, int], None] | None = None,
) -> Measurement:
    """Warm up, then send ``settings.requests`` prompts of the suite in order at the concurrency."""
    own_client = client is None
    client = client or httpx.AsyncClient(timeout=httpx.Timeout(settings.request_timeout_s, connect=10.0))
    started = time.perf_counter()
    try:
        prompts = suite.prompts

        def cap(prompt: Prompt) -> int:
            return min(prompt.max_tokens, settings.max_tokens) if settings.max_tokens else prompt.max_tokens

        for i in range(settings.warmup_requests):
            warm = prompts[i % len(prompts)]
            await measure_request(engine, client, base_url, warm, max_tokens=cap(warm))
        queue = [prompts[i % len(prompts)] for i in range(settings.requests)]
        records: list[RequestRecord | None] = [None] * len(queue)
        done = 0
        next_index = 0

        async def worker() -> None:
            nonlocal done, next_index
            while next_index < len(queue):
                index = next_index
                next_index += 1
                prompt = queue[index]
                records[index] = await measure_request(engine, client, base_url, prompt, max_tokens=cap(prompt))
                done += 1
                if on_request is not None:
                    on_request(done, len(queue))

        await asyncio.gather(*(worker() for _ in range(min(settings.concurrency, len(queue)))))
    finally:
        if own_client:
            await client.aclose()
    return summarise(
        [r for r in records if r is not None],
        warmup=settings.warmup_requests,
        concurrency=settings.concurrency,
        duration_s=time.perf_counter() - started,
    )
