"""Verify's verdict reused for identical files (evaluation/verdicts.py), with real workers on the CPU.

An agent's compile, verify, profile of one kernel verified twice; the second is reused, but only while
nothing the candidate can read has changed, and a reused verdict still leaves the profile's own checks
of every timed run's output to catch a candidate that is wrong only there."""

from __future__ import annotations


import pytest

from conftest import PRELUDE
from kernelsmith.evaluation import runner, verdicts
from kernelsmith.sandbox import jail

pytestmark = pytest.mark.skipif(not jail.status().jailed, reason="verdicts are reused only inside a jail")


@pytest.fixture
def workdir(own_folder):
    return own_folder


@pytest.fixture
def candidate_jobs(monkeypatch):
    """How many candidate workers were started (the cost a reused verdict saves)."""
    verdicts.forget()
    started = []
    spawn = runner._spawn

    def counting(job, log_path):
        started.append(job["kind"])
        return spawn(job, log_path)

    monkeypatch.setattr(runner, "_spawn", counting)
    return started


def test_an_unchanged_workdir_is_verified_once_and_any_change_verifies_again(workdir, run_eval, candidate_jobs):
    first = run_eval(workdir / "model_new.py")
    again = run_eval(workdir / "model_new.py")
    assert first.clean and again.clean and again.trials == first.trials
    assert candidate_jobs.count("candidate") == 1 and candidate_jobs.count("judge") == 1
    assert any("verdict of the identical files" in note for note in again.notes)

    (workdir / "notes.md").write_text("a file the candidate could read\n")  # what the agent's bash may write
    changed = run_eval(workdir / "model_new.py")
    assert changed.clean and candidate_jobs.count("candidate") == 2
    assert not any("verdict of the identical files" in note for note in changed.notes)
    run_eval(workdir / "model_new.py", precision="tf32")  # another precision: its own verdict
    assert candidate_jobs.count("candidate") == 3


def test_a_failed_verify_is_never_reused(workdir, run_eval, candidate_jobs):
    (workdir / "model_new.py").write_text(PRELUDE + "\nclass ModelNew(Base):\n    def forward(self, x):\n"
                                          "        return kernel('axpb', x, self.bias) + 1.0\n")
    assert not run_eval(workdir / "model_new.py").correct
    assert not run_eval(workdir / "model_new.py").correct
    assert candidate_jobs.count("candidate") == 2


def test_a_reused_verdict_still_profiles_and_checks_the_timed_outputs(workdir, run_eval, candidate_jobs):
    """Right for its first 50 calls in a process (verify makes fewer), wrong after: a profile after a
    reused verify still catches it, by its checks of the timed outputs."""
    (workdir / "model_new.py").write_text(PRELUDE + '''
CALLS = [0]


class ModelNew(Base):
    def forward(self, x):
        CALLS[0] += 1
        out = kernel("axpb", x, self.bias)
        return out if CALLS[0] <= 50 else kernel("axpb", out, self.bias)  # 2 (2x + b) + b
''')
    assert run_eval(workdir / "model_new.py").clean  # 5 trials: right every time
    profiled = run_eval(workdir / "model_new.py", profile=True, min_runs=100)
    assert candidate_jobs.count("candidate") == 1 and candidate_jobs.count("profile") == 1
    assert not profiled.clean and profiled.stage == "profile", (profiled.error, profiled.violations)


def test_a_fifo_in_the_workdir_never_blocks_the_key_and_means_no_reuse(workdir, task_dir):
    """The agent's bash may `mkfifo`: opening one to hash it blocked the session forever (found by review)."""
    import os
    import threading

    from kernelsmith.evaluation.options import EvalOptions

    os.mkfifo(workdir / "kernels.pipe")
    found = {}
    thread = threading.Thread(target=lambda: found.setdefault(
        "key", verdicts.key(task_dir / "model.py", workdir / "model_new.py", EvalOptions(), {})), daemon=True)
    thread.start()
    thread.join(10)
    assert "key" in found and found["key"] is None


def test_the_key_covers_the_build_output_and_skips_only_what_no_candidate_sees(workdir, task_dir):
    from kernelsmith.evaluation.options import EvalOptions

    def key():
        return verdicts.key(task_dir / "model.py", workdir / "model_new.py", EvalOptions(), {})

    (workdir / ".kernelsmith" / "build").mkdir(parents=True)
    (workdir / ".kernelsmith" / "build" / "ext.so").write_bytes(b"one build")
    before = key()
    (workdir / ".kernelsmith" / "sessions" / "s1").mkdir(parents=True)
    (workdir / ".kernelsmith" / "sessions" / "s1" / "events.jsonl").write_text('{"the agent": "says"}\n')
    assert key() == before  # hidden from every candidate jail (next test), so no channel to it
    (workdir / ".kernelsmith" / "build" / "ext.so").write_bytes(b"another build")
    assert key() != before


def test_a_candidate_cannot_read_the_session_records_or_git(workdir, run_eval):
    (workdir / ".kernelsmith" / "sessions" / "s1").mkdir(parents=True)
    (workdir / ".kernelsmith" / "sessions" / "s1" / "events.jsonl").write_text("SECRET-MESSAGE\n")
    (workdir / ".git").mkdir()
    (workdir / ".git" / "HEAD").write_text("SECRET-HEAD\n")
    (workdir / "model_new.py").write_text(PRELUDE + '''
import os

HERE = Path(__file__).parent
SEEN = [p for p in (HERE / ".kernelsmith" / "sessions" / "s1" / "events.jsonl", HERE / ".git" / "HEAD") if p.exists()]


class ModelNew(Base):
    def forward(self, x):
        raise RuntimeError("seen: " + ",".join(p.read_text().strip() for p in SEEN))
''')
    result = run_eval(workdir / "model_new.py")
    assert "seen:" in result.error and "SECRET" not in result.error, result.error
