"""`kernelsmith bench` end to end on the CPU: scripted sessions over a two-level task set,
resume after the fact, eval-only scoring of existing solutions, and --report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TASK, default_sigint

SESSION_RECORDS = "*/*/run0/.kernelsmith/sessions/*/events.jsonl"
from kernelsmith.gitops import KernelRepo

DATA = Path(__file__).parent / "data" / "bench"
CLI = [sys.executable, "-m", "kernelsmith.cli"]
ENV = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}


def ks(*args, timeout=900):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=ENV)


@pytest.fixture(scope="module")
def task_set(tmp_path_factory, request):
    """level1/ and level2/ with one tiny task each, an honest ctypes candidate, and a script."""
    root = tmp_path_factory.mktemp("bench")
    for level, name in (("level1", "1_axpb"), ("level2", "7_axpb_again")):
        (root / "tasks" / level).mkdir(parents=True)
        (root / "tasks" / level / f"{name}.py").write_text(TASK)
    task_dir = request.getfixturevalue("task_dir")  # builds libaxpb.so
    ENV["KERNELSMITH_JAIL_READABLE"] = os.environ["KERNELSMITH_JAIL_READABLE"]  # conftest: pytest's folder, read-only
    candidate = (DATA / "model_new_ctypes.py").read_text().replace("LIBAXPB", str(task_dir / "libaxpb.so"))
    (root / "script.json").write_text(json.dumps([
        {"text": "inline kernel", "tool_calls": [
            {"name": "bash", "arguments": {"command": "rm -r kernels"}},
            {"name": "write_file", "arguments": {"path": "model_new.py", "content": candidate}},
            {"name": "verify", "arguments": {}}]},
        {"text": "time it", "tool_calls": [{"name": "profile", "arguments": {}}]},
        {"text": "done", "tool_calls": [{"name": "finish", "arguments": {"summary": "ctypes axpb"}}]}]))
    (root / "candidate.py").write_text(candidate)
    return root


def test_bench_runs_every_task_reports_per_level_and_resumes(task_set, tmp_path):
    out = tmp_path / "out"
    args = ["bench", task_set / "tasks", "--backend", "scripted", "--script", task_set / "script.json",
            "--device", "cpu", "--workers", "2", "--out", out]
    first = ks(*args)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    for level in ("level1", "level2", "overall"):
        s = results["summary"][level]
        assert s["pass_rate"] == 1.0 and s["geomean_speedup_vs_eager"] > 0, (out / "rows.jsonl").read_text()[-3000:]
        assert {"faster_than_eager_rate", "faster_than_compile_rate", "geomean_speedup_vs_compile"} <= set(s)
    assert results["summary"]["overall"]["n"] == 2
    rows = {r["task"]: r for r in results["rows"]}
    assert rows["1_axpb"]["level"] == "level1" and rows["7_axpb_again"]["level"] == "level2"
    assert rows["1_axpb"]["turns"] == 3 and rows["1_axpb"]["best_sha"]
    workdir = out / "workdirs" / "level1" / "1_axpb" / "run0"
    assert KernelRepo(workdir).kernel_commits()[0]["sha"] == rows["1_axpb"]["best_sha"]
    assert (out / "results.md").read_text().count("level1") >= 2 and (out / "speedups.png").stat().st_size > 0
    # a line per linted and per finished task: the only progress a log file (no terminal) gets
    assert "lint level1/1_axpb: ok" in first.stdout and "lint level2/7_axpb_again: ok" in first.stdout
    assert "level2/7_axpb_again: correct, " in first.stdout and "x vs eager" in first.stdout

    again = ks(*args)  # the folder already holds a bench: refuse rather than mix two runs
    assert again.returncode == 2 and "--resume" in again.stderr
    more = ks(*args, "--resume", "--runs", "2")
    assert more.returncode == 0, more.stderr[-2000:]
    lines = (out / "rows.jsonl").read_text().splitlines()
    assert len(lines) == 4  # run 0 kept as it was, run 1 added for each task
    assert sorted(json.loads(line)["run"] for line in lines) == [0, 0, 1, 1]


def test_eval_only_scores_existing_solutions_matched_by_path(task_set, tmp_path):
    candidates = tmp_path / "solutions"
    (candidates / "level1").mkdir(parents=True)
    (candidates / "level1" / "1_axpb.py").write_text((task_set / "candidate.py").read_text())
    (candidates / "level2").mkdir()
    (candidates / "level2" / "7_axpb_again.py").write_text(
        "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
        "        self.bias = nn.Parameter(__import__('torch').empty(n))\n\n    def forward(self, x):\n"
        "        return x * 2.0 + self.bias  # torch compute: rejected\n")
    out = tmp_path / "scored"
    proc = ks("bench", "--eval-only", task_set / "tasks", candidates, "--device", "cpu", "--out", out, "--no-lint")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["task"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    assert rows["1_axpb"]["correct"] and rows["1_axpb"]["speedup_vs_eager"] > 0
    assert not rows["7_axpb_again"]["correct"] and rows["7_axpb_again"]["error"]
    (out / "results.md").unlink()
    rendered = ks("bench", "--report", out)
    assert rendered.returncode == 0 and (out / "results.md").is_file()
    assert "pass" in rendered.stdout.lower()


def test_lint_is_saved_task_by_task_so_an_interrupted_bench_keeps_it(task_set, tmp_path):
    from kernelsmith import bench
    from kernelsmith.config import Settings

    plan = bench.BenchPlan(Settings(), "cpu", tmp_path, workers=1)
    tasks = bench.task_files([task_set / "tasks"])

    def interrupt(path, flags):
        raise KeyboardInterrupt  # the user's ^C right after the first task's lint

    with pytest.raises(KeyboardInterrupt):
        bench.lint_all(plan, tasks, interrupt)
    assert json.loads((tmp_path / "lint.json").read_text()) == {str(tasks[0]): []}
    seen = []
    flags = bench.lint_all(plan, tasks, lambda path, found: seen.append(path))
    assert seen == [tasks[1]] and set(flags) == {str(t) for t in tasks}  # the first is not linted again


def test_a_lint_killed_beside_others_is_run_again_alone(task_set, tmp_path, monkeypatch):
    """Large tasks linted side by side ran the host out of memory (SIGKILL on the H200); a task whose
    lint was killed is linted again once the others are done, alone, and keeps that verdict."""
    import threading
    import time

    from kernelsmith import bench
    from kernelsmith import task as task_mod
    from kernelsmith.config import Settings
    from kernelsmith.errors import BadInput

    running, calls, lock = [0], [], threading.Lock()

    def check(path, device, precision):
        with lock:
            running[0] += 1
            crowded = running[0] > 1
            calls.append((Path(path).name, crowded))
        time.sleep(0.3)  # long enough for the other thread's lint to overlap
        with lock:
            running[0] -= 1
        if crowded:
            raise BadInput("the reference does not run: crashed: killed (SIGKILL) by something outside the harness")
        return {"flags": []}

    monkeypatch.setattr(task_mod, "check_task", check)
    plan = bench.BenchPlan(Settings(), "cpu", tmp_path, workers=2)
    tasks = bench.task_files([task_set / "tasks"])
    flags = bench.lint_all(plan, tasks)
    assert any(crowded for _, crowded in calls)  # the side-by-side pass did overlap
    assert flags == {str(t): [] for t in tasks}
    assert json.loads((tmp_path / "lint.json").read_text()) == flags


def test_a_session_with_no_correct_kernel_says_why_in_its_row(task_set, tmp_path):
    cheat = ("import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
             "        self.bias = nn.Parameter(__import__('torch').empty(n))\n\n    def forward(self, x):\n"
             "        return x * 2.0 + self.bias  # torch compute: rejected\n")
    script = tmp_path / "cheat.json"
    script.write_text(json.dumps([
        {"text": "torch in forward", "tool_calls": [
            {"name": "write_file", "arguments": {"path": "model_new.py", "content": cheat}},
            {"name": "profile", "arguments": {}}]},
        {"text": "a build that works says nothing of the verdict",
         "tool_calls": [{"name": "compile", "arguments": {}}]},
        {"text": "give up", "tool_calls": [{"name": "finish", "arguments": {"summary": "could not beat it"}}]}]))
    tasks = tmp_path / "tasks"
    (tasks / "level1").mkdir(parents=True)
    (tasks / "level1" / "1_axpb.py").write_text((task_set / "tasks" / "level1" / "1_axpb.py").read_text())
    out = tmp_path / "out"
    proc = ks("bench", tasks, "--backend", "scripted", "--script", script, "--device", "cpu", "--out", out, "--no-lint")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    row = json.loads((out / "rows.jsonl").read_text().splitlines()[0])
    assert row["status"] == "failed" and not row["correct"]
    assert "could not beat it" in row["error"]  # how the session ended
    assert "last profile (verify): rejected: torch compute" in row["error"] and "aten.mul" in row["error"]  # and what the harness rejected
    assert "level1/1_axpb: failed: " in proc.stdout and "torch compute" in proc.stdout


def test_ctrl_c_ends_the_running_session_at_its_turn_and_resume_continues_that_session(task_set, tmp_path):
    """The user's ^C in a bench: no new session starts, the running one ends after its turn with its row
    marked interrupted (exit 130), and --resume continues that same session from its record."""
    import signal

    out = tmp_path / "out"
    args = ["bench", task_set / "tasks", "--backend", "scripted", "--script", task_set / "script.json",
            "--device", "cpu", "--workers", "1", "--out", out, "--no-lint"]
    proc = subprocess.Popen(CLI + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint,
                            env={**ENV, "PYTHONUNBUFFERED": "1"})
    seen = []
    for line in proc.stdout:  # the first finished task's line
        seen.append(line)
        if ": correct, " in line:
            break
    deadline = time.monotonic() + 120
    while len(list((out / "workdirs").glob(SESSION_RECORDS))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # until the second session has started: its record exists
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, "".join(seen) + rest + err
    assert "waiting for 1 running session" in rest
    rows = {r["task"]: r for r in map(json.loads, (out / "rows.jsonl").read_text().splitlines())}
    first, second = sorted(rows.values(), key=lambda r: r["status"])  # done < interrupted
    assert first["status"] == "done" and second["status"] == "interrupted" and second["turns"] < 3

    resumed = ks(*args, "--resume")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    final = json.loads((out / "rows.jsonl").read_text().splitlines()[-1])
    assert final["task"] == second["task"] and final["status"] == "done" and final["correct"]
    assert final["session_id"] == second["session_id"] and final["turns"] == 3  # the same session, continued


def test_a_sample_is_the_same_random_tasks_for_a_seed_in_their_order(tmp_path):
    """`--sample N` benches a random N of a task set (issue 18: the built-in policy over 50 synthesized
    tasks); a --resume with the same flags must draw the same N."""
    from kernelsmith.bench import sample_tasks

    files = [tmp_path / f"{i:03d}.py" for i in range(40)]
    first, again = sample_tasks(files, 5, seed=0), sample_tasks(files, 5, seed=0)
    assert first == again and len(set(first)) == 5 and set(first) <= set(files)
    assert first == sorted(first)  # the task set's order, whatever the draw's
    assert first != sample_tasks(files, 5, seed=1) and sample_tasks(files, None) == files


@pytest.mark.parametrize("sample, message", [("3", "only 2 task files"), ("0", "at least 1")])
def test_a_sample_larger_than_the_set_is_one_line_and_exit_2(task_set, tmp_path, sample, message):
    proc = ks("bench", task_set / "tasks", "--backend", "scripted", "--script", task_set / "script.json",
              "--device", "cpu", "--out", tmp_path / "out", "--sample", sample, "--no-lint")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2


def test_a_resumed_bench_keeps_its_sample_and_refuses_another(tmp_path):
    """A --resume without --sample would bench every task of a 2,000-task set: it draws its bench's
    sample again. Given another sample it is bad input, and a new bench never overwrites a bench's record."""
    from kernelsmith.bench import kept_sample
    from kernelsmith.errors import BadInput

    out = tmp_path / "out"
    assert kept_sample(out, 5, 3, resume=False) == (5, 3)
    assert kept_sample(out, None, 0, resume=True) == (5, 3)
    assert kept_sample(out, 5, 3, resume=True) == (5, 3)
    with pytest.raises(BadInput, match="drew --sample 5 --sample-seed 3"):
        kept_sample(out, 6, 3, resume=True)
    with pytest.raises(BadInput, match="already holds a bench"):
        kept_sample(out, 7, 0, resume=False)
    assert kept_sample(tmp_path / "plain", None, 0, resume=True) == (None, 0)  # no sample: every task


