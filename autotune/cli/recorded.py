"""What a command rebuilds from a study's record: the space its relaunches use, its speculation schedule."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import UserError

if TYPE_CHECKING:
    from autotune.space import SearchSpace
    from autotune.study import StudyView
    from autotune.study.schedule import NoSchedule, Schedule


def space_to_launch(opened: StudyView, space_file: Path | None) -> SearchSpace:
    """The space a study's relaunches use: ``--space FILE``, else the one the study recorded (which
    cannot hold secret environment values: they are never stored)."""
    from autotune.space import load_space

    if space_file is not None:
        return load_space(space_file)
    space = opened.info.space
    if space is None:
        raise UserError(f"study {opened.name!r} does not record its search space", hint="pass --space FILE")
    env = {name: value for name, value in opened.info.env.items() if value is not None}
    if len(env) < len(opened.info.env):
        raise UserError(
            f"study {opened.name!r} launches with secret environment values, which are never stored",
            hint="pass --space FILE (the space the study ran with)",
        )
    # the record keeps the env apart from the space (secrets redacted): without it put back, a race
    # relaunched another server than the study measured (a vLLM twin its default profile)
    return space.model_copy(update={"env": env})


def build_schedule(opened: StudyView) -> Schedule | NoSchedule:
    """The study's speculation schedule (or why it has none); a user error for a study that cannot have one."""
    from autotune.study.schedule import build, schedule_engines

    levels = opened.load_levels()
    if levels is None:
        raise UserError(
            f"--schedule: study {opened.name!r} has no objective.levels: a schedule needs a winner per load level"
        )
    engine = opened.info.space.engine if opened.info.space else None
    if engine not in schedule_engines():
        able = " and ".join(schedule_engines())
        raise UserError(
            f"--schedule: study {opened.name!r} runs {engine}; autotune builds a schedule per load for {able} only"
        )
    return build(opened.records(), levels, study=opened.name, engine=engine)
