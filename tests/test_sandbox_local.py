"""LocalSandbox with real worker processes on the CPU device (tiny task and ctypes candidates of
conftest.py, so no torch-extension build except in the one slow_build test).

Most candidates here fail on purpose in their first forward call: the verify step then stops
after the candidate worker, without a judge worker, which halves the cost of a job (each
worker imports torch). Only the recovery test runs an honest candidate to the end.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from kernelsmith.evaluation.options import EvalOptions
from kernelsmith.sandbox.local import LocalSandbox, gpu_slots, visible_gpus

from conftest import HONEST

# Reports the worker's CUDA_VISIBLE_DEVICES through the one side channel every candidate has:
# its failure reason, which verify copies into result.error.
ECHO_ENV = '''
import os

class ModelNew(Base):
    def forward(self, x):
        raise RuntimeError("CVD=" + os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))
'''

# Stamps when its forward runs (inside the worker), holds the slot a while, then fails.
STAMP = '''
import time

class ModelNew(Base):
    def forward(self, x):
        start = time.time()
        time.sleep(1.0)
        with open({path!r}, "a") as f:
            f.write(f"{{start}} {{time.time()}}\\n")
        raise RuntimeError("stamped")
'''

HANG = '''
import time

class ModelNew(Base):
    def forward(self, x):
        time.sleep(3600)
'''

KILL_SELF = '''
import os, signal

class ModelNew(Base):
    def forward(self, x):
        os.kill(os.getpid(), signal.SIGKILL)
'''


def cpu_opts(**options) -> EvalOptions:
    options.setdefault("device", "cpu")
    options.setdefault("profile", False)
    options.setdefault("trials", 1)
    return EvalOptions(**options)


@pytest.fixture(autouse=True)
def _builds_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSMITH_BUILD_DIR", str(tmp_path / "builds"))  # workers inherit it


# --- slots (no workers) ----------------------------------------------------------------------


def test_slots_default_to_one_cpu_slot_and_half_the_cores():
    with LocalSandbox("cpu") as sandbox:
        assert [s.label for s in sandbox.slots] == ["cpu"] and sandbox.slots[0].env == {}
        assert sandbox.build_workers == max(1, os.cpu_count() // 2)
        assert sandbox.stats()["busy_s"] == {"cpu": 0.0, "build": 0.0}


def test_gpu_indices_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in gpu_slots([0, 1])] == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5, 7,-1,2")  # CUDA stops at the first negative entry
    assert visible_gpus() == ["5", "7"]
    slots = gpu_slots([1, 0])
    assert [(s.label, s.env["CUDA_VISIBLE_DEVICES"]) for s in slots] == [("gpu 1", "7"), ("gpu 0", "5")]
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in gpu_slots(None)] == ["5", "7"]
    with pytest.raises(ValueError, match="GPU 2 is not visible"):
        gpu_slots([2])


def test_cuda_without_visible_gpus_refuses_readably(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(RuntimeError, match="no visible GPU"):
        LocalSandbox("cuda")


def test_evals_per_gpu_gives_a_gpu_that_many_slots_pinned_to_it(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with LocalSandbox("cuda", gpus=[0, 1], evals_per_gpu=2) as sandbox:
        assert [(s.label, s.env["CUDA_VISIBLE_DEVICES"]) for s in sandbox.slots] == [
            ("gpu 0.0", "0"), ("gpu 0.1", "0"), ("gpu 1.0", "1"), ("gpu 1.1", "1")]
    with LocalSandbox("cpu", evals_per_gpu=2) as sandbox:  # CPU timings would share the cores: never
        assert [s.label for s in sandbox.slots] == ["cpu"]


def test_a_gpu_job_is_sent_only_while_no_other_job_holds_that_gpu(tmp_path, monkeypatch):
    """Evaluations sharing a GPU overlap only where it is idle: the parent sends a GPU job to its (already
    started) worker once it holds the GPU's compute lock, so no two jobs' GPU work meets. Here the lock is
    held from outside; a job for that GPU waits, one for another GPU and a CPU job do not."""
    import fcntl
    import threading

    from kernelsmith.evaluation import runner

    monkeypatch.setenv("KERNELSMITH_COMPUTE_LOCK_DIR", str(tmp_path / "locks"))
    (tmp_path / "locks").mkdir()
    job = {"kind": "checksums", "reference": str(tmp_path / "missing.py"), "seed": 1, "precision": "fp32",
           "runs": []}

    def sent_after(device: str, gpu: str, finished: dict) -> None:
        with runner.extra_env({"CUDA_VISIBLE_DEVICES": gpu}):
            try:
                runner.run_job({**job, "device": device}, 60)
            except runner.JobFailed:
                pass  # no such reference (and no GPU here): the worker fails once it gets its job
        finished[(device, gpu)] = time.monotonic()

    finished: dict = {}
    with open(tmp_path / "locks" / "gpu-0.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another evaluation's job runs on GPU 0
        threads = [threading.Thread(target=sent_after, args=(d, g, finished)) for d, g in
                   (("cuda", "0"), ("cuda", "1"), ("cpu", "0"))]
        for thread in threads:
            thread.start()
        threads[1].join(60)
        threads[2].join(60)
        time.sleep(1.0)
        released = time.monotonic()
        assert ("cuda", "0") not in finished  # still waiting for GPU 0
        fcntl.flock(held, fcntl.LOCK_UN)
    threads[0].join(60)
    assert finished[("cuda", "0")] > released
    assert finished[("cuda", "1")] < released and finished[("cpu", "0")] < released


# --- evaluations in real workers -------------------------------------------------------------


def test_one_slot_runs_one_evaluation_at_a_time(task_dir, candidate, tmp_path, monkeypatch):
    stamps = tmp_path / "stamps.txt"
    monkeypatch.setenv("KERNELSMITH_JAIL_WRITABLE", str(tmp_path))  # the jailed candidates stamp their times there
    paths = [candidate(STAMP.format(path=str(stamps))) for _ in range(2)]
    with LocalSandbox("cpu") as sandbox:
        futures = [sandbox.submit_evaluate(opts=cpu_opts(), reference=task_dir / "model.py", candidate=p)
                   for p in paths]
        results = [f.result(timeout=120) for f in futures]
        stats = sandbox.stats()
    assert all("stamped" in r.error for r in results), [r.error for r in results]
    # the sandbox's busy intervals do not overlap ...
    held = sorted((job["start"], job["end"]) for job in stats["recent"])
    assert len(held) == 2 and held[0][1] <= held[1][0], held
    # ... and each worker's forward ran inside one of them (measured in the workers themselves)
    ran = sorted(tuple(map(float, line.split())) for line in stamps.read_text().splitlines())
    assert len(ran) == 2 and ran[0][1] <= ran[1][0], ran
    for (held_start, held_end), (run_start, run_end) in zip(held, ran):
        assert held_start <= run_start and run_end <= held_end
    assert stats["jobs"]["evaluate"] == {"done": 2, "failed": 2, "errors": 0}
    assert stats["busy_s"]["cpu"] >= 2.0


def test_each_slot_pins_its_gpu_for_its_workers(task_dir, candidate, monkeypatch):
    """Two evaluations at once on two logical GPUs (device cpu, so no GPU is needed): each worker
    sees exactly its slot's CUDA_VISIBLE_DEVICES, and the parent's environment is untouched."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    path = candidate(ECHO_ENV)
    with LocalSandbox("cpu", gpus=[0, 1]) as sandbox:
        futures = [sandbox.submit_evaluate(opts=cpu_opts(), reference=task_dir / "model.py", candidate=path)
                   for _ in range(2)]
        results = [f.result(timeout=120) for f in futures]
    seen = set()
    for result in results:
        gpu = result.notes[-1].removeprefix("sandbox: local gpu ")
        assert result.error.endswith(f"CVD={gpu}"), (result.error, result.notes)
        seen.add(gpu)
    assert seen == {"0", "1"}  # both slots were used, one job each
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_hung_candidate_times_out_and_the_slot_serves_the_next_job(task_dir, candidate):
    with LocalSandbox("cpu") as sandbox:
        start = time.monotonic()
        hung = sandbox.evaluate_files(task_dir / "model.py", candidate(HANG), cpu_opts(timeout_s=10))
        assert time.monotonic() - start < 30  # the timeout plus the kill, not the hour of sleep
        assert not hung.correct and hung.stage == "verify"
        assert "timed out after 10 s" in hung.error and "killed" in hung.error
        assert hung.notes[-1] == "sandbox: local cpu"
        honest = sandbox.evaluate_files(task_dir / "model.py", candidate(HONEST), cpu_opts())
        assert honest.clean and honest.stage == "done", honest.error
        assert sandbox.stats()["jobs"]["evaluate"] == {"done": 2, "failed": 1, "errors": 0}


