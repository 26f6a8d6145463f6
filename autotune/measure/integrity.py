"""Before a measurement counts: its figures must agree with each other.

A request whose stream cannot time its decoding (it arrived in a burst, and the server reported no
timing of its own) is dropped and named; when most requests are dropped, or the client's decode
rate is far above what the server itself logged over the same window, the measurement fails with
one line naming the check. The numbers here are bounds no honest measurement comes near: the
server's logged generation throughput covers the whole batch, so a single stream's rate cannot
legitimately exceed it by much, and a rate resting on fewer than half the requests is not the suite's.
"""

from __future__ import annotations

from autotune.measure.client import Measurement

# A decode rate above the memory-bandwidth ceiling (every weight read once per verify pass) is
# possible only where a pass reads less than every weight: a mixture of experts reads its active
# experts alone, down to a twentieth of them. Beyond that no model decodes; the figure is wrong.
CEILING_FACTOR = 20.0

# The client's decode rate may exceed the server's logged throughput this much before the two
# cannot both be true: vLLM's and SGLang's logged figure averages over an interval that includes
# prefills and idle gaps between requests (a vLLM twin logged 18 tok/s beside a true 57); a stream
# timed on a flush is off by hundreds of times.
SERVER_FACTOR = 10.0
# Busy log lines the server's figure must rest on before it is held against the client's: one or two
# lines of a short measurement are mostly the idle edges of their interval (a vLLM twin on a loaded
# machine logged 5 tok/s over one line beside a true 56 for 2 x 24 tokens).
MIN_SERVER_LINES = 3


def failed_check(measurement: Measurement) -> str | None:
    """The first check the measurement fails, as one line; None when its figures agree."""
    measured = [r for r in measurement.requests if r.round >= 0]
    dropped = [r for r in measured if r.dropped]
    if measured and len(dropped) * 2 > len(measured):
        first = dropped[0]
        return (
            f"{len(dropped)} of {len(measured)} requests gave no decode rate the client could time, e.g. "
            f"{first.describe()}: {first.dropped}"
        )
    decode = measurement.metric("decode_tok_s")
    stats = measurement.server
    server = stats.gen_tok_s if stats is not None and stats.log_lines >= MIN_SERVER_LINES else None
    if decode is not None and server and decode.value > SERVER_FACTOR * server:
        return (
            f"decode {decode.value:.4g} tok/s is more than {SERVER_FACTOR:g}x the {server:.4g} tok/s the server "
            "logged over the same requests"
        )
    return None


def above_ceiling(decode_tok_s: float, ceiling_tok_s: float) -> str | None:
    """Why a decode rate cannot be physical (far above what the GPUs' bandwidth allows), or None."""
    if ceiling_tok_s <= 0 or decode_tok_s <= CEILING_FACTOR * ceiling_tok_s:
        return None
    return (
        f"integrity check: decode {decode_tok_s:.4g} tok/s is more than {CEILING_FACTOR:g}x the "
        f"{ceiling_tok_s:.4g} tok/s the GPUs' memory bandwidth allows at this accept length"
    )
