"""Timing primitives: device clocks captured before candidate import, L2 flush, persisting-L2 reset, GPU lock.

Method (KernelBench's timing.py, hardened): CUDA events around each call with a
full device synchronisation inside the timed interval (so side-stream work is
counted), an L2 flush larger than twice the L2 before every run, the persisting
L2 carve-out reset before every run, fresh input contents every run, and a host
clock around the same interval to cross-check the events.
"""

from __future__ import annotations

import ctypes
import fcntl
import glob
import os
import time
from contextlib import contextmanager
from pathlib import Path

import torch

CPU_FLUSH_BYTES = 128 << 20  # where the CPU's caches cannot be read
CPU_FLUSH_MIN_BYTES = 32 << 20
CPU_CACHES = "/sys/devices/system/cpu"
# A queued run starts behind a GPU spin of this many cycles (about 0.5 ms on an H200), longer than the
# host's path to the first kernel (dynamo's guards and Inductor's wrapper: 20-140 us there), so that path
# is hidden as in do_bench's back-to-back queue, whatever the flush's own length.
QUEUE_CYCLES = 1_000_000


class Clocks:
    """Private references to every clock the harness reads, taken before the candidate is imported."""

    def __init__(self, device: str, settle: bool = True):
        self.device = device
        # settle: a device sync before the start event. Without it the flush queued before the call is still
        # running when the host launches, which hides launch overhead as do_bench does, but lets work on a
        # side stream that is not ordered after the start event run before the timed interval begins.
        # Only trusted code (the baselines) is timed unsettled.
        self.settle = settle
        self.perf_counter = time.perf_counter
        self.monotonic = time.monotonic
        self.sleep = time.sleep
        if device == "cuda":
            self.event_cls = torch.cuda.Event
            self.elapsed = torch.cuda.Event.elapsed_time
            self.record = torch.cuda.Event.record
            self.synchronize = torch.cuda.synchronize
            self.spin = torch.cuda._sleep
        else:
            self.synchronize = lambda: None

    def time_call(self, fn, args, settle: bool | None = None) -> tuple[float, float, float, object]:
        """(stream ms, device-wide ms, host ms, output) of one call. settle overrides the clocks' own.

        The stream interval is start/end events on the current stream. The
        device-wide interval ends with an event recorded after a full device
        synchronisation, so it also covers work launched on other streams; a
        candidate whose device-wide time exceeds its stream time by more than
        eager's does is hiding work (profile.side_stream_violation).
        """
        if self.device != "cuda":
            t0 = self.perf_counter()
            out = fn(*args)
            host = (self.perf_counter() - t0) * 1e3
            return host, host, host, out
        start, end, after = (self.event_cls(enable_timing=True) for _ in range(3))
        if self.settle if settle is None else settle:
            self.synchronize()
        else:
            self.spin(QUEUE_CYCLES)
        t0 = self.perf_counter()
        self.record(start)
        out = fn(*args)
        self.record(end)
        self.synchronize()
        self.record(after)
        self.synchronize()
        host = (self.perf_counter() - t0) * 1e3
        return self.elapsed(start, end), self.elapsed(start, after), host, out


class L2Flusher:
    """Writes a buffer larger than twice the last-level cache before each run."""

    def __init__(self, device: str, cpu_bytes: int | None = None, cpu_cap: int | None = None):
        """On the CPU, what the trusted side sent in the job (evaluation/cpu_caches.py): the size the user set
        (cpu_bytes), or sysfs's rule capped by what one core measurably caches (cpu_cap), or sysfs's rule."""
        self.device = device
        if device == "cuda":
            l2 = torch.cuda.get_device_properties(0).L2_cache_size or (50 << 20)
            nbytes = max(4 * l2, 256 << 20)
        else:
            nbytes = cpu_flush_size(cpu_bytes, cpu_cap)
        self.nbytes = nbytes
        self.buffer = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
        self.cudart = _load_cudart() if device == "cuda" else None

    def flush(self) -> None:
        if self.cudart is not None:
            reset_persisting_l2(self.cudart)
        self.buffer.fill_(1.0)


def cpu_flush_size(cpu_bytes: int | None = None, cpu_cap: int | None = None) -> int:
    """The size the user set, else sysfs's rule (cpu_flush_bytes), capped by the measured cap where there is one."""
    if cpu_bytes:
        return int(cpu_bytes)
    reported = cpu_flush_bytes()
    return max(CPU_FLUSH_MIN_BYTES, min(reported, int(cpu_cap))) if cpu_cap else reported


