"""What the model-guided search (:mod:`autotune.study.guided`) reads of a night's launches that did not serve:
whether its proposals are stalled, and which memory deaths were the sizing's rather than the draft's."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.decision import Reuse, Skip
from autotune.outcomes import outcome_kind
from autotune.records import TrialRecord


def launched(record: TrialRecord) -> bool:
    """Its own launch was made (not answered by a rule without one: a predicted death, a reused measurement)."""
    return not isinstance(record.decision, (Reuse, Skip))


def stalled(records: Sequence[TrialRecord], last: int) -> bool:
    """The last ``last`` proposals that launched (baselines and a race's relaunches aside) all did not serve.

    Proposals a rule answered without a launch neither start nor end a stall: while stuck, TPE's draws are
    mostly such (predicted deaths, configurations measured already), and counting them kept a stall alive
    for tens of proposals after the launches had begun to serve again."""
    proposed = [r for r in records if r.baseline is None and r.confirm_of is None and launched(r)][-last:]
    return len(proposed) == last and not any(r.served for r in proposed)


def sizing_deaths(records: Sequence[TrialRecord]) -> set[int]:
    """The proposals (trial numbers) whose launch died of memory before the night's first launch that served:
    their sizing was a random draw, which the night left once one served, as every later proposal is
    completed with a sizing that served (:class:`~autotune.study.launchable.WouldLaunch`). Such a death says
    nothing of its draft, which is tried again at that sizing. A later death counts against its draft (the
    rules adjust a sizing after each death, so a sizing never served before is no sign of a guess then), and
    so does a baseline's (the engine's defaults, launched as the night's reference: excused too, the plain
    launch was launched again on a dev member, a launch the night did not get back)."""
    first = min((r.number for r in records if r.served), default=None)
    return {
        r.number
        for r in records
        if first is not None
        and r.number < first
        and r.baseline is None
        and launched(r)
        and (kind := outcome_kind(r.outcome)) is not None
        and kind.is_memory
    }
