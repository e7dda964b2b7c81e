"""A scripted stand-in for the Anthropic Messages API and the OpenAI chat completions API.

    with FakeAPI([{"text": "hi", "tool_calls": [{"name": "verify", "arguments": {}}]},
                  {"status": 429}, {"text": "done"}]) as api:
        AnthropicBackend("claude-x", api_key="k", base_url=api.anthropic_url)
        OpenAIBackend("gpt-x", api_key="k", base_url=api.openai_url)
        api.requests  # [{"path": "/v1/messages", "body": {...}, "headers": {...}}, ...]

Every POST to /v1/messages or /v1/chat/completions takes the next script item (one shared
queue for both formats) and answers it in that format, as plain JSON or as server-sent events
depending on the request's "stream" flag. Script items:

    turn:   {"text": str or [chunks], "tool_calls": [{"name", "arguments": dict or raw str, "id"?}],
             "usage": {"input_tokens", "output_tokens", "cache_read_input_tokens",
                       "cache_creation_input_tokens"}, "stop_reason": "end_turn" | "max_tokens" ...,
             "arg_chunk": 8 (characters of arguments JSON per delta), "no_usage": True (OpenAI: no usage chunk)}
    error:  {"status": 429 | 500 | 401 | 404 | 400 ..., "message": "..."} in the provider's error shape;
            429 and 5xx carry retry-after-ms: 10 and retry-after: 0 so SDK retries are quick
    hang:   {"hang": seconds, ...} waits (cut short when the server closes), then answers the rest
    a callable fn(request_body) -> one of the above

When the script runs out, the answer is a text turn saying so, with no tool calls.
GET /v1/models lists `models`.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Iterator

Item = dict[str, Any] | Callable[[dict], dict[str, Any]]
EXHAUSTED = {"text": "fakeapi: the script is exhausted"}
ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    500: "api_error", 529: "overloaded_error"}
OPENAI_ERRORS = {401: ("invalid_request_error", "invalid_api_key"), 404: ("invalid_request_error", "model_not_found"),
                 429: ("requests", "rate_limit_exceeded"), 500: ("server_error", None)}
OPENAI_FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length", "stop_sequence": "stop"}


class FakeAPI:
    def __init__(self, script: Iterable[Item] = (), models: Iterable[str] = ("fake-model",)):
        self.script: list[Item] = list(script)
        self.models = list(models)
        self.requests: list[dict[str, Any]] = []
        self.anthropic_url = self.openai_url = ""
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._ids = itertools.count(1)

    def __enter__(self) -> "FakeAPI":
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.api = self  # type: ignore[attr-defined]
        port = self._server.server_address[1]
        self.anthropic_url = f"http://127.0.0.1:{port}"
        self.openai_url = f"http://127.0.0.1:{port}/v1"
        # A short poll interval makes shutdown() quick: tests open many servers.
        threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()  # ends hangs early
        self._server.shutdown()
        self._server.server_close()

    def take(self, path: str, body: dict, headers: dict[str, str]) -> dict[str, Any]:
        """Record a model request and return the script item that answers it."""
        with self._lock:
            self.requests.append({"path": path, "body": body, "headers": headers})
            item = self.script.pop(0) if self.script else dict(EXHAUSTED)
        return item(body) if callable(item) else item

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):04d}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    @property
    def api(self) -> FakeAPI:
        return self.server.api  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        if not self.path.rstrip("/").endswith("/models"):
            return self._json(404, {"error": {"message": f"no route {self.path}"}})
        data = [{"id": m, "object": "model", "type": "model", "display_name": m, "created": 0,
                 "created_at": "2025-01-01T00:00:00Z", "owned_by": "fakeapi"} for m in self.api.models]
        self._json(200, {"object": "list", "data": data, "has_more": False,
                         "first_id": self.api.models[0] if data else None,
                         "last_id": self.api.models[-1] if data else None})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        path = self.path.split("?")[0]
        anthropic = path.endswith("/messages")
        if not anthropic and not path.endswith("/chat/completions"):
            return self._json(404, {"error": {"message": f"no route {path}"}})
        item = self.api.take(path, body, {k.lower(): v for k, v in self.headers.items()})
        try:
            if "hang" in item:
                self.api._closing.wait(item["hang"])
            self._answer(item, body, anthropic)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            pass

    def _answer(self, item: dict[str, Any], body: dict, anthropic: bool) -> None:
        if "status" in item:
            return self._error(item, anthropic)
        turn = _Turn(item, body.get("model", "fake-model"), self.api.new_id, "toolu_" if anthropic else "call_")
        if not body.get("stream"):
            self._json(200, turn.anthropic_message() if anthropic else turn.openai_completion())
        elif anthropic:
            self._sse(f"event: {kind}\ndata: {json.dumps(data)}\n\n" for kind, data in turn.anthropic_events())
        else:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = (f"data: {json.dumps(c)}\n\n" for c in turn.openai_chunks(include_usage))
            self._sse(itertools.chain(chunks, ["data: [DONE]\n\n"]))

    def _error(self, item: dict[str, Any], anthropic: bool) -> None:
        status = item["status"]
        message = item.get("message", f"fake error {status}")
        if anthropic:
            body: dict[str, Any] = {"type": "error", "error": {"type": ANTHROPIC_ERRORS.get(status, "api_error"),
                                                               "message": message}}
        else:
            kind, code = OPENAI_ERRORS.get(status, ("invalid_request_error", None))
            body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        retry = {"retry-after-ms": "10", "retry-after": "0"} if status == 429 or status >= 500 else {}
        self._json(status, body, {**retry, **item.get("headers", {})})

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in {"content-type": "application/json", "content-length": str(len(data)),
                            "request-id": "req_fake", **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: Iterable[str]) -> None:
        # No content-length: the stream ends when the connection closes, as with a real server.
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        for event in events:
            self.wfile.write(event.encode())
            self.wfile.flush()


class _Turn:
    """One scripted model answer, rendered in either wire format."""

    def __init__(self, item: dict[str, Any], model: str, new_id: Callable[[str], str], call_prefix: str):
        text = item.get("text", "")
        self.chunks = list(text) if isinstance(text, list) else [p for p in re.split(r"(?<= )", text) if p]
        self.text = "".join(self.chunks)
        self.model = model
        self.calls = [dict(c, id=c.get("id") or new_id(call_prefix)) for c in item.get("tool_calls", [])]
        self.arg_chunk = item.get("arg_chunk", 8)
        self.stop = item.get("stop_reason") or ("tool_use" if self.calls else "end_turn")
        self.usage = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
                      "cache_creation_input_tokens": 0, **item.get("usage", {})}
        self.send_usage = not item.get("no_usage")
        self.id = new_id("fake")

    @staticmethod
    def raw_arguments(call: dict[str, Any]) -> str:
        args = call.get("arguments", {})
        return args if isinstance(args, str) else json.dumps(args)

    def arg_pieces(self, call: dict[str, Any]) -> list[str]:
        raw = self.raw_arguments(call)
        return [raw[i:i + self.arg_chunk] for i in range(0, len(raw), self.arg_chunk)]

    # Anthropic Messages API

    def anthropic_blocks(self) -> list[dict[str, Any]]:
        blocks = [{"type": "text", "text": self.text}] if self.text else []
        return blocks + [{"type": "tool_use", "id": c["id"], "name": c["name"],
                          "input": _loads(self.raw_arguments(c))} for c in self.calls]

    def anthropic_message(self, streaming: bool = False) -> dict[str, Any]:
        usage = dict(self.usage, output_tokens=1) if streaming else self.usage
        return {"id": f"msg_{self.id}", "type": "message", "role": "assistant", "model": self.model,
                "content": [] if streaming else self.anthropic_blocks(),
                "stop_reason": None if streaming else self.stop, "stop_sequence": None, "usage": usage}

    def anthropic_events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        yield "message_start", {"type": "message_start", "message": self.anthropic_message(streaming=True)}
        yield "ping", {"type": "ping"}
        index = 0
        if self.text:
            yield from self._anthropic_block(index, {"type": "text", "text": ""},
                                             [{"type": "text_delta", "text": p} for p in self.chunks])
            index += 1
        for call in self.calls:
            start = {"type": "tool_use", "id": call["id"], "name": call["name"], "input": {}}
            pieces = [""] + self.arg_pieces(call)  # the real API opens with an empty partial_json
            yield from self._anthropic_block(index, start, [{"type": "input_json_delta", "partial_json": p}
                                                            for p in pieces])
            index += 1
        yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": self.stop, "stop_sequence": None},
                                "usage": {"output_tokens": self.usage["output_tokens"]}}
        yield "message_stop", {"type": "message_stop"}

    @staticmethod
    def _anthropic_block(index: int, start: dict, deltas: list[dict]) -> Iterator[tuple[str, dict[str, Any]]]:
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
        for delta in deltas:
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}

    # OpenAI chat completions

    def openai_usage(self) -> dict[str, Any]:
        u = self.usage
        prompt = u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        return {"prompt_tokens": prompt, "completion_tokens": u["output_tokens"],
                "total_tokens": prompt + u["output_tokens"],
                "prompt_tokens_details": {"cached_tokens": u["cache_read_input_tokens"]}}

    def openai_tool_calls(self) -> list[dict[str, Any]]:
        return [{"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": self.raw_arguments(c)}} for c in self.calls]

    def openai_completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.calls:
            message["tool_calls"] = self.openai_tool_calls()
        result = {"id": f"chatcmpl-{self.id}", "object": "chat.completion", "created": int(time.time()),
                  "model": self.model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                                    "finish_reason": OPENAI_FINISH.get(self.stop, self.stop)}]}
        return {**result, "usage": self.openai_usage()} if self.send_usage else result

    def openai_chunks(self, include_usage: bool) -> Iterator[dict[str, Any]]:
        base = {"id": f"chatcmpl-{self.id}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": self.model, "system_fingerprint": None}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**base, "choices": [choice], **({"usage": None} if include_usage else {})}

        yield chunk({"role": "assistant", "content": ""})
        for piece in self.chunks:
            yield chunk({"content": piece})
        for index, call in enumerate(self.calls):
            yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                         "function": {"name": call["name"], "arguments": ""}}]})
            for piece in self.arg_pieces(call):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, OPENAI_FINISH.get(self.stop, self.stop))
        if include_usage and self.send_usage:
            yield {**base, "choices": [], "usage": self.openai_usage()}


def _loads(raw: str) -> Any:
    try:
        return json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"_raw": raw}
