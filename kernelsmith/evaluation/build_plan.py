"""The build plan, computed without torch: sources, flags, arch, the extension's name and
folder, the stamp key and the cache check (the parent answers a cache hit itself; the build
runs in a jailed worker, harness/build.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
INFRA_FILES = ("binding.cpp", "binding_module.cpp", "binding_registry.h", "binding_light.h")


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
    outside = [p.name for p in kernels_dir.iterdir() if p.is_symlink() and kernels_dir.resolve() not in
               p.resolve().parents]
    if outside:
        raise BuildError(f"refused: {', '.join(outside)} in {kernels_dir.name}/ link(s) to files outside it; "
                         "kernel sources must be real files of the folder", "")
    if not files:
        raise BuildError(f"no kernel sources in {kernels_dir} (expected {', '.join(sorted(suffixes))})", "")
    return files


def has_kernels(kernels_dir: Path) -> bool:
    """Whether a kernels/ folder holds anything to build: an empty one (the jail keeps the folder, so an
    agent that moves to inline kernels can only empty it) means nothing to build, as a missing one."""
    return kernels_dir.is_dir() and any(p.is_file() for p in kernels_dir.iterdir())


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
    return {"cublas": "cublas" in text, "cudnn": "cudnn.h" in text, "cutlass": '#include "cutlass/' in text}


CUTLASS_ENV = "KERNELSMITH_CUTLASS"  # a CUTLASS include folder, or 0 for none


def cutlass_include() -> Path | None:
    """CUTLASS's headers (the folder holding cutlass/cutlass.h): $KERNELSMITH_CUTLASS, else $CUTLASS_PATH/include,
    else the copy the nvidia-cutlass wheel installs (found without importing it: its package needs
    cuda-python). None where there is none, or where KERNELSMITH_CUTLASS=0."""
    given = os.environ.get(CUTLASS_ENV, "")
    if given == "0":
        return None
    folders = [Path(given)] if given else []
    if os.environ.get("CUTLASS_PATH"):
        folders.append(Path(os.environ["CUTLASS_PATH"]) / "include")
    spec = importlib.util.find_spec("cutlass_library")
    if spec and spec.submodule_search_locations:
        folders += [Path(p) / "source" / "include" for p in spec.submodule_search_locations]
    return next((f.resolve() for f in folders if (f / "cutlass" / "cutlass.h").is_file()), None)


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


def compile_flags(device: str, fast_math: bool, cublas: bool = False, cudnn: bool = False,
                  cutlass: bool = False) -> dict[str, list[str]]:
    # No -std for the C++ files: they include torch's headers, and cpp_extension picks the standard
    # torch itself was built with (C++20 from torch 2.11). Forcing C++17 compiles those headers
    # in another dialect than libtorch's, which GCC accepts with warnings; the .cu files include
    # CUDA headers only, so their -std stays ours.
    cflags = ["-O3"]
    ldflags: list[str] = []
    cuda_flags: list[str] = []
    if device == "cpu":
        # -fno-trapping-math: results stay IEEE's, only floating-point exception flags may differ; without it
        # GCC will not vectorise a loop with a select on floats (a clamp, an overflow to inf), as in ks_expf
        cflags += ["-fopenmp", "-march=native", "-fno-trapping-math"]
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
        if cutlass:  # header-only; a source that includes it without a copy here fails its build, saying so
            folder = cutlass_include()
            cuda_flags += [f"-I{folder}"] if folder else []
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


def _flat(flags: dict) -> list[str]:
    return [f for group in flags.values() for f in group]


def read_json(path: Path) -> dict:
    """A JSON file's object, or {} when it is missing or unreadable (stamps, caches)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


NATIVE_DIR = Path(__file__).resolve().parent.parent / "harness" / "native"


def op_watch_identity() -> str:
    """What the native op watch's .so depends on: its source, torch, Python and this machine
    (-march=native); computed without torch, so the parent knows whether it is built."""
    import platform

    digest = hashlib.sha256((NATIVE_DIR / "op_watch.cpp").read_bytes())
    # and its folder: the extension's name comes from the path, so two checkouts sharing one cache
    # must not share a build whose stamp names the other's extension (a jailed profile cannot rebuild it)
    # and $CXX, which the stamp's key holds: processes built with two compilers sharing one folder rewrote
    # each other's build, and a jailed profile that found the other's stamp could neither use nor rebuild it
    digest.update(json.dumps([_torch_version(), sys.version, platform.node(), platform.machine(),
                              str(NATIVE_DIR.resolve()), os.environ.get("CXX", "")]).encode())
    return digest.hexdigest()[:20]


def op_watch_folder() -> Path:
    return user_cache_dir() / "op_watch" / op_watch_identity()


def op_watch_built() -> bool:
    """Whether this process would find the op watch's build a cache hit (a stamp of another build is not)."""
    return op_watch_cached() is not None


def op_watch_cached() -> BuildResult | None:
    return cached_result(NATIVE_DIR, "cpu", build_dir=op_watch_folder() / "build")
