"""Shared fixtures: tiny tasks of our own and honest kernels compiled with gcc (loaded through
ctypes, so no 60-second torch-extension build is needed for most tests)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

# The test runner's parallel workers keep this machine busy by design: timings that look contended are
# still credited (the notes say so); tests of the contention rule itself unset this.
os.environ["KERNELSMITH_BUSY_OK"] = "1"
# kernelsmith's key and trusted keys live in the user's config folder: never the real one in tests.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="ks-test-config-")

from kernelsmith.evaluation.options import EvalOptions

from kernelsmith.evaluation.evaluate import evaluate

@pytest.fixture(scope="session", autouse=True)
def _tests_folders_readable_in_the_jail(tmp_path_factory):
    """Tests keep their tasks, libraries and markers under pytest's temporary folder, which the jail's
    private /tmp would hide: show it read-only (writes stay refused), as a user may with their paths."""
    os.environ["KERNELSMITH_JAIL_READABLE"] = str(tmp_path_factory.getbasetemp())


def live_processes_with(token: str) -> list[int]:
    """Host PIDs of live (not zombie) processes whose command line holds token: a jailed process knows
    only its own PID namespace's numbers, so tests find survivors by what they run."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or token.encode() not in (entry / "cmdline").read_bytes():
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """y = 2 * x + bias (bias broadcast over rows)."""

    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x * 2.0 + self.bias


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [256]
'''

KERNEL_C = r'''
#include <stdint.h>
#include <string.h>
void axpb(const float* x, const float* b, float* y, long rows, long n) {
  for (long r = 0; r < rows; ++r)
    for (long i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * 2.0f + b[i];
}
/* the same, rounded to bfloat16 on the way out: a "lowered precision" kernel */
void axpb_bf16(const float* x, const float* b, float* y, long rows, long n) {
  for (long k = 0; k < rows * n; ++k) {
    float v = x[k] * 2.0f + b[k % n];
    uint32_t bits; memcpy(&bits, &v, 4); bits &= 0xFFFF0000u; memcpy(&v, &bits, 4);
    y[k] = v;
  }
}
/* y = x * w + b, w and b broadcast over rows */
void affine(const float* x, const float* w, const float* b, float* y, long rows, long n) {
  for (long r = 0; r < rows; ++r)
    for (long i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * w[i] + b[i];
}
/* computes only the first half of the output */
void axpb_half(const float* x, const float* b, float* y, long rows, long n) {
  for (long k = 0; k < rows * n / 2; ++k) y[k] = x[k] * 2.0f + b[k % n];
}
'''

PRELUDE = '''
import ctypes
from pathlib import Path

import torch
import torch.nn as nn

_lib = ctypes.CDLL(str(Path(__file__).parent / "libaxpb.so"))


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


def kernel(name, x, bias, out=None):
    """Call one of the C kernels on contiguous float32 CPU tensors."""
    y = torch.empty_like(x) if out is None else out
    getattr(_lib, name)(_ptr(x), _ptr(bias), _ptr(y), ctypes.c_long(x.shape[0]), ctypes.c_long(x.shape[1]))
    return y


class Base(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))
'''


@pytest.fixture(scope="session")
def task_dir(tmp_path_factory) -> Path:
    """A folder with the tiny task and libaxpb.so; candidates are written beside them."""
    root = tmp_path_factory.mktemp("task")
    (root / "model.py").write_text(TASK)
    (root / "axpb.c").write_text(KERNEL_C)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(root / "axpb.c"), "-o", str(root / "libaxpb.so")],
                   check=True)
    return root


@pytest.fixture
def candidate(task_dir):
    """Write a candidate module (PRELUDE + body) and return its path."""

    def write(body: str) -> Path:
        path = task_dir / f"cand_{uuid.uuid4().hex[:8]}.py"
        path.write_text(PRELUDE + "\n" + textwrap.dedent(body))
        return path

    return write


@pytest.fixture
def own_folder(task_dir, tmp_path):
    """An honest candidate in a folder of its own (the shared task folder changes whenever a test adds
    one); spare workers and kept verdicts are dropped afterwards."""
    from kernelsmith.evaluation import runner, verdicts

    folder = tmp_path / "wd"
    folder.mkdir()
    shutil.copy(task_dir / "libaxpb.so", folder / "libaxpb.so")
    (folder / "model_new.py").write_text(PRELUDE + "\n" + HONEST)
    yield folder
    runner.SPARES.close()
    verdicts.forget()


@pytest.fixture
def run_eval(task_dir):
    """Evaluate a candidate against the tiny task on the CPU with real worker processes."""

    def run(candidate_path: Path, **options):
        options.setdefault("device", "cpu")
        options.setdefault("profile", False)
        options.setdefault("min_runs", 20)
        return evaluate(task_dir / "model.py", candidate_path, EvalOptions(**options))

    run.reference = task_dir / "model.py"
    return run


HONEST = '''
class ModelNew(Base):
    def forward(self, x):
        return kernel("axpb", x, self.bias)
'''


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def job_fails(worker, rest: dict) -> bool:
    """Whether a started worker's job, sent `rest`, ends as a failed attempt (runner.JobFailed)."""
    from kernelsmith.evaluation import runner

    try:
        worker.run(rest)
    except runner.JobFailed:
        return True
    return False


def default_sigint() -> None:
    """preexec_fn for a CLI a test sends ^C: SIGINT back to its default, so Python raises KeyboardInterrupt
    in it however the test runner was started (a runner started with `&` from a script ignores SIGINT,
    and its children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


GPU_A, GPU_B = "GPU-aaaa1111-2222-3333-4444-555566667777", "GPU-bbbb1111-2222-3333-4444-555566667777"


@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    """A fake nvidia-smi on PATH that names two GPUs (GPU_A, GPU_B), and the GPU locks in tmp_path."""
    from kernelsmith.evaluation import gpu_lock

    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho '0, {GPU_A}'\necho '1, {GPU_B}'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    monkeypatch.setenv("KERNELSMITH_COMPUTE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(gpu_lock, "_GPUS", None)
    yield
    gpu_lock._GPUS = None
