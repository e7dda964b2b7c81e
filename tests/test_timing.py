"""The harness's timing primitives that need no GPU: the CPU cache flush's size, read from the machine and capped
by what one core measurably caches (evaluation/cpu_caches.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelsmith.evaluation import cpu_caches
from kernelsmith.harness import timing

CPUS = sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity") else [0]


def fake_cpu(root: Path, cpu: int, caches: list[tuple[int, str, str, str]]) -> None:
    """sysfs's cache entries of one CPU: (level, type, size, shared_cpu_list)."""
    for i, (level, kind, size, shared) in enumerate(caches):
        index = root / f"cpu{cpu}" / "cache" / f"index{i}"
        index.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            (index / name).write_text(f"{value}\n")


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs in this process's affinity")
@pytest.mark.parametrize("l3, expected_mb", [
    ([("32768K", "{a}-{b}"), ("32768K", "{a}-{b}")], 64),  # one L3 both CPUs share: counted once
    ([("96M", "{a}"), ("96M", "{b}")], 384),  # one L3 each (two chiplets): both are flushed
    ([("512K", "{a}-{b}"), ("512K", "{a}-{b}")], 32),  # a small cache: the floor
])
def test_the_cpu_flush_writes_twice_the_last_level_caches(tmp_path, l3, expected_mb):
    a, b = CPUS
    for cpu, (size, shared) in zip(CPUS, l3):
        fake_cpu(tmp_path, cpu, [(1, "Data", "32K", str(cpu)), (1, "Instruction", "32K", str(cpu)),
                                 (2, "Unified", "1024K", str(cpu)), (3, "Unified", size, shared.format(a=a, b=b))])
    assert timing.cpu_flush_bytes(str(tmp_path)) == expected_mb << 20


def test_without_cache_information_the_flush_keeps_its_fixed_size(tmp_path):
    assert timing.cpu_flush_bytes(str(tmp_path)) == timing.CPU_FLUSH_BYTES
    fake_cpu(tmp_path, CPUS[0], [(3, "Unified", "lots", str(CPUS[0]))])  # unreadable size: no information
    assert timing.cpu_flush_bytes(str(tmp_path)) == timing.CPU_FLUSH_BYTES


def test_this_machines_flush_covers_its_last_level_cache():
    """On the machine the suite runs on: twice whatever sysfs reports as its largest data cache, unless one core
    measurably caches less (a VM shown its host's cache), and then twice that per CPU."""
    sysfs = timing.cpu_flush_bytes()
    sizes = [timing._cache(p) for p in Path(timing.CPU_CACHES).glob("cpu*/cache/index*")]
    largest = max((s[2] for s in sizes if s), default=0)
    assert sysfs >= 2 * largest and sysfs >= timing.CPU_FLUSH_MIN_BYTES
    fields = cpu_caches.job_fields("cpu")
    flush, measured = timing.cpu_flush_size(fields.get("flush_bytes"), fields.get("flush_cap_bytes")), \
        cpu_caches.measured_cache_bytes()
    assert timing.CPU_FLUSH_MIN_BYTES <= flush <= sysfs
    assert measured is None or flush == max(timing.CPU_FLUSH_MIN_BYTES, min(sysfs, 2 * measured * len(CPUS)))


def test_the_first_size_past_the_cache_is_where_reads_fall_to_drams_rate():
    mib = 1 << 20
    rates = {4 * mib: 40.0, 8 * mib: 21.0, 16 * mib: 21.5, 32 * mib: 21.0, 64 * mib: 7.9, 128 * mib: 8.1, 256 * mib: 8.0}
    assert cpu_caches.first_size_past_the_cache(rates) == 64 * mib
    assert cpu_caches.first_size_past_the_cache({k: 8.0 for k in rates}) is None  # no cache shows: sysfs stands
    assert cpu_caches.first_size_past_the_cache({**rates, 64 * mib: 20.0, 128 * mib: 13.0}) == 256 * mib


def test_the_measurement_caps_a_reported_cache_once_per_machine(tmp_path, monkeypatch):
    """A VM reporting 480 MiB whose core caches under 64 MiB: the flush is twice 64 MiB per CPU, not 960 MiB,
    and the second profile reads the kept measurement instead of measuring again."""
    mib, measured = 1 << 20, []
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("KERNELSMITH_CPU_FLUSH_BYTES", raising=False)
    monkeypatch.setattr(cpu_caches, "_cpus", lambda: [0, 1])

    def rates(sizes):
        measured.append(sizes)
        return {s: 21.0 if s <= 32 * mib else 8.0 for s in sizes}

    monkeypatch.setattr(cpu_caches, "read_rates", rates)
    assert cpu_caches.job_fields("cpu") == cpu_caches.job_fields("cpu") == {"flush_cap_bytes": 256 * mib}
    assert len(measured) == 1 and max(measured[0]) == 1 << 30  # measured once, up to 1 GiB
    monkeypatch.setattr(timing, "cpu_flush_bytes", lambda: 960 * mib)
    assert timing.cpu_flush_size(None, 256 * mib) == 256 * mib
    assert timing.cpu_flush_size(None, 8 * mib) == timing.CPU_FLUSH_MIN_BYTES  # never under the floor
    monkeypatch.setattr(timing, "cpu_flush_bytes", lambda: 64 * mib)
    assert timing.cpu_flush_size(None, 256 * mib) == 64 * mib  # never more than sysfs's rule
    assert timing.cpu_flush_size(None, None) == 64 * mib and timing.cpu_flush_size(48 * mib, 256 * mib) == 48 * mib
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setattr(cpu_caches, "read_rates", lambda sizes: {s: 8.0 for s in sizes})
    assert cpu_caches.job_fields("cpu") == {}  # no cache seen: no cap, sysfs's rule


def test_the_measurement_runs_in_a_trusted_worker_with_torch():
    """The parent side imports no torch: the reads are a worker's job, and come back per size."""
    rates = cpu_caches.read_rates([4 << 20, 8 << 20])
    assert set(rates) == {4 << 20, 8 << 20} and all(rate > 1e8 for rate in rates.values())


@pytest.mark.parametrize("value, expected", [("64M", 64 << 20), ("2g", 2 << 30), (str(3 << 20), 3 << 20)])
def test_the_user_can_set_the_flush(monkeypatch, value, expected):
    monkeypatch.setenv("KERNELSMITH_CPU_FLUSH_BYTES", value)
    assert cpu_caches.job_fields("cpu") == {"flush_bytes": expected} and cpu_caches.job_fields("cuda") == {}
    assert timing.cpu_flush_size(expected, 8 << 20) == expected
    if expected <= 64 << 20:  # (not 2 GiB of this machine's memory)
        assert timing.L2Flusher("cpu", expected).nbytes == expected


@pytest.mark.parametrize("value", ["lots", "0", "512K", "-5M"])
def test_a_bad_flush_setting_is_a_one_line_error(monkeypatch, value):
    from kernelsmith.errors import BadInput

    monkeypatch.setenv("KERNELSMITH_CPU_FLUSH_BYTES", value)
    with pytest.raises(BadInput, match="KERNELSMITH_CPU_FLUSH_BYTES=.*at least 1M"):
        cpu_caches.job_fields("cpu")
