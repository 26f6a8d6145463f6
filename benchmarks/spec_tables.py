"""The twin's cost model judged on published speculative-decoding tables (issue 44).

Each table of ``shared/spec-tables/tables.jsonl`` is replayed with the twin's physics from a setup
of public facts (``benchmarks/spec_setups/<id>.yaml``: the SETUP.yaml format under ``setup:``, and
under ``replay:`` what the table leaves out, each assumption stated there). Where a row publishes
its accept length the replay uses it, so only the cost model is judged. Per table it prints:

- ``ratio``: each row's rate over the first row's (at the same concurrency), the twin's against the
  published, max and median error over the rows after the first;
- ``signs``: how many row-to-row changes (in the table's order, at one concurrency) go the same way;
- ``cal3``: after fitting the profile's free constants (``passmodel.calibrate.fit``) to three
  rows, the worst error of the other rows' rates, over every choice of three (``--subsets``: at most
  that many, drawn);
- ``cal3 spanned``: the same over only the other rows the three span (:func:`spanned`): a row whose
  drafter, depth, tree width or concurrency lies outside them is extrapolated, and a fit to three
  rows cannot know the cost that carries it; with the count of such rows.

for today's physics (no fixed cost of speculation, the built-in profile's draft-step constant, no
TP part in it) and the new one, and for the new one without each term (tree costs and batch scale
put back at the built-in profile's values).

    python -m benchmarks.spec_tables [--tables PATH] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from passmodel import calibrate
from passmodel.calibrate import Point
from passmodel.config import LaunchConfig
from passmodel.profile import TwinProfile
from passmodel.setup import (
    DEFAULT_COSTS,
    DrafterFacts,
    PassCosts,
    Setup,
    drafter_spec,
    profile_from_setup,
    resolve_setup,
)

SETUPS = Path(__file__).parent / "spec_setups"
TABLES = Path(__file__).resolve().parents[2] / "shared" / "spec-tables" / "tables.jsonl"
MAX_SUBSETS = 300  # every choice of three rows in each table of the corpus (the most is 286)
# Today's physics on the same setups: none of the new terms (no experts touched either: see
# VARIANT_PROFILE), the built-in profile's draft step, tree costs, batch scale and per-request cost.
TODAY_COSTS = DEFAULT_COSTS.model_copy(
    update={
        "spec_pass_ms": 0.0,
        "spec_pass_tp_ms": 0.0,
        "draft_step_tp_ms": 0.0,
        "draft_step_ms": 0.3,
        "tree_branch_ms": 0.3,
        "tree_bookkeeping_ms": 1.5,
        "batch_scale": 0.1,
        "per_request_ms": 0.05,
    }
)


class Replay(BaseModel):
    """What a table leaves out, as its setup file states it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_len: int = Field(ge=0)
    output_len: int = Field(ge=1)
    concurrency: int | None = None
    skip: list[str] = Field(default_factory=list)
    drafters: dict[str, DrafterFacts] = Field(default_factory=dict)
    row_drafter: dict[str, str] = Field(default_factory=dict)
    row_flags: dict[str, dict[str, Any]] = Field(default_factory=dict)
    row_accept_length: dict[str, float] = Field(default_factory=dict)


@dataclass(frozen=True)
class Cell:
    row: int  # the table row it comes from
    point: Point


@dataclass(frozen=True)
class Table:
    id: str
    gpus_named: bool
    setup: Setup
    replay: Replay
    cells: list[Cell]


def load_tables(path: Path) -> list[Table]:
    tables = []
    for line in path.read_text(encoding="utf-8").splitlines():
        raw = json.loads(line)
        setup_file = SETUPS / f"{raw['id']}.yaml"
        if not setup_file.is_file():
            continue
        data = yaml.safe_load(setup_file.read_text(encoding="utf-8"))
        setup = resolve_setup(Setup.model_validate(data["setup"]), setup_file.parent)
        replay = Replay.model_validate(data["replay"])
        tables.append(Table(raw["id"], raw["gpu"] is not None, setup, replay, list(_cells(raw, replay))))
    return tables


def _cells(raw: dict[str, Any], replay: Replay) -> list[Cell]:
    cells = []
    vllm = raw["engine"] == "vllm"
    for index, row in enumerate(raw["rows"]):
        setting = dict(row["setting"])
        if any(key in setting for key in replay.skip) or "adaptive" in setting:
            continue
        flags, algo = _flags(setting, replay, vllm=vllm)
        rates = row.get("tok_s")
        if rates is None:
            rates = 1000.0 / row["tpot_ms"]
        accepts = row.get("accept_length")
        if algo is not None and accepts is None:
            accepts = replay.row_accept_length.get(algo)
        per_batch = rates if isinstance(rates, dict) else {str(setting.get("bs") or replay.concurrency or 1): rates}
        for batch, rate in per_batch.items():
            accept = accepts.get(batch) if isinstance(accepts, dict) else accepts
            point = Point(
                flags=flags,
                concurrency=int(batch),
                input_len=replay.input_len,
                output_len=replay.output_len,
                tok_s=float(rate),
                accept_length=accept if flags else None,
            )
            cells.append(Cell(index, point))
    return cells


