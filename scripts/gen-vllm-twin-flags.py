#!/usr/bin/env python3
"""Generate a vLLM release's flag table for the twin from its recorded ``vllm serve --help=all``.

    scripts/gen-vllm-twin-flags.py [HELP_TXT] [OUT_PY]

Defaults: ``tests/fixtures/vllm-0.34.0-serve-help.txt`` -> ``autotune_twin/vllm/_flags.py`` (the
release the personality speaks by default); the release is read from the help file's name. The
older release it can still speak was made with
``scripts/gen-vllm-twin-flags.py tests/fixtures/vllm-0.33.0-serve-help.txt autotune_twin/vllm/_flags_0_33.py``.
One entry per help entry, in help order, with its group: (group, option strings, kind, choices,
metavar). ``kind`` is ``switch`` (a bare flag), ``bool`` (a ``--x`` / ``--no-x`` or
``--enable-x`` / ``--disable-x`` pair) or an argparse nargs (``1``, ``?``, ``*``, ``+``).
``choices`` are argparse choices (``{a,b}`` in the help); a ``['a', 'b']`` list is vLLM's display
of values it checks later, kept as the metavar. Run ``ruff format`` on the output afterwards.

The help was produced on a CPU machine, in the conformance env (scripts/conformance-env.sh: the
release's wheel with --no-deps beside a CPU torch and the light modules it imports):
``VLLM_TARGET_DEVICE=cpu vllm serve --help=all``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELP = ROOT / "tests" / "fixtures" / "vllm-0.34.0-serve-help.txt"
OUT = ROOT / "autotune_twin" / "vllm" / "_flags.py"

_RELEASE = re.compile(r"vllm-(?P<version>\d+\.\d+\.\d+)-serve-help\.txt$")
_HEADER = re.compile(r"^(?P<title>[A-Za-z][\w ]*):$")
_ENTRY = re.compile(r"^  (?P<invocation>-\S.*?)(?:\s{2,}.*)?$")


def _kind_and_metavar(rest: str) -> tuple[str, tuple[str, ...] | None, str | None]:
    if rest == "":
        return "switch", None, None
    if rest.startswith("{") and rest.endswith("}"):
        return "1", tuple(rest[1:-1].split(",")), None
    if rest.startswith("{"):  # "{a,b} or name registered in ...": a display, not argparse choices
        return "1", None, rest
    if rest.startswith("["):
        if rest.startswith("['"):
            return "1", None, rest
        if rest.endswith(" ...]"):
            return "*", None, rest[1:].split(" ", 1)[0]
        return "?", None, rest[1:-1]
    if rest.endswith(" ...]"):
        return "+", None, rest.split(" ", 1)[0]
    return "1", None, None


def parse(text: str) -> list[tuple[str, tuple[str, ...], str, tuple[str, ...] | None, str | None, str]]:
    """(group, option strings, kind, choices, metavar, group description) per entry."""
    entries = []
    group, description = "", ""
    lines = text.split("\nJSON CLI arguments", 1)[0].splitlines()
    pending: str | None = None
    for index, line in enumerate(lines):
        header = _HEADER.match(line)
        if header is not None and not line.startswith(" "):
            group = header["title"]
            parts = []
            for following in lines[index + 1 :]:
                if not following.startswith("  ") or following.strip().startswith("-"):
                    break
                parts.append(following.strip())
            description = " ".join(parts).split(". ")[0].rstrip(". ")[:90]
            continue
        if group in ("", "positional arguments"):
            continue
        if pending is not None:  # an invocation that ended with a comma continues here
            line = "  " + pending + " " + line.strip()
            pending = None
        match = _ENTRY.match(line)
        if match is None:
            continue
        invocation = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        if invocation.endswith(","):
            pending = invocation
            continue
        names: list[str] = []
        rest_of_first = ""
        for position, alternative in enumerate(re.split(r", (?=-)", invocation)):
            name, _, rest = alternative.partition(" ")
            if not name.startswith("-"):
                continue
            names.append(name)
            if position == 0:
                rest_of_first = rest
        if "-h" in names:
            continue
        kind, choices, metavar = _kind_and_metavar(rest_of_first)
        longs = [n for n in names if n.startswith("--")]
        if (
            kind == "switch"
            and len(longs) == 2
            and (
                longs[1] == "--no-" + longs[0][2:]
                or (longs[0].startswith("--enable-") and longs[1] == "--disable-" + longs[0][len("--enable-") :])
            )
        ):
            kind = "bool"
        entries.append((group, tuple(names), kind, choices, metavar, description))
    return entries


def render(
    entries: list[tuple[str, tuple[str, ...], str, tuple[str, ...] | None, str | None, str]], version: str
) -> str:
    groups: dict[str, str] = {}
    for group, *_, description in entries:
        groups.setdefault(group, description)
    lines = [
        f'"""vLLM {version}\'s ``vllm serve`` flags, from its ``--help=all``',
        f"(tests/fixtures/vllm-{version}-serve-help.txt).",
        "",
        "Generated by scripts/gen-vllm-twin-flags.py: one entry per help entry, in help order:",
        "(group, option strings, kind, choices, metavar); kind is ``switch``, ``bool`` (a ``--x`` / ``--no-x``",
        "or ``--enable-x`` / ``--disable-x`` pair) or an argparse nargs (``1``, ``?``, ``*``, ``+``). To follow a",
        "new vLLM release, regenerate from its help rather than editing entries by hand;",
        "tests/twin/test_twin_vllm.py checks the table against the help text.",
        '"""',
        "",
        "# ruff: noqa: E501 (generated data)",
        "",
        "from __future__ import annotations",
        "",
        f"VLLM_VERSION = {version!r}",
        "",
        "FlagSpec = tuple[str, tuple[str, ...], str, tuple[str, ...] | None, str | None]",
        "",
        "GROUPS: dict[str, str] = {",
    ]
    lines += [f"    {group!r}: {description!r}," for group, description in groups.items()]
    lines += ["}", "", "FLAGS: tuple[FlagSpec, ...] = ("]
    for group, names, kind, choices, metavar, _ in entries:
        lines.append(f"    ({group!r}, {names!r}, {kind!r}, {choices!r}, {metavar!r}),")
    lines.append(")")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    source = Path(argv[0]) if argv else HELP
    target = Path(argv[1]) if len(argv) > 1 else OUT
    release = _RELEASE.search(source.name)
    if release is None:
        print(f"{source}: expected a file named vllm-X.Y.Z-serve-help.txt (the release is read from it)")
        return 2
    entries = parse(source.read_text())
    target.write_text(render(entries, release["version"]))
    print(f"{len(entries)} flags -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
