"""Wall time of one optimize session, per turn and per tool, from its session record.

    python bench/agent_session.py TASK --script SCRIPT [--device cuda] [--out DIR]

Runs `kernelsmith optimize TASK --backend scripted --script SCRIPT --json` in a fresh workdir
(the scripted backend replays kernels we wrote, so the time is the harness's, not a model's),
then prints a table of every tool call with its wall time, and for compile / verify / profile
the split the harness reports (build, verify, profile seconds). Writes session.jsonl and
agent_session.json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def run_session(task: Path, script: Path, device: str, workdir: Path) -> tuple[int, list[dict], float]:
    cmd = [sys.executable, "-m", "kernelsmith.cli", "optimize", str(task), "--workdir", str(workdir),
           "--backend", "scripted", "--script", str(script), "--device", device, "--json"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"optimize failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")], wall


def rows(events: list[dict]) -> list[dict]:
    evals = {(e["turn"], e["tool"]): e["result"] for e in events if e["kind"] == "eval_result"}
    table = []
    for e in events:
        if e["kind"] != "tool_result":
            continue
        result = evals.get((e["turn"], e["name"]), {})
        split = result.get("seconds", {}) if isinstance(result, dict) else {}
        table.append({"turn": e["turn"], "tool": e["name"], "ok": e["ok"], "seconds": e.get("seconds", 0.0),
                      "split": {k: round(v, 2) for k, v in split.items() if isinstance(v, (int, float))},
                      "first_line": e["content"].splitlines()[0][:70] if e["content"] else ""})
    return table


def markdown(table: list[dict]) -> str:
    lines = ["| turn | tool | ok | wall s | harness split (s) | result |", "|---|---|---|---|---|---|"]
    for r in table:
        split = ", ".join(f"{k} {v}" for k, v in r["split"].items())
        lines.append(f"| {r['turn']} | {r['tool']} | {r['ok']} | {r['seconds']:.2f} | {split} | {r['first_line']} |")
    totals = defaultdict(float)
    for r in table:
        totals[r["tool"]] += r["seconds"]
    lines.append("")
    lines.append("| tool | calls | total wall s |")
    lines.append("|---|---|---|")
    for tool, total in sorted(totals.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {tool} | {sum(r['tool'] == tool for r in table)} | {total:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task", type=Path)
    parser.add_argument("--script", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        code, events, wall = run_session(args.task.resolve(), args.script.resolve(), args.device, Path(tmp) / "wd")
    table = rows(events)
    end = events[-1] if events else {}
    print(f"task {args.task.name}, device {args.device}, exit {code}, session wall {wall:.1f} s, "
          f"ended: {end.get('reason')}")
    print(markdown(table))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "session.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (args.out / "agent_session.json").write_text(json.dumps({"exit": code, "wall_s": wall, "rows": table,
                                                             "end": end}, indent=1))


if __name__ == "__main__":
    main()
