"""bench/roofline_report.py: each session's fastest verified kernel against the task's floor on the GPU's
measured ceilings, from a bench's workdirs or the events.tgz a device call brings back."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

from kernelsmith.evaluation.ceilings import CEILINGS
from kernelsmith.evaluation.result import EvalResult

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "roofline_report.py"
H200 = {**CEILINGS["H200"], "gpu": "NVIDIA H200"}


def profile(candidate_ms: float, min_bytes: int, flops: int = 0, correct: bool = True) -> dict:
    result = EvalResult(correct=correct, timings_ms={"candidate": candidate_ms, "eager": candidate_ms * 2},
                        roofline={"flops": flops, "min_bytes": min_bytes, "ceilings": H200})
    return {"v": 1, "kind": "eval_result", "turn": 2, "tool": "profile", "attempt": 1, "result": result.to_dict()}


def session(root: Path, level: str, task: str, events: list) -> None:
    path = root / "workdirs" / level / task / "run0" / ".kernelsmith" / "sessions" / "s1" / "events.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in events))


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_the_fastest_verified_profile_is_held_to_the_floor_from_a_folder_and_a_tgz(tmp_path):
    out = tmp_path / "bench"
    gb = 4_200_000_000  # 1.0 ms at the H200's measured 4.2 TB/s
    session(out, "level1", "21_Sigmoid", [profile(2.0, gb), '{"torn', profile(1.25, gb), profile(0.5, gb, correct=False)])
    session(out, "level1", "19_ReLU", [profile(1.6, gb)])
    # floor: 1 ms of FLOPs at fp32's compute peak, which is 3xTF32's (a third of TF32's 384 TFLOP/s), not SGEMM's
    session(out, "level2", "9_Matmul", [profile(2.0, 1000, flops=int(128e12 * 1e-3))])
    session(out, "level1", "1_Failed", [{"v": 1, "kind": "eval_result", "tool": "verify", "result": {"build": {}}}])
    proc = run(out, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["task"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert set(rows) == {"21_Sigmoid", "19_ReLU", "9_Matmul"}  # a session with no profile has no row
    assert rows["21_Sigmoid"]["candidate_ms"] == 1.25 and rows["21_Sigmoid"]["pct_bandwidth"] == 80.0  # not the wrong 0.5
    assert rows["21_Sigmoid"]["eager_pct_bandwidth"] == 40.0 and rows["21_Sigmoid"]["bound"] == "memory"
    assert rows["9_Matmul"]["bound"] == "compute" and rows["9_Matmul"]["pct_flops"] == 50.0
    with tarfile.open(tmp_path / "events.tgz", "w:gz") as tar:
        tar.add(out / "workdirs", arcname="workdirs")
    table = run(tmp_path / "events.tgz")
    assert table.returncode == 0, table.stderr
    assert "Memory-bound kernels: 1 of 2 at >= 80% of the copy bandwidth; median 71.2%." in table.stdout
    assert "| level1 | 21_Sigmoid | memory | 1.25 | 1 | 80 |" in table.stdout and "NVIDIA H200" in table.stdout


def test_nothing_to_report_is_one_line_and_exit_1(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = run(tmp_path / "empty")
    assert proc.returncode == 1 and proc.stderr.strip() == "no profiled kernel with a roofline in these sessions"
    assert run(tmp_path / "absent").returncode == 2
