"""The native op watch: which dispatcher ops the candidate runs during its timed runs.

A Python dispatch mode (guards.OpRecorder) costs 10-90 us of host time per op, and each
timed run starts on an idle GPU, so that time lands inside the candidate's timed interval
while eager, timed unwatched, pays none of it. The native watch (native/op_watch.cpp, a
global RecordFunction callback) costs well under a microsecond per op and is installed only
around the candidate's runs, outside the timed interval. Warm-up and verification keep the
Python mode too, so a candidate that behaves only while one of them watches is still seen.

Built once per torch and Python version into the user cache (a few seconds with the
precompiled header); where it cannot be built, the profiler falls back to the Python mode
and says so. KERNELSMITH_OP_WATCH=python forces that fallback.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from kernelsmith.harness import build, guards

NATIVE_DIR = Path(__file__).resolve().parent / "native"


def _cache_dir() -> Path:
    return build.user_cache_dir() / "op_watch"


def _failure_key() -> str:
    """A failed build is not retried for the same sources, torch and Python (it costs a compile)."""
    import hashlib
    import sys

    import torch

    source = hashlib.sha256((NATIVE_DIR / "op_watch.cpp").read_bytes()).hexdigest()[:16]
    return json.dumps([torch.__version__, sys.version, source])


def load_extension():
    """(module, "") or (None, why not): builds on first use, one process at a time."""
    if os.environ.get("KERNELSMITH_OP_WATCH", "").lower() == "python":
        return None, "KERNELSMITH_OP_WATCH=python"
    folder = _cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    failed = folder / "failed.json"
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if failed.is_file() and failed.read_text().startswith(_failure_key()):
            return None, "an earlier build of the native op watch failed (see " + str(failed) + ")"
        result = build.build(NATIVE_DIR, "cpu", build_dir=folder / "build")
        if not result.ok:
            failed.write_text(_failure_key() + "\n" + result.summary)
            return None, "the native op watch did not build: " + result.summary.splitlines()[0][:200]
    try:
        return build.import_extension(result.so_path, result.name), ""
    except ImportError as err:
        return None, f"the native op watch did not load: {err}"


class NativeOpWatch:
    """Arm around each watched call (outside the timed interval); read the verdict at the end."""

    def __init__(self, ext):
        self.ext = ext
        self.forbidden: dict[str, int] = {}
        self.blind = 0
        self.runs = 0

    def __enter__(self):
        self.ext.arm()
        return self

    def __exit__(self, *exc):
        self.ext.disarm()
        self.runs += 1
        self._collect()
        return False

    def _collect(self) -> None:
        ops, blind = self.ext.take()
        self.blind += blind
        for name, count in ops:
            if guards.forbidden_profiled_op(name):
                self.forbidden[name] = self.forbidden.get(name, 0) + count

    def violation(self) -> str | None:
        if self.blind:
            return (f"the harness's native op watch stopped seeing ops in {self.blind} of {self.runs} timed runs "
                    "(RecordFunction turned off or its callbacks cleared)")
        if not self.forbidden:
            return None
        ops = ", ".join(f"{name} x{n}" for name, n in sorted(self.forbidden.items())[:12])
        return f"torch compute in ModelNew.forward or its binding during timed runs: {ops}"


def open_watch() -> tuple[NativeOpWatch | None, str]:
    """The native watch, or (None, why) when only the Python mode is available."""
    ext, why = load_extension()
    return (NativeOpWatch(ext), "") if ext is not None else (None, why)


# Python's ways to blind a RecordFunction callback. A call that turns RecordFunction off or
# clears the callbacks, or a wrapper put back by the candidate, is a violation. (C++ can do the
# same directly; that is a deliberate attack on the harness, see docs/eval-methodology.md.)
TRIPWIRES = (("torch._C._autograd", "_enable_record_function"), ("torch.autograd", "_enable_record_function"),
             ("torch._C._autograd", "_clear_callbacks"))


class Tripwires:
    """Installed before the candidate is imported: wrappers that note every blinding call."""

    def __init__(self):
        import importlib

        self.calls: list[str] = []
        self.installed: list[tuple[object, str, object]] = []
        for module_name, attr in TRIPWIRES:
            module = importlib.import_module(module_name)
            original = getattr(module, attr, None)
            if original is not None:
                wrapper = self._wrap(f"{module_name}.{attr}", original)
                setattr(module, attr, wrapper)
                self.installed.append((module, attr, wrapper))

    def _wrap(self, name: str, original):
        def tripwire(*args, **kwargs):
            if not name.endswith("_enable_record_function") or not (args[0] if args else kwargs.get("enable", True)):
                self.calls.append(name)
            return original(*args, **kwargs)
        return tripwire

    def violation(self) -> str | None:
        removed = [f"{getattr(m, '__name__', '?')}.{a}" for m, a, w in self.installed
                   if getattr(m, a, None) is not w]
        if removed:
            return "the harness's RecordFunction tripwires were replaced: " + ", ".join(removed)
        if self.calls:
            return ("forward blinded the harness's native op watch: "
                    + ", ".join(sorted(set(self.calls))) + f" ({len(self.calls)} call(s))")
        return None
