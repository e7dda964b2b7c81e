"""Profiling on the CPU device: candidates that behave only while verified are caught while timed."""

from __future__ import annotations

import random
import statistics
import textwrap

import pytest
import torch

from conftest import HONEST
from kernelsmith.evaluation import checks
from kernelsmith.harness.compare import compare
from kernelsmith.evaluation.reward import RewardThresholds, milestone_reward


def test_every_timed_run_sees_new_inputs(candidate, run_eval, tmp_path, monkeypatch):
    log = tmp_path / "fingerprints.txt"
    monkeypatch.setenv("KERNELSMITH_JAIL_WRITABLE", str(tmp_path))  # the jailed candidate may write its log there
    result = run_eval(candidate(f'''
        import hashlib

        class ModelNew(Base):
            def forward(self, x):
                with open({str(log)!r}, "a") as f:
                    f.write(hashlib.sha1(memoryview(x.numpy()).cast("B")).hexdigest() + "\\n")
                return kernel("axpb", x, self.bias)
    '''), profile=True, min_runs=30)
    assert result.clean, result.error
    seen = log.read_text().split()
    assert len(seen) >= 30 + 5
    assert len(set(seen)) == len(seen), "an input repeated: a fingerprint cache would get hits"


def test_cache_that_starts_after_verification_is_caught(candidate, run_eval):
    result = run_eval(candidate('''
        _calls = [0]
        _cache = {}

        class ModelNew(Base):
            def forward(self, x):
                _calls[0] += 1
                key = x.data_ptr()
                if _calls[0] > 8 and key in _cache:   # honest while verified, replays while timed
                    return _cache[key]
                out = kernel("axpb", x, self.bias)
                _cache[key] = out
                return out
    '''), profile=True, min_runs=30)
    assert not result.clean and result.reward == -1
    assert any("wrong output at" in v or "shares memory with the previous" in v for v in result.violations), \
        result.violations


def test_stale_answers_only_inside_timed_runs_are_caught_by_the_checksums(candidate, run_eval):
    """The candidate reads the harness's stack to know when it is timed (spot checks run outside the
    timed call) and then answers from inputs it saw before, in fresh memory: only the checksum of every
    timed output, judged by a trusted process for a sample drawn after the profile, sees it. Every timed
    run but the first is stale, so that the draw of checked runs cannot miss them (an attack keyed on a
    repeated input address cheated only when the allocator happened to reuse one, and passed honestly in CI)."""
    result = run_eval(candidate('''
        import sys
        _last = []

        def _timed():
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_name != "time_call":
                frame = frame.f_back
            return frame is not None

        class ModelNew(Base):
            def forward(self, x):
                if not _timed():
                    return kernel("axpb", x, self.bias)
                stale = _last[-1] if _last else None
                _last[:] = [x.numpy().copy()]
                if stale is None:
                    return kernel("axpb", x, self.bias)
                return kernel("axpb", torch.from_numpy(stale), self.bias)  # the previous timed run's inputs
    '''), profile=True, min_runs=30)
    assert not result.clean and result.reward == -1
    assert any("wrong output at a timed run" in v and "checksum" in v for v in result.violations), result.violations


SLOW_AXPB = '''
def slow(x, b):
    for _ in range(40):  # about 1 ms of one core's work: large beside the parent's clock's noise
        y = kernel("axpb", x, b)
    return y
'''


def _cpu_ms_of_slow(task_dir) -> float:
    """The CPU time (not wall: the test runner keeps this machine busy) of SLOW_AXPB's work on the task's input."""
    import ctypes
    import time

    lib = ctypes.CDLL(str(task_dir / "libaxpb.so"))
    x, b, y = torch.randn(64, 256), torch.randn(256), torch.empty(64, 256)
    args = [ctypes.c_void_p(t.data_ptr()) for t in (x, b, y)] + [ctypes.c_long(64), ctypes.c_long(256)]
    start = time.thread_time()
    for _ in range(40 * 20):
        lib.axpb(*args)
    return (time.thread_time() - start) * 1e3 / 20


# a pool thread that lives on, or a thread started for each draw that ends inside the timed call and so is gone
# before the parent reads the threads again: the process's CPU clock keeps exited threads' time
POOL = "_thread = concurrent.futures.ThreadPoolExecutor(1)\nsubmit = _thread.submit"
PER_DRAW = """
class _Once(threading.Thread):
    def __init__(self, fn, *args):
        super().__init__(daemon=True)
        self.fn, self.args = fn, args
        self.start()

    def run(self):
        self.value = self.fn(*self.args)

    def result(self):
        self.join()
        return self.value


submit = _Once
"""


# tries of an attack whose moving of work depends on the scheduler: on 2 cores under a full CI run the
# thread-per-draw attack moved nothing in 3 tries once (session 52; about 25 s a try): if one try in three fails,
# five in a row fail about one run in 240
ATTEMPTS = 5


@pytest.mark.parametrize("draws,spawn", [(("candidate",), POOL), (("candidate", "eager"), POOL),
                                         (("candidate",), PER_DRAW)],
                         ids=["its-draws", "every-draw", "thread-per-draw"])
def test_answers_computed_on_a_thread_beside_the_harness_loop_are_charged(candidate, run_eval, draws, spawn,
                                                                            task_dir):
    """The candidate patches nothing it needs: a profile hook (sys.setprofile, read only) sees the harness's input
    draw return for a candidate's run, and a thread of its own computes the answer while the harness
    flushes the cache on its thread; the timed call only hands it over. Where a core is free that lengthens
    no cycle of the parent's clock; the CPU time of threads the worker did not have before the candidate
    was imported shows it (ParentClock.foreign_cpu), and is charged. Computing for eager's draws too
    (wasted, free on a spare core) cancels against eager's gaps; the gaps after eager's runs, which no
    spin of the candidate's threads reaches, still hold it (ParentClock.foreign_after)."""
    honest = run_eval(candidate(SLOW_AXPB + '''
class ModelNew(Base):
    def forward(self, x):
        return slow(x, self.bias)
'''), profile=True, min_runs=30)
    source = SLOW_AXPB + '''
import concurrent.futures
import sys
import threading

# the hook is a rule broken on its own (guards.Observers: the test below), as is replacing a harness class's
# method: both checks are blinded, as a candidate that has read our source would; the CPU reading is the layer
# under them, which no code in the worker reaches
sys.modules["kernelsmith.harness.guards"].IdentitySnapshot.changed = lambda self: []
sys.modules["kernelsmith.harness.guards"].Observers.check = lambda self: None
SPAWN
_ready, _me = {}, []
DRAWS = DRAWS_GIVEN


def _hook(frame, event, arg):
    if event != "return" or frame.f_code.co_name != "next" or not _me:
        return
    caller = frame.f_back
    if caller is not None and caller.f_code.co_name == "interleave" and caller.f_locals.get("name") in DRAWS:
        _ready[arg[0].data_ptr()] = (arg[0], submit(slow, arg[0], _me[0].bias.detach()))


sys.setprofile(_hook)


class ModelNew(Base):
    def __init__(self, n):
        super().__init__(n)
        _me[:] = [self]

    def forward(self, x):
        got = _ready.pop(x.data_ptr(), None)
        if got is not None and got[0] is x:
            return got[1].result()
        return slow(x, self.bias)
'''.replace("DRAWS_GIVEN", repr(draws)).replace("SPAWN", spawn)
    assert honest.clean, honest.violations
    work = _cpu_ms_of_slow(task_dir)  # what the thread moves out of the window, in CPU time
    for attempt in range(ATTEMPTS):  # each try a new file (no verdict recalled)
        attack = run_eval(candidate(source + f"\n# try {attempt}\n"), profile=True, min_runs=30)
        assert attack.correct, attack.violations
        assert attack.timings_ms["candidate"] > 0.6 * work, (attack.timings_ms, work)  # never credited below it
        if attack.timings_ms["candidate_reported"] < work:  # its own timer saw only the hand-over (and waits)
            break
    # (on 2 busy cores the thread may not run before the timed call, which then waits for it inside its window:
    # nothing is moved, and the try is made again)
    assert attack.timings_ms["candidate_reported"] < work, f"no work moved out of the window in {ATTEMPTS} tries"
    # the reading that sees each: the shift over eager's gaps, or the gaps after eager's runs (on 2 busy
    # cores the wasted work also grows eager's cycles, so the charge alone would not tell them apart)
    seen = attack.clock["foreign_cpu_extra_ms" if draws == ("candidate",) else "foreign_cpu_after_eager_ms"]
    assert seen > 0.3 * work, (attack.clock, work)
    assert honest.clock["foreign_cpu_extra_ms"] < 0.1 * work


