"""The vLLM personality's command line: ``vllm serve [model_tag] [options]`` as vLLM parses it.

The flag set is the spoken release's own (:mod:`autotune_twin.vllm.releases`: 0.34.0, or 0.33.0 when
``$AUTOTUNE_TWIN_VLLM_VERSION`` asks; generated from its ``--help=all``), in its help groups. Like
vLLM's ``FlexibleArgumentParser``: underscores in flag names are read as dashes, ``-O3`` / ``-O 3``
/ ``-O=3`` mean ``--optimization-level 3``, ``--model X`` is moved to the positional model, dotted
keys (``--speculative-config.num_speculative_tokens 3``) are gathered into that flag's JSON,
prefixes of long flags are accepted, an unknown flag exits 2 with the top-level ``vllm`` usage, and
``--help`` prints the group overview (``--help=all`` every flag, ``--help=GROUP`` one group). The
flags the twin simulates get vLLM's types and defaults; the others are accepted and have no effect.
``--twin-*`` options change the simulation only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import defaultdict
from functools import lru_cache
from typing import Any, NoReturn

from autotune_twin.cli import Container, FlagStyle, TwinOptions, add_flags, take_twin_options
from autotune_twin.vllm.releases import Release, UnknownRelease, spoken

PROG = "vllm serve"
USAGE = "vllm serve [model_tag] [options]"
TOP_USAGE = (
    "usage: vllm [-h] [-v]\n"
    "            {chat,complete,serve,launch,bench,collect-env,download-kernels,preload,run-batch,snapshot}\n"
    "            ...\n"
)
JSON_TIP = (
    "When passing JSON CLI arguments, the following sets of arguments are equivalent:\n"
    '   --json-arg \'{"key1": "value1", "key2": {"key3": "value2"}}\'\n'
    "   --json-arg.key1 value1 --json-arg.key2.key3 value2\n\n"
    "Additionally, list elements can be passed individually using +:\n"
    '   --json-arg \'{"key4": ["value3", "value4", "value5"]}\'\n'
    "   --json-arg.key4+ value3 --json-arg.key4+='value4,value5'\n"
)
LOG_INTERVAL_ENV = "VLLM_LOG_STATS_INTERVAL"
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"  # what vllm serve serves without a model tag


def human_readable_int(value: str) -> int:
    """vLLM's ``1k`` = 1000, ``1K`` = 1024 (no decimals with binary suffixes), plain integers."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match is None:
        try:
            return int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"Invalid value: {value!r}") from None
    number, suffix = match.groups()
    if suffix.islower():
        return int(float(number) * {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}[suffix])
    if "." in number:
        raise argparse.ArgumentTypeError(
            f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean to use "
            f"{number}{suffix.lower()} instead?"
        )
    return int(number) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]


def human_readable_int_or_auto(value: str) -> int:
    """``-1`` or ``auto``: fit the longest context memory allows (returned as -1)."""
    if value.strip() == "-1" or value.strip().lower() == "auto":
        return -1
    return human_readable_int(value)


