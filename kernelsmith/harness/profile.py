"""Profiling in the worker: the candidate against live eager, interleaved; baselines on their own.

run_profile times the candidate and the eager reference in alternating random
order, each run on fresh input contents, after an L2 flush and a persisting-L2
reset, with CUDA events checked against the host clock. It re-checks the
candidate's outputs at random timed runs. Every candidate call is watched for torch
compute: the warm-up by the Python dispatch recorder, the timed runs by the native op
watch (op_watch.py), armed outside the timed interval, so watching costs no timed time.

run_baselines times eager and torch.compile (default, max-autotune-no-cudagraphs)
in a worker that never imports candidate code; the parent caches the result per
task, GPU, torch version and precision.
"""

from __future__ import annotations

import math
import random
from contextlib import contextmanager, nullcontext

import torch

from kernelsmith.evaluation.checks import CALIBRATE, QUEUED
from kernelsmith.harness import compare as cmp
from kernelsmith.harness import guards, lint, loading, op_watch, roofline
from kernelsmith.harness.timing import Clocks, L2Flusher, Phases, gpu_lock, summarize

POOL_SETS = 2  # fixed input sets the trusted contenders (eager, torch.compile) cycle through
LARGE_INPUT_BYTES = 1 << 30  # above this, one fixed set: GPU memory holds it and the candidate's draw
WARMUP_CALLS = 3
SPOT_CHECKS = 4
MAX_WALL_S = 300.0


class InputPool:
    """The inputs of every run.

    Each of the candidate's runs (timed, spot checked) gets a fresh draw of get_inputs(), under a seed
    that `draw` fetches just before it: from the parent (ParentClock.draw), which keeps the seeds it
    handed out and has the trusted side rebuild the inputs from them. So the inputs of a timed run are
    independent of every earlier one, with get_inputs()'s exact distribution and structure (symmetric,
    triangular, normalised inputs stay so), and nothing in this process knows them in advance: no cache,
    no output derived from an earlier one (a rescaled input gave a rescaled product of a GEMM for one
    multiplication), no answer computed ahead, and no object the candidate can find in memory decides
    them. Eager's timed runs draw fresh too, the same work in both contenders' brackets of the parent's
    clock (evaluation/checks.py compares them); the warm-up cycles through fixed sets.
    """

    MUTABLE = frozenset({"runs", "fresh", "last"})  # (guards.IdentitySnapshot.watch: all else stays as built)

    def __init__(self, task, seeds: list[int], device: str, precision: str, draw=None):
        self.task, self.device, self.precision = task, device, precision
        first = loading.seeded_inputs(task, seeds[0], device, precision)
        large = loading.nbytes(first) > LARGE_INPUT_BYTES
        self.sets = [first] + [loading.seeded_inputs(task, s, device, precision) for s in seeds[1:1 if large else None]]
        self.draw = draw
        self.runs = 0
        self.fresh: list | None = None
        self.last: int | None = None  # the seed of the latest fresh draw

    def next(self, fresh: bool = False) -> list:
        """A fresh draw (the timed and spot-checked runs), or the next fixed set."""
        if fresh:
            self.fresh = None  # the previous draw's memory is free for this one
            self.last = self.draw()
            self.fresh = loading.seeded_inputs(self.task, self.last, self.device, self.precision)
            return self.fresh
        k = self.runs % len(self.sets)
        self.runs += 1
        return self.sets[k]

    def nbytes(self) -> int:
        return loading.nbytes(self.sets[0])


def local_draws(seed: int):
    """Seeds drawn in this process: for a profile run without the parent's clock (its own tests)."""
    rng = random.Random(seed ^ 0x5EED)
    return lambda: rng.randrange(1, 2**62)


