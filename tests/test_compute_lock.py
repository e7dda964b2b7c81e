"""runner.compute_lock: a job that times has its GPU alone, however the job's CUDA_VISIBLE_DEVICES spells it.

A bench pins its slots by index while a user's `kernelsmith eval` beside it sees every GPU; both must
take the lock of the same physical GPU, or a verify runs on the GPU under another session's timed runs.
A fake nvidia-smi on PATH names two GPUs."""

from __future__ import annotations

import os
import threading
import time

import pytest
from pathlib import Path

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



PHASED_WORKER = """
import json, sys, time
from kernelsmith.harness import gpu_phase
gpu_phase.claim()
log = lambda what: print(json.dumps([what, time.time()]), flush=True)
log("compiling")  # the shared phase: another job's shared hold does not keep it out
time.sleep(0.3)
with gpu_phase.alone():
    log("alone")
    time.sleep(0.8)
    log("timed")
time.sleep(0.3)
log("done")
"""


HOLD_S = 3.0


def _hold_shared(events: list, name: str, start_after: float, hold_s: float) -> threading.Thread:
    """A verify-like job that holds the GPU shared for hold_s, asked for start_after seconds from now."""
    def hold():
        time.sleep(start_after)
        events.append([f"{name} asks", time.time()])
        with runner.compute_lock({"kind": "candidate", "device": "cuda", "job_id": name}):
            events.append([f"{name} in", time.time()])
            time.sleep(hold_s)
            events.append([f"{name} out", time.time()])

    thread = threading.Thread(target=hold)
    thread.start()
    return thread


def test_a_phased_job_computes_beside_others_and_has_the_gpu_alone_only_to_time(tmp_path, monkeypatch):
    """Synth's rubric (gpu_lock.PHASED_JOBS) holds its GPU shared, so its compile runs beside a verify
    that holds the GPU; its timing waits until that verify has left, and a verify asked for during the
    timing waits until the timing is over. A real worker process asks over the job's pipes."""
    import json
    import subprocess
    import sys

    monkeypatch.setenv("KERNELSMITH_COMPUTE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(gpu_lock, "_GPUS", None)
    job = {"kind": "rubric", "device": "cuda", "job_id": "rubric"}
    channel = runner.PhaseChannel.for_job(job)
    events: list = []
    # verify 1 holds the GPU while the rubric compiles: 3 s, so that the worker's start (0.3-2 s on 2 busy cores)
    # ends inside it
    first = _hold_shared(events, "verify 1", 0.0, HOLD_S)
    time.sleep(0.1)
    env = {**runner._worker_env(job), "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", PHASED_WORKER], pass_fds=job["pass_fds"], env=env,
                            stdout=subprocess.PIPE, text=True)
    for fd in job.pop("phase_fds"):
        os.close(fd)
    second = _hold_shared(events, "verify 2", HOLD_S + 0.2, 0.2)  # asked for while the rubric times alone
    with runner.compute_lock(job) as holder:
        assert channel.serving(holder).wait(proc, 30) == 0
    first.join(10), second.join(10)
    channel.close()
    events += [json.loads(line) for line in proc.stdout.read().splitlines()]
    at = dict(events)
    assert at["compiling"] < at["verify 1 out"]  # computed beside the verify
    assert at["alone"] >= at["verify 1 out"]  # timed only once the verify had left
    assert at["alone"] < at["verify 2 asks"] < at["timed"] <= at["verify 2 in"]  # it waited for the timing
    # it held the GPU alone for its 0.8 s of timing, and waited from its ask (0.3 s after compiling) to verify 1's end
    waited = at["verify 1 out"] - (at["compiling"] + 0.3)
    assert channel.seconds()["lock_alone"] >= 0.7 and channel.seconds()["lock_alone_wait"] >= waited - 0.1 > 0.4
    gpu_lock._GPUS = None


