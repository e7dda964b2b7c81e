"""The jail: what the agent's `bash` and every process that runs candidate code run inside.

bubblewrap (`bwrap`, the Debian package `bubblewrap`) builds it from kernel namespaces:

- the whole filesystem read-only, with only the paths a job names bound writable (for `bash`:
  model_new.py, kernels/ and notes.md; for a build: its build folder; for a candidate worker:
  its output folder) and a private /tmp and /dev/shm;
- trusted state hidden behind empty folders (the workdir's .kernelsmith/ and .git/ for `bash`,
  kernelsmith's key and caches in the user's folders);
- a new PID namespace per call, so nothing it starts outlives it (a daemon that calls setsid
  dies with the namespace), `--die-with-parent`, and a new session (no terminal injection);
- no network (a new, empty network namespace), a new IPC and UTS namespace;
- rlimits on file size, processes, memory and core dumps;
- GPU device nodes only for jobs that need the GPU.

Where no jail can be made, `wrap` runs the command as it is and `status()` says why: the
evaluation then carries a reduced guarantee in every result and commit, never silently.
KERNELSMITH_JAIL=none asks for that on purpose (debugging), and says so just as loudly.
"""

from __future__ import annotations

import functools
import glob
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

GIB = 1 << 30


@dataclass(frozen=True)
class Limits:
    """rlimits for a jailed process (bytes; processes). None leaves the limit as it is."""

    file_bytes: int | None = 4 * GIB
    processes: int | None = 512
    memory_bytes: int | None = None  # address space; never for GPU jobs (the driver maps huge ranges)


@dataclass(frozen=True)
class JailSpec:
    readable: tuple[str, ...] = ()  # paths under /tmp or /dev/shm (private in the jail) shown read-only
    writable: tuple[str, ...] = ()  # existing paths bound read-write at the same place
    hidden: tuple[str, ...] = ()  # folders replaced by an empty one
    gpu: bool = False
    cwd: str | None = None
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True)
class JailStatus:
    kind: str  # "bubblewrap" or "none"
    detail: str  # the version, or why there is no jail

    @property
    def jailed(self) -> bool:
        return self.kind != "none"

    def describe(self) -> str:
        if self.jailed:
            return f"{self.kind} ({self.detail})"
        return f"none: {self.detail}"


REDUCED = ("reduced guarantee: no jail ({why}); the agent's bash and the candidate's processes could write "
           "the workdir's trusted state, and are checked only from inside")


def reduced_note(status: JailStatus) -> str:
    return REDUCED.format(why=status.detail)


@functools.lru_cache(maxsize=1)
def status() -> JailStatus:
    """Which jail this machine can make; probed once per process by making one."""
    if os.environ.get("KERNELSMITH_JAIL", "").lower() == "none":
        return JailStatus("none", "turned off with KERNELSMITH_JAIL=none")
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return JailStatus("none", "bubblewrap is not installed (apt-get install bubblewrap)")
    probe = subprocess.run(_bwrap_argv(bwrap, JailSpec()) + ["true"], capture_output=True, text=True)
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["no message"])[-1]
        return JailStatus("none", f"bubblewrap cannot make namespaces here: {why}")
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    return JailStatus("bubblewrap", version or "bwrap")


def wrap(argv: list[str], spec: JailSpec) -> list[str]:
    """argv inside the jail (or argv itself where there is none)."""
    if not status().jailed:
        return list(argv)
    return _bwrap_argv(shutil.which("bwrap"), spec) + list(argv)


def _bwrap_argv(bwrap: str, spec: JailSpec) -> list[str]:
    args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--tmpfs", "/dev/shm",
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session"]
    for node in gpu_device_nodes() if spec.gpu else ():
        args += ["--dev-bind", node, node]
    for path in _private_tree_paths(spec.readable):
        args += ["--ro-bind", path, path]
    for folder in spec.hidden:
        if os.path.isdir(folder):
            args += ["--tmpfs", folder]
    for path in spec.writable:
        if os.path.exists(path):
            args += ["--bind", path, path]
    if spec.cwd:
        args += ["--chdir", spec.cwd]
    return args + ["--"]


PRIVATE_TREES = ("/tmp", "/dev/shm")  # each jail gets empty ones


def _private_tree_paths(extra: tuple[str, ...]) -> list[str]:
    """What must stay visible under the private /tmp and /dev/shm: the given paths, this Python's own (a
    virtual environment or a checkout under /tmp) and KERNELSMITH_JAIL_READABLE=path:path (files a
    candidate reads from there, shown read-only), outermost first, each once."""
    shown = [p for p in os.environ.get("KERNELSMITH_JAIL_READABLE", "").split(":") if p]  # the user's own
    wanted = [str(Path(p).resolve()) for p in (*extra, *shown, sys.prefix, *sys.path) if p and os.path.exists(p)]
    # never a tree itself: a script run from /tmp puts /tmp on sys.path, and showing all of it read-only
    # left the jail no writable /tmp at all (tempfile then fails inside every candidate)
    inside = sorted({p for p in wanted if any(p.startswith(t + "/") for t in PRIVATE_TREES)})
    return [p for i, p in enumerate(inside) if not any(p.startswith(q + "/") for q in inside[:i])]


