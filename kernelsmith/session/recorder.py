"""The only writer of a session record: append-only, flushed and fsynced per event, so a
kill -9 loses at most the event being written (the reader skips a torn last line)."""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Callable

from kernelsmith.session.events import make_event

Listener = Callable[[dict[str, Any]], None]


def sessions_dir(workdir: Path) -> Path:
    return Path(workdir) / ".kernelsmith" / "sessions"


def new_session_id() -> str:
    """Sortable by start time, unique enough for one workdir: 20261130-140512-3fa9c1."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


class Recorder:
    def __init__(self, workdir: Path, session_id: str, listeners: list[Listener] | None = None):
        self.session_id = session_id
        self.path = sessions_dir(workdir) / session_id / "events.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.listeners = list(listeners or [])
        self._file = open(self.path, "a", encoding="utf-8", errors="backslashreplace")  # a lone surrogate must not end a session
        if _ends_torn(self.path):  # killed mid-write: start on a fresh line so the next event is whole
            self._file.write("\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = make_event(kind, **fields)
        self._file.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        for listener in self.listeners:
            listener(event)
        return event

    def close(self) -> None:
        self._file.close()


def _ends_torn(path: Path) -> bool:
    """True when the file is not empty and its last byte is not a newline."""
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"
