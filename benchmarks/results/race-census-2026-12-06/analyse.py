"""The census's classes and the offline what-if (not the product), from race_census.py's JSON lines.

For each night whose confirmed answer is truly at least 2 points worse than the search's incumbent (its best
measured launch): the class of the race's call. Then, over every night given, what the answer would have been
had an open race's fitted leader been named instead of the best baseline (no claim made: the race's launches
are the same, only the choice differs), with the measures the race rounds judged: regret, answers below the
defaults (harmful), answers truly more than 2 % below the best baseline (false bests), and false claims.

The budget-open class is split by what the race could have called: the smallest gain over the best
baseline that its final interval (its own dof, launches and widening, at the noise the landscape draws:
hypot(launch_sd, 1.5 %)) would mark significant, against the leader's true gain. Below it, the budget
was too small to decide; above it, the draw fell short and the rule kept the baseline.

Usage: .venv/bin/python benchmarks/results/race-census-2026-12-06/analyse.py CENSUS.jsonl [...] (from the worktree)
"""

import json
import math
import statistics
import sys
from pathlib import Path
from statistics import NormalDist

sys.path.insert(0, str(Path.cwd()))
from autotune.measure.statistics import t95  # noqa: E402

NOISE_WITHIN = 0.015  # the family's measurement noise (TimingSpec.noise_rel), besides launch_sd


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.9 * len(ordered) + 0.5) - 1))]


def detectable(n: dict) -> float:
    """The smallest gain of the leader over the best baseline the race's final interval would call significant."""
    by = {f["trial"]: f for f in n["finalists"]}
    claims = max(sum(1 for f in n["finalists"] if not f["baseline"]), 1)
    widen = NormalDist().inv_cdf(1 - 0.025 / claims) / NormalDist().inv_cdf(0.975) if claims > 1 else 1.0
    counts = [len(by[n["leader"]]["relaunches"]), len(by[n["best_baseline"]]["relaunches"])]
    sd = math.hypot(n["launch_sd"], NOISE_WITHIN)
    return math.exp(widen * t95(n["fit_dof"]) * sd * math.sqrt(1 / counts[0] + 1 / counts[1])) - 1


def classify(n: dict) -> str:
    chosen = next(f for f in n["finalists"] if f["trial"] == n["chosen"])
    leader = next(f for f in n["finalists"] if f["trial"] == n["leader"])
    if n["incumbent"] not in [f["trial"] for f in n["finalists"]]:
        return "other: the incumbent not a finalist"
    if chosen["baseline"] and not leader["baseline"]:
        if not n["settled"]:
            baseline = next(f["true"] for f in n["finalists"] if f["trial"] == n["best_baseline"])
            gain = (leader["true"] or 0) / baseline - 1
            if gain < detectable(n):
                return "budget too small to decide (true gain below what the race could call)"
            return "rule keeps the baseline: the race could have called the true gain, the draw fell short"
        return "rule: settled, the baseline kept"
    if n["chosen"] == n["leader"] and (leader["true"] or 0) < n["incumbent_true"] * 0.98:
        return "noise: a weaker finalist led"
    return "other"


nights = [json.loads(line) for path in sys.argv[1:] for line in open(path)]
print(
    "| night | regret % | incumbent gap % | race: budget / spent / rounds | configs | fit sd % (dof) | "
    "leader vs best baseline (interval) | leader's true gain / callable % | settled | class |"
)
print("|---|---|---|---|---|---|---|---|---|---|")
classes: dict[str, int] = {}
for n in nights:
    if n.get("raced") is False or n["regret_pct"] - n["incumbent_gap_pct"] < 2:
        continue
    gain = next((g for g in n["gains"] if g["baseline_trial"] == n["best_baseline"]), None)
    shown = (
        f"{100 * gain['gain']:+.1f} ({100 * gain['low']:+.1f} to {100 * gain['high']:+.1f})"
        if gain and gain["low"] is not None
        else "-"
    )
    kind = classify(n)
    by = {f["trial"]: f for f in n["finalists"]}
    true_gain = 100 * ((by[n["leader"]]["true"] or 0) / by[n["best_baseline"]]["true"] - 1)
    callable_ = f"{true_gain:+.1f} / {100 * detectable(n):.1f}"
    classes[kind] = classes.get(kind, 0) + 1
    print(
        f"| {n['case']} {n['seed']} @{n['budget']} {n['sampler']} | {n['regret_pct']:.1f} | "
        f"{n['incumbent_gap_pct']:.1f} | {n['race_budget']} / {n['race_spent']} / {n['rounds']} | "
        f"{len(n['finalists'])} | {100 * (n['fit_sd'] or 0):.1f} ({n['fit_dof']}) | {shown} | {callable_} | "
        f"{n['settled']} | {kind} |"
    )
