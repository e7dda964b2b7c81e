"""Tasks as the rows verl's RLHFDataset reads (`data.train_files` / `data.val_files`): one parquet row per
KernelBench-format task file, as `kernelsmith synth` writes them under DIR/tasks.

A row carries the task whole in `extra_info` (its path, its source and the source's sha256), so a rollout
worker lays out the session's workdir from the row and never needs the tasks folder. Its `prompt` is only
what verl filters and logs by: the agent loop replaces it with KernelEnv's own system and task prompts,
rendered from the workdir the session runs in (the prompt the policy is trained and served with)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from kernelsmith.errors import BadInput
from kernelsmith.train.verl import AGENT_NAME, DATA_SOURCE


def task_row(task, index: int, split: str) -> dict[str, Any]:
    """One task (a task.TaskSource) as a verl dataset row."""
    prompt = (f"Write fast kernels for the PyTorch module of task {task.name}. In the rollout this message is "
              f"replaced by the kernelsmith session's own prompt.\n\n```python\n{task.source}\n```")
    return {"data_source": DATA_SOURCE, "agent_name": AGENT_NAME, "ability": "kernels",
            "prompt": [{"role": "user", "content": prompt}],
            "reward_model": {"style": "kernelsmith", "ground_truth": ""},  # the reward managers read this key
            "extra_info": {"index": index, "split": split, "task_name": task.name, "task_path": task.origin,
                           "task_source": task.source,
                           "task_sha256": hashlib.sha256(task.source.encode()).hexdigest()}}


def task_rows(paths: list[Path], split: str) -> list[dict[str, Any]]:
    """The rows of task files (each must be a KernelBench-format task: one line and exit 2 otherwise)."""
    from kernelsmith import task as task_mod

    return [task_row(task_mod.load_task(str(path)), i, split) for i, path in enumerate(paths)]


def write_parquet(rows: list[dict[str, Any]], out: Path) -> Path:
    """rows as a parquet file at out (written aside, then moved into place)."""
    pa, pq = _pyarrow()
    if not rows:
        raise BadInput(f"no task rows to write to {out}")
    out.parent.mkdir(parents=True, exist_ok=True)
    aside = out.with_name(f".{out.name}.tmp")
    pq.write_table(pa.Table.from_pylist(rows), str(aside))
    aside.replace(out)
    return out


def read_parquet(path: Path) -> list[dict[str, Any]]:
    _, pq = _pyarrow()
    return pq.read_table(str(path)).to_pylist()


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise BadInput("writing verl's dataset needs pyarrow", "pip install 'kernelsmith[scale]'") from None
    return pa, pq
