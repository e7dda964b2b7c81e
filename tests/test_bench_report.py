"""bench_report: the Table 1 numbers by hand, the files it writes, and reading rows back."""

from __future__ import annotations

import json
import math

import pytest

from kernelsmith import bench_report as br

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
META = {"backend": "anthropic", "model": "claude-test", "device": "cuda:0", "gpu": "NVIDIA H200",
        "torch": "2.5.1", "max_turns": 30, "runs": 1, "date": "2025-01-02 03:04",
        "command": "kernelsmith bench tasks/ --runs 1"}


def row(level, task, status="done", correct=True, eager=None, compile_=None, run=0, wall=10.0, cost=0.1,
        flags=()):
    return {"level": level, "task": task, "path": f"/t/{level}/{task}.py", "run": run, "status": status,
            "correct": correct, "speedup_vs_eager": eager, "speedup_vs_compile": compile_,
            "reward": 1.0 if correct else -1.0, "turns": 3, "tokens": {"input": 10, "output": 5},
            "cost_usd": cost, "wall_s": wall, "lint_flags": list(flags), "error": "", "session_id": "s",
            "best_sha": ""}


def sample_rows():
    return [
        row("level1", "1_A", eager=2.0, compile_=0.5, wall=10, flags=["eager_launch_bound"]),
        row("level1", "2_B", eager=8.0, compile_=2.0, wall=20),
        row("level1", "3_C", status="failed", correct=False, wall=30),
        row("level1", "4_D", status="error", correct=False, wall=5, cost=0.5),
        row("level1", "5_E", status="pending", correct=False, wall=0, cost=0.0),
        row("level2", "1_F", eager=1.0, compile_=None, wall=40),  # exactly 1.0: not faster
        row("level2", "2_G", status="failed", correct=False, eager=3.0, compile_=3.0, wall=50),  # wrong: no credit
    ]


def test_summary_numbers_by_hand():
    s = br.summarize(sample_rows())
    assert list(s) == ["level1", "level2", "overall"]
    l1, l2, all_ = s["level1"], s["level2"], s["overall"]
    assert (l1["n"], l1["errors"], l1["not_run"], l1["correct"]) == (3, 1, 1, 2)
    assert l1["pass_rate"] == pytest.approx(2 / 3)
    assert l1["faster_than_eager_rate"] == pytest.approx(2 / 3)
    assert l1["faster_than_compile_rate"] == pytest.approx(1 / 3)
    assert l1["geomean_speedup_vs_eager"] == pytest.approx(4.0)  # sqrt(2 * 8)
    assert l1["geomean_speedup_vs_compile"] == pytest.approx(1.0)  # sqrt(0.5 * 2)
    assert l1["median_wall_s"] == pytest.approx(20.0)
    assert l1["total_cost_usd"] == pytest.approx(0.8)  # the error row's cost is spent too
    assert l1["flagged"] == 1
    assert (l2["n"], l2["pass_rate"], l2["faster_than_eager_rate"], l2["faster_than_compile_rate"]) == (2, 0.5, 0, 0)
    assert l2["geomean_speedup_vs_eager"] == pytest.approx(1.0)
    assert l2["geomean_speedup_vs_compile"] is None  # the only correct row has no compile speed-up
    assert all_["n"] == 5 and all_["pass_rate"] == pytest.approx(3 / 5)
    assert all_["faster_than_eager_rate"] == pytest.approx(2 / 5)
    assert all_["faster_than_compile_rate"] == pytest.approx(1 / 5)
    assert all_["geomean_speedup_vs_eager"] == pytest.approx(16 ** (1 / 3))
    assert all_["geomean_speedup_vs_compile"] == pytest.approx(1.0)


def test_error_and_pending_rows_are_not_counted():
    rows = [row("level3", "1_X", status="error", correct=False), row("level3", "2_Y", status="pending", correct=False),
            row("level3", "3_Z", status="failed", correct=False)]
    s = br.summarize(rows)["level3"]
    assert (s["n"], s["errors"], s["not_run"]) == (1, 1, 1)
    assert s["pass_rate"] == 0.0 and s["geomean_speedup_vs_eager"] is None
    only_errors = br.summarize(rows[:2])["overall"]
    assert only_errors["n"] == 0 and only_errors["pass_rate"] is None and only_errors["median_wall_s"] is None


def test_levels_sort_naturally_and_geomean_skips_bad_values():
    s = br.summarize([row("level10", "1_A", eager=2.0), row("level2", "1_A", eager=2.0), row("", "x", eager=2.0)])
    assert list(s) == ["", "level2", "level10", "overall"]
    assert br.geomean([4.0, None, 0.0, -1.0, math.nan, 1.0]) == pytest.approx(2.0)
    assert br.geomean([None]) is None


