"""The wide-trees census (issue 53, not the product): replay one member's model night (search and race,
--unmodelled, as search_efficiency.py's autotune-model row runs it) keeping every trial, and print:
the night's launches in order (shape, the model's prediction made before the launch, the measurement,
the truth), how each fit along the night priced the optimum's shape, the landscape's top 10 speculative
shapes (at the optimum's other flags), the model's predicted best untried configuration after the last
launch, and how often the sampler's candidate pool holds the optimum's shape at all.

Usage: python wide_replay.py TREE SEED BUDGET [model|tpe|random]
(TREE: the tree whose code runs, e.g. the worktree.)
"""

import itertools
import json
import math
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(sys.argv[1]).resolve()))

import benchmarks.nights as nights  # noqa: E402
from autotune.space import suggest  # noqa: E402
from autotune.study import attrs, guided  # noqa: E402
from autotune.study.guided_reads import Draw, config_of, flags_of, model_params, spec_key  # noqa: E402
from benchmarks import family  # noqa: E402
from benchmarks.problems import add_unmodelled, problem_of, solve, twin_defaults_true  # noqa: E402
from passmodel import calibrate  # noqa: E402

captured: dict[str, Any] = {}
original_run_night, original_make_sampler = nights.run_night, nights.make_sampler


def watched_run_night(runner: Any, night: Any, **kwargs: Any) -> Any:
    result = original_run_night(runner, night, **kwargs)
    captured["records"], captured["study"] = runner.records(), runner.study
    return result


def watched_make_sampler(name: Any, seed: Any, **kwargs: Any) -> Any:
    captured["sampler"] = original_make_sampler(name, seed, **kwargs)
    return captured["sampler"]


nights.run_night = watched_run_night  # type: ignore[assignment]
nights.make_sampler = watched_make_sampler  # type: ignore[assignment]

SPEC = ("tp-size", "speculative-algorithm", "speculative-num-steps", "speculative-eagle-topk",
        "speculative-num-draft-tokens")  # fmt: skip


def shape_of(flags: dict[str, Any] | None) -> str:
    """steps x topk / draft tokens (TP), as the engine ran them."""
    if not flags:
        return "-"
    tp = flags.get("tp-size", "?")
    if not flags.get("speculative-algorithm"):
        return f"plain tp{tp}"
    steps, topk = flags.get("speculative-num-steps"), flags.get("speculative-eagle-topk")
    return f"s{steps} k{topk} t{flags.get('speculative-num-draft-tokens')} tp{tp}"


