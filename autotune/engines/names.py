"""Engine flags spelled short for a table's columns and a figure's labels."""

from __future__ import annotations

_SHORT = {"speculative-": "", "num-": "", "eagle-": "", "-memory": "", "-requests": "-reqs", "cuda-graph-": "graph-"}


def short_flag(name: str) -> str:
    """A column header short enough for a table: ``speculative-num-draft-tokens`` -> ``draft-tokens``."""
    for long, short in _SHORT.items():
        name = name.replace(long, short)
    return name


def short_name(flag: str) -> str:
    """A flag as a figure's label names it: ``speculative-num-steps`` -> ``steps``."""
    return flag.removeprefix("speculative-").replace("num-", "")
