"""Build a kernels/ folder into a torch extension with torch.utils.cpp_extension and ninja.

Runs inside a worker process (it imports torch). The binding infrastructure
(binding.cpp, binding_registry.h) always comes from the installed package, so an
edited copy in a workdir changes nothing. Rebuilds are incremental: ninja
recompiles only changed objects, and a build whose inputs hash the same as the
last successful one is a cache hit that skips ninja altogether.

With GCC, the C++ compiles include a precompiled <torch/extension.h> (pch.py; about half of
each compile): `-include <cache>/pch/<signature>/ks_torch.h -Winvalid-pch` joins their flags,
never nvcc's. KERNELSMITH_PCH=0 turns it off; a PCH that cannot be made or read only costs
the speed-up, never the build.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
INFRA_FILES = ("binding.cpp", "binding_registry.h")
MAX_ERRORS = 5
CONTEXT_LINES = 2


class BuildError(Exception):
    """A build that failed; `summary` is the short, readable form of the log."""

    def __init__(self, summary: str, log: str):
        super().__init__(summary)
        self.summary = summary
        self.log = log


@dataclass
class BuildResult:
    ok: bool
    cached: bool
    seconds: float
    so_path: str = ""
    name: str = ""
    arch: str = ""
    flags: list[str] = field(default_factory=list)
    summary: str = ""
    log: str = ""
    notes: list[str] = field(default_factory=list)  # e.g. why the precompiled header was not used


def kernel_sources(kernels_dir: Path, device: str) -> list[Path]:
    """The translation units to build: .cpp always, .cu only for CUDA."""
    suffixes = {".cpp", ".cc", ".cu"} if device == "cuda" else {".cpp", ".cc"}
    if device == "cpu" and any(p.suffix == ".cu" for p in kernels_dir.iterdir()):
        raise BuildError(f"{kernels_dir} holds CUDA sources (.cu): build it with --device cuda "
                         "(the CPU target takes .cpp kernels only)", "")
    files = sorted(p for p in kernels_dir.iterdir() if p.is_file() and p.suffix in suffixes)
    if not files:
        raise BuildError(f"no kernel sources in {kernels_dir} (expected {', '.join(sorted(suffixes))})", "")
    return files


def cuda_arch_list(allow_torch: bool = True) -> str | None:
    """Target architectures: TORCH_CUDA_ARCH_LIST if set, else the visible GPU (9.0 on an H200).

    nvidia-smi answers without initialising CUDA, so the parent can compute the
    build key too; torch is the fallback inside workers.
    """
    env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if env:
        return env
    arch = _arch_from_nvidia_smi()
    if arch or not allow_torch:
        return arch
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}.{minor}"
    return "9.0"


def _arch_from_nvidia_smi() -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    cmd = [smi, "--query-gpu=compute_cap", "--format=csv,noheader"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.isdigit():
        cmd += ["-i", visible]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[0] if out and re.fullmatch(r"\d+\.\d+", out[0]) else None


def libraries_used(sources: list[Path]) -> dict[str, bool]:
    """Which NVIDIA libraries the kernels call, as compile_flags' keyword arguments (one read
    of the sources: this runs on every cached-build check)."""
    text = "\n".join(p.read_text(errors="replace") for p in sources)
    return {"cublas": "cublas" in text, "cudnn": "cudnn.h" in text}


def cudnn_flags() -> tuple[list[str], list[str]]:
    """(include flags, link flags) for cuDNN: the copy torch itself loads (the nvidia-cudnn
    wheel) when there is one, so headers and library agree; else the system's."""
    spec = importlib.util.find_spec("nvidia.cudnn") if importlib.util.find_spec("nvidia") else None
    root = Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
    if root is None or not (root / "include" / "cudnn.h").is_file():
        return [], ["-lcudnn"]
    lib = root / "lib"
    library = "-lcudnn" if (lib / "libcudnn.so").exists() else "-l:libcudnn.so.9"
    return [f"-I{root / 'include'}"], [f"-L{lib}", library, f"-Wl,-rpath,{lib}"]