def test_a_hook_that_watches_the_harness_is_caught_even_when_gone_by_the_end(candidate, run_eval):
    """A profile hook installed by each call and gone once it has seen the next draw (or the timed loop's
    end), so that nothing is left for a check after the loop: the check before every draw sees it."""
    result = run_eval(candidate('''
        import sys

        def _hook(frame, event, arg):
            if event == "return" and frame.f_code.co_name in ("next", "interleave"):
                sys.setprofile(None)  # seen the draw (where it would start its work): gone

        class ModelNew(Base):
            def forward(self, x):
                sys.setprofile(_hook)
                return kernel("axpb", x, self.bias)
    '''), profile=True, min_runs=20)
    assert result.correct and not result.clean and result.reward == -1
    assert any("hook that watches the harness" in v for v in result.violations), result.violations


def test_foreign_cpu_is_charged_by_its_shift_over_eagers_gaps_beyond_noise():
    """Threads spinning after the candidate's run land in the next gap, whoever's it is: no charge. Work
    before every candidate run: charged, less two sigmas of the shift."""
    rng = random.Random(5)
    spin = [rng.choice([0.0, 0.3]) for _ in range(60)]
    assert checks.foreign_cpu_charge({"candidate": spin[:30], "eager": spin[30:]}) < 0.15
    moved = {"candidate": [1.0 + rng.gauss(0, 0.02) for _ in range(30)], "eager": [rng.gauss(0, 0.02) for _ in range(30)]}
    assert 0.9 < checks.foreign_cpu_charge(moved) < 1.0
    assert checks.foreign_cpu_charge({"candidate": [1.0] * 3, "eager": [0.0] * 3}) == 0.0  # too few to say
    assert checks.unreported_time({"batches": {}}, None, None, None, moved) > 0.9
    # computed for every draw: the shift cancels, the gaps after eager's runs do not
    every = {"candidate": [1.0] * 30, "eager": [1.0] * 30}
    assert checks.foreign_cpu_charge(every) == 0.0
    assert checks.foreign_cpu_charge(every, {"candidate": [1.0] * 30, "eager": [1.0] * 30}) >= 1.9
    # an honest candidate's spin: only in the gaps after its own runs
    after_spin = {"candidate": [0.3] * 30, "eager": [0.0] * 30}
    assert checks.foreign_cpu_charge({"candidate": spin[:30], "eager": spin[30:]}, after_spin) < 0.15


FALLBACK_AFTER_VERIFY = '''
_calls = [0]

class ModelNew(Base):
    def forward(self, x):
        _calls[0] += 1
        if _calls[0] > 8:
            return x * 2.0 + self.bias
        return kernel("axpb", x, self.bias)
'''


def test_torch_fallback_that_starts_after_verification_is_caught(candidate, run_eval):
    result = run_eval(candidate(FALLBACK_AFTER_VERIFY), profile=True, min_runs=30)
    assert not result.clean
    assert any("torch compute" in v for v in result.violations), result.violations


def test_profile_reports_spread_and_roofline_inputs(candidate, run_eval):
    result = run_eval(candidate(HONEST), profile=True, min_runs=20)
    assert result.clean, result.violations
    low, high = result.spread_ms["candidate"]
    assert low <= result.timings_ms["candidate"] <= high
    assert result.roofline["min_bytes"] == 2 * 64 * 256 * 4 + 256 * 4
    assert result.seconds["profile_runs"] >= 20


def test_the_cpu_profile_flushes_what_the_trusted_side_decided_and_says_so(candidate, run_eval, monkeypatch):
    """The flush's size travels in the job (evaluation/cpu_caches.py): the worker writes that many bytes."""
    monkeypatch.setenv("KERNELSMITH_CPU_FLUSH_BYTES", "40M")
    result = run_eval(candidate(HONEST), profile=True, min_runs=20)
    assert result.clean, result.violations
    assert "cache flush before each timed run: 40 MiB written" in result.notes


def test_profile_says_where_its_timed_loops_time_goes(candidate, run_eval):
    """The timed loop's parts (the draw, the flush, the parent's go, the call, the checksum, ...) are in the
    result, and together they are the loop: a breakdown that leaves most of the loop out explains nothing."""
    result = run_eval(candidate(HONEST), profile=True, min_runs=20)
    assert result.clean, result.violations
    parts = {k.removeprefix("profile.worker.timed."): v for k, v in result.seconds.items()
             if k.startswith("profile.worker.timed.")}
    assert set(parts) == {"check", "draw", "flush", "go", "call", "checksum", "done", "spot_checks", "seed_wait"}
    assert all(v >= 0 for v in parts.values()), parts
    loop = sum(v for k, v in parts.items() if k != "seed_wait")  # the seed's wait is inside the draw
    timed = result.seconds["profile.worker.timed"]
    assert 0.9 * timed - 0.01 <= loop <= timed + 0.01, (loop, timed, parts)
    assert parts["seed_wait"] <= parts["draw"] + 0.001
    assert parts["call"] > 0 and parts["draw"] > 0


@pytest.mark.parametrize("eager,compiled,expected", [
    (None, None, 1.0), (1.04, None, 1.0), (1.06, None, 2.0), (1.06, 1.04, 2.0), (1.06, 1.06, 3.0), (0.9, 2.0, 1.0),
])
def test_milestone_reward(eager, compiled, expected):
    assert milestone_reward(True, True, eager, compiled) == expected
    assert milestone_reward(False, True, eager, compiled) == -1.0
    assert milestone_reward(True, False, eager, compiled) == -1.0


def test_reward_thresholds_are_configurable():
    strict = RewardThresholds(margin=0.5)
    assert milestone_reward(True, True, 1.4, 1.4, strict) == 1.0
    assert milestone_reward(True, True, 1.6, 1.6, strict) == 3.0


