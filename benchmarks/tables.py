"""What a person reads of a search benchmark's report: the regret table (each row's answer, paired
against autotune's), and the launches-to-2 % tables of one profile, a family and a recording.
"""

from __future__ import annotations

import json
from typing import Any


def print_regret_table(report: dict[str, Any], title: str) -> None:
    """The headline: the regret of each row's answer, and each row against autotune's, paired."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, caption="regret: how far below the optimum the night's answer truly is (median / "
                  "90th percentile / mean); vs autotune: this row's median and p90 minus autotune's, with the 95 % "
                  "paired bootstrap interval (positive: worse than autotune); harmful: answers truly slower than the "
                  "engine's defaults; claims: false / made; night: most launches a night spent.")  # fmt: skip
    for header in ("method", "regret % med / p90 / mean", "within 2% / 5%", "harmful", "claims", "night",
                   "vs autotune: median", "vs autotune: p90"):  # fmt: skip
        table.add_column(header, justify="left" if header == "method" else "right")
    for name, result in report["methods"].items():
        r = result["summary"]["regret"]
        paired = report.get("paired", {}).get(name)

        def against(label: str, paired: dict[str, Any] | None = paired) -> str:
            if paired is None:
                return "—"
            low, high = paired[label]["interval"]
            return f"{paired[label]['difference']:+.1f} ({low:+.1f} to {high:+.1f})"

        table.add_row(name, f"{r['median']:.1f} / {r['p90']:.1f} / {r['mean']:.1f}",
                      f"{r['within_2pct']:.0%} / {r['within_5pct']:.0%}", str(r["harmful"]),
                      f"{r['false_claims']} / {r['claims']}",
                      f"{r['night_launches_max']}{'' if r['within_budget'] else ' (over)'}",
                      against("median"), against("p90"))  # fmt: skip
    console = Console(width=max(Console().width, 160))
    console.print(table)
    for name, result in report["methods"].items():
        after = result["summary"]["regret"].get("predicted_error_after", {})
        judged = [f"after {k}: {e['median']:.1%} / {e['p90']:.1%} ({e['runs']} runs)"
                  for k, e in after.items() if e["runs"]]  # fmt: skip
        if judged:
            console.print(f"{name}: the next launch's rate predicted before it, error median / p90: "
                          f"{'; '.join(judged)}")  # fmt: skip


def _fmt(value: Any, digits: int = 0, budget: int | None = None) -> str:
    if value is None:
        return f">{budget}" if budget is not None else "—"
    return f"{value:.{digits}f}"


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    opt = report["optimum"]
    budget = report["budget"]
    table = Table(
        title=f"Search efficiency on {report['profile']} ({report['seeds']} seeds, budget {budget} launches); "
        f"true optimum {opt['tok_s']:.2f} tok/s",
        caption="launches/trials/GPU-h: until the best-so-far's true value is within 2 % of the optimum "
        "(median / worst over seeds; >N = not reached in N launches). SIMULATED on the SGLang twin.",
    )
    for header in ("method", "launches to 2%", "trials to 2%", "GPU-h to 2%", "reached", "memory deaths",
                   "final gap", "GPU-h total"):  # fmt: skip
        table.add_column(header, justify="left" if header == "method" else "right")
    for name, result in report["methods"].items():
        s = result["summary"]
        launches, trials, hours = s["launches_to_2pct"], s["trials_to_2pct"], s["gpu_hours_to_2pct"]
        table.add_row(
            name,
            f"{_fmt(launches['median'], 0, budget)} / {_fmt(launches['worst'], 0, budget)}",
            f"{_fmt(trials['median'], 0, budget)} / {_fmt(trials['worst'], 0, budget)}",
            f"{_fmt(hours['median'], 2)} / {_fmt(hours['worst'], 2)}",
            f"{launches['reached']}/{s['seeds']}",
            f"{s['memory_deaths']['median']:g} ({s['memory_death_rate']['median']:.0%})"
            f" / {s['memory_deaths']['worst']}",
            f"{s['final_gap']['median']:.1%} / {s['final_gap']['worst']:.1%}",
            f"{s['gpu_hours']['median']:.2f}",
        )
    console.print(table)
    console.print(f"optimum: {json.dumps(opt['flags'])}")
    for note in report["notes"]:
        console.print(f"note: {note}")


def print_family_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    budget = report["budget"]
    first, last = report["family_seeds"]
    table = Table(
        title=f"Search efficiency over family members {first}..{last} ({last - first + 1} landscapes, "
        f"budget {budget} launches)",
        caption="median / 90th percentile / worst over members; >N = not reached in N launches. Memory deaths: "
        "launches that died of memory, as a share of launches (autotune and its random loop launch only what "
        "their feasibility model predicts fits). SIMULATED on generated twin profiles.",
    )
    for header in ("method", "launches to 2%", "GPU-h to 2%", "reached", "memory deaths", "final gap"):
        table.add_column(header, justify="left" if header == "method" else "right")
    for name, result in report["methods"].items():
        s = result["summary"]
        launches, hours = s["launches_to_2pct"], s["gpu_hours_to_2pct"]
        deaths, gap = s["memory_death_rate"], s["final_gap"]
        table.add_row(
            name,
            " / ".join(_fmt(launches[k], 0, budget) for k in ("median", "p90", "worst")),
            " / ".join(_fmt(hours[k], 2, budget) if hours[k] is not None else "—" for k in ("median", "p90", "worst")),
            f"{s['reached']}/{s['members']}",
            " / ".join(f"{deaths[k]:.0%}" for k in ("median", "p90", "worst")),
            " / ".join(f"{gap[k]:.1%}" for k in ("median", "p90", "worst")),
        )
    console.print(table)


def print_recorded_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    budget = report["budget"]
    table = Table(
        title=f"Search on the recorded landscape {report['name']} ({report['hardware']}): {report['configs']} distinct "
        f"configs, best mean {report['optimum']:.2f}; budget {budget} launches",
        caption="launches until the best-so-far's mean is within 2 % of the best config's (median / 90th percentile "
        "/ worst over seeds); final gap: of the highest single measurement's config at the budget; confirmed: of "
        "the config the study confirms after the budget (its top 3 launched twice more). Each launch replays one "
        "recorded launch of its config.",
    )
    for header in ("method", "launches to 2%", "reached", "final gap", "confirmed gap", "confirmed within 2%"):
        table.add_column(header, justify="left" if header == "method" else "right")
    for name, result in report["methods"].items():
        s = result["summary"]
        confirmed = s.get("confirmed_gap")
        table.add_row(name, " / ".join(_fmt(s["launches_to_2pct"][k], 0, budget) for k in ("median", "p90", "worst")),
                      f"{s['reached']}/{s['seeds']}",
                      " / ".join(f"{s['final_gap'][k]:.1%}" for k in ("median", "p90", "worst")),
                      " / ".join(f"{confirmed[k]:.1%}" for k in ("median", "p90", "worst")) if confirmed else "-",
                      f"{s['confirmed_within_2pct']}/{s['seeds']}" if confirmed else "-")  # fmt: skip
    Console(width=max(Console().width, 130)).print(table)
