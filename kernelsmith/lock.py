"""One writer per workdir: an flock on .kernelsmith/lock, held for as long as a command writes.

Writers are optimize (a new session or a resumed one), compile, verify, profile, accept, revert
and the review UI's restore. A second writer is refused at once (exit 2) with a line naming the
holder; read-only commands (log, the review UI's listing, export) take no lock.

The kernel drops an flock when the last descriptor of its holder closes, however the process
ends (kill -9 included), so a lock is never stale and there is nothing to clean up. The file
stays: unlinking it would let a newcomer lock a new file while the holder still has the old one.
The descriptor is close-on-exec, so the workers and tool calls a session starts never hold it.

Within one process the lock is re-entrant for the thread that holds it (an accept inside a
session); another thread is refused like another process, so bench threads on one workdir
cannot mix their commits, and bench sessions in different workdirs never wait on each other.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from pathlib import Path
from typing import Iterator

from kernelsmith.errors import BadInput

LOCK_FILE = "lock"
STATE_DIR = ".kernelsmith"  # kernelsmith.workdir.STATE_DIR; not imported, so the lock loads nothing else

_held: dict[str, list] = {}  # lock path -> [thread ident, depth, descriptor]
_guard = threading.Lock()


class WorkdirBusy(BadInput):
    """Another kernelsmith process (or thread) is writing this workdir."""


def lock_path(workdir: Path) -> str:
    return str(Path(workdir).resolve() / STATE_DIR / LOCK_FILE)


@contextlib.contextmanager
def workdir_lock(workdir: Path, command: str) -> Iterator[None]:
    """Hold the workdir's writer lock for the block, or raise WorkdirBusy naming the holder."""
    path = lock_path(workdir)
    with _guard:
        held = _held.get(path)
        if held is not None and held[0] != threading.get_ident():
            raise WorkdirBusy(*_busy(workdir, _holder_of(held[2])))
        if held is None:
            held = _held[path] = [threading.get_ident(), 0, _take(path, workdir, command)]
        held[1] += 1
    try:
        yield
    finally:
        _release(path)


NAMELESS_WAIT_S = 2.0  # how long a lock held by nobody named is waited for


def _take(path: str, workdir: Path, command: str) -> int:
    """The lock, or WorkdirBusy. A lock held with no holder named is a release in progress or a
    child forked a moment before it (it holds a copy of the descriptor until it execs): waited for
    briefly, since a real holder names itself as soon as it has the lock."""
    fd = _open(path, workdir)
    deadline = time.monotonic() + NAMELESS_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder = _holder_of(fd)
            if holder.get("pid") or time.monotonic() > deadline:
                os.close(fd)
                raise WorkdirBusy(*_busy(workdir, holder)) from None
            time.sleep(0.05)
    _write_holder(fd, command)
    return fd


def _open(path: str, workdir: Path) -> int:
    """The lock file, made if missing; read-only where .kernelsmith/ is (an flock works on either).
    O_NOFOLLOW: a planted symlink must not make us truncate the file it points to."""
    flags = os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        if not os.path.isdir(os.path.dirname(path)):
            os.mkdir(os.path.dirname(path))  # .kernelsmith/ only: a missing workdir is an error, not made
        return os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o644)
    except OSError:
        pass
    try:
        return os.open(path, os.O_RDONLY | flags)
    except OSError as err:
        raise BadInput(f"cannot lock workdir {workdir}: {path}: {err.strerror}",
                       "kernelsmith needs to write the workdir's .kernelsmith/ folder") from None


def _write_holder(fd: int, command: str) -> None:
    info = {"pid": os.getpid(), "command": command, "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    with contextlib.suppress(OSError):  # a read-only lock file still locks; it just names nobody
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)


def _holder_of(fd: int) -> dict:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _busy(workdir: Path, holder: dict) -> tuple[str, str]:
    who = (f"pid {holder.get('pid')} ({holder.get('command', 'kernelsmith')}, since {holder.get('since', '?')})"
           if holder.get("pid") else "another kernelsmith process")
    return (f"workdir {workdir} is being written by {who}: one writer at a time",
            "wait for it to end, or stop it; log, review and export work meanwhile")


def _release(path: str) -> None:
    with _guard:
        held = _held[path]
        held[1] -= 1
        if held[1] == 0:
            del _held[path]
            with contextlib.suppress(OSError):
                os.ftruncate(held[2], 0)  # a stale name would be shown by whoever is refused next
            os.close(held[2])  # closing the descriptor is what releases the flock
