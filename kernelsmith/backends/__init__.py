"""Backends by name. The loop only sees the Backend protocol (base.py)."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

from kernelsmith.backends.base import Backend, BackendError
from kernelsmith.config import Settings
from kernelsmith.errors import BadInput

BACKENDS = {
    "anthropic": "kernelsmith.backends.anthropic:AnthropicBackend",
    "openai": "kernelsmith.backends.openai:OpenAIBackend",
    "scripted": "kernelsmith.backends.scripted:ScriptedBackend",
    "builtin": "kernelsmith.backends.builtin:BuiltinBackend",
    "hf": "kernelsmith.backends.hf:HFBackend",
}
DEFAULT_MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4.1"}
CONTEXT_WINDOWS = {"anthropic": 200_000, "openai": 128_000, "scripted": 1_000_000, "builtin": 1_000_000,
                   "hf": 32_768}
LOCAL_CONTEXT_WINDOW = 32_768  # an OpenAI-compatible local server: assume a modest window

NO_BACKEND_HINT = ("set ANTHROPIC_API_KEY or OPENAI_API_KEY; or --backend openai --base-url "
                   "http://localhost:8000/v1 --model NAME for a local server (vLLM, SGLang, Ollama); "
                   "or --backend scripted --script FILE to replay a session")


def backend_name(settings: Settings) -> str:
    """The explicit choice, else the first one configured in the environment, else the
    built-in offline policy (no key needed)."""
    if settings.backend:
        if settings.backend not in BACKENDS:
            raise BadInput(f"unknown backend {settings.backend!r}", hint="one of: " + ", ".join(BACKENDS))
        return settings.backend
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic"
    if os.environ.get("OPENAI_API_KEY") or settings.base_url:
        return "openai"
    return "builtin"


def context_window(name: str, settings: Settings) -> int:
    if settings.context_window:
        return settings.context_window
    if name == "openai" and settings.base_url:
        return LOCAL_CONTEXT_WINDOW
    if name == "hf":
        return checkpoint_window(settings.model) or CONTEXT_WINDOWS[name]
    return CONTEXT_WINDOWS[name]


def checkpoint_window(model: str | None) -> int | None:
    """The positions a local checkpoint was trained for (config.json's max_position_embeddings): SmolLM2-135M
    has 8,192, and a session that assumed 32,768 sent it prompts of 14,700 tokens it never compacted."""
    try:
        config = json.loads((Path(model) / "config.json").read_text())
    except (TypeError, OSError, ValueError):
        return None
    window = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return window if isinstance(window, int) and window > 0 else None


def create_backend(settings: Settings, text_tokens=None) -> Backend:
    """The backend `settings` name. `text_tokens` counts a text in the tokens of the model whose window the
    session keeps (the built-in teacher cuts a file's writes to the student's replies by it)."""
    name = backend_name(settings)
    module, cls = BACKENDS[name].split(":")
    factory = getattr(importlib.import_module(module), cls)
    if name == "scripted":
        if not settings.script:
            raise BadInput("the scripted backend needs --script FILE (a JSON list of turns or an events.jsonl)")
        return factory(settings.script)
    if name == "builtin":
        return factory(one_call_per_reply=settings.one_call_per_reply, max_reply_tokens=settings.max_tokens,
                       text_tokens=text_tokens)
    if name == "hf":
        return factory(settings.model, max_tokens=settings.max_tokens, device=settings.device)
    if name == "openai" and settings.base_url and not settings.model:
        raise BadInput("--model is required with --base-url", hint="the server's /v1/models lists its names")
    return factory(settings.model or DEFAULT_MODELS[name], base_url=settings.base_url,
                   max_tokens=settings.max_tokens, stream=settings.stream, one_call_per_reply=settings.one_call_per_reply)


__all__ = ["Backend", "BackendError", "backend_name", "context_window", "create_backend"]
