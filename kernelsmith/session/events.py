"""Session events: the one record format that the console, the TUI, the bench and the
trainer read. One JSON object per line in .kernelsmith/sessions/<id>/events.jsonl.

Every event has `v` (format version), `t` (unix seconds) and `kind`. The fields of each
kind are listed in KINDS and documented in docs/session-format.md.
"""

from __future__ import annotations

import time
from typing import Any

VERSION = 1

KINDS: dict[str, tuple[str, ...]] = {
    # kind: required fields
    "session_start": ("session_id", "config", "system", "task", "workdir"),
    "model_turn": ("turn", "message", "usage"),
    "user_message": ("turn", "content"),
    "tool_result": ("turn", "tool_call_id", "name", "ok", "content"),
    "eval_result": ("turn", "tool", "attempt", "result"),
    "attempt": ("turn", "attempt", "ref", "sha"),
    "commit": ("turn", "sha", "summary", "speedup_vs_eager", "speedup_vs_compile", "reward"),
    "compaction": ("turn", "before_tokens", "after_tokens", "messages"),
    "resume": ("from_turn", "pending_tool_calls"),
    "error": ("turn", "message"),
    "session_end": ("turn", "reason", "summary"),
}


class EventError(ValueError):
    """An event that does not follow the format."""


def make_event(kind: str, **fields: Any) -> dict[str, Any]:
    """A new event of a known kind with all its required fields."""
    if kind not in KINDS:
        raise EventError(f"unknown event kind {kind!r}")
    missing = [name for name in KINDS[kind] if name not in fields]
    if missing:
        raise EventError(f"{kind} event lacks {', '.join(missing)}")
    return {"v": VERSION, "t": round(time.time(), 3), "kind": kind, **fields}
