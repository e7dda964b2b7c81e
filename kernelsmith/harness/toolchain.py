"""Is the C++ compiler fit to build extensions for this torch process? Pick one that is.

torch.utils.cpp_extension compiles and links with $CXX (else `c++`). A compiler that links its
own copy of libstdc++ into the extension (a wrapper that adds -static-libstdc++, for one) builds
extensions that load and run, but whose iostreams do not work inside the torch process: the
extension's copy of the locale machinery was never set up there. Every c10::Error formats its
message through an ostringstream, so the first failing TORCH_CHECK that prints a shape crashes
the worker with SIGSEGV (the H200 machine, CXX=/opt/gcc/bin/g++) or cuts the message short
(here, with g++ -static-libstdc++), and a candidate's readable shape error becomes a crash.

The probe compiles a tiny shared library that formats numbers, loads it into a fresh Python
that imported torch, and compares the text: well under a second of compiling plus one torch
import. Verdicts are cached per compiler (path, --version, file stamp) and torch version.
When $CXX fails and the system `c++` passes, builds use `c++` and say so in the build notes;
KERNELSMITH_CXX_CHECK=0 turns the probe off.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE_SOURCE = r"""#include <cstring>
#include <sstream>
#include <string>
extern "C" int ks_format(char* out, int n) {
  std::ostringstream s;
  s << "shape [" << 4L << ", " << 512L << "] " << 2.5;
  std::string text = s.str();
  std::strncpy(out, text.c_str(), n - 1);
  out[n - 1] = 0;
  return (int)text.size();
}
"""
EXPECTED = "shape [4, 512] 2.5"
LOADER = """import ctypes, sys
import torch  # first, as in a worker: the process's libstdc++ is torch's
buf = ctypes.create_string_buffer(64)
ctypes.CDLL(sys.argv[1]).ks_format(buf, 64)
print(buf.value.decode(errors="replace"))
"""
FALLBACK = "c++"


def requested_compiler() -> str:
    """The compiler cpp_extension will use: $CXX, else c++."""
    return os.environ.get("CXX") or FALLBACK


def _identity(compiler: str) -> str:
    path = shutil.which(compiler) or compiler
    try:
        stat = os.stat(path)
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    from kernelsmith.harness.build import _torch_version

    key = [os.path.realpath(path), path, stat.st_size, stat.st_mtime_ns, version, _torch_version(), sys.version]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:24]


def probe(compiler: str) -> tuple[bool, str]:
    """(fit, why): build the probe library with COMPILER and read its text from a torch process."""
    with tempfile.TemporaryDirectory(prefix="ks-cxx-") as tmp:
        src, lib = Path(tmp) / "probe.cpp", Path(tmp) / "probe.so"
        src.write_text(PROBE_SOURCE)
        try:
            made = subprocess.run([compiler, "-shared", "-fPIC", "-O1", str(src), "-o", str(lib)],
                                  capture_output=True, text=True, timeout=120)
            if made.returncode != 0:
                return False, f"{compiler} cannot build a shared library: {(made.stderr.strip() or '?')[-200:]}"
            ran = subprocess.run([sys.executable, "-c", LOADER, str(lib)], capture_output=True, text=True,
                                 timeout=120)
        except (OSError, subprocess.TimeoutExpired) as err:
            return False, f"{compiler}: {type(err).__name__}: {err}"
    if ran.returncode != 0:
        return False, f"a library {compiler} built crashes the torch process when it formats numbers " \
                      f"(exit {ran.returncode})"
    text = ran.stdout.strip()
    if text != EXPECTED:
        return False, f"a library {compiler} built formats numbers wrongly in the torch process " \
                      f"({text!r}, not {EXPECTED!r}): its own copy of libstdc++?"
    return True, f"{compiler} builds extensions whose iostreams work in the torch process"


def verdict(compiler: str) -> tuple[bool, str]:
    """probe(), cached in the user cache per compiler identity and torch version."""
    from kernelsmith.harness.build import cache_lock, read_json, user_cache_dir

    identity = _identity(compiler)
    if not identity:
        return False, f"{compiler} not found"
    path = user_cache_dir() / "toolchain" / f"{identity}.json"
    with cache_lock(path):
        cached = read_json(path)
        if "fit" in cached:
            return bool(cached["fit"]), str(cached.get("why", ""))
        fit, why = probe(compiler)
        path.write_text(json.dumps({"compiler": compiler, "fit": fit, "why": why}))
    return fit, why


def choose_compiler(notes: list[str]) -> None:
    """Point $CXX at a fit compiler for this process's builds when the one set is not fit.

    Only a $CXX the user set is checked (the default c++ has nothing to fall back to); the
    switch and the reason go into notes, as does a compiler with no fit replacement."""
    requested = os.environ.get("CXX")
    if not requested or os.environ.get("KERNELSMITH_CXX_CHECK", "1") == "0":
        return
    fit, why = verdict(requested)
    if fit:
        return
    fallback = shutil.which(FALLBACK)
    if fallback and os.path.realpath(fallback) != os.path.realpath(shutil.which(requested) or requested):
        if verdict(fallback)[0]:
            os.environ["CXX"] = fallback
            notes.append(f"CXX={requested} is not fit for torch extensions ({why}); built with {fallback} instead "
                         f"(KERNELSMITH_CXX_CHECK=0 keeps CXX)")
            return
    notes.append(f"CXX={requested} may build broken extensions ({why}); no fit compiler to use instead")
