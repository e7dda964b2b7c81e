"""Every rubric rejection class, each by a task built to fail it, through real jailed rubric workers."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernelsmith.synth.rubric import RubricPool

HEAD = "import os\nimport torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
ONE_INPUT = "\n\ndef get_inputs():\n    return [torch.randn(64, 128)]\n\n\ndef get_init_inputs():\n    return []\n"
TWO_INPUTS = ONE_INPUT.replace("[torch.randn(64, 128)]", "[torch.randn(64, 128), torch.randn(64, 128)]")


def task(forward: str, inputs: str = ONE_INPUT, init: str = "") -> str:
    body = f"    def __init__(self):\n        super().__init__()\n{init}\n    def forward(self, *xs):\n"
    return HEAD + body + "".join(f"        {line}\n" for line in forward.strip().splitlines()) + inputs


GOOD = task("return torch.relu(xs[0] @ self.w)", init="        self.w = nn.Parameter(torch.randn(128, 64))\n")
CASES = {  # name: (source, window, stage, words in the reason)
    "does_not_run": (task("return xs[0] @ xs[0]"), None, "eager", "mat1 and mat2 shapes cannot be multiplied"),
    "nan": (task("return torch.log(xs[0] - 100.0)"), None, "finite", "NaN or Inf"),
    "inf": (task("return xs[0] / 0.0"), None, "finite", "NaN or Inf"),
    "nondeterministic": (task("return xs[0] + torch.rand_like(xs[0])"), None, "deterministic", "differ between two runs"),
    "constant": (task("return xs[0] * 0.0 + 1.0"), None, "trivial", "constant"),
    "near_zero": (task("return xs[0] * 1e-9"), None, "trivial", "near zero"),
    "ignores_input": (task("return xs[0] * 2.0", TWO_INPUTS), None, "dependence", "ignores input 1"),
    "ignores_weights": (task("return xs[0] * 2.0", init="        self.w = nn.Parameter(torch.randn(128))\n"),
                        None, "dependence", "ignores its weights"),
    "too_slow": (GOOD, (0.0, 1e-6), "timing", "above the window"),
    "too_fast": (GOOD, (1e6, 2e6), "timing", "below the window"),
    "does_not_compile": (task("if xs[0].sum() > 0:\n    return xs[0] * 2.0\nreturn xs[0] * 3.0"), None, "compile",
                         "data-dependent"),
    "crashes_the_worker": (task("os._exit(3)"), None, "run", "exited with code 3"),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("rubric")
    jobs = {}
    with ThreadPoolExecutor(2) as threads:
        for name, (source, window, _, _) in CASES.items():
            path = folder / f"{name}.py"
            path.write_text(source)
            pool = RubricPool("cpu", 2, window or (0.0001, 10000.0))
            jobs[name] = threads.submit(pool.check, path, False)
        return {name: job.result() for name, job in jobs.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_a_task_built_to_fail_a_stage_is_rejected_there_with_the_reason(verdicts, name):
    verdict, (_, _, stage, words) = verdicts[name], CASES[name]
    assert not verdict["accepted"]
    assert verdict["stage"] == stage and words.lower() in verdict["reason"].lower(), verdict


def test_a_sound_task_passes_every_stage_with_its_times(tmp_path):
    path = tmp_path / "good.py"
    path.write_text(GOOD)
    verdict = RubricPool("cpu", 1, (0.0001, 10000.0)).check(path, trusted=True)
    assert verdict["accepted"] and verdict["stage"] is None, verdict
    assert verdict["eager_ms"] > 0 and verdict["compile_ms"] > 0 and verdict["checks"]["deterministic"] == "bitwise"
    assert verdict["checks"]["dependence"] == {"inputs": 1, "params": 128 * 64}
    assert set(verdict["stage_s"]) >= {"load", "eager", "finite", "deterministic", "trivial", "dependence",
                                       "timing", "compile"}


# What Triton does on the GPU: its kernels go under $TRITON_HOME/.triton (~/.triton when unset), which
# is read-only inside the jail; every torch.compile of an H100 run failed there before the rubric set it.
WRITES_TRITON_CACHE = task(
    "return torch.relu(xs[0] @ self.w)",
    init="        self.w = nn.Parameter(torch.randn(128, 64))\n"
         "        cache = os.path.join(os.environ.get('TRITON_HOME', os.path.expanduser('~')), '.triton', 'cache')\n"
         "        os.makedirs(cache, exist_ok=True)\n"
         "        open(os.path.join(cache, 'kernel.bin'), 'w').write('x')\n")


@pytest.mark.parametrize("trusted", [True, False])
def test_a_task_compiled_in_the_jail_can_write_its_compiler_cache(tmp_path, trusted):
    path = tmp_path / "triton_cache.py"
    path.write_text(WRITES_TRITON_CACHE)
    verdict = RubricPool("cpu", 1, (1e6, 2e6)).check(path, trusted=trusted)  # no window fits: no compile
    assert verdict["stage"] == "timing", verdict  # past the stages that build and run the model


def test_a_spare_rubric_worker_of_the_folder_serves_the_next_task(tmp_path):
    """On the GPU each job leaves a worker importing torch for the next task of its folder."""
    from kernelsmith.evaluation import runner
    from kernelsmith.synth.rubric import rubric_job, run_rubric

    jobs = []
    for name in ("first", "second"):
        (tmp_path / f"{name}.py").write_text(GOOD)
        jobs.append(rubric_job(tmp_path / f"{name}.py", "cpu", (1e6, 2e6), 1, trusted=False))  # no compile
    generic = {**jobs[0], "reference": jobs[0]["cwd"]}
    try:
        first = run_rubric(jobs[0], spares=1)
        assert first["stage"] == "timing" and first["waits"]["spare"] is False
        waiting = runner.SPARES.waiting(generic, 600.0)
        assert len(waiting) == 1
        second = run_rubric(jobs[1])
        assert second["stage"] == "timing" and second["waits"]["spare"] is True  # the spare (no new one started)
        assert second["waits"]["ready_wait"] is not None and second["waits"]["ready_wait"] >= 0
        assert runner.SPARES.waiting(generic, 600.0) == [] and waiting[0].proc.poll() is not None
    finally:
        runner.SPARES.retire(tmp_path)


@pytest.mark.parametrize("fault", ["OutOfMemoryError: CUDA out of memory.",
                                   "AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"])
def test_a_task_out_of_gpu_memory_beside_other_jobs_is_checked_again_with_the_gpu_alone(monkeypatch, tmp_path, fault):
    """Rubric jobs share a GPU while they compile, so one may run out of memory for others' tensors (52 of
    259 candidates on an H100 were rejected so), or get no CUDA context at all while another fills the GPU.
    That is judged again in a fresh worker that holds the GPU alone throughout (no phases); only a failure
    there is the task's own."""
    from kernelsmith.evaluation import gpu_lock
    from kernelsmith.synth import rubric

    calls, held = [], []

    def fake(job, timeout=rubric.TIMEOUT_S, spares=0, fresh=False):
        calls.append((job, fresh))
        held.extend(budget.used for budget in pool._budgets.values())
        if len(calls) == 1:
            return {"accepted": False, "stage": "eager", "reason": fault,
                    "stage_s": {"load": 1.0, "eager": 2.0}}
        return {"accepted": True, "stage": None, "reason": None, "stage_s": {"load": 0.5, "eager": 3.0, "timing": 1.0}}

    monkeypatch.setattr(rubric, "run_rubric", fake)
    monkeypatch.setattr(rubric, "gpu_memory_bytes", lambda: 1000)
    monkeypatch.setattr(RubricPool, "_gpu_envs", lambda self: [{}])  # one GPU's budget, whatever this machine has
    path = tmp_path / "big.py"
    path.write_text(GOOD)
    pool = RubricPool("cuda", 4, (1.0, 100.0))
    verdict = pool.check(path, trusted=True, need=100)
    assert verdict["accepted"] and verdict["retried_alone"] == fault
    (first, _), (again, fresh) = calls
    assert gpu_lock.phased(first) and not gpu_lock.phased(again) and again["alone"] and fresh
    # its own need the first time; the whole budget (700 of 1000) again: no other job's tensors beside it
    assert held == [100, 700] and verdict["waits"]["need"] is None
    # both attempts' time counts in the run's table: the stages, and the waits for memory
    assert verdict["stage_s"] == {"load": 1.5, "eager": 5.0, "timing": 1.0} and verdict["waits"]["memory"] >= 0
    calls.clear()
    assert not RubricPool("cpu", 1, (1.0, 100.0)).check(path, trusted=True)["accepted"] and len(calls) == 1


