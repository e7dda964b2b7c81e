"""One writer per workdir: the lock is held by a real second process, a second writer is refused
with exit 2 and a line naming the holder, readers are not, and a kill -9 frees it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import TASK
from kernelsmith import workdir as wd
from kernelsmith.agent import run as session
from kernelsmith.config import Settings
from kernelsmith.lock import WorkdirBusy, workdir_lock
from kernelsmith.task import TaskSource

CLI = [sys.executable, "-m", "kernelsmith.cli"]
SCRIPT = Path(__file__).parent / "data" / "triple_session" / "script.json"
# The holder also starts a child that outlives it: the lock's descriptor must not leak into it.
HOLDER = """
import subprocess, sys, time
from pathlib import Path
from kernelsmith.lock import workdir_lock
with workdir_lock(Path(sys.argv[1]), "kernelsmith optimize"):
    child = subprocess.Popen(["sleep", "600"])
    print(child.pid, flush=True)
    time.sleep(600)
"""


@pytest.fixture(autouse=True)
def own_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the ledger key, not the user's


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "wd"
    wd.create(TaskSource(name="axpb", source=TASK, origin="/somewhere/axpb.py"), path, "cpu")
    return path


@pytest.fixture
def holder(root):
    """A second process holding root's lock; yields (process, its child's pid)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    yield proc, child
    for pid in (proc.pid, child):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def ks(*args):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, timeout=120)


def refusal(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_every_writer_is_refused_with_exit_2_naming_the_holder_and_readers_are_not(root, holder):
    proc, _ = holder
    writers = [("compile", root), ("verify", root, "--device", "cpu"), ("profile", root, "--device", "cpu"),
               ("accept", "HEAD", "--workdir", root), ("revert", "HEAD", "--workdir", root),
               ("optimize", "--workdir", root, "--backend", "scripted", "--script", SCRIPT),
               ("optimize", "--workdir", root, "--resume", "nope", "--backend", "scripted", "--script", SCRIPT)]
    for args in writers:
        line = refusal(ks(*args))
        assert f"pid {proc.pid} (kernelsmith optimize, since " in line and "one writer at a time" in line, (args, line)
    assert not (root / ".kernelsmith" / "sessions").exists()  # the refused optimize wrote nothing
    assert ks("log", root).returncode == 0


def test_a_session_start_and_resume_take_the_lock(root, holder):
    settings = Settings(backend="scripted", script=str(SCRIPT))
    with pytest.raises(WorkdirBusy, match="kernelsmith optimize"):
        session.start(settings, root, [], None)
    with pytest.raises(WorkdirBusy, match="kernelsmith optimize"):
        session.resume(settings, root, "nope", [], None)


def test_kill_9_of_the_holder_frees_the_lock_though_its_child_lives_on(root, holder):
    proc, child = holder
    with pytest.raises(WorkdirBusy):
        with workdir_lock(root, "test"):
            pass
    proc.kill()
    proc.wait()
    os.kill(child, 0)  # still running: it never had the lock's descriptor
    with workdir_lock(root, "test"):
        pass
    assert "not a kernelsmith commit" in refusal(ks("accept", "HEAD", "--workdir", root))  # got past the lock


def test_reentrant_in_its_thread_refused_to_another_and_other_workdirs_are_free(root, tmp_path):
    other = tmp_path / "other"
    wd.create(TaskSource(name="axpb", source=TASK, origin="/x.py"), other, "cpu")
    refused = []

    def second_thread():
        try:
            with workdir_lock(root, "thread"):
                pass
        except WorkdirBusy as err:
            refused.append(str(err))
        with workdir_lock(other, "bench session"):  # another workdir: never waits on this one
            pass

    with workdir_lock(root, "kernelsmith optimize"):
        with workdir_lock(root, "kernelsmith accept"):  # an accept inside the session's own thread
            pass
        thread = threading.Thread(target=second_thread)
        thread.start()
        thread.join()
        assert refused and f"pid {os.getpid()} (kernelsmith optimize" in refused[0]
    with workdir_lock(root, "after"):  # released when the outer block ended
        pass


def test_no_stale_lock_after_a_refusal_or_an_error(root):
    with pytest.raises(RuntimeError):
        with workdir_lock(root, "x"):
            raise RuntimeError("boom")
    with workdir_lock(root, "y"):
        pass
    assert (root / ".kernelsmith" / "lock").read_text() == ""  # names nobody once released


def test_a_missing_workdir_is_not_created_by_its_lock(tmp_path):
    with pytest.raises(Exception, match="cannot lock"):
        with workdir_lock(tmp_path / "missing", "x"):
            pass
    assert not (tmp_path / "missing").exists()


def test_a_lock_held_by_nobody_named_is_waited_for_briefly_and_a_named_one_is_not(root):
    """A child forked a moment before a release holds the lock's descriptor until it execs: the lock is
    held, and names nobody. That is waited for (up to lock.NAMELESS_WAIT_S); a named holder is refused at once."""
    import fcntl
    import time

    from kernelsmith.lock import lock_path

    fd = os.open(lock_path(root), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.ftruncate(fd, 0)  # held, nobody named
    threading.Timer(0.3, os.close, args=(fd,)).start()
    started = time.monotonic()
    with workdir_lock(root, "test"):
        assert time.monotonic() - started >= 0.25
    fd = os.open(lock_path(root), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, b'{"pid": 1, "command": "kernelsmith optimize"}', 0)
    try:
        with pytest.raises(WorkdirBusy, match="pid 1"):
            with workdir_lock(root, "test"):
                pass
    finally:
        os.close(fd)
