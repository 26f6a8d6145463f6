"""Search space: the YAML file a user edits, and the first arrow of the flow.

Owns the file schema (pydantic, unknown keys rejected), loading with errors that name the file and
the field, and turning an Optuna trial into a :class:`Candidate` (``suggest``). Knows nothing of
processes or engines beyond the flag spelling the user wrote, and which values an engine says change
the model's outputs (refused unless the space allows lossy speculation).
"""

from __future__ import annotations

import operator
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autotune.engines import DEFAULT_ENGINE, engine_names, get_engine
from autotune.errors import SpaceError
from autotune.measure.agreement import AgreementSpec
from autotune.measure.protocol import MeasureProtocol, MeasureSettings, ObjectiveMetric

FlagValue = str | int | float | bool
"""A flag's value as the user writes it; ``True`` means a bare switch, ``False`` leaves it out."""

SPACE_VERSION = 1


PYTHON_PLACEHOLDER = "{python}"


def resolve_command(argv: list[str]) -> list[str]:
    """Replace ``{python}`` with the interpreter running autotune (so the twin needs no PATH setup)."""
    return [sys.executable if part == PYTHON_PLACEHOLDER else part for part in argv]


def flag_name(raw: str) -> str:
    """The canonical spelling of a flag: without leading dashes (``--tp-size`` -> ``tp-size``)."""
    return raw.lstrip("-")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}
_CONDITION = re.compile(r"^\s*(?P<flag>-{0,2}[A-Za-z0-9][\w-]*)\s*(?P<op>==|!=|>=|<=|>|<)\s*(?P<value>\S+)\s*$")


class Condition(_Strict):
    """``when: "tp-size > 1"``: the parameter is sampled only when this holds."""

    flag: str
    op: str
    value: FlagValue

    @classmethod
    def parse(cls, text: str) -> Condition:
        match = _CONDITION.match(text)
        if match is None:
            raise ValueError(f"cannot read condition {text!r}; write it as '<flag> <op> <value>', e.g. 'tp-size > 1'")
        value: FlagValue = yaml.safe_load(match["value"])
        return cls(flag=flag_name(match["flag"]), op=match["op"], value=value)

    def holds(self, flags: Mapping[str, FlagValue]) -> bool:
        if self.flag not in flags:
            return False
        return _OPERATORS[self.op](flags[self.flag], self.value)

    def __str__(self) -> str:
        return f"{self.flag} {self.op} {self.value}"


class _Param(_Strict):
    when: Condition | None = None
    help: str | None = None

    @field_validator("when", mode="before")
    @classmethod
    def _parse_when(cls, value: object) -> object:
        return Condition.parse(value) if isinstance(value, str) else value


class IntParam(_Param):
    type: Literal["int"]
    low: int
    high: int
    step: int = 1
    log: bool = False

    @model_validator(mode="after")
    def _check_range(self) -> IntParam:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is greater than high ({self.high})")
        if self.step < 1:
            raise ValueError("step must be at least 1")
        return self

    def contains(self, value: FlagValue) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high


class FloatParam(_Param):
    type: Literal["float"]
    low: float
    high: float
    step: float | None = None
    log: bool = False

    @model_validator(mode="after")
    def _check_range(self) -> FloatParam:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is greater than high ({self.high})")
        if self.step is not None and self.step <= 0:
            raise ValueError("step must be positive")
        if self.log and self.step is not None:
            raise ValueError("log and step cannot be combined (Optuna's rule)")
        return self

    def contains(self, value: FlagValue) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and self.low <= value <= self.high


class CategoricalParam(_Param):
    type: Literal["categorical"]
    choices: list[FlagValue] = Field(min_length=1)

    def contains(self, value: FlagValue) -> bool:
        return value in self.choices


Param = Annotated[IntParam | FloatParam | CategoricalParam, Field(discriminator="type")]
PARAM_TYPES = tuple(get_args(m.model_fields["type"].annotation)[0] for m in (IntParam, FloatParam, CategoricalParam))


class Baseline(_Strict):
    """A configuration measured first, e.g. the user's current launch or the engine's defaults.

    Flags not named here keep the engine's default (the flag is left out of the command).
    """

    name: str = Field(pattern=r"^[\w.-]+$")
    flags: dict[str, FlagValue] = Field(default_factory=dict)
    note: str | None = None

    @field_validator("flags", mode="before")
    @classmethod
    def _canonical(cls, value: object) -> object:
        return {flag_name(str(k)): v for k, v in value.items()} if isinstance(value, dict) else value