def loads(value: str) -> Any:
    """JSON flags (``--speculative-config``, ``-cc``): only the JSON syntax is checked here."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(f"Value {value} cannot be converted to {json.loads}.") from None


def check_port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("Port must be an integer") from None
    if not 1024 <= port <= 65535:
        raise argparse.ArgumentTypeError("Port must be between 1024 and 65535")
    return port


# The flags the twin reads, with vLLM's types and defaults (keyed by the first option string).
_SIMULATED: dict[str, dict[str, Any]] = {
    "--model": {"help": "Name or path of the model (moved to the positional model_tag)."},
    "--host": {"help": "Host name."},
    "--port": {"type": check_port, "default": 8000, "help": "Port number."},
    "--served-model-name": {"help": "The model name(s) used in the API."},
    "--api-key": {"help": "Require this key in the Authorization header."},
    "--tensor-parallel-size": {"type": int, "default": 1, "help": "Number of tensor parallel groups."},
    "--gpu-memory-utilization": {
        "type": float,
        "default": 0.92,
        "help": "Fraction of TOTAL GPU memory for this instance; that much must be free at start.",
    },
    "--max-model-len": {"type": human_readable_int_or_auto, "help": "Context length (1k, 1K, -1 or auto)."},
    "--max-num-seqs": {"type": int, "help": "Maximum number of sequences per iteration."},
    "--max-num-batched-tokens": {"type": human_readable_int, "help": "Maximum tokens per iteration."},
    "--enable-chunked-prefill": {"help": "Chunked prefill (on by default); --disable-chunked-prefill turns it off."},
    "--kv-cache-dtype": {"default": "auto", "help": "Data type for kv cache storage."},
    "--enable-prefix-caching": {"help": "Whether to enable prefix caching (on by default)."},
    "--enforce-eager": {"help": "Always use eager-mode PyTorch (no CUDA graphs)."},
    "--optimization-level": {"default": "2", "help": "-O0 .. -O3; -O2 by default."},
    "--max-cudagraph-capture-size": {"type": int, "help": "The maximum cudagraph capture size (tokens)."},
    "--speculative-config": {"type": loads, "help": "Speculative decoding configuration (JSON)."},
    "--spec-method": {"help": "The name of the speculative method to use."},
    "--spec-model": {"help": "The name of the draft model."},
    "--spec-tokens": {"type": int, "help": "The number of speculative tokens."},
    "--compilation-config": {"type": loads, "help": "Compilation configuration (JSON)."},
    "--seed": {"type": int, "help": "Random seed."},
    "--disable-log-stats": {"help": "Disable logging statistics (and /metrics)."},
    "--per-request-spec-decode-metrics": {
        "default": "none",
        "help": "Per-request speculative-decoding acceptance metrics in the response.",
    },
    "--uvicorn-log-level": {"default": "info", "help": "Log level for uvicorn."},
    "--enable-log-requests": {"help": "Enable logging request information."},
}


class _EnableDisable(argparse.Action):
    """``--x`` / ``--no-x`` or ``--enable-x`` / ``--disable-x``: one help entry, both spellings."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        negative = option_string is not None and option_string.startswith(("--no-", "--disable-"))
        setattr(namespace, self.dest, not negative)