def _until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def _enter_in_thread(budget, need: int, log: list, name: str):
    """A rubric job's hold of the budget, in a thread: `inside` is set once it has room; `leave` ends it."""
    import threading

    inside, leave = threading.Event(), threading.Event()

    def hold():
        with budget.held(need):
            log.append(name)
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return inside, leave, thread


def test_rubric_jobs_sharing_a_gpu_start_only_when_their_memory_fits_beside_the_others():
    """8-10 rubric jobs on an H100 that ignored each other's memory ran 52 of 259 candidates out of it.
    Jobs whose needs fit run together; one that does not fit waits for room; one larger than the whole
    budget (or of unknown size: an LLM's task) runs alone; a later small job may start in the room a
    waiting large one cannot use yet, but only `overtake` of them: then the large one's turn comes."""
    from kernelsmith.synth.rubric import MemoryBudget

    budget, log = MemoryBudget(100, overtake=1), []
    a = _enter_in_thread(budget, 40, log, "a")
    b = _enter_in_thread(budget, 50, log, "b")
    assert a[0].wait(5) and b[0].wait(5)  # 90 of 100: together
    huge = _enter_in_thread(budget, 500, log, "huge")  # more than all of it: alone, once both have left
    _until(lambda: len(budget._waiting) == 1)
    small = _enter_in_thread(budget, 5, log, "small")  # fits beside a and b: goes ahead of the huge one
    assert small[0].wait(5) and not huge[0].wait(0.3)
    second = _enter_in_thread(budget, 5, log, "second")  # would fit too, but the huge one was passed once
    assert not second[0].wait(0.5)
    a[1].set(), b[1].set(), small[1].set()
    assert huge[0].wait(5) and not second[0].wait(0.3)  # the huge one alone
    huge[1].set()
    assert second[0].wait(5)
    second[1].set()
    assert log[2:] == ["small", "huge", "second"] and sorted(log[:2]) == ["a", "b"]
    unknown = _enter_in_thread(budget, None, log, "unknown")
    assert unknown[0].wait(5) and budget.used == 100
    unknown[1].set()
    for _, _, thread in (a, b, huge, small, second, unknown):
        thread.join(5)
    assert budget.used == 0


