"""What a person watching `kernelsmith train` sees: progress bars for the run's steps and for the rollouts of
the current step, and a live line with the last step's metrics. Each finished rollout and step is also
printed as a line above the bars, so a log file (no terminal) still tells the run's story."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class TrainProgress:
    """A context manager; pass `on_row` (one rollout session done) and `on_step` (one training step done)."""

    def __init__(self, title: str, steps: int, rollouts_per_step: int, first_step: int = 0):
        columns = [TextColumn("{task.fields[title]}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.description}"), TimeElapsedColumn()]
        self.bar = Progress(*columns, transient=False)
        self.steps = self.bar.add_task("", total=steps, completed=first_step, title=title)
        self.rollouts = self.bar.add_task("", total=rollouts_per_step, title="rollouts")
        self.rewards: list[float] = []

    def __enter__(self) -> TrainProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def on_row(self, row: dict) -> None:
        reward = row.get("reward")
        if isinstance(reward, (int, float)):
            self.rewards.append(float(reward))
        mean = f"mean reward {sum(self.rewards) / len(self.rewards):.2f}" if self.rewards else ""
        self.bar.update(self.rollouts, advance=1, description=mean)
        self.bar.console.print(rollout_line(row), soft_wrap=True)

    def on_step(self, row: dict) -> None:
        line = metrics_line(row)
        self.bar.update(self.steps, completed=row["step"], description=line)
        self.bar.reset(self.rollouts)
        self.rewards.clear()
        self.bar.console.print(f"step {row['step']}/{row['of']}: {line}", soft_wrap=True)


def rollout_line(row: dict) -> str:
    """One finished rollout session (a bench row), as Rich text."""
    return (f"rollout {escape(Path(str(row.get('task', ''))).stem)} run {row.get('run')}: "
            f"{row.get('status')} reward {row.get('reward')}")


def metrics_line(row: dict) -> str:
    """The step's numbers in one line, those a row has (PPO's are all there)."""
    parts = [("reward", "reward_mean", ".3f"), ("kl", "kl_to_reference", ".5f"), ("entropy", "entropy", ".3f"),
             ("value loss", "value_loss", ".4f"), ("clip", "clip_fraction", ".3f"),
             ("length", "response_length", ".0f"), ("tool calls valid", "tool_call_validity", ".2f"),
             ("rollout tok/s", "rollout_tokens_per_s", ".0f"), ("train tok/s", "tokens_per_s", ".0f"),
             ("env steps/s", "env_steps_per_s", ".2f"),
             ("GPU GB", "gpu_memory_gb", ".1f")]
    return " ".join(f"{name} {row[key]:{fmt}}" for name, key, fmt in parts if isinstance(row.get(key), (int, float)))
