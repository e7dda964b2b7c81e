"""What a profile worker maps from outside its process, read by the parent from /proc (torch-free).

The worker's own load check (harness/guards.py LoadGuard) reads /proc/self/maps inside the candidate's
process, where the candidate can blind it, and linkage.py reads only the extension kernelsmith built. This
census is taken by the parent, before the job and between timed runs (never inside one): every executable
file mapping of the worker's processes is listed; a file outside the trusted installation (the workdir, a
build folder, /tmp, /dev/shm, a cache) is read from outside the worker (/proc/PID/map_files, else
/proc/PID/root at the mapped inode) and its imports judged by linkage.py's rules. An executable memfd or
deleted file is a violation by itself, as are a library of torch's compilers or of another compute library
that the worker mapped after its own imports, and a worker that left its jail's mount namespace (where an
installation path could then hold any file).
"""

from __future__ import annotations

import functools
import glob
import hashlib
import importlib.util
import os
import secrets
import site
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from kernelsmith.evaluation import linkage

# Native libraries that compute outside the candidate's own kernels: torch's compiled-code runtimes and other
# compute libraries (cuBLAS and cuDNN stay allowed). The in-process LoadGuard (harness/guards.py) uses the same.
FOREIGN_LIBRARIES = ("libtorchinductor", "aoti", "torchinductor", "libopenblas", "libmkl_rt", "libcupy",
                     "libtriton", "libxla", "libjax", "libonnxruntime", "libnvinfer", "libtvm", "libscipy")
# Read-only in every jail and written by no agent: the system's folders (the Python installation and torch's
# package are added where they are, installation_roots).
SYSTEM_ROOTS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/opt", "/nix/store", "/snap")
# Writable by a candidate or its jail wherever they lie, even inside an installation root (candidate_roots).
SCRATCH_TREES = ("/tmp", "/var/tmp", "/dev/shm", "/run/user")
MAX_READ_BYTES = 512 << 20  # no honest kernel library is this large; reading it would stall the clock
MAX_FILES = 64  # distinct candidate-reachable files judged per worker (each one read and hashed)
EVERY = 8  # any timed run is followed by a census of the maps with probability 1/EVERY (LoadCensus)


@dataclass(frozen=True)
class Mapping:
    """One executable file mapping of a /proc/PID/maps."""

    span: str  # "start-end" in hex: the name of its /proc/PID/map_files entry
    device: str  # "major:minor" in hex
    inode: int
    path: str  # as the worker's mount namespace names it; " (deleted)" appended to a removed file

    @property
    def unlinked(self) -> bool:
        """A memfd or a deleted file: code no file on disk holds (an anonymous shared mapping reads
        "/dev/zero (deleted)")."""
        return self.path.startswith("/memfd:") or self.path.endswith(" (deleted)")


def executable_mappings(raw: bytes) -> list[Mapping]:
    """The file-backed executable mappings in the text of a /proc/PID/maps ([vdso] and the like left out)."""
    found = []
    for line in raw.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and b"x" in fields[1] and fields[5].startswith(b"/"):
            found.append(Mapping(fields[0].decode(), fields[3].decode(), int(fields[4]),
                                 fields[5].decode(errors="replace")))
    return found


def read_proc(pid: int, name: str) -> bytes | None:
    """/proc/PID/NAME in raw reads (no buffering layer: the census runs between timed runs), or None."""
    try:
        fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY)
    except OSError:
        return None
    try:
        return b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
    except OSError:
        return None
    finally:
        os.close(fd)


def executable_size(pid: int) -> bytes | None:
    """The VmExe and VmLib lines of /proc/PID/status: the size of the process's executable mappings, which
    mapping a library grows (and an anonymous JIT region too), read in O(1) by the kernel."""
    status = read_proc(pid, "status") or b""
    return b"".join(line for line in status.splitlines() if line.startswith((b"VmExe:", b"VmLib:"))) or None


def mount_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


# --- which files a candidate could have written -------------------------------------------------------------

def _spellings(paths) -> tuple[str, ...]:
    """Each path as given (absolute) and resolved, "/" and empty ones dropped."""
    found = []
    for path in paths:
        if path:
            found += [os.path.abspath(str(path)), os.path.realpath(str(path))]
    return tuple(dict.fromkeys(p for p in found if p != "/"))


