"""One edit-build-verify-profile iteration: a kernelsmith session against CUDA Agent's scripts, side by side.

    python bench/iteration_speed.py REF:CANDIDATE_DIR [...] --cuda-agent AGENT_WORKDIR
        [--iterations 2] [--device cuda] [--prewarm REF:CANDIDATE_DIR] [--out DIR] [--resume]

CANDIDATE_DIR holds model_new.py and kernels/ (a kernel per .cu, a `*_binding.cpp` per kernel
using kernelsmith's REGISTER_KERNEL or REGISTER_BINDING(name, fn)). Each task is run by both sides in this process's
one call, one after the other (never at once: both time on the same GPU):

- kernelsmith: `kernelsmith optimize REF --backend scripted` with a script that writes the kernels
  and compiles (the cold build), writes model_new.py and verifies, profiles (the session's first
  profile: its baselines were started at reset), then N times edits a .cu (a new comment line:
  new bytes, so a real rebuild), compiles, verifies and profiles (the steady-state iterations),
  and finishes. Seconds per tool call come from the session record. Then `kernelsmith compile`
  on the finished workdir, timed from outside: the CLI's cached build.
- CUDA Agent: a copy of its released agent_workdir with the task as model.py and the same kernels
  (each binding's registration rewritten to its registry's macro, model_new.py importing its
  `cuda_extension`); N + 1 iterations, each editing the same .cu and running `bash
  utils/compile.sh`, `python3 -m utils.verification` and `python3 -m utils.profiling`, timed
  from outside. Its compile always rebuilds from scratch; its profile compiles torch.compile
  every call.

A row per task and side goes to iteration_speed.jsonl as it ends (--resume skips those done); the
table at the end compares them. --prewarm runs one untimed kernelsmith session first, so the
machine-wide one-time builds (the precompiled header, the op watch) land on no task.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent_session import rows as tool_rows, run_session

STEADY_TOOLS = ("write_file", "compile", "verify", "profile")


def cu_file(candidate: Path) -> Path:
    """The kernel source the iterations edit: the first .cu (on the CPU, the first .cpp that is no binding)."""
    sources = sorted(candidate.glob("kernels/*.cu")) or sorted(
        p for p in candidate.glob("kernels/*.cpp") if not p.name.endswith("_binding.cpp"))
    return sources[0]


def edited(text: str, i: int) -> str:
    return text + f"\n// iteration {i}\n"


def script_turns(candidate: Path, iterations: int) -> list[dict]:
    kernels = sorted((candidate / "kernels").iterdir())
    cu = cu_file(candidate)
    writes = [call("write_file", path=f"kernels/{k.name}", **{"content@file": str(k)}) for k in kernels]
    turns = [{"text": "write the kernels", "tool_calls": [
                 call("bash", command="rm -f kernels/example_scale.cu kernels/example_scale_binding.cpp"),
                 *writes, call("compile")]},
             {"text": "call them", "tool_calls": [
                 call("write_file", path="model_new.py", **{"content@file": str(candidate / "model_new.py")}),
                 call("verify")]},
             {"text": "first profile", "tool_calls": [call("profile")]}]
    for i in range(1, iterations + 1):
        turns.append({"text": f"iteration {i}", "tool_calls": [
            call("write_file", path=f"kernels/{cu.name}", content=edited(cu.read_text(), i)),
            call("compile"), call("verify"), call("profile")]})
    turns.append({"text": "done", "tool_calls": [call("finish", summary="iteration-speed bench")]})
    return turns


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def kernelsmith_row(reference: Path, candidate: Path, iterations: int, device: str, tmp: Path,
                    keep: Path | None = None) -> dict:
    script = tmp / "script.json"
    script.write_text(json.dumps(script_turns(candidate, iterations)))
    workdir = tmp / "wd"
    code, events, wall = run_session(reference, script, device, workdir)
    if keep is not None:  # the session record: each evaluation's phases (observation.eval.seconds)
        for record in workdir.glob(".kernelsmith/sessions/*/events.jsonl"):
            shutil.copy(record, keep)
    table = tool_rows(events)
    cached = timed([sys.executable, "-m", "kernelsmith.cli", "compile", str(workdir), "--json"], workdir)
    return {"side": "kernelsmith", "exit": code, "session_s": round(wall, 1), **summarise(table, iterations),
            "cached_build_s": cached["seconds"], "cached_build_ok": cached["ok"]}


def summarise(table: list[dict], iterations: int) -> dict:
    """The session's tool calls by turn: turn 2 builds cold, 3 verifies, 4 profiles first, 5.. iterate."""
    by_turn: dict[int, dict[str, dict]] = {}
    for r in table:
        by_turn.setdefault(r["turn"], {})[r["tool"]] = r
    first = sorted(by_turn)[:3]
    steady = [by_turn[t] for t in sorted(by_turn)[3:3 + iterations]]
    out = {"cold_build_s": pick(by_turn, first, 0, "compile"), "first_verify_s": pick(by_turn, first, 1, "verify"),
           "first_profile_s": pick(by_turn, first, 2, "profile"),
           "iterations": [{tool: round(turn[tool]["seconds"], 2) for tool in STEADY_TOOLS if tool in turn}
                          for turn in steady],
           "all_ok": all(r["ok"] for r in table if r["tool"] != "bash"),
           "failures": [f"turn {r['turn']} {r['tool']}: {r['first_line']}" for r in table if not r["ok"]]}
    return {**out, "steady_s": median_total(out["iterations"])}


def pick(by_turn: dict, turns: list[int], index: int, tool: str) -> float | None:
    if index >= len(turns) or tool not in by_turn[turns[index]]:
        return None
    return round(by_turn[turns[index]][tool]["seconds"], 2)


