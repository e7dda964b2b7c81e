"""runner.compute_lock: one job at a time on a GPU however the job's CUDA_VISIBLE_DEVICES spells it.

A bench pins its slots by index while a user's `kernelsmith eval` beside it sees every GPU; both must
take the lock of the same physical GPU, or a verify runs on the GPU under another session's timed runs.
A fake nvidia-smi on PATH names two GPUs."""

from __future__ import annotations

import threading
import time

import pytest

from kernelsmith.evaluation import runner

A, B = "GPU-aaaa1111-2222-3333-4444-555566667777", "GPU-bbbb1111-2222-3333-4444-555566667777"


@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho '0, {A}'\necho '1, {B}'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    monkeypatch.setenv("KERNELSMITH_COMPUTE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(runner, "_GPUS", None)
    yield
    runner._GPUS = None


@pytest.mark.parametrize("visible, keys", [("0", [A]), (A, [A]), ("GPU-aaaa", [A]), ("1,0", [A, B]),
                                           (None, [A, B]), ("", ["none"])])
def test_every_spelling_of_a_gpu_names_the_same_lock(two_gpus, visible, keys):
    assert runner.gpu_keys(visible) == keys


def test_a_job_seeing_every_gpu_waits_for_one_pinned_by_index(two_gpus, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    order, pinned_in = [], threading.Event()

    def pinned():
        with runner.extra_env({"CUDA_VISIBLE_DEVICES": "1"}), runner.compute_lock({"device": "cuda", "kind": "judge", "job_id": "a"}):
            pinned_in.set()
            time.sleep(0.5)
            order.append("pinned done")

    thread = threading.Thread(target=pinned)
    thread.start()
    pinned_in.wait(10)
    with runner.compute_lock({"device": "cuda", "kind": "candidate", "job_id": "b"}):  # no CUDA_VISIBLE_DEVICES: both GPUs
        order.append("unpinned in")
    thread.join()
    assert order == ["pinned done", "unpinned in"]


def test_without_nvidia_smi_the_spelling_is_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi anywhere
    monkeypatch.setattr(runner, "_GPUS", None)
    assert runner.gpu_keys("0") == ["0"] and runner.gpu_keys(None) == ["all"]
    runner._GPUS = None
