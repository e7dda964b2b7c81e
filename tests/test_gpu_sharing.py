"""The GPU's readers-writer lock (evaluation/gpu_lock.py): verifies share a GPU, anything that times has it
alone, and neither side starves the other.

The attack it must stop: a candidate whose verify runs on the GPU while another lane's profile times
there slows that lane's eager (or its own competitor) and buys a speed-up. So the property checked is
the invariant itself, over many holders of random kinds on two GPUs and across processes: whenever an
exclusive holder is inside, it is alone on each of its GPUs."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time

import pytest

from conftest import GPU_A, GPU_B
from kernelsmith.evaluation import runner

A, B = GPU_A, GPU_B
SHARED = ("candidate", "judge", "checksums", "lint")
EXCLUSIVE = ("profile", "baselines", "a-kind-added-later")  # what times, and what no one named
PHASED = ("rubric",)  # shared while it computes; alone while it times (gpu_lock.Switchable)


@pytest.fixture(autouse=True)
def one_gpu_pinned(two_gpus, monkeypatch):
    """Two GPUs by nvidia-smi; a holder uses the first unless it says otherwise; sharing as shipped."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.delenv("KERNELSMITH_GPU_SHARING", raising=False)


def job(kind: str) -> dict:
    return {"device": "cuda", "kind": kind, "job_id": kind}


class Holder(threading.Thread):
    """Takes the lock for `kind` and keeps it until released; `inside` is set once it holds it."""

    def __init__(self, kind: str, log: list | None = None, visible: str = "0"):
        super().__init__(daemon=True)
        self.kind, self.log, self.visible = kind, log if log is not None else [], visible
        self.inside, self.release = threading.Event(), threading.Event()

    def run(self) -> None:
        with runner.extra_env({"CUDA_VISIBLE_DEVICES": self.visible}), runner.compute_lock(job(self.kind)):
            self.log.append(f"{self.kind} in")
            self.inside.set()
            self.release.wait(30)
            self.log.append(f"{self.kind} out")

    def leave(self) -> None:
        self.release.set()
        self.join(30)
        assert not self.is_alive()


def started(kind: str, log: list | None = None, wait: bool = True) -> Holder:
    holder = Holder(kind, log)
    holder.start()
    if wait:
        assert holder.inside.wait(10), f"{kind} never got the lock"
    return holder


@pytest.mark.parametrize("first, second", [("candidate", "judge"), ("judge", "checksums"), ("checksums", "candidate"),
                                           ("lint", "candidate"), ("rubric", "candidate"), ("judge", "rubric")])
def test_jobs_that_only_compute_and_compare_share_the_gpu(first, second):
    one = started(first)
    two = started(second)  # asserts it got in while the first still holds
    two.leave()
    one.leave()


@pytest.mark.parametrize("timed", EXCLUSIVE)
@pytest.mark.parametrize("other", SHARED + ("profile",))
def test_a_job_that_times_never_holds_the_gpu_with_another(timed, other):
    for first, second in ((other, timed), (timed, other)):
        one = started(first)
        two = started(second, wait=False)
        assert not two.inside.wait(0.5), f"{second} got the GPU while {first} held it"
        one.leave()
        assert two.inside.wait(10)
        two.leave()


def test_a_rubric_retried_alone_holds_the_gpu_alone():
    """A rubric that ran out of memory beside others is judged again with the GPU to itself throughout."""
    one = started("candidate")
    alone = threading.Event()

    def retried():
        with runner.extra_env({"CUDA_VISIBLE_DEVICES": "0"}), runner.compute_lock({**job("rubric"), "alone": True}):
            alone.set()

    thread = threading.Thread(target=retried, daemon=True)
    thread.start()
    assert not alone.wait(0.5), "a rubric retried alone got the GPU while a verify held it"
    one.leave()
    assert alone.wait(10)
    thread.join(10)


def test_a_waiting_profile_keeps_later_verifies_out_until_it_has_run():
    """flock prefers no one: without the gate, verifies that keep overlapping starve the profile."""
    log: list = []
    first = started("candidate", log)
    profile = started("profile", log, wait=False)
    time.sleep(0.3)  # the profile is queued
    later = started("judge", log, wait=False)
    assert not later.inside.wait(0.5), "a verify that came after a waiting profile went in before it"
    first.leave()
    assert profile.inside.wait(10)
    assert not later.inside.wait(0.3)
    profile.leave()
    assert later.inside.wait(10)
    later.leave()
    assert log.index("profile out") < log.index("judge in")


