"""The twin's command line: every SGLang 0.5.23 launch flag, plus the ``--twin-*`` options.

The parser mimics ``python -m sglang.launch_server``: argparse with ``prog="launch_server.py"``,
prefix abbreviations allowed (so ``--cuda-graph-max-bs`` is ambiguous, as in 0.5.23), no choices
on ``--speculative-algorithm`` (``MTP`` parses and fails at launch), and one help entry per flag,
which is what the tuner reads to learn the valid flag set. The flag set comes from SGLang's own
``--help`` (``_flags.py``); the flags the twin simulates get SGLang's types and defaults
here, the others are accepted and have no effect.
"""

from __future__ import annotations

import argparse
import re
from functools import lru_cache
from typing import Any

from autotune_twin.cli import Container, FlagStyle, TwinOptions, add_flags, take_twin_options
from autotune_twin.sglang._flags import FLAGS

PROG = "launch_server.py"

_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def parse_length(text: str) -> int:
    """SGLang 0.5.23's length spelling: ``131072``, SI ``128k`` (x1000, decimals allowed) or IEC
    ``128Ki`` (x1024). Suffixes are case-sensitive, as in SGLang."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(k|M|G|T|Ki|Mi|Gi|Ti)?", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid length value: {text!r}")
    digits, suffix = match.groups()
    if suffix in _IEC and "." in digits:
        raise argparse.ArgumentTypeError(f"decimals are allowed for SI suffixes only: {text!r}")
    value = float(digits) * (_SI.get(suffix or "", 1) if suffix not in _IEC else _IEC[suffix])
    if value != int(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"invalid length value: {text!r}")
    return int(value)


# The flags the twin reads, with SGLang's types and defaults (keyed by the first option string).
_SIMULATED: dict[str, dict[str, Any]] = {
    "--model-path": {"required": True, "help": "The path of the model weights (the twin serves it by name)."},
    "--tokenizer-path": {},
    "--host": {"default": "127.0.0.1", "help": "The host of the HTTP server."},
    "--port": {"type": int, "default": 30000, "help": "The port of the HTTP server."},
    "--tp-size": {"type": int, "default": 1, "help": "The tensor parallelism size."},
    "--dtype": {"default": "auto"},
    "--kv-cache-dtype": {"default": "auto", "help": "Data type for kv cache storage (fp8 halves its size)."},
    "--context-length": {"type": parse_length, "help": "The model's maximum context length (131072, 128k, 128Ki)."},
    "--served-model-name": {},
    "--log-level": {"default": "info", "help": "The logging level of all loggers."},
    "--random-seed": {"type": int},
    "--api-key": {},
    "--watchdog-timeout": {"type": float, "default": 300.0},
    "--skip-server-warmup": {"help": "If set, skip warmup."},
    "--enable-metrics": {"help": "Enable log prometheus metrics (GET /metrics)."},
    "--decode-log-interval": {"type": int, "default": 40, "help": "Decode iterations between Decode batch logs."},
    "--speculative-algorithm": {"help": "Speculative algorithm: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, ..."},
    "--speculative-draft-model-path": {},
    "--speculative-num-steps": {"type": int},
    "--speculative-eagle-topk": {"type": int},
    "--speculative-num-draft-tokens": {"type": int},
    "--speculative-dflash-block-size": {"type": int},
    "--mem-fraction-static": {"type": float, "help": "Fraction of memory for weights and KV/state pools."},
    "--max-running-requests": {"type": int, "help": "The maximum number of running requests."},
    "--max-prefill-tokens": {"type": parse_length, "default": 16384},
    "--chunked-prefill-size": {"type": int, "help": "Tokens per chunked-prefill chunk; -1 disables chunking."},
    "--page-size": {"type": int},
    "--attention-backend": {"help": "Choose the kernels for attention layers."},
    "--mamba-full-memory-ratio": {"type": float, "default": 0.9, "help": "Mamba state memory : full KV memory."},
    "--mamba-radix-cache-strategy": {"default": "auto", "help": "The strategy to use for mamba radix cache."},
    "--max-mamba-cache-size": {"type": int},
    "--mamba-track-interval": {"type": int, "default": 256, "help": "Tokens between tracked mamba states."},
    "--disable-overlap-schedule": {"help": "Disable the overlap scheduler (mamba no_buffer requires it)."},
    "--cuda-graph-max-bs-decode": {"type": int, "help": "Maximum batch size captured for the decode cuda graph."},
    "--cuda-graph-max-bs-prefill": {"type": int},
    "--cuda-graph-backend-decode": {},
    "--disable-cuda-graph": {"help": "Deprecated. Use --cuda-graph-backend-decode disabled instead."},
}


def _add_bool(container: Container, names: tuple[str, ...], help_text: str) -> None:
    """SGLang's ``--x`` / ``--no-x``: argparse's BooleanOptionalAction on the positive spelling."""
    container.add_argument(names[0], action=argparse.BooleanOptionalAction, default=None, help=help_text)


def _add_inventory(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--twin-inventory",
        action="store_true",
        help="Print the simulated GPU inventory as JSON and exit.",
    )


_STYLE = FlagStyle(
    engine="SGLang", seed_flag="--random-seed", simulated=_SIMULATED, add_bool=_add_bool, extra=_add_inventory
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="autotune SGLang twin: a simulation of `python -m sglang.launch_server` (not real SGLang).",
    )
    return add_flags(parser, ((parser, spec) for spec in FLAGS), _STYLE)


@lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    # ~530 flags take a few ms to declare; parsing is stateless, so one parser serves every call.
    return build_parser()


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, TwinOptions]:
    """SGLang flags and twin options; argparse exits 2 on unknown or ambiguous flags, like SGLang."""
    args = _parser().parse_args(argv)
    twin = take_twin_options(args, engine_seed=args.random_seed, inventory=args.twin_inventory)
    return args, twin
