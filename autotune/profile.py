"""The exported profile: the winning launch, its numbers, and renderings as YAML, shell, systemd.

A speculation schedule's profile (``export --schedule``) also holds its adaptive config and its
figures per load level, so ``bench --profile`` launches exactly that config and checks every level.

Secret environment values never enter a profile: their names are kept (so the rendered command
still asks for them) and their values are left to the deployment. Secret flags (``--api-key``) are
stored as ``***`` and rendered as an environment variable (``--api-key "$AUTOTUNE_API_KEY"``).
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.engines import get_engine
from autotune.engines.base import LaunchPlan
from autotune.errors import UserError
from autotune.measure.protocol import MeasureSettings
from autotune.secrets import REDACTED, is_secret_flag, secret_env_name
from autotune.space import FlagValue, resolve_command

ExportFormat = Literal["yaml", "sh", "systemd"]
EXPORT_HOST, EXPORT_PORT = "127.0.0.1", 30000  # where an exported server listens unless told otherwise


class ProfileMetric(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float
    unit: str
    ci95: float | None = None
    n: int | None = None


class ProfileGain(BaseModel):
    """The profile's gain over the baseline the study's verdict compares with, with the verdict's interval."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    over: str = Field(description="the baseline's name")
    gain: float = Field(description="relative: 0.05 is 5 % faster")
    low: float | None = Field(default=None, description="95 % interval, paired by round and widened as the verdict's")
    high: float | None = None

    def text(self) -> str:
        interval = f" ({self.low:+.1%} to {self.high:+.1%})" if self.low is not None and self.high is not None else ""
        return f"gain over {self.over}: {self.gain:+.1%}{interval}, the interval the verdict uses"


class ProfileLevel(BaseModel):
    """What the profile's server measured at one load level."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int
    metrics: dict[str, ProfileMetric]


class Profile(BaseModel):
    """A measured launch configuration, ready to deploy or to re-check with ``autotune bench``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    study: str
    trial: int
    engine: str
    engine_version: str | None = None
    model: str
    launcher: list[str]
    flags: dict[str, FlagValue]
    env: dict[str, str | None] = Field(default_factory=dict, description="None marks a secret: set it yourself")
    gpu_devices: list[int] | None = None
    gpus: list[str] = Field(default_factory=list)
    simulated: bool = False
    suite: str | None = None
    measure: MeasureSettings | None = Field(default=None, description="how the metrics were measured")
    metrics: dict[str, ProfileMetric] = Field(default_factory=dict)
    confirmed_launches: int | None = Field(
        default=None, description="the metrics' objective is the mean over this many fresh launches; None: one"
    )
    verdict: str | None = Field(default=None, description="the study's verdict in one line (e.g. keep a baseline)")
    gain: ProfileGain | None = Field(default=None, description="over the baseline the verdict compares with")
    levels: list[ProfileLevel] = Field(default_factory=list, description="per load level: bench checks each")
    adaptive_config: dict[str, dict[str, list[int]]] | None = Field(
        default=None, description="the schedule's config file its flags name (SGLang's adaptive config)"
    )
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))

    def secret_flags(self) -> dict[str, str]:
        """Secret flags of the profile -> the environment variable that carries each value."""
        return {name: secret_env_name(name) for name, value in self.flags.items() if is_secret_flag(name)}

    def with_secrets(self, environ: dict[str, str]) -> Profile:
        """The profile with each secret flag's value read from its environment variable.

        Raises:
            UserError: a variable is not set.
        """
        flags = dict(self.flags)
        for name, variable in self.secret_flags().items():
            if flags[name] == REDACTED:
                if not environ.get(variable):
                    raise UserError(f"the profile's --{name} is a secret: set {variable} in the environment first")
                flags[name] = environ[variable]
        return self.model_copy(update={"flags": flags})

    def with_adaptive_config_in(self, folder: Path) -> Profile:
        """The profile reading its own adaptive config, written into ``folder``: a re-check launches
        what the profile holds, whatever the deployment's copy says."""
        flag = self._config_flag()
        if self.adaptive_config is None or flag is None:
            return self
        folder.mkdir(parents=True, exist_ok=True)
        path = (folder / f"{self.study}-adaptive.json").resolve()
        path.write_text(json.dumps(self.adaptive_config, indent=2) + "\n", encoding="utf-8")
        return self.model_copy(update={"flags": {**self.flags, flag: str(path)}})

    def _config_flag(self) -> str | None:
        """The flag naming the schedule's config file, on this profile's engine."""
        form = get_engine(self.engine).schedule_form
        return form.config_flag if form is not None else None

    def argv(self, *, host: str, port: int) -> list[str]:
        plan = LaunchPlan(engine=self.engine, flags=self.flags)
        return get_engine(self.engine).build_argv(
            resolve_command(self.launcher), model=self.model, plan=plan, host=host, port=port
        )

    def summary(self) -> str:
        parts = [f"study {self.study}, trial {self.trial}"]
        speed = self.metrics.get("decode_tok_s")
        if speed is not None:
            ci = f" ± {speed.ci95:.1f}" if speed.ci95 is not None else ""
            parts.append(f"decode {speed.value:.1f}{ci} {speed.unit}")
        accept = self.metrics.get("accept_length")
        if accept is not None:
            parts.append(f"accept length {accept.value:.2f}")
        parts.append(f"confirmed over {self.confirmed_launches} launches" if self.confirmed_launches else "unconfirmed")
        if self.suite:
            parts.append(f"suite {self.suite}")
        if self.simulated:
            parts.append("SIMULATED on the autotune twin, not a real GPU")
        return "; ".join(parts)

    def comment_lines(self) -> list[str]:
        """What a rendered profile says of itself: its summary, then the study's verdict."""
        lines = [self.summary(), *([f"verdict: {self.verdict}"] if self.verdict else [])]
        if self.gain is not None:
            lines.append(self.gain.text())
        if self.adaptive_config is not None:
            flag = self._config_flag()
            where = self.flags.get(flag) if flag is not None else None
            lines.append(f"speculation schedule: {where} must hold {json.dumps(self.adaptive_config)}")
        return lines