def no_plot(rows, path):
    path.write_bytes(b"")  # the PNG has its own tests; drawing one costs about a second here


def test_results_json_key_names(tmp_path, monkeypatch):
    monkeypatch.setattr(br, "plot", no_plot)
    summary = br.write_report(tmp_path, sample_rows(), META)
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data) == {"meta", "summary", "rows"}
    assert data["meta"] == META and len(data["rows"]) == 7
    assert list(data["summary"]) == ["level1", "level2", "overall"]
    for key in ("n", "pass_rate", "faster_than_eager_rate", "faster_than_compile_rate", "geomean_speedup_vs_eager",
                "geomean_speedup_vs_compile", "median_wall_s", "total_cost_usd", "flagged", "errors", "not_run"):
        assert key in data["summary"]["overall"], key
    assert data["summary"] == json.loads(json.dumps(summary))
    assert (tmp_path / "results.md").read_text().count("| level1 |") >= 2  # Table 1 and per-task rows


def test_markdown_table_and_method_line():
    rows = sample_rows()
    text = br.markdown(br.summarize(rows), META, rows)
    table = text.split("\n\n")[0]  # what `kernelsmith bench` prints
    assert table.splitlines()[0] == ("| level | tasks | pass rate | faster than eager | faster than compile | "
                                     "geomean vs eager | geomean vs compile |")
    assert "| level1 | 3 | 66.7% | 66.7% | 33.3% | 4.00× | 1.00× |" in table
    assert "| level2 | 2 | 50.0% | 0.0% | 0.0% | 1.00× | – |" in table
    assert "| **overall** | 5 | 60.0% | 40.0% | 20.0% | 2.52× | 1.00× |" in table
    method = next(line for line in text.splitlines() if line.startswith("**Method.**"))
    for part in ("anthropic", "claude-test", "cuda:0", "NVIDIA H200", "torch 2.5.1", "max turns 30",
                 "2025-01-02 03:04", "`kernelsmith bench tasks/ --runs 1`"):
        assert part in method, part
    assert "| level1 | 1_A | 0 | done | yes | 2.00× | 0.50× |" in text
    assert "eager_launch_bound" in text
    assert "torch not recorded" in br.markdown(br.summarize(rows), {"backend": "x"})


@pytest.mark.parametrize("rows", [sample_rows(), [row("level1", "1_A", status="failed", correct=False)], []],
                         ids=["speedups", "none-correct", "no-rows"])
def test_plot_is_a_png(tmp_path, rows):
    path = br.plot(rows, tmp_path / "s.png")
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000


def test_write_report_writes_png(tmp_path):
    br.write_report(tmp_path, [row("level1", "1_A", status="failed", correct=False)], META)
    assert (tmp_path / "speedups.png").read_bytes()[:8] == PNG_MAGIC


def test_load_rows_latest_per_key_from_jsonl(tmp_path):
    old = row("level1", "1_A", status="error", correct=False)
    new = row("level1", "1_A", eager=3.0)
    other_run = row("level1", "1_A", run=1, status="failed", correct=False)
    lines = [json.dumps(r) for r in (old, other_run, new)]
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + '\n{"level": "level1", "ta')  # torn last line
    br.write_report(tmp_path, [old], META)  # a stale results.json: rows.jsonl wins
    rows = br.load_rows(tmp_path)
    assert [(r["run"], r["status"]) for r in rows] == [(0, "done"), (1, "failed")]
    assert rows[0]["speedup_vs_eager"] == 3.0


def test_load_rows_from_results_json_or_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(br, "plot", no_plot)
    assert br.load_rows(tmp_path) == []
    br.write_report(tmp_path, sample_rows(), META)
    rows = br.load_rows(tmp_path)
    assert len(rows) == 7 and br.summarize(rows) == br.summarize(sample_rows())


def test_rows_of_two_harness_versions_are_called_out_under_the_table():
    """Harness 2 stopped charging candidates for the Python op recorder: its timings differ."""
    old = [dict(r, harness_version="1") for r in sample_rows()[:2]]
    new = [dict(r, task=r["task"] + "_v2", harness_version="2") for r in sample_rows()[:2]]
    assert "harness versions" not in br.notes_line(br.summarize(new)["overall"])
    line = br.notes_line(br.summarize(old + new)["overall"])
    assert "Rows from harness versions 1, 2" in line
    legacy = br.summarize(sample_rows())["overall"]  # rows written before the field existed count as 1
    assert legacy["harness_versions"] == ["1"]
