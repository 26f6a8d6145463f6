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

# The client's decode rate may exceed the server's logged throughput this much (the server's
# figure averages over busy intervals that include prefills) before the two cannot both be true.
SERVER_FACTOR = 2.0


def failed_check(measurement: Measurement) -> str | None:
    """The first check the measurement fails, as one line; None when its figures agree."""
    measured = [r for r in measurement.requests if r.round >= 0]
    dropped = [r for r in measured if r.dropped]
    if measured and len(dropped) * 2 > len(measured):
        first = dropped[0]
        return (f"{len(dropped)} of {len(measured)} requests gave no decode rate the client could time, e.g. "
                f"{first.describe()}: {first.dropped}")  # fmt: skip
    decode = measurement.metric("decode_tok_s")
    server = measurement.server.gen_tok_s if measurement.server is not None else None
    if decode is not None and server and decode.value > SERVER_FACTOR * server:
        return (f"decode {decode.value:.4g} tok/s is more than {SERVER_FACTOR:g}x the {server:.4g} tok/s the server "
                "logged over the same requests")  # fmt: skip
    return None