print()
for kind, count in sorted(classes.items(), key=lambda kv: -kv[1]):
    print(f"- {kind}: {count}")

# The what-if: an open race names its fitted leader (no claim) instead of the best baseline.
groups: dict[tuple[str, int, int], list[dict]] = {}
for n in nights:
    groups.setdefault((n["sampler"], n["budget"], n.get("top", 3)), []).append(n)
print(
    "\n| row | nights | regret mean / median / p90: as shipped | leader when open | changed (better / worse) | "
    "harmful: shipped / what-if | false bests: shipped / what-if | false claims / claims | "
    "a baseline truly the best finalist: nights, named (shipped / what-if) |"
)
print("|---|---|---|---|---|---|---|---|---|")
for (sampler, budget, top), group in sorted(groups.items()):
    shipped, whatif, better, worse = [], [], 0, 0
    harm = [0, 0]
    false_best = [0, 0]
    claims = false = 0
    # nights whose best baseline is truly the best finalist; the baseline named: shipped, what-if
    baseline_best = [0, 0, 0]
    for n in group:
        if n.get("raced") is False:  # no race: the answer is the same either way, and no claim
            shipped.append(n["regret_pct"])
            whatif.append(n["regret_pct"])
            continue
        by = {f["trial"]: f for f in n["finalists"]}
        leader = by[n["leader"]]
        pick = (
            n["leader"]
            if (by[n["chosen"]]["baseline"] and not leader["baseline"] and not n["settled"])
            else n["chosen"]
        )
        base_true = (
            max((f["true"] or 0) for f in n["finalists"] if f["baseline"])
            if any(f["baseline"] for f in n["finalists"])
            else None
        )
        for i, trial in enumerate((n["chosen"], pick)):
            true = by[trial]["true"] or 0
            (shipped if i == 0 else whatif).append(100 * (1 - true / n["optimum"]))
            defaults = (
                n["defaults_true"]
                if "defaults_true" in n
                else next(f["true"] for f in n["finalists"] if f["baseline"] == "defaults")
            )
            harm[i] += true < defaults
            false_best[i] += base_true is not None and true < 0.98 * base_true
        if base_true is not None and base_true >= max(f["true"] or 0 for f in n["finalists"]):
            baseline_best[0] += 1
            baseline_best[1] += by[n["chosen"]]["baseline"] is not None
            baseline_best[2] += by[pick]["baseline"] is not None
        better += whatif[-1] < shipped[-1] - 1e-9
        worse += whatif[-1] > shipped[-1] + 1e-9
        for g in n["gains"]:
            if g["low"] is not None and (g["low"] > 0 or g["high"] < 0):
                claims += 1
                lead, base = by[g["trial"]]["true"] or 0, by[g["baseline_trial"]]["true"] or 0
                false += not (lead > base if g["low"] > 0 else lead < base)

    def fmt(xs: list[float]) -> str:
        return f"{statistics.fmean(xs):.2f} / {statistics.median(xs):.1f} / {p90(xs):.1f}"

    print(
        f"| {sampler} @{budget} top {top} | {len(group)} | {fmt(shipped)} | {fmt(whatif)} | {better} / {worse} | "
        f"{harm[0]} / {harm[1]} | {false_best[0]} / {false_best[1]} | {false} / {claims} | "
        f"{baseline_best[0]}: {baseline_best[1]} / {baseline_best[2]} |"
    )