def test_worker_killing_itself_is_a_readable_failure_and_the_pool_goes_on(task_dir, candidate):
    with LocalSandbox("cpu") as sandbox:
        killed = sandbox.submit_evaluate(opts=cpu_opts(), reference=task_dir / "model.py",
                                         candidate=candidate(KILL_SELF))
        after = sandbox.submit_evaluate(opts=cpu_opts(), reference=task_dir / "model.py",
                                        candidate=candidate(ECHO_ENV))
        killed, after = killed.result(timeout=120), after.result(timeout=120)
    assert not killed.correct and killed.stage == "verify"
    assert "crashed: killed (SIGKILL)" in killed.error
    assert after.error.endswith("CVD=unset")  # the next job ran in a fresh worker, unpinned on the CPU slot


def test_harness_exception_becomes_a_rejected_result(tmp_path):
    """Not a workdir: evaluate_workdir raises inside the harness; the sandbox answers instead."""
    with LocalSandbox("cpu") as sandbox:
        result = sandbox.evaluate_workdir(tmp_path, cpu_opts())
        stats = sandbox.stats()
    assert not result.correct and result.stage == "sandbox" and result.reward == -1.0
    assert result.error.startswith("sandbox error: ") and "not a kernelsmith workdir" in result.error
    assert result.notes == ["sandbox: local cpu"]
    assert stats["jobs"]["evaluate"] == {"done": 1, "failed": 1, "errors": 1}
    assert stats["recent"][0]["slot"] == "cpu"


# --- builds ------------------------------------------------------------------------------------


def test_build_failures_come_back_as_dicts(tmp_path):
    missing = tmp_path / "missing" / "kernels"  # raises in the parent's cache check
    empty = tmp_path / "work" / "kernels"  # fails in the build worker
    empty.mkdir(parents=True)
    with LocalSandbox("cpu", build_workers=2) as sandbox:
        futures = [sandbox.submit_build(missing, "cpu"), sandbox.submit_build(empty, "cpu")]
        gone, nothing = (f.result(timeout=120) for f in futures)
        stats = sandbox.stats()
    assert gone["ok"] is False and gone["summary"].startswith("sandbox error: FileNotFoundError")
    assert nothing["ok"] is False and "no kernel sources" in nothing["summary"]
    assert stats["jobs"]["build"] == {"done": 2, "failed": 2, "errors": 1}
