"""The compile-baseline cache that bench sessions share: locked writes, seeding from bench/baselines.py
rows under the key a session computes, the eager-drift check on seeded entries, and the bench plumbing."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from pathlib import Path

from conftest import TASK
from kernelsmith import bench
from kernelsmith import workdir as wd
from kernelsmith.agent.env import eval_options
from kernelsmith.agent.run import prepare_workdir
from kernelsmith.config import Settings, load_settings
from kernelsmith.evaluation.options import COMPILE_MODES, EvalOptions
from kernelsmith.evaluation.baselines import TIMERS, apply_baselines, cache_key, credited, task_key, update_cache
from kernelsmith.evaluation.result import EvalResult

SEED = Path(__file__).parent.parent / "bench" / "seed_baselines.py"
GPU, TORCH = "NVIDIA H200", "2.11.0+cu130"


def test_concurrent_writers_keep_each_others_entries(tmp_path):
    """Two sessions (threads here) write different keys to one cache at once: every entry survives."""
    cache = tmp_path / "shared" / "baselines.json"
    per_thread = 40
    start = threading.Barrier(2)

    def writer(name: str) -> None:
        start.wait()
        for i in range(per_thread):
            update_cache(cache, f"{name}-{i}|{GPU}|{TORCH}", {"eager_ms": float(i), "compile_ms": {"default": 1.0}})

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = json.loads(cache.read_text())
    assert sorted(entries) == sorted(f"{n}-{i}|{GPU}|{TORCH}" for n in ("a", "b") for i in range(per_thread))
    assert not list(cache.parent.glob("*.tmp"))  # every temp file was renamed into place


def _rows_and_tasks(tmp_path: Path, eager_ms: float = 0.5) -> tuple[Path, Path]:
    """A KernelBench-format task set (CRLF line ends: model.py is not the raw file) and baselines rows."""
    tasks = tmp_path / "tasks"
    (tasks / "level1").mkdir(parents=True)
    (tasks / "level1" / "1_axpb.py").write_bytes(TASK.replace("\n", "\r\n").encode())
    good = {"level": "level1", "task": "1_axpb", "eager_ms": eager_ms, "eager_p10": eager_ms, "eager_p90": eager_ms,
            "runs": 100, "gpu": GPU, "torch": TORCH, "lint_flags": [],
            "warmup_s": {"eager": 0.01, "compile:default": 2.0, "compile:max-autotune-no-cudagraphs": 9.0},
            "compile_default_ms": 0.4, "compile_max-autotune-no-cudagraphs_ms": 0.3, "wall_s": 20.0,
            "timers": TIMERS}
    one_mode = {**good, "task": "2_one_mode"}
    del one_mode["compile_max-autotune-no-cudagraphs_ms"]
    (tasks / "level1" / "2_one_mode.py").write_text(TASK)
    failed = {"level": "level1", "task": "3_failed", "error": "out of memory", "wall_s": 3.0}
    rows = tmp_path / "baselines.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in (good, one_mode, failed)))
    return rows, tasks


def _seed(rows: Path, tasks: Path, out: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(SEED), str(rows), "--tasks", str(tasks), "--out", str(out),
                           "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def _workdir_reference(tmp_path: Path, tasks: Path) -> Path:
    """model.py of a workdir laid out from the task the way a bench session lays it out."""
    workdir = prepare_workdir(str(tasks / "level1" / "1_axpb.py"), tmp_path / "wd", "cpu", "fp32", [], None)
    return workdir / "model.py"


def _profile(eager_ms: float) -> dict:
    return {"timings": {"eager": {"median": eager_ms}}, "gpu": GPU, "torch": TORCH}


def _profiled_result(eager_ms: float) -> EvalResult:
    return EvalResult(device="cpu", precision="fp32", timings_ms={"candidate": 0.2, "eager": eager_ms})


def test_seeded_entry_has_the_sessions_key_and_is_used_without_measuring(tmp_path):
    rows, tasks = _rows_and_tasks(tmp_path)
    out = tmp_path / "cache" / "baselines.json"
    out.parent.mkdir()
    out.write_text(json.dumps({"other|gpu|torch": {"eager_ms": 1.0, "compile_ms": {"default": 1.0}}}))
    proc = _seed(rows, tasks, out)
    assert "seeded 1 entries" in proc.stdout and "skipped 2 rows" in proc.stdout, proc.stdout

    reference = _workdir_reference(tmp_path, tasks)
    assert reference.read_bytes() != (tasks / "level1" / "1_axpb.py").read_bytes()
    opts = EvalOptions(device="cpu", cache_path=out, compile_baseline=True)  # the seeded rows are compile baselines
    key = cache_key(task_key(reference, opts), GPU, TORCH)
    entries = json.loads(out.read_text())
    assert set(entries) == {"other|gpu|torch", key}  # merged into the existing file
    assert entries[key]["seeded_from"] == str(rows)
    assert entries[key]["compile_ms"] == {"default": 0.4, "max-autotune-no-cudagraphs": 0.3}
    assert set(entries[key]["compile_ms"]) == set(COMPILE_MODES)

    result = _profiled_result(0.52)  # live eager within 10% of the row's 0.5 ms
    apply_baselines(reference, opts, _profile(0.52), result)
    assert any(n.startswith("baselines from cache") and str(rows) in n for n in result.notes), result.notes
    assert "baselines" not in result.seconds
    assert result.timings_ms["compile"] == 0.3 and result.compile_mode == "max-autotune-no-cudagraphs"
    assert result.speedup_vs_compile == 0.3 / 0.2


def test_a_drifted_live_eager_remeasures_a_seeded_entry(tmp_path):
    """Live eager 3x the seeded one: the entry is not trusted, the baselines are measured (on the CPU)."""
    rows, tasks = _rows_and_tasks(tmp_path, eager_ms=0.5)
    out = tmp_path / "baselines.json"
    _seed(rows, tasks, out)
    reference = _workdir_reference(tmp_path, tasks)
    opts = EvalOptions(device="cpu", cache_path=out, min_runs=3, min_seconds=0.01, seed=1, compile_baseline=True)
    key = cache_key(task_key(reference, opts), GPU, TORCH)
    assert json.loads(out.read_text())[key]["seeded_from"]

    result = _profiled_result(1.5)
    apply_baselines(reference, opts, _profile(1.5), result)
    assert any(n.startswith("baselines re-measured") for n in result.notes), result.notes
    entry = json.loads(out.read_text())[key]
    assert "seeded_from" not in entry and set(entry["compile_ms"]) == set(COMPILE_MODES)
    assert result.timings_ms["compile"] == min(entry["compile_ms"].values())


def test_bench_sessions_share_out_baselines_json(tmp_path, monkeypatch):
    out = tmp_path / "out"
    plan = bench.BenchPlan(Settings(), "cpu", out)
    config = wd.WorkdirConfig(task="t", origin="", device="cpu", precision="fp32", fixed={})
    settings = bench.session_settings(plan)
    assert eval_options(settings, config).cache_path == out / "baselines.json"
    assert plan.settings.baselines_cache is None  # the plan's own settings are left as they were
    assert eval_options(plan.settings, config).cache_path is None  # a lone session: per workdir

    chosen = bench.BenchPlan(Settings(baselines_cache=str(tmp_path / "seeded.json")), "cpu", out)
    assert eval_options(bench.session_settings(chosen), config).cache_path == tmp_path / "seeded.json"

    class Sessions:  # stands in for kernelsmith.agent.run: records what a bench session is started with
        def __init__(self):
            self.settings = []

        def prepare_workdir(self, *args):
            pass

        def start(self, settings, *args, **kwargs):
            self.settings.append(settings)

    sessions = Sessions()
    from kernelsmith.agent.fleet import Episode

    bench._start_or_resume(plan, None, Episode(tmp_path / "1_t.py", 0, tmp_path / "never-made"), sessions, None)
    assert eval_options(sessions.settings[0], config).cache_path == out / "baselines.json"

    class Sandbox:  # eval-only builds its own EvalOptions
        def __init__(self):
            self.opts = []

        def evaluate_files(self, reference, candidate, opts):
            self.opts.append(opts)
            return EvalResult(device="cpu")

    (tmp_path / "refs").mkdir()
    (tmp_path / "refs" / "1_t.py").write_text(TASK)
    (tmp_path / "cands").mkdir()
    (tmp_path / "cands" / "1_t.py").write_text(TASK)
    sandbox = Sandbox()
    bench.eval_only(plan, tmp_path / "refs", tmp_path / "cands", sandbox)
    assert [o.cache_path for o in sandbox.opts] == [out / "baselines.json"]

    monkeypatch.setenv("KERNELSMITH_BASELINES_CACHE", str(tmp_path / "env.json"))
    assert load_settings({}, []).baselines_cache == str(tmp_path / "env.json")
    monkeypatch.delenv("KERNELSMITH_BASELINES_CACHE")
    (tmp_path / "kernelsmith.toml").write_text('baselines-cache = "from-toml.json"\n')
    assert load_settings({}, [tmp_path]).baselines_cache == "from-toml.json"


def _cached_task(tmp_path: Path, eager_ms: float):
    """A workdir reference with a cached clean eager of eager_ms (no compile modes), and its options."""
    rows, tasks = _rows_and_tasks(tmp_path, eager_ms=eager_ms)
    reference = _workdir_reference(tmp_path, tasks)
    opts = EvalOptions(device="cpu", cache_path=tmp_path / "baselines.json", compile_baseline=False)
    key = cache_key(task_key(reference, opts), GPU, TORCH)
    update_cache(opts.cache_path, key, {"eager_ms": eager_ms, "compile_ms": {}, "timers": TIMERS})
    return reference, opts


def test_a_live_eager_slower_than_the_clean_one_is_credited_at_the_clean_eager(tmp_path, monkeypatch):
    """The candidate's process is the slower place (or the candidate slowed eager there): the clean eager
    is credited, so the speed-up is the candidate's own, the cache is kept, and credit is not withheld."""
    from kernelsmith.evaluation import baselines

    reference, opts = _cached_task(tmp_path, eager_ms=0.5)
    monkeypatch.setattr(baselines, "measure_baselines", lambda *a: pytest.fail("the cache should have been used"))
    result = _profiled_result(0.65)
    apply_baselines(reference, opts, _profile(0.65), result)
    assert not result.contended
    assert result.speedup_vs_eager == 0.5 / 0.2 and result.timings_ms["eager_live"] == 0.65
    assert any("understated" in n for n in result.notes), result.notes


