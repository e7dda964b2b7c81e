"""The Anthropic Messages API backend (streamed, with prompt caching)."""

from __future__ import annotations

import os
from typing import Any

import anthropic

from kernelsmith.backends.base import BackendBase, BackendError, Reply, TextSink, ToolCall, ToolSpec, Usage
from kernelsmith.backends.errors import map_sdk_error
from kernelsmith.backends.pricing import cost_usd

CACHE = {"type": "ephemeral"}


class AnthropicBackend(BackendBase):
    name = "anthropic"

    def __init__(self, model: str, api_key: str | None = None, base_url: str | None = None,
                 max_tokens: int = 8192, max_retries: int = 4, timeout_s: float = 600.0, stream: bool = True,
                 one_call_per_reply: bool = False):
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise BackendError("ANTHROPIC_API_KEY is not set",
                               hint="export it, or use --backend openai / --base-url ...")
        self.model = model
        self.max_tokens = max_tokens
        self.stream = stream
        self.one_call_per_reply = one_call_per_reply
        # An explicit api_key keeps the SDK from looking for profiles or other credentials.
        self.client = anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=max_retries,
                                          timeout=timeout_s)

    def complete(self, system: str, messages: list[dict], tools: list[ToolSpec],
                 on_text: TextSink | None = None) -> Reply:
        request = {"model": self.model, "max_tokens": self.max_tokens,
                   "system": [{"type": "text", "text": system, "cache_control": CACHE}],
                   "messages": to_wire(messages), "tools": tools_to_wire(tools)}
        if not request["tools"]:
            del request["tools"]
        elif self.one_call_per_reply:
            request["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}
        try:
            message = self._streamed(request, on_text) if self.stream else self._plain(request, on_text)
        except Exception as err:
            mapped = self._map_error(err)
            if mapped is None:
                raise
            raise mapped from err
        return reply_from(message, self.model)

    def _streamed(self, request: dict, on_text: TextSink | None):
        with self.client.messages.stream(**request) as stream:
            for event in stream:
                if event.type == "text" and on_text is not None:
                    on_text(event.text)
            return stream.get_final_message()

    def _plain(self, request: dict, on_text: TextSink | None):
        """One JSON answer, for endpoints whose streaming is broken; the text arrives at once."""
        message = self.client.messages.create(**request)
        text = "".join(b.text for b in message.content if b.type == "text")
        if text and on_text is not None:
            on_text(text)
        return message

    def _map_error(self, err: Exception) -> BackendError | None:
        return map_sdk_error(anthropic, err, str(self.client.base_url).rstrip("/"), self.model,
                             key_hint="check ANTHROPIC_API_KEY",
                             reach_hint="check --base-url and the network, or try later", also_transient=_is_overload)


def tools_to_wire(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Tool definitions; the last one carries the cache breakpoint (tools come before system)."""
    wire = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]
    if wire:
        wire[-1]["cache_control"] = CACHE
    return wire


def to_wire(messages: list[dict]) -> list[dict[str, Any]]:
    """Neutral messages -> Anthropic messages with strictly alternating roles."""
    wire: list[dict[str, Any]] = []
    for msg in messages:
        role = "assistant" if msg["role"] == "assistant" else "user"
        blocks = _blocks(msg)
        if not blocks:  # the API rejects empty content lists and empty text blocks
            continue
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    return wire


def _blocks(msg: dict) -> list[dict[str, Any]]:
    text = msg.get("content") or ""
    if msg["role"] == "tool":
        return [{"type": "tool_result", "tool_use_id": msg["tool_call_id"], "content": text or "(no output)"}]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
    for call in msg.get("tool_calls") or []:
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["arguments"]})
    return blocks


def reply_from(message: Any, requested_model: str) -> Reply:
    model = message.model or requested_model
    text = "".join(b.text for b in message.content if b.type == "text")
    calls = [ToolCall(b.id, b.name, dict(b.input or {})) for b in message.content if b.type == "tool_use"]
    u = message.usage
    usage = Usage(input_tokens=u.input_tokens or 0, output_tokens=u.output_tokens or 0,
                  cache_read_tokens=u.cache_read_input_tokens or 0,
                  cache_write_tokens=u.cache_creation_input_tokens or 0)
    usage.cost_usd = cost_usd(model, usage) or 0.0
    return Reply(text=text, tool_calls=calls, usage=usage, stop_reason=message.stop_reason or "", model=model)


def _is_overload(err: anthropic.APIStatusError) -> bool:
    """An error event inside a 200 stream (e.g. overloaded_error) is transient too."""
    body = err.body.get("error") if isinstance(err.body, dict) else None
    return isinstance(body, dict) and body.get("type") in ("overloaded_error", "api_error")