class GPUSpec(_Strict):
    devices: list[int] | None = Field(default=None, description="GPU indices, passed as CUDA_VISIBLE_DEVICES")
    inventory: Literal["nvml", "none"] | list[str] = Field(
        default="nvml",
        description="'nvml' reads real GPUs; 'none' for CPU engines; a command (argv list) prints the inventory "
        "as JSON instead",
    )
    busy_wait_s: float = Field(default=600.0, ge=0, description="wait this long for busy GPUs, then skip")
    release_timeout_s: float = Field(default=120.0, ge=0, description="wait this long for memory after a stop")
    model_bytes: float | None = Field(
        default=None, gt=0, description="weight bytes of the model, all shards (read from a local model if unset)"
    )


class MeasurementSpec(MeasureProtocol):
    """How each server is measured (see measure/client.py for the protocol)."""

    suite: str = "builtin:mixed"
    concurrency: list[int] = Field(default=[1], min_length=1, description="levels measured, in order")
    agreement: AgreementSpec = Field(default_factory=AgreementSpec, description="greedy output check per trial")

    @field_validator("concurrency", mode="before")
    @classmethod
    def _listify(cls, value: object) -> object:
        return [value] if isinstance(value, int) else value

    @model_validator(mode="after")
    def _check_levels(self) -> MeasurementSpec:
        if any(c < 1 for c in self.concurrency):
            raise ValueError("concurrency: levels must be at least 1")
        return self


class ObjectiveSpec(_Strict):
    """What the study maximises: a metric at one concurrency level."""

    metric: ObjectiveMetric = Field(
        default="decode_tok_s",
        description="decode_tok_s: mean per-request decode speed; output_tok_s: aggregate output tokens/s",
    )
    concurrency: int = Field(default=1, ge=1)
    levels: list[int] | None = Field(
        default=None,
        min_length=1,
        description="load levels (measured concurrencies) that each get their own winner; concurrency is the primary",
    )


class SLOSpec(_Strict):
    """Service-level limits, used as constraints (a trial beyond them is infeasible)."""

    p95_ttft_s: float | None = Field(default=None, gt=0)
    p95_itl_s: float | None = Field(default=None, gt=0)

    def limits(self) -> dict[str, float]:
        return {k: v for k, v in (("p95_ttft_s", self.p95_ttft_s), ("p95_itl_s", self.p95_itl_s)) if v is not None}

    def broken(self, values: Mapping[str, float]) -> list[str]:
        """The limits these measured values exceed (a limit on an unmeasured value is not broken)."""
        return [name for name, limit in self.limits().items() if name in values and values[name] > limit]


class LaunchSpec(_Strict):
    timeout_s: float = Field(default=900.0, gt=0, description="deadline for the server to become ready")
    stop_timeout_s: float = Field(default=30.0, gt=0, description="grace after SIGTERM before SIGKILL")


ENGINE_PARAM = "engine"
"""The tuned categorical that chooses the engine when a space offers several (``engines:``)."""


class EngineSpec(_Strict):
    """One engine a study may choose: its launcher and the flags fixed for it."""

    launcher: list[str] = Field(min_length=1)
    fixed: dict[str, FlagValue] = Field(default_factory=dict)

    @field_validator("fixed", mode="before")
    @classmethod
    def _canonical(cls, value: object) -> object:
        return {flag_name(str(k)): v for k, v in value.items()} if isinstance(value, dict) else value


