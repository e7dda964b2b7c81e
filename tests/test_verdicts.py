"""Verify's verdict reused for identical files (evaluation/verdicts.py), with real workers on the CPU.

An agent's compile, verify, profile of one kernel verified twice; the second is reused, but only while
nothing the candidate can read has changed, and a reused verdict still leaves the profile's own checks
of every timed run's output to catch a candidate that is wrong only there."""

from __future__ import annotations

import shutil

import pytest

from conftest import HONEST, PRELUDE
from kernelsmith.evaluation import runner, verdicts
from kernelsmith.sandbox import jail

pytestmark = pytest.mark.skipif(not jail.status().jailed, reason="verdicts are reused only inside a jail")


@pytest.fixture
def workdir(task_dir, tmp_path):
    """A candidate in a folder of its own (the shared task folder changes whenever a test adds one)."""
    folder = tmp_path / "wd"
    folder.mkdir()
    shutil.copy(task_dir / "libaxpb.so", folder / "libaxpb.so")
    (folder / "model_new.py").write_text(PRELUDE + "\n" + HONEST)
    return folder


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
