"""One exception tree for autotune.

Every error a user can cause derives from :class:`UserError` (the CLI prints one line and exits 2);
runtime failures derive from :class:`AutotuneError` directly (exit 1). Context travels as
keyword-only fields so the CLI can print hints without parsing messages.
"""

from __future__ import annotations

from pathlib import Path


class AutotuneError(Exception):
    """Root of every error autotune raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, log_path: Path | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.log_path = log_path


class UserError(AutotuneError):
    """Something the user can fix: a file, a flag, a name, a URL."""

    exit_code = 2


class SpaceError(UserError):
    """A search-space file is unreadable or invalid."""

    def __init__(self, message: str, *, path: Path, field: str | None = None, hint: str | None = None) -> None:
        where = f"{path}" + (f": {field}" if field else "")
        super().__init__(f"{where}: {message}", hint=hint)
        self.path = path
        self.field = field


class SuiteError(UserError):
    """A prompt suite is missing, empty or malformed."""


class FlagError(UserError):
    """A flag the engine does not know, or an invalid combination of flags."""

    def __init__(self, message: str, *, flag: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.flag = flag


class LauncherError(UserError):
    """The engine launcher cannot be run at all (not found, not executable, broken --help)."""


class StorageError(UserError):
    """The study storage cannot be opened, or a study is not in it."""


class GPUError(UserError):
    """The GPUs cannot be read (no driver, bad index, inventory command failed)."""


class MeasurementError(AutotuneError):
    """A benchmark request failed or returned something unusable."""


class ServerError(AutotuneError):
    """A server process could not be started or stopped."""