COMPILING_WORKER = """
import json, sys, time
import torch
from kernelsmith.harness import gpu_phase
gpu_phase.claim()
log = lambda what: print(json.dumps([what, time.time()]), flush=True)

def f(x):
    return torch.sin(x) * 2.0 + torch.cos(x).sum()

log("compiling")
with gpu_phase.unheld_while_compiling():
    out = torch.compile(f, fullgraph=True)(torch.ones(64))
log("ran")
time.sleep(1.5)  # shared again, to the job's end
log("done")
"""


def _hold_alone(events: list, name: str, started) -> threading.Thread:
    """A profile-like job that asks for the GPU alone once `started` is set, and holds it 1 s."""
    def hold():
        started.wait(60)
        time.sleep(0.2)
        events.append([f"{name} asks", time.time()])
        with runner.compute_lock({"kind": "profile", "device": "cuda", "job_id": name}):
            events.append([f"{name} in", time.time()])
            time.sleep(1.0)
            events.append([f"{name} out", time.time()])

    thread = threading.Thread(target=hold)
    thread.start()
    return thread


def _run_compiling_worker(tmp_path, monkeypatch, job: dict):
    """The worker's exit code and the events of it and of a profile that asked for the GPU as it compiled."""
    import json
    import subprocess
    import sys

    monkeypatch.setenv("KERNELSMITH_COMPUTE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # a cold compile: seconds long
    monkeypatch.setattr(gpu_lock, "_GPUS", None)
    channel = runner.PhaseChannel.for_job(job)
    events, started = [], threading.Event()
    env = {**runner._worker_env(job), "PYTHONPATH": str(Path(__file__).parents[1])}
    with runner.compute_lock(job) as holder:
        proc = subprocess.Popen([sys.executable, "-c", COMPILING_WORKER], pass_fds=job["pass_fds"], env=env,
                                stdout=subprocess.PIPE, text=True)
        for fd in job.pop("phase_fds"):
            os.close(fd)
        reader = threading.Thread(target=lambda: [events.append(json.loads(line)) or started.set()
                                                  for line in proc.stdout])
        reader.start()
        profile = _hold_alone(events, "profile", started)
        code = channel.serving(holder).wait(proc, 120)
    started.set()
    reader.join(10), profile.join(30)
    channel.close()
    gpu_lock._GPUS = None
    return code, dict(events)


def test_a_composed_task_holds_no_gpu_lock_while_torch_compile_generates_code(tmp_path, monkeypatch):
    """A job waiting for the GPU alone waited for every rubric job's compile in flight (seconds of code
    generation that run no GPU kernel): on an H100 the rubric's timing stage was 7 s a task, almost all
    that wait. A trusted rubric job lets its hold go from dynamo's compile start to its end, and holds the
    GPU shared again before the compiled code runs: the profile asked for during the compile gets the GPU
    then, and the compiled code runs only once it has left."""
    code, at = _run_compiling_worker(tmp_path, monkeypatch, {"kind": "rubric", "device": "cuda", "job_id": "r",
                                                             "compile_unheld": True})
    assert code == 0
    assert at["compiling"] < at["profile asks"] < at["profile in"] < at["done"]  # not kept out by the whole job
    assert not at["profile in"] < at["ran"] < at["profile out"]  # no compiled code ran beside its timing
    assert at["ran"] >= at["profile out"] or at["profile in"] >= at["ran"]


def test_an_untrusted_task_cannot_give_its_gpu_hold_away(tmp_path, monkeypatch):
    """A task an LLM wrote runs in a job without "compile_unheld": asking to hold nothing ends its channel,
    its worker fails, and the profile waits for the job's end."""
    code, at = _run_compiling_worker(tmp_path, monkeypatch, {"kind": "rubric", "device": "cuda", "job_id": "r"})
    assert code != 0 and "ran" not in at
    assert at["profile in"] > at["compiling"]


def test_without_the_pipes_a_phased_step_is_no_wait():
    """On the CPU, or a rubric run by hand, there is no parent to ask: the timing just runs."""
    from kernelsmith.harness import gpu_phase

    start = time.perf_counter()
    with gpu_phase.alone():
        pass
    assert time.perf_counter() - start < 0.1
