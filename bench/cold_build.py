"""Cold builds of one kernels/ folder, alternating, side by side: its light bindings as they are
(binding_light.h, REGISTER_KERNEL) against the same bindings written with pybind11 (<torch/extension.h>
first, REGISTER_BINDING from binding_registry.h; nothing else changed), which is how every binding was
built before 2026-12-05.

    python bench/cold_build.py KERNELS_DIR [--device cpu|cuda] [--runs 3] [--out DIR]

Each run copies KERNELS_DIR into a fresh folder (so its extension has a new name and no build
folder: nothing to reuse but the machine-wide PCH and the module's entry compiled beside it) and
times the build worker's own call, `kernelsmith.harness.build.build`, in a fresh process (without
the jail, which adds the same to both). The wall time is from outside; the CPU time is the worker's
children (the compilers); "slowest" names the longest compiles in ninja's log. Each side's PCH and
shared entry are made first, untimed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def as_pybind11(text: str) -> str:
    """A light binding as it was written before: <torch/extension.h> first (so it gets the PCH) and
    pybind11's registration."""
    if '#include "binding_light.h"' not in text:
        return text
    text = text.replace('#include "binding_light.h"', '#include <torch/extension.h>\n#include "binding_registry.h"', 1)
    return re.sub(r"^REGISTER_KERNEL\(", "REGISTER_BINDING(", text, flags=re.M)


SIDES = {"light bindings": lambda text: text, "pybind11 bindings": as_pybind11}


def one_build(kernels: Path, device: str, rewrite) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "kernels"
        shutil.copytree(kernels, copy)
        for source in copy.glob("*.cpp"):
            source.write_text(rewrite(source.read_text()))
        env = {**os.environ, "KERNELSMITH_BUILD_DIR": str(Path(tmp) / "build")}
        code = ("import json, sys; from kernelsmith.harness import build; "
                "r = build.build(sys.argv[1], sys.argv[2]); print(json.dumps({'ok': r.ok, 'summary': r.summary[:300], "
                "'notes': r.notes, 'seconds': r.seconds}))")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code, str(copy), device], capture_output=True, text=True,
                              env=env, timeout=1800)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        slowest = slowest_edges(Path(tmp) / "build")
    row = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"ok": False,
                                                                                       "summary": proc.stderr[-300:]}
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {**row, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "slowest": slowest}


def slowest_edges(build_root: Path, keep: int = 4) -> dict:
    """{output: seconds} of the longest steps in ninja's log (tab-separated: start ms, end ms, mtime, output)."""
    edges = {}
    for log in build_root.rglob(".ninja_log"):
        for line in log.read_text().splitlines()[1:]:
            start, end, _, output, *_ = line.split("\t")
            edges[Path(output).name] = (int(end) - int(start)) / 1000
    return dict(sorted(edges.items(), key=lambda e: -e[1])[:keep])


def table(rows: list[dict]) -> str:
    lines = ["| build | runs | wall s (median) | wall s (each) | CPU s (median) | all ok |", "|---|---|---|---|---|---|"]
    for side in SIDES:
        mine = [r for r in rows if r["side"] == side]
        lines.append(f"| {side} | {len(mine)} | {statistics.median(r['wall_s'] for r in mine):.1f} | "
                     f"{', '.join('%.1f' % r['wall_s'] for r in mine)} | "
                     f"{statistics.median(r['cpu_s'] for r in mine):.1f} | {all(r['ok'] for r in mine)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    for name, side in SIDES.items():  # each side's PCH and entry: machine-wide, once
        warm = one_build(args.kernels, args.device, side)
        print(f"untimed first build, {name} (PCH and entry made if missing): {warm['wall_s']} s, ok={warm['ok']}",
              flush=True)
    rows = []
    for run in range(args.runs):
        for name, side in SIDES.items():
            rows.append({"side": name, "run": run, **one_build(args.kernels, args.device, side)})
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cold_build.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{args.kernels} on {args.device}, {os.cpu_count()} CPUs, torch {_torch()}:")
    print(table(rows))


def _torch() -> str:
    from importlib import metadata

    return metadata.version("torch")


if __name__ == "__main__":
    main()
