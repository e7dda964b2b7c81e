"""runner.compute_lock: a job that times has its GPU alone, however the job's CUDA_VISIBLE_DEVICES spells it.

A bench pins its slots by index while a user's `kernelsmith eval` beside it sees every GPU; both must
take the lock of the same physical GPU, or a verify runs on the GPU under another session's timed runs.
A fake nvidia-smi on PATH names two GPUs."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import GPU_A, GPU_B, job_fails
from kernelsmith.evaluation import gpu_lock, runner

A, B = GPU_A, GPU_B


@pytest.mark.parametrize("visible, keys", [("0", [A]), (A, [A]), ("GPU-aaaa", [A]), ("1,0", [A, B]),
                                           (None, [A, B]), ("", ["none"])])
def test_every_spelling_of_a_gpu_names_the_same_lock(two_gpus, visible, keys):
    assert gpu_lock.gpu_keys(visible) == keys


def test_a_job_seeing_every_gpu_waits_for_one_pinned_by_index(two_gpus, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    order, pinned_in = [], threading.Event()

    def pinned():
        with runner.extra_env({"CUDA_VISIBLE_DEVICES": "1"}), runner.compute_lock({"device": "cuda", "kind": "profile", "job_id": "a"}):
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
    monkeypatch.setattr(gpu_lock, "_GPUS", None)
    assert gpu_lock.gpu_keys("0") == ["0"] and gpu_lock.gpu_keys(None) == ["all"]
    gpu_lock._GPUS = None


def test_a_gpu_job_reports_its_wait_for_the_lock_and_its_hold_of_it(tmp_path, monkeypatch):
    """The pool's lanes queue for the GPU's lock; each GPU job says how long it waited and held it
    (bench/pool.py sums the holds per evaluation). Once the worker has imported, another holder keeps
    the lock 1 s after the job is sent; a CPU job takes no lock and reports none."""
    import select

    monkeypatch.setenv("KERNELSMITH_COMPUTE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")  # no nvidia-smi: the lock is named by the spelling
    monkeypatch.setattr(gpu_lock, "_GPUS", None)
    reports = {}
    for device in ("cuda", "cpu"):
        job = {"kind": "checksums", "device": device, "reference": str(tmp_path / "absent.py"), "seed": 0}
        with runner.Prestarted(job, 60) as worker:
            ready = select.poll()
            ready.register(worker.ready, select.POLLIN)  # not read: the job's run reads it
            assert ready.poll(60_000)
            failed = []
            with runner.compute_lock({"kind": "profile", "device": "cuda", "job_id": "first"}):  # times: exclusive
                thread = threading.Thread(target=lambda: failed.append(job_fails(worker, {"runs": [], "seed": 0})))
                thread.start()
                time.sleep(1.0)
            thread.join(60)
            assert failed == [True]  # no reference (and no GPU): the job fails, its lock times stay
            reports[device] = worker.gpu_lock
    assert reports["cuda"]["lock_wait"] >= 0.9 and reports["cuda"]["lock_held"] > 0
    assert reports["cpu"] == {}
    gpu_lock._GPUS = None