class SearchSpace(_Strict):
    """A whole search-space file."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    version: Literal[1]
    study: str | None = Field(default=None, pattern=r"^[\w.-]+$", description="default study name")
    engine: str = DEFAULT_ENGINE
    engines: dict[str, EngineSpec] | None = Field(
        default=None, description="several engines; the tuned categorical 'engine' chooses among them"
    )
    launcher: list[str] | None = Field(default=None, min_length=1)
    model: str
    config_json: str | None = Field(
        default=None,
        alias="model_config",
        description="the model's config.json where the model is not local (relative: to this file)",
    )
    draft_model_configs: dict[str, str] = Field(
        default_factory=dict, description="a draft model path -> its config.json, where the drafter is not local"
    )
    gpus: GPUSpec = GPUSpec()
    env: dict[str, str] = Field(default_factory=dict)
    fixed: dict[str, FlagValue] = Field(default_factory=dict)
    tuned: dict[str, Param] = Field(default_factory=dict)
    baselines: list[Baseline] = Field(default_factory=list)
    measurement: MeasurementSpec = MeasurementSpec()
    objective: ObjectiveSpec = ObjectiveSpec()
    slo: SLOSpec = SLOSpec()
    launch: LaunchSpec = LaunchSpec()
    allow_lossy_speculation: bool = Field(
        default=False,
        description="the user accepts changed outputs: a space may offer speculation whose verification "
        "accepts tokens the target would reject (the engine says which values do)",
    )
    source: Path | None = Field(default=None, exclude=True, description="file this space was read from")

    @field_validator("fixed", "tuned", mode="before")
    @classmethod
    def _canonical(cls, value: object) -> object:
        return {flag_name(str(k)): v for k, v in value.items()} if isinstance(value, dict) else value

    @field_validator("objective", mode="before")
    @classmethod
    def _objective_shorthand(cls, value: object) -> object:
        return {"metric": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_consistency(self) -> SearchSpace:
        if self.engines is None and self.launcher is None:
            raise ValueError("launcher: required key is missing")
        if self.engines is not None:
            if self.launcher is not None:
                raise ValueError("launcher: with 'engines', each engine names its own launcher")
            choice = self.tuned.get(ENGINE_PARAM)
            if not isinstance(choice, CategoricalParam) or not set(map(str, choice.choices)) <= set(self.engines):
                raise ValueError(
                    f"tuned.{ENGINE_PARAM}: with 'engines', tune '{ENGINE_PARAM}' as a categorical over "
                    f"{sorted(self.engines)}"
                )
        if self.objective.concurrency not in self.measurement.concurrency:
            raise ValueError(
                f"objective.concurrency: {self.objective.concurrency} is not one of the measured levels "
                f"(measurement.concurrency: {self.measurement.concurrency})"
            )
        for level in self.objective.levels or []:
            if level not in self.measurement.concurrency:
                raise ValueError(
                    f"objective.levels: {level} is not one of the measured levels "
                    f"(measurement.concurrency: {self.measurement.concurrency})"
                )
        levels = self.objective.levels
        if levels is not None and (len(set(levels)) != len(levels) or self.objective.concurrency not in levels):
            raise ValueError(
                f"objective.levels: list each level once, the primary level (objective.concurrency: "
                f"{self.objective.concurrency}) among them"
            )
        overlap = sorted(set(self.fixed) & set(self.tuned))
        if overlap:
            raise ValueError(f"tuned.{overlap[0]}: the flag is both fixed and tuned; keep it in one place")
        seen: set[str] = set(self.fixed)
        for name, param in self.tuned.items():
            if param.when is not None and param.when.flag not in seen:
                raise ValueError(
                    f"tuned.{name}: condition refers to {param.when.flag!r}, which is not a fixed flag "
                    "or a tuned flag listed above it"
                )
            seen.add(name)
        names = [b.name for b in self.baselines]
        if len(names) != len(set(names)):
            raise ValueError("baselines: baseline names must be unique")
        if not self.allow_lossy_speculation:
            self._refuse_lossy()
        for baseline in self.baselines:
            for flag, value in baseline.flags.items():
                tuned = self.tuned.get(flag)
                if tuned is not None and not tuned.contains(value):
                    raise ValueError(
                        f"baselines.{baseline.name}.{flag}: {value!r} is outside the tuned range of this flag"
                    )
        return self

    def _refuse_lossy(self) -> None:
        """A value that changes the model's outputs, wherever the space gives it, needs
        ``allow_lossy_speculation``: the engine says which values do (one flag carries each)."""
        places: list[tuple[str, str, str, FlagValue]] = []  # (field, engine, flag, value)
        for engine in (e for e in self.engine_names() if e in engine_names()):  # an unknown one is refused later
            places += [(f"fixed.{name}", engine, name, value) for name, value in self.fixed_for(engine).items()]
            for name, param in self.tuned.items():
                if engine not in self._owners(name):
                    continue
                if isinstance(param, CategoricalParam):
                    places += [(f"tuned.{name}", engine, name, choice) for choice in param.choices]
                elif isinstance(param, (IntParam, FloatParam)):  # a range is as lossy as its ends
                    places += [(f"tuned.{name}", engine, name, end) for end in (param.low, param.high)]
            for baseline in self.baselines:
                places += [(f"baselines.{baseline.name}.{k}", engine, k, v) for k, v in baseline.flags.items()]
        for field, engine, name, value in places:
            reason = get_engine(engine).lossy_speculation({name: value}) if name != ENGINE_PARAM else None
            if reason is not None:
                raise ValueError(
                    f"{field}: {reason}; set allow_lossy_speculation: true if changed outputs are acceptable"
                )

    def engine_names(self) -> list[str]:
        return list(self.engines) if self.engines is not None else [self.engine]

    def launcher_for(self, engine: str) -> list[str]:
        if self.engines is not None:
            return self.engines[engine].launcher
        assert self.launcher is not None
        return self.launcher

    def fixed_for(self, engine: str) -> dict[str, FlagValue]:
        extra = self.engines[engine].fixed if self.engines is not None else {}
        return {**self.fixed, **extra}

    def split_engine(self, flags: Mapping[str, FlagValue]) -> tuple[str, dict[str, FlagValue]]:
        """(engine, its flags): the chosen engine's fixed flags join, the choice itself leaves."""
        if self.engines is None:
            return self.engine, dict(flags)
        engine = str(flags[ENGINE_PARAM])
        rest = {k: v for k, v in flags.items() if k != ENGINE_PARAM}
        return engine, {**self.engines[engine].fixed, **rest}

    def _owners(self, name: str) -> set[str]:
        """The engines a tuned flag can reach, following its condition chain to the engine choice."""
        param = self.tuned.get(name)
        if param is None or param.when is None:
            return set(self.engine_names())
        if param.when.flag == ENGINE_PARAM and param.when.op == "==":
            return {str(param.when.value)}
        return self._owners(param.when.flag)

    def flags_for(self, engine: str) -> list[str]:
        """Every flag name that can reach this engine's command line (to check against its --help)."""
        names = list(self.fixed_for(engine))
        names += [n for n in self.tuned if n != ENGINE_PARAM and engine in self._owners(n)]
        for baseline in self.baselines:
            if str(baseline.flags.get(ENGINE_PARAM, engine)) == engine:
                names += [f for f in baseline.flags if f != ENGINE_PARAM]
        return list(dict.fromkeys(names))

    def objective_levels(self) -> list[int]:
        """The concurrencies Optuna optimises, the primary first (its value is the trial's ``value``)."""
        primary = self.objective.concurrency
        return [primary, *(level for level in self.objective.levels or [] if level != primary)]

    def measure_settings(self) -> MeasureSettings:
        """The settings each measurement runs with (the objective's concurrency; others set per level)."""
        protocol = self.measurement.model_dump(include=set(MeasureProtocol.model_fields))
        return MeasureSettings.model_validate(
            {**protocol, "objective": self.objective.metric, "concurrency": self.objective.concurrency}
        )

    def relative_path(self, path: str) -> Path:
        """A path the space names, relative paths resolved against the space file."""
        named = Path(path).expanduser()
        if named.is_absolute() or self.source is None:
            return named
        return (self.source.parent / named).resolve()

    def named_config(self) -> Path | None:
        """The model's config.json where the space names one (``model_config``), resolved; else None."""
        return self.relative_path(self.config_json) if self.config_json else None

    def suite_path(self) -> str:
        """The suite reference with relative paths resolved against the space file."""
        suite = self.measurement.suite
        if suite.startswith("builtin:") or self.source is None or Path(suite).is_absolute():
            return suite
        return str((self.source.parent / suite).resolve())

    def all_flag_names(self) -> list[str]:
        names = list(self.fixed) + list(self.tuned)
        for baseline in self.baselines:
            names.extend(f for f in baseline.flags if f not in names)
        return list(dict.fromkeys(names))


