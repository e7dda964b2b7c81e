"""The roofline fractions of a bench's kernels: for each session, its best profiled kernel's time against the
task's floor (the fewest bytes it must move at the GPU's measured copy bandwidth, or its FLOPs at the measured
matmul rate, whichever is slower; kernelsmith/evaluation/ceilings.py), with eager's beside it.

    python bench/roofline_report.py BENCH_OUT_OR_EVENTS_TGZ... [--target 80]

Reads every session's events.jsonl under the bench's workdirs (or in the events.tgz that
`bash bench/device.sh builtin-bench` brings back). "Best" is the fastest verified profile of the session, as
the session itself credits it. Issue 20's bar: memory-bound level-1 kernels at >= 80% of the copy bandwidth."""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernelsmith.evaluation.ceilings import percentages  # noqa: E402


def event_files(source: Path) -> dict[str, list[str]]:
    """{path of an events.jsonl: its lines}, from a folder or a .tgz of one."""
    if source.is_dir():
        return {str(p.relative_to(source)): p.read_text().splitlines() for p in sorted(source.rglob("events.jsonl"))}
    with tarfile.open(source) as tar:
        return {m.name: io.TextIOWrapper(tar.extractfile(m)).read().splitlines()
                for m in tar.getmembers() if m.isfile() and m.name.endswith("events.jsonl")}


def best_profile(lines: list[str]) -> dict | None:
    """The session's fastest correct profile that has a roofline."""
    best = None
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line torn by a killed session
        result = event.get("result") or {}
        if event.get("kind") != "eval_result" or event.get("tool") != "profile" or not result.get("correct"):
            continue
        if (result.get("roofline") or {}).get("flops") is None or not (result.get("timings_ms") or {}).get("candidate"):
            continue
        if best is None or result["timings_ms"]["candidate"] < best["timings_ms"]["candidate"]:
            best = result
    return best


def task_of(path: str) -> tuple[str, str]:
    """(level, task) from .../workdirs/LEVEL/TASK/runN/.kernelsmith/..."""
    parts = Path(path).parts
    at = parts.index("workdirs") if "workdirs" in parts else -1
    return (parts[at + 1], parts[at + 2]) if at >= 0 and len(parts) > at + 2 else ("?", Path(path).parent.name)


def row(path: str, result: dict) -> dict:
    roof, times, precision = result["roofline"], result["timings_ms"], result.get("precision") or "fp32"
    cand, eager = percentages(roof, times["candidate"], precision), percentages(roof, times.get("eager"), precision)
    level, task = task_of(path)
    return {"level": level, "task": task, "bound": cand.get("bound"), "candidate_ms": times["candidate"],
            "floor_ms": cand.get("floor_ms"), "pct_bandwidth": cand.get("pct_of_bandwidth"),
            "pct_flops": cand.get("pct_of_flops"), "eager_pct_bandwidth": eager.get("pct_of_bandwidth"),
            "gpu": (roof.get("ceilings") or {}).get("gpu"), "speedup_vs_eager": result.get("speedup_vs_eager")}


def table(rows: list[dict], target: float) -> str:
    out = ["| level | task | bound | candidate ms | floor ms | % of bandwidth | % of FLOP/s | eager % of bandwidth |",
           "|---|---|---|--:|--:|--:|--:|--:|"]
    for r in sorted(rows, key=lambda r: (r["level"], r["task"])):
        out.append(f"| {r['level']} | {r['task']} | {r['bound'] or '?'} | {r['candidate_ms']:.4g} | "
                   f"{_num(r['floor_ms'])} | {_num(r['pct_bandwidth'])} | {_num(r['pct_flops'])} | "
                   f"{_num(r['eager_pct_bandwidth'])} |")
    memory = [r for r in rows if r["bound"] == "memory" and r["pct_bandwidth"] is not None]
    if memory:
        met = [r for r in memory if r["pct_bandwidth"] >= target]
        out += ["", f"Memory-bound kernels: {len(met)} of {len(memory)} at >= {target:g}% of the copy bandwidth; "
                    f"median {statistics.median(r['pct_bandwidth'] for r in memory):.1f}%."]
    gpus = sorted({r["gpu"] for r in rows if r["gpu"]})
    out.append(f"Ceilings of {', '.join(gpus) or 'no known GPU (CPU sessions have none)'}.")
    return "\n".join(out)


def _num(value) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", type=Path, nargs="+", help="bench --out folders or events.tgz files")
    parser.add_argument("--target", type=float, default=80.0, help="the bar, in percent of the copy bandwidth")
    parser.add_argument("--json", action="store_true", help="the rows as JSON lines instead of the table")
    args = parser.parse_args(argv)
    rows = []
    for source in args.sources:
        if not source.exists():
            parser.error(f"{source} does not exist")
        for path, lines in event_files(source).items():
            if (best := best_profile(lines)) is not None:
                rows.append(row(path, best))
    if not rows:
        print("no profiled kernel with a roofline in these sessions", file=sys.stderr)
        return 1
    print("\n".join(json.dumps(r) for r in rows) if args.json else table(rows, args.target))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
