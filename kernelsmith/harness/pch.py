"""A GCC precompiled header (PCH) of <torch/extension.h>, shared by every build with the same flags.

A C++ translation unit that includes <torch/extension.h> (the extension's entry, a binding written
with pybind11, a CPU kernel) spends about half of its compile parsing it. GCC can load the parsed
header from a .gch file instead, but only one made by the same compiler with the same flags. So the
.gch lives in a folder named by a hash of everything that must match:

    <cache>/pch/<signature>/torch/extension.h      #include_next <torch/extension.h>
    <cache>/pch/<signature>/torch/extension.h.gch  the PCH (about 760 MB for a CPU build)
    <cache>/pch/<signature>/meta.json         written last: the folder is complete
    <cache>/pch/<signature>.lock              flock sidecar; its mtime is the last use
    <cache>/pch/<signature>/<stem>-<hash>.o   objects compiled once with this PCH (ensure_object)
    <cache>/pch/builds.log                    one line per PCH build

The compiles get `-I<cache>/pch/<signature>` (include_flags): GCC looks for `torch/extension.h.gch`
in each include directory before the header, so a file whose first include is <torch/extension.h>
loads the PCH, and a file that does not include it (a light binding, binding_light.h; a kernel of
plain C++) pays nothing for it, as it did under the `-include` this replaced. A .gch GCC rejects
falls back to the header beside it, whose #include_next finds torch's.

<cache> is $KERNELSMITH_PCH_DIR when set, else $XDG_CACHE_HOME/kernelsmith/pch (~/.cache/...).
One process builds a PCH (exclusive lock on the sidecar, a temporary name, an atomic rename);
the others wait and reuse it. A build that compiles with a PCH holds a shared lock on the
sidecar, and only the KEEP most recently used signatures survive a new one (deleted under the
exclusive lock, never while a build holds the shared one). KERNELSMITH_PCH=0 turns it off.

A PCH problem must never fail a build: ensure_pch returns None (and adds a note) when the
compiler fails or runs out of time; build.py retries a build whose compile hit a PCH error
without it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from functools import lru_cache
from pathlib import Path
from typing import Iterator

HEADER_NAME = "torch/extension.h"  # the include it stands in for, under the signature's folder
HEADER_TEXT = ("// kernelsmith's precompiled header (see docs/build-speed.md): used in place of torch's by a\n"
               "// file whose first include is <torch/extension.h>; without the .gch, this finds torch's.\n"
               "#include_next <torch/extension.h>\n")
# A CUDA binding also includes torch's CUDA context and guard, which pull in the cuBLAS, cuSPARSE and
# cuSOLVER headers: parsed in every binding of a cold build unless they are in the PCH as well.
CUDA_HEADER_TEXT = HEADER_TEXT + "#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAGuard.h>\n"


def header_text(device: str) -> str:
    """What the PCH of a build for `device` holds; KERNELSMITH_PCH_CUDA=0 leaves CUDA's headers out
    (bench/cold_build.py compares the two)."""
    off = os.environ.get("KERNELSMITH_PCH_CUDA", "1").strip().lower() in ("0", "false", "no", "off")
    return CUDA_HEADER_TEXT if device == "cuda" and not off else HEADER_TEXT
META_NAME = "meta.json"
LOG_NAME = "builds.log"
KEEP = 2  # signatures kept on disk: each is ~0.8 GB
FORMAT = 2  # bump when the layout or the signature's inputs change
DEFAULT_TIMEOUT_S = 600.0  # for building one (it takes about 70 s on 2 cores) or waiting for another process to
RETRY_AFTER_S = 3600.0  # a PCH that failed to build is not tried again for this long
_SIG_RE = re.compile(r"[0-9a-f]{20}")


def enabled() -> bool:
    return os.environ.get("KERNELSMITH_PCH", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_root() -> Path:
    env = os.environ.get("KERNELSMITH_PCH_DIR", "").strip()
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernelsmith" / "pch"


def timeout_s() -> float:
    try:
        return float(os.environ.get("KERNELSMITH_PCH_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S


@lru_cache(maxsize=None)
def is_gcc(compiler: str) -> bool:
    """GCC (not clang, whose .pch format and flags differ): `-v` names COLLECT_GCC and a gcc version,
    the test torch.utils.cpp_extension.check_compiler_is_gcc makes too."""
    try:
        out = subprocess.run([compiler, "-v"], capture_output=True, text=True, timeout=30,
                             env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired):
        return False
    text = out.stdout + out.stderr
    return "COLLECT_GCC=" in text and "gcc version" in text and "clang" not in text.lower()


@lru_cache(maxsize=None)
def _compiler_identity(compiler: str) -> tuple[str, str]:
    path = shutil.which(compiler) or compiler
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        version = ""
    return os.path.realpath(path), version


@lru_cache(maxsize=None)
def _native_target(compiler: str, flags: tuple[str, ...]) -> str:
    """What -march=native / -mtune=native expand to on this machine: the same flags in a shared
    home on another CPU must not pick this machine's PCH (GCC would reject it, silently slower)."""
    try:
        out = subprocess.run([compiler, *flags, "-E", "-v", "-x", "c++", os.devnull], capture_output=True,
                             text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return ""
    line = next((l for l in out.splitlines() if "cc1plus" in l), "")
    return " ".join(t for t in line.split() if t.startswith(("-m", "--param")))


def signature(compiler: str, cflags: list[str], include_dirs: list[str], extra_identity=(),
              header_text: str = HEADER_TEXT) -> str:
    """A hash of everything that must match for GCC to accept the PCH."""
    native = tuple(f for f in cflags if f.endswith("=native"))
    inputs = [FORMAT, _compiler_identity(compiler), list(cflags), list(include_dirs), list(extra_identity),
              header_text, _native_target(compiler, native) if native else ""]
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:20]