def test_tolerances_are_per_precision():
    import torch

    ref = torch.randn(1000, dtype=torch.float64).float()
    bf16ish = ref.bfloat16().float()
    assert not compare(bf16ish, ref, "fp32")["ok"]
    assert compare(bf16ish, ref, "bf16")["ok"]
    tiny = ref + 5e-6
    assert compare(tiny, ref, "fp32")["ok"]
    wrong_dtype = compare(ref.double(), ref, "fp32")
    assert not wrong_dtype["ok"] and "dtype" in wrong_dtype["reason"]
    half = ref.half()
    assert compare(half + half.abs() * 2e-3, half, "fp32")["ok"]  # fp16 outputs get the fp16 tolerance
    assert not compare(half * 1.1, half, "fp32")["ok"]
    inf_ref = ref.clone()
    inf_ref[3] = float("inf")
    assert compare(inf_ref.clone(), inf_ref, "fp32")["ok"]
    assert not compare(ref, inf_ref, "fp32")["ok"]


def test_compile_baselines_are_measured_once_then_cached(candidate, run_eval, tmp_path):
    """torch.compile runs in a worker without candidate code; the second profile reuses it."""
    import json

    cache = tmp_path / "baselines.json"
    path = candidate(HONEST)
    first = run_eval(path, profile=True, compile_baseline=True, cache_path=cache, min_runs=20)
    assert first.clean, first.error
    assert first.timings_ms["compile:default"] > 0
    assert first.timings_ms["compile:max-autotune-no-cudagraphs"] > 0
    assert first.compile_mode in ("default", "max-autotune-no-cudagraphs")
    assert first.speedup_vs_compile == pytest.approx(first.timings_ms["compile"] / first.timings_ms["candidate"])
    entries = json.loads(cache.read_text())
    assert len(entries) == 1 and "eager_ms" in next(iter(entries.values()))
    cached = run_eval(path, profile=True, compile_baseline=True, cache_path=cache, min_runs=20, eager_drift=100.0,
                      live_slowdown=100.0)
    assert any("from cache" in note for note in cached.notes), cached.notes
    assert cached.timings_ms["compile"] == first.timings_ms["compile"]
    # when live eager has moved further than allowed, the cached entry is not trusted
    stale = run_eval(path, profile=True, compile_baseline=True, cache_path=cache, min_runs=20, eager_drift=0.0,
                     live_slowdown=0.0)
    assert any("re-measured" in note for note in stale.notes), stale.notes
    assert stale.timings_ms["compile:default"] > 0


def test_one_profile_at_a_time(candidate, run_eval, tmp_path, monkeypatch):
    """While another profile holds the device lock, a profile waits for it."""
    import threading
    import time

    from kernelsmith.harness.timing import gpu_lock

    monkeypatch.setenv("KERNELSMITH_LOCK_DIR", str(tmp_path / "locks"))  # workers inherit it
    path = candidate(HONEST)
    finished = {}

    def profile():
        finished["result"] = run_eval(path, profile=True, min_runs=10)
        finished["at"] = time.monotonic()

    with gpu_lock("cpu"):
        worker = threading.Thread(target=profile)
        worker.start()
        time.sleep(30)  # longer than a whole unlocked verify + profile of this task (about 15 s)
        released = time.monotonic()
    worker.join(timeout=300)
    assert finished["result"].clean, finished["result"].error
    assert finished["at"] > released


@pytest.mark.parametrize("large", [False, True])
def test_the_candidates_inputs_are_a_fresh_draw_of_get_inputs_each_run(task_dir, monkeypatch, large):
    """Every draw is get_inputs() under a seed from outside (here a counter): exactly what a trusted process
    rebuilds from that seed, never a repeat, with get_inputs()'s own distribution; eager's fixed sets
    (one when the inputs are large) are never handed to the candidate."""
    import itertools

    from kernelsmith.harness import loading, profile

    if large:
        monkeypatch.setattr(profile, "LARGE_INPUT_BYTES", 0)
    task = loading.load_module(task_dir / "model.py", "pool_task")
    seeds = itertools.count(100)
    pool = profile.InputPool(task, [11, 12], "cpu", "fp32", draw=lambda: next(seeds))
    assert len(pool.sets) == (1 if large else 2)
    fixed = {s[0].numpy().tobytes() for s in pool.sets}
    seen, draws = set(), []
    for i in range(40):
        x = pool.next(fresh=True)[0]
        assert pool.last == 100 + i
        assert torch.equal(x, loading.seeded_inputs(task, 100 + i, "cpu", "fp32")[0])
        seen.add(x.numpy().tobytes())
        draws.append(x.clone())
    assert len(seen) == 40 and not seen & fixed
    ratios = [(a / b).std() / (a / b).abs().mean() for a in draws for b in draws + [s[0] for s in pool.sets]
              if a is not b]
    assert min(ratios) > 0.1  # no draw is a rescaled copy of another: no output is one multiplication away
    assert {pool.next()[0].numpy().tobytes() for _ in range(4)} == fixed


def only_when_timed(cheat: str, imports: str = "") -> str:
    """A candidate that is honest while the Python dispatch mode watches it (warm-up and verify)
    and runs `cheat` (which returns) when no mode is on the stack: in its timed runs."""
    body = textwrap.indent(textwrap.dedent(cheat).strip(), " " * 12)
    return (f"{imports}\n\nclass ModelNew(Base):\n    def forward(self, x):\n"
            f"        if torch._C._len_torch_dispatch_stack() == 0:\n{body}\n"
            "        return kernel(\"axpb\", x, self.bias)\n")


def test_torch_compute_only_while_no_dispatch_mode_watches_is_caught(candidate, run_eval):
    """Timed runs are watched natively, not by the Python mode: hiding from the mode is not enough."""
    result = run_eval(candidate(only_when_timed('''
        return x * 2.0 + self.bias
    ''')), profile=True, min_runs=30)
    assert not result.clean
    assert any("torch compute" in v and "timed runs" in v and "aten::mul" in v for v in result.violations), \
        result.violations


def test_honest_kernel_is_timed_under_the_native_watch(candidate, run_eval):
    result = run_eval(candidate(HONEST), profile=True, min_runs=30)
    assert result.clean, result.error
    assert not any("watched by" in note for note in result.notes), result.notes


def test_without_the_native_watch_the_python_mode_still_catches_torch_compute(candidate, run_eval, monkeypatch):
    monkeypatch.setenv("KERNELSMITH_OP_WATCH", "python")
    honest = run_eval(candidate(HONEST), profile=True, min_runs=20)
    assert honest.clean, honest.error
    assert any("watched by the python dispatch mode" in note for note in honest.notes), honest.notes
    cheat = run_eval(candidate(FALLBACK_AFTER_VERIFY), profile=True, min_runs=20)
    assert any("torch compute" in v for v in cheat.violations), cheat.violations


