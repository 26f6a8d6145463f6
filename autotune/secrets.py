"""Secrets: which values are secret and how they are kept out of storage, logs and profiles.

A secret is an environment variable named like one (``HF_TOKEN``, ``OPENAI_API_KEY``, ...) or a launch
flag named like one (``--api-key``, ``--ssl-keyfile-password``, ...). The server is launched with the
real values and the client sends the key in its ``Authorization`` header; what is stored or exported
holds ``***`` for a secret flag and no value for a secret environment variable, and a server log or
outcome has every known secret value replaced by ``***`` before it is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from autotune.space import FlagValue, flag_name

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIAL", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Environment names whose values must never be stored (HF_TOKEN, OPENAI_API_KEY, ...)."""
    return _SECRET_NAME.search(name) is not None


# Launch flags whose values are secrets (SGLang's --api-key/--admin-api-key, vLLM's and llama.cpp's
# --api-key, key-file passwords, vLLM's --hf-token): used by the client, never stored or shown.
_SECRET_FLAGS = frozenset({"api-key", "admin-api-key", "ssl-keyfile-password", "hf-token"})
REDACTED = "***"


def is_secret_flag(name: str) -> bool:
    """Flags whose values must never be stored (``--api-key``, ``--ssl-keyfile-password``, ...)."""
    name = flag_name(name)
    return name in _SECRET_FLAGS or name.endswith(("-api-key", "-password", "-secret"))


def secret_env_name(flag: str) -> str:
    """The environment variable an exported profile reads a secret flag from (``AUTOTUNE_API_KEY``)."""
    return "AUTOTUNE_" + flag_name(flag).upper().replace("-", "_")


def redact_flags(flags: Mapping[str, FlagValue]) -> dict[str, FlagValue]:
    """The flags with every secret value replaced by ``***``."""
    return {k: (REDACTED if is_secret_flag(k) and isinstance(v, str) else v) for k, v in flags.items()}


def secret_values(env: Mapping[str, str], flags: Mapping[str, FlagValue]) -> list[str]:
    """Every secret value a study knows (secret env values, secret flag values), longest first."""
    values = [v for k, v in env.items() if is_secret_name(k) and v]
    values += [v for k, v in flags.items() if is_secret_flag(k) and isinstance(v, str) and v and v != REDACTED]
    return sorted(set(values), key=len, reverse=True)


def auth_headers(flags: Mapping[str, FlagValue]) -> dict[str, str]:
    """The header a client needs for a server launched with these flags (``--api-key``, or the first
    line of ``--api-key-file``); empty when the server needs none."""
    key = flags.get("api-key")
    if not isinstance(key, str) or not key:
        key_file = flags.get("api-key-file")
        key = None
        if isinstance(key_file, str):
            try:
                key = next((line.strip() for line in Path(key_file).read_text().splitlines() if line.strip()), None)
            except OSError:
                key = None
    return {"Authorization": f"Bearer {key}"} if key and key != REDACTED else {}


def redact_env(env: dict[str, str]) -> dict[str, str | None]:
    return {name: (None if is_secret_name(name) else value) for name, value in env.items()}


def redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text