def render_yaml(profile: Profile) -> str:
    """The profile as data, headed by what it says of itself in comments (as the shell and systemd
    exports are): a reader of the file sees the verdict and the gain without parsing it."""
    data = profile.model_dump(mode="json")
    data["env"].update({variable: None for variable in profile.secret_flags().values()})
    header = "".join(f"# {part}\n" for line in profile.comment_lines() for part in line.splitlines())
    return header + yaml.safe_dump(data, sort_keys=False)


def _environment(profile: Profile) -> tuple[dict[str, str], list[str]]:
    plain = {k: v for k, v in profile.env.items() if v is not None}
    if profile.gpu_devices is not None:
        plain["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in profile.gpu_devices)
    secrets = [k for k, v in profile.env.items() if v is None]
    secrets += [v for v in profile.secret_flags().values() if v not in secrets]
    return plain, secrets


def _secret_positions(profile: Profile, argv: list[str]) -> dict[int, str]:
    """argv index of each secret flag's value -> its environment variable."""
    variables = profile.secret_flags()
    found = {}
    for i, arg in enumerate(argv[1:], start=1):
        name = argv[i - 1].lstrip("-")
        if arg == REDACTED and argv[i - 1].startswith("--") and name in variables:
            found[i] = variables[name]
    return found


def render_shell(profile: Profile, *, host: str, port: int) -> str:
    plain, secrets = _environment(profile)
    lines = ["#!/usr/bin/env bash", f"# autotune profile: {profile.summary()}"]
    lines += [f"# {line}" for line in profile.comment_lines()[1:]]
    lines.append("set -euo pipefail")
    lines += [f"export {name}={shlex.quote(value)}" for name, value in plain.items()]
    lines += [f': "${{{name}:?set {name} in the environment first}}"' for name in secrets]
    argv = profile.argv(host=host, port=port)
    secret_at = _secret_positions(profile, argv)
    words = [f'"${secret_at[i]}"' if i in secret_at else shlex.quote(a) for i, a in enumerate(argv)]
    lines.append("exec " + " ".join(words))
    return "\n".join(lines) + "\n"


def _systemd_quote(arg: str) -> str:
    # systemd expands % specifiers and $VARIABLES in ExecStart: double them to keep them literal.
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if escaped and all(c.isalnum() or c in "-_./:=,+@" for c in escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_systemd(profile: Profile, *, host: str, port: int) -> str:
    plain, secrets = _environment(profile)
    argv = profile.argv(host=host, port=port)
    secret_at = _secret_positions(profile, argv)  # systemd expands ${NAME} from EnvironmentFile=
    words = [f"${{{secret_at[i]}}}" if i in secret_at else _systemd_quote(a) for i, a in enumerate(argv)]
    lines = [
        "[Unit]",
        f"Description={profile.engine} server tuned by autotune ({profile.study}, trial {profile.trial})",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        *(f"# {line}" for line in profile.comment_lines()),
    ]
    lines += [f"Environment={_systemd_quote(f'{k}={v}')}" for k, v in plain.items()]
    if secrets:
        lines.append(f"# Secrets ({', '.join(secrets)}) are not embedded: put NAME=value lines in this file.")
        lines.append(f"EnvironmentFile=-/etc/autotune/{profile.study}.env")
    lines += [
        "ExecStart=" + " ".join(words),
        "Restart=on-failure",
        "RestartSec=10",
        "KillMode=control-group",
        "TimeoutStopSec=60",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def render(profile: Profile, fmt: ExportFormat, *, host: str = EXPORT_HOST, port: int = EXPORT_PORT) -> str:
    if fmt == "yaml":
        return render_yaml(profile)
    if fmt == "sh":
        return render_shell(profile, host=host, port=port)
    return render_systemd(profile, host=host, port=port)


def load_profile(path: Path) -> Profile:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return Profile.model_validate(data)
    except FileNotFoundError:
        raise UserError(f"{path}: profile not found") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: malformed YAML: {exc}") from None
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"])
        raise UserError(f"{path}: {field}: {error['msg']}") from None
