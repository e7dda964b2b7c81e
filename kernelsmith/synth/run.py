"""The driver: compose -> render -> decontaminate -> rubric -> DIR/tasks/<name>.py, a manifest row
per candidate (accepted or rejected) and DIR/README.md. Rows are written in candidate order, so a
run is a deterministic prefix of its seed's stream; --resume re-reads the manifest and goes on."""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import kernelsmith
from kernelsmith.agent.fleet import WAKE_S  # how often a waiting main thread wakes
from kernelsmith.errors import BadInput
from kernelsmith.synth import compose, decontaminate, rubric
from kernelsmith.synth.compose import Candidate, CombinatorialComposer, op_count_weights

COMPOSERS = ("combinatorial", "anthropic", "openai")
MANIFEST, STATE, RUNS = "manifest.jsonl", ".synth", "runs.jsonl"  # RUNS: one line per invocation
TIMING_KEYS = ("eager_ms", "compile_ms", "seconds", "rubric")  # what differs between two runs of one seed


@dataclass
class SynthPlan:
    out: Path
    count: int = 100
    max_ops: int = 5
    seed: int = 0
    device: str = "cpu"
    composer: str = "combinatorial"
    against: list[Path] = field(default_factory=list)
    workers: int = 1
    resume: bool = False
    window_ms: tuple[float, float] | None = None
    threshold: float = decontaminate.DEFAULT_THRESHOLD
    backend_flags: dict = field(default_factory=dict)  # --model, --base-url for an LLM composer

    @property
    def window(self) -> tuple[float, float]:
        return tuple(self.window_ms or rubric.WINDOWS_MS[self.device])

    def settings(self) -> dict:
        """What a resumed run must share with the run it continues."""
        return {"seed": self.seed, "max_ops": self.max_ops, "device": self.device, "composer": self.composer,
                "against": [str(p.resolve()) for p in self.against], "window_ms": list(self.window),
                "threshold": self.threshold, "sizing": compose.SIZING}


# --- checks of the plan (bad input: one line, exit 2) ---------------------------------------------

def validate(plan: SynthPlan) -> None:
    if plan.composer not in COMPOSERS:
        raise BadInput(f"unknown --composer {plan.composer!r}", f"choose one of: {', '.join(COMPOSERS)}")
    for flag, value in (("--count", plan.count), ("--max-ops", plan.max_ops), ("--workers", plan.workers)):
        if value < 1:
            raise BadInput(f"{flag} must be at least 1, not {value}")
    low, high = plan.window
    if not 0 <= low < high:
        raise BadInput(f"bad --eager-window {low:g},{high:g}", "write LOW,HIGH in ms with 0 <= LOW < HIGH")
    for folder in plan.against:
        if not folder.is_dir() or not any(folder.rglob("*.py")):
            raise BadInput(f"--decontaminate-against {folder}: no folder of task files there")
    _check_out(plan)


def _check_out(plan: SynthPlan) -> None:
    out = plan.out
    if (out / MANIFEST).exists() and not plan.resume:
        raise BadInput(f"{out} holds an earlier synth run ({MANIFEST})", "add --resume to continue it, or choose another --out")
    try:
        (out / "tasks").mkdir(parents=True, exist_ok=True)
        (out / STATE / "candidates").mkdir(parents=True, exist_ok=True)
        probe = out / STATE / "write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise BadInput(f"cannot write --out {out}: {err.strerror or err}") from None
    stored = out / STATE / "settings.json"
    if plan.resume and stored.is_file() and json.loads(stored.read_text()) != plan.settings():
        raise BadInput(f"--resume with other settings than the run in {out}",
                       f"that run used {stored.read_text().strip()}")
    stored.write_text(json.dumps(plan.settings()))


# --- the manifest ---------------------------------------------------------------------------------

