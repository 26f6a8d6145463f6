"""The output comparison, on hand-made texts; a study learning what numerics change, on real SQLite."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.engines.base import LaunchPlan
from autotune.measure.agreement import Agreement, AgreementSpec, OutputSample, Reference, compare, leading_share
from autotune.outcomes import OutcomeKind
from autotune.study import attrs
from autotune.trial import TrialOutcome

SPEC = AgreementSpec()
REFERENCE = Reference(trial=0, sample=OutputSample(key=SPEC.key, texts=["a" * 100, "b" * 100, "c" * 100]))


def sample(*texts: str) -> OutputSample:
    return OutputSample(key=SPEC.key, texts=list(texts))


def test_leading_share_counts_characters_up_to_the_first_difference() -> None:
    assert leading_share("abcdef", "abcdef") == (1.0, None)
    assert leading_share("abcdef", "abcXef") == (0.5, 3)
    assert leading_share("abcdef", "abc") == (0.5, 3)  # stopped early


def test_identical_outputs_agree_fully() -> None:
    agreement = compare(sample("a" * 100, "b" * 100, "c" * 100), REFERENCE)
    assert agreement.share == 1.0 and not agreement.diverged and agreement.reference_trial == 0


def test_a_late_numerics_flip_passes_and_an_early_departure_everywhere_fails() -> None:
    late = compare(sample("a" * 100, "b" * 90 + "x" * 10, "c" * 100), REFERENCE)
    assert late.share == 0.9666666666666667 and not late.diverged
    # even a flip at the first character of one prompt of three passes
    assert not compare(sample("x" * 100, "b" * 100, "c" * 100), REFERENCE).diverged
    broken = compare(sample("a" * 5 + "x" * 95, "b" * 8 + "y" * 92, "c" * 3 + "z" * 97), REFERENCE)
    assert broken.diverged and broken.first_difference == [5, 8, 3]
    assert "prompt 2 departs at character 8" in broken.reason()


def test_no_reference_or_one_made_with_other_settings_leaves_it_unchecked() -> None:
    assert compare(sample("x", "y", "z"), None).share is None
    other = OutputSample(key=AgreementSpec(tokens=64).key, texts=["x", "y", "z"])
    unchecked = compare(other, REFERENCE)
    assert unchecked.share is None and not unchecked.diverged


# ---------------------------------------------------------------- numerics are not divergence


def departs(text: str, at: int) -> str:
    return text[:at] + "#" * (len(text) - at)


def test_a_reference_learns_the_earliest_departure_of_runs_without_speculation() -> None:
    first = compare(sample(departs("a" * 100, 60), "b" * 100, "c" * 100), REFERENCE)
    second = compare(sample(departs("a" * 100, 40), "b" * 100, departs("c" * 100, 90)), REFERENCE)
    learned = REFERENCE.with_numerics(first).with_numerics(second)
    assert learned.numerics_from == [40, None, 90]
    assert [learned.judged_length(i) for i in range(3)] == [40, 100, 90]
    other = Reference(trial=7, sample=REFERENCE.sample)
    assert other.with_numerics(first) == other  # compared with another reference: nothing learned


def test_a_departure_where_numerics_departed_is_not_divergence() -> None:
    # The H200 study's pattern: runs without speculation (flash-attn off) departed on prompt 2 at
    # character 73, and so did a drafting run, on a model whose greedy text is fragile there.
    plain = compare(sample("a" * 100, departs("b" * 100, 30), "c" * 100), REFERENCE)
    learned = REFERENCE.with_numerics(plain)
    drafting = sample(departs("a" * 100, 45), departs("b" * 100, 30), departs("c" * 100, 20))
    assert compare(drafting, REFERENCE).diverged  # (0.45 + 0.3 + 0.2) / 3 against the text alone
    judged = compare(drafting, learned)
    assert judged.share == compare(drafting, REFERENCE).share  # what is shown stays the raw agreement
    assert judged.judged == [0.45, 1.0, 0.2] and not judged.diverged


def test_numerics_never_excuse_departing_within_the_first_quarter() -> None:
    # A run without speculation that departed at once (a wrong flag of its own) leaves a quarter of
    # each text to judge: a drafter that departs within the first tokens everywhere is still caught.
    early = compare(sample(departs("a" * 100, 2), departs("b" * 100, 3), departs("c" * 100, 1)), REFERENCE)
    learned = REFERENCE.with_numerics(early)
    assert [learned.judged_length(i) for i in range(3)] == [25, 25, 25]
    broken = compare(sample(departs("a" * 100, 5), departs("b" * 100, 8), departs("c" * 100, 3)), learned)
    assert broken.diverged and broken.judged == [0.2, 0.32, 0.12]
    assert "before where runs without speculation departed" in broken.reason()


def test_a_study_learns_numerics_from_plain_runs_that_were_not_diverged(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="s")

    def record(texts: tuple[str, str, str]) -> Agreement:
        trial = study.ask()
        agreement = compare(sample(*texts), attrs.agreement_reference(study))
        kind = OutcomeKind.DIVERGED if agreement.diverged else OutcomeKind.OK
        plan = LaunchPlan(engine="llamacpp", flags={"spec-type": "none"})
        attrs.TrialStory(trial).measured(TrialOutcome(kind=kind, plan=plan, agreement=agreement))
        study.tell(trial, 1.0)
        return agreement

    record(("a" * 100, "b" * 100, "c" * 100))  # no reference yet: this run without a draft becomes it
    reference = attrs.agreement_reference(study)
    assert reference is not None and reference.numerics_from == []
    assert record((departs("a" * 100, 5), departs("b" * 100, 2), departs("c" * 100, 9))).diverged
    assert attrs.agreement_reference(study) == reference  # a diverged run teaches nothing
    assert not record(("a" * 100, departs("b" * 100, 30), "c" * 100)).diverged
    learned = attrs.agreement_reference(study)
    assert learned is not None and learned.numerics_from == [None, 30, None]
    drafting = sample(departs("a" * 100, 45), departs("b" * 100, 30), departs("c" * 100, 20))
    assert not compare(drafting, learned).diverged