def folder_of(header: Path) -> Path:
    """The signature's folder of a PCH header (ensure_pch's answer)."""
    return header.parents[len(Path(HEADER_NAME).parts) - 1]


def include_flags(header: Path) -> list[str]:
    """The flags with which a C++ compile finds the PCH in place of <torch/extension.h> (argv words: quote them
    for a ninja file)."""
    return [f"-I{folder_of(header)}", "-Winvalid-pch"]


def header_path(compiler: str, cflags: list[str], include_dirs: list[str], extra_identity=(),
                header_text: str = HEADER_TEXT, root: str | Path | None = None) -> Path:
    """Where ensure_pch keeps (or would keep) this PCH's header; the .gch sits beside it."""
    root = Path(root) if root else cache_root()
    return root / signature(compiler, cflags, include_dirs, extra_identity, header_text) / HEADER_NAME


def ensure_pch(compiler: str, cflags: list[str], include_dirs: list[str], *, extra_identity=(),
               header_text: str = HEADER_TEXT, root: str | Path | None = None, timeout: float | None = None,
               notes: list[str] | None = None) -> Path | None:
    """The PCH's header (its .gch beside it; the compiles take include_flags), built first when missing;
    None when it cannot be had in time (a note says why, once).

    `cflags` are the flags of the C++ compiles minus the include directories, which come apart in
    `include_dirs` (passed as -isystem, in order) and minus -DTORCH_EXTENSION_NAME, which torch's
    headers never read. `extra_identity` joins the signature (e.g. the torch version).
    """
    notes = notes if notes is not None else []
    header = header_path(compiler, cflags, include_dirs, extra_identity, header_text, root)
    folder = folder_of(header)
    lock = _lock_path(folder)
    if _complete(folder):  # the common case: no lock, one stat
        _touch(lock)
        return header
    folder.parent.mkdir(parents=True, exist_ok=True)
    limit = timeout_s() if timeout is None else timeout
    try:
        fd = _acquire(lock, fcntl.LOCK_EX, time.monotonic() + limit)
    except TimeoutError:
        notes.append(f"precompiled header: waited {limit:.0f} s for another process building {folder}; "
                     "built without it")
        return None
    try:
        if _complete(folder):  # another process built it while we waited
            _touch(lock)
            return header
        failed = _read_json(folder / "failed.json")
        if failed and time.time() - failed.get("at", 0) < RETRY_AFTER_S:
            return None  # said once, when it failed
        made = _compile(compiler, cflags, include_dirs, header_text, folder, limit, notes)
        _touch(lock)
        if made:
            prune(folder.parent, keep=KEEP)
        return header if made else None
    finally:
        os.close(fd)