def gpu_device_nodes() -> list[str]:
    """The NVIDIA device nodes (control, UVM, one per GPU) and the DRM nodes where present."""
    return sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*"))


def preexec(limits: Limits):
    """A Popen preexec_fn that applies the limits in the child before it execs bwrap (rlimits
    are inherited by everything the jail runs). As root the kernel does not enforce the
    process limit; the PID namespace still ends every process with the call."""
    def apply() -> None:
        _set(resource.RLIMIT_CORE, 0)
        _set(resource.RLIMIT_FSIZE, limits.file_bytes)
        _set(resource.RLIMIT_NPROC, limits.processes)
        _set(resource.RLIMIT_AS, limits.memory_bytes)
    return apply


def _set(which: int, value: int | None) -> None:
    if value is None:
        return
    soft, hard = resource.getrlimit(which)
    cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
    try:
        resource.setrlimit(which, (cap, hard))
    except (ValueError, OSError):
        pass


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def user_secret_dirs() -> tuple[str, ...]:
    """kernelsmith's folders in the user's config (the commit key), hidden from every jail."""
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "kernelsmith"
    return (str(config),)


# --- workers ---------------------------------------------------------------------------------

UNTRUSTED_JOBS = ("build", "candidate", "profile", "rubric", "opgraph")  # the jobs that load or compile candidate
# code; synth's rubric and opgraph jobs run task files an LLM may have written


def lock_dir() -> str:
    """The folder of the per-GPU timing locks, shared by every profile worker on this host."""
    path = os.environ.get("KERNELSMITH_LOCK_DIR", "/tmp/kernelsmith-locks")
    os.makedirs(path, exist_ok=True)
    return path


def worker_spec(job: dict, job_dir: str) -> JailSpec:
    """What a jailed worker may see and write: its own job folder always; a build its build
    folder and the precompiled-header cache; a candidate worker the folder its outputs go to the
    judge through; a profile worker the GPU locks. Everything else is read-only, and trusted
    state (the baselines cache, the op watch, the session records) cannot be written."""
    from kernelsmith.evaluation import build_plan

    writable = [job_dir, job.get("out_dir", job_dir), *extra_writable()]
    readable = [p for p in (job.get("reference"), job.get("candidate"), job.get("cwd")) if p]
    readable.append(str(build_plan.user_cache_dir()))  # the op watch and the cached builds, read-only
    if job["kind"] == "build":
        kernels = Path(job["kernels_dir"])
        build_dir = build_plan.default_build_dir(kernels, job["device"])
        build_dir.mkdir(parents=True, exist_ok=True)
        writable += [str(build_dir)] + ([_pch_dir()] if os.environ.get("KERNELSMITH_PCH", "1") != "0" else [])
        readable.append(str(kernels))
    else:
        readable += [str(Path(p).parent) for p in (job.get("reference"), job.get("candidate")) if p]
    if job["kind"] == "profile":
        writable.append(lock_dir())
    gpu = job.get("device") == "cuda" and job["kind"] != "build"
    limits = Limits(file_bytes=None if job["kind"] == "candidate" else 8 * GIB, processes=1024,
                    memory_bytes=None if gpu else physical_memory())
    return JailSpec(readable=tuple(readable), writable=tuple(dict.fromkeys(writable)),
                    hidden=user_secret_dirs() + session_dirs(job.get("cwd")), gpu=gpu, cwd=job.get("cwd"),
                    limits=limits)


# What a candidate never needs from its workdir: git's files and the session records, which hold the agent's
# own messages (a channel from the agent to code that can tell verify from profile). Hidden, they also stay out
# of what a reused verify verdict must cover (evaluation/verdicts.py).
SESSION_DIRS = (".git", ".kernelsmith/sessions")


def session_dirs(cwd: str | None) -> tuple[str, ...]:
    return tuple(str(Path(cwd) / d) for d in SESSION_DIRS if cwd and (Path(cwd) / d).is_dir())


def extra_writable() -> list[str]:
    """KERNELSMITH_JAIL_WRITABLE=path:path: more paths jailed workers may write (tests, debugging). Only
    the user sets it: the agent and the candidate cannot change the parent's environment."""
    return [p for p in os.environ.get("KERNELSMITH_JAIL_WRITABLE", "").split(":") if p]


def _pch_dir() -> str:
    root = os.environ.get("KERNELSMITH_PCH_DIR", "").strip() or \
        str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernelsmith" / "pch")
    os.makedirs(root, exist_ok=True)
    return root


def reaped(argv: list[str]) -> list[str]:
    """A trusted worker (it never loads candidate code) with the host's filesystem, in a PID
    namespace of its own, so that nothing it starts (torch.compile's compile workers, a
    compiler) outlives it, even when the session is killed with SIGKILL."""
    if not status().jailed:
        return list(argv)
    return [shutil.which("bwrap"), "--bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc",
            "--unshare-pid", "--die-with-parent", "--"] + list(argv)


PR_SET_PDEATHSIG = 1


def die_with_parent(limits: Limits | None = None):
    """preexec_fn: rlimits, and SIGKILL when the thread that started the process dies (the
    parent waits in that thread until the worker exits, so only a dying parent fires it)."""
    apply = preexec(limits) if limits else (lambda: None)

    def run() -> None:
        apply()
        try:
            import ctypes
            import signal

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    return run