def _field_path(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("int", "float", "categorical", "function-after[_check_range()]")]
    return ".".join(parts) or "(top level)"


def _explain(error: Mapping[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key (check the spelling; see search_spaces/README.md for the format)"
    if error["type"] == "missing":
        return "required key is missing"
    # A tuned flag's 'type' picks its model; pydantic's words for a wrong or missing one ("Unable to
    # extract tag using discriminator 'type'") name neither the type given nor the ones known.
    if error["type"] == "union_tag_invalid":
        return f"unknown type {error['ctx']['tag']!r}; the known types are {', '.join(PARAM_TYPES)}"
    if error["type"] == "union_tag_not_found":
        return f"'type' is missing; give one of the known types: {', '.join(PARAM_TYPES)}"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


_FIELD_PREFIX = re.compile(r"^(?P<field>[\w.-]+): (?P<message>.*)$", re.DOTALL)


_EXPANDED = ("launcher", "model", "fixed", "env", "gpus", "baselines", "measurement")
_ENV_REF = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(value: object, *, path: Path, field: str) -> object:
    """``${NAME}`` in strings becomes the environment variable's value (a build path, a model dir)."""
    if isinstance(value, str):

        def one(match: re.Match[str]) -> str:
            name = match["name"]
            if name not in os.environ:
                raise SpaceError(
                    f"environment variable {name} is not set", path=path, field=field, hint=f"export {name}=... first"
                )
            return os.environ[name]

        return _ENV_REF.sub(one, value)
    if isinstance(value, list):
        return [_expand(v, path=path, field=f"{field}.{i}") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _expand(v, path=path, field=f"{field}.{k}") for k, v in value.items()}
    return value


def parse_space(data: object, *, path: Path) -> SearchSpace:
    """Validate already-parsed YAML. Raises SpaceError naming the file and field."""
    if not isinstance(data, dict):
        raise SpaceError("expected a mapping of keys at the top level", path=path)
    data = {key: _expand(value, path=path, field=key) if key in _EXPANDED else value for key, value in data.items()}
    try:
        return SearchSpace.model_validate({**data, "source": path})
    except ValidationError as exc:
        first = exc.errors()[0]
        field, message = _field_path(first["loc"]), _explain(first)
        # Checks across fields name their field at the start of the message.
        prefixed = _FIELD_PREFIX.match(message) if not first["loc"] else None
        if prefixed is not None:
            field, message = prefixed["field"], prefixed["message"]
        raise SpaceError(message, path=path, field=field) from None


def load_space(path: Path | str) -> SearchSpace:
    """Read a search-space YAML file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpaceError("file not found", path=path) from None
    except OSError as exc:
        raise SpaceError(f"cannot read: {exc.strerror}", path=path) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or "malformed YAML"
        raise SpaceError(f"malformed YAML: {problem}", path=path, field=where) from None
    return parse_space(data, path=path.resolve())


class Candidate(_Strict):
    """One configuration to try: the flags as the user would pass them (before engine rules)."""

    flags: dict[str, FlagValue]
    params: dict[str, FlagValue] = Field(default_factory=dict, description="the sampled values alone")
    baseline: str | None = None


class TrialLike(Protocol):
    """The part of ``optuna.Trial`` that ``suggest`` uses (kept narrow so it is easy to drive)."""

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int: ...

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float: ...

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...


def _suggest_one(trial: TrialLike, name: str, param: IntParam | FloatParam | CategoricalParam) -> FlagValue:
    if isinstance(param, IntParam):
        return trial.suggest_int(name, param.low, param.high, step=param.step, log=param.log)
    if isinstance(param, FloatParam):
        return trial.suggest_float(name, param.low, param.high, step=param.step, log=param.log)
    value: FlagValue = trial.suggest_categorical(name, param.choices)
    return value


def suggest(space: SearchSpace, trial: TrialLike, baseline: Baseline | None = None) -> Candidate:
    """Draw one candidate from the space.

    For a baseline, only the tuned flags the baseline names are suggested (Optuna hands back the
    enqueued values); the others stay at the engine default. Baseline flags that are not tuned
    (e.g. draft tokens with topk 1) are passed as they are.
    """
    flags: dict[str, FlagValue] = dict(space.fixed)
    params: dict[str, FlagValue] = {}
    for name, param in space.tuned.items():
        if param.when is not None and not param.when.holds(flags):
            continue
        if baseline is not None and name not in baseline.flags:
            continue
        params[name] = flags[name] = _suggest_one(trial, name, param)
    if baseline is not None:
        for name, value in baseline.flags.items():
            flags.setdefault(name, value)
    return Candidate(
        flags={k: v for k, v in flags.items() if v is not False},
        params=params,
        baseline=baseline.name if baseline else None,
    )


def baseline_params(space: SearchSpace, baseline: Baseline) -> dict[str, FlagValue]:
    """The values to enqueue for a baseline: its flags that are tuned parameters."""
    return {k: v for k, v in baseline.flags.items() if k in space.tuned}
