"""Worker process entry point: `python -m kernelsmith.harness.worker` with a JSON job on stdin.

The worker writes its answer as JSON to job["result_path"]. It is the only place
candidate code is imported; the CLI process starts it through runner.py, which
turns crashes, signals and timeouts into readable failures.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback

from kernelsmith.harness import gpu_phase

STARTED = time.perf_counter()  # the worker's own imports, torch's above all, count from here


# Imported before the job is read, by the kinds that use them: torch's dispatch-mode machinery pulls in
# torch._dynamo (about 1.5 s) on first use, which a prestarted worker pays while the step before it runs.
# Synth's rubric compiles every task: inductor's own imports (about 1.7 s) go to its spare's wait as well.
EARLY_IMPORTS = {"candidate": ("torch._dynamo",), "profile": ("torch._dynamo",), "baselines": ("torch._dynamo",),
                 "build": ("torch.utils.cpp_extension",), "rubric": ("torch._dynamo", "torch._inductor.compile_fx")}


def _handlers(kind: str = ""):
    import importlib

    from kernelsmith.harness import build, lint, profile, timing, verify

    for name in EARLY_IMPORTS.get(kind, ()):
        importlib.import_module(name)

    return {
        "build": lambda job: build.build(job["kernels_dir"], job["device"],
                                         fast_math=job.get("fast_math", False)).__dict__,
        "candidate": verify.run_candidate,
        "judge": lambda job: verify.judge(job, job["facts"]),
        "profile": profile.run_profile,
        "baselines": profile.run_baselines,
        "checksums": profile.reference_checksums,
        "lint": lint.lint_task,
        "rubric": lambda job: _synth().run_rubric(job),
        "opgraph": lambda job: _synth().capture_graph(job),
        "prepare": _prepare,
        "cpu_caches": lambda job: {"rates": timing.read_rates(job["sizes"])},
    }


def _synth():
    """kernelsmith synth's rubric and graph capture (harness/synth_rubric.py)."""
    from kernelsmith.harness import synth_rubric

    return synth_rubric


def _prepare(job: dict) -> dict:
    """Build the native op watch in a trusted worker: the jailed profile worker may only read it."""
    os.environ["KERNELSMITH_PCH"] = "0"  # never a header a candidate's build could have written
    from kernelsmith.harness import op_watch

    module, why_not = op_watch.load_extension()
    return {"built": module is not None, "why_not": why_not}


def _with_start(value, imports_s: float, waited_s: float):
    """The worker's start in its phases (informational, like every phase): "imports" is what a worker
    started ahead of its job hides, "waited" how long it then sat ready before the job came."""
    if isinstance(value, dict) and isinstance(value.get("phases"), dict):
        value["phases"] = {"imports": round(imports_s, 3), "waited": round(waited_s, 3), **value["phases"]}
    return value


def _serve_handoff(kind: str) -> None:
    """A judge hands out its output buffers while its candidate runs, before the judge's own job
    comes (harness/handoff.py)."""
    from kernelsmith.harness import handoff

    channel = handoff.channel_from_env()
    if kind == "judge" and channel is not None:
        handoff.SERVER = handoff.serve(*channel)


def _report_ready() -> None:
    """One byte on the parent's ready pipe: imports done, the job may come (runner._await_ready). Closed
    before the job is read, so no candidate code ever holds it."""
    fd = os.environ.pop("KERNELSMITH_READY_FD", "")
    if not fd.isdigit():
        return
    with contextlib.suppress(OSError):  # the parent may have given up waiting: it sends the job anyway
        os.write(int(fd), b"r")
    with contextlib.suppress(OSError):
        os.close(int(fd))


def _drop_cwd_from_path() -> None:
    """`python -m` puts the working directory (the candidate's folder) first on sys.path, where a
    workdir's profile.py would shadow the standard library's `profile`; loading.load_module
    appends that folder at the end instead."""
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]


def main() -> int:
    _drop_cwd_from_path()
    gpu_phase.claim()
    kind = sys.argv[1] if len(sys.argv) > 1 else ""
    try:  # torch and the harness before the job: a worker started ahead of it (runner.Prestarted)
        handlers, failed = _handlers(kind), None  # imports them while the step before it runs
    except BaseException as err:  # noqa: BLE001  (reported as the job's answer below)
        handlers, failed = {}, (err, traceback.format_exc(limit=12))
    _serve_handoff(kind)
    _report_ready()
    ready = time.perf_counter()
    job = json.loads(sys.stdin.read())
    arrived = time.perf_counter()
    os.environ["KERNELSMITH_DEVICE"] = job.get("device", "cpu")
    try:
        if failed:
            raise failed[0]
        if job["kind"] in ("candidate", "profile", "prepare"):  # load_inline and the op watch build with $CXX
            from kernelsmith.evaluation import toolchain

            toolchain.choose_compiler([])
        answer = {"ok": True, "value": _with_start(handlers[job["kind"]](job), ready - STARTED, arrived - ready)}
    except BaseException as err:  # the candidate may raise anything; it is a failed attempt
        answer = {"ok": False, "error": f"{type(err).__name__}: {err}".strip(),
                  "traceback": (failed[1] if failed else "") + traceback.format_exc(limit=12)}
    with open(job["result_path"], "w") as f:
        json.dump(answer, f, default=str)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: a broken CUDA context must not hang the exit


if __name__ == "__main__":
    sys.exit(main())
