"""kernelsmith synth end to end through the CLI on the CPU: real composer, real jailed rubric workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelsmith.cli import main
from kernelsmith.synth.run import TIMING_KEYS
from kernelsmith.task import check_task, load_task

from fakeapi import FakeAPI
from synth_tasks import DIFFERENT, EVAL_TASKS, RENAMED_RESIZED, write_tasks

WINDOW = "0.0001,10000"  # every sane CPU task fits: accepting never hangs on timing noise near an edge
COUNT = 3


def synth_args(out: Path, against: Path, *more: str) -> list[str]:
    return ["synth", "--out", str(out), "--count", str(COUNT), "--device", "cpu", "--seed", "7",
            "--workers", "2", "--eager-window", WINDOW, "--decontaminate-against", str(against), *more]


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def without_timings(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in rows]


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("kernelbench")
    write_tasks(folder, EVAL_TASKS)
    return folder


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, eval_dir) -> Path:
    out = tmp_path_factory.mktemp("synth") / "run"
    assert main(synth_args(out, eval_dir)) == 0
    return out


def test_a_small_cpu_run_writes_tasks_manifest_and_readme(first_run):
    accepted = [r for r in rows_of(first_run) if r["status"] == "accepted"]
    files = sorted(p.name for p in (first_run / "tasks").glob("*.py"))
    assert len(accepted) == COUNT and files == sorted(Path(r["file"]).name for r in accepted)
    for row in accepted:
        assert row["composer"] == "combinatorial" and row["seed"] == 7 and row["kernelsmith"]
        assert row["eager_ms"] > 0 and row["compile_ms"] > 0 and row["rubric"]["checks"]["deterministic"]
        assert 1 <= row["op_count"] == len(row["ops"]) <= 5 and row["inputs"][0]["shape"]
        assert row["nearest"]["task"].startswith(first_run.parent.parent.name) or row["nearest"]["task"]
        assert 0 <= row["nearest"]["similarity"] < 0.75
    readme = (first_run / "README.md").read_text()
    assert f"{COUNT} of {COUNT} tasks accepted" in readme and "Operator-count mix" in readme
    assert "Rejections per stage" in readme
    runs = [json.loads(line) for line in (first_run / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 1 and runs[0]["accepted"] == COUNT and runs[0]["candidates"] == len(rows_of(first_run))
    assert 0 < runs[0]["seconds"] < 600 and "accepted tasks and" in readme and "| compile |" in readme
    # where each job's time went outside its stages: the wait for memory (none on the CPU) and for its worker
    assert all(r["rubric"]["waits"]["memory"] >= 0 and "ready_wait" in r["rubric"]["waits"] for r in accepted)
    assert "| wait: ready_wait |" in readme


def test_each_task_loads_with_the_task_loader_and_runs(first_run):
    for path in sorted((first_run / "tasks").glob("*.py")):
        source = load_task(str(path))
        assert "class Model(nn.Module)" in source.source
        report = check_task(path, "cpu")  # the reference runs in a worker, as `kernelsmith init` checks it
        assert report["outputs"] and not report["warnings"], (path.name, report["warnings"])


def test_bench_takes_the_output_folder_as_it_is(first_run, tmp_path):
    """The issue's integration: `kernelsmith bench DIR/tasks` runs the built-in policy on synthesized tasks
    (here one, drawn by --sample), each a session in its own workdir, verified by the harness."""
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, "-m", "kernelsmith.cli", "bench", str(first_run / "tasks"), "--backend",
                           "builtin", "--device", "cpu", "--max-turns", "3", "--sample", "1", "--no-lint",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["status"] == "done" and rows[0]["correct"], rows
    assert (first_run / "tasks" / f"{rows[0]['task']}.py").is_file()


def test_the_same_seed_gives_the_same_files_and_manifest(first_run, eval_dir, tmp_path):
    again = tmp_path / "again"
    assert main(synth_args(again, eval_dir)) == 0
    for path in (first_run / "tasks").glob("*.py"):
        assert (again / "tasks" / path.name).read_bytes() == path.read_bytes()
    assert without_timings(rows_of(again)) == without_timings(rows_of(first_run))


def test_resume_after_a_kill_keeps_accepted_tasks_and_reaches_the_count(first_run, eval_dir, tmp_path):
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "kernelsmith.cli", *synth_args(out, eval_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not _accepted_rows(out):
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # our own child's group: no cleanup, no README
        proc.wait()
    before = _accepted_rows(out)
    assert before and len(before) < COUNT
    assert main(synth_args(out, eval_dir)) == 2  # an earlier run is there: --resume is asked for
    assert main(synth_args(out, eval_dir, "--resume")) == 0
    rows = rows_of(out)
    assert [r for r in rows if r["status"] == "accepted"][:len(before)] == before  # kept as they were
    assert without_timings(rows) == without_timings(rows_of(first_run))  # and the run ends where one would
    assert sorted(p.name for p in (out / "tasks").glob("*.py")) == sorted(p.name for p in (first_run / "tasks").glob("*.py"))


def _manifest_alone(first_run: Path, out: Path) -> Path:
    (out / "tasks").mkdir(parents=True)
    (out / "manifest.jsonl").write_bytes((first_run / "manifest.jsonl").read_bytes())
    return out


def test_a_folder_carried_as_its_manifest_alone_gets_its_task_files_back_on_resume(first_run, eval_dir, tmp_path, capsys):
    """The rows are the rubric's verdicts; the files are drawn again from the seed, byte for byte, with no
    candidate checked twice (the count is already reached: no new row)."""
    out = _manifest_alone(first_run, tmp_path / "carried")
    assert main(synth_args(out, eval_dir, "--resume")) == 0
    assert f"restored {COUNT} accepted task file(s)" in capsys.readouterr().out
    for path in (first_run / "tasks").glob("*.py"):
        assert (out / "tasks" / path.name).read_bytes() == path.read_bytes()
    assert rows_of(out) == rows_of(first_run)


def test_a_row_the_stream_no_longer_draws_is_refused_not_restored(first_run, eval_dir, tmp_path, capsys):
    out = _manifest_alone(first_run, tmp_path / "changed")
    rows = rows_of(out)
    row = next(r for r in rows if r["status"] == "accepted")
    row["inputs"][0]["shape"] = [s + 1 for s in row["inputs"][0]["shape"]]  # the rules that size tasks changed
    (out / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(synth_args(out, eval_dir, "--resume")) == 2
    err = capsys.readouterr().err
    assert f"cannot restore {row['file']}" in err and "inputs" in err and "Traceback" not in err
    assert not (out / row["file"]).exists()


H100_RUN = Path(__file__).parents[1] / "bench/results/h100-2026-12-07/synth/manifest.jsonl"


def test_a_gpu_run_carried_home_as_its_manifest_gets_its_files_back_on_a_machine_without_one(tmp_path, monkeypatch, capsys):
    """The first rows of the H100 run (--device cuda, seed 0): with its count reached nothing is checked, so no
    GPU is asked for; one task more would need the GPU, and is refused in one line."""
    import kernelsmith.cli as cli

    monkeypatch.setattr(cli, "default_device", lambda: "cpu")  # this machine has no GPU, whatever runs the test
    out = tmp_path / "gpu-run"
    out.mkdir()
    lines = H100_RUN.read_text().splitlines()[:8]
    (out / "manifest.jsonl").write_text("".join(line + "\n" for line in lines))
    accepted = [row for row in map(json.loads, lines) if row["status"] == "accepted"]
    args = ["synth", "--out", str(out), "--device", "cuda", "--seed", "0", "--resume", "--count"]
    assert main(args + [str(len(accepted))]) == 0
    assert f"restored {len(accepted)} accepted task file(s)" in capsys.readouterr().out
    assert sorted(p.name for p in (out / "tasks").glob("*.py")) == sorted(Path(r["file"]).name for r in accepted)
    assert all(load_task(str(out / r["file"])) for r in accepted)
    assert main(args + [str(len(accepted) + 1)]) == 2
    assert "no CUDA GPU is visible" in capsys.readouterr().err


def _accepted_rows(out: Path) -> list[dict]:
    path = out / "manifest.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            break
    return [r for r in rows if r["status"] == "accepted"]


def test_the_llm_composer_is_checked_like_any_task_and_decontaminated(eval_dir, tmp_path, monkeypatch):
    copy = RENAMED_RESIZED["level2/1_Conv2D_ReLU_BiasAdd.py"]
    script = [{"text": f"Here it is:\n```python\n{copy}```"}, {"text": "no code here, sorry"},
              {"text": f"```python\n{DIFFERENT}```"}]
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    out = tmp_path / "llm"
    with FakeAPI(script) as api:
        code = main(["synth", "--out", str(out), "--count", "1", "--device", "cpu", "--composer", "openai",
                     "--model", "fake-model", "--base-url", api.openai_url, "--eager-window", WINDOW,
                     "--decontaminate-against", str(eval_dir)])
        prompts = [r["body"]["messages"][-1]["content"] for r in api.requests]
    rows = rows_of(out)
    assert code == 0 and [r["status"] for r in rows] == ["rejected", "rejected", "accepted"]
    assert rows[0]["stage"] == "decontamination" and "1_Conv2D_ReLU_BiasAdd" in rows[0]["reason"]
    assert rows[0]["nearest"]["similarity"] == 1.0
    assert rows[1]["stage"] == "parse" and "not valid Python" in rows[1]["reason"]
    assert rows[2]["composer"] == "openai" and (out / rows[2]["file"]).read_text().strip() == DIFFERENT.strip()
    assert len(prompts) == 3 and all("fuses these operators" in p for p in prompts)


@pytest.mark.parametrize("args, message", [
    (["--composer", "gpt"], "unknown --composer 'gpt'"),
    (["--count", "0"], "--count must be at least 1"),
    (["--max-ops", "0"], "--max-ops must be at least 1"),
    (["--eager-window", "5,1"], "bad --eager-window"),
    (["--decontaminate-against", "/nonexistent/kernelbench"], "no folder of task files there"),
    (["--device", "tpu"], "unknown --device 'tpu'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    code = main(["synth", "--out", str(tmp_path / "out"), "--device", "cpu", *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2  # one line (rich may wrap the hint)


def test_an_unwritable_out_and_an_earlier_run_are_bad_input(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["synth", "--out", str(blocker / "out"), "--device", "cpu"]) == 2
    assert "cannot write --out" in capsys.readouterr().err
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "manifest.jsonl").write_text("")
    assert main(["synth", "--out", str(earlier), "--device", "cpu"]) == 2
    assert "holds an earlier synth run" in capsys.readouterr().err


def test_on_cuda_no_memory_bound_chain_is_drawn_too_small_to_reach_the_floor():
    """On an H100, 46 of 70 candidates below the 1 ms floor were chains of memory-bound operators moving
    0.13-2.7 GB, which no GPU runs in 1 ms. The stream draws such a chain again, and still holds memory-bound
    tasks (about a third of them); the CPU's stream has no such rule, and a GEMM's task is never redrawn for it."""
    import itertools

    from kernelsmith.synth import compose

    def stream(device, floor):
        return list(itertools.islice(compose.CombinatorialComposer(3, 5, device, floor).candidates(), 120))

    def memory_bound(c):
        return not any(n.op.seed in compose.COMPUTE_BOUND for n in c.graph.nodes)

    floor = 1.0
    sized = [c for c in stream("cuda", floor) if memory_bound(c)]
    assert len(sized) >= 120 // 5
    assert all(compose.bytes_moved(c.graph) / 1e9 * compose.FASTEST_MS_PER_GB["cuda"] >= floor for c in sized)
    unsized = [c for c in stream("cuda", 0.0) if memory_bound(c)]
    assert any(compose.bytes_moved(c.graph) / 1e9 * compose.FASTEST_MS_PER_GB["cuda"] < floor for c in unsized)
    cpu = stream("cpu", floor)
    assert [c.source for c in cpu] == [c.source for c in stream("cpu", 0.0)]


def test_a_slow_candidate_holds_back_only_the_rows_after_it_not_the_workers():
    """On the GPU one candidate's compile may take 40 s; with the rows kept in candidate order, the other
    workers must go on with later candidates meanwhile (they sat idle: 5.8 of 8-10 busy on an H100)."""
    import threading
    from types import SimpleNamespace

    from kernelsmith.synth import run as synth_run

    started, finished, lock = {}, {}, threading.Lock()

    def row(candidate):
        with lock:
            started[candidate] = time.monotonic()
        time.sleep(1.5 if candidate == 0 else 0.05)
        with lock:
            finished[candidate] = time.monotonic()
        return {"index": candidate, "status": "accepted" if candidate % 2 else "rejected"}

    work = SimpleNamespace(plan=SimpleNamespace(workers=2), row=row, keep=lambda candidate, r: None)
    rows = synth_run._drive(work, iter(range(40)), wanted=5, budget=40, on_row=None)
    assert [r["index"] for r in rows] == list(range(10))  # in order, up to the fifth accepted
    assert sum(started[c] < finished[0] for c in started if c) >= 5  # later ones ran beside the slow one


SLEEPER = """import time
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        time.sleep(60)
        return x * 2.0


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
"""


def test_a_ctrl_c_stops_the_run_at_once_with_its_running_jobs_killed(tmp_path):
    """An interrupted run (Ctrl-C, or a limit's SIGINT handed by the kernel to a worker thread) ends within
    seconds: its running rubric jobs' workers are killed and their rows dropped, not waited for. An H100 run
    waited past its limit's 110 s grace for jobs in minutes-long memory waits and wrote neither its time
    nor its README."""
    import threading
    from types import SimpleNamespace

    from kernelsmith.evaluation import runner
    from kernelsmith.synth import run as synth_run
    from kernelsmith.synth.rubric import RubricPool

    (tmp_path / "sleeper.py").write_text(SLEEPER)
    pool, kept = RubricPool("cpu", 2, (0.0, 1e9)), []
    work = SimpleNamespace(plan=SimpleNamespace(workers=2), pool=pool, keep=lambda c, r: kept.append(r),
                           row=lambda candidate: pool.check(tmp_path / "sleeper.py", trusted=True))

    def interrupt_a_worker_thread() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(w.proc is not None for w in list(runner.LIVE)) < 2:
            time.sleep(0.1)
        time.sleep(3)  # the workers past their imports, into the task's sleep
        worker = next(t for t in threading.enumerate() if t.name.startswith("ks-synth"))
        signal.pthread_kill(worker.ident, signal.SIGINT)

    threading.Thread(target=interrupt_a_worker_thread, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        synth_run._drive(work, iter(range(4)), wanted=4, budget=4, on_row=None)
    assert time.monotonic() - start < 45  # the workers' imports, 3 s, and the kill; not the tasks' 60 s
    assert kept == []
    assert all(w.proc.poll() is not None for w in list(runner.LIVE) if w.proc is not None)
