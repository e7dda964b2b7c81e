"""The OpenAI chat completions backend, for OpenAI itself and any compatible server
(vLLM, SGLang, Ollama, llama.cpp): streamed unless `stream=False` (for servers whose streaming
of tool calls is broken), tolerant of what such servers omit."""

from __future__ import annotations

import json
import os
from typing import Any

import openai

from kernelsmith.backends.base import BackendBase, BackendError, Reply, TextSink, ToolCall, ToolSpec, Usage
from kernelsmith.backends.errors import map_sdk_error
from kernelsmith.backends.pricing import cost_usd

NO_KEY = "not-needed"  # local servers ignore the key, but the SDK insists on one


class OpenAIBackend(BackendBase):
    name = "openai"

    def __init__(self, model: str, api_key: str | None = None, base_url: str | None = None,
                 max_tokens: int = 8192, max_retries: int = 4, timeout_s: float = 600.0, stream: bool = True,
                 one_call_per_reply: bool = False):
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = api_key or os.environ.get("OPENAI_API_KEY") or (NO_KEY if base_url else None)
        if not key:
            raise BackendError("OPENAI_API_KEY is not set",
                               hint="export it, or pass --base-url of an OpenAI-compatible server")
        self.model = model
        self.max_tokens = max_tokens
        self.stream = stream
        self.one_call_per_reply = one_call_per_reply
        # OpenAI's reasoning models refuse max_tokens; many local servers know only max_tokens.
        self.limit_param = "max_tokens" if base_url else "max_completion_tokens"
        self.client = openai.OpenAI(api_key=key, base_url=base_url, max_retries=max_retries, timeout=timeout_s)

    def complete(self, system: str, messages: list[dict], tools: list[ToolSpec],
                 on_text: TextSink | None = None) -> Reply:
        request: dict[str, Any] = {"model": self.model, self.limit_param: self.max_tokens,
                                   "messages": to_wire(system, messages), "stream": self.stream}
        if self.stream:
            request["stream_options"] = {"include_usage": True}
        if tools:
            request["tools"] = tools_to_wire(tools)
            if self.one_call_per_reply:
                request["parallel_tool_calls"] = False
        try:
            answer = self.client.chat.completions.create(**request)
            return self._read(answer, on_text) if self.stream else self._read_plain(answer, on_text)
        except Exception as err:
            mapped = self._map_error(err)
            if mapped is None:
                raise
            raise mapped from err

    def _read(self, stream: Any, on_text: TextSink | None) -> Reply:
        """Accumulate the chunks: text deltas, tool calls by index, the optional usage chunk."""
        acc = _Accumulator(self.model)
        with stream:
            for chunk in stream:
                acc.add(chunk, on_text)
        return acc.reply()

    def _read_plain(self, completion: Any, on_text: TextSink | None) -> Reply:
        """One chat.completion object, read through the same accumulator as the chunks."""
        acc = _Accumulator(self.model)
        acc.model = completion.model or self.model
        if completion.usage is not None:
            acc.usage = usage_from(completion.usage)
        choice = completion.choices[0] if completion.choices else None
        if choice is not None:
            acc.stop_reason = choice.finish_reason or ""
            acc.add_text(choice.message.content, on_text)
            for position, call in enumerate(choice.message.tool_calls or []):
                acc._add_call(call, position)
        return acc.reply()

    def _map_error(self, err: Exception) -> BackendError | None:
        return map_sdk_error(openai, err, str(self.client.base_url).rstrip("/"), self.model,
                             key_hint="check OPENAI_API_KEY (for a local server: the key it was started with)",
                             reach_hint="check --base-url and that the server is running, or try later",
                             stream_errors=True)


class _Accumulator:
    """Builds a Reply from chat.completion.chunk objects."""

    def __init__(self, model: str):
        self.model = model
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.usage = Usage()
        self.stop_reason = ""

    def add(self, chunk: Any, on_text: TextSink | None) -> None:
        self.model = chunk.model or self.model
        if chunk.usage is not None:
            self.usage = usage_from(chunk.usage)
        for choice in chunk.choices or []:
            self.stop_reason = choice.finish_reason or self.stop_reason
            delta = choice.delta
            if delta is None:
                continue
            self.add_text(delta.content, on_text)
            for position, call in enumerate(delta.tool_calls or []):
                self._add_call(call, position)

    def add_text(self, text: str | None, on_text: TextSink | None) -> None:
        if text:
            self.text.append(text)
            if on_text is not None:
                on_text(text)

    def _add_call(self, call: Any, position: int) -> None:
        # Fragments of one call share an index; some servers omit it and send whole calls
        # (and a non-streamed message's calls have no index at all).
        index = getattr(call, "index", None)
        index = index if index is not None else position
        slot = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        slot["id"] = call.id or slot["id"]
        if call.function is not None:
            slot["name"] = slot["name"] or (call.function.name or "")
            slot["arguments"] += call.function.arguments or ""

    def reply(self) -> Reply:
        calls = [ToolCall(slot["id"] or f"call_{index}", slot["name"], parse_arguments(slot["arguments"]))
                 for index, slot in sorted(self.calls.items())]
        self.usage.cost_usd = cost_usd(self.model, self.usage) or 0.0
        return Reply(text="".join(self.text), tool_calls=calls, usage=self.usage,
                     stop_reason=self.stop_reason, model=self.model)


def parse_arguments(raw: str) -> dict[str, Any]:
    """Tool-call arguments; a model's broken JSON comes back as {"_raw": text} for the loop to report."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def usage_from(u: Any) -> Usage:
    """OpenAI counts cached tokens inside prompt_tokens; Usage keeps them apart."""
    details = getattr(u, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
    prompt = u.prompt_tokens or 0
    return Usage(input_tokens=max(prompt - cached, 0), output_tokens=u.completion_tokens or 0,
                 cache_read_tokens=cached)


def tools_to_wire(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.parameters}} for t in tools]


def to_wire(system: str, messages: list[dict]) -> list[dict[str, Any]]:
    """Neutral messages -> chat messages, system first. Consecutive user messages are merged
    because some chat templates (served by vLLM, for one) insist on alternating turns."""
    wire: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for msg in messages:
        item = _message(msg)
        if item is None:
            continue
        last = wire[-1]
        if item["role"] == "user" and last["role"] == "user":
            last["content"] = f"{last['content']}\n\n{item['content']}"
        else:
            wire.append(item)
    return wire


def _message(msg: dict) -> dict[str, Any] | None:
    text = msg.get("content") or ""
    if msg["role"] == "tool":
        return {"role": "tool", "tool_call_id": msg["tool_call_id"], "content": text}
    if msg["role"] != "assistant":
        return {"role": "user", "content": text}
    calls = [{"id": c["id"], "type": "function",
              "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
             for c in msg.get("tool_calls") or []]
    if not calls:
        # An empty assistant turn says nothing and trips servers that reject empty content.
        return {"role": "assistant", "content": text} if text.strip() else None
    return {"role": "assistant", "content": text or None, "tool_calls": calls}
