"""What SGLang prints while it decodes: its ``Decode batch`` lines, read by field name."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

# SGLang's scheduler logs through Python logging with the format "[%(asctime)s{prefix}] %(message)s",
# the date "%Y-%m-%d %H:%M:%S" (some builds "%m-%d %H:%M:%S", some with milliseconds), and a prefix of
# rank tags, each present when its size is above 1: " DP{dp}" (also under DP attention), then, by
# release, " TP{tp} EP{ep} PP{pp}" or " PP{pp} ATTN_CP{cp} MOE_DP{moe_dp} TP{tp} EP{ep}".
_TAG = r"[A-Z]+(?:_[A-Z]+)*\d+"
_DECODE = re.compile(
    r"(?:\[(?P<time>(?:\d{4}-\d\d-\d\d |\d\d-\d\d )?\d\d:\d\d:\d\d)(?:[.,]\d+)?(?P<rank>(?: " + _TAG + r")+)?\]"
    r"|\[(?P<bare>" + _TAG + r"(?: " + _TAG + r")*)\])?"
    r"[^\[]*?(?:\[\d+\]\s*)?Decode batch(?: \[\d+\])?[.,:]?\s+(?P<fields>.*)$"
)
_FIELD = re.compile(r"\s*(?P<key>[^:,]+?):\s*(?P<value>[^,]+?)\s*(?:,|$)")
_RANK = re.compile(r"(?<![A-Z_])(?P<dim>[A-Z]+(?:_[A-Z]+)*)(?P<index>\d+)")


class DecodeBatchLine(BaseModel):
    """One ``Decode batch`` log line (plain or hybrid usage fields, with or without a rank tag)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    time: str | None
    rank: str | None = Field(description="the rank tag: TP0, DP1 TP4, PP0 TP0 ...; None when untagged")
    running_req: int
    tokens: int | None = Field(description="#token, or #full token on hybrid models")
    token_usage: float | None
    mamba_usage: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    cuda_graph: bool | None = None
    gen_throughput: float
    queue_req: int | None = None


def parse_decode_line(line: str) -> DecodeBatchLine | None:
    """Parse SGLang's ``Decode batch`` line by field name; None for any other line."""
    match = _DECODE.search(line.strip())
    if match is None:
        return None
    fields = {m["key"].strip(): m["value"].strip() for m in _FIELD.finditer(match["fields"])}

    def number(*keys: str) -> float | None:
        for key in keys:
            if key in fields:
                try:
                    return float(fields[key])
                except ValueError:
                    return None
        return None

    running, throughput = number("#running-req"), number("gen throughput (token/s)")
    if running is None or throughput is None:
        return None
    tokens = number("#token", "#full token")
    queue = number("#queue-req")
    graph = next((fields[k] for k in fields if k.endswith(" graph")), None)
    return DecodeBatchLine(
        time=match["time"],
        rank=(match["rank"] or match["bare"] or "").strip() or None,
        running_req=int(running),
        tokens=int(tokens) if tokens is not None else None,
        token_usage=number("token usage", "full token usage"),
        mamba_usage=number("mamba usage"),
        accept_len=number("accept len"),
        accept_rate=number("accept rate"),
        cuda_graph=graph == "True" if graph is not None else None,
        gen_throughput=throughput,
        queue_req=int(queue) if queue is not None else None,
    )


def decode_group(rank: str | None) -> tuple[str, tuple[int, ...]]:
    """A rank tag's data-parallel group (``DP1``; ``""`` without one) and its place in the group
    (the other dimensions' indices): ``DP1 TP4`` -> ``("DP1", (4,))``. Only ``DP`` names a group:
    ``MOE_DP`` and ``ATTN_CP`` ranks split the experts or the attention of one batch."""
    group, place = "", []
    for match in _RANK.finditer(rank or ""):
        if match["dim"] == "DP":
            group = f"DP{match['index']}"
        else:
            place.append(int(match["index"]))
    return group, tuple(place)
