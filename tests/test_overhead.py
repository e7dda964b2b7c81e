"""Issue 17's overhead bound in a scripted session: a steady-state `profile` tool call costs at most 3x the
compute it times (the timed runs x (candidate + eager) median), on a task whose compute outweighs drawing
its inputs (a GEMM). A real CPU workdir driven through KernelEnv, real builds, the real jailed workers.

Timed tests are not benchmarks: CI runs this beside another test on 2 cores, so the ratio is asserted
loosely (LOOSE); the figure to quote comes from `python bench/eval_overhead.py` on an idle machine
(docs/env.md). What the test does hold tight is what makes the ratio: a profile whose per-run and fixed
costs grew (a second flush, a slower draw, a calibration twice as long) fails it."""

from __future__ import annotations

import time
from pathlib import Path

from kernelsmith import workdir as wd
from kernelsmith.agent.env import KernelEnv
from kernelsmith.backends.base import Reply, ToolCall
from kernelsmith.config import Settings
from kernelsmith.task import TaskSource

DATA = Path(__file__).parent / "data" / "gemm_session"
BOUND = 3.0
# CI's factor over the bound: another test shares the 2 cores and slows the harness's own work more than the
# timed compute (measured in full runs of the suite on 2 cores: 4.8x and 7.3x, against 3.0x idle)
LOOSE = 3.0


def step(env: KernelEnv, name: str, **arguments):
    call = ToolCall(f"c{len(env.messages)}", name, arguments)
    env.model_turn(Reply("", [call]))
    start = time.perf_counter()
    obs = env.step_all([call])[-1]
    return obs, time.perf_counter() - start


def test_a_steady_state_profile_costs_at_most_three_times_the_compute_it_times(tmp_path, capsys):
    path = tmp_path / "wd"
    wd.create(TaskSource(name="gemm", source=(DATA / "gemm.py").read_text(), origin=str(DATA / "gemm.py")), path, "cpu")
    env = KernelEnv(Settings(max_turns=20))
    env.reset(path)
    kernel = (DATA / "gemm.cpp").read_text()
    step(env, "bash", command="rm kernels/example_scale.cpp")
    step(env, "write_file", path="kernels/gemm.cpp", content=kernel)
    step(env, "write_file", path="model_new.py", content=(DATA / "model_new.py").read_text())
    for edit in range(2):  # the first profile of a session; then, after an edit, a steady-state one
        built, _ = step(env, "write_file", path="kernels/gemm.cpp", content=kernel + f"// edit {edit}\n")
        built, _ = step(env, "compile")
        assert built.build["ok"], built.build["summary"]
        verified, _ = step(env, "verify")
        assert verified.eval["correct"] and not verified.eval["violations"], verified.eval
        timed, wall = step(env, "profile")
    env.close("finish")
    result = timed.eval
    assert result["correct"] and not result["violations"], result
    runs = result["seconds"]["profile_runs"]
    per_run_ms = result["timings_ms"]["candidate"] + (result["timings_ms"].get("eager_live") or result["timings_ms"]["eager"])
    compute = runs * per_run_ms / 1e3
    # a loaded machine moves the live eager off the cached clean one (EAGER_DRIFT) and the profile measures the
    # baselines again: the load's cost, which an idle machine's steady profile does not pay (3.9 s of 14.1 s once
    # in a full CI run)
    steady = wall - result["seconds"].get("baselines", 0.0)
    with capsys.disabled():
        print(f"\nsteady profile: {steady:.2f} s for {compute:.2f} s of compute ({runs} runs): {steady / compute:.2f}x")
    assert steady <= BOUND * LOOSE * compute, (wall, compute, result["seconds"])
    # what holds under any load: the profile's workers were started by the verify and had imported torch
    assert result["seconds"].get("profile.ready_wait", 0.0) < 0.5, result["seconds"]
