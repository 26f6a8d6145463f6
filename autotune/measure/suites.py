"""Prompt suites: JSONL files of prompts with a category, and the built-in ones.

A line is ``{"id", "category", "prompt" | "messages", "max_tokens", ...optional sampling}``.
``builtin:NAME`` names a suite shipped in ``autotune/suites/NAME.jsonl``.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autotune.errors import SuiteError

BUILTIN_PREFIX = "builtin:"


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class Prompt(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    category: str = Field(min_length=1)
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _one_input(self) -> Prompt:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of 'prompt' or 'messages'")
        # An empty prompt measures nothing the suite means to (servers answer it with an error or at once).
        given = [self.prompt] if self.prompt is not None else [m.content for m in self.messages or []]
        if not any(text.strip() for text in given):
            raise ValueError(f"prompt {self.id!r} is empty")
        return self

    @property
    def text(self) -> str:
        """The prompt as plain text, for engines driven through a raw-text endpoint."""
        if self.prompt is not None:
            return self.prompt
        assert self.messages is not None
        return "\n\n".join(f"{m.role}: {m.content}" for m in self.messages) + "\n\nassistant:"


class Suite(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    prompts: list[Prompt] = Field(min_length=1)

    @property
    def categories(self) -> list[str]:
        return sorted({p.category for p in self.prompts})


def builtin_suites() -> list[str]:
    folder = resources.files("autotune") / "suites"
    return sorted(p.name.removesuffix(".jsonl") for p in folder.iterdir() if p.name.endswith(".jsonl"))


def parse_suite(text: str, *, name: str, source: str) -> Suite:
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            prompt = Prompt.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise SuiteError(f"{source}: line {number}: not valid JSON ({exc.msg})") from None
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(p) for p in error["loc"])  # empty: a rule over the whole line
            message = (
                "unknown key" if error["type"] == "extra_forbidden" else error["msg"].removeprefix("Value error, ")
            )
            raise SuiteError(f"{source}: line {number}: " + (f"{field}: " if field else "") + message) from None
        if prompt.id in seen:
            raise SuiteError(f"{source}: line {number}: duplicate id {prompt.id!r}")
        seen.add(prompt.id)
        prompts.append(prompt)
    if not prompts:
        raise SuiteError(f"{source}: the prompt suite is empty")
    return Suite(name=name, prompts=prompts)


def load_suite(reference: str) -> Suite:
    """Load ``builtin:NAME`` or a JSONL path."""
    if reference.startswith(BUILTIN_PREFIX):
        name = reference.removeprefix(BUILTIN_PREFIX)
        if name not in builtin_suites():
            raise SuiteError(f"no built-in suite {name!r}; built-in suites: {', '.join(builtin_suites())}")
        text = (resources.files("autotune") / "suites" / f"{name}.jsonl").read_text(encoding="utf-8")
        return parse_suite(text, name=name, source=reference)
    path = Path(reference)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError(f"{path}: prompt suite not found") from None
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read the prompt suite: {exc.strerror}") from None
    return parse_suite(text, name=path.stem, source=str(path))
