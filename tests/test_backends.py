"""The real SDKs, through the real backends, against the scripted FakeAPI server."""

from __future__ import annotations

import json
import socket
import time

import pytest

from fakeapi import FakeAPI
from kernelsmith.backends.anthropic import AnthropicBackend
from kernelsmith.backends.base import BackendError, BackendUnavailable, ToolSpec, Usage
from kernelsmith.backends.openai import OpenAIBackend
from kernelsmith.backends.pricing import cost_usd, price_of

SYSTEM = "You write CUDA kernels."
TOOLS = [ToolSpec("verify", "Check the candidate.", {"type": "object", "properties": {"quick": {"type": "boolean"}}}),
         ToolSpec("profile", "Time the candidate.", {"type": "object", "properties": {}})]
HISTORY = [
    {"role": "user", "content": "Write a kernel."},
    {"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "c1", "name": "verify", "arguments": {"quick": True}},
        {"id": "c2", "name": "profile", "arguments": {}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "verify", "content": "ok"},
    {"role": "tool", "tool_call_id": "c2", "name": "profile", "content": "12 us"},
    {"role": "user", "content": "Now make it faster."},
    {"role": "assistant", "content": "", "tool_calls": []},  # says nothing: must vanish
    {"role": "user", "content": "Please."},
]
TURN = {"text": "Let me verify and profile.",
        "tool_calls": [{"name": "verify", "arguments": {"quick": False}}, {"name": "profile", "arguments": {}}],
        "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 50,
                  "cache_creation_input_tokens": 10}}
KINDS = ["anthropic", "openai"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """Keep the developer's own keys and endpoints out of these tests."""
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def make(kind: str, url: str, **kw):
    """A backend of `kind` pointed at `url` (a FakeAPI, or anything else)."""
    if kind == "anthropic":
        return AnthropicBackend(kw.pop("model", "claude-sonnet-4-6"), api_key="test-key", base_url=url, **kw)
    return OpenAIBackend(kw.pop("model", "gpt-4.1"), api_key="test-key", base_url=url, **kw)


def url_of(api: FakeAPI, kind: str) -> str:
    return api.anthropic_url if kind == "anthropic" else api.openai_url


def ask(backend, on_text=None):
    return backend.complete(SYSTEM, HISTORY, TOOLS, on_text=on_text)


@pytest.mark.parametrize("kind", KINDS)
def test_streamed_turn_with_text_and_two_tool_calls(kind):
    deltas: list[str] = []
    with FakeAPI([TURN]) as api:
        reply = ask(make(kind, url_of(api, kind)), on_text=deltas.append)
    assert deltas == ["Let ", "me ", "verify ", "and ", "profile."]
    assert reply.text == "Let me verify and profile."
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("verify", {"quick": False}), ("profile", {})]
    assert len({c.id for c in reply.tool_calls}) == 2 and all(c.id for c in reply.tool_calls)
    assert reply.stop_reason == {"anthropic": "tool_use", "openai": "tool_calls"}[kind]
    assert reply.model == {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4.1"}[kind]
    assert api.requests[0]["body"]["stream"] is True


def test_anthropic_usage_and_cost():
    with FakeAPI([TURN]) as api:
        reply = ask(make("anthropic", api.anthropic_url))
    u = reply.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens) == (100, 20, 50, 10)
    expected = (100 * 3 + 20 * 15 + 50 * 0.3 + 10 * 3.75) / 1e6
    assert reply.usage.cost_usd == pytest.approx(expected)


def test_openai_usage_separates_cached_tokens():
    with FakeAPI([TURN]) as api:
        reply = ask(make("openai", api.openai_url))
    # OpenAI reports prompt_tokens = 160 with 50 cached; the 10 "cache writes" are plain input there.
    assert (reply.usage.input_tokens, reply.usage.cache_read_tokens, reply.usage.output_tokens) == (110, 50, 20)
    assert reply.usage.cost_usd == pytest.approx((110 * 2 + 20 * 8 + 50 * 0.5) / 1e6)


def test_anthropic_request_body():
    with FakeAPI([TURN]) as api:
        ask(make("anthropic", api.anthropic_url, max_tokens=1234))
    body = api.requests[0]["body"]
    assert api.requests[0]["path"] == "/v1/messages"
    headers = api.requests[0]["headers"]  # SDK versions differ on which header carries the key
    assert headers.get("x-api-key") == "test-key" or headers.get("authorization") == "Bearer test-key"
    assert (body["model"], body["max_tokens"]) == ("claude-sonnet-4-6", 1234)
    assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    assert [t["name"] for t in body["tools"]] == ["verify", "profile"]
    assert body["tools"][0]["input_schema"] == TOOLS[0].parameters and "cache_control" not in body["tools"][0]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Write a kernel."}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "c1", "name": "verify", "input": {"quick": True}},
            {"type": "tool_use", "id": "c2", "name": "profile", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "ok"},
            {"type": "tool_result", "tool_use_id": "c2", "content": "12 us"},
            {"type": "text", "text": "Now make it faster."},
            {"type": "text", "text": "Please."}]},
    ]


