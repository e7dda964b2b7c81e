"""The review UI (Textual). `create_app` is the one way to build it, for the CLI and the tests.

Reads session records (kernelsmith.session) and calls kernelsmith.gitops; never imports the
agent or the backends."""

from __future__ import annotations

from pathlib import Path


def create_app(target: Path | None = None, session: str | None = None, poll_s: float = 1.0):
    """The review app for a workdir, a session folder or an events.jsonl (default: the current
    folder). session: an id or unique prefix to open first (default: the newest)."""
    from kernelsmith.tui.app import ReviewApp
    from kernelsmith.tui.data import find_session_id, locate

    workdir, from_path = locate(target)
    chosen = from_path or (find_session_id(workdir, session) if session else None)
    return ReviewApp(workdir, chosen, poll_s)
