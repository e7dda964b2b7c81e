"""Build a kernels/ folder into a torch extension with torch.utils.cpp_extension and ninja.

Runs inside a worker process (it imports torch). The binding infrastructure
(binding.cpp, binding_registry.h) always comes from the installed package, so an
edited copy in a workdir changes nothing. Rebuilds are incremental: ninja
recompiles only changed objects, and a build whose inputs hash the same as the
last successful one is a cache hit that skips ninja altogether.

With GCC, a C++ file whose first include is <torch/extension.h> loads it precompiled (pch.py;
about half of such a compile): `-I<cache>/pch/<signature> -Winvalid-pch` joins the C++ flags,
never nvcc's. A light binding (binding_light.h) includes no torch/extension.h and pays nothing for
it. KERNELSMITH_PCH=0 turns it off; a PCH that cannot be made or read only costs the speed-up,
never the build.
"""

from __future__ import annotations

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
from pathlib import Path

from kernelsmith.evaluation.build_plan import (TEMPLATES, BuildError, BuildResult, _flat, _plan, _torch_version,
                                               cache_lock, cached_result, fingerprint)

MAX_ERRORS = 5
CONTEXT_LINES = 2


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


def _build(kernels_dir: Path, device: str, fast_math: bool, build_dir, start: float,
           notes: list[str]) -> BuildResult:
    from kernelsmith.evaluation import toolchain

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
    _write_stamp(stamp_path, {"key": key, "so_path": so_path, "pch_flags": pch_flags})
    return BuildResult(ok=True, cached=False, seconds=time.perf_counter() - start,
                       so_path=so_path, name=name, arch=arch, flags=_flat(flags) + pch_flags, notes=notes)


def _write_stamp(path: Path, stamp: dict) -> None:
    """Whole or not at all: a process reading it mid-write saw no build and built again (or, jailed, failed)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(stamp))
    os.replace(tmp, path)


def _run_cpp_extension(name, sources, flags, arch, device, out_dir: Path, notes: list[str]) -> tuple[str, list[str]]:
    """Write the ninja file and build; return the path of the shared object and the flags that
    brought in the precompiled header ([] without one)."""
    from kernelsmith.harness import pch

    if device == "cuda":
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    header = precompiled_header(flags["cflags"], device, notes)
    with pch.in_use(header) as usable:
        pch_flags = [shlex.quote(f) for f in pch.include_flags(header)] if usable else []  # words of a ninja line
        module = module_object(header, flags["cflags"], device, notes) if usable else None
        versions = _versioner_entry(name)
        try:
            return _load(name, sources, flags, device, out_dir, pch_flags, module), pch_flags
        except BuildError as err:
            if module is not None and _object_error(err.log, module):
                notes.append(f"the shared {module.name} could not be linked; built with binding.cpp instead")
                pch.discard_object(module)
                _versioner_entry(name, restore=versions)
                return _load(name, sources, flags, device, out_dir, pch_flags, None), pch_flags
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
_PCH_ERROR_RE = re.compile(r"^.*error:.*(?:\bPCH\b|\.gch\b).*$|^.*internal compiler error.*$", re.MULTILINE)


def _object_error(log: str, obj: Path) -> bool:
    """Whether a failed link failed on the shared module object itself (a damaged or foreign file), not
    on the kernels (the failed command line names the object too)."""
    return any(obj.name in line and " -o " not in line for line in log.splitlines())


def _load(name, sources, flags, device, out_dir: Path, pch_flags: list[str], module: Path | None = None) -> str:
    """Build with cpp_extension. The module's entry is binding.cpp compiled into this extension, or, given
    `module`, that object (compiled once per PCH) with PyInit_<name> made an alias of its entry."""
    from torch.utils import cpp_extension

    infra = [] if module else [TEMPLATES / "binding.cpp"]
    entry = [str(module), f"-Wl,--defsym=PyInit_{name}=PyInit_ks_extension"] if module else []
    with cache_lock(out_dir / "ks-build"):
        _clear_stale_baton(out_dir)
        return _load_in(cpp_extension, name, infra, sources, flags, device, out_dir, pch_flags, entry)


def _clear_stale_baton(out_dir: Path) -> None:
    """cpp_extension's own lock is a file (FileBaton) that a killed build leaves behind, and every later build
    of the folder then waits on it for ever: a session ended by a timeout, Ctrl-C or a worker killed by the pool
    hung every session after it (a CPU `train rft` sat 10 minutes on the op watch's). Each build of a folder
    holds our flock on it, which the kernel drops with its holder, so under it a baton can only be stale."""
    for name in ("lock", ".ninja_lock"):
        (out_dir / name).unlink(missing_ok=True)


def _load_in(cpp_extension, name, infra, sources, flags, device, out_dir: Path, pch_flags, entry) -> str:
    try:
        module = cpp_extension.load(
            name=name,
            sources=[str(p) for p in infra + sources],
            extra_cflags=list(flags["cflags"]) + pch_flags,  # copies: cpp_extension appends to these lists
            extra_cuda_cflags=list(flags["cuda_flags"]),
            extra_ldflags=list(flags["ldflags"]) + entry,
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
    """The precompiled header (its .gch beside it; pch.include_flags) for this build's C++ compiles, made on first
    use; None when it is off (KERNELSMITH_PCH=0), the compiler is not GCC, or it cannot be had."""
    from kernelsmith.harness import pch

    if not pch.enabled():
        return None
    try:
        request = pch_request(cflags, device)
        if request is None:
            return None
        compiler, flags, includes, identity = request
        return pch.ensure_pch(compiler, flags, includes, extra_identity=identity,
                              header_text=pch.header_text(device), notes=notes)
    except Exception as err:  # noqa: BLE001  (a PCH problem must never fail a build)
        notes.append(f"precompiled header skipped ({type(err).__name__}: {err})")
        return None


ENTRY_INPUTS = (TEMPLATES / "binding_module.cpp", TEMPLATES / "binding_registry.h",  # the entry, what it includes
                TEMPLATES / "binding_light.h")


def module_object(header: Path, cflags: list[str], device: str, notes: list[str]) -> Path | None:
    """binding_module.cpp compiled once beside the PCH (pch.ensure_object), or None: then every build
    compiles binding.cpp. Only with pybind11 3 or later, whose modules take their name from the import;
    KERNELSMITH_SHARED_ENTRY=0 turns it off."""
    from kernelsmith.harness import pch
    from torch.utils import cpp_extension

    if os.environ.get("KERNELSMITH_SHARED_ENTRY", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    common = Path(cpp_extension.include_paths()[0]) / "pybind11" / "detail" / "common.h"
    major = re.search(r"#define PYBIND11_VERSION_MAJOR (\d+)", common.read_text()) if common.is_file() else None
    if major is None or int(major.group(1)) < 3:
        return None
    compiler, flags, includes, _ = pch_request(cflags, device)
    source, inputs = ENTRY_INPUTS[0], list(ENTRY_INPUTS)
    return pch.ensure_object(header, compiler, flags, includes, source, inputs, [str(TEMPLATES)], notes)


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