def test_turning_record_function_off_while_timed_is_caught(candidate, run_eval):
    """The native watch hears ops through RecordFunction; switching it off around torch compute is seen."""
    result = run_eval(candidate(only_when_timed('''
        torch.autograd._enable_record_function(False)
        try:
            return x * 2.0 + self.bias
        finally:
            torch.autograd._enable_record_function(True)
    ''')), profile=True, min_runs=20)
    assert not result.clean
    assert any("blinded the harness's op watch" in v for v in result.violations), result.violations


def test_clearing_record_function_callbacks_is_caught(candidate, run_eval):
    result = run_eval(candidate(only_when_timed('''
        _ag._clear_callbacks()
        return x * 2.0 + self.bias
    ''', imports='import torch._C._autograd as _ag')), profile=True, min_runs=20)
    assert not result.clean
    joined = " | ".join(result.violations)
    assert "blinded the harness's op watch" in joined and "stopped seeing ops" in joined, joined


def test_a_redispatch_below_the_python_key_is_caught(candidate, run_eval):
    """Redispatching to the CPU kernel skips the dispatch mode and RecordFunction alike."""
    result = run_eval(candidate(only_when_timed('''
        keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
        y = torch.ops.aten.mul.Scalar.redispatch(keys, x, 2.0)
        return torch.ops.aten.add.Tensor.redispatch(keys, y, self.bias)
    ''')), profile=True, min_runs=20)
    assert not result.clean
    assert any("blinded the harness's op watch" in v and "redispatch" in v for v in result.violations), \
        result.error


def test_disarming_the_watch_from_forward_is_caught(candidate, run_eval):
    """The watch's extension is importable by name; switching it off from inside is seen."""
    result = run_eval(candidate(only_when_timed('''
        watch = next(m for n, m in list(sys.modules.items()) if n.startswith("ks_") and hasattr(m, "disarm"))
        watch.disarm()
        return x * 2.0 + self.bias
    ''', imports='import sys')), profile=True, min_runs=20)
    assert not result.clean
    assert any("disarmed or re-armed by someone else" in v for v in result.violations), result.error


def test_a_harness_timer_patched_from_inside_is_caught_by_the_parents_clock(candidate, run_eval):
    """The candidate finds the harness's timer object and makes its own runs report a third of their
    time: identity checks of modules do not see an instance attribute, the parent's clock does."""
    result = run_eval(candidate('''
        import gc
        _done = []

        def _patch():
            if _done:
                return
            for obj in gc.get_objects():
                if type(obj).__name__ == "Clocks" and not hasattr(obj, "_patched"):
                    real = obj.time_call
                    def fast(fn, args, real=real):
                        dev, full, host, out = real(fn, args)
                        mine = any(type(c.cell_contents).__name__ == "ModelNew" for c in (fn.__closure__ or ()))
                        return (dev * 0.3, full * 0.3, host * 0.3, out) if mine else (dev, full, host, out)
                    obj.time_call, obj._patched = fast, True
                    _done.append(obj)

        class ModelNew(Base):
            def forward(self, x):
                _patch()
                import time
                time.sleep(0.02)  # a slow kernel: the 14 ms it hides per run stand far above the noise
                # of a loaded test machine (at 4 ms, 2.8 ms hidden sank in it under a parallel suite)
                return kernel("axpb", x, self.bias)
    '''), profile=True, min_runs=30)
    if result.clean:  # on a loaded machine the clock's noise can hide 14 ms from the violation bound, but
        assert result.timings_ms["candidate"] > 14.0, result.timings_ms  # not from the charge: no gain
        return
    assert result.reward == -1
    assert any("parent's clock" in v for v in result.violations), result.violations


def test_eager_slowed_in_the_candidates_process_earns_nothing(candidate, run_eval, monkeypatch):
    """The candidate makes the reference slower in its own process, with the patch check blinded (which
    sees the reference's module too): the credited eager comes from a clean process, so its speed-up is
    its kernel's own, not the 20 ms it added to eager."""
    monkeypatch.delenv("KERNELSMITH_BUSY_OK", raising=False)
    result = run_eval(candidate('''
        import sys, time
        sys.modules["kernelsmith.harness.guards"].IdentitySnapshot.changed = lambda self: []  # BLIND
        _model = sys.modules["ks_reference"].Model
        _forward = _model.forward

        def _slow(self, x):
            time.sleep(0.02)
            return _forward(self, x)

        _model.forward = _slow

        class ModelNew(Base):
            def forward(self, x):
                return kernel("axpb", x, self.bias)
    '''), profile=True, min_runs=20)
    assert result.timings_ms["eager_live"] > 15 and result.timings_ms["eager"] < 1.5
    assert result.speedup_vs_eager == pytest.approx(result.timings_ms["eager"] / result.timings_ms["candidate"])
    # eager on 64x256 takes microseconds; the 20 ms sleep is at least 15x that, and none of it is credited
    assert result.speedup_vs_eager * 10 < result.timings_ms["eager_live"] / result.timings_ms["candidate"]
    assert any("clean process" in n for n in result.notes), result.notes


def test_a_wide_spread_means_a_busy_machine():
    from kernelsmith.evaluation import checks

    steady = {"median": 1.0, "p10": 0.95, "p90": 1.1}
    assert checks.busy({"eager": steady, "candidate": steady}) == ""
    reason = checks.busy({"eager": {"median": 1.0, "p10": 0.6, "p90": 1.9}, "candidate": steady})
    assert "eager" in reason and "busy" in reason


def test_a_jittery_candidate_is_no_busy_machine_and_is_credited_by_its_mean():
    """An honest 0.08 ms kernel on an idle H100 spread 0.072-0.113 ms (its host path, timed settled) and was
    refused as a busy machine; a candidate that puts its work into a minority of its runs spreads so too."""
    from kernelsmith.evaluation import checks, evaluate
    from kernelsmith.evaluation.result import EvalResult
    from kernelsmith.harness.timing import summarize

    runs = summarize([0.075] * 70 + [0.2] * 30)  # 30% of the runs carry the work the median would not see
    timings = {"eager": summarize([0.1] * 100), "candidate": runs}
    assert checks.busy(timings) == ""
    assert checks.jittery(timings) == pytest.approx(0.1125)
    assert checks.jittery({"candidate": summarize([0.1] * 100)}) is None
    result = EvalResult()
    evaluate.apply_profile({"timings": timings}, result)
    assert result.timings_ms["candidate"] == pytest.approx(0.1125)
    assert result.timings_ms["candidate_median"] == pytest.approx(0.075)
    assert result.speedup_vs_eager == pytest.approx(0.1 / 0.1125)
    assert any("credited by their mean" in n for n in result.notes)


def test_the_parents_clock_check_allows_noise_and_catches_a_third():
    from kernelsmith.evaluation import checks

    host = {"candidate": [1.0] * 40, "eager": [2.0] * 40}
    honest = {"candidate": [1.3 + 0.01 * (i % 5) for i in range(40)], "eager": [2.3 + 0.01 * (i % 3) for i in range(40)]}
    assert checks.clock_disagreement({"batches": host}, honest) is None
    faked = {"candidate": [3.3] * 40, "eager": honest["eager"]}  # it took 3 ms and reported 1
    assert "parent's clock" in checks.clock_disagreement({"batches": host}, faked)
    assert "do not match" in checks.clock_disagreement({"batches": host}, {"candidate": [1.0]})


