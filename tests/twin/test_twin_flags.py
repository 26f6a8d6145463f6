"""The twin's flag set is SGLang 0.5.23's: same long options, switches and choices as its --help."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from autotune_twin.sglang.flags import build_parser, parse_args, parse_length

HELP = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.23-help.txt"


def entries(help_text: str) -> dict[str, str]:
    """Long option -> what follows it in its help entry ('' for a switch)."""
    out: dict[str, str] = {}
    for line in help_text.split("\noptions:\n", 1)[-1].splitlines():
        match = re.match(r"^  (--\S.*)$", line)
        if match is None:
            continue
        invocation = re.split(r"\s{2,}", match.group(1), maxsplit=1)[0]
        for alternative in invocation.split(", "):
            name, _, rest = alternative.partition(" ")
            out[name] = rest
    return out


@pytest.mark.skipif(not HELP.is_file(), reason="no recorded SGLang --help")
def test_flag_set_matches_sglang_help() -> None:
    real = entries(HELP.read_text())
    twin = entries(build_parser().format_help())
    assert sorted(set(twin) - set(real)) == [
        "--twin-drift", "--twin-fault", "--twin-fault-after", "--twin-inventory", "--twin-load-seconds",
        "--twin-profile", "--twin-seed",
    ]
    assert sorted(set(real) - set(twin)) == []
    for name, rest in real.items():
        assert (twin[name] == "") == (rest == ""), name  # switch vs value
        if rest.startswith("{"):
            assert twin[name] == rest, name  # same choices


def test_parse_length_follows_sglang_suffixes() -> None:
    assert parse_length("131072") == 131072
    assert parse_length("128k") == 128000
    assert parse_length("25.6k") == 25600
    assert parse_length("128Ki") == 131072
    assert parse_length("1Mi") == 1048576
    for bad in ("128K", "1.5Ki", "abc", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_length(bad)


def test_twin_options_are_split_off() -> None:
    args, twin = parse_args(["--model-path", "m", "--random-seed", "5", "--twin-load-seconds", "0.5"])
    assert twin.seed == 5 and twin.load_seconds == 0.5 and twin.profile == "qwen3.6-27b-2xa6000"
    assert not hasattr(args, "twin_seed")
    assert parse_args(["--model", "m", "--twin-seed", "9"])[1].seed == 9
    assert args.mamba_full_memory_ratio == 0.9 and args.decode_log_interval == 40 and args.port == 30000
