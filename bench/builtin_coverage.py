"""Which dev tasks the built-in policy can generate kernels for (CPU only: capture, partition,
generate; nothing is built or run). Prints a per-level table and the reason for each task
it cannot do.

    python bench/builtin_coverage.py .shared/kernelbench [--device cuda|cpu] [--timeout 120] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

ONE_TASK = """
import json, sys, warnings
warnings.filterwarnings("ignore")
from kernelsmith.compiler.pipeline import build_plan
built = build_plan(sys.argv[1], sys.argv[2], "fp32")
print(json.dumps({"supported": not built.unsupported, "why": "; ".join(built.unsupported),
                  "plan": built.summary if not built.unsupported else ""}))
"""


def check(task: Path, device: str, timeout: float) -> dict:
    """One task in its own process, so a slow or crashing capture cannot stop the table."""
    try:
        proc = subprocess.run([sys.executable, "-c", ONE_TASK, str(task), device], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"supported": False, "why": f"capture took over {timeout:g} s", "plan": ""}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"supported": False, "why": "crashed: " + (proc.stderr.strip().splitlines() or ["?"])[-1], "plan": ""}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for task in sorted(args.root.glob("level*/*.py")):
        row = {"level": task.parent.name, "task": task.name, **check(task, args.device, args.timeout)}
        rows.append(row)
        print(f"{row['level']}/{row['task']}: {'ok: ' + row['plan'] if row['supported'] else row['why']}", flush=True)
    print_table(rows)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


def print_table(rows: list[dict]) -> None:
    by_level = collections.defaultdict(list)
    for row in rows:
        by_level[row["level"]].append(row)
    print("\n| level | tasks | supported | share |\n|---|---|---|---|")
    for level, items in sorted(by_level.items()):
        ok = sum(r["supported"] for r in items)
        print(f"| {level} | {len(items)} | {ok} | {ok / len(items):.0%} |")
    reasons = collections.Counter(r["why"].split(" is not")[0].split(" on ")[0] for r in rows if not r["supported"])
    print("\nwhy not:", ", ".join(f"{k} ({v})" for k, v in reasons.most_common()))


if __name__ == "__main__":
    main()
