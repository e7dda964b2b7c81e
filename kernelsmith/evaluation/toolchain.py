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
import shlex
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
IMPORTED = "ks-torch-imported"
LOADER = f"""import ctypes, sys
import torch  # first, as in a worker: the process's libstdc++ is torch's
print("{IMPORTED}", flush=True)
buf = ctypes.create_string_buffer(64)
ctypes.CDLL(sys.argv[1]).ks_format(buf, 64)
print(buf.value.decode(errors="replace"))
"""
FALLBACK = "c++"


class Unsettled(Exception):
    """The probe could not decide (a timeout, an OSError, torch not importable): not cached."""


def requested_compiler() -> str:
    """The compiler cpp_extension will use: $CXX, else c++."""
    return os.environ.get("CXX") or FALLBACK


def _words(compiler: str) -> list[str]:
    """$CXX as torch's ninja file uses it: a command, maybe with arguments (`ccache g++`)."""
    return shlex.split(compiler) or [compiler]


def _executable(compiler: str) -> str | None:
    return shutil.which(_words(compiler)[0])


def _identity(compiler: str) -> str:
    words = _words(compiler)
    path = _executable(compiler)
    if path is None:
        return ""
    try:
        stat = os.stat(path)
        version = subprocess.run([path, *words[1:], "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    from kernelsmith.evaluation.build_plan import _torch_version

    key = [os.path.realpath(path), compiler, stat.st_size, stat.st_mtime_ns, version, _torch_version(), sys.version,
           sys.prefix]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:24]


def probe(compiler: str) -> tuple[bool, str]:
    """(fit, why): build the probe library with COMPILER and read its text from a torch process.
    Raises Unsettled when the probe itself could not run."""
    try:
        with tempfile.TemporaryDirectory(prefix="ks-cxx-") as tmp:
            return _probe_in(compiler, Path(tmp))
    except (OSError, subprocess.TimeoutExpired) as err:
        raise Unsettled(f"{type(err).__name__}: {err}") from None


def _probe_in(compiler: str, tmp: Path) -> tuple[bool, str]:
    src, lib = tmp / "probe.cpp", tmp / "probe.so"
    src.write_text(PROBE_SOURCE)
    made = subprocess.run([*_words(compiler), "-shared", "-fPIC", "-O1", str(src), "-o", str(lib)],
                          capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        return False, f"{compiler} cannot build a shared library: {(made.stderr.strip() or '?')[-200:]}"
    # run in the temporary folder: `python -c` puts the working directory first on sys.path
    ran = subprocess.run([sys.executable, "-c", LOADER, str(lib)], capture_output=True, text=True, timeout=120,
                         cwd=tmp)
    if IMPORTED not in ran.stdout:
        raise Unsettled(f"torch did not import in the probe: {(ran.stderr.strip() or '?')[-200:]}")
    if ran.returncode != 0:
        return False, f"a library {compiler} built crashes the torch process when it formats numbers " \
                      f"(exit {ran.returncode})"
    text = ran.stdout.strip().splitlines()[-1] if ran.stdout.strip() else ""
    if text != EXPECTED:
        return False, f"a library {compiler} built formats numbers wrongly in the torch process " \
                      f"({text!r}, not {EXPECTED!r}): its own copy of libstdc++?"
    return True, f"{compiler} builds extensions whose iostreams work in the torch process"


def verdict(compiler: str) -> tuple[bool | None, str]:
    """probe(), cached in the user cache per compiler identity and torch version; (None, why)
    when it cannot be decided (nothing cached then) or the compiler is not found."""
    from kernelsmith.evaluation.build_plan import cache_lock, read_json, user_cache_dir

    identity = _identity(compiler)
    if not identity:
        return None, f"{compiler} not found"
    path = user_cache_dir() / "toolchain" / f"{identity}.json"
    cached = read_json(path)  # first without the lock: a jailed worker reads the cache and cannot lock it
    if "fit" in cached:  # (the probe there cost a compile and a torch import per check: 4 s per build on the H200)
        return bool(cached["fit"]), str(cached.get("why", ""))
    try:
        with cache_lock(path):
            cached = read_json(path)
            if "fit" in cached:
                return bool(cached["fit"]), str(cached.get("why", ""))
            fit, why = probe(compiler)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")  # whole or not at all, for the readers without the lock
            tmp.write_text(json.dumps({"compiler": compiler, "fit": fit, "why": why}))
            os.replace(tmp, path)
    except Unsettled as err:
        return None, f"{compiler}: the probe could not run ({err})"
    except OSError:  # an unwritable cache: decide without it
        try:
            return probe(compiler)
        except Unsettled as err:
            return None, f"{compiler}: the probe could not run ({err})"
    return fit, why


def checking() -> bool:
    """False under KERNELSMITH_CXX_CHECK=0: $CXX is used as it is."""
    return os.environ.get("KERNELSMITH_CXX_CHECK", "1") != "0"


def choose_compiler(notes: list[str]) -> None:
    """Point $CXX at a fit compiler for this process's builds when the one set is not fit.

    Only a $CXX the user set is checked (the default c++ has nothing to fall back to); the
    switch and the reason go into notes, as does a compiler with no fit replacement. Never
    raises: a probe that cannot run leaves $CXX as it is."""
    requested = os.environ.get("CXX")
    if not requested or not checking():
        return
    try:
        _choose(requested, notes)
    except Exception as err:  # noqa: BLE001  (a probe problem must never fail a build)
        notes.append(f"the check of CXX={requested} was skipped ({type(err).__name__}: {err})")


def _choose(requested: str, notes: list[str]) -> None:
    fit, why = verdict(requested)
    if fit is not False:  # fit, or undecided: keep what the user set
        if fit is None:
            notes.append(f"CXX={requested} was not checked: {why}")
        return
    replacement = fallback_for(requested)
    if replacement:
        os.environ["CXX"] = replacement
        notes.append(f"CXX={requested} is not fit for torch extensions ({why}); built with {replacement} instead "
                     f"(KERNELSMITH_CXX_CHECK=0 keeps CXX)")
        return
    notes.append(f"CXX={requested} may build broken extensions ({why}); no fit compiler to use instead")


def fallback_for(requested: str) -> str | None:
    """The system c++ when it is another compiler than `requested` and it is fit."""
    fallback = shutil.which(FALLBACK)
    mine = _executable(requested)
    if not fallback or (mine and os.path.realpath(fallback) == os.path.realpath(mine)):
        return None
    return fallback if verdict(fallback)[0] else None