def test_a_stopped_budget_starts_no_waiting_job_and_frees_the_room_of_running_ones():
    """An interrupted run: the job waiting for room never starts (it raises Stopped at once), the running
    one keeps its room till it ends, and nothing is left counted."""
    import threading

    from kernelsmith.synth.rubric import MemoryBudget, Stopped

    budget, log, raised = MemoryBudget(100), [], []
    running = _enter_in_thread(budget, 80, log, "running")
    assert running[0].wait(5)

    def wait_for_room():
        try:
            with budget.held(50):
                log.append("waiting")
        except Stopped:
            raised.append(time.monotonic())

    waiter = threading.Thread(target=wait_for_room, daemon=True)
    waiter.start()
    _until(lambda: len(budget._waiting) == 1)
    stopped = time.monotonic()
    budget.stop()
    waiter.join(5)
    assert raised and raised[0] - stopped < 1 and log == ["running"] and budget._waiting == []
    running[1].set()
    running[2].join(5)
    assert budget.used == 0


def test_without_a_gpu_memory_figure_nothing_waits_and_a_task_needs_its_values_twice():
    from kernelsmith.synth import compose
    from kernelsmith.synth.rubric import CONTEXT_BYTES, MemoryBudget, memory_need

    free, log = MemoryBudget(None), []
    first, second = _enter_in_thread(free, 10**15, log, "1"), _enter_in_thread(free, 10**15, log, "2")
    assert first[0].wait(5) and second[0].wait(5)
    first[1].set(), second[1].set()
    graph = compose.TaskGraph(shapes={"x0": (1024, 1024), "y1": (1024, 1024), "y2": (1024,)})
    assert memory_need(graph) == 2 * 4 * (2 * 1024 * 1024 + 1024) + CONTEXT_BYTES and memory_need(None) is None


class _Parent:
    """The parent's side of a phased job's pipes, in a thread: answers every request, and keeps them."""

    def __init__(self):
        import os
        import threading

        self.requests, worker_w = os.pipe()
        worker_r, self.acks = os.pipe()
        self.fds, self.asked = (worker_w, worker_r), []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import os

        while True:
            asked = os.read(self.requests, 1)
            if not asked:
                return
            self.asked.append(asked.decode())
            os.write(self.acks, b"k")


