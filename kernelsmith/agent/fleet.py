"""The fleet: many sessions over one sandbox pool, for `kernelsmith bench` and the trainer's rollouts.

An episode is one session: a task, a run number and the workdir it runs in. The fleet runs episodes on
worker threads that share one sandbox, so evaluations queue for the pool's GPUs whoever drives them.
What an episode does is its runner's: bench's drives an optimize session (agent/run.py), the trainer's
a policy through KernelEnv. The fleet owns what every such run needs:

- rows: each finished episode's row is appended to OUT/rows.jsonl at once, by its worker thread;
- resume: a fleet started again over the same OUT skips the episodes whose latest row ended (done or
  failed) and runs the rest again, those that raised (error) or never finished; without resume it
  refuses an OUT that already holds rows, rather than mix two runs;
- failure: a runner that raises gives an error row with the reason, never the fleet's end;
- progress: on_row sees every row as it lands; an interrupt (Ctrl-C) cancels the episodes not started
  and keeps every row written.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from kernelsmith.errors import BadInput, KernelsmithError

LEVEL = re.compile(r"^level\d+$")
ENDED = ("done", "failed")  # statuses a resume keeps; "error" and "pending" run again


def level_of(path: Path) -> str:
    """The level folder a task lies in (level1, level2, ...), or "" when there is none."""
    return next((part for part in reversed(path.parent.parts) if LEVEL.match(part)), "")


def task_names(paths: list[Path]) -> dict[Path, str]:
    """Each task's name in rows and workdirs: its file's stem, or where another task of the same level has the
    same stem (examples/*/model.py), the fewest folders above it that tell them apart, joined by "-"."""
    names = {}
    for path in paths:
        rivals = [p for p in paths if p != path and p.stem == path.stem and level_of(p) == level_of(path)]
        depth = 1
        while rivals and depth < len(path.parts) and any(_tail(p, depth) == _tail(path, depth) for p in rivals):
            depth += 1
        names[path] = _tail(path, depth if rivals else 1)
    return names


def _tail(path: Path, depth: int) -> str:
    """The stem after the depth - 1 folders just above it."""
    folders = path.parent.parts[-(depth - 1):] if depth > 1 else ()
    return "-".join([*folders, path.stem])


@dataclass(frozen=True)
class Episode:
    task: Path  # a KernelBench-format file
    run: int
    workdir: Path
    name: str = ""  # the task's name (task_names); its file's stem when not given

    @property
    def key(self) -> tuple[str, str, int]:
        return level_of(self.task), self.name or self.task.stem, self.run

    def row(self, **fields) -> dict:
        """The columns every fleet row has, then the runner's own."""
        level, task, run = self.key
        return {"level": level, "task": task, "path": str(self.task), "run": run, "status": "pending",
                "error": "", "wall_s": 0.0, **fields}


def row_key(row: dict) -> tuple[str, str, int]:
    return row.get("level", ""), row["task"], row.get("run", 0)


class RowLog:
    """OUT/rows.jsonl: appended and flushed per finished row, from any thread."""

    def __init__(self, out: Path):
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / "rows.jsonl"
        self.lock = threading.Lock()

    def finished(self) -> dict[tuple, dict]:
        """The latest row of every episode that ended (done or failed)."""
        from kernelsmith.bench_report import latest_rows

        lines = self.path.read_text().splitlines() if self.path.is_file() else []
        return {row_key(row): row for row in latest_rows(lines) if row.get("status") in ENDED}

    def append(self, row: dict) -> None:
        with self.lock, open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()


Runner = Callable[[Episode], dict]
OnRow = Callable[[dict], None]


class Fleet:
    """Episodes over one sandbox, `workers` at a time, with rows, resume and progress.

    Runners see `stop`: set by an interrupt, it asks a running session to end at its next turn (KernelEnv's
    stop), whose row then says "interrupted" and runs again on resume. The worker threads are daemons, so a
    second interrupt ends the process at once; a session's record survives that, as it survives kill -9."""

    def __init__(self, out: Path, workers: int = 1, resume: bool = False):
        self.log = RowLog(out)
        self.workers = max(1, workers)
        self.stop = threading.Event()
        self.running, self._counting = 0, threading.Lock()  # episodes inside their runner now
        if not resume and self.log.path.exists() and self.log.path.stat().st_size:
            raise BadInput(f"{out} already holds rows of an earlier run",
                           hint="pass --resume to continue it, or another --out")
        self.done = self.log.finished() if resume else {}

    def pending(self, episodes: Iterable[Episode]) -> list[Episode]:
        """The episodes a resume has not finished yet."""
        return [e for e in episodes if e.key not in self.done]

    def run(self, episodes: list[Episode], runner: Runner, on_row: OnRow | None = None,
            on_stop: Callable[[int], None] | None = None, blank: Callable[[Episode], dict] | None = None) -> list[dict]:
        """Every pending episode's row (written as each ends), after the finished rows a resume kept.
        on_stop(running) is told of an interrupt, before the fleet waits for the running episodes. blank(e)
        gives the runner's columns for an error row (Episode.row() without it). Rows are written by the
        worker threads as episodes end, so none is lost to what the main thread does meanwhile."""
        self.blank = blank or (lambda episode: episode.row())
        rows, todo, landed = list(self.done.values()), queue.SimpleQueue(), queue.SimpleQueue()
        pending = self.pending(episodes)
        for episode in pending:
            todo.put(episode)
        threads = [threading.Thread(target=self._work, args=(todo, landed, runner), daemon=True, name=f"fleet-{i}")
                   for i in range(min(self.workers, len(pending)))]
        try:  # the starts inside: a Ctrl-C right after the first start must stop the episodes that began
            for thread in threads:
                thread.start()
            for _ in pending:
                self._land(_next(landed), rows, on_row)
        except KeyboardInterrupt:
            running = self.running  # read first: once stop is set, an episode at its turn's start ends at once
            self.stop.set()  # no new episode starts; running ones end at their next turn
            if on_stop:
                on_stop(running)
            for thread in threads:
                if thread.ident is not None:  # started
                    thread.join()  # a second Ctrl-C raises out of here: the daemons die with the process
            while not landed.empty():
                self._land(landed.get(), rows, on_row)
            raise
        return rows

    @staticmethod
    def _land(row: dict, rows: list[dict], on_row: OnRow | None) -> None:
        rows.append(row)
        if on_row:
            try:
                on_row(row)
            except Exception:  # noqa: BLE001  progress display only: the row is written already
                pass

    def _work(self, todo: queue.SimpleQueue, landed: queue.SimpleQueue, runner: Runner) -> None:
        while not self.stop.is_set():
            try:
                episode = todo.get_nowait()
            except queue.Empty:
                return
            with self._counting:
                self.running += 1
            try:
                row = self._one(episode, runner)
                self.log.append(row)
            finally:
                with self._counting:
                    self.running -= 1
            landed.put(row)

    def _one(self, episode: Episode, runner: Runner) -> dict:
        start = time.perf_counter()
        try:
            row = runner(episode)
            if not isinstance(row, dict):
                raise TypeError(f"the episode's runner returned {type(row).__name__}, not a row")
        except BaseException as err:  # noqa: BLE001  one episode's failure (API, git, a bug) must not end the fleet
            reason = str(err) if isinstance(err, KernelsmithError) else f"{type(err).__name__}: {err}"
            row = {**self.blank(episode), "status": "error", "error": reason[:500]}
        row["wall_s"] = row.get("wall_s") or round(time.perf_counter() - start, 1)
        return row


WAKE_S = 0.2  # how often the main thread wakes while it waits for a row


def _next(landed: queue.SimpleQueue) -> dict:
    """The next row, waiting in short sleeps. The kernel may hand a Ctrl-C to any thread of the process; Python
    runs its handler only when the main thread next runs bytecode, and a main thread blocked in one long
    get() saw it only when the running session had ended (a bench's interrupt then found 0 sessions
    running and the session ran all its turns)."""
    while True:
        try:
            return landed.get(timeout=WAKE_S)
        except queue.Empty:
            continue