def test_a_clean_eager_slower_than_the_live_one_is_remeasured_then_contended(tmp_path, monkeypatch):
    """A clean eager measured on a busy machine would inflate every speed-up: the cached entry is not
    trusted, and when the fresh measurement is still slower than the live eager the result is contended."""
    from kernelsmith.evaluation import baselines

    reference, opts = _cached_task(tmp_path, eager_ms=0.9)
    fresh = []
    monkeypatch.setattr(baselines, "measure_baselines",
                        lambda *a: fresh.append(1) or {"eager_ms": 0.8, "compile_ms": {}, "warmup_s": {}})
    result = _profiled_result(0.5)
    apply_baselines(reference, opts, _profile(0.5), result)
    assert fresh == [1] and any(n.startswith("baselines re-measured") for n in result.notes)
    assert "busy" in result.contended and "clean process" in result.contended
    assert json.loads(opts.cache_path.read_text())[cache_key(task_key(reference, opts), GPU, TORCH)]["eager_ms"] == 0.8


def test_the_live_eager_is_compared_with_the_clean_eager_timed_the_same_way(tmp_path, monkeypatch):
    """On an H100 the red team's honest kernel saw eager at 0.136 ms beside it against 0.079 ms credited:
    the credited eager is the queued timer, which hides the host path, and the live one is timed with the
    sync before its start, as the candidate is. Compared like with like they agree, no drift is claimed, and
    the result says by how much the timers alone may understate the speed-up."""
    from kernelsmith.evaluation import baselines

    reference, opts = _cached_task(tmp_path, eager_ms=0.079)
    key = cache_key(task_key(reference, opts), GPU, TORCH)
    update_cache(opts.cache_path, key, {"eager_ms": 0.079, "compile_ms": {}, "timers": TIMERS,
                                        "by_timer": {"eager": 0.131, "eager@queued": 0.079}})
    monkeypatch.setattr(baselines, "measure_baselines", lambda *a: pytest.fail("the cache should have been used"))
    result = _profiled_result(0.136)
    apply_baselines(reference, opts, _profile(0.136), result)
    assert not result.contended and result.timings_ms["eager"] == 0.079  # credited at its best timer still
    assert not any("slower than in a clean process" in n for n in result.notes), result.notes
    assert any("understated by up to 1.66x" in n for n in result.notes), result.notes
    assert baselines.settled_eager({"eager_ms": 0.5}) == 0.5  # an entry of one timer (the CPU)


