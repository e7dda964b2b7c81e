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

import random
from contextlib import nullcontext

import torch

from kernelsmith.harness import compare as cmp
from kernelsmith.harness import guards, lint, loading, op_watch, roofline
from kernelsmith.harness.timing import Clocks, L2Flusher, gpu_lock, summarize

POOL_SETS = 4
LARGE_INPUT_BYTES = 1 << 30
WARMUP_CALLS = 3
SPOT_CHECKS = 4
MAX_WALL_S = 300.0


class InputPool:
    """Distinct seeded input sets whose contents are rescaled in place before every run.

    Every run sees inputs it has never seen (scale 1 +- 1e-3, so the distribution
    is kept), at an address it has seen before: a cache keyed on the pointer or
    on a fingerprint of the values returns stale results and fails the spot checks.
    """

    def __init__(self, task, seeds: list[int], device: str, precision: str):
        first = loading.seeded_inputs(task, seeds[0], device, precision)
        large = loading.nbytes(first) > LARGE_INPUT_BYTES  # big inputs defeat the L2 anyway: two sets
        self.slots = [first] + [loading.seeded_inputs(task, s, device, precision) for s in seeds[1:2 if large else None]]
        # Small inputs are rescaled from pristine copies; large ones in place (no second copy in
        # GPU memory), where the product of the factors drifts by about 1e-3 * sqrt(runs).
        self.sources = self.slots if large else [loading.clone_all(slot) for slot in self.slots]
        self.rng = random.Random(seeds[0])
        self.runs = 0

    def next(self) -> list:
        k = self.runs % len(self.slots)
        self.runs += 1
        scale = 1.0 + self.rng.uniform(-1e-3, 1e-3)
        for src, dst in zip(self.sources[k], self.slots[k]):
            if isinstance(src, torch.Tensor) and src.is_floating_point():
                torch.mul(src, scale, out=dst)
        return self.slots[k]

    def nbytes(self) -> int:
        return loading.nbytes(self.slots[0])


def _seeds(job: dict) -> list[int]:
    rng = random.Random(job["seed"])
    return [rng.randrange(1, 2**62) for _ in range(int(job.get("pool_sets", POOL_SETS)))]


def _budget(job: dict) -> tuple[int, float]:
    return int(job.get("min_runs", 100)), float(job.get("min_seconds", 1.0))


def interleave(contenders: dict, pool: InputPool, clocks: Clocks, flusher: L2Flusher,
               min_runs: int, min_seconds: float, on_run=None, watches: dict | None = None) -> dict:
    """Time every contender round-robin in random order until the budget is met.

    watches[name], a context manager, is entered before that contender's timed call and left
    after it: outside the timed interval, so watching costs the contender no time."""
    samples = {name: {"device": [], "full": [], "host": []} for name in contenders}
    order = list(contenders)
    rng = random.Random(len(order))
    start = clocks.monotonic()
    while True:
        rng.shuffle(order)
        for name in order:
            inputs = pool.next()
            flusher.flush()
            with (watches or {}).get(name) or nullcontext():
                dev_ms, full_ms, host_ms, out = clocks.time_call(contenders[name], inputs)
            samples[name]["device"].append(dev_ms)
            samples[name]["full"].append(full_ms)
            samples[name]["host"].append(host_ms)
            if on_run:
                on_run(name, len(samples[name]["device"]) - 1, inputs, out)
        runs = min(len(s["device"]) for s in samples.values())
        timed_s = min(sum(s["device"]) for s in samples.values()) / 1e3
        if runs >= min_runs or (timed_s >= min_seconds and runs >= 10) or clocks.monotonic() - start > MAX_WALL_S:
            return samples


def _no_grad(fn):
    def call(*args):
        with torch.no_grad():
            return fn(*args)
    return call


def _warm(fn, pool: InputPool, clocks: Clocks) -> float:
    """Warm-up calls (compilation happens here); returns their wall seconds."""
    t0 = clocks.perf_counter()
    for _ in range(WARMUP_CALLS):
        fn(*pool.next())
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
    clocks = Clocks(device)
    tripwires = op_watch.Tripwires()  # before the candidate can take references to the originals
    native, why_not = op_watch.open_watch()  # and before it could plant a module of the same name
    process_guard = guards.ProcessGuard()
    task = loading.load_module(job["reference"], "ks_reference")
    candidate_module = loading.load_module(job["candidate"], "ks_candidate")
    reference = loading.seeded_reference(task, job["seed"], device, precision)
    torch.manual_seed(job["seed"] + 1)
    model = candidate_module.ModelNew(*loading.init_inputs(task)).to(device)
    loading.load_weights(model, reference)
    pool = InputPool(task, _seeds(job), device, precision)
    recorder = guards.OpRecorder()
    eager = _no_grad(reference)

    def watched(*args):  # warm-up, and the timed runs when there is no native watch
        with torch.no_grad(), recorder:
            return model(*args)

    candidate = _no_grad(model) if native else watched
    with gpu_lock(device):
        flusher = L2Flusher(device)
        warm_s = {"candidate": _warm(watched, pool, clocks), "eager": _warm(eager, pool, clocks)}
        checks = SpotChecker(eager, precision, random.Random(job["seed"]), *_budget(job))
        samples = interleave({"candidate": candidate, "eager": eager}, pool, clocks, flusher,
                             *_budget(job), on_run=checks.maybe_check, watches={"candidate": native})
    violations = _profile_violations([recorder, native, tripwires], samples, checks, device) \
        + process_guard.violations()
    return {
        "op_watch": "native" if native else f"python dispatch mode ({why_not})",
        **_platform(device),
        "timings": {name: summarize(s["device"]) for name, s in samples.items()},
        "host_timings": {name: summarize(s["host"]) for name, s in samples.items()},
        "warmup_s": warm_s, "violations": violations, "spot_checks": checks.done,
        "roofline": roofline.measure(reference, pool.sources[0], device, precision),
    }


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
    """Compares the candidate's output at a few random timed runs with eager on the same inputs."""

    def __init__(self, eager, precision: str, rng: random.Random, min_runs: int, min_seconds: float):
        self.eager, self.precision = eager, precision
        self.targets = set(rng.sample(range(1, max(min_runs, SPOT_CHECKS + 1)), SPOT_CHECKS)) | {0}
        self.done = 0
        self.failure: str | None = None

    def maybe_check(self, name: str, index: int, inputs: list, out) -> None:
        if name != "candidate" or index not in self.targets or self.failure:
            return
        outputs = guards.flatten_outputs(out)
        problems = guards.output_problems(outputs, outputs[0].device.type if outputs else "cpu")
        if problems:
            self.failure = "timed run " + str(index) + ": " + "; ".join(problems)
            return
        verdict = cmp.compare_all([o.detach().clone() for o in outputs],
                                  guards.flatten_outputs(self.eager(*inputs)), self.precision)
        self.done += 1
        if not verdict["ok"]:
            self.failure = f"wrong output at timed run {index} (caching or replay?): {verdict['reason']}"


def run_baselines(job: dict) -> dict:
    """Eager and torch.compile modes, interleaved, in a worker with no candidate code."""
    device, precision = job["device"], job["precision"]
    guards.set_precision_flags(precision)
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
        flusher = L2Flusher(device)
        warm_s.update({name: _warm(fn, pool, clocks) for name, fn in contenders.items() if name not in warm_s})
        samples = interleave(contenders, pool, clocks, flusher, *_budget(job))
    report = lint.lint_task(job) if job.get("lint") else None
    return {**_platform(device), "warmup_s": warm_s, "lint": report,
            "timings": {name: summarize(s["device"]) for name, s in samples.items()}}
