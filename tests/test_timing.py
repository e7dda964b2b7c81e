"""The harness's timing primitives that need no GPU: the CPU cache flush's size, read from the machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
    """On the machine the suite runs on: at least twice whatever sysfs reports as its largest data cache."""
    flush = timing.cpu_flush_bytes()
    sizes = [timing._cache(p) for p in Path(timing.CPU_CACHES).glob("cpu*/cache/index*")]
    largest = max((s[2] for s in sizes if s), default=0)
    assert flush >= 2 * largest and flush >= timing.CPU_FLUSH_MIN_BYTES