def test_a_baseline_is_credited_at_the_faster_of_its_two_timers():
    """The queued timer hides compile's host path as do_bench does; the sync before the start event shows
    it. The faster median is credited, so a candidate must beat the baseline at its best."""
    timings = {"eager": {"median": 0.50}, "eager@queued": {"median": 0.49},
               "compile:default": {"median": 0.42}, "compile:default@queued": {"median": 0.40}}
    assert credited(timings, "eager") == 0.49 and credited(timings, "compile:default") == 0.40
    assert credited({"eager": {"median": 0.5}}, "eager") == 0.5  # the CPU: one timer


def test_an_entry_timed_by_one_timer_is_measured_again(tmp_path, monkeypatch):
    """Before both timers were taken, compile was timed up to 5.5% slow on the H200: such an entry would
    credit speed-ups over compile that its best timing does not support. It is re-measured, and the
    session warm-up does not count it as cached."""
    from kernelsmith.evaluation import baselines

    reference, opts = _cached_task(tmp_path, eager_ms=0.5)
    key = cache_key(task_key(reference, opts), GPU, TORCH)
    update_cache(opts.cache_path, key, {"eager_ms": 0.5, "compile_ms": {}})  # no "timers": the old format
    fresh = []
    monkeypatch.setattr(baselines, "measure_baselines", lambda *a, **k: fresh.append(k) or
                        {"eager_ms": 0.48, "compile_ms": {}, "warmup_s": {}, "timers": TIMERS,
                         "platform": [GPU, TORCH]})
    result = _profiled_result(0.5)
    apply_baselines(reference, opts, _profile(0.5), result)
    assert len(fresh) == 1 and any("one timer" in n for n in result.notes), result.notes
    assert result.speedup_vs_eager == 0.48 / 0.2
    assert json.loads(opts.cache_path.read_text())[key]["timers"] == TIMERS
    update_cache(opts.cache_path, key, {"eager_ms": 0.5, "compile_ms": {}})
    baselines.warm(reference, opts)
    assert fresh[-1]["skip_platforms"] == []  # the warm-up measures it again too
