"""The native op watch: which dispatcher ops the candidate runs during its timed runs.

A Python dispatch mode (guards.OpRecorder) costs 10-90 us of host time per op, and each
timed run starts on an idle GPU, so that time lands inside the candidate's timed interval
while eager, timed unwatched, pays none of it. The native watch (native/op_watch.cpp, a
global RecordFunction callback) costs well under a microsecond per op and is installed only
around the candidate's runs, outside the timed interval. Warm-up and verification keep the
Python mode too, so a candidate that behaves only while one of them watches is still seen.

Built once per source, torch and Python version and machine into the user cache (about 30 s
of CPU with the precompiled header); where it cannot be built, the profiler falls back to the
Python mode and says so. KERNELSMITH_OP_WATCH=python forces that fallback.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kernelsmith.evaluation import build_plan
from kernelsmith.harness import build, guards

NATIVE_DIR = Path(__file__).resolve().parent / "native"


RETRY_FAILED_BUILD_S = 3600.0  # a failed build (a full disk, a killed compiler) is retried after this


def _identity() -> str:
    return build_plan.op_watch_identity()


def load_extension():
    """(module, "") or (None, why not): builds on first use, one process at a time; any failure
    (no compiler, an unwritable cache) leaves the Python mode in charge."""
    if os.environ.get("KERNELSMITH_OP_WATCH", "").lower() == "python":
        return None, "KERNELSMITH_OP_WATCH=python"
    try:
        return _load_locked(build_plan.op_watch_folder())
    except (OSError, ImportError, RuntimeError, build_plan.BuildError) as err:
        return None, f"the native op watch is unavailable: {type(err).__name__}: {str(err)[:200]}"


def _load_locked(folder: Path):
    if build_plan.op_watch_built():  # built by a trusted worker: a jailed one only reads it, with no lock
        return _checked(_import_built(folder))
    failed = folder / "failed.txt"
    with build_plan.cache_lock(folder / "build"):
        if failed.is_file() and time.time() - failed.stat().st_mtime < RETRY_FAILED_BUILD_S:
            return None, f"the native op watch did not build an hour ago or less (see {failed})"
        result = build.build(NATIVE_DIR, "cpu", build_dir=folder / "build")
        if not result.ok:
            failed.write_text(result.summary)
            return None, "the native op watch did not build: " + result.summary.splitlines()[0][:200]
        module = build.import_extension(result.so_path, result.name)  # under the lock: no rebuild under us
    return _checked((module, result.so_path))


def _import_built(folder: Path):
    """Import the build a trusted worker made; never build here (a jailed profile cannot write the cache)."""
    result = build_plan.op_watch_cached()
    if result is None:
        raise ImportError(f"the build in {folder} changed after it was checked (its stamp is not this process's)")
    return build.import_extension(result.so_path, result.name), result.so_path


def _checked(loaded):
    module, so_path = loaded
    if Path(getattr(module, "__file__", "")).resolve() != Path(so_path).resolve():
        return None, f"the native op watch module is not the one built ({getattr(module, '__file__', '?')})"
    return module, ""


class NativeOpWatch:
    """Arm around each watched call (outside the timed interval); read the verdict at the end.
    Holds its own references to the extension's functions, taken before candidate code runs."""

    MUTABLE = frozenset({"blind", "tampered", "runs", "expected_arms"})

    def __init__(self, ext):
        self._arm, self._disarm = ext.arm, ext.disarm
        self.forbidden: dict[str, int] = {}
        self.blind = self.tampered = self.runs = 0
        self.expected_arms: int | None = None

    def __enter__(self):
        arms = self._arm()
        self.expected_arms = arms if self.expected_arms is None else self.expected_arms + 1
        return self

    def __exit__(self, *exc):
        self._settle(judged=True)
        return False

    def _settle(self, judged: bool) -> None:
        ops, blind, arms, was_armed = self._disarm()
        self.runs += 1
        self.blind += bool(blind)
        self.tampered += (not was_armed) or arms != self.expected_arms
        self.expected_arms = arms
        for name, count in ops:
            if guards.forbidden_profiled_op(name) and judged:
                self.forbidden[name] = self.forbidden.get(name, 0) + count

    def unjudged(self) -> "UnjudgedRuns":
        """The same watch around eager's timed runs, their ops not judged: both contenders' brackets of the
        parent's clock then hold the same harness work (evaluation/checks.py compares them)."""
        return UnjudgedRuns(self)

    def violation(self) -> str | None:
        if self.tampered:
            return (f"the harness's native op watch was disarmed or re-armed by someone else in {self.tampered} "
                    f"of {self.runs} timed runs")
        if self.blind:
            return (f"the harness's native op watch stopped seeing ops in {self.blind} of {self.runs} timed runs "
                    "(RecordFunction turned off or its callbacks cleared)")
        if not self.forbidden:
            return None
        ops = ", ".join(f"{name} x{n}" for name, n in sorted(self.forbidden.items())[:12])
        return f"torch compute in ModelNew.forward or its binding during timed runs: {ops}"


class UnjudgedRuns:
    """A NativeOpWatch entered and left as usual (tampering still counts), its ops not judged."""

    def __init__(self, watch: NativeOpWatch):
        self.watch = watch

    def __enter__(self):
        return self.watch.__enter__()

    def __exit__(self, *exc):
        self.watch._settle(judged=False)
        return False


def open_watch() -> tuple[NativeOpWatch | None, str]:
    """The native watch, or (None, why) when only the Python mode is available."""
    ext, why = load_extension()
    return (NativeOpWatch(ext), "") if ext is not None else (None, why)


# Python's ways to blind a RecordFunction callback. A call that turns RecordFunction off or
# clears the callbacks, or a wrapper put back by the candidate, is a violation. (C++ can do the
# same directly; that is a deliberate attack on the harness, see docs/eval-methodology.md.)
TRIPWIRES = (("torch._C._autograd", "_enable_record_function"), ("torch.autograd", "_enable_record_function"),
             ("torch._C._autograd", "_clear_callbacks"),
             # a redispatch below the Python key skips the dispatch mode and RecordFunction alike
             ("torch._ops.OpOverload", "redispatch"), ("torch._C._DispatchOperatorHandle", "redispatch_boxed"))


def _resolve(dotted: str):
    """A module, or a class inside one ('torch._ops.OpOverload'); None when it does not exist."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            target = getattr(target, attr, None)
        return target
    return None


class Tripwires:
    """Installed before the candidate is imported: wrappers that note every blinding call."""

    def __init__(self):
        self.calls: list[str] = []
        self.installed: list[tuple[object, str, object]] = []
        for module_name, attr in TRIPWIRES:
            module = _resolve(module_name)
            original = getattr(module, attr, None) if module is not None else None
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
            return ("the candidate blinded the harness's op watch: "
                    + ", ".join(sorted(set(self.calls))) + f" ({len(self.calls)} call(s))")
        return None
