"""`kernelsmith bench`: a policy over a task set, scored the way the CUDA Agent paper reports it.

Every (task, run) gets its own workdir under OUT/workdirs and one optimize session; sessions run
in parallel threads that share one sandbox (one evaluation per GPU at a time) and one compile-baseline
cache (OUT/baselines.json unless the baselines_cache setting names another), so a task's torch.compile
baselines are measured once per bench, not once per session. Each finished
row is appended to OUT/rows.jsonl at once, so an interrupted bench resumes where it stopped:
finished rows are kept, and a session that was cut off is resumed from its record.
The report (results.json, results.md, speedups.png) comes from bench_report.py.
"""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from kernelsmith import HARNESS_VERSION, bench_report
from kernelsmith.agent.fleet import Episode, Fleet, level_of, task_names
from kernelsmith.config import Settings
from kernelsmith.errors import BadInput, KernelsmithError

LAUNCH_BOUND_MS = 0.02  # eager below this is launch overhead, not kernel time: flagged


@dataclass
class BenchPlan:
    settings: Settings
    device: str
    out: Path
    runs: int = 1
    workers: int = 1
    resume: bool = False
    lint: bool = True
    meta: dict[str, Any] = field(default_factory=dict)


def task_files(paths: list[Path]) -> list[Path]:
    """KernelBench-format files: each path is a file or a folder searched recursively."""
    files: list[Path] = []
    for path in paths:
        if path.is_file() and path.suffix == ".py":
            files.append(path.resolve())
        elif path.is_dir():
            files += sorted(p.resolve() for p in path.rglob("*.py") if not p.name.startswith("_"))
        else:
            raise BadInput(f"{path} is neither a .py task file nor a folder")
    if not files:
        raise BadInput("no task files found in " + ", ".join(map(str, paths)))
    return files


SAMPLE_FILE = "sample.json"


def kept_sample(out: Path, count: int | None, seed: int, resume: bool) -> tuple[int | None, int]:
    """The (count, seed) of this bench's sample: a --resume keeps its bench's, given again or not; another
    is bad input. A bench with a sample records it in OUT, for its resume."""
    path = out / SAMPLE_FILE
    stored = json.loads(path.read_text()) if resume and path.is_file() else None
    if stored:
        if count is not None and [count, seed] != [stored["sample"], stored["seed"]]:
            raise BadInput(f"--resume with --sample {count} --sample-seed {seed}; the bench in {out} drew "
                           f"--sample {stored['sample']} --sample-seed {stored['seed']}")
        return stored["sample"], stored["seed"]
    if count is None:
        return None, seed
    _check_sample(count)
    if not resume and path.is_file():
        raise BadInput(f"{out} already holds a bench", hint="pass --resume to continue it, or another --out")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"sample": count, "seed": seed}))
    return count, seed


def _check_sample(count: int) -> None:
    if count < 1:
        raise BadInput(f"--sample must be at least 1, not {count}")


def sample_tasks(files: list[Path], count: int | None, seed: int = 0) -> list[Path]:
    """`count` of the files drawn at random under `seed` (the same draw on a --resume), in their order;
    all of them when count is None."""
    if count is None:
        return files
    _check_sample(count)
    if count > len(files):
        raise BadInput(f"--sample {count}, but there are only {len(files)} task files")
    picked = set(random.Random(seed).sample(range(len(files)), count))
    return [f for i, f in enumerate(files) if i in picked]


def blank_row(path: Path, run: int, name: str = "") -> dict[str, Any]:
    return Episode(path, run, Path(), name).row(
        correct=False, speedup_vs_eager=None, speedup_vs_compile=None, reward=-1.0, turns=0,
        tokens={"input": 0, "output": 0}, cost_usd=0.0, lint_flags=[], session_id="", best_sha="",
        harness_version=HARNESS_VERSION)


def workdir_for(plan: BenchPlan, path: Path, run: int, name: str = "") -> Path:
    return plan.out / "workdirs" / (level_of(path) or "tasks") / (name or path.stem) / f"run{run}"


def baselines_cache(plan: BenchPlan) -> Path:
    """The compile-baseline cache all the bench's sessions share: the setting, else OUT/baselines.json."""
    if plan.settings.baselines_cache:
        return Path(plan.settings.baselines_cache).expanduser().resolve()
    return plan.out / "baselines.json"