def _flags(setting: dict[str, Any], replay: Replay, *, vllm: bool) -> tuple[dict[str, Any], str | None]:
    algo = setting.get("algo")
    if setting.get("spec") is False or setting.get("K") == 0:
        return {}, algo
    path = replay.row_drafter.get(algo) if algo else None
    if vllm:
        config: dict[str, Any] = {"num_speculative_tokens": setting["K"]}
        if path is not None:
            config["model"] = path
        return {"speculative-config": config}, algo
    flags = dict(replay.row_flags.get(algo, {})) if algo else {}
    if "steps" in setting:
        flags |= {
            "speculative-num-steps": setting["steps"],
            "speculative-eagle-topk": setting["topk"],
            "speculative-num-draft-tokens": setting["draft_tokens"],
        }
    if path is not None:
        flags["speculative-draft-model-path"] = path
    return flags, algo


# ---------------------------------------------------------------------------------------------
# The physics variants


def build(table: Table, costs: PassCosts) -> TwinProfile:
    """The table's profile from public facts, with the replay's extra drafters added."""
    profile = profile_from_setup(table.setup, costs, name=table.id)
    extra = [drafter_spec(d, path=name) for name, d in table.replay.drafters.items()]
    step = profile.model.drafters[0].step_ms if profile.model.drafters else profile.overheads.draft_step_ms
    extra = [d.model_copy(update={"step_ms": step}) for d in extra]
    model = profile.model.model_copy(update={"drafters": [*profile.model.drafters, *extra]})
    return profile.model_copy(update={"model": model})


VARIANTS: dict[str, PassCosts] = {
    "today": TODAY_COSTS,
    "new": DEFAULT_COSTS,
    "new - spec_pass": DEFAULT_COSTS.model_copy(update={"spec_pass_ms": 0.0, "spec_pass_tp_ms": 0.0}),
    "new - draft_step_tp": DEFAULT_COSTS.model_copy(update={"draft_step_tp_ms": 0.0}),
    "new - tree costs": DEFAULT_COSTS.model_copy(update={"tree_branch_ms": 0.3, "tree_bookkeeping_ms": 1.5}),
    "new - batch_scale": DEFAULT_COSTS.model_copy(update={"batch_scale": 0.1}),
    "new - per_request": DEFAULT_COSTS.model_copy(update={"per_request_ms": 0.05}),
    "new - experts touched": DEFAULT_COSTS,
}


def _same(profile: TwinProfile) -> TwinProfile:
    return profile


def _without_experts_touched(profile: TwinProfile) -> TwinProfile:
    """An MoE pass reads one token's top-k experts whatever its tokens (today's weight read)."""
    return profile.model_copy(update={"model": profile.model.model_copy(update={"moe_expert_bytes": 0})})


VARIANT_PROFILE: dict[str, Callable[[TwinProfile], TwinProfile]] = {
    "today": _without_experts_touched,
    "new": _same,
    "new - experts touched": _without_experts_touched,
}


def variant_profile(table: Table, variant: str, costs: PassCosts) -> TwinProfile:
    """The table's profile as the variant draws it, from ``costs``."""
    return VARIANT_PROFILE.get(variant, _same)(build(table, costs))


# ---------------------------------------------------------------------------------------------
# Judging


@dataclass(frozen=True)
class Verdict:
    ratio_max: float
    ratio_median: float
    signs_right: int
    signs: int
    cal3_max: float
    cal3_median: float
    spanned_max: float
    spanned_median: float
    spanned: int  # held-out rows the chosen three span, over every choice
    held: int  # held-out rows, over every choice


def _predict(profile: TwinProfile, cells: list[Cell], configs: list[LaunchConfig]) -> list[float]:
    return [calibrate.predict_point(profile, c.point, cfg).tok_s for c, cfg in zip(cells, configs, strict=True)]