def test_a_waiting_verify_keeps_the_next_profile_behind_it():
    log: list = []
    first = started("profile", log)
    verify = started("candidate", log, wait=False)
    time.sleep(0.3)
    second = Holder("baselines", log)
    second.start()
    time.sleep(0.3)
    first.leave()
    assert verify.inside.wait(10)
    assert not second.inside.wait(0.3), "the next profile went in before the verify that waited longer"
    verify.leave()
    assert second.inside.wait(10)
    second.leave()


def test_sharing_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("KERNELSMITH_GPU_SHARING", "exclusive")
    one = started("candidate")
    two = started("judge", wait=False)
    assert not two.inside.wait(0.5)
    one.leave()
    assert two.inside.wait(10)
    two.leave()


HOLD_IN_CHILD = """
import sys, time
from kernelsmith.evaluation import runner
with runner.compute_lock({"device": "cuda", "kind": sys.argv[1], "job_id": "child"}):
    print("in", flush=True)
    sys.stdin.readline()
"""


@pytest.mark.parametrize("child, parent", [("profile", "candidate"), ("judge", "baselines")])
def test_another_process_holding_the_gpu_is_respected(child, parent):
    """Two kernelsmith processes on one GPU: a user's eval beside a bench."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_IN_CHILD, child], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "in"
        mine = started(parent, wait=False)
        assert not mine.inside.wait(0.5), f"{parent} got the GPU while another process's {child} held it"
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert mine.inside.wait(10)
        mine.leave()
    finally:
        proc.kill()
        proc.wait()


def test_many_holders_of_every_kind_on_two_gpus_never_break_exclusion():
    """Seeded random kinds, GPUs (one, the other, both) and hold times; each holder checks on entry that
    no exclusive holder is on its GPUs, and an exclusive one that no holder at all is. A deadlock of the
    sorted two-GPU takes would leave threads alive."""
    rng = random.Random(20261204)
    state = {A: {"shared": 0, "exclusive": 0}, B: {"shared": 0, "exclusive": 0}}
    guard, broken, overlaps, phases = threading.Lock(), [], [], {"alone": 0}
    gpus = {"0": [A], "1": [B], "0,1": [A, B]}

    def enter(kind: str, visible: str, mode: str) -> None:
        with guard:
            for gpu in gpus[visible]:
                others = state[gpu]
                if others["exclusive"] or (mode == "exclusive" and others["shared"]):
                    broken.append((kind, gpu, dict(others)))
                if mode == "shared" and others["shared"]:
                    overlaps.append(kind)
                others[mode] += 1

    def leave(visible: str, mode: str) -> None:
        with guard:
            for gpu in gpus[visible]:
                state[gpu][mode] -= 1

    def one(kind: str, visible: str, hold_s: float) -> None:
        mode = "shared" if kind in SHARED + PHASED else "exclusive"
        with runner.extra_env({"CUDA_VISIBLE_DEVICES": visible}), runner.compute_lock(job(kind)) as held:
            enter(kind, visible, mode)
            time.sleep(hold_s)
            leave(visible, mode)
            if kind in PHASED:  # its timing: let the shared hold go, take the GPU alone, then shared again
                held.take(share=False)
                phases["alone"] += 1
                enter(kind, visible, "exclusive")
                time.sleep(hold_s)
                leave(visible, "exclusive")
                held.take(share=True)
                enter(kind, visible, "shared")
                leave(visible, "shared")

    def lane(seed: int) -> None:
        lane_rng = random.Random(seed)
        for _ in range(12):
            kind = lane_rng.choice(SHARED * 2 + EXCLUSIVE + PHASED * 2)
            one(kind, lane_rng.choice(["0", "0", "1", "0,1"]), lane_rng.uniform(0.0, 0.02))

    threads = [threading.Thread(target=lane, args=(rng.randrange(1 << 30),), daemon=True) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(t.is_alive() for t in threads), "holders deadlocked"
    assert broken == []
    assert overlaps, "no two verifies ever shared a GPU: the shared mode did nothing"
    assert phases["alone"], "no rubric ever timed: the phased mode was not exercised"