def compile_flags(device: str, fast_math: bool, cublas: bool = False, cudnn: bool = False) -> dict[str, list[str]]:
    # No -std for the C++ files: they include torch's headers, and cpp_extension picks the standard
    # torch itself was built with (C++20 from torch 2.11). Forcing C++17 compiles those headers
    # in another dialect than libtorch's, which GCC accepts with warnings; the .cu files include
    # CUDA headers only, so their -std stays ours.
    cflags = ["-O3"]
    ldflags: list[str] = []
    cuda_flags: list[str] = []
    if device == "cpu":
        cflags += ["-fopenmp", "-march=native"]
        ldflags += ["-fopenmp"]
    else:
        cuda_flags = ["-O3", "-std=c++17", "-lineinfo", "--expt-relaxed-constexpr"]
        if fast_math:
            cuda_flags.append("--use_fast_math")
        if cublas:  # linked only when a kernel uses it: not every toolkit layout has it on the path
            ldflags += ["-lcublas", "-lcublasLt"]
        if cudnn:
            include, link = cudnn_flags()
            cuda_flags += include
            ldflags += link
    if fast_math and device == "cpu":
        cflags.append("-ffast-math")
    return {"cflags": cflags, "cuda_flags": cuda_flags, "ldflags": ldflags}


def _torch_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        import torch

        return torch.__version__


def fingerprint(sources: list[Path], flags: dict, arch: str, name: str) -> str:
    digest = hashlib.sha256()
    for path in sources + [TEMPLATES / f for f in INFRA_FILES]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    # $CXX as the build will use it (toolchain.choose_compiler may have replaced an unfit one)
    digest.update(json.dumps([flags, arch, name, _torch_version(), sys.version, os.environ.get("CXX", "")]).encode())
    return digest.hexdigest()


def extension_name(kernels_dir: Path, device: str) -> str:
    tag = hashlib.sha1(str(kernels_dir.resolve()).encode()).hexdigest()[:10]
    return f"ks_{tag}_{device}"


def user_cache_dir() -> Path:
    """$XDG_CACHE_HOME/kernelsmith, else ~/.cache/kernelsmith."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernelsmith"


@contextlib.contextmanager
def cache_lock(path: Path):
    """An exclusive flock on PATH.lock, across threads and processes (sessions share one cache)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def default_build_dir(kernels_dir: Path, device: str) -> Path:
    """Inside the workdir's .kernelsmith/ when there is one, else the user cache."""
    env = os.environ.get("KERNELSMITH_BUILD_DIR")
    if env:
        return Path(env) / extension_name(kernels_dir, device)
    workdir_state = kernels_dir.resolve().parent / ".kernelsmith"
    if workdir_state.is_dir():
        return workdir_state / "build" / device
    return user_cache_dir() / "build" / extension_name(kernels_dir, device)


def build(kernels_dir: str | Path, device: str, fast_math: bool = False,
          build_dir: str | Path | None = None) -> BuildResult:
    """Build (or reuse) the extension for kernels_dir; never raises for compile errors."""
    kernels_dir = Path(kernels_dir).resolve()
    start = time.perf_counter()
    notes: list[str] = []
    try:
        return _build(kernels_dir, device, fast_math, build_dir, start, notes)
    except BuildError as err:
        return BuildResult(ok=False, cached=False, seconds=time.perf_counter() - start,
                           summary=err.summary, log=err.log, notes=notes)


def _plan(kernels_dir: Path, device: str, fast_math: bool, build_dir, allow_torch: bool = True):
    sources = kernel_sources(kernels_dir, device)
    flags = compile_flags(device, fast_math, **libraries_used(sources))
    arch = cuda_arch_list(allow_torch) if device == "cuda" else ""
    name = extension_name(kernels_dir, device)
    out_dir = Path(build_dir) if build_dir else default_build_dir(kernels_dir, device)
    return sources, flags, arch, name, out_dir