@contextlib.contextmanager
def in_use(header: Path | None, wait: float = 30.0) -> Iterator[bool]:
    """Hold a shared lock on the PCH for a build that compiles with it, so prune() leaves it alone;
    yields whether it is still there (False: build without it)."""
    if header is None:
        yield False
        return
    try:
        fd = _acquire(_lock_path(folder_of(header)), fcntl.LOCK_SH, time.monotonic() + wait)
    except (TimeoutError, OSError):
        yield False
        return
    try:
        yield _complete(folder_of(header))
    finally:
        os.close(fd)


def discard(header: Path) -> None:
    """Forget a PCH that the compiler could not read (a damaged .gch of the recorded size): the next
    ensure_pch builds it again. Removing meta.json is atomic and safe under running compiles."""
    with contextlib.suppress(OSError):
        (folder_of(header) / META_NAME).unlink()


def prune(root: Path, keep: int = KEEP) -> list[str]:
    """Delete all but the `keep` most recently used signatures; one that a build is using (shared
    lock) or building (exclusive lock) stays. Returns the deleted signatures."""
    folders = [p for p in root.iterdir() if p.is_dir() and _SIG_RE.fullmatch(p.name)] if root.is_dir() else []
    folders.sort(key=lambda p: _last_use(p), reverse=True)
    deleted = []
    for folder in folders[keep:]:
        lock = _lock_path(folder)
        try:
            fd = _acquire(lock, fcntl.LOCK_EX, time.monotonic())  # no waiting: in use means keep
        except (TimeoutError, OSError):
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                lock.unlink()
            deleted.append(folder.name)
        finally:
            os.close(fd)
    return deleted


def ensure_object(header: Path, compiler: str, cflags: list[str], include_dirs: list[str], source: Path,
                  inputs: list[Path], quote_dirs: list[str], notes: list[str], timeout: float | None = None) -> Path | None:
    """`source` compiled once with this PCH into its folder, named by a hash of `inputs` (the source and
    the headers it includes), for every build with these flags to link; None when it cannot be had (a
    note says why). Call it while holding in_use(header): prune() then leaves the folder alone."""
    obj = object_path(header, source, inputs)
    failed = obj.with_name(obj.name + ".failed")
    if obj.is_file():
        return obj
    if failed.is_file() and time.time() - failed.stat().st_mtime < RETRY_AFTER_S:
        return None
    limit = timeout_s() if timeout is None else timeout
    try:
        fd = _acquire(folder_of(header) / "objects.lock", fcntl.LOCK_EX, time.monotonic() + limit)
    except (TimeoutError, OSError):
        return None
    try:
        return obj if obj.is_file() else _compile_object(compiler, cflags, include_dirs, header, source,
                                                        quote_dirs, obj, limit, notes)
    finally:
        os.close(fd)


def object_path(header: Path, source: Path, inputs: list[Path]) -> Path:
    """Where ensure_object keeps `source`'s object: beside the PCH, named by a hash of `inputs`."""
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in inputs)).hexdigest()[:16]
    return folder_of(header) / f"{source.stem}-{digest}.o"


def _compile_object(compiler, cflags, include_dirs, header, source, quote_dirs, obj: Path, limit, notes) -> Path | None:
    tmp = obj.with_name(f"{obj.name}.tmp-{os.getpid()}")
    cmd = [compiler, *[a for d in include_dirs for a in ("-isystem", d)], *[f"-I{d}" for d in quote_dirs], *cflags,
           *include_flags(header), "-c", str(source), "-o", str(tmp)]
    start = time.monotonic()
    reason = _run(cmd, limit)
    if not reason:
        os.replace(tmp, obj)
    tmp.unlink(missing_ok=True)
    folder = folder_of(header)
    _log(folder.parent, f"{folder.name} {obj.name} pid={os.getpid()} {time.monotonic() - start:.1f}s "
                               + ("ok" if not reason else "failed: " + reason))
    if reason:
        with contextlib.suppress(OSError):
            obj.with_name(obj.name + ".failed").write_text(reason)
        notes.append(f"{source.name} was not precompiled ({reason}); each build compiles its own")
        return None
    return obj


