"""How many bytes a CPU profile writes before each timed run to evict the last run's data (the CPU's L2Flusher),
decided here, on the trusted side, and passed to the profile worker in its job.

The rule is twice the last-level caches sysfs reports (harness/timing.cpu_flush_bytes). A virtual machine is
often shown its host's whole cache: this project's 2-core CI machine reports one 480 MiB L3, while one of its
cores re-reads 32 MiB at 21 GB/s and 64 MiB at DRAM's 8 GB/s. Writing 960 MiB before each of a profile's 100
runs took 16 of its 20 seconds. So the reported size is capped by a measurement, taken once per machine and
kept in the cache folder: the smallest buffer, doubling from 4 MiB, that one core re-reads no faster than
1.5x the largest (the first size past the cache), times the CPUs this process may run on (each may sit on a
cache of its own). Where no size reads faster than DRAM the measurement says nothing and sysfs stands.
KERNELSMITH_CPU_FLUSH_BYTES (a number of bytes, or with K, M or G) sets the size outright."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from kernelsmith.errors import BadInput

FASTER_THAN_DRAM = 1.5  # a size read this much faster than the largest is still (partly) in a cache
SMALLEST = 4 << 20
LARGEST = 1 << 30
READ_S = 0.05  # per size and repetition


def job_fields(device: str) -> dict:
    """What a profile or baselines job carries about the flush: its size on the CPU, nothing on a GPU."""
    return {"flush_bytes": flush_bytes()} if device == "cpu" else {}


def flush_bytes() -> int:
    """What the CPU profile's flush writes on this machine."""
    from kernelsmith.harness import timing  # (torch, imported only when a CPU profile needs it)

    override = os.environ.get("KERNELSMITH_CPU_FLUSH_BYTES", "").strip()
    if override:
        return parse_bytes(override)
    reported = timing.cpu_flush_bytes()
    measured = measured_cache_bytes(reported // 2)
    if measured is None:
        return reported
    return max(timing.CPU_FLUSH_MIN_BYTES, min(reported, 2 * measured * len(_cpus())))


def parse_bytes(text: str) -> int:
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit() or int(digits) * scale < (1 << 20):
        raise BadInput(f"KERNELSMITH_CPU_FLUSH_BYTES={text!r} is not a size of at least 1M (bytes, or with K, M, G)")
    return int(digits) * scale


def measured_cache_bytes(reported: int) -> int | None:
    """The first buffer size past one core's caches (module docstring), measured once and kept; None where
    the measurement saw no cache."""
    key = f"{platform.processor() or platform.machine()}|{_model()}|{reported}"
    kept = _read_kept()
    if key not in kept:
        kept[key] = first_size_past_the_cache(read_bandwidths(_sizes(reported)))
        _write_kept(kept)
    return kept[key]


def first_size_past_the_cache(bandwidth: dict[int, float]) -> int | None:
    """The smallest size after the last one read FASTER_THAN_DRAM times as fast as the largest; None if none is."""
    sizes = sorted(bandwidth)
    dram = bandwidth[sizes[-1]]
    fast = [s for s in sizes[:-1] if bandwidth[s] >= FASTER_THAN_DRAM * dram]
    if not fast:
        return None
    return next(s for s in sizes if s > fast[-1])


def read_bandwidths(sizes: list[int]) -> dict[int, float]:
    """Bytes a second one thread re-reads each buffer size at, the best of three."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {size: max(_read_rate(torch.ones(size // 4)) for _ in range(3)) for size in sizes}
    finally:
        torch.set_num_threads(threads)


def _read_rate(buffer) -> float:
    buffer.sum()  # the first read brings it in as far as it fits
    start, reads = time.perf_counter(), 0
    while time.perf_counter() - start < READ_S:
        buffer.sum()
        reads += 1
    return reads * buffer.numel() * 4 / (time.perf_counter() - start)


def _sizes(reported: int) -> list[int]:
    """4 MiB doubling to twice the reported cache (at least 64 MiB, at most 1 GiB): the last is past any cache."""
    top = min(LARGEST, max(2 * reported, 64 << 20))
    sizes, size = [], SMALLEST
    while size <= top:
        sizes.append(size)
        size *= 2
    return sizes


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