def read_rates(sizes: list[int]) -> dict[str, float]:
    """Bytes a second one thread re-reads a float32 buffer of each size at (torch.sum), best of three: where the
    rate falls to DRAM's is past what one core caches (evaluation/cpu_caches.py asks, in a trusted worker)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {str(size): max(_read_rate(torch.ones(size // 4)) for _ in range(3)) for size in sizes}
    finally:
        torch.set_num_threads(threads)


def _read_rate(buffer: torch.Tensor, seconds: float = 0.05) -> float:
    buffer.sum()  # the first read brings it in as far as it fits
    start, reads = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        buffer.sum()
        reads += 1
    return reads * buffer.numel() * 4 / (time.perf_counter() - start)


def cpu_flush_bytes(root: str = CPU_CACHES) -> int:
    """Twice the last-level caches of the CPUs this process may run on, each shared cache counted once
    (an OpenMP kernel's data spreads over all of them), at least CPU_FLUSH_MIN_BYTES; CPU_FLUSH_BYTES
    where sysfs does not say. A fixed size was too small for a CPU with more cache than it, and on a
    32 MB one it cost every timed run twice the writes it needed."""
    caches = {}
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    for cpu in cpus:
        for index in glob.glob(f"{root}/cpu{cpu}/cache/index*"):
            cache = _cache(Path(index))
            if cache:
                caches[cache[:2]] = cache[2]  # (level, the CPUs sharing it): one entry per physical cache
    if not caches:
        return CPU_FLUSH_BYTES
    last = max(level for level, _ in caches)
    return max(2 * sum(size for (level, _), size in caches.items() if level == last), CPU_FLUSH_MIN_BYTES)


def _cache(index: Path) -> tuple[int, str, int] | None:
    """(level, shared CPU list, bytes) of one sysfs cache entry that holds data, or None."""
    try:
        kind = (index / "type").read_text().strip()
        level = int((index / "level").read_text())
        shared = (index / "shared_cpu_list").read_text().strip()
        size = (index / "size").read_text().strip().upper()
    except (OSError, ValueError):
        return None
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
    digits = size.rstrip("KMG")
    if kind == "Instruction" or not digits.isdigit():
        return None
    return level, shared, int(digits) * scale


def _load_cudart():
    """libcudart of the running torch, for the persisting-L2 calls torch does not expose."""
    site = Path(torch.__file__).parent.parent
    candidates = (glob.glob(str(site / "torch" / "lib" / "libcudart*.so*"))
                  + glob.glob(str(site / "nvidia" / "cu*" / "lib" / "libcudart.so*"))
                  + glob.glob(str(site / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so*"))
                  + ["libcudart.so", "libcudart.so.13", "libcudart.so.12"])
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06


def reset_persisting_l2(cudart) -> None:
    """Set the persisting-L2 limit to 0 and evict persisting lines (defeats access-policy windows)."""
    cudart.cudaDeviceSetLimit(CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(0))
    cudart.cudaCtxResetPersistingL2Cache()


@contextmanager
def gpu_lock(device: str, timeout_s: float = 3600.0):
    """One profile at a time per GPU (or per host for the CPU device), across processes."""
    ident = "cpu"
    if device == "cuda":
        ident = f"gpu-{_gpu_uuid()}"
    lock_dir = Path(os.environ.get("KERNELSMITH_LOCK_DIR", "/tmp/kernelsmith-locks"))
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{ident}.lock", "w") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another profile held {ident} for {timeout_s:.0f} s")
                time.sleep(0.2)
        try:
            yield ident
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _gpu_uuid() -> str:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = getattr(props, "uuid", None)
    return str(uuid) if uuid else f"{os.environ.get('CUDA_VISIBLE_DEVICES', '0')}-{torch.cuda.current_device()}"


def summarize(samples: list[float]) -> dict:
    ordered = sorted(samples)
    n = len(ordered)

    def pct(p: float) -> float:
        return ordered[min(n - 1, max(0, round(p * (n - 1))))]

    return {"median": pct(0.5), "p10": pct(0.1), "p90": pct(0.9), "min": ordered[0], "max": ordered[-1], "n": n,
            "mean": sum(ordered) / n}


class Phases:
    """Wall seconds per phase of a worker's job, for the parent's breakdown of where an evaluation's time
    goes (`EvalResult.seconds`). Reported by the worker, so informational only: nothing is judged by it."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def mark(self, name: str) -> None:
        """The time since the previous mark counts to `name` (phases named twice add up)."""
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._last, 3)
        self._last = now
