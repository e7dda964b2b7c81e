"""bench/train_report.py: the SmolLM2 run's tables from its folder and from the train.tgz a device call brings back."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "train_report.py"


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _run_folder(root: Path) -> Path:
    row = {"correct": False, "reward": -1.0, "tokens": {"output": 300}}
    _jsonl(root / "eval-before" / "rows.jsonl", [row, row, {**row, "correct": True, "reward": 1.0}])
    _jsonl(root / "eval-after" / "rows.jsonl", [{**row, "correct": True, "reward": 1.0}] * 2 + [row])
    (root / "rft").mkdir()
    (root / "rft" / "rft.json").write_text(json.dumps({"sessions": 12, "kept": 9, "rejected": {"reward": 3}}))
    _jsonl(root / "rft" / "metrics.jsonl", [{"loss": 2.5}, {"loss": 1.25}])
    _jsonl(root / "critic" / "metrics.jsonl", [{"value_loss": 0.5, "explained_variance": 0.1},
                                               {"value_loss": 0.25, "explained_variance": 0.4}])
    _jsonl(root / "ppo" / "metrics.jsonl", [{"step": s, "reward_mean": r, "kl_to_reference": 0.001 * s,
                                             "rollout_tokens_per_s": 150.0, "gpu_memory_gb": 3.2}
                                            for s, r in ((1, -0.5), (2, 0.25))])
    return root


def _report(target: Path) -> str:
    proc = subprocess.run([sys.executable, str(SCRIPT), str(target)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_tables_say_what_the_run_measured_from_its_folder_or_its_archive(tmp_path):
    root = _run_folder(tmp_path / "run")
    text = _report(root)
    assert "| held apart | base | 1/3 | -0.333 | 300 |" in text
    assert "| held apart | after PPO | 2/3 | +0.333 | 300 |" in text
    assert "| dev subset | base | not run | | |" in text  # an evaluation that did not run says so
    assert "12 teacher sessions, 9 kept" in text and "SFT loss 2.500 -> 1.250" in text
    assert "value loss 0.5000 -> 0.2500, explained variance 0.400" in text
    assert "| 1 | -0.500 | 0.00100 |" in text and "| 2 | +0.250 | 0.00200 |" in text and "| 150.0 |" in text
    archive = tmp_path / "train.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in root.rglob("*"):
            tar.add(path, arcname=str(path.relative_to(root)), recursive=False)
    assert _report(archive) == text
