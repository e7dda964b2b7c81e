"""Sessions for the trainer: played through the fleet, then exported as trajectories. RFT's teacher and PPO's
policy both roll out this way (bench's runner: one row per session, resumable; every kernel built, verified
and timed by the jailed workers)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def play(settings, tasks: list[Path], runs: int, workers: int, folder: Path, sandbox,
         on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """`runs` sessions per task with `settings`' backend, their workdirs and rows in `folder`."""
    from kernelsmith import bench

    plan = bench.BenchPlan(settings, settings.device, folder, runs, workers, resume=True, lint=False,
                           meta={"backend": settings.backend, "model": settings.model})
    return bench.run_bench(plan, tasks, sandbox, on_row)


def export(folder: Path, model: Path, out: Path, one_call_per_reply: bool = False):
    """The sessions played into `folder` as trajectories rendered with `model`'s tokenizer, written to `out`."""
    from kernelsmith.train import trajectories

    paths = trajectories.session_files([str(folder / "workdirs")], folder)
    return trajectories.export_trajectories(paths, trajectories.load_tokenizer(model), model, out,
                                            one_call_per_reply=one_call_per_reply)
