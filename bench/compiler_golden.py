"""A digest of everything the built-in compiler generates for each task, per target: the kernel files,
the ModelNew source with the default variants, the variant names, the plan's summary, or the reason it
refuses. A refactor of the compiler must leave every digest unchanged (issue 20's "byte-identical").

    python bench/compiler_golden.py ../shared/kernelbench examples --out before.json
    python bench/compiler_golden.py ../shared/kernelbench examples --compare before.json

Each task runs in its own process (a slow capture cannot stop the table). Needs only the CPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ONE_TASK = """
import hashlib, json, sys, warnings
warnings.filterwarnings("ignore")
from kernelsmith.compiler.pipeline import build_plan
built = build_plan(sys.argv[1], sys.argv[2], "fp32")
parts = {"unsupported": built.unsupported, "summary": built.summary, "variants": built.variants}
if not built.unsupported:
    parts["files"] = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in sorted(built.files.items())}
    parts["model_new"] = hashlib.sha256(built.model_new([0] * len(built.variants)).encode()).hexdigest()
print(json.dumps(parts, sort_keys=True))
"""


def tasks_under(roots: list[Path]) -> list[Path]:
    """KernelBench tasks (level*/*.py) and the examples' reference files (*/model.py)."""
    found = []
    for root in roots:
        found += sorted(root.glob("level*/*.py")) or sorted(root.glob("*/model.py"))
    return found


def digest(task: Path, device: str, timeout: float) -> dict:
    try:
        proc = subprocess.run([sys.executable, "-c", ONE_TASK, str(task), device], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"took over {timeout:g} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": "crashed: " + (proc.stderr.strip().splitlines() or ["?"])[-1]}
    parts = json.loads(lines[-1])
    parts["sha256"] = hashlib.sha256(lines[-1].encode()).hexdigest()
    return parts


def collect(tasks: list[Path], devices: list[str], timeout: float, jobs: int) -> dict:
    keys = [(task, device) for task in tasks for device in devices]
    with ThreadPoolExecutor(jobs) as pool:
        rows = pool.map(lambda key: digest(*key, timeout), keys)
    return {f"{task}:{device}": row for (task, device), row in zip(keys, rows)}


def compare(now: dict, before: dict) -> list[str]:
    changed = [key for key in sorted(set(now) | set(before))
               if now.get(key, {}).get("sha256") != before.get(key, {}).get("sha256")]
    for key in changed:
        print(f"CHANGED {key}: {before.get(key)} -> {now.get(key)}"[:600])
    return changed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("roots", type=Path, nargs="+")
    parser.add_argument("--devices", default="cuda,cpu")
    parser.add_argument("--timeout", type=float, default=240.0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", type=Path)
    args = parser.parse_args()
    now = collect(tasks_under(args.roots), args.devices.split(","), args.timeout, args.jobs)
    supported = sum(not row.get("unsupported") and "error" not in row for row in now.values())
    print(f"{len(now)} task-targets, {supported} generated")
    if args.out:
        args.out.write_text(json.dumps(now, indent=1, sort_keys=True))
    if args.compare:
        changed = compare(now, json.loads(args.compare.read_text()))
        print(f"{len(changed)} changed")
        sys.exit(1 if changed else 0)


if __name__ == "__main__":
    main()
