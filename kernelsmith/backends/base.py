"""The backend protocol: one model call, in a provider-neutral message format.

Messages (what the loop keeps, records and compacts):

    {"role": "user", "content": "text"}
    {"role": "assistant", "content": "text", "tool_calls": [{"id": "c1", "name": "verify", "arguments": {}}]}
    {"role": "tool", "tool_call_id": "c1", "name": "verify", "content": "text result"}

The system prompt is passed apart from the messages. Each backend translates this
format into its wire format (Anthropic Messages, OpenAI chat completions) and back.
Consecutive tool messages belong to the assistant message before them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol

from kernelsmith.errors import KernelsmithError


@dataclass
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of an object


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, other: "Usage") -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Reply:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str = ""
    model: str = ""

    def as_message(self) -> dict[str, Any]:
        return {"role": "assistant", "content": self.text, "tool_calls": [c.to_dict() for c in self.tool_calls]}


TextSink = Callable[[str], None]


class Backend(Protocol):
    """A policy: one model call per turn, and the session hooks below (BackendBase has no-op ones)."""

    name: str
    model: str

    def complete(self, system: str, messages: list[dict], tools: list[ToolSpec],
                 on_text: TextSink | None = None) -> Reply:
        """One model call. Streams text deltas to on_text when given. Retries transient
        failures itself (429, 5xx, timeouts); raises BackendError for the rest."""
        ...

    def bind(self, workdir, device: str, precision: str) -> None:
        """Hook: the session's workdir, before the first call (the built-in policy reads its task)."""
        ...

    def skip(self, turns: int) -> None:
        """Hook: a resumed session already played `turns` turns (a replayed script goes on after them)."""
        ...


class BackendBase:
    """What a backend may hook, with nothing done by default: subclass it and override what you need."""

    def bind(self, workdir, device: str, precision: str) -> None:
        return None

    def skip(self, turns: int) -> None:
        return None


class BackendError(KernelsmithError):
    """A backend failure the user must fix (key, URL, model name, request). One line with a hint."""


class BackendUnavailable(BackendError):
    """Transient failures outlasted the retries (server down, rate limited for too long)."""

    exit_code = 3