def main() -> None:
    print("MARKER", guided.__file__)
    seed, budget = int(sys.argv[2]), int(sys.argv[3])
    sampler = sys.argv[4] if len(sys.argv) > 4 else "model"
    member = family.members(1, seed)[0]
    assert member.case == "wide-trees", member.case
    space = family.space_naming_configs(member, Path(tempfile.mkdtemp()))
    problem = problem_of(member.profile, space, noise_rel=None)
    problem.launch_sd = member.profile.timing.launch_sd
    add_unmodelled(problem, member.seed)
    optimum = solve(problem)
    run = nights.run_study(problem, seed, budget, sampler=sampler, name="wide", confirm=True)
    run.defaults_true = twin_defaults_true(problem)
    summary = run.summary(optimum.tok_s, problem.gpus)
    print(f"member {seed}: {member.summary}")
    print(f"night of {budget} ({sampler}): regret {summary['regret_pct']:.1f} %, incumbent gap "
          f"{100 * summary['final_gap']:.1f} %, search launches {sum(s.launched for s in run.steps)}, "
          f"race launches {run.confirm_launches}")  # fmt: skip
    best = optimum.tok_s
    print(f"optimum {best:.2f} tok/s: {shape_of(optimum.flags)}  {json.dumps(optimum.flags)}")

    # -- the night, launch by launch
    print("\nthe night (search trials in order; pred = the model's rate predicted before the launch)")
    print(f"{'#':>3} {'kind':9} {'search':6} {'shape':22} {'outcome':10} {'pred':>8} {'meas':>8} {'true':>8}"
          f" {'pred/true':>9} {'true/opt':>8}")  # fmt: skip
    for record in captured["records"]:
        if record.confirm_of is not None:
            continue
        step = run.steps[record.number]
        flat = record.model_dump()
        pred = flat.get("predicted")
        kind = record.baseline or ("retry" if flat.get("retry_of") is not None else "proposal")
        search = "-" if pred is None else pred["search"].split(":")[0]
        p = pred["tok_s"] if pred else None
        t, m = step.true, step.measured
        launched = "" if step.launched else " (no launch)"
        print(f"{record.number:>3} {kind:9} {search:6} {shape_of(record.flags):22} {(record.outcome or '')[:10]:10} "
              f"{p or 0:8.2f} {m or 0:8.2f} {t or 0:8.2f} {(p / t if p and t else 0):9.2f} "
              f"{(t / best if t else 0):8.3f}{launched}")  # fmt: skip
        if pred and pred["search"] != "model":
            print(f"      search: {pred['search']}")

    # -- how each fit priced the optimum's shape (the fits the sampler made, by number of launches)
    sampler_obj = captured["sampler"]
    fits = getattr(sampler_obj, "_fits", {})
    opt_flags = {**space.fixed, **optimum.flags}
    incumbent = max((s for s in run.steps if s.measured), key=lambda s: s.measured or 0.0)
    print("\nthe fits along the night: the optimum's and the incumbent's predicted rate (truth "
          f"{best:.2f} and {incumbent.true or 0:.2f}), the fit's rms error")  # fmt: skip
    for count in sorted(fits):
        fitted = fits[count]
        if fitted is None:
            continue
        at_opt = guided._rate(fitted, space, opt_flags)
        at_inc = guided._rate(fitted, space, incumbent.flags or {})
        print(f"  after {count:>2} launches: optimum {at_opt or 0:8.2f}  incumbent {at_inc or 0:8.2f}  "
              f"fit error {fitted.error:.3f}")  # fmt: skip

    # -- the landscape's top 10 speculative shapes, at the optimum's other flags
    tuned = space.tuned
    steps_hi = tuned["speculative-num-steps"].high if "speculative-num-steps" in tuned else 1  # type: ignore[union-attr]
    topks = list(tuned["speculative-eagle-topk"].choices) if "speculative-eagle-topk" in tuned else [1]  # type: ignore[union-attr]
    tps = list(tuned["tp-size"].choices) if "tp-size" in tuned else [space.fixed.get("tp-size", 1)]  # type: ignore[union-attr]
    landscape = problem.landscape(0)
    values: dict[str, tuple[float, dict[str, Any]]] = {}
    for tp, steps, topk in itertools.product(tps, range(1, steps_hi + 1), topks):
        for tokens in range(2, 65) if topk > 1 else [None]:
            flags = {**opt_flags, "tp-size": tp, "speculative-num-steps": steps, "speculative-eagle-topk": topk}
            flags.pop("speculative-num-draft-tokens", None)
            if tokens is not None:
                flags["speculative-num-draft-tokens"] = tokens
            normal = problem.normalise(flags)
            if normal is None:
                continue
            value = landscape.true_value(normal)
            if value is not None:
                values.setdefault(shape_of(normal), (value, normal))
    ranked = sorted(values.items(), key=lambda kv: -kv[1][0])
    print(f"\nthe landscape's top 10 shapes at the optimum's other flags (of {len(ranked)} that start)")
    for name, (value, _) in ranked[:10]:
        print(f"  {name:22} {value:8.2f}  {value / best:.3f}")
    launched_shapes = {shape_of(s.flags) for s in run.steps if s.measured}
    tried_best = max((v for n, (v, _) in values.items() if n in launched_shapes), default=0.0)
    print(f"  best shape the night measured, at the optimum's other flags: {tried_best / best:.3f} of the optimum")
    widths = sorted({(s.flags or {}).get("speculative-eagle-topk") for s in run.steps if s.measured} - {None})
    tokens_seen = sorted(
        {(s.flags or {}).get("speculative-num-draft-tokens") for s in run.steps if s.measured} - {None}
    )
    print(f"  measured widths {widths}, draft tokens {tokens_seen}")

    # -- the model's best untried after the last launch, and its price of the top shapes
    setup = attrs.pass_setup(captured["study"])
    search = [r for r in captured["records"] if r.confirm_of is None]
    if setup is not None:
        fit = guided.model_fit(space, setup, search, seed=seed)
        untried = {**opt_flags, **(fit.best_untried or {})}
        normal = problem.normalise(untried)
        truth = landscape.true_value(normal) if normal is not None else None
        print(f"\nafter the last launch: fit error {fit.fit_error or 0:.3f}, median error before launch "
              f"{fit.median_error or 0:.3f}; predicted best untried {shape_of(untried)} at "
              f"{fit.best_untried_rate or 0:.2f} (truly {truth or 0:.2f} at the optimum's other flags)")  # fmt: skip
        points = [p for r in search if (p := guided.point_of(r, space)) is not None]
        profile = setup.profile()
        final = guided._fit(profile, space, points) if profile is not None and len(points) >= 2 else None
        if final is not None:
            print("  the final fit's price of the top 5 shapes (pred / true):")
            for name, (value, flags) in ranked[:5]:
                rate = guided._rate(final, space, flags)
                print(f"    {name:22} {rate or 0:8.2f} / {value:8.2f}  {(rate or 0) / value:.2f}")
            print("  where the final fit misses (rate = accept length x verify passes a second; pred / true):")
            at_incumbent = {**opt_flags, **model_params(space, incumbent.flags or {})}
            decomposed = [("optimum", opt_flags), ("incumbent", at_incumbent)]
            for label, flags in decomposed + [(n, f) for n, (_, f) in ranked[1:3]]:
                normal = problem.normalise(flags)
                cfg_fit = config_of(final.profile, space, flags)
                if normal is None or cfg_fit is None:
                    continue
                truth_at = landscape._fixed(normal)
                own = calibrate.predict(final.profile, cfg_fit, concurrency=final.concurrency,
                                        input_len=final.input_len, output_len=final.output_len,
                                        accept=None)  # fmt: skip
                near = math.exp(guided._near_miss(final, spec_key(cfg_fit)))
                t_acc, t_rate = truth_at.accept_length or 1.0, truth_at.true_tok_s or 0.0
                p_rate = own.tok_s / final.concurrency
                print(f"    {label:10} {shape_of(normal):20} accept {own.accept_length:5.2f} / {t_acc:5.2f}  "
                      f"passes/s {p_rate / own.accept_length:7.2f} / {t_rate / t_acc:7.2f}  near-miss x{near:.2f}")
            tree, over = final.profile.tree, final.profile.overheads
            true_tree, true_over = member.profile.tree, member.profile.overheads
            print(f"  constants (final fit / the member's own physics): verify_token_ms {over.verify_token_ms:.4f} / "
                  f"{true_over.verify_token_ms:.4f}; miss_factor_per_doubling {tree.miss_factor_per_doubling:.2f} / "
                  f"{true_tree.miss_factor_per_doubling:.2f}; branch ms {tree.draft_step_per_extra_branch_ms:.3f} / "
                  f"{true_tree.draft_step_per_extra_branch_ms:.3f}; "
                  f"unmodelled {problem.unmodelled.model_dump(exclude={'seed', 'spec_cost'})}, "
                  f"spec_cost eagle/tree {problem.unmodelled.spec_cost.get('eagle/tree', 1):.2f} mtp/tree "
                  f"{problem.unmodelled.spec_cost.get('mtp/tree', 1):.2f}")  # fmt: skip
            mine = sorted(((guided._rate(final, space, f) or 0.0, n, v) for n, (v, f) in values.items()), reverse=True)
            print("  the final fit's own top 5 shapes (pred / true):")
            for rate, name, value in mine[:5]:
                print(f"    {name:22} {rate:8.2f} / {value:8.2f}  true/opt {value / best:.3f}")

    # -- does the candidate pool hold the optimum's shape? (20 pools of guided.POOL draws)
    profile = setup.profile() if setup is not None else None
    if profile is not None:
        cfg = config_of(profile, space, opt_flags)
        target = spec_key(cfg) if cfg is not None else None
        held, near = 0, 0
        for draw_seed in range(20):
            rng = random.Random(draw_seed)
            keys = set()
            for _ in range(guided.POOL):
                params = model_params(space, suggest(space, Draw(rng)).params)
                c = config_of(profile, space, flags_of(space, params))
                if c is not None:
                    keys.add(spec_key(c))
            held += target in keys
            near += any(k[:4] == target[:4] and abs((k[4] or 0) - (target[4] or 0)) <= 4 for k in keys) if target else 0
        print(f"\nthe pool ({guided.POOL} draws) holds the optimum's shape {target} in {held} of 20 pools; "
              f"one of its TP, steps and width within 4 draft tokens in {near} of 20")  # fmt: skip


main()