def cached_result(kernels_dir: str | Path, device: str, fast_math: bool = False,
                  build_dir: str | Path | None = None) -> BuildResult | None:
    """The previous build when nothing changed, checked without importing torch (the CLI's fast path)."""
    start = time.perf_counter()
    try:
        sources, flags, arch, name, out_dir = _plan(Path(kernels_dir).resolve(), device, fast_math, build_dir,
                                                    allow_torch=False)
    except BuildError:
        return None
    if arch is None:
        return None
    stamp = read_json(out_dir / "kernelsmith-stamp.json")
    if stamp.get("key") != fingerprint(sources, flags, arch, name) or not Path(stamp.get("so_path", "")).is_file():
        return None
    # the stamp's key leaves the precompiled header out (it does not change the .so), its flags keep it
    return BuildResult(ok=True, cached=True, seconds=time.perf_counter() - start, so_path=stamp["so_path"],
                       name=name, arch=arch, flags=_flat(flags) + list(stamp.get("pch_flags", [])))


def _build(kernels_dir: Path, device: str, fast_math: bool, build_dir, start: float,
           notes: list[str]) -> BuildResult:
    from kernelsmith.harness import toolchain

    toolchain.choose_compiler(notes)  # first: the stamp key holds the compiler, and so does the PCH's
    hit = cached_result(kernels_dir, device, fast_math, build_dir)
    if hit is not None:
        hit.seconds = time.perf_counter() - start
        return hit
    sources, flags, arch, name, out_dir = _plan(kernels_dir, device, fast_math, build_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp_path = out_dir / "kernelsmith-stamp.json"
    key = fingerprint(sources, flags, arch, name)
    so_path, pch_flags = _run_cpp_extension(name, sources, flags, arch, device, out_dir, notes)
    stamp_path.write_text(json.dumps({"key": key, "so_path": so_path, "pch_flags": pch_flags}))
    return BuildResult(ok=True, cached=False, seconds=time.perf_counter() - start,
                       so_path=so_path, name=name, arch=arch, flags=_flat(flags) + pch_flags, notes=notes)


def _flat(flags: dict) -> list[str]:
    return [f for group in flags.values() for f in group]


def read_json(path: Path) -> dict:
    """A JSON file's object, or {} when it is missing or unreadable (stamps, caches)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def _run_cpp_extension(name, sources, flags, arch, device, out_dir: Path, notes: list[str]) -> tuple[str, list[str]]:
    """Write the ninja file and build; return the path of the shared object and the flags that
    brought in the precompiled header ([] without one)."""
    from kernelsmith.harness import pch

    if device == "cuda":
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    header = precompiled_header(flags["cflags"], device, notes)
    with pch.in_use(header) as usable:
        pch_flags = ["-include", shlex.quote(str(header)), "-Winvalid-pch"] if usable else []
        versions = _versioner_entry(name)
        try:
            return _load(name, sources, flags, device, out_dir, pch_flags), pch_flags
        except BuildError as err:
            fatal = _PCH_ERROR_RE.search(err.log) if pch_flags else None
            if fatal is None:
                raise
            notes.append(f"the precompiled header could not be used ({fatal.group(0).strip()[:200]}); "
                         "built again without it")
            _versioner_entry(name, restore=versions)  # as if the failed attempt never ran: same name, same objects
            so_path = _load(name, sources, flags, device, out_dir, [])  # a genuine error raises here, PCH kept
            pch.discard(header)  # it was the PCH: the next build makes it again
            return so_path, []


# a compile that the precompiled header itself broke (a damaged .gch, a pruned folder): retried without it
_PCH_ERROR_RE = re.compile(r"^.*error:.*(?:\bPCH\b|\.gch\b|ks_torch\.h).*$|^.*internal compiler error.*$", re.MULTILINE)


def _load(name, sources, flags, device, out_dir: Path, pch_flags: list[str]) -> str:
    from torch.utils import cpp_extension

    infra = [TEMPLATES / "binding.cpp"]
    try:
        module = cpp_extension.load(
            name=name,
            sources=[str(p) for p in infra + sources],
            extra_cflags=list(flags["cflags"]) + pch_flags,  # copies: cpp_extension appends to these lists
            extra_cuda_cflags=list(flags["cuda_flags"]),
            extra_ldflags=list(flags["ldflags"]),
            extra_include_paths=[str(TEMPLATES), str(sources[0].parent)],
            build_directory=str(out_dir),
            with_cuda=(device == "cuda"),
            is_python_module=True,
            verbose=False,
        )
    except (RuntimeError, subprocess.CalledProcessError, OSError) as err:
        log = str(err)
        raise BuildError(summarize_errors(log), log) from None
    # torch renames a second build in one process (name_v1); the module knows its real file
    return str(Path(module.__file__).resolve())


_NO_ENTRY = object()


def _versioner_entry(name: str, restore=None):
    """torch's in-process record of the last build of `name` (it renames a build whose flags changed,
    name_v1); with restore=, put a saved record back."""
    try:
        from torch.utils.cpp_extension import JIT_EXTENSION_VERSIONER as versioner

        entries = versioner.entries
    except (ImportError, AttributeError):
        return _NO_ENTRY
    if restore is None:
        return entries.get(name, _NO_ENTRY)
    if restore is _NO_ENTRY:
        entries.pop(name, None)
    else:
        entries[name] = restore
    return restore


# --- the precompiled header ----------------------------------------------------------------------


def precompiled_header(cflags: list[str], device: str, notes: list[str]) -> Path | None:
    """The `-include` header (with its .gch beside it) for this build's C++ compiles, made on first
    use; None when it is off (KERNELSMITH_PCH=0), the compiler is not GCC, or it cannot be had."""
    from kernelsmith.harness import pch

    if not pch.enabled():
        return None
    try:
        request = pch_request(cflags, device)
        if request is None:
            return None
        compiler, flags, includes, identity = request
        return pch.ensure_pch(compiler, flags, includes, extra_identity=identity, notes=notes)
    except Exception as err:  # noqa: BLE001  (a PCH problem must never fail a build)
        notes.append(f"precompiled header skipped ({type(err).__name__}: {err})")
        return None


def pch_request(cflags: list[str], device: str):
    """(compiler, flags, include dirs, identity) of the PCH the C++ compiles of a build can use, or
    None when they cannot use one (not Linux, a ROCm torch, a compiler other than GCC)."""
    from torch.utils import cpp_extension

    if not sys.platform.startswith("linux") or getattr(cpp_extension, "IS_HIP_EXTENSION", False):
        return None
    compiler = cpp_extension.get_cxx_compiler()
    from kernelsmith.harness import pch

    if not pch.is_gcc(compiler):
        return None
    flags, includes = cpp_compile_flags(cflags, device == "cuda")
    extension_h = Path(cpp_extension.include_paths()[0]) / "torch" / "extension.h"
    stat = extension_h.stat()
    return compiler, flags, includes, [_torch_version(), str(extension_h), stat.st_size, stat.st_mtime_ns]


def cpp_compile_flags(extra_cflags: list[str], with_cuda: bool) -> tuple[list[str], list[str]]:
    """The flags torch.utils.cpp_extension gives a .cpp compile, composed by cpp_extension itself
    (it writes a throwaway ninja file): (flags in order without the include directories and
    -DTORCH_EXTENSION_NAME, the -isystem directories in order)."""
    import inspect
    import tempfile

    from torch.utils import cpp_extension

    write = cpp_extension._write_ninja_file_to_build_library
    known = {"name": "ks_pch_probe", "sources": ["ks_pch_probe.cpp"], "extra_cflags": list(extra_cflags),
             "extra_cuda_cflags": [], "extra_sycl_cflags": [], "extra_ldflags": [], "extra_include_paths": [],
             "with_cuda": with_cuda, "with_sycl": False, "is_standalone": False}
    params = inspect.signature(write).parameters
    with tempfile.TemporaryDirectory() as tmp:
        ninja = Path(tmp) / "build.ninja"
        write(path=str(ninja), **{k: v for k, v in known.items() if k in params})
        line = next(l for l in ninja.read_text().splitlines() if l.startswith("cflags = "))
    words = iter(shlex.split(line[len("cflags = "):]))
    flags, includes = [], []
    for word in words:
        if word.startswith("-DTORCH_EXTENSION_NAME="):
            continue
        if word == "-isystem":
            includes.append(next(words))
        elif word.startswith("-isystem"):
            includes.append(word[len("-isystem"):])
        else:
            flags.append(word)
    return flags, includes


def import_extension(so_path: str, name: str):
    """Import a built extension from its shared object (torch must be imported first)."""
    import torch  # noqa: F401  (the extension links against libtorch)

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, so_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


# --- error summaries ---------------------------------------------------------

# gcc/clang: path:line:col: error: msg     nvcc: path(line): error: msg
_ERROR_RE = re.compile(
    r"^(?P<file>[^\s:()]+\.(?:cu|cuh|cpp|cc|c|h|hpp))(?::(?P<line>\d+)(?::\d+)?|\((?P<line2>\d+)\))"
    r":\s*(?:fatal\s+)?error[^:]*:\s*(?P<msg>.*)$"
)
_LINK_RE = re.compile(r"(undefined (?:reference|symbol)[^\n]*|ld: [^\n]*error[^\n]*|ImportError: [^\n]*)")


def summarize_errors(log: str, max_errors: int = MAX_ERRORS) -> str:
    """The first compiler errors with file:line and a little source context."""
    lines, seen = [], set()
    for raw in log.splitlines():
        match = _ERROR_RE.match(raw.strip())
        if not match:
            continue
        file, line = _error_key(match)
        if (file, line) in seen:
            continue
        seen.add((file, line))
        lines.append(f"{Path(file).name}:{line}: error: {match['msg'].strip()}")
        lines.extend(_source_context(Path(file), line))
        if len(seen) >= max_errors:
            break
    if not lines:
        link = _LINK_RE.findall(log)
        if link:
            return "link error: " + "; ".join(dict.fromkeys(l.strip() for l in link[:3]))
        tail = [l for l in log.strip().splitlines() if l.strip()][-8:]
        return "build failed:\n" + "\n".join(tail)
    distinct = {_error_key(m) for raw in log.splitlines() if (m := _ERROR_RE.match(raw.strip()))}
    if len(distinct) > len(seen):
        lines.append(f"... and {len(distinct) - len(seen)} more errors")
    return "\n".join(lines)


def _error_key(match) -> tuple[str, int]:
    return match["file"], int(match["line"] or match["line2"])


def _source_context(path: Path, line: int) -> list[str]:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    lo, hi = max(1, line - CONTEXT_LINES), min(len(text), line + CONTEXT_LINES)
    return [f"  {'>' if n == line else ' '} {n:4d} | {text[n - 1]}" for n in range(lo, hi + 1)]


def nvcc_compile_only(cu_file: str | Path, arch: str = "sm_90", out_dir: str | Path | None = None) -> tuple[bool, str]:
    """Compile one .cu to an object with nvcc alone (no torch): the CI check for kernels."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return False, "nvcc not found on PATH"
    out = Path(out_dir or Path(cu_file).parent) / (Path(cu_file).stem + ".o")
    cmd = [nvcc, "-c", str(cu_file), "-o", str(out), f"-arch={arch}", "-O3", "-std=c++17"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    return proc.returncode == 0, (summarize_errors(log) if proc.returncode else log)