class LoopTimes:
    """Wall seconds of each part of a timed loop (interleave), summed over its runs, for the breakdown of a
    profile's time (its `phases`): the check, the draw (with the wait for the parent's seed), the flush, the
    wait for the parent's go, the timed call, the checksum, the end of the bracket, the spot checks. Reported
    by the worker, so informational only, like timing.Phases; summed unrounded (a run's parts are
    milliseconds). Watched like the harness's other objects (guards.IdentitySnapshot): its marks run between
    the draw and the bracket."""

    MUTABLE = frozenset({"_last"})

    def __init__(self, clock):
        self.clock, self.seconds, self._last = clock, {}, clock()

    def mark(self, part: str | None) -> None:
        """The time since the previous mark counts to `part` (None: starts the count)."""
        now = self.clock()
        if part is not None:
            self.seconds[part] = self.seconds.get(part, 0.0) + now - self._last
        self._last = now

    def phases(self, prefix: str) -> dict[str, float]:
        return {prefix + part: round(s, 3) for part, s in self.seconds.items()}


def _seeds(job: dict) -> list[int]:
    """The fixed sets' seeds (trusted contenders only: what they are does not matter to a check)."""
    rng = random.Random(job["seed"])
    return [rng.randrange(1, 2**62) for _ in range(int(job.get("pool_sets", POOL_SETS)))]


def _budget(job: dict) -> tuple[int, float]:
    return int(job.get("min_runs", 100)), float(job.get("min_seconds", 1.0))


def interleave(contenders: dict, pool: InputPool, clocks: Clocks, flusher: L2Flusher,
               min_runs: int, min_seconds: float, between=None, watches: dict | None = None,
               clock=None, record=None, fresh: frozenset = frozenset(), queued: frozenset = frozenset(),
               before_draw=None, times: "LoopTimes | None" = None) -> dict:
    """Time every contender round-robin in random order until the budget is met.

    Each timed run is bracketed from outside this process by the parent's clock (ParentClock): the
    bracket holds the timed call and the checksum of its output (record), not the input rescale
    and the cache flush before it. watches[name], a context manager, is entered before that
    contender's timed call and left after it: outside the timed interval, so watching costs the
    contender no time. between(name, run) runs after each run, outside the bracket (spot checks). The
    contenders named in `fresh` get a fresh input draw for every run (InputPool); those named in `queued`
    are timed without the device sync before the start event (trusted contenders only: Clocks).
    before_draw() runs before every run's input draw (the observer check). times (LoopTimes) sums the wall
    time of each part of the loop over its runs."""
    samples = {name: {"device": [], "full": [], "host": []} for name in contenders}
    order = list(contenders)
    rng = random.Random(len(order))
    start = clocks.monotonic()
    mark = times.mark if times else (lambda _part: None)
    mark(None)
    while True:
        rng.shuffle(order)
        for name in order:
            if before_draw:
                before_draw()
            mark("check")
            inputs = pool.next(fresh=name in fresh)
            mark("draw")
            flusher.flush()
            mark("flush")
            with (clock.batch(name) if clock else nullcontext()):
                mark("go")  # `ready`, then the parent's census, then its go
                with (watches or {}).get(name) or nullcontext():
                    dev_ms, full_ms, host_ms, out = (clocks.time_call(contenders[name], inputs, settle=False)
                                                     if name in queued else clocks.time_call(contenders[name], inputs))
                mark("call")
                if clock and name == CALIBRATE:
                    clock.timed_ms = dev_ms
                if record:
                    record(name, pool.last if name in fresh else None, out)
                mark("checksum")
            for key, value in (("device", dev_ms), ("full", full_ms), ("host", host_ms)):
                samples[name][key].append(value)
            del out
            mark("done")
            if between:
                between(name, len(samples[name]["device"]) - 1)
            mark("spot_checks")
        runs = min(len(s["device"]) for s in samples.values())
        timed_s = min(sum(s["device"]) for s in samples.values()) / 1e3
        if runs >= min_runs or (timed_s >= min_seconds and runs >= 10) or clocks.monotonic() - start > MAX_WALL_S:
            return samples