class _Parser(argparse.ArgumentParser):
    """Errors print the serve usage and exit 2, as vLLM's do."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"usage: {USAGE}\n{PROG}: error: {message}\n")
        sys.exit(2)


def _add_bool(container: Container, names: tuple[str, ...], help_text: str) -> None:
    container.add_argument(*names, action=_EnableDisable, default=None, help=help_text)


def _add_log_interval(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--twin-log-interval",
        type=float,
        default=None,
        help=f"Seconds between the periodic stats lines (default: ${LOG_INTERVAL_ENV}, else 10).",
    )


_STYLE = FlagStyle(engine="vLLM", seed_flag="--seed", simulated=_SIMULATED, add_bool=_add_bool, extra=_add_log_interval)


def build_parser(release: Release | None = None) -> argparse.ArgumentParser:
    """The parser of ``release``'s flags (the spoken one by default) and the twin's options."""
    release = release or spoken()
    parser = _Parser(
        prog=PROG,
        usage=USAGE,
        description="autotune vLLM twin: a simulation of `vllm serve` (not real vLLM).",
        add_help=False,
    )
    parser.add_argument("model_tag", nargs="?", default=None, help="The model tag to serve.")
    parser.add_argument("-h", "--help", action="store_true", help="show this help message and exit")
    titled = ((name, text) for name, text in release.groups.items() if name != "options")
    groups = {name: parser.add_argument_group(name, text or None) for name, text in titled}
    entries = ((groups.get(group, parser._optionals), (n, k, c, m)) for group, n, k, c, m in release.flags)
    return add_flags(parser, entries, _STYLE)


@lru_cache(maxsize=2)
def _parser(release: Release) -> argparse.ArgumentParser:
    return build_parser(release)


def overview() -> str:
    """``vllm serve --help``: the groups, as vLLM prints them."""
    lines = [
        f"usage: {USAGE}",
        "",
        "Launch a local OpenAI-compatible API server to serve LLM",
        "completions via HTTP. (autotune twin: a simulation, not real vLLM.)",
        "",
        "Search by using: `--help=<ConfigGroup>` to explore options by section (e.g.,",
        "--help=ModelConfig, --help=Frontend)",
        "  Use `--help=all` to show all available flags at once.",
        "",
        "Config Groups:",
        "  positional arguments",
    ]
    lines += [f"  {name:<24}{description}".rstrip() for name, description in spoken().groups.items()]
    lines += ["", "For full list:            vllm serve --help=all", ""]
    return "\n".join(lines)


def help_text(keyword: str | None) -> str:
    """``--help`` (None), ``--help=all`` or ``--help=GROUP``."""
    parser = _parser(spoken())
    if keyword is None:
        return overview()
    if keyword == "all":
        return parser.format_help() + "\n" + JSON_TIP
    for group in parser._action_groups:
        if group.title and group.title.lower() == keyword.lower():
            formatter = parser._get_formatter()
            formatter.start_section(group.title)
            formatter.add_text(group.description)
            formatter.add_arguments(group._group_actions)
            formatter.end_section()
            return formatter.format_help()
    return overview()


def _preprocess(argv: list[str]) -> tuple[list[str], str | None, bool]:
    """vLLM's rewrites before argparse; returns (args, --help keyword, whether --model was used)."""
    help_keyword: str | None = None
    moved_model = False
    if "--model" in argv or any(a.startswith("--model=") for a in argv):
        index = next(i for i, a in enumerate(argv) if a == "--model" or a.startswith("--model="))
        if argv[index] == "--model" and index + 1 < len(argv):
            tag, rest = argv[index + 1], argv[index + 2 :]
        else:
            tag, rest = argv[index].removeprefix("--model="), argv[index + 1 :]
        argv = [tag, *argv[:index], *rest]
        moved_model = True
    out: list[str] = []
    dotted: dict[str, dict[str, Any]] = defaultdict(dict)
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == "--help" or arg.startswith("--help="):
            help_keyword = arg.split("=", 1)[1].lower() if "=" in arg else "overview"
            continue
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            head, dot, tail = key[2:].partition(".")
            key = "--" + head.replace("_", "-") + dot + tail
            if dot:
                if not eq:
                    value = argv[i + 1] if i + 1 < len(argv) else ""
                    skip = True
                try:
                    parsed: Any = json.loads(value)
                except json.JSONDecodeError:
                    parsed = value
                dotted["--" + head.replace("_", "-")][tail] = parsed
                continue
            out.append(key + eq + value if eq else key)
        elif arg.startswith("-O") and arg != "-O":
            out += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(argv) and argv[i + 1] in {"0", "1", "2", "3"}:
            out.append("--optimization-level")
        else:
            out.append(arg)
    for name, fields in dotted.items():
        out += [name, json.dumps(fields)]
    return out, help_keyword, moved_model


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, TwinOptions]:
    """vLLM flags (after ``serve``) and twin options; exits 0 after ``--help``, 2 on a usage error
    (and on a release the twin does not speak). ``args.vllm_version`` is the release spoken."""
    try:
        release = spoken()
    except UnknownRelease as err:
        sys.stderr.write(f"{PROG}: error: {err}\n")
        sys.exit(2)
    args_list, help_keyword, moved_model = _preprocess(argv)
    if help_keyword is not None:
        sys.stdout.write(help_text(None if help_keyword == "overview" else help_keyword))
        sys.exit(0)
    args, extra = _parser(release).parse_known_args(args_list)
    if extra:
        sys.stderr.write(f"{TOP_USAGE}vllm: error: unrecognized arguments: {' '.join(extra)}\n")
        sys.exit(2)
    if args.help:
        sys.stdout.write(overview())
        sys.exit(0)
    args.moved_model = moved_model
    args.vllm_version = release.version
    args.model = args.model_tag or DEFAULT_MODEL
    interval = args.twin_log_interval
    if interval is None:
        interval = float(os.environ.get(LOG_INTERVAL_ENV) or 10.0)
    twin = take_twin_options(args, engine_seed=args.seed, log_interval_s=max(interval, 0.05))
    delattr(args, "help")
    return args, twin


__all__ = ["build_parser", "help_text", "parse_args"]