@pytest.mark.parametrize("window, stage, asked", [((1e6, 2e6), "timing", []), ((1e-4, 1e4), None, ["x", "s"])])
def test_a_phased_rubric_rejects_a_small_task_beside_the_others_and_times_the_rest_in_one_hold(
        tmp_path, monkeypatch, window, stage, asked):
    """On a shared GPU a first eager timing, beside other jobs, can only be slower than alone: below the floor
    even so (70 of 72 timing rejections on an H100) the task is rejected without waiting for the GPU alone
    or compiling. Any other task asks for the GPU alone once, for eager and the compiled model together."""
    from kernelsmith.harness import gpu_phase, synth_rubric

    for name in ("TORCHINDUCTOR_COMPILE_THREADS", "TRITON_HOME", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)  # run_rubric sets them in this process: put back afterwards
    parent = _Parent()
    monkeypatch.setattr(gpu_phase, "_FDS", parent.fds)
    path = tmp_path / "good.py"
    path.write_text(GOOD)
    job = {"reference": str(path), "device": "cpu", "window_ms": list(window), "out_dir": str(tmp_path)}
    verdict = synth_rubric.run_rubric(job)
    assert verdict["stage"] == stage and parent.asked == asked, verdict
    if stage == "timing":
        assert "at most" in verdict["reason"] and "compile" not in verdict["stage_s"]
    else:
        assert verdict["accepted"] and verdict["eager_ms"] > 0 and verdict["compile_ms"] > 0


def test_a_run_on_the_gpu_says_which_gpu_and_plans_on_its_memory(tmp_path, monkeypatch):
    """runs.jsonl and the README name the GPU (tasks per hour mean little without it); the memory budget
    starts from the smallest GPU's total, by nvidia-smi (a fake one here)."""
    from kernelsmith.synth import rubric

    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\ncase "$1" in *name*) printf "NVIDIA H100 80GB HBM3\\nNVIDIA H100 80GB HBM3\\n";;\n'
                    '*memory.total*) printf "81559\\n40960\\n";; esac\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert rubric.gpu_names() == "NVIDIA H100 80GB HBM3" and rubric.gpu_memory_bytes() == 40960 << 20
    monkeypatch.setenv("PATH", "/nonexistent")
    assert rubric.gpu_names() is None and rubric.gpu_memory_bytes() is None


def test_the_checks_compare_in_slices_exactly_as_whole_tensors_would(monkeypatch):
    """The rubric's comparisons and reductions run over slices (bounded memory); a difference, a NaN or the only
    non-zero value in any one slice, the last and shorter one included, decides as a whole-tensor check would."""
    import torch

    from kernelsmith.harness import synth_rubric as sr

    monkeypatch.setattr(sr, "CHUNK", 7)  # 100 elements: 14 full slices and a short one
    base = torch.randn(10, 10, generator=torch.Generator().manual_seed(0))
    for where in (0, 50, 99):
        off = base.clone()
        off.view(-1)[where] += 1e-3
        assert not sr._equal([base], [off]) and not sr._close([base], [off]) and sr._close([base], [off], 1e-2, 1e-2)
        nan = base.clone()
        nan.view(-1)[where] = float("nan")
        with pytest.raises(sr.Rejected, match="NaN"):
            sr.check_finite([nan])
        spike = torch.zeros(10, 10)
        spike.view(-1)[where] = 1.0
        sr.check_nontrivial([spike])  # one value apart from zero: neither near zero nor constant
    assert sr._equal([base], [base.clone()]) and sr._close([base.t()], [base.t().contiguous()])
    assert abs(sr._std(base) - float(base.double().std())) < 1e-12
    assert abs(sr._mean_abs(base) - float(base.double().abs().mean())) < 1e-12
    with pytest.raises(sr.Rejected, match="constant"):
        sr.check_nontrivial([torch.full((10, 10), 3.0)])


def test_a_plan_counts_the_memory_an_operator_holds_inside_itself():
    """Attention's (batch, heads, seq, seq) scores and a gated MLP's hidden values are no values of the graph,
    yet they fill the GPU: on an H100, rows with attention peaked at up to 3.1x a plan without them. The plan
    counts the largest operator's scratch once (operators run one at a time)."""
    import random

    from kernelsmith.synth import compose, seeds
    from kernelsmith.synth.rubric import memory_need

    shape = (8, 2048, 1024)
    attention = seeds._attention(causal=True)(random.Random(0), shape)
    mlp = seeds._glu_mlp("swiglu")(random.Random(0), shape)
    heads, hidden = attention.args["heads"], mlp.args["hidden"]
    nodes = [compose.Node(attention, ("x0",), "y1"), compose.Node(mlp, ("y1",), "y2")]
    graph = compose.TaskGraph(nodes=nodes, shapes={"x0": shape, "y1": shape, "y2": shape})
    plain = memory_need(compose.TaskGraph(shapes=graph.shapes))
    scores, qkv = 2 * 8 * heads * 2048 * 2048, 3 * 8 * 2048 * 1024
    assert memory_need(graph) - plain == 4 * max(attention.scratch, mlp.scratch) >= 4 * (scores + qkv)
    assert mlp.scratch == 3 * 8 * 2048 * hidden