def _no_grad(fn):
    def call(*args):
        with torch.no_grad():
            return fn(*args)
    return call


def _warm(fn, pool: InputPool, clocks: Clocks, fresh: bool = False) -> float:
    """Warm-up calls (compilation happens here); returns their wall seconds."""
    t0 = clocks.perf_counter()
    for _ in range(WARMUP_CALLS):
        fn(*pool.next(fresh))
    clocks.synchronize()
    return clocks.perf_counter() - t0


def side_stream_violation(samples: dict) -> str | None:
    """Device-wide time far above stream time, beyond what eager shows, means hidden work."""
    def gap(s):
        return summarize([f - d for f, d in zip(s["full"], s["device"])])["median"]

    extra = gap(samples["candidate"]) - gap(samples["eager"])
    stream = summarize(samples["candidate"]["device"])["median"]
    if extra > max(0.02, 0.10 * stream):
        return (f"work outside the timed stream: the device stayed busy {extra * 1e3:.0f} us after the "
                f"candidate's stream finished (side streams or host threads)")
    return None


def clock_disagreement(samples: dict) -> str | None:
    """Event times far below the host time of the same interval mean a patched clock."""
    bad = sum(1 for d, h in zip(samples["device"], samples["host"]) if d < 0.7 * h - 0.1)
    if bad > 0.1 * len(samples["device"]):
        return f"device timer disagrees with the host clock on {bad} of {len(samples['device'])} runs"
    return None


def run_profile(job: dict) -> dict:
    device, precision = job["device"], job["precision"]
    guards.set_precision_flags(precision)
    _same_threads(job)
    clocks, phases = Clocks(device), Phases()
    parent_clock = ParentClock(job["clock_fds"]) if job.get("clock_fds") else None
    tripwires = op_watch.Tripwires()  # before the candidate can take references to the originals
    native, why_not = op_watch.open_watch()  # and before it could plant a module of the same name
    process_guard = guards.ProcessGuard()
    phases.mark("load.watch")
    # before any timed run: on the CPU it runs `uname -p`, a child the parent's census of the worker would
    # see if it ran while the last bracket's census was taken
    platform_info = _platform(device)
    task = loading.load_module(job["reference"], "ks_reference")
    reference = loading.seeded_reference(task, job["seed"], device, precision)
    draw = parent_clock.draw if parent_clock else local_draws(job["seed"])
    pool = InputPool(task, _seeds(job), device, precision, draw)
    eager = _no_grad(reference)
    sums = Checksums(device)
    phases.mark("load.reference")
    with gpu_lock(device):
        flusher = L2Flusher(device, job.get("flush_bytes"), job.get("flush_cap_bytes"))
        warm_s = {"eager": _warm(eager, pool, clocks)}
        calibrate(eager, pool, clocks, flusher, parent_clock, native, sums, _budget(job)[0],
                  process_guard.observers.check)
        phases.mark("calibrate")
        loop = LoopTimes(clocks.perf_counter)  # made and watched before the candidate exists: its marks run
        process_guard.watch(clocks=clocks, pool=pool, flusher=flusher, sums=sums, parent_clock=parent_clock,
                            eager=eager, tripwires=tripwires, native=native, task=task, loop=loop)
        candidate_module = loading.load_module(job["candidate"], "ks_candidate")  # untrusted from here on
        torch.manual_seed(job["seed"] + 1)
        model = candidate_module.ModelNew(*loading.init_inputs(task)).to(device)
        loading.load_weights(model, reference)
        recorder = guards.OpRecorder()

        def watched(*args):  # warm-up, spot checks, and the timed runs when there is no native watch
            with torch.no_grad(), recorder:
                return model(*args)

        candidate = _no_grad(model) if native else watched
        phases.mark("load.candidate")
        warm_s["candidate"] = _warm(watched, pool, clocks, fresh=True)
        phases.mark("warm")
        checks = SpotChecker(watched, eager, pool, precision, random.Random(job["seed"]), *_budget(job))
        seed_wait = parent_clock.seed_wait if parent_clock else 0.0  # the calibration's draws waited too
        samples = interleave({"candidate": candidate, "eager": eager}, pool, clocks, flusher, *_budget(job),
                             between=checks.maybe_check, clock=parent_clock, record=sums.record,
                             watches={"candidate": native, "eager": native and native.unjudged()},
                             fresh=frozenset({"candidate", "eager"}), before_draw=process_guard.observers.check,
                             times=loop)
        phases.mark("timed")
    phases.seconds.update(loop.phases("timed."))
    if parent_clock is not None:
        phases.seconds["timed.seed_wait"] = round(parent_clock.seed_wait - seed_wait, 3)
    violations = _profile_violations([recorder, native, tripwires], samples, checks, device) \
        + process_guard.violations() + sums.problems
    rooflines = roofline.measure(reference, pool.sets[0], device, precision)
    phases.mark("roofline")
    return {
        "op_watch": "native" if native else f"python dispatch mode ({why_not})",
        **platform_info,
        "timings": {name: summarize(s["device"]) for name, s in samples.items()},
        "host_timings": {name: summarize(s["host"]) for name, s in samples.items()},
        "batches": {name: s["host"] for name, s in samples.items()},  # what each bracket of the parent's clock held
        "threads": torch.get_num_threads(),
        "checksums": sums.runs,
        "warmup_s": warm_s, "violations": violations, "spot_checks": checks.done,
        "roofline": rooflines, "phases": phases.seconds, "flush_bytes": flusher.nbytes,
    }


