"""Entry point: ``python -m autotune_twin [--twin-* options] <SGLang 0.5.23 flags>``.

``python -m autotune_twin --personality vllm serve MODEL [vLLM 0.33 flags]`` runs the vLLM
personality instead (``autotune_twin.vllm.app``); ``--personality`` must come first. Without it,
the SGLang twin runs exactly as before.

Argument errors exit 2 (argparse, like SGLang); launch and memory failures exit 1; a SIGTERM or
SIGINT stops the server promptly and exits 0. ``--twin-inventory`` prints the simulated GPU
inventory as JSON without validating any other flag.
"""

from __future__ import annotations

import json
import sys

from autotune_twin.gpu_state import holdings
from autotune_twin.profile import ProfileError, TwinProfile, inventory, load_profile
from autotune_twin.sglang.flags import PROG, inventory_profile, parse_args, wants_inventory


def _profile_or_error(name: str) -> TwinProfile | None:
    try:
        return load_profile(name)
    except ProfileError as err:
        sys.stderr.write(f"{PROG}: error: --twin-profile: {err}\n")
        return None


PERSONALITIES = ("sglang", "vllm")


def _personality(argv: list[str]) -> tuple[str, list[str]]:
    """``--personality NAME`` (or ``--personality=NAME``) as the first argument; default SGLang."""
    if argv[:1] == ["--personality"] and len(argv) > 1:
        return argv[1], argv[2:]
    if argv[:1] and argv[0].startswith("--personality="):
        return argv[0].split("=", 1)[1], argv[1:]
    return "sglang", argv


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    personality, argv = _personality(argv)
    if personality not in PERSONALITIES:
        sys.stderr.write(f"{PROG}: error: --personality: {personality!r} is not one of {', '.join(PERSONALITIES)}\n")
        return 2
    if personality == "vllm":
        from autotune_twin.vllm.app import main as vllm_main

        return vllm_main(argv)
    if wants_inventory(argv):
        profile = _profile_or_error(inventory_profile(argv))
        if profile is None:
            return 2
        sys.stdout.write(json.dumps(inventory(profile, holdings()), indent=2) + "\n")
        return 0
    try:
        args, twin = parse_args(argv)
    except SystemExit as exit_:  # argparse: --help (0) or a usage error (2)
        return exit_.code if isinstance(exit_.code, int) else 2
    profile = _profile_or_error(twin.profile)
    if profile is None:
        return 2
    # Imported here so --help and --twin-inventory stay light.
    from autotune_twin.sglang.app import TwinApp, configure_logging

    configure_logging(args.tp_size, args.log_level)
    from autotune_twin.faults import resolve_fault

    load_seconds = twin.load_seconds if twin.load_seconds is not None else profile.timing.load_seconds
    fault = resolve_fault(twin.fault, twin.fault_after)
    app = TwinApp(args=args, profile=profile, seed=twin.seed, load_seconds=load_seconds, fault=fault, drift=twin.drift)
    return app.run()


if __name__ == "__main__":
    sys.exit(main())
