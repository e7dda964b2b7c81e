"""Seed a compile-baseline cache from rows of bench/baselines.py, so bench sessions need not measure them.

    python bench/seed_baselines.py ROWS.jsonl... --tasks DIR --out FILE [--device cuda] [--precision fp32]
    kernelsmith bench DIR/level1 DIR/level2 ... --baselines-cache FILE

A row (level, task, eager_ms, compile_<mode>_ms, gpu, torch, warmup_s) becomes the entry that
evaluate.apply_baselines would have written after measuring the task itself, under the
same key: the digest of the workdir's model.py (the text kernelsmith.task.load_task gives for
DIR/<level>/<task>.py, which is not always the file's raw bytes), device, precision and compile
modes, then the row's GPU and torch version. Only rows without an error that have every mode in
COMPILE_MODES are seeded. The eager-drift check still guards every seeded entry: a session whose
live eager is more than 10% off the row's eager measures the baselines again.

FILE is merged into (under the same lock the sessions take); a seeded row replaces an entry of the
same key. Rows carry no timestamp, so measured_at is the rows file's modification time.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from kernelsmith.errors import KernelsmithError
from kernelsmith.evaluation.options import COMPILE_MODES
from kernelsmith.evaluation.baselines import cache_key, merge_cache, task_digest
from kernelsmith.task import load_task


def model_text(task_file: Path) -> bytes:
    """The bytes of the model.py that `kernelsmith init` / a bench session writes for this task."""
    return load_task(str(task_file)).source.encode("utf-8")


def entry_of(row: dict, tasks: Path, device: str, precision: str, origin: str, measured_at: float):
    """(key, entry), or (None, why it is skipped)."""
    if row.get("error"):
        return None, "error"
    missing = [m for m in COMPILE_MODES if not isinstance(row.get(f"compile_{m}_ms"), (int, float))]
    if missing:
        return None, "missing compile modes: " + ", ".join(missing)
    if not isinstance(row.get("eager_ms"), (int, float)) or not row.get("gpu") or not row.get("torch"):
        return None, "no eager_ms, gpu or torch"
    task_file = tasks / row.get("level", "") / f"{row['task']}.py"
    if not task_file.is_file():
        return None, "task file not found"
    try:
        digest = task_digest(model_text(task_file), device, precision)
    except KernelsmithError as err:
        return None, f"task not loadable: {str(err).splitlines()[0][:80]}"
    entry = {"eager_ms": row["eager_ms"], "compile_ms": {m: row[f"compile_{m}_ms"] for m in COMPILE_MODES},
             "warmup_s": row.get("warmup_s", {}), "measured_at": measured_at, "seeded_from": origin}
    if row.get("timers"):  # rows timed before both timers were taken seed entries a session measures again
        entry["timers"] = row["timers"]
    return cache_key(digest, row["gpu"], row["torch"]), entry


def seed(rows_files: list[Path], tasks: Path, out: Path, device: str, precision: str) -> tuple[dict, Counter]:
    entries, skipped = {}, Counter()
    for rows_file in rows_files:
        measured_at = rows_file.stat().st_mtime
        for number, line in enumerate(rows_file.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            row = json.loads(line)
            key, entry = entry_of(row, tasks, device, precision, str(rows_file), measured_at)
            if key is None:
                skipped[entry] += 1
                print(f"skipped {rows_file}:{number} {row.get('level', '')}/{row.get('task')}: {entry}")
            else:
                entries[key] = entry  # a later row of the same task wins, as in bench/baselines.py --previous
    replaced = merge_cache(out, entries)
    return {"seeded": len(entries), "replaced": replaced, "total": len(json.loads(out.read_text()))}, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="+", type=Path, help="baselines.jsonl files written by bench/baselines.py")
    parser.add_argument("--tasks", type=Path, required=True, help="the task set: DIR/<level>/<task>.py")
    parser.add_argument("--out", type=Path, required=True, help="the cache file to create or merge into")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--precision", default="fp32")
    args = parser.parse_args()
    counts, skipped = seed(args.rows, args.tasks.resolve(), args.out.resolve(), args.device, args.precision)
    print(f"seeded {counts['seeded']} entries ({counts['replaced']} replaced existing ones), "
          f"skipped {sum(skipped.values())} rows; {args.out} now holds {counts['total']} entries")
    for reason, n in skipped.most_common():
        print(f"  skipped {n}: {reason}")


if __name__ == "__main__":
    main()