def session_settings(plan: BenchPlan) -> Settings:
    """The settings each session runs with: a copy of the plan's, with the shared baselines cache."""
    return replace(plan.settings, baselines_cache=str(baselines_cache(plan)))


# --- one optimize session per (task, run) --------------------------------------------

def run_one(plan: BenchPlan, sandbox, episode: Episode, lint_flags: list[str],
            stop: threading.Event | None = None) -> dict[str, Any]:
    """One session, started or resumed; the fleet turns an exception into an error row."""
    from kernelsmith.agent import run as session

    row = {**blank_row(episode.task, episode.run, episode.name), "lint_flags": sorted(lint_flags)}
    start = time.perf_counter()
    ending = _start_or_resume(plan, sandbox, episode, session, stop)
    row.update(_ending_fields(ending))
    events = _session_events(episode.workdir, ending.session_id)
    if not ending.best and ending.reason != "interrupted":
        row["error"] = _failure_reason(events, ending)[:500]
    row["lint_flags"] = sorted(set(lint_flags) | set(_eager_flags(events)))
    row["wall_s"] = round(time.perf_counter() - start, 1)
    return row


def _start_or_resume(plan: BenchPlan, sandbox, episode: Episode, session, stop):
    from kernelsmith.session.reader import load_session, session_paths

    settings, workdir = session_settings(plan), episode.workdir
    records = list(session_paths(workdir)) if workdir.exists() else []
    last = load_session(records[-1]) if records else None
    if last and (last.end is None or last.end.get("reason") == "interrupted"):  # cut off by an interrupted bench
        return session.resume(settings, workdir, records[-1].parent.name, [], None, sandbox=sandbox, stop=stop)
    if not workdir.exists():
        session.prepare_workdir(str(episode.task), workdir, plan.device, settings.precision, [], None)
    return session.start(settings, workdir, [], None, sandbox=sandbox, stop=stop)


def _ending_fields(ending) -> dict[str, Any]:
    best = ending.best
    status = "interrupted" if ending.reason == "interrupted" else "done" if best else "failed"
    fields = {"status": status, "correct": best is not None, "turns": ending.turns,
              "tokens": {"input": ending.usage.input_tokens + ending.usage.cache_read_tokens,
                         "output": ending.usage.output_tokens},
              "cost_usd": round(ending.usage.cost_usd, 4), "session_id": ending.session_id}
    if best:
        fields.update({"speedup_vs_eager": best.speedup_vs_eager, "speedup_vs_compile": best.speedup_vs_compile,
                       "reward": best.reward, "best_sha": best.sha})
    return fields


def _session_events(workdir: Path, session_id: str) -> list[dict]:
    from kernelsmith.session.reader import find_session, read_events

    return read_events(find_session(workdir, session_id))


def _failure_reason(events: list[dict], ending) -> str:
    """Why a session ended with no correct kernel: how it ended, and the last evaluation's verdict."""
    ends = [e["summary"] for e in events if e["kind"] == "session_end" and isinstance(e.get("summary"), dict)]
    said = ends[-1].get("finish_summary") if ends else ""
    reason = f"{ending.reason} ({said})" if said else ending.reason
    # the last verify or profile (a compile that succeeded after it would hide the failure)
    evals = [e for e in events if e["kind"] == "eval_result" and isinstance(e["result"], dict)
             and (e.get("tool") in ("verify", "profile") or e["result"].get("error"))]
    if not evals:
        return f"{reason} (no verify or profile ran)"
    last = evals[-1]["result"]
    verdict = last.get("error") or "; ".join(last.get("violations") or []) or "not correct"
    return f"{reason}; last {evals[-1].get('tool') or 'evaluation'} ({last.get('stage') or '?'}): {verdict}"


def _eager_flags(events: list[dict]) -> list[str]:
    """Flags that only the profile shows: eager time out of the range where timing means much."""
    evals = [e["result"] for e in events if e["kind"] == "eval_result" and isinstance(e["result"], dict)]
    eager = [r["timings_ms"].get("eager") for r in evals if r.get("timings_ms")]
    eager = [e for e in eager if e]
    return ["eager_launch_bound"] if eager and min(eager) < LAUNCH_BOUND_MS else []


# --- the whole bench ------------------------------------------------------------------

Progress = Callable[[dict], None]