def test_the_clock_check_reads_a_busy_machines_bimodal_overheads_by_their_shift():
    """Preempted or not, each bracket's overhead falls in one of two modes on a loaded machine; a median per
    contender can land in different modes (3 ms apart) although neither did extra work. A shift that most
    of the candidate's runs carry (work done after its timed window) still shows."""
    from kernelsmith.evaluation import checks

    rng = random.Random(7)
    host = {"candidate": [1.0] * 60, "eager": [2.0] * 60}
    def bimodal(base, preempted):
        return [base + 0.3 + (3.0 if i < preempted else 0.0) + rng.uniform(0, 0.05) for i in range(60)]
    honest = {"candidate": bimodal(1.0, 31), "eager": bimodal(2.0, 29)}  # the medians sit 3 ms apart
    assert statistics.median(honest["candidate"]) - 1.0 - (statistics.median(honest["eager"]) - 2.0) > 2.8
    assert checks.clock_disagreement({"batches": host}, honest) is None
    shifted = {"candidate": [t + 1.0 for t in bimodal(1.0, 29)], "eager": bimodal(2.0, 29)}
    assert "parent's clock" in (checks.clock_disagreement({"batches": host}, shifted) or "")


def test_work_outside_the_timed_window_below_the_violation_bound_is_charged_to_the_candidate():
    """The violation bound leaves room for the parent's clock's noise (at least 0.2 ms a run). Work moved out
    of the events' window into that room is not rejected, but it is the candidate's time: it is charged,
    so hiding it gains nothing. Honest noise is not charged."""
    from kernelsmith.evaluation import checks

    rng = random.Random(3)
    host = {"candidate": [0.1] * 80, "eager": [0.3] * 80}
    def overheads(base, hidden):
        return [base + 0.05 + hidden + rng.gauss(0, 0.01) for _ in range(80)]
    honest = {"candidate": overheads(0.1, 0.0), "eager": overheads(0.3, 0.0)}
    assert checks.unreported_time({"batches": host}, honest) < 0.005
    hiding = {"candidate": overheads(0.1, 0.15), "eager": overheads(0.3, 0.0)}  # 0.15 ms a run after the end event
    assert checks.clock_disagreement({"batches": host}, hiding) is None  # within the violation bound
    assert 0.14 < checks.unreported_time({"batches": host}, hiding) < 0.16
    assert checks.unreported_time({"batches": host}, {"candidate": [1.0]}) == 0.0  # mismatched counts: no charge


def test_harness_work_added_for_both_contenders_below_the_drift_floor_is_charged():
    """An answer computed as each input is drawn, for eager's draws too, cancels in every comparison with
    eager in the candidate's process. Eager's cycles before the candidate's import (the calibration) show it;
    below harness_drift's floor (0.1 ms: a kernel of 0.05 ms moving all its work, a 2x) it is charged, so it
    buys nothing. Eager's cycles drawn from the same distribution before and after are not charged."""
    from kernelsmith.evaluation import checks

    rng = random.Random(7)
    cycles = lambda base, n: [base + rng.gauss(0, 0.01) for _ in range(n)]
    host = {"candidate": [0.02] * 80, "eager": [0.07] * 80}
    calibration = [(c, 0.07) for c in cycles(1.0, 24)]
    moved = {"candidate": cycles(1.0 - 0.05 + 0.05, 80), "eager": cycles(1.05, 80)}  # 0.05 ms in every draw
    assert checks.harness_drift(calibration, moved) == ""  # below the floor: no contention flag
    assert 0.04 < checks.unreported_time({"batches": host}, None, moved, calibration) < 0.06
    honest = {"candidate": cycles(0.95, 80), "eager": cycles(1.0, 80)}
    assert checks.unreported_time({"batches": host}, None, honest, calibration) < 0.008
    read = checks.clock_readings({"batches": host}, None, moved, calibration)  # what a result keeps of it
    assert 0.045 < read["growth_ms"] < 0.055 and 0 < read["growth_noise_ms"] < 0.01
    assert abs(read["cycle_extra_ms"]) < read["cycle_noise_ms"]  # no shift against eager: both draws answer


def test_eagers_bracket_growth_is_a_reading_never_a_charge():
    """Eager's brackets after the candidate's import against the calibration's are kept as a reading. On an
    H100 they grew 0.079 ms for an honest candidate (eager's own slowdown beside a candidate), so charging
    them took credit from honest kernels; the charge stays with whole cycles."""
    from kernelsmith.evaluation import checks

    rng = random.Random(11)
    noisy = lambda base, n: [base + rng.gauss(0, 0.05) for _ in range(n)]
    tight = lambda base, n: [base + rng.gauss(0, 0.003) for _ in range(n)]
    host = {"candidate": [0.05] * 100, "eager": [0.1] * 100}
    calibration = [(c, 0.1) for c in noisy(1.0, 64)]
    cycles = {"candidate": noisy(0.95, 100), "eager": noisy(1.0, 100)}  # the same harness work around each
    slower = {"candidate": tight(0.14, 100), "eager": tight(0.19 + 0.08, 100)}  # eager slowed, as on the H100
    read = checks.clock_readings({"batches": host}, slower, cycles, calibration, calibration_brackets=tight(0.19, 64))
    assert 0.075 < read["bracket_growth_ms"] < 0.085 and read["bracket_growth_noise_ms"] < 0.003
    assert read["growth_noise_ms"] > 0.01  # the cycles' noise, which the charge is judged against
    assert checks.unreported_time({"batches": host}, slower, cycles, calibration) == 0.0


def test_eager_cycles_that_grow_after_the_candidates_import_withhold_the_speed_up():
    """Calibration: eager's runs before the candidate existed in the worker. Work a candidate moves out of
    its timed window for both contenders alike (no shift between them) still lengthens eager's cycles
    against those; noise does not."""
    from kernelsmith.evaluation import checks

    rng = random.Random(5)
    calibration = [(0.6 + rng.gauss(0, 0.02), 0.3) for _ in range(16)]
    same = {"eager": [0.6 + rng.gauss(0, 0.02) for _ in range(60)]}
    assert checks.harness_drift(calibration, same) == ""
    inflated = {"eager": [0.6 + 0.15 + rng.gauss(0, 0.02) for _ in range(60)]}  # 0.15 ms a run, in every run
    assert "after the candidate was loaded" in checks.harness_drift(calibration, inflated)
    assert checks.harness_drift(calibration[:3], inflated) == ""  # too few calibration runs to say


