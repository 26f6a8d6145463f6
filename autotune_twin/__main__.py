"""Entry point: ``python -m autotune_twin [--twin-* options] <SGLang 0.5.23 flags>``.

``python -m autotune_twin --personality vllm serve MODEL [vLLM 0.34 flags]`` runs the vLLM
personality instead (``autotune_twin.vllm.app``); ``--personality`` must come first. Without it,
the SGLang twin runs exactly as before.

Argument errors exit 2 (argparse, like SGLang); launch and memory failures exit 1; a SIGTERM or
SIGINT stops the server promptly and exits 0. ``--twin-inventory`` prints the simulated GPU
inventory as JSON without validating any other flag.

``python -m autotune_twin calibrate ...`` and ``predict ...`` (first word) fit and query a profile
(``autotune_twin.fit_cli``); SGLang takes no positional argument, so neither word was a launch.
"""

from __future__ import annotations

import sys

from autotune_twin.cli import print_inventory, wants_inventory

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
    if argv[:1] and argv[0] in ("calibrate", "predict"):
        from autotune_twin import fit_cli

        return fit_cli.main(argv)
    personality, argv = _personality(argv)
    # Each personality is imported only when it runs, so --help and --twin-inventory stay light.
    if personality == "vllm":
        from autotune_twin.vllm import app as vllm
        from autotune_twin.vllm.flags import PROG as VLLM_PROG

        return print_inventory(argv, VLLM_PROG) if wants_inventory(argv) else vllm.main(argv)
    from autotune_twin.sglang.flags import PROG

    if personality != "sglang":
        sys.stderr.write(f"{PROG}: error: --personality: {personality!r} is not one of {', '.join(PERSONALITIES)}\n")
        return 2
    if wants_inventory(argv):
        return print_inventory(argv, PROG)
    from autotune_twin.sglang import app as sglang

    return sglang.main(argv)


if __name__ == "__main__":
    sys.exit(main())
