"""Pools ``signed_errors.py``'s lines: per span of launches before the predicted one, the median and p90 of
|predicted / measured - 1| (the benchmark's error), and the median signed log errors that split it:
log(predicted / true) (the model's own miss) and log(measured / true) (the launch's noise); and the share
of predictions above the truth.

Usage: python summary.py FILE.jsonl
"""

import json
import math
import statistics
import sys
from pathlib import Path

SPANS = ((3, 4), (5, 6), (10, 11), (3, 9), (10, 99))


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(0.9 * len(ordered)) - 1, 0)]


nights = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
print("| launches before | n | abs error vs measured: median / p90 | vs truth: median | log(pred/true) median | "
      "log(measured/true) median | share pred > true |")
print("|---|---|---|---|---|---|---|")
for low, high in SPANS:
    rows = [x for n in nights for x in n["launches"] if low <= x["before"] < high]
    if not rows:
        continue
    err = [abs(x["predicted"] / x["measured"] - 1) for x in rows]
    truth = [abs(x["predicted"] / x["true"] - 1) for x in rows]
    miss = [math.log(x["predicted"] / x["true"]) for x in rows]
    noise = [math.log(x["measured"] / x["true"]) for x in rows]
    above = sum(1 for m in miss if m > 0) / len(miss)
    span = f"{low}" if high == low + 1 else f"{low}-{high - 1 if high < 99 else 'end'}"
    print(f"| {span} | {len(rows)} | {statistics.median(err):.1%} / {p90(err):.1%} | {statistics.median(truth):.1%} | "
          f"{statistics.median(miss):+.1%} | "
          f"{statistics.median(noise):+.1%} | {above:.0%} |")
