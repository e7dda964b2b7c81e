"""Eager and torch.compile baselines of a task set, plus the task lint, through the harness workers.

    python bench/baselines.py KB/level1 KB/level2 KB/level3 --out OUT [--workers 4] [--deadline 540]

Each task runs in its own `baselines` worker (no candidate code): eager,
torch.compile default and max-autotune-no-cudagraphs, interleaved, CUDA events,
L2 flushed, fresh inputs every run, median of >= 100 runs or >= 1 s. Compilation
overlaps across workers; autotuning and timing hold the per-GPU lock, so no two
timings share the GPU. Results stream to baselines.jsonl; the table is printed
and written to baselines.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from kernelsmith.bench import level_of, task_files
from kernelsmith.evaluation import runner
from kernelsmith.evaluation.baselines import TIMERS, credited

MODES = ("default", "max-autotune-no-cudagraphs")


def run_task(path: Path, modes: tuple[str, ...], timeout: float) -> dict:
    job = {"kind": "baselines", "reference": str(path.resolve()), "device": "cuda", "precision": "fp32",
           "seed": random.randrange(1, 2**40), "compile_modes": list(modes), "lint": True,
           "cwd": str(path.parent.resolve())}
    row = {"level": level_of(path), "task": path.stem}
    start = time.perf_counter()
    try:
        value = runner.run_job(job, timeout)
    except runner.JobFailed as err:
        row["error"] = err.reason.splitlines()[0][:200]
        row["wall_s"] = round(time.perf_counter() - start, 1)
        return row
    t = value["timings"]
    # credited as the harness credits them: the faster of each baseline's two timers (evaluation/baselines.py)
    row.update({"eager_ms": credited(t, "eager"), "timers": TIMERS, "eager_p10": t["eager"]["p10"], "eager_p90": t["eager"]["p90"],
                "runs": t["eager"]["n"], "gpu": value["gpu"], "torch": value["torch"],
                "lint_flags": value.get("lint", {}).get("flags", []), "warmup_s": value["warmup_s"]})
    for mode in modes:
        if f"compile:{mode}" in t:
            row[f"compile_{mode}_ms"] = credited(t, f"compile:{mode}")
    row["wall_s"] = round(time.perf_counter() - start, 1)
    return row


def retry_out_of_memory(rows: list[dict], modes, args, log, deadline_at: float) -> list[dict]:
    """Run again, one at a time, the tasks that ran out of memory beside another job's inputs."""
    kept, retried = [], []
    for row in rows:
        oom = "out of memory" in row.get("error", "")
        (retried if oom and time.monotonic() < deadline_at else kept).append(row)
    paths = {(level_of(f), f.stem): f for f in task_files(args.paths)}
    for row in retried:
        new = run_task(paths[row["level"], row["task"]], modes, args.timeout)
        new["retried_alone"] = True
        log.write(json.dumps(new) + "\n")
        log.flush()
        print(f"[retry alone] {new['level']}/{new['task']}: {new.get('error') or new.get('eager_ms')}", flush=True)
        kept.append(new)
    return kept


def previous_rows(paths: list[Path], modes) -> dict:
    """Successful rows of earlier runs that measured every requested mode, by (level, task)."""
    done = {}
    for path in paths:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "eager_ms" in row and all(f"compile_{m}_ms" in row for m in modes):
                done[(row["level"], row["task"])] = row
    return done


def regime(ms: float) -> str:
    return "launch-bound (<20 us)" if ms < 0.02 else ("us" if ms < 1 else "ms")


def markdown(rows: list[dict], modes) -> str:
    head = "| level | task | eager ms | " + " | ".join(f"compile {m} ms" for m in modes) + \
           " | best compile / eager | runs | flags |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in sorted(rows, key=lambda r: (r["level"], int(r["task"].split("_")[0]) if r["task"][0].isdigit() else 0)):
        if "error" in r:
            cells = [r["level"], r["task"], "failed: " + r["error"]] + [""] * (len(modes) + 3)
        else:
            comp = [r.get(f"compile_{m}_ms") for m in modes]
            best = min((c for c in comp if c), default=None)
            cells = [r["level"], r["task"], f"{r['eager_ms']:.4f}", *[f"{c:.4f}" if c else "-" for c in comp],
                     f"{best / r['eager_ms']:.2f}" if best else "-", str(r["runs"]),
                     ", ".join(r["lint_flags"]) or "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--workers", type=int, default=2,
                        help="jobs at a time; each holds its task's inputs on the GPU while it waits for the lock, "
                             "and the dev set's level-1 inputs reach 6-16 GB, so keep this small")
    parser.add_argument("--timeout", type=float, default=400)
    parser.add_argument("--deadline", type=float, default=540, help="stop starting tasks after this many seconds")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--previous", type=Path, nargs="*", default=[],
                        help="baselines.jsonl files of earlier runs: tasks measured there are not run again")
    args = parser.parse_args()
    modes = tuple(m for m in args.modes.split(",") if m)
    done = previous_rows(args.previous, modes)
    files = [f for f in task_files(args.paths) if (level_of(f), f.stem) not in done]
    rows, start = list(done.values()), time.monotonic()
    log = open(args.out / "baselines.jsonl", "a")

    def guarded(path):
        if time.monotonic() - start > args.deadline:
            return {"level": level_of(path), "task": path.stem, "error": "not run: bench deadline reached"}
        return run_task(path, modes, args.timeout)

    with ThreadPoolExecutor(args.workers) as pool:
        for future in as_completed([pool.submit(guarded, f) for f in files]):
            row = future.result()
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(f"[{len(rows) - len(done)}/{len(files)}] {row['level']}/{row['task']}: "
                  f"{row.get('error') or row.get('eager_ms')}", flush=True)
    rows = retry_out_of_memory(rows, modes, args, log, start + args.deadline)
    table = markdown(rows, modes)
    (args.out / "baselines.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
