"""How many bytes a CPU profile may write before each timed run to evict the last run's data (the CPU's L2Flusher):
measured here, on the trusted side, and passed to the profile worker in its job.

The worker's rule is twice the last-level caches sysfs reports (harness/timing.cpu_flush_bytes). A virtual
machine is often shown its host's whole cache: this project's 2-core CI machine reports one 480 MiB L3, while
one of its cores re-reads 32 MiB at 21 GB/s and 64 MiB at DRAM's 8 GB/s. Writing 960 MiB before each of a
profile's 100 runs took 16 of its 20 seconds. So the job carries a cap, measured once per machine and kept in
the cache folder: the smallest buffer, doubling from 4 MiB to 1 GiB, that one core re-reads no faster than 1.5x
the largest (the first size past its caches), twice, times the CPUs this process may run on (each may sit on a
cache of its own). Where no size reads faster than DRAM the job carries no cap and sysfs's rule stands.
KERNELSMITH_CPU_FLUSH_BYTES (a number of bytes, or with K, M or G) sets the size outright.

The reads are torch.sum's in a trusted worker (a `cpu_caches` job: the parent side of an evaluation imports no
torch and no harness). glibc's memmove, tried here first, switches to non-temporal stores above three quarters
of the cache it is told of, so its copies of 512 MiB ran faster than of 128 MiB and the edge moved between runs."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from kernelsmith.errors import BadInput

FASTER_THAN_DRAM = 1.5  # a size read this much faster than the largest is still (partly) in a cache
# A measurement taken while other work pollutes the shared cache can find the edge early, and it is kept: the cap
# never assumes a core caches less than this (a floor of 128 MiB written on two CPUs).
MEASURED_FLOOR = 32 << 20
SIZES = [(4 << 20) << k for k in range(9)]  # 4 MiB to 1 GiB: the last is past any cache that matters
_FAILED: set[str] = set()  # machines whose measuring worker failed in this process: not tried again per profile


def job_fields(device: str) -> dict:
    """What a profile or baselines job carries about the CPU's flush: its size set by the user, or the measured
    cap on sysfs's rule, or nothing (on a GPU, or where the measurement saw no cache)."""
    if device != "cpu":
        return {}
    override = os.environ.get("KERNELSMITH_CPU_FLUSH_BYTES", "").strip()
    if override:
        return {"flush_bytes": parse_bytes(override)}
    measured = measured_cache_bytes()
    return {"flush_cap_bytes": 2 * max(measured, MEASURED_FLOOR) * len(_cpus())} if measured else {}


def parse_bytes(text: str) -> int:
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit() or int(digits) * scale < (1 << 20):
        raise BadInput(f"KERNELSMITH_CPU_FLUSH_BYTES={text!r} is not a size of at least 1M (bytes, or with K, M, G)")
    return int(digits) * scale


def measured_cache_bytes() -> int | None:
    """The first buffer size past one core's caches (module docstring), measured once per machine and kept;
    None where the measurement saw no cache."""
    key = f"{platform.machine()}|{_model()}|{len(_cpus())} cpus"
    kept = _read_kept()
    if key not in kept:
        rates = None if key in _FAILED else read_rates(SIZES)
        if rates is None:
            _FAILED.add(key)
            return None  # (the worker failed: sysfs's rule, and measured again by the next process)
        kept[key] = first_size_past_the_cache(rates)
        _write_kept(kept)
    return kept[key]


def first_size_past_the_cache(rates: dict[int, float]) -> int | None:
    """The smallest size after the last one read FASTER_THAN_DRAM times as fast as the largest; None if none is."""
    sizes = sorted(rates)
    dram = rates[sizes[-1]]
    fast = [s for s in sizes[:-1] if rates[s] >= FASTER_THAN_DRAM * dram]
    if not fast:
        return None
    return next(s for s in sizes if s > fast[-1])


def read_rates(sizes: list[int]) -> dict[int, float] | None:
    """Bytes a second one core re-reads a buffer of each size at (harness/timing.read_rates, in a trusted worker)."""
    from kernelsmith.evaluation import runner

    try:
        rates = runner.run_job({"kind": "cpu_caches", "device": "cpu", "sizes": sizes}, 300.0)["rates"]
    except runner.JobFailed:
        return None
    return {int(size): rate for size, rate in rates.items()}


def _cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def _model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")


def _kept_path() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernelsmith" / "cpu_caches.json"


def _read_kept() -> dict:
    try:
        return json.loads(_kept_path().read_text())
    except (OSError, ValueError):
        return {}


def _write_kept(kept: dict) -> None:
    """Atomically (two profiles may measure at once; either's answer will do)."""
    path = _kept_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(kept, indent=1))
        temporary.replace(path)
    except OSError:
        pass  # measured again next time