def judge(table: Table, profile: TwinProfile, *, subsets: int) -> Verdict:
    cells = table.cells
    configs = [calibrate.launch_config(profile, c.point.flags) for c in cells]
    predicted = _predict(profile, cells, configs)
    errors: list[float] = []
    right = total = 0
    for batch in sorted({c.point.concurrency for c in cells}):
        group = [i for i, c in enumerate(cells) if c.point.concurrency == batch]
        first = group[0]
        for i in group[1:]:
            published = cells[i].point.tok_s / cells[first].point.tok_s
            errors.append(abs(predicted[i] / predicted[first] / published - 1))
        for a, b in itertools.pairwise(group):
            total += 1
            right += (cells[b].point.tok_s > cells[a].point.tok_s) == (predicted[b] > predicted[a])
    rows = sorted({c.row for c in cells})
    choices = list(itertools.combinations(rows, 3)) if len(rows) > 3 else []
    if len(choices) > subsets:
        choices = random.Random(table.id).sample(choices, subsets)
    cal: list[float] = []
    inside: list[float] = []
    held_count = 0
    for chosen in choices:
        fitted = calibrate.fit(profile, [c.point for c in cells if c.row in chosen])
        fit_on = [Span.of(c.point, cfg) for c, cfg in zip(cells, configs, strict=True) if c.row in chosen]
        held = [i for i, c in enumerate(cells) if c.row not in chosen]
        again = _predict(fitted, [cells[i] for i in held], [configs[i] for i in held])
        errors_held = [abs(p / cells[i].point.tok_s - 1) for p, i in zip(again, held, strict=True)]
        cal.append(max(errors_held))
        held_count += len(held)
        inside += [
            e for e, i in zip(errors_held, held, strict=True) if spanned(fit_on, Span.of(cells[i].point, configs[i]))
        ]
    return Verdict(
        ratio_max=max(errors, default=0.0),
        ratio_median=statistics.median(errors) if errors else 0.0,
        signs_right=right,
        signs=total,
        cal3_max=max(cal, default=float("nan")),
        cal3_median=statistics.median(cal) if cal else float("nan"),
        spanned_max=max(inside, default=float("nan")),
        spanned_median=statistics.median(inside) if inside else float("nan"),
        spanned=len(inside),
        held=held_count,
    )


@dataclass(frozen=True)
class Span:
    """What a point varies that a calibration may have to extrapolate."""

    drafter: str  # "" without speculation
    steps: int
    topk: int
    concurrency: int

    @classmethod
    def of(cls, point: Point, cfg: LaunchConfig) -> Span:
        spec = cfg.spec
        if not spec.enabled:
            return cls("", 0, 0, point.concurrency)
        drafter = spec.drafter.path if spec.drafter is not None else "mtp"
        return cls(drafter, spec.num_steps or 0, spec.eagle_topk or 0, point.concurrency)


def spanned(fit_on: list[Span], point: Span) -> bool:
    """Whether the points fitted on hold ``point``'s drafter (or its absence) and span its depth,
    tree width and concurrency."""
    same = [s for s in fit_on if s.drafter == point.drafter]

    def within(values: list[int], value: int) -> bool:
        return bool(values) and min(values) <= value <= max(values)

    return (
        within([s.steps for s in same], point.steps)
        and within([s.topk for s in same], point.topk)
        and within([s.concurrency for s in fit_on], point.concurrency)
    )


def _cell(v: Verdict) -> str:
    cal = "-" if v.cal3_max != v.cal3_max else f"{v.cal3_max:.1%} ({v.cal3_median:.1%})"
    inside = "-" if v.held == 0 else f"{v.spanned}/{v.held} rows"
    if v.spanned:
        inside = f"{v.spanned_max:.1%} ({v.spanned_median:.1%}), {inside}"
    return f"{v.ratio_max:.1%} / {v.ratio_median:.1%} | {v.signs_right}/{v.signs} | {cal} | {inside}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spec_tables", description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=Path, default=TABLES)
    parser.add_argument("--quick", action="store_true", help="only today and new; no per-term ablation")
    parser.add_argument("--subsets", type=int, default=MAX_SUBSETS, help="most choices of three rows per table")
    args = parser.parse_args(argv)
    tables = load_tables(args.tables)
    variants = ["today", "new"] if args.quick else list(VARIANTS)
    print("Ratio: max / median error of each row's rate over the first row's; signs: row-to-row changes "
          "the same way; cal3: worst (median) error of the other rows after fitting three; cal3 spanned: the "
          "same over the other rows the three span (drafter, depth, tree width, concurrency).\n")  # fmt: skip
    print("| table | GPUs named | points | physics | ratio max / median | signs | cal3 worst (median) | cal3 spanned |")
    print("|---|---|---|---|---|---|---|---|")
    for table in tables:
        for variant in variants:
            costs = VARIANTS[variant]
            subsets = args.subsets if variant in ("today", "new") else 0
            profile = variant_profile(table, variant, costs)
            verdict = judge(table, profile, subsets=subsets)
            named = "yes" if table.gpus_named else "no (assumed)"
            print(f"| {table.id} | {named} | {len(table.cells)} | {variant} | {_cell(verdict)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
