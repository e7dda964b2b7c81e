"""Spare workers (runner.Spares): the next verify's candidate worker started after an evaluation, with
real workers on the CPU. A spare must run the files as they are when its job comes, never as they were
when it started, and must serve only a job it was started for."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import PRELUDE, job_fails
from kernelsmith.evaluation import runner
from kernelsmith.evaluation.evaluate import PROFILE_SPARES, candidate_job
from kernelsmith.evaluation.options import EvalOptions


@pytest.fixture
def workdir(own_folder):
    return own_folder


def test_the_next_verify_takes_the_spare_and_runs_the_files_edited_since(workdir, run_eval):
    first = run_eval(workdir / "model_new.py", spare_workers=True)
    # the candidate's, and two of each profile worker from the verify
    assert first.clean and runner.SPARES.count() == 1 + 2 * PROFILE_SPARES
    job = candidate_job(run_eval.reference, workdir / "model_new.py", EvalOptions(device="cpu"))
    [spare] = runner.SPARES.waiting(job, EvalOptions().timeout_s)
    assert spare.proc.poll() is None  # started, torch imported, waiting for its job

    # the agent rewrites the kernel after the spare started: off by one, which the spare must load
    (workdir / "model_new.py").write_text(PRELUDE + "\nclass ModelNew(Base):\n    def forward(self, x):\n"
                                          "        return kernel('axpb', x, self.bias).add_(1.0)\n")
    second = run_eval(workdir / "model_new.py", spare_workers=True)
    assert spare.proc.poll() is not None  # it ran the job and is gone: one job per process
    assert not second.correct and "wrong output" in second.error, second.error


def test_the_spare_brings_its_judge_started_with_it_and_a_judge_for_other_trials_is_dropped(workdir, run_eval):
    """The judge's torch import held up the candidate's first output by 3-5 s on the H200: a spare candidate
    is stocked with its judge beside it, sharing the handoff made at spawn."""
    assert run_eval(workdir / "model_new.py", spare_workers=True).clean
    job = candidate_job(run_eval.reference, workdir / "model_new.py", EvalOptions(device="cpu"))
    [spare] = runner.SPARES.waiting(job, EvalOptions().timeout_s)
    judge = spare.partner
    assert judge is not None and judge.proc.poll() is None and judge.job["kind"] == "judge"
    candidate = workdir / "model_new.py"
    candidate.write_text(candidate.read_text() + "\n# an edit: a verdict of these files is not reused\n")
    second = run_eval(candidate, spare_workers=True)
    assert second.clean, second.error
    assert judge.proc.wait() == 0  # it judged this verify and exited, as a judge started for it would
    assert second.seconds["verify.judge.waited"] > 0  # it sat ready before its job came
    assert second.seconds["verify.candidate.ready_wait"] >= 0  # its imports' wait is recorded, outside the lock

    again = runner.SPARES.waiting(job, EvalOptions().timeout_s)[0].partner
    candidate.write_text(candidate.read_text() + "# another\n")
    third = run_eval(candidate, spare_workers=True, trials=2)  # 2 trials: not what it was told
    assert third.clean, third.error
    assert again.proc.wait() != 0  # killed unused; a judge started for 2 trials judged instead


def test_a_verify_leaves_profile_workers_that_the_next_profile_takes(workdir, run_eval):
    verify = run_eval(workdir / "model_new.py", spare_workers=True)
    assert verify.clean
    spares = runner.SPARES.by_kind()
    assert sorted(spares) == ["candidate", "checksums", "profile"]
    assert len(spares["profile"]) == len(spares["checksums"]) == PROFILE_SPARES
    assert all(w.clock is not None for w in spares["profile"])  # the parent's clock that will time it, made with it
    profiled = run_eval(workdir / "model_new.py", profile=True, min_runs=10, spare_workers=True)
    assert profiled.clean and profiled.timings_ms["candidate"] > 0, profiled.error
    # the oldest of each ran this profile's job and exited (a spare retired unused is killed: a signal, not 0)
    assert spares["profile"][0].proc.wait() == 0 and spares["checksums"][0].proc.wait() == 0
    assert profiled.seconds["checked_runs"] > 0  # the checksums spare judged the timed outputs
    assert "profile.ready_wait" in profiled.seconds  # the jailed worker said when its imports ended
    # a profile leaves the next profiles' workers behind: the one started a profile ago is next in line,
    # and a new one started after these timed runs (never during them) tops them up again
    after = runner.SPARES.by_kind()
    assert after["profile"][0] is spares["profile"][1] and len(after["profile"]) == PROFILE_SPARES
    assert after["profile"][-1] not in spares["profile"] and after["profile"][-1].proc.poll() is None


def test_a_spare_still_importing_when_its_job_comes_holds_no_gpu_lock(tmp_path, monkeypatch):
    """A GPU job waits for its worker's imports before it takes the GPU's lock: sessions sharing a GPU
    (the pool's lanes) lost 3 s of GPU time per profile to a spare that held the lock while it imported.
    Its imports are made slow here (a sitecustomize that sleeps), and a job beside it gets the lock first."""
    import threading
    import time

    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(4)\n")
    monkeypatch.setenv("KERNELSMITH_COMPUTE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")  # no nvidia-smi: the lock is named by the spelling
    job = {"kind": "checksums", "device": "cuda", "reference": str(tmp_path / "absent.py"), "seed": 0}
    with runner.extra_env({"PYTHONPATH": f"{slow}:{os.environ.get('PYTHONPATH', '')}"}):
        worker = runner.Prestarted(job, 60).__enter__()
    failed = []
    thread = threading.Thread(target=lambda: failed.append(job_fails(worker, {"runs": [], "seed": 0})))
    thread.start()
    time.sleep(0.5)
    try:
        with runner.compute_lock({"kind": "judge", "device": "cuda", "job_id": "beside"}):
            still_importing = worker.proc.poll() is None and not (Path(worker.job["result_path"])).exists()
        assert still_importing  # the lock was free while the worker imported
    finally:
        thread.join(60)
        worker.__exit__(None, None, None)
    assert failed == [True]  # its job then ran (and failed: no reference, no GPU) and was reported


def test_a_worker_that_hangs_in_its_imports_fails_within_its_one_timeout(tmp_path):
    """The wait for a worker's imports and the wait for its job share the job's timeout: a worker stuck
    before it reads its job is a failed attempt after that timeout, not after twice it."""
    import time

    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text("import time\ntime.sleep(120)\n")
    job = {"kind": "checksums", "device": "cpu", "reference": str(tmp_path / "absent.py"), "seed": 0}
    with runner.extra_env({"PYTHONPATH": f"{hang}:{os.environ.get('PYTHONPATH', '')}"}):
        worker = runner.Prestarted(job, 4).__enter__()
    start = time.perf_counter()
    try:
        with pytest.raises(runner.JobFailed, match="timed out"):
            worker.run({"runs": [], "seed": 0})
    finally:
        worker.__exit__(None, None, None)
    assert worker.ready_wait_s is None and time.perf_counter() - start < 4 + 3  # one timeout, and the reaping


def test_a_spare_serves_only_the_job_and_gpu_it_was_started_for(workdir, task_dir):
    opts = EvalOptions(device="cpu")
    job = candidate_job(task_dir / "model.py", workdir / "model_new.py", opts)
    with runner.extra_env({"CUDA_VISIBLE_DEVICES": "0"}):
        runner.SPARES.stock(job, opts.timeout_s)
    with runner.extra_env({"CUDA_VISIBLE_DEVICES": "1"}):  # another slot's GPU
        assert runner.SPARES.take(job, opts.timeout_s) is None
    assert runner.SPARES.take({**job, "precision": "tf32"}, opts.timeout_s) is None
    with runner.extra_env({"CUDA_VISIBLE_DEVICES": "0"}):
        taken = runner.SPARES.take(job, opts.timeout_s)
    assert taken is not None and runner.SPARES.count() == 0
    taken.__exit__(None, None, None)
    assert taken.proc.poll() is not None  # a spare never sent its job is killed


def test_past_the_limit_the_oldest_spare_is_killed(workdir, task_dir, monkeypatch):
    monkeypatch.setattr(runner.Spares, "MAX", 1)
    opts = EvalOptions(device="cpu")
    jobs = [candidate_job(task_dir / "model.py", workdir / "model_new.py", EvalOptions(device="cpu", precision=p))
            for p in ("fp32", "tf32")]
    runner.SPARES.stock(jobs[0], opts.timeout_s)
    [oldest] = runner.SPARES.waiting(jobs[0], opts.timeout_s)
    runner.SPARES.stock(jobs[1], opts.timeout_s)
    assert runner.SPARES.count() == 1 and oldest.proc.poll() is not None


def test_a_verify_starts_the_profile_spares_before_it_runs_and_keeps_a_live_one(workdir, run_eval):
    """A profile comes straight after its verify (verdicts are cached, so it starts at once): spares stocked
    after the verify would have had no time to import torch. They start before it, whatever it finds."""
    (workdir / "model_new.py").write_text(PRELUDE + "\nclass ModelNew(Base):\n    def forward(self, x):\n"
                                          "        return kernel('axpb', x, self.bias).add_(1.0)\n")
    wrong = run_eval(workdir / "model_new.py", spare_workers=True)
    assert not wrong.correct
    spares = runner.SPARES.by_kind()
    assert {"profile", "checksums"} <= set(spares)  # stocked before the verify, not on its success
    run_eval(workdir / "model_new.py", spare_workers=True)
    again = runner.SPARES.by_kind()
    assert again["profile"] == spares["profile"] and all(w.proc.poll() is None for w in spares["profile"])  # kept


def test_a_cpu_sessions_verify_starts_one_profile_pair_and_nothing_that_imports_after_it(workdir, run_eval):
    """A session on the CPU (profile_spares without spare_workers): its verify starts one profile worker and
    one checksums worker, which import torch while the verify holds the CPU's evaluation slot; nothing is
    started after an evaluation, where it would import beside another session's timed runs. The profile
    then waits for no import, its own or its checker's."""
    verify = run_eval(workdir / "model_new.py", profile_spares=True)
    assert verify.clean
    spares = runner.SPARES.by_kind()
    assert sorted(spares) == ["checksums", "profile"] and len(spares["profile"]) == len(spares["checksums"]) == 1
    profiled = run_eval(workdir / "model_new.py", profile=True, min_runs=10, profile_spares=True)
    assert profiled.clean, profiled.error
    assert spares["profile"][0].proc.wait() == 0 and spares["checksums"][0].proc.wait() == 0  # they ran it
    assert profiled.seconds.get("profile.ready_wait", 0.0) < 0.5, profiled.seconds
    assert runner.SPARES.count() == 0  # and none started after it


def test_a_sessions_warm_up_starts_its_first_builds_worker_which_that_build_takes(tmp_path, monkeypatch):
    """The first compile of a session started its build worker cold (3.5 s of a 16.9 s compile on the H200):
    the warm-up stocks one for the workdir's kernels/, and the build runs in it."""
    from kernelsmith.evaluation import evaluate
    from kernelsmith.sandbox.local import LocalSandbox

    monkeypatch.setenv("KERNELSMITH_BUILD_DIR", str(tmp_path / "builds"))
    monkeypatch.setattr(evaluate, "warm_workdir", lambda workdir, opts: {"ok": True})  # baselines: elsewhere
    kernels = tmp_path / "wd" / "kernels"
    kernels.mkdir(parents=True)
    try:
        with LocalSandbox("cpu") as sandbox:
            assert sandbox.warm_baselines(tmp_path / "wd", EvalOptions(device="cpu", spare_workers=True)).result(60)
            job = evaluate.build_job(kernels, "cpu", False)
            [spare] = runner.SPARES.waiting(job, evaluate.BUILD_TIMEOUT_S)
            assert spare.proc.poll() is None
            built = sandbox.build(kernels, "cpu")  # nothing in kernels/ yet: the worker's own answer
        assert "no kernel sources" in built["summary"]
        assert runner.SPARES.count() == 0 and spare.proc.poll() is not None  # taken for this job, and gone

        evaluate.stock_build(tmp_path / "absent" / "kernels", "cpu")  # its jail could not bind the folder
        assert runner.SPARES.count() == 0
    finally:
        runner.SPARES.close()


def test_a_closed_sessions_spares_are_stopped_and_other_folders_keep_theirs(workdir, run_eval, tmp_path):
    """A session's spares wait for its workdir's next job; once it closes there is none (a trainer running many
    sessions in one process kept every one of them, each with torch imported)."""
    run_eval(workdir / "model_new.py", profile_spares=True)
    other = {"kind": "build", "kernels_dir": str(tmp_path / "elsewhere" / "kernels"), "device": "cpu", "fast_math": False}
    runner.SPARES.stock(other, 60.0)
    mine = [w for ws in runner.SPARES.by_kind().values() for w in ws if w.job.get("cwd") == str(workdir)]
    assert len(mine) == 2
    runner.SPARES.retire(workdir)
    assert [w.job["kind"] for ws in runner.SPARES.by_kind().values() for w in ws] == ["build"]
    assert all(w.proc.wait(timeout=30) is not None for w in mine)  # stopped, not just forgotten


def test_a_process_that_exits_with_a_worker_running_on_a_thread_kills_it_and_prints_no_traceback(tmp_path):
    """A session that ends in an error (an unknown model) exits while its warm-up still runs a worker on a
    thread. tempfile's exit hook then removed the worker's folder as the worker wrote into it, and printed
    a traceback after the one-line error; the exit hook now kills every running worker first."""
    task = tmp_path / "slow.py"
    task.write_text("import time, torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
                    "def get_inputs():\n    time.sleep(60)\n    return [torch.ones(4)]\n"
                    "def get_init_inputs():\n    return []\n")
    script = textwrap.dedent(f"""
        import sys, threading, time
        from kernelsmith.evaluation import runner
        from kernelsmith.evaluation.baselines import measure_baselines
        from kernelsmith.evaluation.options import EvalOptions
        threading.Thread(target=measure_baselines, args=({str(task)!r}, EvalOptions(device="cpu")), daemon=True).start()
        while not any(w.proc is not None and w.proc.poll() is None for w in list(runner.LIVE)):
            time.sleep(0.1)
        time.sleep(2)
        print(*[w.proc.pid for w in runner.LIVE], flush=True)
        sys.exit("error: model 'nope' is not known")
    """)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KERNELSMITH_TMPDIR": str(scratch)})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == "error: model 'nope' is not known"
    for pid in map(int, proc.stdout.split()):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert list(scratch.iterdir()) == []  # nothing of the worker's folder left behind


def test_the_exit_hook_kills_a_worker_still_running_on_a_thread(tmp_path):
    import threading

    from kernelsmith.evaluation.baselines import measure_baselines

    task = tmp_path / "slow.py"
    task.write_text("import time, torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
                    "def get_inputs():\n    time.sleep(60)\n    return [torch.ones(4)]\n"
                    "def get_init_inputs():\n    return []\n")
    found = []
    thread = threading.Thread(target=lambda: found.append(measure_baselines(task, EvalOptions(device="cpu"))),
                              daemon=True)
    thread.start()
    for _ in range(600):
        running = [w for w in list(runner.LIVE) if w.proc is not None and w.proc.poll() is None]
        if running:
            break
        thread.join(0.1)
    assert running, "the baselines worker never started"
    runner._at_exit()
    thread.join(30)
    assert not thread.is_alive() and found == [None]  # its job failed, killed; the warm-up says so
    assert all(w.proc.poll() is not None for w in running)
