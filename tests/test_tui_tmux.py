"""Smoke test of the real `kernelsmith review` in a real terminal (tmux, 80x24): it draws, takes
keys, accepts a commit after confirming, and quits cleanly."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid

import git
import pytest

from data.sessions.workdirs import restore_workdir

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=10).stdout


def wait_for(session: str, text: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-t", session)
        if text in screen:
            return screen
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared; the screen was:\n{screen}")


def test_review_in_tmux(tmp_path):
    workdir = restore_workdir("triple", tmp_path / "triple")
    session = f"ks-review-{uuid.uuid4().hex[:8]}"
    command = f"{sys.executable} -m kernelsmith.cli review {workdir}; echo EXITED $?; sleep 30"
    tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", command)
    try:
        screen = wait_for(session, "? Help")  # the footer: the whole screen is drawn
        assert "triple" in screen and "Timeline" in screen and "ended: finish" in screen
        tmux("send-keys", "-t", session, "3")
        wait_for(session, "first verified kernel")
        tmux("send-keys", "-t", session, "a")
        wait_for(session, "Accept commit 95363ab9?")
        tmux("send-keys", "-t", session, "y")
        wait_for(session, "Export the accepted kernel")
        tmux("send-keys", "-t", session, "Escape")
        time.sleep(0.5)  # an escape followed at once by a key reads as alt+key
        tmux("send-keys", "-t", session, "q")
        wait_for(session, "EXITED 0")
        assert git.Repo(workdir).git.rev_parse("refs/kernelsmith/accepted").startswith("95363ab9")
    finally:
        tmux("kill-session", "-t", session)
