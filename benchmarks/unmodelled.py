"""Effects no model knows (issue 53, item 5): drawn per member here, applied to what a landscape answers.

The family is drawn by the same pass model a model-guided search calibrates, so judged on it alone
such a search would be judged on its own assumptions. ``--unmodelled`` gives each member (or a
``--twin-profile``) effects that neither the model nor the twin's physics describes, applied to a
performance class's noise-free rate after the twin's physics, in this order:

- an acceptance curve of another shape: up to a knee depth the accepted tokens beyond the first are
  scaled by ``1 + accept_boost``, past it each further depth keeps ``accept_decay`` of them (a
  cliff the twin's per-position curves do not draw);
- draft steps that turn dearer past a depth: each step past ``deep_from`` adds ``deep_cost`` of a pass;
- speculation's costs off by 0.5-2x: the speculative share of a pass (taken as ``SPEC_SHARE``) costs
  ``spec_cost`` times as much, one factor per drafter kind and chain or tree;
- a deviation per configuration of a few percent, correlated: one term per draft-token count, one per
  attention kernel, one per configuration;
- on some members a host-side ceiling: no configuration decodes faster than ``ceiling_ratio`` times
  the engine's defaults (a flat top, as the AngelSlim table shows at about 1,300 tok/s).

Every draw is seeded by the member's seed (and, for the deviation, the group's name), so a member's
effects do not depend on which configurations were evaluated first. Off, nothing changes.
"""

from __future__ import annotations

import math
import random

from pydantic import BaseModel, ConfigDict, Field

from passmodel.config import LaunchConfig

SPEC_SHARE = 0.25  # the share of a speculative pass that drafting and verifying add to a plain pass
CEILING_SHARE = 0.4  # members with a host-side ceiling
TOKENS_SD, KERNEL_SD, CONFIG_SD = 0.02, 0.015, 0.01  # the deviation's terms (log scale): about 2.7 % together


class Unmodelled(BaseModel):
    """One member's effects (module docstring); the neutral values leave a landscape unchanged."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    tokens_sd: float = Field(default=0.0, ge=0)
    kernel_sd: float = Field(default=0.0, ge=0)
    config_sd: float = Field(default=0.0, ge=0)
    accept_knee: int = Field(default=1, ge=1)
    accept_boost: float = 0.0
    accept_decay: float = Field(default=1.0, gt=0, le=1)
    deep_from: int = Field(default=1, ge=1)
    deep_cost: float = Field(default=0.0, ge=0)
    spec_cost: dict[str, float] = Field(default_factory=dict)  # "mtp/chain" etc. -> factor; unlisted: 1
    ceiling_ratio: float | None = Field(default=None, gt=1)
    ceiling_tok_s: float | None = Field(default=None, gt=0)  # set once the defaults' rate is known

    @classmethod
    def draw(cls, seed: int) -> Unmodelled:
        """The effects of member ``seed`` (a stream of their own: the member's other draws do not move)."""
        rng = random.Random(f"autotune-unmodelled-{seed}")
        spec_cost = {
            f"{kind}/{shape}": math.exp(rng.uniform(math.log(0.5), math.log(2.0)))
            for kind in ("mtp", "eagle", "dflash")
            for shape in ("chain", "tree")
        }
        return cls(
            seed=seed,
            tokens_sd=TOKENS_SD,
            kernel_sd=KERNEL_SD,
            config_sd=CONFIG_SD,
            accept_knee=rng.randint(2, 5),
            accept_boost=rng.uniform(-0.08, 0.12),
            accept_decay=rng.uniform(0.85, 0.97),
            deep_from=rng.randint(2, 5),
            deep_cost=rng.uniform(0.02, 0.08),
            spec_cost=spec_cost,
            ceiling_ratio=rng.uniform(1.2, 2.0) if rng.random() < CEILING_SHARE else None,
        )

    def with_ceiling(self, defaults_tok_s: float) -> Unmodelled:
        """The ceiling in tok/s, from the engine's defaults' rate (no ceiling when they do not start)."""
        if self.ceiling_ratio is None or defaults_tok_s <= 0:
            return self
        return self.model_copy(update={"ceiling_tok_s": self.ceiling_ratio * defaults_tok_s})

    def apply(self, cfg: LaunchConfig, tok_s: float, accept: float) -> tuple[float, float]:
        """(decode tok/s, accept length) of a configuration after the effects; ``cfg`` names its
        performance class (its memory-only fields do not matter)."""
        spec = cfg.spec
        if spec.enabled:
            depth = spec.num_steps if spec.num_steps is not None else max(1, spec.tokens_per_pass - 1)
            kept = (1 + self.accept_boost) * self.accept_decay ** max(0, depth - self.accept_knee)
            shaped = 1 + (accept - 1) * kept
            tok_s *= shaped / accept
            accept = shaped
            tok_s /= 1 + self.deep_cost * max(0, depth - self.deep_from)
            shape = "tree" if (spec.eagle_topk or 1) > 1 else "chain"
            tok_s /= 1 + SPEC_SHARE * (self.spec_cost.get(f"{spec.kind}/{shape}", 1.0) - 1)
        tok_s *= self.deviation(cfg)
        if self.ceiling_tok_s is not None:
            tok_s = min(tok_s, self.ceiling_tok_s)
        return tok_s, accept

    def deviation(self, cfg: LaunchConfig) -> float:
        """The configuration's factor: its draft-token count's term, its kernel's and its own."""
        tokens = cfg.spec.tokens_per_pass if cfg.spec.enabled else 1
        return math.exp(
            self._term(f"tokens-{tokens}", self.tokens_sd)
            + self._term(f"kernel-{cfg.attention_backend}", self.kernel_sd)
            + self._term(f"config-{cfg!r}", self.config_sd)
        )

    def _term(self, group: str, sd: float) -> float:
        return random.Random(f"autotune-unmodelled-{self.seed}-{group}").gauss(0.0, sd) if sd > 0 else 0.0
