"""The landscape family (benchmarks/family.py): every member is a valid twin profile with a space
the twin serves, and it knows its optimum."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.space import load_space
from benchmarks.family import member
from benchmarks.problems import problem_of, solve
from passmodel.profile import load_profile
from passmodel.setup import DEFAULT_COSTS

SEEDS = range(8)


def test_a_seed_always_gives_the_same_member() -> None:
    assert member(3) == member(3)
    assert member(3) != member(4)


@pytest.mark.parametrize("seed", SEEDS)
def test_member_files_load_back_as_the_user_facing_formats(seed: int, tmp_path: Path) -> None:
    fam = member(seed)
    profile_path = tmp_path / f"{fam.profile.name}.yaml"
    profile_path.write_text(yaml.safe_dump(fam.profile.model_dump(mode="json", exclude_unset=True)))
    assert load_profile(str(profile_path)) == fam.profile
    space_path = tmp_path / "space.yaml"
    space_path.write_text(yaml.safe_dump(fam.space.model_dump(mode="json", exclude_none=True)))
    assert load_space(space_path).tuned == fam.space.tuned
    assert [b.name for b in fam.space.baselines] == ["defaults", "cautious"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_member_launches_and_knows_its_feasible_optimum(seed: int) -> None:
    fam = member(seed)
    problem = problem_of(fam.profile, fam.space)
    optimum = solve(problem)
    landscape = problem.landscape(seed)
    served = landscape.evaluate(optimum.flags)
    assert served.outcome == "ok" and served.true_tok_s == pytest.approx(optimum.tok_s)
    # The smallest TP offered holds the weights: the defaults baseline at least loads.
    defaults = problem.normalise({**fam.space.fixed, **fam.space.baselines[0].flags})
    assert defaults is not None and landscape.evaluate(defaults).outcome != "load_oom"


def test_cases_leave_base_members_alone_and_make_what_broke_the_search() -> None:
    by_case = {m.case: m for m in (member(seed) for seed in range(9000, 9040))}
    assert set(by_case) == {"base", "wide-trees", "flat-top", "huge"}
    wide = by_case["wide-trees"].space.tuned
    assert wide["speculative-eagle-topk"].choices == [1, 2, 4, 8]  # type: ignore[union-attr]
    assert wide["speculative-num-draft-tokens"].high == 64  # type: ignore[union-attr]
    huge = by_case["huge"].profile
    assert huge.gpus.count == 8 and huge.model.weight_bytes > 150e9
    # its TP of 4 or 8 puts collectives into every speculative pass and draft step (the builder's TP parts)
    assert huge.overheads.spec_pass_ms > DEFAULT_COSTS.spec_pass_ms * 1.5
    assert all(m.profile.timing.launch_sd == 0.04 for m in by_case.values())


def test_tight_members_fill_their_gpus_and_leave_the_others_alone() -> None:
    from benchmarks.family_tight import issue_46_member, tight_member

    assert member(3) == member(3) and tight_member(3) == tight_member(3) and tight_member(3) != tight_member(4)
    for seed in (0, 1, 2):
        tight = tight_member(seed)
        profile, tuned = tight.profile, tight.space.tuned
        drafter = profile.model.drafters[0]
        tp = tight.space.fixed["tp-size"]
        assert isinstance(tp, int) and profile.gpus.count == tp
        share = (profile.model.weight_bytes + drafter.weight_bytes) / tp / profile.gpus.memory_total_bytes
        assert 0.85 < share < 0.98, share
        # the fraction and the graph batch are optional: unset (false) is one of their choices
        assert tuned["mem-fraction-static"].choices[0] is False  # type: ignore[union-attr]
        assert tuned["cuda-graph-max-bs-decode"].choices[0] is False  # type: ignore[union-attr]
    issue = issue_46_member()
    assert issue.space.fixed == {"context-length": 8192, "tp-size": 2} and issue.kind == "moe"
    assert issue.profile.gpus.memory_total_bytes == 32 * 2**30
    assert issue.profile.model.weight_bytes == pytest.approx(61e9, rel=0.01)  # Qwen3-30B-A3B's config, in bf16


@pytest.mark.slow
def test_issue_46s_optimum_drafts_deep_at_an_explicit_fraction() -> None:
    from benchmarks.family_tight import TIGHT_FRACTIONS, issue_46_member

    issue = issue_46_member()
    optimum = solve(problem_of(issue.profile, issue.space))
    assert optimum.flags["speculative-num-steps"] >= 5 and optimum.flags["mem-fraction-static"] in TIGHT_FRACTIONS
    landscape = problem_of(issue.profile, issue.space).landscape(0)
    at_engines_own = {k: v for k, v in optimum.flags.items() if k not in ("mem-fraction-static",)}
    assert landscape.evaluate(at_engines_own).outcome == "too_low"  # the engine's own fraction leaves too small a pool


def test_a_member_s_public_facts_are_the_configs_it_was_built_from() -> None:
    from benchmarks.family_tight import issue_46_member, tight_member
    from passmodel.setup import ModelFacts, Setup, model_sizes

    for fam in [member(1027), member(9401), tight_member(2), issue_46_member()]:
        profile, facts = fam.profile, fam.facts
        setup = Setup(gpu=profile.gpus.name, gpu_count=profile.gpus.count, model=ModelFacts(config=facts.model,
                      dtype=facts.dtype))  # fmt: skip
        assert model_sizes(setup).weight_bytes == profile.model.weight_bytes
        # every drafter the space can launch has its config, and only those
        assert set(facts.drafters) == {d.path for d in profile.model.drafters}
        for drafter in profile.model.drafters:
            architecture = facts.drafters[drafter.path]["architectures"][0]
            assert {"EAGLE3": "Eagle3", "DFLASH": "DFlash"}[drafter.algorithm] in architecture


def test_a_member_s_space_names_its_configs_and_the_pass_model_reads_them(tmp_path: Path) -> None:
    from autotune.pass_setup import read_pass_setup
    from benchmarks.family import space_naming_configs
    from benchmarks.family_tight import tight_member
    from benchmarks.nights import twin_inventory

    for fam, dtype in [(member(1027), "int4"), (tight_member(2), "fp8"), (member(9400), "bf16")]:
        read = read_pass_setup(space_naming_configs(fam, tmp_path / str(fam.seed)), twin_inventory(fam.profile))
        assert read.setup is not None and not read.missing, read.summary()
        assert read.setup.model.dtype == dtype  # stated as a checkpoint states it
        assert set(read.drafters) == set(fam.facts.drafters)
