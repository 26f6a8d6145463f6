"""Before the first launch: the space checked against every engine it names (flags read from each
launcher's ``--help``), its baselines normalised, the prompt suite loaded and the GPUs read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from autotune.engines import get_engine
from autotune.engines.base import Engine, FlagSet, InvalidConfig, LaunchPlan
from autotune.errors import UserError
from autotune.gpu import GpuInventory, check_devices, read_inventory
from autotune.measure.suites import Suite, load_suite
from autotune.space import SearchSpace, resolve_command


@dataclass(frozen=True)
class PreparedEngine:
    """One engine of a space, checked: its flag set read from its launcher's --help."""

    engine: Engine
    flag_set: FlagSet
    launcher: list[str]


@dataclass(frozen=True)
class CheckedBaseline:
    """A baseline of the space, normalised by its engine's rules (as it will be launched)."""

    name: str
    plan: LaunchPlan


@dataclass
class Preflight:
    """Everything checked before the first launch."""

    space: SearchSpace
    engines: dict[str, PreparedEngine]
    suite: Suite
    inventory: GpuInventory | None
    baselines: list[CheckedBaseline] = field(default_factory=list)


def preflight(space: SearchSpace, *, read_gpus: bool = True) -> Preflight:
    """Check the space against every engine it names, without launching anything."""
    suite = load_suite(space.suite_path())
    engines: dict[str, PreparedEngine] = {}
    for name in space.engine_names():
        engine = get_engine(name)
        launcher = resolve_command(space.launcher_for(name))
        flag_set = engine.read_flag_set(launcher, env=space.env)
        engine.check_flags(space.flags_for(name), flag_set)
        engines[name] = PreparedEngine(engine=engine, flag_set=flag_set, launcher=launcher)
    inventory = read_inventory(space.gpus, source=space.source) if read_gpus else None
    if not read_gpus:  # `check` keeps no inventory, but devices the inventory lacks are still the space's fault
        check_devices(space.gpus, source=space.source)
    return Preflight(
        space=space, engines=engines, suite=suite, inventory=inventory, baselines=checked_baselines(space, engines)
    )


def checked_baselines(space: SearchSpace, engines: Mapping[str, PreparedEngine]) -> list[CheckedBaseline]:
    """The space's baselines normalised by their engines' rules (one the rules refuse is a user error)."""
    baselines = []
    for baseline in space.baselines:
        name, flags = space.split_engine({**space.fixed, **baseline.flags})
        try:
            baselines.append(CheckedBaseline(name=baseline.name, plan=engines[name].engine.normalise(flags)))
        except InvalidConfig as exc:
            raise UserError(f"baseline {baseline.name!r}: {exc}") from None
    return baselines