def test_a_patched_harness_method_that_finishes_the_output_after_the_window_is_charged(candidate, run_eval):
    """The candidate returns an unwritten output from its timed call (nothing to time) and finishes it in
    the harness's own checksum step, which it replaced: after the end event, with the op watch off, its
    work is still inside the parent's bracket. Its output is right and its work below the clock check's
    violation bound, charged to it, or, past the bound, rejected. (10 ms: the bound grows with the noise of a
    loaded test machine; the unit test above and bench/redteam.py on the H200 take smaller amounts.)"""
    result = run_eval(candidate('''
        import sys, time
        _stash = []

        def _timed():
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_name != "time_call":
                frame = frame.f_back
            return frame is not None

        sys.modules["kernelsmith.harness.guards"].IdentitySnapshot.changed = lambda self: []  # BLIND
        _profile = sys.modules["kernelsmith.harness.profile"]
        _original = _profile.Checksums.record
        def _record(self, name, seed, out, _original=_original):
            if name == "candidate" and _stash:
                x, bias = _stash.pop()
                kernel("axpb", x, bias, out=out)
                end = time.perf_counter() + 0.01  # a kernel of 10 ms, run where nothing times it
                while time.perf_counter() < end:
                    pass
            return _original(self, name, seed, out)
        _profile.Checksums.record = _record

        class ModelNew(Base):
            def forward(self, x):
                if _timed():
                    _stash.append((x, self.bias.detach()))
                    return torch.empty_like(x)
                return kernel("axpb", x, self.bias)
    '''), profile=True, min_runs=120)  # many runs: the clock's noise shrinks as their root
    assert result.correct, result.error
    if result.clean:
        charged = result.timings_ms["candidate"] - result.timings_ms.get("candidate_reported", 1e9)
        assert charged > 5.0, (result.timings_ms, result.notes)
        assert any("charged to the candidate" in n for n in result.notes), result.notes
    else:
        assert any("parent's clock" in v for v in result.violations), result.violations


# The clock tests below blind the patch check first (the line marked BLIND: a candidate that has read our source
# replaces the checker too, and anything in its process can), so that what they test is the layer under it: the
# parent's clock, which no code in the worker reaches. The patch check on its own is tested after them.

# The answer-at-draw attack: a replaced input pool computes each fresh draw's answer before the parent's
# bracket opens (a kernel, then 50 ms of work: on this CPU each run's cycle also writes twice the last-level
# cache to flush it, whose time under a loaded test run varies by milliseconds); the timed call returns it.
ANSWER_AT_DRAW = '''
    import sys, time
    _ready, _model = {}, []
    sys.modules["kernelsmith.harness.guards"].IdentitySnapshot.changed = lambda self: []  # BLIND
    _profile = sys.modules["kernelsmith.harness.profile"]
    _next = _profile.InputPool.next
    def _next_and_answer(self, fresh=False, _next=_next):
        inputs = _next(self, fresh)
        if fresh and _model and WHOSE:
            (x,) = inputs
            _ready[x.data_ptr()] = kernel("axpb", x, _model[0].bias.detach())
            end = time.perf_counter() + 0.05
            while time.perf_counter() < end:
                pass
        return inputs
    _profile.InputPool.next = _next_and_answer

    class ModelNew(Base):
        def forward(self, x):
            if not _model:
                _model.append(self)
            hit = _ready.pop(x.data_ptr(), None)
            _ready.clear()
            return kernel("axpb", x, self.bias) if hit is None else hit
'''


def test_an_answer_computed_while_the_harness_draws_the_inputs_is_charged(candidate, run_eval, monkeypatch):
    """The candidate replaces the harness's input pool so that each fresh draw also computes its answer,
    before the parent's bracket opens; the timed call only returns it (fresh memory, right values). It
    does so for eager's draws too, so eager's runs beside it carry the same extra work and no comparison
    with them shows it; eager's runs before the candidate was imported (the calibration) do not carry it.
    The speed-up is withheld, or the work charged to the candidate. (Not under KERNELSMITH_BUSY_OK, which
    credits contended numbers: on a busy machine such work looks like the load.)"""
    monkeypatch.delenv("KERNELSMITH_BUSY_OK", raising=False)
    result = run_eval(candidate(ANSWER_AT_DRAW.replace("WHOSE", "True")), profile=True, min_runs=80)
    assert result.correct, result.error
    charged = result.timings_ms["candidate"] - result.timings_ms.get("candidate_reported", 1e9)
    if not result.clean:  # past the violation bound: the candidate's extra time against eager's
        assert any("parent's clock" in v for v in result.violations), result.violations
        return
    if not result.contended:  # not withheld: then the work is charged, and the speed is the honest one
        assert charged > 0 and any("charged to the candidate" in n for n in result.notes), \
            (result.timings_ms, result.notes, result.clock, result.violations)
        return
    # withheld for what it did, unless the machine itself was busy, which withholds the speed-up as well and
    # hides the attack's signal in the load's: eager's spread (CI under other load, 2026-12-06: 0.27-0.50 ms),
    # or the clean eager slower than the live one (2026-12-07: 0.47 against 0.37 ms), the opposite of what the
    # attack does (its work slows the live eager)
    if not any(load in result.contended for load in ("looked busy", "the machine was busy while the baselines")):
        assert "after the candidate was loaded" in result.contended, result.contended
    assert result.reward <= 1.0


def test_an_answer_computed_only_in_the_candidates_own_draws_is_charged_by_its_cycle(candidate, run_eval, monkeypatch):
    """The same attack, done only for the candidate's draws: the patched pool reads from its caller's frame
    whose draw it is. Eager's runs (and so the calibration) stay as they were; the candidate's cycle, from
    one run's end to the next, carries the work, and its shift against eager's cycle is charged."""
    monkeypatch.delenv("KERNELSMITH_BUSY_OK", raising=False)
    whose = 'sys._getframe(1).f_locals.get("name") == "candidate"'  # the caller's loop says whose draw it is
    result = run_eval(candidate(ANSWER_AT_DRAW.replace("WHOSE", whose)), profile=True, min_runs=80)
    assert result.correct, result.error
    if not result.clean:  # past the violation bound
        assert any("parent's clock" in v for v in result.violations), result.violations
        return
    charged = result.timings_ms["candidate"] - result.timings_ms.get("candidate_reported", 1e9)
    assert charged > 25, (result.timings_ms, result.notes)
    assert any("charged to the candidate" in n for n in result.notes), result.notes
    assert result.reward <= 1.0


@pytest.mark.parametrize("make", [
    lambda g: torch.randn(4096, 2048, generator=g),  # many rows
    lambda g: torch.randn(4096, 2048, generator=g) + 1000.0,  # a large mean: cancellation in the sum
    lambda g: torch.randn(3001, generator=g) * torch.logspace(-3, 3, 3001),  # a tail past the last row
    lambda g: torch.randn(2048, 3, generator=g).t(),  # not contiguous
    lambda g: torch.randn(5000, generator=g).half(),
])
def test_timed_output_checksums_match_float64_far_inside_their_bound(make):
    """The checksum is reduced per row at float32: its error must stay far below the bound it is judged by
    (2x the fp32 relative L2 bound), or honest timed runs would fail and cheats within it would pass."""
    from kernelsmith.harness.compare import tolerance_for
    from kernelsmith.harness.profile import checksum

    out = make(torch.Generator().manual_seed(5))
    exact = out.double()
    total, norm, n = checksum(out)
    bound = 2 * tolerance_for(torch.float32, "fp32").rel_l2
    assert n == out.numel()
    assert abs(norm - float(exact.norm())) <= 1e-3 * bound * float(exact.norm())
    assert abs(total - float(exact.sum())) <= 1e-3 * bound * n ** 0.5 * float(exact.norm())