def median_total(iterations: list[dict]) -> float | None:
    totals = [sum(it.values()) for it in iterations]
    return round(statistics.median(totals), 2) if totals else None


def timed(cmd: list[str], cwd: Path, timeout: float = 900) -> dict:
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "seconds": round(time.perf_counter() - start, 2), "tail": "timed out"}
    return {"ok": proc.returncode == 0, "seconds": round(time.perf_counter() - start, 2),
            "tail": (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [""]}


REGISTRATION = re.compile(r"^REGISTER_(?:BINDING|KERNEL)\((\w+),\s*(\w+)\);", re.M)


def agent_binding(text: str) -> str:
    """kernelsmith's REGISTER_KERNEL or REGISTER_BINDING(name, fn) as CUDA Agent's REGISTER_BINDING(name,
    module -> void), whose registry needs <torch/extension.h> (a light binding gets it in place of
    binding_light.h: at::Tensor and c10's CUDA stream are in it too)."""
    text = text.replace('#include "binding_light.h"',
                        '#include <torch/extension.h>\n#include "../binding_registry.h"')
    text = text.replace('#include "binding_registry.h"', '#include "../binding_registry.h"')
    return REGISTRATION.sub(lambda m: f"static void ks_register_{m[1]}(pybind11::module& m) {{ m.def(\"{m[1]}\", "
                                      f"&{m[2]}); }}\nREGISTER_BINDING({m[1]}, ks_register_{m[1]});", text)


def agent_model_new(text: str) -> str:
    return text.replace("from kernelsmith.ext import load_kernels\n", "import cuda_extension\n") \
               .replace("ext = load_kernels()", "ext = cuda_extension")


def agent_workdir(template: Path, reference: Path, candidate: Path, into: Path) -> Path:
    shutil.copytree(template, into)
    for example in (into / "kernels").iterdir():
        example.unlink()
    shutil.copy(reference, into / "model.py")
    for k in sorted((candidate / "kernels").iterdir()):
        text = k.read_text()
        (into / "kernels" / k.name).write_text(agent_binding(text) if k.name.endswith("_binding.cpp") else text)
    (into / "model_new.py").write_text(agent_model_new((candidate / "model_new.py").read_text()))
    return into


def cuda_agent_row(template: Path, reference: Path, candidate: Path, iterations: int, tmp: Path) -> dict:
    wd = agent_workdir(template, reference, candidate, tmp / "agent")
    cu = wd / "kernels" / cu_file(candidate).name
    original = cu.read_text()
    runs = []
    for i in range(iterations + 1):
        cu.write_text(edited(original, i))
        steps = {"compile": timed(["bash", "utils/compile.sh"], wd), "verify": timed(
            [sys.executable, "-m", "utils.verification"], wd), "profile": timed([sys.executable, "-m", "utils.profiling"], wd)}
        runs.append(steps)
    iters = [{k: v["seconds"] for k, v in steps.items()} for steps in runs]
    failures = [f"iteration {i} {k}: {v['tail']}" for i, steps in enumerate(runs) for k, v in steps.items() if not v["ok"]]
    return {"side": "cuda-agent", "cold_build_s": iters[0]["compile"], "first_verify_s": iters[0]["verify"],
            "first_profile_s": iters[0]["profile"], "iterations": iters[1:], "steady_s": median_total(iters[1:]),
            "all_ok": not failures, "failures": failures, "profile_line": runs[-1]["profile"]["tail"]}


def pair(spec: str) -> tuple[Path, Path]:
    reference, candidate = spec.split(":")
    return Path(reference).resolve(), Path(candidate).resolve()


def task_name(reference: Path) -> str:
    return f"{reference.parent.name}/{reference.stem}"


def table(done: list[dict]) -> str:
    lines = ["| task | side | cold build s | first verify s | first profile s | steady iteration s (median) | "
             "cached build s | all ok |", "|---|---|---|---|---|---|---|---|"]
    for r in done:
        lines.append(f"| {r['task']} | {r['side']} | {r.get('cold_build_s')} | {r.get('first_verify_s')} | "
                     f"{r.get('first_profile_s')} | {r.get('steady_s')} | {r.get('cached_build_s', '-')} | "
                     f"{r.get('all_ok')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pairs", nargs="+", help="REF:CANDIDATE_DIR")
    parser.add_argument("--cuda-agent", type=Path, required=True, help="CUDA Agent's agent_workdir")
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--prewarm", help="REF:CANDIDATE_DIR run once by kernelsmith first, untimed")
    parser.add_argument("--sides", default="kernelsmith,cuda-agent")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "iteration_speed.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if args.resume and log.exists() else []
    if args.prewarm:
        with tempfile.TemporaryDirectory() as tmp:
            ref, cand = pair(args.prewarm)
            start = time.perf_counter()
            kernelsmith_row(ref, cand, 0, args.device, Path(tmp))
            print(f"prewarm {task_name(ref)}: {time.perf_counter() - start:.1f} s", flush=True)
    for spec in args.pairs:
        reference, candidate = pair(spec)
        for side in args.sides.split(","):
            if any(r["task"] == task_name(reference) and r["side"] == side for r in done):
                continue
            with tempfile.TemporaryDirectory() as tmp:
                keep = args.out / f"events_{reference.stem}.jsonl"
                row = (kernelsmith_row(reference, candidate, args.iterations, args.device, Path(tmp), keep)
                       if side == "kernelsmith" else
                       cuda_agent_row(args.cuda_agent.resolve(), reference, candidate, args.iterations, Path(tmp)))
            row = {"task": task_name(reference), **row}
            done.append(row)
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    print(table(done))


if __name__ == "__main__":
    main()
