"""The fleet runner: episodes on worker threads, rows as they land, resume, failures and interrupts.

The runners here are plain functions (what an episode does is the caller's: bench's real sessions are
tested in test_bench.py); the threads, the row log and the resume are the fleet's own."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from kernelsmith.agent.fleet import Episode, Fleet
from kernelsmith.errors import BadInput


def episodes(tmp_path: Path, n: int, runs: int = 1) -> list[Episode]:
    tasks = [tmp_path / "tasks" / "level1" / f"{i}_task.py" for i in range(n)]
    return [Episode(task, run, tmp_path / "wd" / task.stem / str(run)) for task in tasks for run in range(runs)]


def rows_on_disk(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]


def test_every_episode_lands_one_row_with_no_more_than_workers_at_once(tmp_path):
    running, peak, lock = [0], [0], threading.Lock()

    def runner(episode: Episode) -> dict:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return episode.row(status="done", reward=episode.run + 1.0)

    seen = []
    rows = Fleet(tmp_path / "out", workers=3).run(episodes(tmp_path, 4, runs=2), runner, seen.append)
    assert peak[0] == 3
    assert len(rows) == len(seen) == 8
    on_disk = rows_on_disk(tmp_path / "out")
    assert sorted((r["task"], r["run"]) for r in on_disk) == sorted((f"{i}_task", k) for i in range(4) for k in (0, 1))
    assert all(r["level"] == "level1" and r["wall_s"] > 0 for r in on_disk)


def test_a_runner_that_raises_is_an_error_row_and_the_others_still_run(tmp_path):
    def runner(episode: Episode) -> dict:
        if episode.task.stem == "1_task":
            raise RuntimeError("the backend went away")
        return episode.row(status="done")

    rows = Fleet(tmp_path / "out", workers=2).run(episodes(tmp_path, 3), runner)
    by_task = {r["task"]: r for r in rows}
    assert by_task["1_task"]["status"] == "error" and "RuntimeError: the backend went away" in by_task["1_task"]["error"]
    assert by_task["0_task"]["status"] == by_task["2_task"]["status"] == "done"


def test_resume_keeps_ended_rows_and_runs_the_rest_again(tmp_path):
    out, work = tmp_path / "out", episodes(tmp_path, 3)
    outcome = {"0_task": "done", "1_task": "failed", "2_task": "error"}
    Fleet(out).run(work, lambda e: e.row(status=outcome[e.task.stem]))
    with pytest.raises(BadInput, match="--resume"):  # never two runs mixed in one folder
        Fleet(out)
    again = []
    rows = Fleet(out, resume=True).run(work, lambda e: again.append(e.task.stem) or e.row(status="done"))
    assert again == ["2_task"]  # done and failed ended; an error runs again
    assert sorted(r["status"] for r in rows) == ["done", "done", "failed"]
    assert len(rows_on_disk(out)) == 4


def test_an_interrupt_stops_new_episodes_lets_running_ones_end_and_keeps_their_rows(tmp_path):
    """Ctrl-C lands on the main thread (here: raised by the progress callback at the first row, once both
    workers are busy again). The episodes still running see `stop`, end as interrupted and are written;
    none starts after them; a resume runs the interrupted ones and those never started."""
    out, work = tmp_path / "out", episodes(tmp_path, 6)
    started, release = [], threading.Event()
    fleet = Fleet(out, workers=2)

    def runner(episode: Episode) -> dict:
        started.append(episode.task.stem)
        if episode.task.stem == "0_task":
            return episode.row(status="done")
        release.wait(10)  # a long session, still running when the user presses Ctrl-C
        return episode.row(status="interrupted" if fleet.stop.is_set() else "done")

    def on_row(row: dict) -> None:
        if row["task"] != "0_task":
            return
        deadline = time.monotonic() + 10
        while len(started) < 3 and time.monotonic() < deadline:  # the freed worker took the next episode
            time.sleep(0.01)
        threading.Timer(0.2, release.set).start()  # the running sessions reach their next turn later
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fleet.run(work, runner, on_row)
    assert sorted(started) == ["0_task", "1_task", "2_task"]  # nothing started after the interrupt
    statuses = {r["task"]: r["status"] for r in rows_on_disk(out)}
    assert statuses == {"0_task": "done", "1_task": "interrupted", "2_task": "interrupted"}
    again = []
    Fleet(out, workers=2, resume=True).run(work, lambda e: again.append(e.task.stem) or e.row(status="done"))
    assert sorted(again) == [f"{i}_task" for i in range(1, 6)]


def test_a_ctrl_c_the_kernel_hands_to_a_worker_thread_still_stops_the_fleet_at_once(tmp_path):
    """The kernel may deliver a process's SIGINT to any of its threads; Python then runs the handler only when
    the main thread next runs bytecode. A main thread blocked in one long wait for the next row saw the
    user's Ctrl-C only when the running session had ended (a bench then ran its session to the last turn)."""
    import signal

    fleet, began = Fleet(tmp_path / "out", workers=1), threading.Event()

    def runner(episode: Episode) -> dict:
        began.set()
        for _ in range(600):  # a session of up to 30 s, which ends at its next turn once `stop` is set
            if fleet.stop.is_set():
                return episode.row(status="interrupted")
            time.sleep(0.05)
        return episode.row(status="done")

    def interrupt_the_worker() -> None:
        began.wait(10)
        worker = next(t for t in threading.enumerate() if t.name.startswith("fleet-"))
        signal.pthread_kill(worker.ident, signal.SIGINT)

    threading.Thread(target=interrupt_the_worker, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        fleet.run(episodes(tmp_path, 2), runner)
    assert time.monotonic() - start < 10  # not the session's 30 s
    assert [r["status"] for r in rows_on_disk(tmp_path / "out")] == ["interrupted"]


def test_a_ctrl_c_while_the_fleet_still_starts_its_workers_stops_the_episodes_that_began(tmp_path, monkeypatch):
    """A Ctrl-C may come while the main thread is still starting the workers (a busy machine deschedules it
    right after a start): the episodes already running must be stopped and their rows written, not left to
    run on. The main thread here pauses after starting the first worker, whose episode interrupts at once."""
    import signal

    fleet, main, start = Fleet(tmp_path / "out", workers=2), threading.main_thread(), threading.Thread.start

    def slow_start(thread) -> None:
        start(thread)
        if thread.name == "fleet-0":
            time.sleep(2)  # descheduled: the interrupt comes now

    def runner(episode: Episode) -> dict:
        signal.pthread_kill(main.ident, signal.SIGINT)
        for _ in range(600):
            if fleet.stop.is_set():
                return episode.row(status="interrupted")
            time.sleep(0.05)
        return episode.row(status="done")

    monkeypatch.setattr(threading.Thread, "start", slow_start)
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        fleet.run(episodes(tmp_path, 3), runner)
    assert time.monotonic() - began < 10
    assert [r["status"] for r in rows_on_disk(tmp_path / "out")] == ["interrupted"]


def test_a_bad_runner_or_a_failing_progress_display_loses_no_row(tmp_path):
    """An error row carries the runner's columns (bench's progress reads `correct`); a runner that returns
    no row is an error, not a dead thread the fleet waits on forever; a progress callback that fails
    costs no row."""
    def runner(episode: Episode) -> dict:
        if episode.task.stem == "0_task":
            return None
        if episode.task.stem == "1_task":
            raise ValueError("a bug in one session")
        return episode.row(status="done", correct=True)

    def display(row: dict) -> None:
        raise KeyError("correct")  # a display bug

    rows = Fleet(tmp_path / "out", workers=2).run(episodes(tmp_path, 4), runner, display,
                                                  blank=lambda e: e.row(correct=False))
    by_task = {r["task"]: r for r in rows_on_disk(tmp_path / "out")}
    assert len(rows) == 4 and set(by_task) == {f"{i}_task" for i in range(4)}
    assert by_task["0_task"]["status"] == "error" and "returned NoneType" in by_task["0_task"]["error"]
    assert by_task["1_task"]["status"] == "error" and by_task["1_task"]["correct"] is False