def _package_folder(name: str) -> str | None:
    """Where a package is installed, found without importing it (the parent imports no torch)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return next(iter(spec.submodule_search_locations or ()), None) if spec else None


@functools.lru_cache(maxsize=1)
def installation_roots() -> tuple[str, ...]:
    """Folders no jail lets a candidate write: this Python's installation (sysconfig's paths, the prefixes, the
    user's site-packages), torch's package, CUDA's toolkit and the system's folders."""
    pythons = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sysconfig.get_paths().values(),
               site.getusersitepackages()]
    cuda = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *glob.glob("/usr/local/cuda*")]
    return _spellings([*pythons, _package_folder("torch"), *cuda, *SYSTEM_ROOTS])


def candidate_roots(extra=()) -> tuple[str, ...]:
    """Folders a candidate, its build or the agent can write, wherever they lie: the scratch trees, the user's
    caches (kernelsmith's builds and op watch, torch's extensions), the folders jails may write, and `extra`
    (the workdir)."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    env = [os.environ.get(k) for k in ("TORCH_EXTENSIONS_DIR", "KERNELSMITH_BUILD_DIR", "KERNELSMITH_PCH_DIR",
                                       "KERNELSMITH_LOCK_DIR", "KERNELSMITH_TMPDIR")]
    writable = os.environ.get("KERNELSMITH_JAIL_WRITABLE", "").split(":")
    return _spellings([*SCRATCH_TREES, tempfile.gettempdir(), cache, *env, *writable, *extra])


def _depth_inside(path: str, roots) -> int:
    """The length of the deepest root that holds path, -1 where none does."""
    return max((len(r) for r in roots if path == r or path.startswith(r.rstrip("/") + "/")), default=-1)


def installed(path: str, reachable: tuple[str, ...]) -> bool:
    """Whether path lies in the trusted installation: the deepest root holding it is an installation root, not
    a folder a candidate can write (a workdir under /opt is the candidate's; a virtual environment inside the
    user's home folder is not). A path under no root at all is the candidate's."""
    return _depth_inside(path, installation_roots()) > _depth_inside(path, reachable)


def foreign(path: str) -> bool:
    """A library of torch's compilers or of another compute library, by name."""
    name = path.rsplit("/", 1)[-1].lower()
    return any(f in name for f in FOREIGN_LIBRARIES)


# --- reading a mapped file from outside the worker ----------------------------------------------------------

def read_mapped(pid: int, mapping: Mapping) -> bytes | None:
    """The bytes of the file behind a mapping, opened from this process: /proc/PID/map_files (the mapped file
    itself; opening it takes CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), else the path inside the worker's root,
    accepted only while it is still the mapped file (same device and inode). None where neither holds."""
    for opened in (_open(f"/proc/{pid}/map_files/{mapping.span}", follow=True),  # a magic link: followed
                   _open(f"/proc/{pid}/root{mapping.path}", follow=False)):  # swapped for a link: refused
        if opened is None:
            continue
        try:
            if _is_mapped_file(os.fstat(opened), mapping):
                return _read_capped(opened)
        except OSError:
            pass
        finally:
            os.close(opened)
    return None


