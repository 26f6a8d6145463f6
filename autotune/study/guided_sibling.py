"""The model night's sibling launch: where a tree is proposed (by the fit or a start-up role) while the served
trees leave the verify cost a token to the fit's prior (:func:`passmodel.calibrate.verify_identified`), the best
served tree again at about half its draft tokens, so trees of one width span the token counts that tell the fit
that cost. The start-up's deepest draft is the space's largest token count, a full tree; a fit on full trees
alone priced a wide tree's part-filled optimum at about half (``benchmarks/results/wide-census-2026-12-06/``)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.records import TrialRecord
from autotune.space import IntParam, SearchSpace, suggest
from autotune.study.guided_deaths import launched
from autotune.study.guided_reads import Draw, config_of, flags_of, model_params, spec_key
from passmodel import calibrate
from passmodel.config import LaunchConfig
from passmodel.profile import TwinProfile

# The sibling's draft tokens at most this share of the best tree's: the two then identify the verify cost.
SIBLING_SPAN = 1 / calibrate.VERIFY_SPAN
# The search launches a night has had before it spends one on the sibling: the whole search of a 20-launch night
# (race.split_launches: 10 and a race of 10), the shortest night the project judges, so such nights keep every
# search launch for the fit's own proposals, and any longer one has launches left after its sibling.
ROOM = 10


def has_room(records: Sequence[TrialRecord]) -> bool:
    """Whether the night has made :data:`ROOM` search launches (a baseline's too; not a race's relaunch, nor a
    proposal a rule answered without a launch), of ``records``: the study's finished trials, failed ones too."""
    return sum(r.confirm_of is None and launched(r) for r in records) >= ROOM


def is_tree(cfg: LaunchConfig) -> bool:
    return cfg.spec.enabled and cfg.spec.kind != "dflash" and (cfg.spec.eagle_topk or 1) > 1


def siblings(
    profile: TwinProfile,
    space: SearchSpace,
    served: Sequence[tuple[Mapping[str, Any], float]],
    dead: Mapping[tuple[Any, ...], Any],
    tries: int,
) -> list[dict[str, Any]]:
    """The best served tree's siblings (its TP, drafter, depth and width at :data:`SIBLING_SPAN` of its draft
    tokens or fewer), the nearest to half its tokens first; none where the served trees identify the verify cost
    already (one sibling a night, so), or ``tries`` of them were tried and did not serve (``dead``).
    ``served``: each served launch's parameters (as the model reads them) and rate. A sibling is the space's
    values of one flag at a time, the others the best tree's (the flag that names the draft tokens is the
    engine's own)."""
    read = ((params, rate, config_of(profile, space, flags_of(space, params))) for params, rate in served)
    trees = [(params, rate, cfg) for params, rate, cfg in read if cfg is not None and is_tree(cfg)]
    if not trees:
        return []
    if calibrate.verify_identified([cfg for *_, cfg in trees]):
        return []
    best, _, top = max(trees, key=lambda tree: tree[1])
    tokens, most = top.spec.num_draft_tokens or 0, SIBLING_SPAN * (top.spec.num_draft_tokens or 0)
    same = _without_tokens(spec_key(top))
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for name, param in space.tuned.items():
        if name not in best or not isinstance(param, IntParam):
            continue
        for value in range(param.low, param.high + 1, param.step or 1):
            params = model_params(space, suggest(space, Draw(random.Random(0), {**best, name: value})).params)
            cfg = config_of(profile, space, flags_of(space, params))
            if cfg is not None and _without_tokens(k := spec_key(cfg)) == same and (k[4] or 0) <= most:
                found.setdefault(k, params)
    near = sorted(found, key=lambda k: abs((k[4] or 0) - tokens / 2))
    if sum(k in dead for k in near) >= tries:
        return []
    return [found[k] for k in near if k not in dead]


def _without_tokens(spec: tuple[Any, ...]) -> tuple[Any, ...]:
    """A :func:`~autotune.study.guided_reads.spec_key` but for its draft tokens."""
    return spec[:4] + spec[5:]