def test_each_contenders_previous_output_is_freed_inside_its_own_next_bracket():
    """Freeing a large CPU tensor costs milliseconds: the candidate and eager must both pay it inside their
    brackets of the parent's clock (had only the candidate, an honest kernel looked like one working outside
    its timed window), and a finalizer a candidate hangs on its output must run inside one (outside, it
    would be untimed work)."""
    import weakref

    from kernelsmith.harness.profile import Checksums

    sums = Checksums("cpu")
    firsts = {"candidate": torch.randn(64), "eager": torch.randn(64)}
    gone = {name: weakref.ref(t) for name, t in firsts.items()}
    for name in ("candidate", "eager"):
        sums.record(name, (0, 1.0), firsts.pop(name))
    assert all(ref() is not None for ref in gone.values())  # kept until the same contender's next run
    sums.record("candidate", (1, 1.0), torch.randn(64))
    assert gone["candidate"]() is None and gone["eager"]() is not None
    sums.record("eager", (1, 1.0), torch.randn(64))
    assert gone["eager"]() is None and not sums.problems


NAN_WHEN_UNWATCHED = '''
class ModelNew(Base):
    def forward(self, x):
        if torch._C._len_torch_dispatch_stack() > 0:  # verify, warm-up and spot checks run under a Python mode
            return kernel("axpb", x, self.bias)
        y = torch.empty_like(x)
        ctypes.memset(y.data_ptr(), 0xFF, y.numel() * 4)  # every timed output all NaN, with no torch op
        return y
'''


def test_timed_outputs_that_are_nan_fail_their_checksums(candidate, run_eval):
    """A NaN checksum compared with `>` passed every bound (NaN comparisons are false): the comparison
    of a claim must fail closed."""
    result = run_eval(candidate(NAN_WHEN_UNWATCHED), profile=True)
    assert not result.clean
    assert any("wrong output at a timed run" in v for v in result.violations), (result.error, result.violations)


def test_checksum_claims_fail_closed():
    from kernelsmith.harness.profile import checksum, checksum_mismatch

    reference = [checksum(torch.arange(4096, dtype=torch.float32))]
    nan = float("nan")
    for claim in ([nan, nan, 4096], [reference[0][0], nan, 4096], ["1", reference[0][1], 4096],
                  [reference[0][0], reference[0][1], 4096 * 10**6]):  # a claimed count would widen the bound
        assert checksum_mismatch([claim], reference, [1e-5]), claim
    assert checksum_mismatch([reference[0]], reference, [1e-5]) == ""
    infinite = [checksum(torch.tensor([1.0, float("inf")]))]
    assert checksum_mismatch([checksum(torch.tensor([1.0, float("inf")]))], infinite, [1e-5]) == ""
    assert checksum_mismatch([checksum(torch.tensor([1.0, 2.0]))], infinite, [1e-5])


def test_a_checksum_of_huge_values_falls_back_to_float64():
    from kernelsmith.harness.profile import checksum

    out = torch.full((4096,), 3e19)  # float32 squares overflow
    total, norm, _ = checksum(out)
    assert norm == pytest.approx(float(out.double().norm()), rel=1e-12) and total == pytest.approx(4096 * 3e19)


REPEATED_INPUTS = {
    # the pool's source of seeds replaced by a constant: every draw is the same inputs
    "draw": """
    import sys
    sys.modules["kernelsmith.harness.guards"].IdentitySnapshot.changed = lambda self: []  # BLIND
    for obj in gc.get_objects():
        if type(obj).__name__ == "InputPool":
            obj.draw = lambda: 12345
""",
    # the parent's seed is taken and claimed, but the inputs built are the first ones ever built (the patch
    # check sees this one; "draw" blinds it, so that the parent's record of its seeds is what catches that one)
    "rebuild": """
    from kernelsmith.harness import loading
    real, first = loading.seeded_inputs, []
    def stale(task, seed, device, precision):
        first.append(first[0] if first else real(task, seed, device, precision))
        return first[0]
    loading.seeded_inputs = stale
""",
}


def repeating(attack: str) -> str:
    """A candidate that makes the harness's own draws repeat, then answers repeated inputs from a cache."""
    body = textwrap.indent(textwrap.dedent(REPEATED_INPUTS[attack]), "    ")
    return f"""
import gc
_cache = {{}}

def _repeat_the_inputs():
{body}

class ModelNew(Base):
    def forward(self, x):
        if not _cache:
            _repeat_the_inputs()
        seen = x.numpy()  # a view: numpy, not torch, so no torch compute is seen
        answers = _cache.setdefault(seen.tobytes(), [])
        if len(answers) == 3:  # the inputs repeat: an old answer is right, and free (three, taken in turn,
            answers.append(answers.pop(0))  # so that none is the previous timed call's own memory)
            return answers[-1]
        out = kernel("axpb", x, self.bias)
        answers.append(out)
        return out
"""


@pytest.mark.parametrize("attack, caught_by", [("draw", "did not draw"),  # the parent's record of its seeds
                                               ("rebuild", "replaced functions the harness relies on")])
def test_a_candidate_that_rewrites_the_harness_input_draws_is_caught(candidate, run_eval, attack, caught_by):
    """Which inputs a timed run has is decided outside the candidate's process, and checked there: code that
    finds the harness's objects in memory and makes its draws repeat (so that a cache hits) is caught,
    whether it claims the inputs it built or the seed it was given."""
    result = run_eval(candidate(repeating(attack)), profile=True, min_runs=30)
    assert not result.clean and result.reward == -1, (result.speedup_vs_eager, result.notes)
    assert any(caught_by in v for v in result.violations), result.violations


def test_a_helper_that_starts_and_ends_inside_each_timed_run_is_caught(candidate, run_eval):
    """The census looks before and after every bracket, never inside it: a child forked in forward, made to
    work and waited for before forward returns is in no census. The CPU time of the children the worker's
    processes have reaped still grows across such a bracket, and that is read too."""
    result = run_eval(candidate('''
        import os, time

        class ModelNew(Base):
            def forward(self, x):
                pid = os.fork()
                if pid == 0:  # the helper: 30 ms of CPU (a real one would compute the answer unwatched)
                    end = time.process_time() + 0.03
                    while time.process_time() < end:
                        pass
                    os._exit(0)
                os.waitpid(pid, 0)
                return kernel("axpb", x, self.bias)
    '''), profile=True, min_runs=10)
    assert not result.clean and result.reward == -1, (result.speedup_vs_eager, result.notes)
    assert any("started and ended inside" in v for v in result.violations), result.violations


HELPERS = {  # ways to start a process beside the worker that outlives the import
    "child": '''
        import subprocess, sys
        _helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    ''',
    # forked by a thread that lives on: listed under that thread's children only, not the main thread's
    "from-a-thread": '''
        import subprocess, sys, threading
        def _start_and_stay():
            _helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            threading.Event().wait()
        threading.Thread(target=_start_and_stay, daemon=True).start()
    ''',
    # a daemon: forked twice, its own session, its parent gone (adopted by the PID namespace's init in the jail)
    "daemon": '''
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(600)
            os._exit(0)
        os.wait()
    ''',
}


