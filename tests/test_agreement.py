"""The output comparison, on hand-made texts."""

from __future__ import annotations

from autotune.measure.agreement import AgreementSpec, OutputSample, Reference, compare, leading_share

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
