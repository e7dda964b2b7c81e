"""Parent-side orchestration of one evaluation: build, verify, profile, reward.

Imports neither torch nor candidate code: every step runs in a fresh worker
(harness/runner.py). Verify runs the candidate and the reference in two
separate workers; the profile's compile baselines come from a worker that
never loads the candidate, cached per task, GPU, torch version and precision (in the workdir,
or in one file that several sessions share: EvalOptions.cache_path; writes are locked).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith.harness import build, runner
from kernelsmith.harness.result import EvalResult
from kernelsmith.reward import DEFAULT, RewardThresholds, reward_for

COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
EAGER_DRIFT = 0.10  # cached baselines are re-measured when live eager moved more than this


@dataclass
class EvalOptions:
    device: str = "cpu"
    precision: str = "fp32"
    trials: int = 5
    profile: bool = True
    compile_baseline: bool | None = None  # None: on for CUDA, off for the CPU
    min_runs: int = 100
    min_seconds: float = 1.0
    timeout_s: float = 300.0
    build_timeout_s: float = 1800.0
    fast_math: bool = False
    eager_drift: float = EAGER_DRIFT
    seed: int | None = None
    cache_path: Path | None = None
    thresholds: RewardThresholds = field(default_factory=lambda: DEFAULT)

    def wants_compile(self) -> bool:
        return self.device == "cuda" if self.compile_baseline is None else self.compile_baseline


def _seed(opts: EvalOptions) -> int:
    return opts.seed if opts.seed is not None else int.from_bytes(os.urandom(6), "little")


def evaluate(reference: Path, candidate: Path, opts: EvalOptions) -> EvalResult:
    """Score a KernelBench-format candidate (defines ModelNew) against a reference."""
    result = EvalResult(device=opts.device, precision=opts.precision)
    reference, candidate = Path(reference).resolve(), Path(candidate).resolve()
    kernels = candidate.parent / "kernels"
    if kernels.is_dir() and not build_step(kernels, opts, result):
        return finish(result, opts)
    if not verify_step(reference, candidate, opts, result):
        return finish(result, opts)
    if opts.profile:
        profile_step(reference, candidate, opts, result)
    return finish(result, opts)


def finish(result: EvalResult, opts: EvalOptions) -> EvalResult:
    result.reward = reward_for(result, opts.thresholds)
    if result.correct and not result.violations:
        result.stage = "done"
    return result


def run_build(kernels: Path, device: str, fast_math: bool, timeout_s: float = 1800.0) -> dict:
    """Build in a worker, unless the previous build still matches (checked here, without torch)."""
    hit = build.cached_result(kernels, device, fast_math)
    if hit is not None:
        return hit.__dict__
    job = {"kind": "build", "kernels_dir": str(kernels), "device": device, "fast_math": fast_math}
    try:
        return runner.run_job(job, timeout_s)
    except runner.JobFailed as err:
        return {"ok": False, "summary": err.reason, "log": err.log, "cached": False, "seconds": 0.0}


def build_step(kernels: Path, opts: EvalOptions, result: EvalResult) -> bool:
    start = time.perf_counter()
    built = run_build(kernels, opts.device, opts.fast_math, opts.build_timeout_s)
    result.seconds["build"] = runner.elapsed(start)
    result.build = {k: built.get(k) for k in ("ok", "cached", "seconds", "summary", "arch", "flags")}
    if not built["ok"]:
        result.build["log_tail"] = "\n".join(str(built.get("log", "")).splitlines()[-60:])
        result.reject("build failed:\n" + built["summary"], stage="build")
    return built["ok"]


def verify_step(reference: Path, candidate: Path, opts: EvalOptions, result: EvalResult) -> bool:
    from kernelsmith.harness.seeds import trial_seeds

    start = time.perf_counter()
    base = {"reference": str(reference), "candidate": str(candidate), "device": opts.device,
            "precision": opts.precision, "seeds": trial_seeds(opts.trials, opts.seed), "cwd": str(candidate.parent)}

    def both(run):
        facts = run({**base, "kind": "candidate"})
        return facts, run({**base, "kind": "judge", "facts": facts})

    try:
        facts, judged = runner.run_jobs_sharing_dir(both, opts.timeout_s)
    except runner.JobFailed as err:
        result.seconds["verify"] = runner.elapsed(start)
        result.reject(f"candidate failed: {err.reason}", stage="verify")
        result.notes.append(err.log[-2000:])
        return False
    result.seconds["verify"] = runner.elapsed(start)
    return _apply_verdicts(facts, judged, opts, result)


def _apply_verdicts(facts: dict, judged: dict, opts: EvalOptions, result: EvalResult) -> bool:
    trials = judged["trials"]
    result.trials = [{k: v for k, v in t.items() if k != "violations"} for t in trials]
    result.violations = list(dict.fromkeys(facts.get("violations", []) +
                                           [v for t in trials for v in t.get("violations", [])]))
    failure = _first_failure(trials, opts.trials)
    if failure:
        result.reject(failure, stage="verify")
        return False
    result.correct = True
    if result.violations:
        result.stage = "verify"
        result.error = "rejected: " + result.violations[0]
        return False
    return True


def _first_failure(trials: list[dict], wanted: int) -> str:
    for number, trial in enumerate(trials, start=1):
        if not trial["ok"]:
            return f"wrong output in trial {number} of {wanted}: {trial['reason']}"
    if len(trials) < wanted:
        return f"only {len(trials)} of {wanted} trials ran"
    return ""


def profile_step(reference: Path, candidate: Path, opts: EvalOptions, result: EvalResult) -> None:
    start = time.perf_counter()
    job = {"kind": "profile", "reference": str(reference), "candidate": str(candidate), "device": opts.device,
           "precision": opts.precision, "seed": _seed(opts), "min_runs": opts.min_runs,
           "min_seconds": opts.min_seconds, "cwd": str(candidate.parent)}
    try:
        prof = runner.run_job(job, opts.timeout_s * 2)
    except runner.JobFailed as err:
        result.seconds["profile"] = runner.elapsed(start)
        result.reject(f"profile failed: {err.reason}", stage="profile")
        return
    result.seconds["profile"] = runner.elapsed(start)
    apply_profile(prof, result)
    if not result.violations and opts.wants_compile():
        compile_start = time.perf_counter()
        apply_compile_baselines(reference, opts, prof, result)
        result.seconds["baselines"] = runner.elapsed(compile_start)


def apply_profile(prof: dict, result: EvalResult) -> None:
    result.gpu, result.torch_version = prof.get("gpu", ""), prof.get("torch", "")
    cand, eager = prof["timings"]["candidate"], prof["timings"]["eager"]
    result.timings_ms = {"candidate": cand["median"], "eager": eager["median"]}
    result.spread_ms = {name: [t["p10"], t["p90"]] for name, t in prof["timings"].items()}
    result.speedup_vs_eager = eager["median"] / cand["median"] if cand["median"] > 0 else None
    result.roofline = prof.get("roofline", {})
    result.seconds["profile_runs"] = cand["n"]
    watch = prof.get("op_watch", "native")
    if watch != "native":
        result.notes.append(f"timed runs watched by the {watch}: the candidate's times include its host cost")
    for violation in prof.get("violations", []):
        if violation not in result.violations:
            result.violations.append(violation)
    if result.violations:
        result.error = "rejected while profiling: " + result.violations[0]
    from kernelsmith.harness.ceilings import percentages

    if result.roofline.get("ceilings"):
        result.roofline.update(percentages(result.roofline, cand["median"], result.precision))


def task_digest(source: bytes, device: str, precision: str) -> str:
    """The task part of a baselines cache key: the reference text, device, precision and compile modes."""
    digest = hashlib.sha256(source)
    digest.update(json.dumps([device, precision, COMPILE_MODES]).encode())
    return digest.hexdigest()[:24]


def task_key(reference: Path, opts: EvalOptions) -> str:
    return task_digest(Path(reference).read_bytes(), opts.device, opts.precision)


def cache_key(digest: str, gpu, torch_version) -> str:
    """One baselines cache entry: a task on one GPU model with one torch version."""
    return f"{digest}|{gpu}|{torch_version}"


def default_cache_path(reference: Path) -> Path:
    state = Path(reference).resolve().parent / ".kernelsmith"
    if state.is_dir():
        return state / "baselines.json"
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "kernelsmith" / "baselines.json"


def apply_compile_baselines(reference: Path, opts: EvalOptions, prof: dict, result: EvalResult) -> None:
    cache_path = opts.cache_path or default_cache_path(reference)
    key = cache_key(task_key(reference, opts), prof.get("gpu"), prof.get("torch"))
    entry = build.read_json(cache_path).get(key)
    live_eager = prof["timings"]["eager"]["median"]
    if entry is not None and abs(entry["eager_ms"] - live_eager) > opts.eager_drift * live_eager:
        result.notes.append(f"compile baselines re-measured: live eager {live_eager:.4g} ms, "
                            f"cached eager {entry['eager_ms']:.4g} ms")
        entry = None
    if entry is None:
        entry = measure_baselines(reference, opts)  # never under the cache lock: this takes up to a minute
        if entry is None:
            result.notes.append("torch.compile baseline failed; speedup_vs_compile is unknown")
            return
        update_cache(cache_path, key, entry)
    else:
        seeded = f", seeded from {entry['seeded_from']}" if entry.get("seeded_from") else ""
        result.notes.append(f"compile baselines from cache (live eager within {opts.eager_drift:.0%} "
                            f"of the cached{seeded})")
    best_mode = min(entry["compile_ms"], key=entry["compile_ms"].get)
    result.timings_ms.update({f"compile:{m}": t for m, t in entry["compile_ms"].items()})
    result.timings_ms["compile"] = entry["compile_ms"][best_mode]
    result.compile_mode = best_mode
    result.speedup_vs_compile = entry["compile_ms"][best_mode] / result.timings_ms["candidate"]


def measure_baselines(reference: Path, opts: EvalOptions) -> dict | None:
    job = {"kind": "baselines", "reference": str(reference), "device": opts.device, "precision": opts.precision,
           "seed": _seed(opts), "compile_modes": list(COMPILE_MODES), "min_runs": opts.min_runs,
           "min_seconds": opts.min_seconds, "cwd": str(Path(reference).parent)}
    try:
        value = runner.run_job(job, max(opts.timeout_s, 1800.0))
    except runner.JobFailed:
        return None
    timings = value["timings"]
    return {"eager_ms": timings["eager"]["median"],
            "compile_ms": {name.split(":", 1)[1]: t["median"] for name, t in timings.items() if name.startswith("compile:")},
            "warmup_s": value["warmup_s"], "measured_at": time.time()}


def merge_cache(path: Path, entries: dict) -> int:
    """Set entries, returning how many replaced one of the same key. The file is read again under the
    lock, just before writing, so entries other sessions wrote meanwhile stay."""
    with build.cache_lock(path):
        cache = build.read_json(path)
        replaced = sum(key in cache for key in entries)
        cache.update(entries)
        _write_json(path, cache)
    return replaced


def update_cache(path: Path, key: str, entry: dict) -> None:
    merge_cache(path, {key: entry})


def _write_json(path: Path, data: dict) -> None:
    """Write through a temp file of this process and thread, then rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def evaluate_workdir(workdir: Path, opts: EvalOptions) -> EvalResult:
    """Evaluate a workdir's model_new.py; an edited reference or fixed file is a violation."""
    from kernelsmith import workdir as wd

    workdir = Path(workdir).resolve()
    config = wd.WorkdirConfig.load(workdir)
    result = evaluate(workdir / "model.py", workdir / "model_new.py", opts)
    for violation in wd.fixed_file_changes(workdir, config):
        result.violations.append(violation)
        result.error = result.error or "rejected: " + violation
    if result.violations:
        result.reward = -1.0
    return result