def test_tasks_of_one_name_in_different_folders_get_their_own_workdirs_and_rows(tmp_path):
    """examples/*/model.py: every task is named model, and a bench that named tasks by file name alone ran every
    session in the first task's workdir, against the first task, and reported them as runs of one task."""
    tasks = tmp_path / "tasks"
    for folder in ("rows", "cols"):
        (tasks / folder).mkdir(parents=True)
        (tasks / folder / "model.py").write_text(f"# the {folder} task\n" + TASK)
    script = tmp_path / "finish.json"
    script.write_text(json.dumps([{"text": "done", "tool_calls": [{"name": "finish", "arguments": {"summary": "-"}}]}]))
    out = tmp_path / "out"
    proc = ks("bench", tasks / "rows" / "model.py", tasks / "cols" / "model.py", "--backend", "scripted",
              "--script", script, "--device", "cpu", "--out", out)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert sorted(r["task"] for r in rows) == ["cols-model", "rows-model"]
    assert "lint -/rows-model: ok" in proc.stdout and "lint -/cols-model: ok" in proc.stdout  # as the rows say
    for folder in ("rows", "cols"):
        workdir = out / "workdirs" / "tasks" / f"{folder}-model" / "run0"
        assert (workdir / "model.py").read_text().startswith(f"# the {folder} task"), folder
