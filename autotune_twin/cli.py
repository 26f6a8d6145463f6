"""The twin's command-line core: a generated flag table turned into argparse, and ``--twin-*``.

Each personality keeps its engine's flags as data (a table generated from that engine's
``--help``: option strings, kind, choices, metavar) and a short table of the flags the twin
simulates, with the engine's types and defaults. :func:`add_flag` declares one table entry the way
the engine's own parser does; every flag the twin does not simulate is accepted and has no effect.
:func:`add_twin_options` and :func:`take_twin_options` are the ``--twin-*`` options both
personalities share: they change the simulation, never the simulated server.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune_twin.faults import FAULT_KINDS, Fault, resolve_fault
from autotune_twin.gpu_state import holdings, inventory
from passmodel.profile import DEFAULT_PROFILE, ProfileError, TwinProfile, load_profile

PROFILE_ENV = "AUTOTUNE_TWIN_PROFILE"

IGNORED_HELP = "(accepted; not simulated by the twin)"

# The container flags are declared in: the parser itself or one of its help groups.
Container = argparse.ArgumentParser | argparse._ArgumentGroup
# One flag-table entry: option strings, kind (``switch``, ``bool`` or an nargs), choices, metavar.
FlagSpec = tuple[tuple[str, ...], str, tuple[str, ...] | None, str | None]
# How a personality declares a ``--x`` / ``--no-x`` entry: (container, option strings, help).
AddBool = Callable[[Container, tuple[str, ...], str], None]


def add_flag(
    container: Container,
    names: tuple[str, ...],
    kind: str,
    choices: tuple[str, ...] | None,
    metavar: str | None,
    *,
    simulated: Mapping[str, Mapping[str, Any]],
    add_bool: AddBool,
) -> None:
    """Declare one flag-table entry; ``simulated`` (keyed by first option string) gives its type,
    default and help when the twin reads it. ``kind`` is ``switch``, ``bool`` or an nargs."""
    spec = simulated.get(names[0])
    kwargs: dict[str, Any] = {"help": IGNORED_HELP} if spec is None else {"help": "", **spec}
    if kind == "switch":
        kwargs.pop("default", None)
        kwargs.pop("type", None)
        container.add_argument(*names, action="store_true", **kwargs)
        return
    if kind == "bool":
        add_bool(container, names, kwargs["help"])
        return
    if kind != "1":
        kwargs["nargs"] = kind
    if choices is not None:
        kwargs["choices"] = list(choices)
    if metavar is not None:
        kwargs["metavar"] = metavar
    container.add_argument(*names, **kwargs)


@dataclass(frozen=True)
class FlagStyle:
    """How a personality declares its engine's command line.

    Attributes:
        engine: the engine's name, for the ``--twin-*`` group's title.
        seed_flag: the engine's seed flag, the default of ``--twin-seed``.
        simulated: the flags the twin reads, by first option string: their argparse type, default, help.
        add_bool: how a ``--x`` / ``--no-x`` entry is declared.
        extra: the personality's own ``--twin-*`` options.
    """

    engine: str
    seed_flag: str
    simulated: Mapping[str, Mapping[str, Any]]
    add_bool: AddBool
    extra: Callable[[argparse._ArgumentGroup], None] | None = None


def add_flags(
    parser: argparse.ArgumentParser, entries: Iterable[tuple[Container, FlagSpec]], style: FlagStyle
) -> argparse.ArgumentParser:
    """Every entry of an engine's flag table (each in its container), then the ``--twin-*`` group."""
    for container, (names, kind, choices, metavar) in entries:
        add_flag(container, names, kind, choices, metavar, simulated=style.simulated, add_bool=style.add_bool)
    add_twin_options(parser, engine=style.engine, seed_flag=style.seed_flag, extra=style.extra)
    return parser


@dataclass(frozen=True)
class TwinOptions:
    """The ``--twin-*`` options: they change the simulation, never the simulated server.

    ``inventory`` is the SGLang personality's ``--twin-inventory``; ``log_interval_s`` the vLLM
    personality's ``--twin-log-interval`` (seconds between its periodic stats lines).
    """

    profile: str
    load_seconds: float | None
    seed: int
    fault: str | None = None
    fault_after: int = 2
    drift: float = 0.0
    inventory: bool = False
    log_interval_s: float = 10.0


