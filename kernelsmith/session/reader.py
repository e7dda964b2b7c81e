"""Readers of session records: the raw events, the list of sessions, and the fold of
one session into the state that resume, the console summary and the UI need."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from kernelsmith.errors import BadInput
from kernelsmith.session.recorder import sessions_dir


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete events. A torn line (the process was killed mid-write) is skipped."""
    events = []
    # Bytes, decoded leniently: a torn line may end inside a multi-byte character. Split on
    # "\n" alone: json.dumps(ensure_ascii=False) leaves U+2028 and U+0085 raw inside strings.
    for line in Path(path).read_bytes().decode("utf-8", errors="replace").split("\n"):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn line: the last one, or the one before a resume's fresh line
    return events


def session_paths(workdir: Path) -> Iterator[Path]:
    folder = sessions_dir(workdir)
    if folder.is_dir():
        yield from sorted(folder.glob("*/events.jsonl"))


def find_session(workdir: Path, session: str) -> Path:
    """The events file of a session id (a unique prefix is enough) or of a path."""
    if Path(session).is_file():
        return Path(session)
    matches = [p for p in session_paths(workdir) if p.parent.name.startswith(session)]
    if len(matches) != 1:
        found = "no session" if not matches else f"{len(matches)} sessions"
        raise BadInput(f"{found} matching {session!r} in {sessions_dir(workdir)}",
                       hint=f"the sessions are the folders of {sessions_dir(workdir)}")
    return matches[0]


@dataclass
class SessionState:
    session_id: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    system: str = ""
    task: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    turn: int = 0
    usage: dict[str, float] = field(default_factory=dict)
    elapsed_s: float = 0.0
    best: dict[str, Any] | None = None
    commits: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    evals: list[dict[str, Any]] = field(default_factory=list)
    compactions: int = 0
    end: dict[str, Any] | None = None

    @property
    def cost_usd(self) -> float:
        return float(self.usage.get("cost_usd", 0.0))

    def pending_tool_calls(self) -> list[dict[str, Any]]:
        """Tool calls of the last assistant message that have no result yet (killed mid-turn)."""
        answered = set()
        for message in reversed(self.messages):
            if message["role"] == "tool":
                answered.add(message["tool_call_id"])
            elif message["role"] == "assistant":
                return [c for c in message.get("tool_calls", []) if c["id"] not in answered]
        return []


def fold(events: list[dict[str, Any]]) -> SessionState:
    state, segment_start, last_t = SessionState(), None, None
    for event in events:
        segment_start = event["t"] if segment_start is None else segment_start
        if event["kind"] == "resume":  # time between a kill and the resume is not session time
            state.elapsed_s += (last_t or event["t"]) - segment_start
            segment_start = event["t"]
        last_t = event["t"]
        _APPLY.get(event["kind"], lambda s, e: None)(state, event)
    if segment_start is not None:
        state.elapsed_s += last_t - segment_start
    return state


def _start(state: SessionState, e: dict) -> None:
    state.session_id, state.config, state.system, state.task = e["session_id"], e["config"], e["system"], e["task"]
    state.messages = list(e.get("messages", []))


def _model_turn(state: SessionState, e: dict) -> None:
    state.turn = e["turn"]
    state.messages.append(e["message"])
    for key, value in e["usage"].items():
        state.usage[key] = state.usage.get(key, 0) + value


def _tool_result(state: SessionState, e: dict) -> None:
    message = {"role": "tool", "tool_call_id": e["tool_call_id"], "name": e["name"], "content": e["content"]}
    if e.get("observation") is not None:  # the structured part (records from before KernelEnv have none)
        message["observation"] = e["observation"]
    state.messages.append(message)


def _commit(state: SessionState, e: dict) -> None:
    state.commits.append(e)
    state.best = e


def _eval(state: SessionState, e: dict) -> None:
    state.evals.append(e)
    state.attempts = max(state.attempts, e["attempt"])


def _compaction(state: SessionState, e: dict) -> None:
    state.messages = list(e["messages"])
    state.compactions += 1


_APPLY = {
    "session_start": _start,
    "model_turn": _model_turn,
    "tool_result": _tool_result,
    "user_message": lambda s, e: s.messages.append({"role": "user", "content": e["content"]}),
    "eval_result": _eval,
    "attempt": lambda s, e: setattr(s, "attempts", max(s.attempts, e["attempt"])),  # a kill may land before eval_result
    "commit": _commit,
    "compaction": _compaction,
    "session_end": lambda s, e: setattr(s, "end", e),
    "resume": lambda s, e: setattr(s, "end", None),
}


def load_session(path: Path) -> SessionState:
    return fold(read_events(path))