def calibration_runs(min_runs: int) -> int:
    """Half the timed runs, 16 to 32. Doubling them (3.5, briefly) halved the calibration's share of the
    growth check's noise, but on an H100 that noise is 0.13-0.37 ms a run, mostly eager's cycles after
    the import, so it bought nothing and cost a CPU profile 10% more (docs/env.md: the overhead bound)."""
    return max(16, min(32, min_runs // 2))


def calibrate(eager, pool: InputPool, clocks: Clocks, flusher: L2Flusher, parent_clock, native, sums,
              min_runs: int, before_draw=None) -> None:
    """Eager through the whole timed loop (fresh draws, flush, bracket, checksum), before the candidate is
    imported, so this process is still the harness's alone: the parent's clock learns what the harness's
    own work between and around timed calls costs here, from runs whose reports (sent at once, over the
    clock's pipe) no candidate could touch. Work a candidate later moves out of its timed window, into
    any part of that loop, shows against it, even when it inflates eager's runs alike (checks.py)."""
    if parent_clock is None:
        return
    record = lambda name, seed, out: sums.record("eager", seed, out)  # eager's work, its verdict unused
    interleave({CALIBRATE: eager}, pool, clocks, flusher, calibration_runs(min_runs), math.inf, clock=parent_clock,
               record=record, watches={CALIBRATE: native and native.unjudged()}, fresh=frozenset({CALIBRATE}),
               before_draw=before_draw, times=LoopTimes(clocks.perf_counter))  # the timed loop's checks and
    # marks too, so that its cycles cost the same
    parent_clock.calibrated()


def _same_threads(job: dict) -> None:
    """On the CPU eager gets the thread count the candidate's OpenMP gets (OMP_NUM_THREADS, set by the
    parent for both): a candidate on one thread is not compared with an eager that waits on a busy core."""
    threads = job.get("threads")
    if job["device"] == "cpu" and threads:
        torch.set_num_threads(int(threads))


class ParentClock:
    """This side of the parent's clock: `ready NAME`, wait for the parent's go, run, `done`. The parent
    times each bracket with a clock this process cannot reach (evaluation/runner.py)."""

    MUTABLE = frozenset({"timed_ms", "seed_wait"})

    def __init__(self, fds: list[int]):
        import os
        import time

        self.os, self.perf_counter = os, time.perf_counter
        self.go, self.report = fds
        self.seed_wait = 0.0  # seconds spent waiting for seeds (the parent's reads at each draw), informational

    def draw(self) -> int:
        """The seed of the next fresh input draw, from the parent, which keeps it."""
        start = self.perf_counter()
        self.os.write(self.report, b"draw\n")
        data = b""
        while len(data) < 8:
            chunk = self.os.read(self.go, 8 - len(data))
            if not chunk:
                raise RuntimeError("the parent's clock went away")
            data += chunk
        self.seed_wait += self.perf_counter() - start
        return int.from_bytes(data, "big")

    @contextmanager
    def batch(self, name: str):
        self.os.write(self.report, f"ready {name}\n".encode())
        if self.os.read(self.go, 1) != b"g":
            raise RuntimeError("the parent's clock went away")
        self.timed_ms = None
        yield
        # a calibration run's own time goes to the parent at once, before any candidate code exists here
        self.os.write(self.report, b"done\n" if self.timed_ms is None else f"done {self.timed_ms!r}\n".encode())

    def calibrated(self) -> None:
        """Calibration is over: the parent takes no more calibration runs from this process."""
        self.os.write(self.report, b"calibrated\n")


CHECKSUM_ROW = 1024


def checksum(out: torch.Tensor) -> list[float]:
    """The sum and the L2 norm of an output: two reads, no copy of the output.

    Rows of CHECKSUM_ROW elements are reduced at float32 (or float64 for float64 outputs) and their
    partials combined in float64: on the CPU a float64 reduction of a float32 tensor converts element
    by element, 25x slower than the timed call of a memory-bound task. A row's error is about
    log2(1024) float32 ulps; the combined sum and norm are within 1e-8 relative of float64's, far
    inside the checksum bound (2x verify's relative L2 bound, 2e-5 at fp32)."""
    if not out.is_floating_point():
        out = out.to(torch.float64)
    acc = torch.float64 if out.dtype == torch.float64 else torch.float32
    flat = out.reshape(-1)
    whole = flat.numel() // CHECKSUM_ROW * CHECKSUM_ROW
    rows, tail = flat[:whole].view(-1, CHECKSUM_ROW), flat[whole:].to(torch.float64)
    total = torch.sum(rows, dim=1, dtype=acc).to(torch.float64).sum() + tail.sum()
    squares = torch.linalg.vector_norm(rows, dim=1, dtype=acc).to(torch.float64).square().sum() + tail.square().sum()
    if not (math.isfinite(float(total)) and math.isfinite(float(squares))):  # float32 partials overflowed, or
        total = torch.sum(flat, dtype=torch.float64)                        # the output is not finite: float64
        squares = torch.linalg.vector_norm(flat, dtype=torch.float64).square()
    return [float(total), float(squares) ** 0.5, out.numel()]


class Checksums:
    """The checksum of every timed candidate output, taken inside the parent's bracket of its run,
    with the seed of its inputs' draw. The parent judges them against its own record of the seeds it
    handed out (a claim of other inputs is a violation), through a trusted process that rebuilds them."""

    MUTABLE = frozenset({"previous"})

    def __init__(self, device: str):
        self.device = device
        self.runs: list[list] = []
        self.problems: list[str] = []
        self.previous: list = []  # the last timed output, kept alive: a new one may not share its memory
        self.kept: dict[str, list] = {}  # the other contenders' last outputs, freed in their next bracket

    def record(self, name: str, seed: int | None, out) -> None:
        """Eager's outputs are summed too, and dropped: both contenders' brackets hold the same work.

        Each contender's previous output is freed here, inside its next bracket: freeing a large CPU tensor
        unmaps it (milliseconds), which both then pay alike, and whatever a candidate hangs on its output's
        release (a finalizer, __del__) runs where the parent's clock sees it."""
        outputs = guards.flatten_outputs(out)
        if name != "candidate":
            self._screen(outputs, self.kept.get(name, []))  # the same work as the candidate's, its verdict unused
            [checksum(o.detach()) for o in outputs if type(o) is torch.Tensor]
            self.kept[name] = outputs
            return
        if self.problems:
            return
        problems = self._screen(outputs, self.previous)
        if problems:
            self.problems.append(f"timed run {len(self.runs)}: " + "; ".join(problems))
            return
        self.runs.append([seed, [checksum(o.detach()) for o in outputs]])
        self.previous = outputs

    def _screen(self, outputs: list, previous: list) -> list[str]:
        problems = guards.output_problems(outputs, self.device)
        if not problems and guards.aliases_any(outputs, previous):
            problems = ["the output shares memory with the previous call's output (a caller's result overwritten)"]
        return problems


def reference_checksums(job: dict) -> dict:
    """Trusted side (never loads candidate code): rebuild the inputs of the given timed runs from the seeds
    the parent handed out, recompute the reference's outputs, and judge the candidate's checksums of them
    against the precision's aggregate bound."""
    device, precision = job["device"], job["precision"]
    guards.set_precision_flags(precision)
    task = loading.load_module(job["reference"], "ks_reference")
    reference = _no_grad(loading.seeded_reference(task, job["seed"], device, precision))
    failures = []
    for index, seed, sums in job["runs"]:
        outputs = guards.flatten_outputs(reference(*loading.seeded_inputs(task, seed, device, precision)))
        bounds = [cmp.tolerance_for(o.dtype, precision).rel_l2 for o in outputs]
        problem = checksum_mismatch(sums, [checksum(o.detach()) for o in outputs], bounds)
        if problem:
            failures.append(f"timed run {index}: {problem}")
    return {"checked": len(job["runs"]), "failures": failures}


def checksum_mismatch(got: list, expected: list, bounds: list[float]) -> str:
    """Honest outputs meet ||c - r|| <= b ||r|| (verify's aggregate bound b), so by the triangle inequality
    | ||c|| - ||r|| | <= b ||r|| and |sum c - sum r| <= sqrt(n) b ||r||; twice that is allowed (inputs
    rebuilt in another process)."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, the reference has {len(expected)}"
    for i, (claim, (r_sum, r_norm, n), b) in enumerate(zip(got, expected, bounds)):
        c_sum, c_norm, c_n = (list(claim) + [None] * 3)[:3]
        if c_n != n:  # the element count is the reference's, never the claim's (it scales the sum's bound)
            return f"output {i} has {c_n} elements by its checksum, the reference {n}"
        if not _checksums_agree(c_sum, c_norm, r_sum, r_norm, n, 2 * b + 1e-6):
            return (f"output {i}'s checksum (sum {c_sum!r:.40}, norm {c_norm!r:.40}) is not the reference's "
                    f"(sum {r_sum:.8g}, norm {r_norm:.8g}) for the same inputs")
    return ""


def _checksums_agree(c_sum, c_norm, r_sum, r_norm, n: int, bound: float) -> bool:
    """Fails closed: a claim is accepted only by comparisons that hold, so a NaN (all NaN timed outputs)
    or a value that is not a number at all never passes; a reference that is not finite is matched only
    by the same non-finite checksum."""
    if not all(isinstance(v, (int, float)) for v in (c_sum, c_norm)):
        return False
    if not (math.isfinite(r_sum) and math.isfinite(r_norm)):
        return _same_number(c_sum, r_sum) and _same_number(c_norm, r_norm)
    return abs(c_norm - r_norm) <= bound * r_norm and abs(c_sum - r_sum) <= (n ** 0.5) * bound * r_norm + 1e-30


def _same_number(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _profile_violations(watches, samples, checks, device) -> list[str]:
    found = [v for v in [w.violation() for w in watches if w] + [checks.failure] if v]
    if device == "cuda":
        found += [f"{name}: {msg}" for name, s in samples.items() if (msg := clock_disagreement(s))]
        found += [msg for msg in [side_stream_violation(samples)] if msg]
    return found


def _platform(device: str) -> dict:
    import platform

    gpu = torch.cuda.get_device_name() if device == "cuda" else (platform.processor() or platform.machine())
    return {"gpu": gpu, "torch": torch.__version__}


class SpotChecker:
    """After a few random timed runs, outside the timed interval: the candidate (watched) on fresh inputs against eager on
    the same inputs, in this process (a second line: every timed output is also checksummed)."""

    def __init__(self, candidate, eager, pool: InputPool, precision: str, rng: random.Random, min_runs: int,
                 min_seconds: float):
        self.candidate, self.eager, self.pool, self.precision = candidate, eager, pool, precision
        runs = max(min_runs, SPOT_CHECKS + 1)
        self.targets = set(rng.sample(range(1, runs), SPOT_CHECKS)) | {0}
        self.done = 0
        self.failure: str | None = None

    def maybe_check(self, name: str, run: int) -> None:
        if name != "candidate" or run not in self.targets or self.failure:
            return
        inputs = self.pool.next(fresh=True)
        outputs = guards.flatten_outputs(self.candidate(*inputs))
        problems = guards.output_problems(outputs, outputs[0].device.type if outputs else "cpu")
        if problems:
            self.failure = f"spot check after timed run {run}: " + "; ".join(problems)
            return
        verdict = cmp.compare_all([o.detach().clone() for o in outputs],
                                  guards.flatten_outputs(self.eager(*inputs)), self.precision)
        self.done += 1
        if not verdict["ok"]:
            self.failure = f"wrong output at a spot check after timed run {run} (caching or replay?): {verdict['reason']}"


def _queued_twins(contenders: dict) -> dict:
    """Each baseline again, timed as triton's do_bench times it: the host's path to the first kernel
    (dynamo's guards, Inductor's wrapper, the dispatcher) overlaps the cache flush still running on the
    GPU. Only trusted code may be timed so (side-stream work could run before the start event); the
    parent credits the faster of the two timers, so a candidate must beat a baseline at its best."""
    return {name + QUEUED: fn for name, fn in contenders.items()}


def run_baselines(job: dict) -> dict:
    """Eager and torch.compile modes, interleaved, in a worker with no candidate code."""
    device, precision = job["device"], job["precision"]
    if [*_platform(device).values()] in job.get("skip_platforms", []):  # a session's warm-up: cached already
        return {**_platform(device), "cached": True}
    guards.set_precision_flags(precision)
    _same_threads(job)
    clocks = Clocks(device)
    task = loading.load_module(job["reference"], "ks_reference")
    reference = loading.seeded_reference(task, job["seed"], device, precision)
    pool = InputPool(task, _seeds(job), device, precision)
    contenders = {"eager": _no_grad(reference)}
    for mode in job.get("compile_modes", []):
        contenders[f"compile:{mode}"] = _no_grad(torch.compile(reference, mode=None if mode == "default" else mode))
    # Compile outside the lock (CPU work, parallel across jobs); autotuning and timing inside it.
    warm_s = {name: _warm(fn, pool, clocks) for name, fn in contenders.items() if name == "compile:default"}
    with gpu_lock(device):
        flusher = L2Flusher(device, job.get("flush_bytes"), job.get("flush_cap_bytes"))
        warm_s.update({name: _warm(fn, pool, clocks) for name, fn in contenders.items() if name not in warm_s})
        queued = _queued_twins(contenders) if device == "cuda" else {}
        samples = interleave({**contenders, **queued}, pool, clocks, flusher, *_budget(job), queued=frozenset(queued))
    report = lint.lint_task(job) if job.get("lint") else None
    return {**_platform(device), "warmup_s": warm_s, "lint": report,
            "timings": {name: summarize(s["device"]) for name, s in samples.items()}}
