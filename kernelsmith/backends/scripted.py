"""Replays a list of turns, or the model turns of a recorded session. For tests, demos and
replaying a session into a new workdir.

A script is a JSON file holding a list of turns:

    [{"text": "Write the kernel.", "tool_calls": [{"name": "write_file",
       "arguments": {"path": "kernels/k.cu", "content@file": "k.cu"}}]}, ...]

An argument named `KEY@file` is replaced by KEY holding the text of that file, relative to
the script, so kernels can live next to the script as real source files. A path ending in
.jsonl is read as a session record: its model_turn events are replayed in order.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernelsmith.backends.base import BackendBase, Reply, ToolCall, ToolSpec, Usage
from kernelsmith.errors import BadInput


class ScriptedBackend(BackendBase):
    name = "scripted"

    def __init__(self, script: str | Path | list[dict]):
        self.model = "scripted"
        self.turns = self._load(script) if not isinstance(script, list) else script
        self.position = 0

    def _load(self, path) -> list[dict]:
        path = Path(path)
        if not path.is_file():
            raise BadInput(f"script {path} does not exist")
        try:
            if path.suffix == ".jsonl":
                return _turns_from_record(path)
            turns = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise BadInput(f"script {path} is not valid JSON: {err}") from None
        if not isinstance(turns, list):
            raise BadInput(f"script {path} must hold a JSON list of turns")
        return [_resolve_files(t, path.parent) for t in turns]

    def skip(self, turns: int) -> None:
        """Resume: the first `turns` turns were already played."""
        self.position = min(turns, len(self.turns))

    def complete(self, system: str, messages: list[dict], tools: list[ToolSpec], on_text=None) -> Reply:
        if self.position >= len(self.turns):
            turn = {"text": "The script has no more turns.", "tool_calls": [
                {"name": "finish", "arguments": {"summary": "script exhausted"}}]}
        else:
            turn = self.turns[self.position]
        self.position += 1
        if on_text and turn.get("text"):
            on_text(turn["text"])
        calls = [ToolCall(id=c.get("id") or f"s{self.position}_{i}", name=c["name"], arguments=c.get("arguments", {}))
                 for i, c in enumerate(turn.get("tool_calls", []))]
        return Reply(text=turn.get("text", ""), tool_calls=calls, usage=Usage(), stop_reason="scripted",
                     model=self.model)


def _resolve_files(turn: dict, folder: Path) -> dict:
    calls = []
    for call in turn.get("tool_calls", []):
        args = {}
        for key, value in call.get("arguments", {}).items():
            if key.endswith("@file"):
                source = folder / value
                if not source.is_file():
                    raise BadInput(f"script refers to {source}, which does not exist")
                args[key[:-len("@file")]] = source.read_text()
            else:
                args[key] = value
        calls.append({**call, "arguments": args})
    return {**turn, "tool_calls": calls}


def _turns_from_record(path: Path) -> list[dict]:
    from kernelsmith.session.reader import read_events

    turns = []
    for event in read_events(path):
        if event["kind"] == "model_turn":
            message = event["message"]
            turns.append({"text": message.get("content", ""),
                          "tool_calls": [{"name": c["name"], "arguments": c["arguments"]}
                                         for c in message.get("tool_calls", [])]})
    return turns