def discard_object(obj: Path) -> None:
    """Forget an object that a link could not use: the next build compiles it again."""
    with contextlib.suppress(OSError):
        obj.unlink()


def _run(cmd: list[str], limit: float) -> str:
    """Run a compile in its own process group (a timeout kills cc1plus too); '' or why it failed."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    except OSError as err:
        return f"{type(err).__name__}: {err}"
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return f"timed out after {limit:.0f} s"
    if proc.returncode != 0:
        tail = [l for l in out.strip().splitlines() if l.strip()][-3:]
        return f"the compiler failed ({proc.returncode}): " + " | ".join(tail)
    return ""


# --- internals -----------------------------------------------------------------------------------


def _lock_path(folder: Path) -> Path:
    return folder.parent / f"{folder.name}.lock"


def _complete(folder: Path) -> bool:
    meta = _read_json(folder / META_NAME)
    try:
        return bool(meta) and (folder / (HEADER_NAME + ".gch")).stat().st_size == meta.get("gch_size") \
            and (folder / HEADER_NAME).is_file()
    except OSError:
        return False


def _last_use(folder: Path) -> float:
    for path in (_lock_path(folder), folder):
        with contextlib.suppress(OSError):
            return path.stat().st_mtime
    return 0.0


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write_json(path: Path, value: dict) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(value, indent=1))
    os.replace(tmp, path)


def _acquire(path: Path, mode: int, deadline: float) -> int:
    """An fd holding flock `mode` on path (created when missing), polled until deadline. A lock taken
    on a file that prune() unlinked meanwhile is dropped and taken again on the new file."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(str(path)) from None
                    time.sleep(0.2)
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _compile(compiler, cflags, include_dirs, header_text, folder: Path, limit: float, notes: list[str]) -> bool:
    """Build the PCH into a temporary name and rename it into place (the caller holds the lock)."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in [*folder.rglob("*.tmp-*"), *folder.glob("*.o.failed")]:  # a process killed mid-build; objects
        stale.unlink(missing_ok=True)                                     # that failed with the old PCH
    (folder / META_NAME).unlink(missing_ok=True)
    header = folder / HEADER_NAME
    header.parent.mkdir(parents=True, exist_ok=True)
    if not header.is_file() or header.read_text() != header_text:  # never rewritten under a running compile
        tmp_header = header.with_name(f"{header.name}.tmp-{os.getpid()}")
        tmp_header.write_text(header_text)
        os.replace(tmp_header, header)
    gch = folder / (HEADER_NAME + ".gch")
    tmp = gch.with_name(f"{gch.name}.tmp-{os.getpid()}")
    includes = [arg for d in include_dirs for arg in ("-isystem", d)]
    cmd = [compiler, *includes, *cflags, "-x", "c++-header", str(header), "-o", str(tmp)]
    start = time.monotonic()
    reason = _run(cmd, limit)
    seconds = time.monotonic() - start
    if not reason:
        try:
            os.replace(tmp, gch)
            _write_json(folder / META_NAME, {"format": FORMAT, "gch_size": gch.stat().st_size,
                                             "seconds": round(seconds, 1), "created": time.time(), "command": cmd})
            (folder / "failed.json").unlink(missing_ok=True)
        except OSError as err:
            reason = f"{type(err).__name__}: {err}"
    tmp.unlink(missing_ok=True)
    outcome = "ok" if not reason else "failed: " + reason
    _log(folder.parent, f"{folder.name} pid={os.getpid()} {seconds:.1f}s {outcome}")
    if reason:
        with contextlib.suppress(OSError):
            _write_json(folder / "failed.json", {"at": time.time(), "reason": reason, "command": cmd})
        notes.append(f"precompiled header not built ({reason}); built without it, "
                     f"not retried for {RETRY_AFTER_S / 3600:.0f} h (delete {folder} to retry now)")
        return False
    return True


def _log(root: Path, line: str) -> None:
    with contextlib.suppress(OSError):
        with open(root / LOG_NAME, "a") as log:
            log.write(time.strftime("%Y-%m-%dT%H:%M:%S ") + line + "\n")