def _open(path: str, follow: bool) -> int | None:
    """A read-only descriptor, or None. Non-blocking: a FIFO swapped in at the path does not hang the clock."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW))
    except OSError:
        return None


def _is_mapped_file(info: os.stat_result, mapping: Mapping) -> bool:
    """The opened file is the mapped one (a path swapped for another file or a link since is not)."""
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}"
    return stat.S_ISREG(info.st_mode) and info.st_ino == mapping.inode and device == mapping.device


def _read_capped(fd: int) -> bytes | None:
    if os.fstat(fd).st_size > MAX_READ_BYTES:
        return None
    chunks = []
    while chunk := os.read(fd, 16 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


# --- the census ---------------------------------------------------------------------------------------------

class LoadCensus:
    """The worker's executable mappings, read by the parent: once before the job (what the worker mapped for its
    own imports), then after every timed run whose end finds the processes' executable size changed
    (/proc/PID/status, 13 us a read where the maps take 390: an added library grows it), after the
    candidate's first timed run, and after one in EVERY at random (a library swapped for another of the same
    size). Never inside a bracket. A process's maps is parsed only when its bytes changed since its last
    read, and each mapped file is judged once."""

    def __init__(self, reachable=(), every: int = EVERY):
        self.reachable = candidate_roots(reachable)
        self.every = every
        self.looks = 0  # censuses of the maps taken after timed runs
        self.before: set[str] | None = None  # paths mapped before the job came (None: never read)
        self.namespaces: dict[int, str] = {}  # pid -> its mount namespace when the job came
        self.findings: list[str] = []
        self._candidate_looked = False
        self._sizes: dict[int, bytes | None] = {}  # pid -> its executable size at its latest census
        self._seen: dict[int, bytes] = {}  # pid -> sha256 of its maps when last parsed
        self._judged: set[tuple[str, int, str]] = set()  # (device, inode, path)
        self._read = 0  # candidate-reachable files read so far
        self._lock = threading.Lock()  # a census in the clock's thread, the verdict in the evaluation's

    def baseline(self, pids: list[int]) -> None:
        """Before the job is sent: the worker has imported torch and the harness, and no candidate code. Its
        files are judged now, so that the census after a timed run judges only what is new."""
        self.before = {m.path for pid in pids for m in executable_mappings(read_proc(pid, "maps") or b"")}
        self.namespaces = {pid: ns for pid in pids if (ns := mount_namespace(pid))}
        with self._lock:
            for pid in pids:
                self._look_at(pid)

    def after_run(self, pids: list[int], candidate: bool) -> None:
        """Between brackets, after either contender's run alike: the parent's clock charges the time between
        runs (ParentClock.cycles), and this census is part of it."""
        first = candidate and not self._candidate_looked
        self._candidate_looked |= candidate
        if first or self._code_changed(pids) or secrets.randbelow(self.every) == 0:
            self.look(pids)

    def _code_changed(self, pids: list[int]) -> bool:
        return any(executable_size(pid) != self._sizes.get(pid) for pid in pids)

    def look(self, pids: list[int]) -> None:
        with self._lock:
            self.looks += 1
            for pid in pids:
                self._look_at(pid)

    def _look_at(self, pid: int) -> None:
        self._sizes[pid] = executable_size(pid)  # before the maps: a library mapped meanwhile shows next time
        raw = read_proc(pid, "maps")
        if raw is None:  # gone between the process census and this read
            return
        digest = hashlib.sha256(raw).digest()
        if self._seen.get(pid) == digest:
            return
        self._seen[pid] = digest
        self._check_namespace(pid)
        for mapping in executable_mappings(raw):
            if (mapping.device, mapping.inode, mapping.path) not in self._judged:
                self._judged.add((mapping.device, mapping.inode, mapping.path))
                self._judge(pid, mapping)

    def _check_namespace(self, pid: int) -> None:
        """A worker that entered a mount namespace of its own could show any file at an installation path."""
        if pid in self.namespaces and mount_namespace(pid) not in (None, self.namespaces[pid]):
            self._flag(f"process {pid} of the worker left its jail's mount namespace (files at installation "
                       "paths are then not the installation's)")

    def _judge(self, pid: int, mapping: Mapping) -> None:
        if mapping.unlinked:
            self._flag(f"{mapping.path}: executable code from a memfd or a deleted file (an honest extension "
                       "is built to a file, and is judged there)")
        elif installed(mapping.path, self.reachable):
            self._judge_installed(mapping)
        else:
            self._judge_reachable(pid, mapping)

    def _judge_installed(self, mapping: Mapping) -> None:
        """An installation's file is the installation's code; only a compute library new since the worker's
        own imports (torch itself maps numpy's OpenBLAS) breaks a rule."""
        if self.before is not None and mapping.path not in self.before and foreign(mapping.path):
            self._flag(f"{mapping.path}: a native compute library outside the candidate's kernels")

    def _judge_reachable(self, pid: int, mapping: Mapping) -> None:
        self._read += 1
        if self._read > MAX_FILES:
            return self._flag(f"more than {MAX_FILES} executable files a candidate could write were mapped")
        data = read_mapped(pid, mapping)
        if data is None:
            return self._flag(f"{mapping.path}: executable, in a folder the candidate can write, and could not "
                              "be read from outside the worker (replaced, removed or too large)")
        if foreign(mapping.path):
            self._flag(f"{mapping.path}: a native compute library outside the candidate's kernels")
        self._judge_imports(mapping, data)

    def _judge_imports(self, mapping: Mapping, data: bytes) -> None:
        try:
            found = linkage.forbidden_imports(data)
        except (OSError, subprocess.SubprocessError) as err:  # nm ran past its minute, say: the clock goes on
            return self._flag(f"{mapping.path}: executable, in a folder the candidate can write, and its imports "
                              f"could not be read ({type(err).__name__})")
        if found:
            self._flag(f"{mapping.path} calls ATen below the dispatcher or torch's compiled-code runtime "
                       f"(no op watch hears these): {', '.join(found[:6])}")

    def _flag(self, finding: str) -> None:
        if finding not in self.findings:
            self.findings.append(finding)

    def violation(self) -> str | None:
        """The profile's violation, or None: what the candidate's process mapped that is not its own kernels."""
        with self._lock:
            if not self.findings:
                return None
            return ("the profile worker mapped code from outside the candidate's checked kernels (read by the "
                    "parent): " + "; ".join(self.findings[:4]))
