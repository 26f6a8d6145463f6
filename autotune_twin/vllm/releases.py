"""The vLLM releases the personality speaks: each one's flag table (generated from its ``--help=all``).

The newest is spoken by default; ``$AUTOTUNE_TWIN_VLLM_VERSION`` picks another (a space sets it in its
``env:``, which reaches the launches and the ``--help`` autotune reads its flags from), so a study of
a deployment that has not upgraded yet runs against that deployment's flag set. The releases differ
on the twin in their flags and the version they report; both have ``rejection_sample_method``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from autotune_twin.vllm import _flags, _flags_0_33

VERSION_ENV = "AUTOTUNE_TWIN_VLLM_VERSION"


@dataclass(frozen=True, eq=False)  # one object per release: hashed by identity (a parser cache key)
class Release:
    """One vLLM release's ``vllm serve`` flags, as its help groups them."""

    version: str
    groups: dict[str, str]
    flags: tuple[_flags.FlagSpec, ...]


RELEASES = {
    module.VLLM_VERSION: Release(version=module.VLLM_VERSION, groups=module.GROUPS, flags=module.FLAGS)
    for module in (_flags, _flags_0_33)
}
LATEST = _flags.VLLM_VERSION


class UnknownRelease(ValueError):
    """``$AUTOTUNE_TWIN_VLLM_VERSION`` names a release the twin does not speak."""


def spoken() -> Release:
    """The release ``$AUTOTUNE_TWIN_VLLM_VERSION`` names, else the newest.

    Raises:
        UnknownRelease: naming the releases the twin speaks.
    """
    version = os.environ.get(VERSION_ENV) or LATEST
    if version not in RELEASES:
        raise UnknownRelease(f"${VERSION_ENV}={version!r}: the twin speaks vLLM {', '.join(RELEASES)}")
    return RELEASES[version]
