"""Parent side of the worker protocol (imports no torch and no candidate code).

Each job runs in a fresh `python -m kernelsmith.harness.worker` process in its
own process group. A crash, a signal (segfault, abort), a timeout or a missing
answer becomes a JobFailed with a readable reason; the caller never hangs. The
parent is a child subreaper, so a daemon that escapes the process group with
setsid is reparented to us and killed with the rest.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import math
import os
import secrets
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Callable

from kernelsmith.evaluation import gpu_lock, loads, toolchain
from kernelsmith.evaluation.checks import CALIBRATE
from kernelsmith.sandbox import jail

PR_SET_CHILD_SUBREAPER = 36


class JobFailed(Exception):
    """A worker that gave no answer: the reason is readable, the log tail is kept."""

    def __init__(self, reason: str, log: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.log = log


def _become_subreaper() -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _stat_fields():
    """(pid, fields) of every visible process's /proc/PID/stat, the fields counted after the command name:
    field 1 is the parent pid, field 3 the session id."""
    for entry in os.scandir("/proc"):  # raw reads: the census runs it around every timed candidate run
        fields = _stat_of(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None:
            yield int(entry.name), fields


def _pids_where(field: int, value: int) -> list[int]:
    """PIDs whose /proc/PID/stat field equals value (_stat_fields)."""
    return [pid for pid, fields in _stat_fields() if int(fields[field]) == value]


def _tree_and_reaped(root: int, jailed: bool = False) -> tuple[list[int], int]:
    """root, every process below it and every process of root's session, and the CPU ticks of the children
    they have reaped (cutime + cstime): a child that ran and was waited for between two looks adds to them.
    A jailed worker's PID namespace hangs off bwrap whole (an orphan in it is adopted by the namespace's
    init), so its tree is walked down from bwrap through each thread's children; an orphan of a bare worker
    is adopted by this process, the subreaper, but keeps the session, so a bare worker's census scans every
    process."""
    if jailed and CHILDREN_FILES:
        try:
            return _walked_tree(root)
        except _Unreadable:  # fail closed: a tree whose children cannot all be read is scanned instead
            pass
    return _scanned_tree(root)


class _Unreadable(Exception):
    """A children file that exists but could not be read (not one of a thread that has exited)."""


# /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN; gVisor has none). Reading the children of the few processes
# of a jailed worker's tree costs about a tenth of a scan of every /proc/PID/stat, which the census did twice
# around every timed run: 8.8 ms a scan on a 2-core machine running a test suite, most of the per-run cost of a
# profile there (docs/env.md)
CHILDREN_FILES = os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def _walked_tree(root: int) -> tuple[list[int], int]:
    """_tree_and_reaped of a jailed worker: root and its descendants, by every thread's children. A single
    read of a children file is one traversal under RCU, so a child that lives through it is listed; a child
    whose parent thread exits meanwhile moves to another thread of that process and is seen at the next look."""
    tree, frontier, reaped = [], [root], 0
    while frontier:
        pid = frontier.pop()
        fields = _stat_of(pid)
        if fields is None:  # gone since its parent listed it
            continue
        tree.append(pid)
        reaped += int(fields[13]) + int(fields[14]) if len(fields) > 14 else 0
        frontier += _threads_children(pid)
    return tree, reaped


def _stat_of(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (_stat_fields), or None where it cannot be read."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            return os.read(fd, 4096).rsplit(b")", 1)[1].split()
        finally:
            os.close(fd)
    except (OSError, IndexError):
        return None


def _threads_children(pid: int) -> list[int]:
    """The children of every thread of pid (a child forked by a thread other than the main one is listed
    under that thread only)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children = []
    for tid in tids:
        try:
            children += _read_children(pid, tid)
        except (FileNotFoundError, ProcessLookupError):  # the thread has exited: its children moved to another
            continue
        except (OSError, ValueError) as err:
            raise _Unreadable(f"/proc/{pid}/task/{tid}/children: {err}") from err
    return children


def _read_children(pid: int, tid: str) -> list[int]:
    fd = os.open(f"/proc/{pid}/task/{tid}/children", os.O_RDONLY)
    try:
        return [int(c) for c in os.read(fd, 1 << 16).split()]
    finally:
        os.close(fd)


