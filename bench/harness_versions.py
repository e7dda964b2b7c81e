"""Harness v2 against v3: the wall time and the verdict of `kernelsmith eval`, side by side in one run.

    python bench/harness_versions.py --v2 DIR_WITH_V2_PACKAGE REF:CAND [REF:CAND ...] [--device cuda] [--out DIR]

Each pair is scored by both versions, alternating, twice each (the first with the task cold: its
build and baselines; the second warm). Each version has its own cache folder (XDG_CACHE_HOME), so
neither reuses the other's baselines. --prewarm REF:CAND is scored once by each version first, not
timed: the machine-wide one-time builds (the precompiled header, the op watch) then do not land on
whichever task comes first. Each version scores its own copy of the candidate's folder: a package
without light bindings (v2 has no templates/binding_light.h) gets them written with pybind11, as
its builds always had them. Prints a table; writes harness_versions.json after every row.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_build import as_pybind11  # noqa: E402


def score(package_root: Path, cache: Path, reference: str, candidate: str, device: str, compile_flag: str) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{package_root}:{os.environ.get('PYTHONPATH', '')}",
           "XDG_CACHE_HOME": str(cache)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kernelsmith.cli", "eval", reference, candidate, "--device", device,
                           "--json", compile_flag], capture_output=True, text=True, env=env, timeout=1200)
    wall = time.perf_counter() - start
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"wall_s": round(wall, 1), "error": (proc.stderr or proc.stdout)[-300:]}
    return {"wall_s": round(wall, 1), "correct": result.get("correct"), "clean": not result.get("violations"),
            "speedup_vs_eager": result.get("speedup_vs_eager"), "speedup_vs_compile": result.get("speedup_vs_compile"),
            "harness": result.get("harness_version"), "seconds": result.get("seconds"),
            "error": result.get("error", "")[:200], "contended": result.get("contended", "")}


def candidate_copy(package_root: Path, candidate: str, into: Path) -> str:
    """The candidate's folder (model_new.py, kernels/) copied for one version, its light bindings written
    with pybind11 where that version's package has no binding_light.h; the copy's model_new.py."""
    source = Path(candidate).resolve().parent
    if not into.exists():
        shutil.copytree(source, into, ignore=shutil.ignore_patterns(".kernelsmith", "__pycache__"))
        if not (package_root / "kernelsmith" / "templates" / "binding_light.h").is_file():
            for path in (into / "kernels").glob("*.cpp"):
                path.write_text(as_pybind11(path.read_text()))
    return str(into / Path(candidate).name)


def task_name(reference: str) -> str:
    """The task a reference belongs to: bench/candidates/<task>/model.py is named by its folder."""
    path = Path(reference)
    return path.parent.name if path.stem == "model" else path.stem


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--v2", type=Path, required=True)
    parser.add_argument("pairs", nargs="+")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--compile", action="store_true", help="also the torch.compile baselines (minutes of autotuning cold)")
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--prewarm", help="REF:CAND scored once per version first, untimed")
    args = parser.parse_args()
    versions = {"v2": args.v2.resolve(), "v3": ROOT}
    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, root in versions.items() if args.prewarm else ():
            reference, candidate = args.prewarm.split(":")
            copy = candidate_copy(root, candidate, Path(tmp) / "prewarm" / name)
            warm = score(root, Path(tmp) / name, reference, copy, args.device, "--no-compile")
            print(f"prewarm {name}: {warm['wall_s']} s", flush=True)
        for pair in args.pairs:
            reference, candidate = pair.split(":")
            for attempt in ("cold", "warm"):
                for name, root in versions.items():
                    copy = candidate_copy(root, candidate, Path(tmp) / "candidates" / task_name(reference) / name)
                    row = {"task": task_name(reference), "version": name, "caches": attempt,
                           **score(root, Path(tmp) / name, reference, copy, args.device,
                                    "--compile" if args.compile else "--no-compile")}
                    rows.append(row)
                    print(f"{row['task'][:30]:30} {name} {attempt:4} {row['wall_s']:7.1f} s  correct={row.get('correct')} "
                          f"clean={row.get('clean')} eager x{row.get('speedup_vs_eager') or 0:.3f} "
                          f"compile x{row.get('speedup_vs_compile') or 0:.3f} {row.get('error', '')[:80]}", flush=True)
                    # after every row: a device call cut at its time limit still returns what it measured
                    (args.out / "harness_versions.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