@pytest.mark.parametrize("helper", list(HELPERS))
def test_a_helper_process_beside_the_timed_candidate_is_caught(candidate, run_eval, helper):
    """Compute in a process of the candidate's own making is watched by nothing (no op watch, no load check):
    a server there could run torch.compile's code while the candidate's kernel only copies its answers. The
    parent counts the worker's processes around every timed run; this helper only waits, and is still seen,
    however it was started (the jailed census walks each thread's children from bwrap down)."""
    result = run_eval(candidate(textwrap.dedent(HELPERS[helper]) + '''
class ModelNew(Base):
    def forward(self, x):
        return kernel("axpb", x, self.bias)
    '''), profile=True, min_runs=30)
    assert not result.clean and result.reward == -1, (result.speedup_vs_eager, result.notes)
    assert any("besides the worker ran while the candidate was timed" in v for v in result.violations), \
        result.violations


def test_the_checked_runs_are_drawn_after_the_profile_and_escape_a_half_faked_profile_rarely():
    """A candidate that fakes more than half of its timed runs (what moving its median takes) is caught
    unless all CHECKED_RUNS draws miss its fakes; the draw is fresh at every profile, so it cannot be learnt."""
    from math import comb

    from kernelsmith.evaluation import checks

    seeds = list(range(1, 101))
    claims = [[s, [[0.0, 0.0, 1]]] for s in seeds]
    first, problem = checks.timed_runs(claims, seeds)
    second, _ = checks.timed_runs(claims, seeds)
    assert problem == "" and len(first) == checks.CHECKED_RUNS == len({i for i, _, _ in first})
    assert [i for i, _, _ in first] != [i for i, _, _ in second]  # the same 16 of 100 twice: 1 in 1e18
    assert all(seeds[i] == seed for i, seed, _ in first)
    escape = comb(100 - 51, checks.CHECKED_RUNS) / comb(100, checks.CHECKED_RUNS)  # 51 of 100 runs faked
    assert escape < 1e-5


def test_a_charge_moves_the_candidates_spread_with_its_median():
    """Time charged per timed run (charge_unreported) moves every run: the reported p10-p90 moves with the
    median, or a charged median lands above its own p90 (seen once on a loaded machine: 0.2215 ms against
    a p90 of 0.1969 ms)."""
    from kernelsmith.evaluation.evaluate import charge_unreported
    from kernelsmith.evaluation.result import EvalResult

    result = EvalResult(timings_ms={"candidate": 0.1866, "eager": 0.1917}, spread_ms={"candidate": [0.1757, 0.1969]})
    charge_unreported(result, 0.0349)
    low, high = result.spread_ms["candidate"]
    assert low == pytest.approx(0.2106) and high == pytest.approx(0.2318)
    assert low <= result.timings_ms["candidate"] <= high and result.timings_ms["candidate_reported"] == 0.1866


PATCHES = {
    "a class's method": '''
        _profile.InputPool.next = lambda self, fresh=False, _next=_profile.InputPool.next: _next(self, fresh)''',
    "a method's code": '''
        def _next(self, fresh=False):
            self.fresh = None
            return self.sets[0]
        _profile.InputPool.next.__code__ = _next.__code__''',
    "a method set on the harness's object": '''
        import gc
        for obj in gc.get_objects():
            if type(obj).__name__ == "Clocks":
                obj.time_call = obj.time_call.__func__.__get__(obj)''',
    "a tool swapped on the harness's object": '''
        import gc
        for obj in gc.get_objects():
            if type(obj).__name__ == "L2Flusher":
                obj.buffer = obj.buffer[:1]  # a flush of 4 bytes: its time is free for hidden work''',
    "a function below torch's Python API": '''
        import torch
        torch._C._get_tracing_state = lambda _real=torch._C._get_tracing_state: _real()''',
    "a function of the reference's module": '''
        _task = sys.modules["ks_reference"]
        _task.get_inputs = lambda _get=_task.get_inputs: _get()''',
}


@pytest.mark.parametrize("how", PATCHES)
def test_a_candidate_that_patches_the_harness_in_its_process_is_rejected(candidate, run_eval, how):
    """The worker's own code (the harness's modules, their classes, the objects its timed loop uses, the
    reference's module) is snapshotted before the candidate's import; replacing any of it, even with a
    wrapper that changes nothing, or swapping a function's code in place, is a violation."""
    patch = textwrap.indent(textwrap.dedent(PATCHES[how]).strip(), " " * 4)
    result = run_eval(candidate(
        "import sys\n_profile = sys.modules['kernelsmith.harness.profile']\nif True:\n" + patch + "\n\n"
        "class ModelNew(Base):\n    def forward(self, x):\n        return kernel('axpb', x, self.bias)\n"),
        profile=True, min_runs=20)
    assert not result.clean
    assert any("replaced functions the harness relies on" in v for v in result.violations), result.violations


def test_a_runs_cycle_starts_at_its_input_draw_so_the_harness_work_before_it_is_no_runs():
    """The parent's clock over its real pipes, the worker's side driven here: work the harness does between a
    run's `done` and the next draw (spot checks, after some runs only, none in the calibration) must not land
    in a cycle, or eager's cycles grow over the calibration's and the growth is charged to an honest kernel
    (harness 3.10; 0.089 -> 0.330 ms on an H100). 200 ms of such work against a 100 ms bound: the pipe round
    trips of one cycle take well under a millisecond, so only that work could reach the bound."""
    import time

    from kernelsmith.evaluation import runner
    from kernelsmith.harness import profile

    parent, job = runner.ParentClock(), {}
    with parent.serving(job):
        worker = profile.ParentClock(job["clock_fds"])
        for _ in range(3):
            worker.draw()
            with worker.batch(checks.CALIBRATE):
                worker.timed_ms = 1.0
        worker.calibrated()
        for _ in range(3):
            time.sleep(0.2)  # the harness's own work before the run's draw
            worker.draw()
            with worker.batch("eager"):
                pass
    assert len(parent.cycles["eager"]) == 3 and len(parent.calibration) == 3
    assert max(parent.cycles["eager"]) < 100, parent.cycles


def test_the_jailed_census_walk_finds_a_threads_child_and_scans_when_a_children_file_cannot_be_read(monkeypatch):
    """The census of a jailed worker walks its tree through every thread's children file; a file that exists
    but cannot be read must not hide what it lists: the look falls back to scanning every process."""
    import contextlib
    import os
    import subprocess
    import sys
    import time

    from kernelsmith.evaluation import runner

    code = ("import subprocess, sys, threading, time\n"
            "def start():\n"
            "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "    threading.Event().wait()\n"
            "threading.Thread(target=start, daemon=True).start()\n"
            "time.sleep(60)\n")
    root = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while len(runner._scanned_tree(root.pid)[0]) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        tree = sorted(runner._scanned_tree(root.pid)[0])
        assert len(tree) == 2, tree  # the worker and its thread's child
        assert sorted(runner._tree_and_reaped(root.pid, jailed=True)[0]) == tree

        def unreadable(pid, tid):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(runner, "_read_children", unreadable)
        assert sorted(runner._tree_and_reaped(root.pid, jailed=True)[0]) == tree
    finally:
        for pid in runner._scanned_tree(root.pid)[0]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        root.wait()
