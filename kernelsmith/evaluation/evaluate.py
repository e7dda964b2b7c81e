"""Parent-side orchestration of one evaluation: build, verify, profile, reward.

Imports neither torch nor candidate code: every step runs in a fresh worker
(evaluation/runner.py). Verify runs the candidate and the reference in two
separate workers; the profile's compile baselines come from a worker that
never loads the candidate, cached per task, GPU, torch version and precision (in the workdir,
or in one file that several sessions share: EvalOptions.cache_path; writes are locked).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import replace
from pathlib import Path

from kernelsmith.evaluation import build_plan as build, runner
from kernelsmith.evaluation.result import EvalResult
from kernelsmith.evaluation import checks, cpu_caches, linkage, toolchain, verdicts
from kernelsmith.sandbox import jail
from kernelsmith.evaluation.baselines import apply_baselines, warm as warm_baselines
from kernelsmith.evaluation.options import EvalOptions, seed_for
from kernelsmith.evaluation.reward import reward_for

# Two of each profile worker wait: the one a profile takes was started a whole iteration before it. With one,
# started after the last profile's timed runs, a 2 s build and a 2 s verify left it 3 s short of its jailed
# imports (7.2 s on the H200): 3 s of each 7 s steady profile (H200, 2026-12-04).
PROFILE_SPARES = 2
BUILD_TIMEOUT_S = 1800.0  # a build worker's, as the sandboxes run it (a spare serves only the same timeout)


def evaluate(reference: Path, candidate: Path, opts: EvalOptions) -> EvalResult:
    """Score a KernelBench-format candidate (defines ModelNew) against a reference."""
    result = EvalResult(device=opts.device, precision=opts.precision, jail=jail.status().describe())
    if not jail.status().jailed:
        result.notes.append(jail.reduced_note(jail.status()))
    reference, candidate = Path(reference).resolve(), Path(candidate).resolve()
    kernels = candidate.parent / "kernels"
    if build.has_kernels(kernels) and not build_step(kernels, opts, result):
        return finish(result, opts)
    if (opts.spare_workers or opts.profile_spares) and not opts.profile:  # a profile of these files, likely
        _stock_profile_spares(reference, candidate, opts)  # next, finds its two workers with torch imported
    with _profile_worker(reference, candidate, opts) as profiling:  # importing torch while verify runs
        if verified(reference, candidate, opts, result) and profiling:
            _profile_with(reference, opts, result, *profiling)
    if opts.spare_workers and opts.profile:  # the next profile's pair imports (7-10 s jailed on the H200) while
        _stock_profile_spares(reference, candidate, opts)  # the edit, build and a 2 s verify run: not after them
    if opts.spare_workers:  # stocked by the verify already, unless it did not run (a recalled verdict)
        stock_candidate(candidate_job(reference, candidate, opts), opts)
    return finish(result, opts)


def stock_candidate(job: dict, opts: EvalOptions) -> None:
    """The next verify of these files finds its candidate worker, and its judge beside it, started."""
    trials = len(_trial_seeds(opts)["seeds"])
    runner.SPARES.stock(job, opts.timeout_s, partner=lambda worker: judge_job(worker, trials))


def _stock_profile_spares(reference: Path, candidate: Path, opts: EvalOptions) -> None:
    """A profile worker (with the parent's clock it will be timed by) and a checksums worker, started now
    so that the next profile of these files finds torch imported in both. (A spare loads the files as
    they are when its job comes, so one left by a verify that failed serves a later profile as well.)"""
    prepare_watch()  # the spare's jail binds the built watch only if it exists when it starts
    job = profile_job(reference, candidate, replace(opts, profile=True))
    depth = PROFILE_SPARES if opts.spare_workers else 1  # profile_spares alone (the CPU): each imports on the verify's cores
    runner.SPARES.stock(job, opts.timeout_s * 2, runner.ParentClock, depth=depth)
    runner.SPARES.stock(checksums_job(job), opts.timeout_s, depth=depth)


def checksums_job(profile: dict) -> dict:
    return {**{k: profile[k] for k in ("reference", "device", "precision", "seed", "cwd")}, "kind": "checksums"}


def finish(result: EvalResult, opts: EvalOptions) -> EvalResult:
    result.reward = reward_for(result, opts.thresholds)
    if result.correct and not result.violations:
        result.stage = "done"
    return result


def run_build(kernels: Path, device: str, fast_math: bool, timeout_s: float = BUILD_TIMEOUT_S, spare: bool = False) -> dict:
    """Build in a worker, unless the previous build still matches (checked here, without torch). With
    `spare`, the build worker of the next edit is started afterwards and finds torch imported."""
    # the stamp's key holds the $CXX the worker built with, which choose_compiler may have replaced: the CLI's
    # check missed every time where the user's $CXX is unfit (8 s on the H200 for a build with nothing to do)
    toolchain.choose_compiler([])
    hit = build.cached_result(kernels, device, fast_math)
    if hit is not None:
        return hit.__dict__
    job = build_job(kernels, device, fast_math)
    try:
        with runner.SPARES.take(job, timeout_s) or runner.Prestarted(job, timeout_s) as worker:
            return worker.run({})
    except runner.JobFailed as err:
        return {"ok": False, "summary": err.reason, "log": err.log, "cached": False, "seconds": 0.0}
    finally:
        if spare:
            runner.SPARES.stock(job, timeout_s)


def build_job(kernels: Path, device: str, fast_math: bool) -> dict:
    return {"kind": "build", "kernels_dir": str(kernels), "device": device, "fast_math": fast_math}


def stock_build(kernels: Path, device: str, fast_math: bool = False, timeout_s: float = BUILD_TIMEOUT_S) -> None:
    """A session's first build finds its worker with torch's extension builder imported: started cold,
    that import was 3.5 s of a 16.9 s first compile on the H200. (Its jail binds kernels/, so only once
    the folder exists.)"""
    if Path(kernels).is_dir():
        runner.SPARES.stock(build_job(kernels, device, fast_math), timeout_s)


def build_step(kernels: Path, opts: EvalOptions, result: EvalResult) -> bool:
    start = time.perf_counter()
    built = run_build(kernels, opts.device, opts.fast_math, opts.build_timeout_s)
    result.seconds["build"] = runner.elapsed(start)
    result.build = {k: built.get(k) for k in ("ok", "cached", "seconds", "summary", "arch", "flags")}
    if not built["ok"]:
        result.build["log_tail"] = "\n".join(str(built.get("log", "")).splitlines()[-60:])
        result.reject("build failed:\n" + built["summary"], stage="build")
    elif built.get("so_path") and (problem := linkage.violation(Path(built["so_path"]))):
        result.violations.append(problem)  # read from the .so here, in the parent: no candidate code runs
    return built["ok"]


def verified(reference: Path, candidate: Path, opts: EvalOptions, result: EvalResult) -> bool:
    """Verify, or reuse the passing verdict of identical files verified earlier (evaluation/verdicts.py)."""
    key = verdicts.key(reference, candidate, opts, result.build)
    if verdicts.recall(key, result):
        if result.violations:  # found again in this evaluation's build (the linkage check)
            result.stage, result.error = "verify", "rejected: " + result.violations[0]
            return False
        return True
    ok = verify_step(reference, candidate, opts, result)
    verdicts.remember(key, result)
    return ok


def candidate_job(reference: Path, candidate: Path, opts: EvalOptions) -> dict:
    """What a candidate worker is started with; the trial seeds come with its job."""
    return {"kind": "candidate", "reference": str(reference), "candidate": str(candidate), "device": opts.device,
            "precision": opts.precision, "cwd": str(candidate.parent)}


def judge_job(worker: runner.Prestarted, trials: int) -> dict:
    """The trusted judge of this candidate worker's outputs: its folder, its end of the handoff, and how many
    trials it may keep buffers for. The seeds come with the rest of its job, after the candidate's."""
    fields = {k: worker.job[k] for k in ("reference", "candidate", "device", "precision", "cwd")}
    return {**fields, "kind": "judge", "trials": trials, "out_dir": worker.job["out_dir"], **worker.judge_channel()}


def _trial_seeds(opts: EvalOptions) -> dict:
    from kernelsmith.evaluation.seeds import trial_seeds

    return {"seeds": trial_seeds(opts.trials, opts.seed)}


def _candidate_then_judge(job: dict, seeds: dict, opts: EvalOptions) -> tuple[dict, dict, dict]:
    """The candidate's trials, then the trusted judge's verdict on the outputs it left in its folder, and
    each job's wall seconds. A spare candidate brings its judge, started with it; either way the judge
    imports torch while the candidate runs, and loads no candidate code."""
    trials = len(seeds["seeds"])
    with runner.SPARES.take(job, opts.timeout_s) or runner.Prestarted(job, opts.timeout_s) as worker:
        # (a partner started for another trial count is dropped; its handoff went with it, so the judge
        # started instead takes the outputs by file)
        paired = worker.take_partner(lambda started: started.get("trials") == trials)
        if opts.spare_workers:  # now, not after: the pair imports torch (8-10 s jailed on the H200) while this
            stock_candidate(job, opts)  # verify and the profile after it run, instead of on the next verify's path
        with paired or runner.Prestarted(judge_job(worker, trials), opts.timeout_s) as judge:
            start = time.perf_counter()
            facts = worker.run(seeds)
            middle = time.perf_counter()
            judged = judge.run({"facts": facts, **seeds})
            return facts, judged, {"candidate": round(middle - start, 3), "judge": runner.elapsed(middle),
                                   **_lock_phases("candidate", worker), **_lock_phases("judge", judge)}


def _lock_phases(name: str, worker: runner.Prestarted) -> dict:
    """A GPU job's wait for its worker's imports, for the GPU's lock and its hold of it, as phases named
    after the job (on an H100 pool a verify took 9 s with 3 s of it locked: the rest shows here)."""
    waits = {} if worker.ready_wait_s is None else {"ready_wait": worker.ready_wait_s}
    return {f"{name}.{key}": seconds for key, seconds in {**waits, **worker.gpu_lock}.items()}


def verify_step(reference: Path, candidate: Path, opts: EvalOptions, result: EvalResult) -> bool:
    start = time.perf_counter()
    seeds = _trial_seeds(opts)
    try:
        facts, judged, walls = _candidate_then_judge(candidate_job(reference, candidate, opts), seeds, opts)
    except runner.JobFailed as err:
        result.seconds["verify"] = runner.elapsed(start)
        result.reject(f"candidate failed: {err.reason}", stage="verify")
        result.notes.append(err.log[-2000:])
        return False
    result.seconds["verify"] = runner.elapsed(start)
    record_phases(result, "verify", walls)
    record_phases(result, "verify.candidate", facts.get("phases"))
    record_phases(result, "verify.judge", judged.get("phases"))
    return _apply_verdicts(facts, judged, opts, result)


def record_phases(result: EvalResult, prefix: str, phases) -> None:
    """A worker's wall seconds per phase into result.seconds (informational: the workers report them)."""
    if not isinstance(phases, dict):
        return
    for name, seconds in list(phases.items())[:24]:  # a cap: the worker reports them
        if isinstance(name, str) and isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            result.seconds[f"{prefix}.{name[:24]}"] = round(float(seconds), 3)


def _apply_verdicts(facts: dict, judged: dict, opts: EvalOptions, result: EvalResult) -> bool:
    trials = judged["trials"]
    result.trials = [{k: v for k, v in t.items() if k != "violations"} for t in trials]
    result.violations = list(dict.fromkeys(result.violations + facts.get("violations", []) +
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
        if trial.get("skipped"):  # a stressed trial the reference itself is not finite on
            continue
        if not trial["ok"]:
            if trial.get("stress"):  # the judge's reason names the stress
                return f"wrong output {trial['reason']}"
            return f"wrong output in trial {number} of {wanted}: {trial['reason']}"
    if len(trials) < wanted:
        return f"only {len(trials)} of {wanted} trials ran"
    return ""


def prepare_watch() -> None:
    """The native op watch is built once, by a trusted worker, before any profile needs it."""
    toolchain.choose_compiler([])  # the watch's folder and stamp hold $CXX as the workers will have it
    if not build.op_watch_built():
        try:
            runner.run_job({"kind": "prepare"}, 1800.0)
        except runner.JobFailed:
            pass  # the profile then runs under the Python dispatch mode, and its notes say so


def profile_job(reference: Path, candidate: Path, opts: EvalOptions) -> dict:
    return {"kind": "profile", "reference": str(reference), "candidate": str(candidate), "device": opts.device,
            "precision": opts.precision, "seed": seed_for(opts), "min_runs": opts.min_runs,
            "min_seconds": opts.min_seconds, "cwd": str(candidate.parent), "threads": opts.threads(),
            **cpu_caches.job_fields(opts.device)}


@contextlib.contextmanager
def _profile_worker(reference: Path, candidate: Path, opts: EvalOptions):
    """(job, clock, worker, checker) of a profile worker and the trusted checksums worker, both started
    ahead of their jobs (they import torch while verify runs), or None without a profile. The checker
    then waits idle while the profile times, so it takes no cores from the timed runs on the CPU."""
    if not opts.profile:
        yield None
        return
    prepare_watch()  # before the worker starts: its jail binds the built watch only if it exists then
    job = profile_job(reference, candidate, opts)
    with contextlib.ExitStack() as stack:  # spares (stocked by the verify before) carry their own clock
        worker = stack.enter_context(runner.SPARES.take(job, opts.timeout_s * 2)
                                     or runner.Prestarted(job, opts.timeout_s * 2, runner.ParentClock()))
        checker = stack.enter_context(runner.SPARES.take(checksums_job(job), opts.timeout_s)
                                      or runner.Prestarted(checksums_job(job), opts.timeout_s))
        yield job, worker.clock, worker, checker


def profile_step(reference: Path, candidate: Path, opts: EvalOptions, result: EvalResult) -> None:
    """The profile alone (benches time it): its worker starts now."""
    with _profile_worker(reference, candidate, replace(opts, profile=True)) as started:
        _profile_with(reference, opts, result, *started)


def _profile_with(reference: Path, opts: EvalOptions, result: EvalResult, job: dict, clock: runner.ParentClock,
                  worker: runner.Prestarted, checker: runner.Prestarted) -> None:
    checker.await_ready()  # no import runs beside the timed runs (on the CPU it would take their cores)
    if checker.ready_wait_s:
        result.seconds["profile.checksums.ready_wait"] = checker.ready_wait_s
    start = time.perf_counter()
    try:
        prof = worker.run(job)  # this profile's seed and budget (a spare was started with an earlier one's)
    except runner.JobFailed as err:
        result.seconds["profile"] = runner.elapsed(start)
        result.reject(f"profile failed: {err.reason}", stage="profile")
        return
    result.seconds["profile"] = runner.elapsed(start)
    if worker.ready_wait_s is not None:  # its imports, when the job came before they ended (0 when ready)
        result.seconds["profile.ready_wait"] = worker.ready_wait_s
    record_phases(result, "profile", worker.gpu_lock)
    record_phases(result, "profile.worker", prof.get("phases"))
    apply_profile(prof, result)
    _violation(result, checks.clock_disagreement(prof, clock.batches))
    seen = (prof, clock.batches, clock.cycles, clock.calibration, clock.foreign_cpu, clock.foreign_after)
    charge_unreported(result, checks.unreported_time(*seen))
    result.clock = checks.clock_readings(*seen, calibration_brackets=clock.calibration_brackets)
    _violation(result, checks.helper_processes(clock))
    _violation(result, clock.loads.violation())  # what the worker mapped, read by this process (loads.py)
    if not result.violations:
        check_timed_outputs(prof, result, checker, clock.seeds, job["seed"])
    if not result.violations:
        baselines_start = time.perf_counter()
        apply_baselines(reference, opts, prof, result)
        result.seconds["baselines"] = runner.elapsed(baselines_start)
    drift = "" if result.violations else checks.harness_drift(clock.calibration, clock.cycles)
    mark_contended(result, result.contended or drift or checks.busy(prof["timings"]))


def charge_unreported(result: EvalResult, extra_ms: float) -> None:
    """Time the parent's clock saw the candidate spend outside its timed window counts as its run time."""
    if extra_ms <= 0 or not result.timings_ms.get("candidate"):
        return
    reported = result.timings_ms["candidate"]
    result.timings_ms.update({"candidate": reported + extra_ms, "candidate_reported": reported})
    if result.spread_ms.get("candidate"):  # the charge is per timed run: the spread moves with the median
        result.spread_ms["candidate"] = [t + extra_ms for t in result.spread_ms["candidate"]]
    result.speedup_vs_eager = result.timings_ms["eager"] / result.timings_ms["candidate"]
    result.notes.append(f"the parent's clock saw {extra_ms:.3g} ms per timed run beyond what the candidate's "
                        f"process reported (and beyond eager's harness work): charged to the candidate "
                        f"({reported:.4g} -> {reported + extra_ms:.4g} ms)")


def credit_jitter(result: EvalResult, credited_ms: float | None) -> None:
    """A candidate whose timed runs spread wide is credited by its mean where that is above its median."""
    cand = result.timings_ms["candidate"]
    if credited_ms is None or credited_ms <= cand:
        return
    low, high = result.spread_ms["candidate"]
    result.timings_ms.update({"candidate": credited_ms, "candidate_median": cand})
    result.speedup_vs_eager = result.timings_ms["eager"] / credited_ms
    result.notes.append(f"the candidate's times spread {low:.4g}-{high:.4g} ms around a median of {cand:.4g} ms: "
                        f"credited by their mean, {credited_ms:.4g} ms, so no work hides in a minority of runs")


def mark_contended(result: EvalResult, reason: str) -> None:
    """Numbers from a contended machine earn no speed-up, unless the user said the machine is busy by
    design (KERNELSMITH_BUSY_OK=1: a test runner's parallel workers); the notes keep the reason either way."""
    result.contended = ""
    if reason and os.environ.get("KERNELSMITH_BUSY_OK") == "1":
        result.notes.append(f"contended, credited anyway (KERNELSMITH_BUSY_OK=1): {reason}")
    elif reason:
        result.contended = reason


def _violation(result: EvalResult, problem: str | None) -> None:
    if problem and problem not in result.violations:
        result.violations.append(problem)
        result.error = result.error or "rejected while profiling: " + problem
        result.stage = result.stage or "profile"


def check_timed_outputs(prof: dict, result: EvalResult, checker: runner.Prestarted, seeds: list[int],
                        weights_seed: int) -> None:
    """The trusted checksums worker rebuilds the inputs of a random sample of the timed runs (drawn here,
    after the profile) from the seeds this process handed out, recomputes the reference, and judges the
    checksums the candidate's process took of those outputs."""
    runs, problem = checks.timed_runs(prof.get("checksums") or [], seeds)
    if problem or not runs:
        return _violation(result, problem or "the profile reported no checksums of its timed outputs")
    start = time.perf_counter()
    try:
        verdict = checker.run({"runs": runs, "seed": weights_seed})
    except runner.JobFailed as err:
        return _violation(result, f"the timed outputs could not be checked: {err.reason}")
    result.seconds["profile.checksums"] = runner.elapsed(start)
    record_phases(result, "profile.checksums", checker.gpu_lock)
    result.seconds["checked_runs"] = verdict["checked"]
    if verdict["failures"]:
        _violation(result, "wrong output at a timed run (caching, replay or work only when read): "
                   + verdict["failures"][0])


def apply_profile(prof: dict, result: EvalResult) -> None:
    result.gpu, result.torch_version = prof.get("gpu", ""), prof.get("torch", "")
    cand, eager = prof["timings"]["candidate"], prof["timings"]["eager"]
    result.timings_ms = {"candidate": cand["median"], "eager": eager["median"]}
    result.spread_ms = {name: [t["p10"], t["p90"]] for name, t in prof["timings"].items()}
    result.speedup_vs_eager = eager["median"] / cand["median"] if cand["median"] > 0 else None
    credit_jitter(result, checks.jittery(prof["timings"]))
    result.roofline = prof.get("roofline", {})
    result.seconds["profile_runs"] = cand["n"]
    if result.device == "cpu" and prof.get("flush_bytes"):
        result.notes.append(f"cache flush before each timed run: {prof['flush_bytes'] >> 20} MiB written")
    watch = prof.get("op_watch", "native")
    if watch != "native":
        result.notes.append(f"timed runs watched by the {watch}: the candidate's times include its host cost")
    for violation in prof.get("violations", []):
        if violation not in result.violations:
            result.violations.append(violation)
    if result.violations:
        result.error = "rejected while profiling: " + result.violations[0]
        result.stage = result.stage or "profile"
    from kernelsmith.evaluation.ceilings import percentages

    if result.roofline.get("ceilings"):
        result.roofline.update(percentages(result.roofline, cand["median"], result.precision))


def warm_workdir(workdir: Path, opts: EvalOptions) -> dict:
    """At a session's start, on its evaluation slot: the native op watch built, the baselines measured
    (both trusted work, off the critical path of the session's first profile)."""
    from kernelsmith import workdir as wd

    workdir = Path(workdir).resolve()
    reference = wd.sealed_reference(workdir, wd.WorkdirConfig.load(workdir))
    prepare_watch()
    return warm_baselines(reference, replace(opts, profile=True))


def evaluate_workdir(workdir: Path, opts: EvalOptions) -> EvalResult:
    """Evaluate a workdir's model_new.py; an edited reference or fixed file is a violation."""
    from kernelsmith import workdir as wd

    workdir = Path(workdir).resolve()
    config = wd.WorkdirConfig.load(workdir)
    result = evaluate(wd.sealed_reference(workdir, config), workdir / "model_new.py", opts)
    for violation in wd.fixed_file_changes(workdir, config):
        result.violations.append(violation)
        result.error = result.error or "rejected: " + violation
    if result.violations:
        result.reward = -1.0
    return result
