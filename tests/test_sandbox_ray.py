"""RaySandbox on a local Ray instance: CPU only, two logical GPUs (two evaluation actors).

The candidates are the ctypes ones of conftest.py, so no torch-extension build is needed.
"""

from __future__ import annotations

import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from conftest import HONEST  # noqa: E402

from kernelsmith.evaluation.options import EvalOptions  # noqa: E402
from kernelsmith.sandbox import ray_pool  # noqa: E402
from kernelsmith.sandbox.ray_pool import ACTOR_ENV, RaySandbox  # noqa: E402

pytestmark = pytest.mark.timeout(180)

SLOW = '''
import time
time.sleep(600)

class ModelNew(Base):
    def forward(self, x):
        return kernel("axpb", x, self.bias)
'''


@pytest.fixture(scope="module")
def sandbox():
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, object_store_memory=100 << 20)
    box = RaySandbox("cpu")
    yield box
    box.close()
    assert ray.is_initialized(), "the sandbox shut down a Ray instance it did not start"
    ray.shutdown()


def score(sandbox, task_dir, path: Path, **options):
    opts = EvalOptions(device="cpu", profile=False, trials=2, **options)
    return sandbox.evaluate_files(task_dir / "model.py", path, opts)


def actor_of(result) -> str:
    found = [m.group(1) for note in result.notes for m in [re.search(r"actor ([0-9a-f]+)", note)] if m]
    assert found, result.notes
    return found[0]


def tagged_worker(parents: set[int], timeout: float = 60.0) -> tuple[int, int]:
    """(pid, parent pid) of a kernelsmith worker started by one of the actors `parents`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            try:
                if not entry.name.isdigit() or ACTOR_ENV.encode() not in (entry / "environ").read_bytes():
                    continue
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if ppid in parents:
                return int(entry.name), ppid
        time.sleep(0.1)
    raise AssertionError("no worker process of an evaluation actor appeared")


def wait_dead(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not ray_pool._alive(pid):
            return True
        time.sleep(0.1)
    return False


def actor_ids(sandbox) -> set[str]:
    return {info["actor"] for info in ray.get([a.info.remote() for a in sandbox.actors("evaluate")])}


def test_two_logical_gpus_give_two_actors(sandbox, tmp_path):
    infos = ray.get([actor.info.remote() for actor in sandbox.actors("evaluate")])
    assert sorted(info["gpus"] for info in infos) == ["0", "1"]  # Ray pinned one GPU per actor
    assert sandbox.stats()["slots"] == ["gpu 0", "gpu 1"]
    # an error inside the harness (not a workdir) comes back as a rejected result, not a raise
    result = sandbox.evaluate_workdir(tmp_path, EvalOptions(device="cpu"))
    assert result.stage == "sandbox" and "not a kernelsmith workdir" in result.error
    assert actor_of(result) in {info["actor"] for info in infos}
    (tmp_path / "kernels").mkdir()
    built = sandbox.build(tmp_path / "kernels", "cpu")  # on a build actor
    assert not built["ok"] and "no kernel sources" in built["summary"]
    assert sandbox.stats()["jobs"]["build"]["done"] == 1


def test_two_threads_run_honest_kernels_on_two_actors(sandbox, task_dir, candidate):
    path = candidate(HONEST)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: score(sandbox, task_dir, path), range(2)))
    assert all(r.clean for r in results), [r.error for r in results]
    assert actor_of(results[0]) != actor_of(results[1])
    assert {actor_of(r) for r in results} == actor_ids(sandbox)


def test_hanging_candidate_times_out_and_the_pool_goes_on(sandbox, task_dir, candidate):
    before = sandbox.stats()["jobs"]["evaluate"]
    result = score(sandbox, task_dir, candidate(SLOW), timeout_s=5)
    assert not result.clean and result.stage == "verify"
    assert "timed out" in result.error
    assert score(sandbox, task_dir, candidate(HONEST)).clean
    after = sandbox.stats()["jobs"]["evaluate"]
    assert after["replaced"] == before["replaced"]  # the worker timeout fired; the actor was fine
    assert after["done"] == before["done"] + 2 and after["errors"] == before["errors"]


def test_killed_actor_fails_the_job_and_a_replacement_serves_the_next(sandbox, task_dir, candidate):
    old_ids = actor_ids(sandbox)
    pids = set(ray.get([actor.pid.remote() for actor in sandbox.actors("evaluate")]))
    before = sandbox.stats()["jobs"]["evaluate"]
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(score, sandbox, task_dir, candidate(SLOW), timeout_s=120)
        worker, actor_pid = tagged_worker(pids)
        os.kill(actor_pid, signal.SIGKILL)
        result = future.result(timeout=60)
    assert not result.clean and result.stage == "sandbox"
    assert "died" in result.error and "replaced" in result.error
    assert wait_dead(worker), "the dead actor's worker process was left running"
    after = sandbox.stats()["jobs"]["evaluate"]
    assert after["replaced"] == before["replaced"] + 1 and after["errors"] == before["errors"] + 1
    killed = actor_of(result)
    assert killed in old_ids
    # the replacement was released last, so it takes the next job
    nxt = score(sandbox, task_dir, candidate(HONEST))
    assert nxt.clean, nxt.error
    assert actor_of(nxt) not in old_ids
    assert actor_pid not in set(ray.get([actor.pid.remote() for actor in sandbox.actors("evaluate")]))


def test_call_past_its_deadline_kills_the_actor(sandbox, task_dir, candidate, monkeypatch):
    monkeypatch.setattr(ray_pool, "eval_deadline", lambda opts: 6.0)
    old_ids = actor_ids(sandbox)
    pids = set(ray.get([actor.pid.remote() for actor in sandbox.actors("evaluate")]))
    before = sandbox.stats()["jobs"]["evaluate"]
    start = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(score, sandbox, task_dir, candidate(SLOW), timeout_s=120)
        worker, actor_pid = tagged_worker(pids)
        result = future.result(timeout=60)
    assert time.monotonic() - start < 45
    assert not result.clean and result.stage == "sandbox"
    assert "no answer within 6 s" in result.error
    assert wait_dead(worker) and wait_dead(actor_pid)
    assert sandbox.stats()["jobs"]["evaluate"]["replaced"] == before["replaced"] + 1
    new_ids = actor_ids(sandbox)  # the replacement is up and answers
    assert len(new_ids) == 2 and len(new_ids - old_ids) == 1