def test_openai_request_body():
    with FakeAPI([TURN]) as api:
        ask(make("openai", api.openai_url, max_tokens=1234))
    body = api.requests[0]["body"]
    assert api.requests[0]["path"] == "/v1/chat/completions"
    assert api.requests[0]["headers"]["authorization"] == "Bearer test-key"
    assert body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 1234
    assert body["tools"][1] == {"type": "function", "function": {
        "name": "profile", "description": "Time the candidate.", "parameters": {"type": "object", "properties": {}}}}
    messages = body["messages"]
    assert messages[0] == {"role": "system", "content": SYSTEM}
    assert messages[1] == {"role": "user", "content": "Write a kernel."}
    calls = messages[2]["tool_calls"]
    assert messages[2]["content"] == "Checking." and [c["id"] for c in calls] == ["c1", "c2"]
    assert calls[0]["type"] == "function" and json.loads(calls[0]["function"]["arguments"]) == {"quick": True}
    assert messages[3:5] == [{"role": "tool", "tool_call_id": "c1", "content": "ok"},
                             {"role": "tool", "tool_call_id": "c2", "content": "12 us"}]
    assert messages[5:] == [{"role": "user", "content": "Now make it faster.\n\nPlease."}]


@pytest.mark.parametrize("kind", KINDS)
def test_one_call_per_reply_asks_for_no_parallel_tool_calls(kind):
    """A teacher for a student with a small window: the provider is told to make one call a reply (both SDKs
    send their own field for it), and by default nothing of the kind is sent."""
    with FakeAPI([TURN, TURN]) as api:
        ask(make(kind, url_of(api, kind), one_call_per_reply=True))
        ask(make(kind, url_of(api, kind)))
    one, default = (r["body"] for r in api.requests)
    if kind == "anthropic":
        assert one["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
        assert "tool_choice" not in default
    else:
        assert one["parallel_tool_calls"] is False and "parallel_tool_calls" not in default


@pytest.mark.parametrize("kind", KINDS)
def test_arguments_split_across_many_chunks(kind):
    args = {"shapes": [[1024, 4096], [7, 3]], "note": "ünïcode \"quoted\" {braces}", "deep": {"a": {"b": None}}}
    turn = {"tool_calls": [{"name": "verify", "arguments": args}, {"name": "profile", "arguments": {"n": 1}}],
            "arg_chunk": 3}
    with FakeAPI([turn]) as api:
        reply = ask(make(kind, url_of(api, kind)))
    assert [c.arguments for c in reply.tool_calls] == [args, {"n": 1}]
    assert reply.text == ""


def test_openai_tolerates_broken_arguments_and_no_usage():
    turn = {"tool_calls": [{"name": "verify", "arguments": '{"quick": tru'}], "no_usage": True}
    with FakeAPI([turn]) as api:
        reply = ask(make("openai", api.openai_url))
    assert reply.tool_calls[0].arguments == {"_raw": '{"quick": tru'}
    assert reply.usage == Usage()


def test_openai_without_key_uses_placeholder_for_local_server():
    with FakeAPI([{"text": "hi"}]) as api:
        reply = ask(OpenAIBackend("qwen2.5-coder:32b", base_url=api.openai_url))
    assert reply.text == "hi" and reply.usage.cost_usd == 0.0
    assert api.requests[0]["headers"]["authorization"] == "Bearer not-needed"
    assert api.requests[0]["body"]["model"] == "qwen2.5-coder:32b"


@pytest.mark.parametrize("kind", KINDS)
def test_key_from_environment(kind, monkeypatch):
    monkeypatch.setenv(f"{kind.upper()}_API_KEY", "env-key")
    with FakeAPI([{"text": "hi"}]) as api:
        cls = AnthropicBackend if kind == "anthropic" else OpenAIBackend
        ask(cls("m", base_url=url_of(api, kind)))
    headers = api.requests[0]["headers"]
    assert headers.get("x-api-key") == "env-key" or headers.get("authorization") == "Bearer env-key"


@pytest.mark.parametrize("kind", KINDS)
def test_rate_limit_is_retried(kind):
    with FakeAPI([{"status": 429}, {"text": "after the wait"}]) as api:
        reply = ask(make(kind, url_of(api, kind)))
    assert reply.text == "after the wait" and len(api.requests) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_server_errors_are_retried(kind):
    with FakeAPI([{"status": 500}, {"status": 500}, {"text": "third time"}]) as api:
        reply = ask(make(kind, url_of(api, kind)))
    assert reply.text == "third time" and len(api.requests) == 3


@pytest.mark.parametrize("kind", KINDS)
def test_retries_run_out(kind):
    with FakeAPI([{"status": 500}] * 3) as api:
        with pytest.raises(BackendUnavailable):
            ask(make(kind, url_of(api, kind), max_retries=2))
    assert len(api.requests) == 3


@pytest.mark.parametrize("kind", KINDS)
def test_rejected_key_fails_fast(kind):
    with FakeAPI([{"status": 401, "message": "invalid x-api-key"}, {"text": "never"}]) as api:
        with pytest.raises(BackendError) as info:
            ask(make(kind, url_of(api, kind)))
    assert len(api.requests) == 1
    assert not isinstance(info.value, BackendUnavailable)
    assert "rejected" in str(info.value) and "127.0.0.1" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_model(kind):
    with FakeAPI([{"status": 404, "message": "model not found"}]) as api:
        with pytest.raises(BackendError) as info:
            ask(make(kind, url_of(api, kind), model="no-such-model"))
    assert "'no-such-model'" in info.value.message and "/v1/models" in info.value.hint
    assert len(api.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_bad_request_shows_server_message_on_one_line(kind):
    message = "prompt is too long:\n" + "x" * 1000
    with FakeAPI([{"status": 400, "message": message}]) as api:
        with pytest.raises(BackendError) as info:
            ask(make(kind, url_of(api, kind)))
    text = str(info.value)
    assert "prompt is too long: xxx" in text and "\n" not in text and len(text) < 500
    assert not isinstance(info.value, BackendUnavailable) and len(api.requests) == 1


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("kind", KINDS)
def test_connection_refused(kind):
    start = time.monotonic()
    with pytest.raises(BackendUnavailable) as info:
        ask(make(kind, closed_port_url() + ("/v1" if kind == "openai" else ""), max_retries=0))
    assert time.monotonic() - start < 5
    assert "--base-url" in info.value.hint and "\n" not in str(info.value)


@pytest.mark.parametrize("kind", KINDS)
def test_timeout(kind):
    start = time.monotonic()
    with FakeAPI([{"hang": 10, "text": "too late"}]) as api:
        with pytest.raises(BackendUnavailable):
            ask(make(kind, url_of(api, kind), max_retries=0, timeout_s=0.3))
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("kind", KINDS)
def test_missing_key_fails_at_construction(kind):
    cls = AnthropicBackend if kind == "anthropic" else OpenAIBackend
    with pytest.raises(BackendError, match=f"{kind.upper()}_API_KEY is not set"):
        cls("some-model")


def test_fakeapi_callable_items_models_and_exhaustion():
    with FakeAPI([lambda body: {"text": f"you sent {len(body['messages'])} messages"}], models=["a", "b"]) as api:
        backend = make("openai", api.openai_url)
        first, second = ask(backend), ask(backend)
        listed = [m.id for m in backend.client.models.list()]
    assert first.text == "you sent 6 messages"
    assert "exhausted" in second.text and second.tool_calls == []
    assert listed == ["a", "b"] and len(api.requests) == 2  # model listings are not recorded


@pytest.mark.parametrize("model, price", [("claude-opus-4-1-20250805", 15.0), ("claude-opus-4-20250514", 15.0),
                                          ("claude-opus-4-5", 5.0), ("claude-3-5-haiku-latest", 0.8),
                                          ("gpt-4o-mini", 0.15), ("gpt-4o-2024-08-06", 2.5), ("o3-mini", 1.1),
                                          ("anthropic/claude-sonnet-4", 3.0)])
def test_price_prefixes(model, price):
    assert price_of(model).input == price


def test_cost_of_unknown_model_is_none():
    assert cost_usd("llama3.1:70b", Usage(input_tokens=10)) is None
    assert cost_usd("gpt-4.1", Usage(input_tokens=1_000_000, output_tokens=1_000_000)) == pytest.approx(10.0)


def test_fakeapi_plain_json_answers():
    """Non-streamed requests get whole messages, so other tests may use the SDKs directly."""
    turn = {"text": "hi", "tool_calls": [{"name": "verify", "arguments": {"quick": True}}],
            "usage": {"input_tokens": 3, "output_tokens": 2}}
    with FakeAPI([turn, turn]) as api:
        message = make("anthropic", api.anthropic_url).client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        completion = make("openai", api.openai_url).client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}])
    assert [b.type for b in message.content] == ["text", "tool_use"] and message.content[1].input == {"quick": True}
    assert message.stop_reason == "tool_use" and message.usage.output_tokens == 2
    call = completion.choices[0].message.tool_calls[0]
    assert completion.choices[0].message.content == "hi" and json.loads(call.function.arguments) == {"quick": True}
    assert completion.usage.prompt_tokens == 3


@pytest.mark.parametrize("kind", KINDS)
def test_plain_answers_when_streaming_is_off(kind):
    """--no-stream: one JSON answer per call, for servers whose streamed tool calls are broken."""
    texts: list[str] = []
    with FakeAPI([TURN]) as api:
        reply = ask(make(kind, url_of(api, kind), stream=False), on_text=texts.append)
    assert api.requests[0]["body"].get("stream") in (False, None)
    assert texts == ["Let me verify and profile."]  # the whole text at once
    assert reply.text == "Let me verify and profile."
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("verify", {"quick": False}), ("profile", {})]
    assert all(c.id for c in reply.tool_calls) and reply.usage.output_tokens == 20
    assert reply.stop_reason == {"anthropic": "tool_use", "openai": "tool_calls"}[kind]