def episodes(plan: BenchPlan, tasks: list[Path]) -> list[Episode]:
    """One per (task, run); tasks of one level with the same file name (examples/*/model.py) get names apart."""
    names = task_names(tasks)
    return [Episode(path, run, workdir_for(plan, path, run, names[path]), names[path])
            for path in tasks for run in range(plan.runs)]


def run_bench(plan: BenchPlan, tasks: list[Path], sandbox, on_row: Progress | None = None,
              on_lint: Callable[[Path, list[str]], None] | None = None,
              on_stop: Callable[[int], None] | None = None) -> list[dict]:
    """Run every (task, run) not already finished, through the fleet; returns all rows, old and new."""
    fleet = Fleet(plan.out, plan.workers, plan.resume)
    todo = fleet.pending(episodes(plan, tasks))
    flags = lint_all(plan, sorted({e.task for e in todo}), on_lint) if plan.lint else {}
    return fleet.run(todo, lambda e: run_one(plan, sandbox, e, flags.get(str(e.task), []), fleet.stop), on_row,
                     on_stop, blank=lambda e: blank_row(e.task, e.run, e.name))


def lint_all(plan: BenchPlan, tasks: list[Path],
             on_lint: Callable[[Path, list[str]], None] | None = None) -> dict[str, list[str]]:
    """Lint flags per task (degenerate, non-deterministic, ...), cached in OUT/lint.json.

    Runs before any session so that linting never shares a GPU with a timed profile."""
    from kernelsmith import task as task_mod

    cache_path = plan.out / "lint.json"
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    missing = [p for p in tasks if str(p) not in cache]

    def lint(path: Path) -> list[str]:
        try:
            return task_mod.check_task(path, plan.device, plan.settings.precision).get("flags", [])
        except KernelsmithError as err:
            return [f"lint_failed: {err}"[:120]]

    def keep(path: Path, found: list[str]) -> None:
        cache[str(path)] = found
        # after every task: an interrupted bench resumes without linting again what it linted
        bench_report.write_atomic(cache_path, json.dumps(cache, indent=1))
        if on_lint:
            on_lint(path, found)

    killed = []
    with ThreadPoolExecutor(max(1, plan.workers)) as pool:
        for path, found in zip(missing, pool.map(lint, missing)):
            if any("killed (SIGKILL)" in flag for flag in found):
                killed.append(path)  # large tasks linted side by side can exhaust host memory: again, alone
            else:
                keep(path, found)
    for path in killed:
        keep(path, lint(path))
    return cache


# --- eval-only: score existing solutions ---------------------------------------------

def match_candidates(references: Path, candidates: Path) -> list[tuple[Path, Path | None]]:
    """(reference, candidate) pairs matched by path relative to each root; None when missing."""
    refs = task_files([references])
    root = references.resolve() if references.is_dir() else references.resolve().parent
    pairs = []
    for ref in refs:
        rel = ref.relative_to(root)
        cand = (candidates if candidates.is_file() else candidates / rel).resolve()
        pairs.append((ref, cand if cand.is_file() else None))
    return pairs


def eval_only(plan: BenchPlan, references: Path, candidates: Path, sandbox,
              on_row: Progress | None = None) -> list[dict]:
    from kernelsmith.evaluation.options import EvalOptions

    opts = EvalOptions(device=plan.device, precision=plan.settings.precision, trials=plan.settings.trials,
                       cache_path=baselines_cache(plan))
    pairs = dict(match_candidates(references, candidates))

    def score(episode: Episode) -> dict:
        row, cand = blank_row(episode.task, 0), pairs[episode.task]
        if cand is None:
            return {**row, "status": "failed", "error": "no candidate at the matching path"}
        result = sandbox.evaluate_files(episode.task, cand, replace(opts))
        return {**row, "status": "done" if result.clean else "failed", "correct": result.clean,
                "speedup_vs_eager": result.speedup_vs_eager, "speedup_vs_compile": result.speedup_vs_compile,
                "reward": result.reward, "error": result.error[:300]}

    fleet = Fleet(plan.out, plan.workers, plan.resume)
    return fleet.run([Episode(ref, 0, plan.out) for ref in pairs], score, on_row, blank=lambda e: blank_row(e.task, 0))


def report(plan: BenchPlan, rows: list[dict]) -> dict:
    return bench_report.write_report(plan.out, rows, plan.meta)