def read_manifest(out: Path) -> list[dict]:
    """The rows so far; a last line torn by a killed run is dropped (and cut from the file)."""
    path = out / MANIFEST
    if not path.is_file():
        return []
    lines, rows = path.read_text().splitlines(), []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            break
    if len(rows) < len(lines):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def _append(out: Path, row: dict) -> None:
    with open(out / MANIFEST, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


# --- decontamination ---------------------------------------------------------------------------------

def load_eval_set(plan: SynthPlan) -> decontaminate.EvalSet | None:
    """The evaluation tasks' graphs, captured in a jailed worker and cached in DIR/.synth by content."""
    if not plan.against:
        return None
    graphs: dict[str, decontaminate.OpGraph] = {}
    for folder in plan.against:
        cache = plan.out / STATE / f"eval-graphs-{_folder_digest(folder)}.json"
        if not cache.is_file():
            cache.write_text(json.dumps(rubric.capture_graphs(folder)))
        prefix = folder.resolve().name
        graphs.update({f"{prefix}/{k}": v for k, v in decontaminate.graphs_from_json(cache.read_text()).items()})
    return decontaminate.EvalSet(graphs)


def _folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _graph_of(candidate: Candidate, path: Path) -> decontaminate.OpGraph:
    if candidate.graph is not None:  # our own composition: captured here, on meta tensors
        return decontaminate.capture_source(candidate.source)
    return decontaminate.OpGraph.from_dict(rubric.capture_graph(path))  # an LLM's: in a jailed worker


# --- one candidate -------------------------------------------------------------------------------------

class Synthesis:
    def __init__(self, plan: SynthPlan, composer, eval_set, pool: rubric.RubricPool):
        self.plan, self.composer, self.eval_set, self.pool = plan, composer, eval_set, pool

    def row(self, candidate: Candidate) -> dict:
        """Decontaminate and check one candidate; its manifest row (the file is not yet in tasks/)."""
        start = time.perf_counter()
        row = self._blank(candidate)
        path = self.plan.out / STATE / "candidates" / f"{candidate.name}.py"
        path.write_text(candidate.source)
        if candidate.info.get("parse_error"):
            return self._reject(row, "parse", candidate.info["parse_error"], start)
        if not self._decontaminate(candidate, path, row):
            return self._reject(row, "decontamination", row["reason"], start)
        checked = self.pool.check(path, trusted=candidate.graph is not None, need=rubric.memory_need(candidate.graph))
        row.update(status="accepted" if checked["accepted"] else "rejected", stage=checked["stage"],
                   reason=checked["reason"], eager_ms=checked["eager_ms"], compile_ms=checked["compile_ms"],
                   rubric={"checks": checked["checks"], "stage_s": checked["stage_s"],
                           **{k: checked[k] for k in ("retried_alone", "waits", "peak_gpu_bytes") if k in checked}})
        row["seconds"]["total"] = round(time.perf_counter() - start, 3)
        return row

    def _blank(self, candidate: Candidate) -> dict:
        return {"index": candidate.index, "name": candidate.name, "status": "rejected", "stage": None,
                "reason": None, **candidate.info, "composer": self.composer.name, "seed": self.plan.seed,
                "device": self.plan.device, "file": None, "nearest": None, "eager_ms": None,
                "compile_ms": None, "rubric": {}, "seconds": {},
                "kernelsmith": kernelsmith.__version__, "harness_version": kernelsmith.HARNESS_VERSION}

    def _decontaminate(self, candidate: Candidate, path: Path, row: dict) -> bool:
        if self.eval_set is None:
            return True
        start = time.perf_counter()
        try:
            graph = _graph_of(candidate, path)
        except Exception as err:  # noqa: BLE001  (no graph, no proof it is not a copy)
            row["reason"] = f"its operator graph could not be captured on meta tensors: {err}"[:400]
            return False
        task, score = self.eval_set.nearest(graph)
        row["nearest"] = {"task": task, "similarity": score}
        row["seconds"]["decontaminate"] = round(time.perf_counter() - start, 3)
        if score >= self.plan.threshold:
            row["reason"] = f"similarity {score:.3f} to {task} is at or above the threshold {self.plan.threshold:g}"
            return False
        return True

    @staticmethod
    def _reject(row: dict, stage: str, reason: str, start: float) -> dict:
        row.update(stage=stage, reason=reason)
        row["seconds"]["total"] = round(time.perf_counter() - start, 3)
        return row

    def keep(self, candidate: Candidate, row: dict) -> None:
        """Record a finished row: an accepted task's file first, so a row always names a file that exists."""
        if row["status"] == "accepted":
            (self.plan.out / "tasks" / f"{candidate.name}.py").write_text(candidate.source)
            row["file"] = f"tasks/{candidate.name}.py"
        _append(self.plan.out, row)


# --- the run ---------------------------------------------------------------------------------------------

def make_composer(plan: SynthPlan):
    if plan.composer == "combinatorial":
        return CombinatorialComposer(plan.seed, plan.max_ops, plan.device, plan.window[0])
    from kernelsmith.backends import create_backend
    from kernelsmith.config import load_settings
    from kernelsmith.synth.llm import LLMComposer

    settings = load_settings({"backend": plan.composer, **plan.backend_flags}, [Path.cwd()])
    return LLMComposer(create_backend(settings), plan.seed, plan.max_ops, plan.device)


def max_candidates(count: int) -> int:
    """Candidates looked at before a run gives up on reaching its count (a window nothing fits, say)."""
    return 50 * count + 200


def synthesize(plan: SynthPlan, on_row=None) -> dict:
    """Run until `count` tasks are accepted (or the candidates run out); the summary of all rows."""
    validate(plan)
    rows = read_manifest(plan.out) if plan.resume else []
    eval_set = load_eval_set(plan)
    composer = make_composer(plan)
    restored = restore_files(plan, composer, rows)
    work = Synthesis(plan, composer, eval_set, rubric.RubricPool(plan.device, plan.workers, plan.window))
    accepted = sum(r["status"] == "accepted" for r in rows)
    done = {r["index"] for r in rows}
    if accepted < plan.count:
        started, before = time.time(), len(rows)
        try:
            rows += _drive(work, composer.candidates(frozenset(done)), plan.count - accepted,
                           max_candidates(plan.count) - len(done), on_row)
        finally:  # an interrupted run's time counts too, with the rows it wrote, and its README says so far
            written = read_manifest(plan.out)
            _log_run(plan, started, written[before:])
            write_readme(plan, summarize(written, plan, read_runs(plan.out)))
    summary = summarize(rows, plan, read_runs(plan.out))
    write_readme(plan, summary)
    return {**summary, "restored": restored}


REDRAWN = ("name", "ops", "op_count", "op_args", "edges", "inputs", "output_shape", "dtypes")  # what a drawing fixes


def restore_files(plan: SynthPlan, composer, rows: list[dict]) -> int:
    """Accepted rows whose task file is gone (a folder kept or carried as its manifest alone) get it back:
    a seed's stream is deterministic, so each is drawn again and written only where the drawing matches
    its row. The rubric's verdict stays the row's: the file is the one it checked. How many came back."""
    missing = {r["index"]: r for r in rows if r["status"] == "accepted" and not (plan.out / r["file"]).is_file()}
    if missing and composer.name != "combinatorial":
        raise BadInput(f"{len(missing)} accepted task file(s) are missing from {plan.out / 'tasks'}",
                       f"a {composer.name} composer's tasks cannot be drawn again; put the files back")
    restored = 0
    for candidate in composer.candidates() if missing else ():
        row = missing.pop(candidate.index, None)
        if row is not None:
            _check_redrawn(plan, candidate, row)
            (plan.out / row["file"]).write_text(candidate.source)
            restored += 1
        if not missing:
            break
    return restored


def _check_redrawn(plan: SynthPlan, candidate: Candidate, row: dict) -> None:
    drawn = json.loads(json.dumps({"name": candidate.name, **candidate.info}))
    drawn.update(seed=plan.seed, device=plan.device)
    for key in ("seed", "device") + REDRAWN:
        if drawn.get(key) != row.get(key):
            raise BadInput(f"cannot restore {row['file']}: the stream now draws another task there "
                           f"({key} {drawn.get(key)} against the row's {row.get(key)})",
                           "the rules that draw tasks (or --seed, --device) differ from that run's; "
                           "synthesize into a new --out")


REORDER = 4  # finished rows waiting for an earlier, slower candidate: at most this many per worker


def _drive(work: Synthesis, stream, wanted: int, budget: int, on_row) -> list[dict]:
    """`workers` candidates running at a time; rows kept in candidate order until `wanted` are accepted.
    A slow candidate (a 40 s compile) holds back only the rows after it, never the workers: the ones that
    finish meanwhile wait in order (up to REORDER per worker) while new candidates start."""
    rows: list[dict] = []
    pending: collections.deque = collections.deque()  # (candidate, future), in candidate order
    executor = ThreadPoolExecutor(work.plan.workers, thread_name_prefix="ks-synth")
    try:
        for candidate in stream:
            if budget <= 0:
                break
            budget -= 1
            pending.append((candidate, executor.submit(work.row, candidate)))
            if _settle(work, pending, rows, on_row, wanted, full=False):
                return rows
        _settle(work, pending, rows, on_row, wanted, full=True)
        return rows
    except BaseException:  # Ctrl-C, or the limit's SIGINT: stop now, not when the running jobs end
        _abandon(work, pending)
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


ABANDON_S = 30.0


def _abandon(work: "Synthesis", pending: collections.deque) -> None:
    """The running candidates' rows dropped (a resume checks them again): their jobs stopped and their workers
    killed, until every thread is free. Waiting for them instead held an interrupted H100 run past its
    limit's 110 s grace, with its time and README unwritten (memory waits of minutes, jobs of 10)."""
    futures, deadline = [f for _, f in pending], time.monotonic() + ABANDON_S
    for future in futures:
        future.cancel()
    while time.monotonic() < deadline and not all(f.done() for f in futures):
        work.pool.stop()  # again each round: a thread past its memory wait may have just started a worker
        concurrent.futures.wait(futures, timeout=WAKE_S)


def _settle(work: Synthesis, pending: collections.deque, rows: list[dict], on_row, wanted: int, full: bool) -> bool:
    """Write the finished rows at the head of `pending`; wait while the workers are all busy (or, `full`,
    until none is pending). Whether `wanted` tasks are accepted."""
    workers = work.plan.workers
    while True:
        while pending and pending[0][1].done():
            if _finish(work, pending.popleft(), rows, on_row) >= wanted:
                return True
        running = [f for _, f in pending if not f.done()]
        if not pending or not (full or len(running) >= workers or len(pending) >= REORDER * workers):
            return False
        # in short sleeps: the kernel may hand a Ctrl-C to a worker thread, and Python runs its handler only
        # when the main thread next runs bytecode
        concurrent.futures.wait(running or [pending[0][1]], timeout=WAKE_S,
                                return_when=concurrent.futures.FIRST_COMPLETED)


def _finish(work: Synthesis, item, rows: list[dict], on_row) -> int:
    candidate, future = item
    row = future.result()
    work.keep(candidate, row)
    rows.append(row)
    if on_row:
        on_row(row)
    return sum(r["status"] == "accepted" for r in rows)


# --- the summary and README -----------------------------------------------------------------------------

def _log_run(plan: SynthPlan, started: float, rows: list[dict]) -> None:
    """One line per invocation that checked candidates: its wall time and what it added (a resumed run's
    throughput counts only the time its invocations ran, not the hours between them)."""
    line = {"started": round(started, 3), "seconds": round(time.time() - started, 3), "candidates": len(rows),
            "accepted": sum(r["status"] == "accepted" for r in rows), "workers": plan.workers,
            "device": plan.device, "gpu": rubric.gpu_names() if plan.device == "cuda" else None,
            "kernelsmith": kernelsmith.__version__}
    with open(plan.out / RUNS, "a") as f:
        f.write(json.dumps(line) + "\n")


def read_runs(out: Path) -> list[dict]:
    path = out / RUNS
    if not path.is_file():
        return []
    runs = []
    for text in path.read_text().splitlines():
        try:
            runs.append(json.loads(text))
        except ValueError:
            continue  # a line torn by a killed run: its time is lost, the rows are not
    return runs


def stage_seconds(rows: list[dict]) -> dict[str, float]:
    """Seconds per rubric stage, summed over every candidate (jobs overlap: the sum exceeds the wall time),
    and "other": the rest of each candidate's time (its worker's start and imports, decontamination)."""
    totals: collections.Counter = collections.Counter()
    for row in rows:
        stages = {**((row.get("rubric") or {}).get("stage_s") or {}), **_waits(row)}
        totals.update(stages)
        total = (row.get("seconds") or {}).get("total")
        if total is not None:  # the rest of the candidate's time: the worker's start and imports, decontamination
            totals["other"] += max(0.0, total - sum(stages.values()))
    return {stage: round(seconds, 1) for stage, seconds in totals.most_common()}


def _waits(row: dict) -> dict[str, float]:
    """The waits a row's job recorded, as "wait: NAME" seconds (rows of older runs have none)."""
    waits = (row.get("rubric") or {}).get("waits") or {}
    return {f"wait: {name}": waits[name] for name in rubric.WAIT_SECONDS if isinstance(waits.get(name), (int, float))}


def throughput(runs: list[dict]) -> dict:
    wall = sum(r["seconds"] for r in runs)
    per_hour = (lambda n: round(n * 3600 / wall, 1) if wall > 0 else None)
    return {"wall_s": round(wall, 1), "invocations": len(runs), "workers": sorted({r.get("workers") for r in runs} - {None}),
            "gpus": sorted({r.get("gpu") for r in runs} - {None}),
            "accepted_per_hour": per_hour(sum(r["accepted"] for r in runs)),
            "candidates_per_hour": per_hour(sum(r["candidates"] for r in runs))}


def summarize(rows: list[dict], plan: SynthPlan, runs: list[dict] | None = None) -> dict:
    accepted = [r for r in rows if r["status"] == "accepted"]
    nearest = sorted(r["nearest"]["similarity"] for r in accepted if r.get("nearest"))
    return {"candidates": len(rows), "accepted": len(accepted), "target": plan.count,
            "mix": dict(sorted(collections.Counter(r["op_count"] for r in accepted).items())),
            "rejected_by_stage": dict(collections.Counter(r["stage"] for r in rows if r["status"] != "accepted")
                                      .most_common()),
            "nearest_max": nearest[-1] if nearest else None, "settings": plan.settings(),
            "time": throughput(runs or []), "stage_s": stage_seconds(rows)}


def write_readme(plan: SynthPlan, summary: dict) -> None:
    settings = summary["settings"]
    lines = ["# Synthesized tasks", "",
             f"`kernelsmith synth`: {summary['accepted']} of {summary['target']} tasks accepted from "
             f"{summary['candidates']} candidates (composer {settings['composer']}, seed {settings['seed']}, "
             f"device {settings['device']}, up to {settings['max_ops']} operators, eager window "
             f"{settings['window_ms'][0]:g}-{settings['window_ms'][1]:g} ms). "
             f"Tasks are in `tasks/`, one row per candidate in `{MANIFEST}`; see docs/synth.md.", "",
             "## Operator-count mix (accepted)", "", "| operators | tasks | share | target |", "|---|---|---|---|"]
    target = op_count_weights(settings["max_ops"])
    for k in sorted(set(summary["mix"]) | set(target)):
        n = summary["mix"].get(k, 0)
        lines.append(f"| {k} | {n} | {n / max(summary['accepted'], 1):.0%} | {target.get(k, 0):.0%} |")
    lines += ["", "## Rejections per stage", "", "| stage | candidates |", "|---|---|"]
    lines += [f"| {stage} | {n} |" for stage, n in summary["rejected_by_stage"].items()] or ["| (none) | 0 |"]
    lines += ["", "## Decontamination", ""]
    if settings["against"]:
        lines.append(f"Against {', '.join(settings['against'])} at similarity threshold {settings['threshold']:g}; "
                     f"the nearest evaluation task of any accepted task has similarity {summary['nearest_max']}.")
    else:
        lines.append("Not decontaminated (no --decontaminate-against folder).")
    lines += _time_lines(summary, settings)
    (plan.out / "README.md").write_text("\n".join(lines) + "\n")


def _time_lines(summary: dict, settings: dict) -> list[str]:
    spent = summary["time"]
    if not spent["invocations"]:
        return []
    lines = ["", "## Time", "",
             f"{spent['invocations']} invocation(s), {spent['wall_s']:g} s of wall time in all (`{RUNS}`): "
             f"{spent['accepted_per_hour']} accepted tasks and {spent['candidates_per_hour']} candidates per hour, "
             f"{'/'.join(map(str, spent['workers']))} rubric job(s) at a time on {settings['device']}"
             f"{' (' + '; '.join(spent['gpus']) + ')' if spent['gpus'] else ''}.", "",
             "Seconds per rubric stage, summed over candidates (jobs run side by side):", "",
             "| stage | seconds |", "|---|---|"]
    return lines + [f"| {stage} | {seconds:g} |" for stage, seconds in summary["stage_s"].items()]


class ProgressView:
    """A rich progress bar of accepted tasks, with the rejections per stage, and a line per candidate."""

    def __init__(self, plan: SynthPlan):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.plan, self.rejected = plan, collections.Counter()
        self.bar = Progress(TextColumn("synth"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                            TimeElapsedColumn())
        done = sum(r["status"] == "accepted" for r in read_manifest(plan.out)) if plan.resume else 0
        self.job = self.bar.add_task("", total=plan.count, completed=done)

    def __enter__(self) -> "ProgressView":
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def on_row(self, row: dict) -> None:
        accepted = row["status"] == "accepted"
        if not accepted:
            self.rejected[row["stage"]] += 1
        stages = ", ".join(f"{s} {n}" for s, n in self.rejected.most_common())
        self.bar.update(self.job, advance=int(accepted),
                        description=f"rejected {sum(self.rejected.values())}" + (f" ({stages})" if stages else ""))
        verdict = f"[green]accepted[/] eager {row['eager_ms']:.3g} ms" if accepted else \
            f"[yellow]rejected[/] at {row['stage']}: {row['reason']}"
        self.bar.console.print(f"{row['name']}: {verdict}", soft_wrap=True, markup=True, highlight=False)