def _scanned_tree(root: int) -> tuple[list[int], int]:
    """_tree_and_reaped by one scan of every process's stat: a bare worker, or no children files."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[bytes]] = {}
    for pid, fields in _stat_fields():  # one read of /proc (gVisor has no /proc/PID/task/TID/children)
        children.setdefault(int(fields[1]), []).append(pid)
        stats[pid] = fields
    tree, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        tree.append(pid)
        frontier += children.get(pid, [])
    session = int(stats[root][3]) if root in stats and len(stats[root]) > 3 else None
    tree += [pid for pid, fields in stats.items() if session is not None and pid not in tree
             and len(fields) > 3 and int(fields[3]) == session and pid != os.getpid()]
    reaped = sum(int(stats[pid][13]) + int(stats[pid][14]) for pid in tree if len(stats.get(pid, ())) > 14)
    return tree, reaped


def _thread_cpu_ns(pids: list[int]) -> dict[int, int]:
    """Nanoseconds each thread of these processes has run on a CPU (/proc/PID/task/TID/schedstat), by TID;
    {} where the kernel keeps no such count."""
    spent = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    spent[int(tid)] = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return spent


def _process_cpu_ns(pids: list[int]) -> dict[int, int]:
    """Nanoseconds each of these processes has run on a CPU, its exited threads included (the process's CPU
    clock, which Linux lets any process read by PID), by PID; a process gone or not readable is left out."""
    spent = {}
    for pid in pids:
        try:
            spent[pid] = time.clock_gettime_ns((~pid << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
        except OSError:
            continue
    return spent


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or "?"
    except OSError:
        return "(gone)"


def _children_of(pid: int) -> list[int]:
    return _pids_where(1, pid)


def _job_of(pid: int) -> str:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return ""
    for item in environ:
        if item.startswith(b"KERNELSMITH_JOB_ID="):
            return item.split(b"=", 1)[1].decode()
    return ""


def kill_strays(job_id: str) -> int:
    """Kill and reap processes of this job that were reparented to us (escaped daemons).

    Only children that carry this job's id in their environment are touched, so
    jobs running concurrently in other threads keep their workers.
    """
    if not Path("/proc").is_dir():
        return 0
    killed = 0
    for _ in range(2):  # a second look catches a daemon whose parent was dying during the first
        for pid in _children_of(os.getpid()):
            if _job_of(pid) != job_id:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                killed += 1
            except (ProcessLookupError, ChildProcessError):
                pass
        time.sleep(0.05)
    return killed


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the worker's process group and anything else still in its session."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if Path("/proc").is_dir():
        for pid in _pids_where(3, proc.pid):  # the rest of the worker's session
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


_SIGNALS = {int(s) for s in signal.Signals}


def _signal_reason(code: int) -> str:
    sig = -code
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    plain = {"SIGSEGV": "segmentation fault", "SIGABRT": "abort", "SIGBUS": "bus error",
             "SIGFPE": "floating-point exception", "SIGKILL": "killed", "SIGILL": "illegal instruction"}
    if name == "SIGKILL":  # not ours: our own kills (timeouts) say "timed out"
        return ("crashed: killed (SIGKILL) by something outside the harness, most often the kernel's "
                "out-of-memory killer (the machine ran out of host memory)")
    return f"crashed: {plain.get(name, name)} ({name})"


def scratch_root() -> str | None:
    """Where candidate outputs travel between workers: RAM-backed /dev/shm when it has room."""
    env = os.environ.get("KERNELSMITH_TMPDIR")
    if env:
        return env
    try:
        stats = os.statvfs("/dev/shm")
        if stats.f_bavail * stats.f_frsize > 16 << 30 and os.access("/dev/shm", os.W_OK):
            return "/dev/shm"
    except OSError:
        pass
    return None


def run_job(job: dict, timeout: float, clock: "ParentClock | None" = None) -> dict:
    """Run one job in a fresh worker; return its value or raise JobFailed. With a clock, the worker
    gets a pair of pipes and this process times each batch it announces (ParentClock)."""
    with Prestarted(job, timeout, clock) as worker:
        return worker.run({})


class Prestarted:
    """A fresh worker started before its job is complete: it imports torch and the harness while the
    step before it runs (the judge while the candidate runs, say), then gets the rest of its job
    (the candidate's facts). Its kind, device, paths, threads and jail are fixed when it starts.
    A worker never sent its job is killed on leaving the `with` block; one process per job stays."""

    def __init__(self, job: dict, timeout: float, clock: "ParentClock | None" = None):
        _become_subreaper()
        self.timeout, self.clock, self.proc, self._serving, self.handoff = timeout, clock, None, None, None
        self.ready: int | None = None  # the parent's end of the pipe the worker reports its imports done on
        self.ready_wait_s: float | None = None  # how long its job waited for those imports (None: no report)
        self.gpu_lock: dict[str, float] = {}  # {"lock_wait", "lock_held"} seconds of a GPU job's run (compute_lock)
        self.partner: "Prestarted | None" = None  # a spare's judge, started with it (Spares.stock)
        self.phases: "PhaseChannel | None" = None  # a phased job's pipes for the GPU alone (gpu_lock.PHASED_JOBS)
        # a worker still running when this process exits may still write here as the folder is removed
        self._tmp = tempfile.TemporaryDirectory(prefix="ks-job-", dir=scratch_root(), ignore_cleanup_errors=True)
        LIVE.add(self)
        os.chmod(self._tmp.name, 0o700)
        self.job = {**job, "result_path": str(Path(self._tmp.name) / "answer.json")}
        self.job.setdefault("out_dir", str(Path(self._tmp.name) / "out"))
        Path(self.job["out_dir"]).mkdir(parents=True, exist_ok=True)
        self.log_path = Path(self._tmp.name) / "worker.log"

    def __enter__(self) -> "Prestarted":
        if self.proc is not None:  # a spare (Spares), started earlier: it is already running
            return self
        self._serving = self.clock.serving(self.job) if self.clock else contextlib.nullcontext()
        self._serving.__enter__()
        try:
            self.handoff = _handoff_channel(self.job)
            self.ready = _ready_channel(self.job)
            self.phases = PhaseChannel.for_job(self.job)
            self.proc, self._log = _spawn(self.job, self.log_path)
        except BaseException:
            self._close()
            raise
        finally:  # the worker has its ends now (a judge's handoff: the end its candidate left it)
            _close_fd(self.job.pop("handoff_fd", None))
            _close_fd(self.job.pop("ready_fd", None))
            for fd in self.job.pop("phase_fds", ()):
                _close_fd(fd)
        if self.clock:
            self.clock.census(self.proc.pid, jail.status().jailed and self.job["kind"] in jail.UNTRUSTED_JOBS)
        return self

    def judge_channel(self) -> dict:
        """What the judge of this candidate worker is started with: the other end of the socket pair
        the judge hands its output buffers over (harness/handoff.py), or nothing (the file path)."""
        if self.handoff is None:
            return {}
        fd, self.handoff = self.handoff, None  # the judge's Prestarted closes it once the judge has it
        return {"handoff_fd": fd, "pass_fds": (fd,)}

    def take_partner(self, fits) -> "Prestarted | None":
        """The partner started with this spare, if it is alive and fits(its job); else None (and it is gone)."""
        partner, self.partner = self.partner, None
        if partner is not None and partner.proc.poll() is None and fits(partner.job):
            return partner
        if partner is not None:
            partner.__exit__(None, None, None)
        return None

    def run(self, rest: dict) -> dict:
        """Send the rest of the job, once this GPU runs no other job; the worker's value, or JobFailed."""
        job, start = {**self.job, **rest}, time.perf_counter()
        self.await_ready()  # outside the lock: the GPU serves others
        if self.clock:
            self.clock.before_job()
        asked = time.perf_counter()
        with compute_lock(job) as locked:  # the imports' wait counts against the same timeout: a hang fails once
            taken = time.perf_counter()
            phases = self.phases.serving(locked) if self.phases and isinstance(locked, gpu_lock.Switchable) else None
            code = _wait(self.proc, job, max(self.timeout - (taken - start), 0.1), phases)
        if locked:  # what a pool's lanes queue for: the job's load, its work and its worker's exit
            self.gpu_lock = {"lock_wait": round(taken - asked, 3), "lock_held": elapsed(taken),
                             **(self.phases.seconds() if phases else {})}
        return _read_answer(job, code, self.log_path.read_text(errors="replace"), self.timeout)

    def await_ready(self) -> None:
        """Wait (once) until the worker has imported torch; `ready_wait_s` says how long."""
        if self.ready is not None:
            self.ready_wait_s = _await_ready(self.ready, self.timeout)
            self.ready = None

    def __exit__(self, *exc) -> None:
        self._close()

    def _close(self) -> None:
        if self.partner is not None:
            self.partner.__exit__(None, None, None)
            self.partner = None
        if self.proc is not None:
            if self.proc.returncode is None:  # never sent its job, or interrupted
                _reap(self.proc, self.job["job_id"])
            self._log.close()
        if self._serving is not None:
            self._serving.__exit__(None, None, None)
        _close_fd(self.handoff)
        _close_fd(self.ready)
        self.handoff = self.ready = None
        if self.phases is not None:
            self.phases.close()
        self._tmp.cleanup()


def _handoff_channel(job: dict) -> int | None:
    """For a candidate worker: a socket pair, one end passed to it (job["handoff_fd"]), the parent's
    end returned for its judge. The parent only makes the pair; it never reads from it."""
    if job["kind"] != "candidate" or os.environ.get("KERNELSMITH_OUTPUT_HANDOFF", "1") == "0":
        return None
    parents, workers = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    job["handoff_fd"] = workers.detach()
    job["pass_fds"] = (*job.get("pass_fds", ()), job["handoff_fd"])
    return parents.detach()


def _ready_channel(job: dict) -> int:
    """A pipe the worker writes one byte on once its imports are done, before it reads its job (so
    before any candidate code exists in it): the parent's end returned, the worker's in job["ready_fd"]."""
    parents, workers = os.pipe()
    job["ready_fd"] = workers
    job["pass_fds"] = (*job.get("pass_fds", ()), workers)
    return parents


def _await_ready(fd: int | None, timeout: float) -> float | None:
    """Wait until the worker has imported torch (or died, or the timeout passed: its job's wait reports
    that), and close the pipe. A spare still importing when its job comes would otherwise hold the GPU's
    lock idle for seconds (3 s of a 7 s profile on the H200) while other sessions' jobs waited on it.
    The seconds waited, or None where no byte came (a worker that died, or never had the pipe)."""
    if fd is None:
        return None
    start, came = time.perf_counter(), b""
    poller = select.poll()  # not select.select: a pool's descriptors pass 1024
    poller.register(fd, select.POLLIN)
    with contextlib.suppress(OSError):
        if poller.poll(timeout * 1000):
            came = os.read(fd, 1)
    _close_fd(fd)
    return round(time.perf_counter() - start, 3) if came else None


class PhaseChannel:
    """The parent's end of a phased job's two pipes (gpu_lock.PHASED_JOBS, harness/gpu_phase.py): the
    worker writes "x" for the GPU alone or "s" for shared again, and reads one byte back once the parent
    holds the GPU's lock so. A job marked "compile_unheld" (a task kernelsmith composed, whose compile
    runs no GPU kernel) may also write "n", to hold nothing while torch.compile generates code; from any
    other job "n" ends the channel (its worker then fails), so an untrusted task cannot give its hold
    away and compute beside another job's timing. Answered while the parent waits for the worker's exit."""

    def __init__(self, job: dict):
        self.requests, worker_w = os.pipe()
        worker_r, self.acks = os.pipe()
        job["phase_fds"] = (worker_w, worker_r)
        job["pass_fds"] = (*job.get("pass_fds", ()), worker_w, worker_r)
        self.holder: "gpu_lock.Switchable | None" = None
        self.may_unhold = bool(job.get("compile_unheld"))
        self.alone_s = self.alone_wait_s = 0.0
        self._alone_since: float | None = None

    @classmethod
    def for_job(cls, job: dict) -> "PhaseChannel | None":
        if job.get("device") != "cuda" or not gpu_lock.phased(job):
            return None
        return cls(job)

    def serving(self, holder) -> "PhaseChannel":
        self.holder = holder  # compute_lock's Switchable, held shared
        return self

    def wait(self, proc: subprocess.Popen, timeout: float) -> int:
        """Answer the worker's requests until it exits; its exit code (TimeoutExpired past the timeout)."""
        deadline = time.monotonic() + timeout
        poller = select.poll()
        poller.register(self.requests, select.POLLIN)
        while proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            if poller.poll(min(left, 0.25) * 1000) and not self._answer():
                self.close()  # its end closed (exiting), or a request out of protocol: blocked on an answer, it fails
                return proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
        return proc.returncode

    def _answer(self) -> bool:
        """One request served; False once the worker's end is closed."""
        try:
            asked = os.read(self.requests, 1)
        except OSError:
            return False
        if asked not in (b"x", b"s", b"n") or (asked == b"n" and not self.may_unhold):
            return False
        start = time.perf_counter()
        if asked == b"n":
            self.holder.release()
        else:
            self.holder.take(share=asked == b"s")
        if asked == b"x":
            self.alone_wait_s += time.perf_counter() - start
            self._alone_since = time.perf_counter()
        elif self._alone_since is not None:
            self.alone_s += start - self._alone_since
            self._alone_since = None
        with contextlib.suppress(OSError):
            os.write(self.acks, b"k")
        return True

    def seconds(self) -> dict[str, float]:
        """How long the job waited for the GPU alone and held it so, over all its timings."""
        return {"lock_alone_wait": round(self.alone_wait_s, 3), "lock_alone": round(self.alone_s, 3)}

    def close(self) -> None:
        _close_fd(self.requests)
        _close_fd(self.acks)
        self.requests = self.acks = None


def _close_fd(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


class ParentClock:
    """A clock the candidate cannot reach, and the source of its timed runs' inputs.

    The worker announces each batch of timed runs over a pipe (`ready NAME`; go; `done`) and this
    process times it with its own perf_counter; the worker's timers are checked against that
    (evaluation/checks.py). Before each fresh input draw the worker asks `draw` and gets a seed made
    here, just then: nothing in the candidate's process knows a run's inputs before they are drawn,
    and `seeds` (the latest draw before each candidate batch) says which inputs every timed run had,
    whatever the worker claims."""

    MAX_BATCHES = 100_000
    SEED = struct.Struct(">Q")

    def __init__(self):
        self.batches: dict[str, list[float]] = {}
        # per timed run, ms from its input draw (the worker's request for the seed) to its `done`: the draw,
        # the flush and the bracket, where work on the run's inputs can be moved. What the harness runs
        # before the draw (spot checks after some runs only, which the calibration has none of) is no
        # run's: it made eager's cycles after the candidate's import look 0.2-0.5 ms longer than the
        # calibration's on an H100, charged to honest kernels. A run with no draw: from the previous `done`
        self.cycles: dict[str, list[float]] = {}
        self._last_done: float | None = None
        self._drawn_at: float | None = None
        # eager's runs before the candidate was imported: their cycles, and the timed ms each reported at once
        # (trusted: no candidate code existed in the worker yet); closed by the worker's `calibrated`
        self.calibration: list[tuple[float, float]] = []
        self.calibration_brackets: list[float] = []  # the same runs' brackets, ms from `g` to `done`
        self.calibrating = True
        self.seeds: list[int] = []  # per timed candidate run, in order
        self.draws = 0
        self._last: int | None = None
        self.worker_pid, self.expected_processes, self.jailed = None, 1, False
        self.most_processes = 0  # the most processes of the worker's tree seen at a timed batch
        self.crowd: list[str] = []  # that tree's command names, when it held more than expected
        self.short_lived = 0  # brackets in which a child of the worker's tree ran and was reaped
        self.tree: list[int] = []  # the worker's processes at the latest census
        self.loads = loads.LoadCensus()  # what those processes map, read between the candidate's brackets
        # CPU ms that threads the harness did not have spent from each timed run's input draw to its bracket,
        # per contender: work run beside the harness's loop, on another core, lengthens no cycle
        self.foreign_cpu: dict[str, list[float]] = {}
        self.foreign_after: dict[str, list[float]] = {}  # the same gaps, by the contender of the run before
        self._previous: str | None = None
        self._harness_tids: set[int] | None = None  # the worker's threads once calibrated (no candidate code yet)
        self._at_draw: tuple[dict[int, int], dict[int, int]] | None = None  # processes' and harness threads' CPU

    def census(self, pid: int, jailed: bool) -> None:
        """Count the worker's processes around each timed batch: in the jail bwrap, the namespace's init and
        the worker; bare, the worker. Any other (a helper started by the candidate, computing where neither
        the op watch nor the load checks look) is a violation (evaluation/checks.py)."""
        self.worker_pid, self.expected_processes, self.jailed = pid, 3 if jailed else 1, jailed

    def _count(self, judged: bool = True) -> int:
        """Census of the worker's processes; the CPU ticks of the children they have reaped so far. Unjudged
        (a calibration run: no candidate code exists yet) it costs the same and counts nothing against it."""
        if self.worker_pid is None:
            return 0
        tree, reaped = _tree_and_reaped(self.worker_pid, self.jailed)
        self.tree = tree
        if not judged:
            return reaped
        if len(tree) > max(self.most_processes, self.expected_processes):
            self.crowd = [_command(pid) for pid in tree]
        self.most_processes = max(self.most_processes, len(tree))
        return reaped

    def before_job(self) -> None:
        """The worker has imported torch and the harness and has no job yet, so no candidate code: what it
        maps now is its own (loads.LoadCensus.baseline)."""
        if self.worker_pid is not None:
            self.loads.baseline(_tree_and_reaped(self.worker_pid, self.jailed)[0])

    @contextlib.contextmanager
    def serving(self, job: dict):
        self.loads = loads.LoadCensus(reachable=[job.get("cwd")])  # a workdir under /opt is still the agent's
        go_r, go_w = os.pipe()
        report_r, report_w = os.pipe()
        job["clock_fds"] = [go_r, report_w]
        job["pass_fds"] = (go_r, report_w)
        thread = threading.Thread(target=self._serve, args=(os.fdopen(report_r, "rb"), go_w), daemon=True)
        thread.start()
        try:
            yield
        finally:
            for fd in (go_r, report_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
            thread.join(timeout=5)
            with contextlib.suppress(OSError):
                os.close(go_w)

    def _serve(self, reports, go_w: int) -> None:
        """Until the worker closes its end or says something out of protocol (then it waits in vain)."""
        with reports:
            while sum(map(len, self.batches.values())) + self.draws < self.MAX_BATCHES:
                line = reports.readline()
                if line == b"draw\n":
                    self._draw(go_w)
                elif line == b"calibrated\n" and self.calibrating:
                    self.calibrating, self._last_done = False, None  # the candidate's import is no run's cycle
                    self._harness_tids = set(_thread_cpu_ns(self.tree))
                elif not (line.startswith(b"ready ") and self._batch(line, reports, go_w)):
                    return

    def _draw(self, go_w: int) -> None:
        self._drawn_at = time.perf_counter()  # the run's cycle starts here (the reads below are in it)
        self._foreign_at_draw()  # the worker waits for the seed: its own threads are idle while read
        self._last = secrets.randbelow(2**62 - 1) + 1
        self.draws += 1
        os.write(go_w, self.SEED.pack(self._last))

    def _batch(self, line: bytes, reports, go_w: int) -> bool:
        name = line[6:].strip().decode(errors="replace")[:40]
        if name == "candidate":
            self.seeds.append(self._last)
        calibration = name == CALIBRATE
        if calibration != self.calibrating:  # calibration runs come first, and only then
            return False
        judged = not calibration  # no candidate code exists in the worker during calibration
        reaped = self._count(judged)  # before and after every bracket, never inside it: all brackets alike
        self._foreign_gap(name, judged)
        start = time.perf_counter()
        os.write(go_w, b"g")
        timed_ms = _done(reports.readline(), calibration)
        if timed_ms is None:
            return False
        done = time.perf_counter()
        cycle_ms = (done - (self._drawn_at or self._last_done or start)) * 1e3
        self._last_done, self._drawn_at = done, None
        if calibration:
            self.calibration.append((cycle_ms, timed_ms))
            self.calibration_brackets.append((done - start) * 1e3)
        else:
            self.batches.setdefault(name, []).append((done - start) * 1e3)
            self.cycles.setdefault(name, []).append(cycle_ms)
        # the census below runs before this process reads the next draw, so it is in no run's cycle (the one
        # before the bracket is in this run's); calibration runs take both too, so that eager's cycles before
        # and after the candidate's import hold the same
        if self._count(judged) > reaped and judged:  # a process started and ended inside the bracket
            self.short_lived += 1
        self.loads.after_run(self.tree, name == "candidate")  # after the bracket, like the count: what it maps
        return True

    def _foreign_gap(self, name: str, judged: bool) -> None:
        """Before a judged bracket: the CPU that threads other than the harness's spent from the run's input
        draw to this bracket (where work on the drawn inputs is moved to, out of the timed window), to this
        run. Read as the processes' CPU (exited threads included: a thread started for one draw and gone
        before this read still counts) less the harness threads'. Both reads are taken while the worker
        waits on the parent (for the seed, then the go), so that its own running threads do not land
        between the processes' read and the threads'. Read around calibration runs too, unrecorded: every
        cycle holds the reads' cost, so eager's cycles after the candidate's import do not grow by it over
        the calibration's (harness_growth)."""
        now, at_draw = self._cpu_read(), self._at_draw
        self._at_draw = None
        if not judged or self._harness_tids is None:
            return
        if at_draw is not None:
            gap = _foreign_ms(at_draw, now)
            self.foreign_cpu.setdefault(name, []).append(gap)
            self.foreign_after.setdefault(self._previous, []).append(gap)
        self._previous = name

    def _foreign_at_draw(self) -> None:
        now = self._cpu_read()
        self._at_draw = now if not self.calibrating and self._harness_tids is not None else None

    def _cpu_read(self) -> tuple[dict[int, int], dict[int, int]]:
        """The worker's processes' CPU ns, and its harness threads' (all threads until calibrated)."""
        processes, threads = _process_cpu_ns(self.tree), _thread_cpu_ns(self.tree)
        harness = self._harness_tids
        return processes, threads if harness is None else {t: ns for t, ns in threads.items() if t in harness}


def _foreign_ms(before: tuple[dict[int, int], dict[int, int]], after: tuple[dict[int, int], dict[int, int]]) -> float:
    """CPU ms between two reads spent by threads other than the harness's: the processes' growth less the
    harness threads' (a harness thread that exited meanwhile counts as foreign: rare, and never in a lower
    reading)."""
    grown = sum(ns - before[0][pid] for pid, ns in after[0].items() if pid in before[0])
    harness = sum(ns - before[1][tid] for tid, ns in after[1].items() if tid in before[1])
    return max(0.0, (grown - harness) / 1e6)


def _done(line: bytes, calibration: bool) -> float | None:
    """A bracket's end: `done`, with the run's timed ms for a calibration run (0.0 stands for `done` alone);
    None for anything else."""
    if not calibration:
        return 0.0 if line == b"done\n" else None
    try:
        value = float(line[5:]) if line.startswith(b"done ") else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


class Spares:
    """Workers started for the next job of a kind before it is asked for: a session's next verify of its
    workdir finds its candidate worker with torch imported. Up to `depth` spares per spawn signature (the
    job's fields that fix the worker's jail and environment, and this thread's extra environment), the
    oldest taken first, at most MAX in all, the oldest killed first. A spare is an ordinary Prestarted: a
    fresh process that has loaded no candidate code, whose jail shows the workdir live (files edited after
    it started are the ones it loads), used for one job and gone."""

    MAX = 32  # a session keeps up to seven (build, candidate and judge, two profiles and their checksums),
    # and a pool runs several sessions: 3 lanes on one GPU lost their spares to each other at 12
    FIELDS = ("kind", "reference", "candidate", "cwd", "device", "precision", "threads", "kernels_dir", "fast_math")

    def __init__(self):
        self._spares: "list[tuple[str, Prestarted]]" = []  # in the order they started
        self._lock = threading.Lock()

    def signature(self, job: dict, timeout: float) -> str:
        return json.dumps([[job.get(k) for k in self.FIELDS], timeout, sorted(getattr(_THREAD, "env", {}).items())])

    def take(self, job: dict, timeout: float) -> "Prestarted | None":
        """The oldest live spare for this job (the likeliest to have torch imported), or None."""
        sig = self.signature(job, timeout)
        while True:
            with self._lock:
                found = next((i for i, (s, _) in enumerate(self._spares) if s == sig), None)
                worker = None if found is None else self._spares.pop(found)[1]
            if worker is None or worker.proc.poll() is None:
                return worker
            worker.__exit__(None, None, None)  # died waiting: the next one, if any

    def waiting(self, job: dict, timeout: float) -> "list[Prestarted]":
        """The spares for this job, oldest first (dead ones included until taken or replaced)."""
        sig = self.signature(job, timeout)
        with self._lock:
            return [w for s, w in self._spares if s == sig]

    def stock(self, job: dict, timeout: float, make_clock: "Callable[[], ParentClock] | None" = None,
              partner=None, depth: int = 1) -> None:
        """Start spares for a job like this one until `depth` live ones of its signature wait (dead ones
        are dropped); a profile worker gets a clock of its own from `make_clock`, which will time it. With
        `partner` (the spare -> a job), a second worker is started beside it: a candidate's judge, which
        then imports torch before the candidate's first output asks it for a buffer."""
        sig = self.signature(job, timeout)
        with self._lock:
            dead = [(s, w) for s, w in self._spares if s == sig and w.proc.poll() is not None]
            self._spares = [entry for entry in self._spares if entry not in dead]
            live = sum(1 for s, _ in self._spares if s == sig)
        for _, old in dead:
            old.__exit__(None, None, None)
        for _ in range(depth - live):
            self._start(sig, job, timeout, make_clock() if make_clock else None, partner)

    def _start(self, sig: str, job: dict, timeout: float, clock: "ParentClock | None", partner) -> None:
        worker = Prestarted(job, timeout, clock).__enter__()
        if partner is not None:
            try:
                worker.partner = Prestarted(partner(worker), timeout).__enter__()
            except BaseException:
                worker.__exit__(None, None, None)
                raise
        with self._lock:
            self._spares.append((sig, worker))
            retired = [self._spares.pop(0)[1] for _ in range(max(0, len(self._spares) - self.MAX))]
        for old in retired:
            old.__exit__(None, None, None)

    def count(self) -> int:
        return len(self._spares)

    def by_kind(self) -> "dict[str, list[Prestarted]]":
        """The waiting spares by job kind, oldest first."""
        with self._lock:
            kinds: dict[str, list[Prestarted]] = {}
            for _, worker in self._spares:
                kinds.setdefault(worker.job["kind"], []).append(worker)
            return kinds

    def close(self) -> None:
        with self._lock:
            retired, self._spares = [w for _, w in self._spares], []
        for worker in retired:
            worker.__exit__(None, None, None)

    def retire(self, folder: Path) -> None:
        """Stop the spares started for jobs in `folder` (a session's workdir, once the session is over)."""
        inside = lambda job: any(job.get(k) and Path(folder) in (Path(job[k]), *Path(job[k]).parents)  # noqa: E731
                                 for k in ("cwd", "kernels_dir"))
        with self._lock:
            retired = [w for _, w in self._spares if inside(w.job)]
            self._spares = [(s, w) for s, w in self._spares if w not in retired]
        for worker in retired:
            worker.__exit__(None, None, None)


SPARES = Spares()
LIVE: "weakref.WeakSet[Prestarted]" = weakref.WeakSet()  # every worker made, till it is collected


def _at_exit() -> None:
    """Before tempfile's own exit hook removes the workers' folders under them (a session's warm-up on its
    thread, when the session ends in an error), which printed a traceback after a one-line error."""
    stop_all()


def stop_all() -> None:
    """The spares stopped and every worker still running killed: the threads waiting on them get their
    failed answers at once (an interrupted run need not wait for its running jobs)."""
    SPARES.close()
    for worker in list(LIVE):
        if worker.proc is not None and worker.proc.poll() is None:
            _kill_group(worker.proc)


atexit.register(_at_exit)  # after weakref's exit hook (registered at its import): so it runs before it


CPU_ONLY_JOBS = ("build", "prepare")


@contextlib.contextmanager
def compute_lock(job: dict):
    """The GPU's lock (evaluation/gpu_lock.py), held by the parent from sending a job to its worker's exit:
    exclusive for every job that times, shared among the jobs that only compute and compare. A worker
    runs no candidate code before its job arrives and nothing of it survives its exit (its PID namespace
    ends), so all GPU work of every job lies inside its hold: evaluations may share a GPU (LocalSandbox
    evals_per_gpu) and their verifies overlap, but nothing runs on a GPU while a profile times there.
    Yields whether a lock was taken (False for CPU jobs)."""
    if job.get("device") != "cuda" or job["kind"] in CPU_ONLY_JOBS:
        yield False
        return
    keys = gpu_lock.gpu_keys(_worker_env(job).get("CUDA_VISIBLE_DEVICES"))
    if gpu_lock.phased(job):  # shared to start with; its PhaseChannel switches it around timings
        holder = gpu_lock.Switchable(keys)
        holder.take(share=True)
        try:
            yield holder
        finally:
            holder.release()
        return
    with gpu_lock.hold(keys, gpu_lock.shared(job["kind"])):
        yield True


_THREAD = threading.local()


@contextlib.contextmanager
def extra_env(values: dict[str, str]):
    """Environment for the workers this thread starts inside the block (e.g. the sandbox pins a
    GPU with CUDA_VISIBLE_DEVICES). Thread-local: pool threads do not see each other's."""
    before = getattr(_THREAD, "env", {})
    _THREAD.env = {**before, **values}
    try:
        yield
    finally:
        _THREAD.env = before


def extra_env_now() -> dict[str, str]:
    """This thread's extra worker environment (the slot's GPU)."""
    return dict(getattr(_THREAD, "env", {}))


def _worker_env(job: dict) -> dict:
    merged = dict(os.environ)
    merged.update(getattr(_THREAD, "env", {}))
    merged["KERNELSMITH_DEVICE"] = job.get("device", "cpu")
    merged["PYTHONUNBUFFERED"] = "1"
    merged["KERNELSMITH_JOB_ID"] = job["job_id"]
    merged["PYTHONDONTWRITEBYTECODE"] = "1"  # no worker leaves bytecode another could be made to believe
    if job.get("handoff_fd") is not None:
        trials = f",{job['trials']}" if isinstance(job.get("trials"), int) else ""  # the judge's job has them
        merged["KERNELSMITH_HANDOFF"] = f"{job.get('device', 'cpu')},{job['handoff_fd']}{trials}"
    if job.get("ready_fd") is not None:
        merged["KERNELSMITH_READY_FD"] = str(job["ready_fd"])
    if job.get("phase_fds"):
        merged["KERNELSMITH_PHASE_FDS"] = ",".join(map(str, job["phase_fds"]))
    if job["kind"] == "rubric" and job.get("out_dir"):  # Triton keeps its kernels under ~/.triton, read-only in
        merged["TRITON_HOME"] = job["out_dir"]  # the jail (every compile of an H100 run failed there); set before
        # any import, since a spare imports inductor before its job comes. out_dir: the run's shared inductor
        # cache for kernelsmith's own tasks (synth/rubric.rubric_job), the job's private folder otherwise
    if job.get("threads"):  # eager's intra-op threads and the candidate's OpenMP threads: the same count
        merged["OMP_NUM_THREADS"] = str(job["threads"])
    merged.pop("PYTHONSTARTUP", None)
    return merged


def worker_command(job: dict, job_dir: str) -> tuple[list[str], object]:
    """The worker's argv and preexec_fn: jobs that load or compile candidate code run in the jail,
    trusted ones in a PID namespace of their own; every worker dies with its parent."""
    argv = [sys.executable, "-m", "kernelsmith.harness.worker", job["kind"]]  # the kind: what to import early
    if job["kind"] in jail.UNTRUSTED_JOBS:
        spec = jail.worker_spec(job, job_dir)
        return jail.wrap(argv, spec), jail.die_with_parent(spec.limits)
    return jail.reaped(argv), jail.die_with_parent()


def _spawn(job: dict, log_path: Path) -> tuple[subprocess.Popen, object]:
    job["job_id"] = uuid.uuid4().hex
    # probed here, trusted (the jail cannot write the verdict cache), before every worker: $CXX is part of
    # a build's stamp, so the op watch built by "prepare" must see the $CXX a jailed profile will see
    toolchain.choose_compiler([])
    argv, preexec = worker_command(job, str(log_path.parent))
    log = open(log_path, "wb")
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec,
            env=_worker_env(job), start_new_session=True, cwd=job.get("cwd"), pass_fds=job.pop("pass_fds", ()),
        )
    except BaseException:
        log.close()
        raise
    return proc, log


def _wait(proc: subprocess.Popen, job: dict, timeout: float, phases: PhaseChannel | None = None) -> int | None:
    """Send the job, wait for the worker (answering a phased job's requests for the GPU); its exit code,
    or None when it ran past the timeout."""
    try:
        _send(proc, job)
        code = proc.wait(timeout=timeout) if phases is None else phases.wait(proc, timeout)
    except subprocess.TimeoutExpired:
        code = None
    finally:  # also on Ctrl-C: the worker and its strays die before the interrupt goes on
        _reap(proc, job["job_id"])
    return code


def _reap(proc: subprocess.Popen, job_id: str) -> None:
    _kill_group(proc)
    proc.wait()
    kill_strays(job_id)


def _send(proc: subprocess.Popen, job: dict) -> None:
    try:
        proc.stdin.write(json.dumps(job).encode())
        proc.stdin.close()
    except BrokenPipeError:  # the worker died at start; its exit status tells why
        pass


def _read_answer(job: dict, code: int | None, log: str, timeout: float) -> dict:
    tail = "\n".join(log.strip().splitlines()[-20:])
    if code is None:
        raise JobFailed(f"timed out after {timeout:.0f} s (hang or infinite loop); the worker was killed", tail)
    if code < 0:
        raise JobFailed(_signal_reason(code), tail)
    if code > 128 and code - 128 in _SIGNALS and jail.status().jailed:  # bwrap reports a killed child so
        raise JobFailed(_signal_reason(128 - code), tail)
    path = Path(job["result_path"])
    if not path.exists():
        raise JobFailed(f"worker exited with code {code} without an answer (sys.exit or os._exit in candidate code?)",
                        tail)
    try:
        answer = json.loads(path.read_text())
    except ValueError:
        raise JobFailed("worker answer was not valid JSON", tail) from None
    if not answer.get("ok"):
        raise JobFailed(_readable_error(answer.get("error", "unknown error")), answer.get("traceback", "") + tail)
    return answer["value"]


def _readable_error(error: str) -> str:
    lowered = error.lower()
    if "illegal memory access" in lowered:
        return "CUDA illegal memory access (out-of-bounds read or write in a kernel): " + error
    if "out of memory" in lowered:
        return "out of memory: " + error
    return error


def elapsed(start: float) -> float:
    return round(time.perf_counter() - start, 3)