def add_twin_options(
    parser: argparse.ArgumentParser,
    *,
    engine: str,
    seed_flag: str,
    extra: Callable[[argparse._ArgumentGroup], None] | None = None,
) -> None:
    """The ``--twin-*`` group; ``extra`` adds a personality's own options after ``--twin-load-seconds``."""
    group = parser.add_argument_group(f"autotune twin (simulation only; not {engine} flags)")
    group.add_argument(
        "--twin-profile",
        default=os.environ.get(PROFILE_ENV, DEFAULT_PROFILE),
        help="Built-in twin profile name (passmodel/profiles/*.yaml without .yaml) or a YAML path "
        f"(default: ${PROFILE_ENV}, else {DEFAULT_PROFILE}; the variable suits a launcher that must end "
        "with the engine's own command, as vLLM's serve, whose flags the real engine would refuse).",
    )
    group.add_argument(
        "--twin-load-seconds",
        type=float,
        default=None,
        help="Simulated startup time in seconds (default: the profile's).",
    )
    if extra is not None:
        extra(group)
    group.add_argument(
        "--twin-fault",
        choices=FAULT_KINDS,
        default=None,
        help="Inject a fault (default: the next entry of $AUTOTUNE_TWIN_FAULT_SCHEDULE, else none).",
    )
    group.add_argument(
        "--twin-fault-after",
        type=int,
        default=2,
        help="Generation requests served before a mid-measurement fault strikes.",
    )
    group.add_argument(
        "--twin-drift",
        type=float,
        default=0.0,
        help="Relative slow-down of every decode pass per minute since ready (0.05 = 5%% slower each minute).",
    )
    group.add_argument(
        "--twin-seed",
        type=int,
        default=None,
        help=f"Seed of the simulation's randomness: the same seed repeats a launch exactly (default: {seed_flag}, "
        "else a fresh seed each launch, so relaunches differ by the profile's timing.launch_sd).",
    )


def take_twin_options(args: argparse.Namespace, *, engine_seed: int | None, **extra: Any) -> TwinOptions:
    """The ``--twin-*`` options out of a parsed namespace (removed from it, so the namespace is
    the engine's flags only); the seed defaults to the engine's own seed flag, else a fresh one, so
    that relaunches differ as a real engine's do (a given seed repeats a launch exactly)."""
    seed = args.twin_seed if args.twin_seed is not None else engine_seed
    twin = TwinOptions(
        profile=args.twin_profile,
        load_seconds=args.twin_load_seconds,
        seed=seed if seed is not None else secrets.randbits(31),
        fault=args.twin_fault,
        fault_after=args.twin_fault_after,
        drift=args.twin_drift,
        **extra,
    )
    for name in [n for n in vars(args) if n.startswith("twin_")]:
        delattr(args, name)
    return twin


def wants_inventory(argv: Sequence[str]) -> bool:
    """``--twin-inventory`` works without any other flag (none is validated)."""
    return "--twin-inventory" in argv


def print_inventory(argv: Sequence[str], prog: str) -> int:
    """``--twin-inventory``: the simulated GPUs of the ``--twin-profile`` given next to it, as JSON
    on stdout (running twin servers show as processes holding memory); no other flag is checked."""
    pre = argparse.ArgumentParser(prog=prog, add_help=False, allow_abbrev=False)
    pre.add_argument("--twin-profile", default=os.environ.get(PROFILE_ENV, DEFAULT_PROFILE))
    known, _ = pre.parse_known_args(list(argv))
    profile = profile_or_error(str(known.twin_profile), prog)
    if profile is None:
        return 2
    sys.stdout.write(json.dumps(inventory(profile, holdings()), indent=2) + "\n")
    return 0


def profile_or_error(name: str, prog: str) -> TwinProfile | None:
    """The profile, or None after an argparse-style error line naming ``--twin-profile``."""
    try:
        return load_profile(name)
    except ProfileError as err:
        sys.stderr.write(f"{prog}: error: --twin-profile: {err}\n")
        return None


@dataclass(frozen=True)
class Launch:
    """What a personality starts from: the engine's flags, the twin options, profile and fault."""

    args: argparse.Namespace
    twin: TwinOptions
    profile: TwinProfile
    fault: Fault


def prepare(
    argv: Sequence[str], *, parse: Callable[[list[str]], tuple[argparse.Namespace, TwinOptions]], prog: str
) -> Launch | int:
    """Parse the flags, load the profile and resolve the fault; or the exit code when one fails:
    argparse's own (0 after ``--help``, 2 on a usage error), 2 for a bad profile or fault."""
    try:
        args, twin = parse(list(argv))
    except SystemExit as exit_:  # argparse: --help (0) or a usage error (2)
        return exit_.code if isinstance(exit_.code, int) else 2
    profile = profile_or_error(twin.profile, prog)
    if profile is None:
        return 2
    try:
        fault = resolve_fault(twin.fault, twin.fault_after)
    except ValueError as err:
        sys.stderr.write(f"{prog}: error: {err}\n")
        return 2
    return Launch(args=args, twin=twin, profile=profile, fault=fault)
