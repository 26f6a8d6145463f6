"""Outputs must not change: a trial's greedy text on a few fixed prompts against the study's reference.

With temperature 0, speculative decoding must give the target model's own greedy text; a drafter
that changes it (a broken checkpoint, a wrong flag) is not faster, it is wrong. Each trial generates
the leading tokens of :data:`PROMPTS` (``client.greedy_texts``); the first baseline (or a run
without speculation) becomes the study's reference, and every later trial is compared with it here.

Numerics are not divergence: a change of kernel or batch shape may flip a near-tie, and from there
the texts differ. Runs without speculation show where this model's greedy text is that fragile: the
reference keeps, per prompt, the earliest character at which one of them departed, and a trial is
judged on the text before it (:meth:`Reference.with_numerics`), never on less than a floor.
"""

from __future__ import annotations

import hashlib
import math

from pydantic import BaseModel, ConfigDict, Field

from autotune.models import Frozen

# Fixed, short and varied (code, arithmetic, prose), so a drafter tuned to one kind is still seen
# on the others; never the study's suite, so every trial and the reference answer the same.
PROMPTS: tuple[str, ...] = (
    'def fibonacci(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n',
    "Question: A train travels 120 km in 1.5 hours. What is its average speed?\nAnswer:",
    "The three most important ideas in the history of science are",
)

# A trial whose mean leading agreement is below this is diverged. Real engines may pick another
# token at a near-tie because batch shape changes the float sums (speculation verifies several
# tokens at once): that flips one prompt somewhere, usually late, and costs a share of one prompt.
# A broken drafter or a wrong flag departs within the first tokens on every prompt. Half the
# leading text lets a flip even at a prompt's first token on one of three prompts pass (2/3 left),
# and fails a trial that departs early on most prompts.
DIVERGED_BELOW = 0.5
# However early runs without speculation departed, a trial is judged on at least this share of each
# reference text: a broken drafter departs within the first tokens, and a run without speculation
# that departs that early (a wrong flag of its own) must not excuse it.
JUDGED_AT_LEAST = 0.25


class AgreementSpec(BaseModel):
    """``measurement.agreement`` in a space: how each trial's greedy output is checked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="false: no output check (e.g. a server without /v1/completions)")
    prompts: int = Field(default=3, ge=1, le=len(PROMPTS), description="how many of the fixed prompts")
    tokens: int = Field(default=32, ge=4, le=512, description="greedy tokens generated per prompt")

    @property
    def key(self) -> str:
        """What a reference must have been made with to be compared (prompts and token count)."""
        text = "\n\0".join(PROMPTS[: self.prompts]) + f"\0{self.tokens}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class OutputSample(Frozen):
    """One trial's greedy texts, one per prompt, made with the settings named by ``key``."""

    key: str
    texts: list[str]


class Reference(Frozen):
    """The study's reference outputs, the trial that produced them, and where numerics alone changed them."""

    trial: int
    sample: OutputSample
    numerics_from: list[int | None] = Field(
        default_factory=list,
        description="per prompt: the earliest character where a run without speculation departed (None: none did)",
    )

    def judged_length(self, prompt: int) -> int:
        """How many leading characters of the prompt's reference text a trial is judged on."""
        text = self.sample.texts[prompt]
        departed = self.numerics_from[prompt] if prompt < len(self.numerics_from) else None
        if departed is None:
            return len(text)
        return min(len(text), max(departed, math.ceil(JUDGED_AT_LEAST * len(text))))

    def with_numerics(self, agreement: Agreement) -> Reference:
        """This reference having seen ``agreement`` of a run without speculation: its departures
        are what numerics do to this model's text (the caller passes only runs not diverged)."""
        if agreement.reference_trial != self.trial:
            return self
        known = self.numerics_from + [None] * (len(self.sample.texts) - len(self.numerics_from))
        merged = [
            at if old is None else old if at is None else min(old, at)
            for old, at in zip(known, agreement.first_difference, strict=True)
        ]
        return self.model_copy(update={"numerics_from": merged})


class Agreement(Frozen):
    """A trial's outputs against the reference (or why they could not be read)."""

    sample: OutputSample | None = None
    error: str | None = Field(default=None, description="the output check failed; the measurement stands")
    reference_trial: int | None = Field(default=None, description="None: no reference yet (this may become it)")
    shares: list[float] = Field(default_factory=list, description="per prompt: matching leading characters")
    first_difference: list[int | None] = Field(default_factory=list, description="per prompt: None when equal")
    judged: list[float] = Field(
        default_factory=list, description="per prompt: the share of the text before numerics departed that matches"
    )

    @property
    def share(self) -> float | None:
        """Mean leading agreement over the prompts; None when nothing was compared."""
        return sum(self.shares) / len(self.shares) if self.shares else None

    @property
    def judged_share(self) -> float | None:
        """Mean agreement on the text that runs without speculation reproduced; what is judged."""
        return sum(self.judged) / len(self.judged) if self.judged else None

    @property
    def diverged(self) -> bool:
        share = self.judged_share
        return share is not None and share < DIVERGED_BELOW

    def reason(self) -> str:
        """One line for ``show --trial N``."""
        departed = [(i, at) for i, at in enumerate(self.first_difference) if at is not None]
        where = "; ".join(f"prompt {i + 1} departs at character {at}" for i, at in departed)
        judged = self.judged_share or 0.0
        excused = "" if judged == self.share else f" ({judged:.0%} before where runs without speculation departed)"
        return (
            f"greedy output differs from the reference (trial {self.reference_trial}): "
            f"{self.share or 0.0:.0%} leading agreement{excused}, below {DIVERGED_BELOW:.0%} ({where})"
        )


def leading_share(reference: str, text: str) -> tuple[float, int | None]:
    """The share of ``reference``'s characters that ``text`` repeats from the start, and where it
    first departs (None: identical). Characters, not tokens, since every engine returns text."""
    common = 0
    for a, b in zip(reference, text, strict=False):
        if a != b:
            break
        common += 1
    if common == len(reference) == len(text):
        return 1.0, None
    return (common / len(reference) if reference else 0.0), common


def compare(sample: OutputSample, reference: Reference | None) -> Agreement:
    """``sample`` against the reference; without one (or one made with other settings), unchecked."""
    if reference is None or reference.sample.key != sample.key:
        return Agreement(sample=sample)
    pairs = [leading_share(ref, text) for ref, text in zip(reference.sample.texts, sample.texts, strict=True)]
    judged = []
    for prompt, (share, at) in enumerate(pairs):
        length = reference.judged_length(prompt)
        judged.append(share if at is None or length == 0 else min(1.0, at / length))
    return Agreement(
        sample=sample,
        reference_trial=reference.trial,
        shares=[share for share, _ in pairs],
        first_difference=[at for _, at in pairs],
        judged=judged,
    )
