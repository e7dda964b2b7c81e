"""Checks the parent makes of what a profile worker reported (torch-free).

The profile worker has the candidate's code loaded, so its timers and its checksums are claims.
Each claim is checked against something the candidate cannot reach: the parent's clock around
every batch of timed runs, a trusted process's recomputation of the reference for a random sample
of timed runs, and eager timed in a process that never loaded candidate code.
"""

from __future__ import annotations

import os
import random
import statistics

# Names in the profile worker's reports, shared by both sides: the runs of eager timed before the candidate was
# imported (the calibration), and the suffix of a baseline timed without the sync before its start event.
CALIBRATE = "calibrate"
QUEUED = "@queued"
MIN_SLACK_MS = 0.2  # per run: the pipe round trip and scheduling jitter of two processes
REL_SLACK = 0.15  # of the candidate's own run time
CLOCK_SIGMAS = 5.0  # a disagreement beyond this many sigmas of the shift (and the slack) is a violation
CHARGE_SIGMAS = 2.0  # the candidate's extra time beyond this many is charged to it (unreported_time)
DRIFT_MIN_MS, DRIFT_REL = 0.1, 0.05  # how much longer eager's cycle may take after the candidate's import
DRIFT_SIGMAS = 3.0  # beyond the noise: a drift withholds credit, it is no violation
SPREAD_BUSY = 0.5  # (p90 - p10) / median above this: eager's means a busy machine, the candidate's a jittery one
# Timed runs whose outputs a trusted process recomputes, drawn after the candidate has reported every
# checksum. A candidate must fake more than half of its timed runs to move the median it is credited
# with; it then escapes the draw with probability below 0.5**16 (1.5e-5; 0.5**8 = 0.4% with 8, which an
# RL trainer's thousands of episodes would find). Each check costs one seeded input draw and one
# reference forward in the trusted worker.
CHECKED_RUNS = 16


def _overheads(host_sums: list[float], parent_ms: list[float]) -> list[float]:
    return [p - h for h, p in zip(host_sums, parent_ms)]


def _sigma(values: list[float]) -> float:
    """A robust standard deviation (1.4826 x the median absolute deviation)."""
    if len(values) < 2:
        return 0.0
    mid = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - mid) for v in values)


def _shift(cand: list[float], eager: list[float], most: int = 400) -> float:
    """How much larger cand's values are than eager's: the median of every pairwise difference (the
    Hodges-Lehmann shift). On a busy machine a bracket's overhead is bimodal (the run was preempted or
    not) and each sample's own median may land in either mode; the pairwise median moves only when one
    contender's runs, most of them, are shifted, which is what work outside the timed window does."""
    cand, eager = cand[::-(-len(cand) // most)], eager[::-(-len(eager) // most)]
    return statistics.median(c - e for c in cand for e in eager)


def helper_processes(clock) -> str | None:
    """A process beside the worker while its candidate was timed: compute there is watched by nothing (a
    server running torch.compile's code, say, with the candidate's kernel only copying its answers)."""
    extra = clock.most_processes - clock.expected_processes
    if extra > 0:
        return (f"{extra} process(es) besides the worker ran while the candidate was timed (compute outside "
                f"the watched process is not the candidate's kernel): {', '.join(clock.crowd)}")
    if clock.short_lived:
        return (f"a process besides the worker ran while the candidate was timed, started and ended inside "
                f"{clock.short_lived} timed run(s) (compute outside the watched process is not the candidate's kernel)")
    return None


def clock_disagreement(prof: dict, parent: dict[str, list[float]]) -> str | None:
    """The worker's timers against the parent's clock. Each bracket costs the parent the run's in-process
    host time plus the harness's own per-run work (the checksum, the pipe), the same code for both; so
    the candidate's extra beyond its reported time must match eager's within noise. A candidate that
    reports less time than it took, or does work after its timed window (an output that computes
    when read), shows up as extra time only it has."""
    reported = prof.get("batches") or {}
    if not parent or set(parent) != set(reported) or any(len(parent[n]) != len(reported[n]) for n in reported):
        return "the profile worker's timed runs do not match what the parent's clock saw"
    extra, noise = _extra_time(reported, parent, CLOCK_SIGMAS)
    slack = max(MIN_SLACK_MS, REL_SLACK * statistics.median(reported["candidate"])) + noise
    if extra > slack:
        return (f"the candidate's timed runs took {extra:.3g} ms longer each by the parent's clock than its "
                f"process reported, beyond eager's (allowed {slack:.3g} ms): a patched clock or work done "
                "outside the timed window")
    return None


def _extra_time(reported: dict, parent: dict, sigmas: float) -> tuple[float, float]:
    """(the candidate's extra time per run beyond what its process reported, beyond eager's; its noise):
    the shift of the two contenders' bracket overheads, and sigmas x the robust spread of that shift."""
    cand = _overheads(reported["candidate"], parent["candidate"])
    eager = _overheads(reported["eager"], parent["eager"])
    return _shift_and_noise(cand, eager, sigmas)


def _shift_and_noise(cand: list[float], eager: list[float], sigmas: float) -> tuple[float, float]:
    """The shift of cand over eager, and sigmas x the robust spread of that shift."""
    noise = sigmas * (_sigma(cand) + _sigma(eager)) / max(1, min(len(cand), len(eager))) ** 0.5
    return _shift(cand, eager), noise


def unreported_time(prof: dict, parent: dict[str, list[float]], cycles: dict[str, list[float]] | None = None,
                    calibration: list[tuple[float, float]] | None = None,
                    foreign: dict[str, list[float]] | None = None,
                    foreign_after: dict[str, list[float]] | None = None) -> float:
    """Milliseconds per timed run to charge to the candidate: its work outside the timed window that the
    parent's clock saw (beyond eager's harness work in the same brackets, beyond the clock's noise).

    clock_disagreement rejects only what no noise explains (MIN_SLACK_MS, REL_SLACK), so below that
    bound a candidate could move its work out of the events' window for free: finish its output in a
    patched harness method that runs after the end event, say (0.05 ms per run of a 0.1 ms kernel). Such
    work is the candidate's, whatever in its process ran it; charging it leaves no gain in hiding it.
    `cycles` (ParentClock.cycles) also cover the time between brackets, where the worker draws the next
    inputs and flushes the cache: an answer computed as the inputs are made (a patched input pool) is
    charged too. Between runs both contenders' harness work is alike, so only the shift counts. Work the
    candidate moves into that loop for both contenders alike cancels in the shift; `calibration` (eager's
    cycles before the candidate existed in the worker) shows it, and harness_growth charges it as well.
    `foreign` (ParentClock.foreign_cpu) is the CPU time threads the harness did not start spent in each
    run's gap: work run beside the loop, on another core, which lengthens no cycle (foreign_cpu_charge)."""
    reported = prof.get("batches") or {}
    charges = [_charge(reported, timed) for timed in (parent, cycles) if timed]
    charges.append(foreign_cpu_charge(foreign or {}, foreign_after or {}))
    return max(charges, default=0.0) + harness_growth(calibration or [], cycles or {})


def foreign_cpu_charge(foreign: dict[str, list[float]], after: dict[str, list[float]] | None = None) -> float:
    """CPU milliseconds per run that threads the worker did not have before the candidate was imported spent
    in the gaps before the candidate's timed runs, beyond the gaps before eager's, beyond noise.

    A thread of the candidate's that computes each answer as the harness draws the inputs, while the harness
    flushes the cache on its own thread, finishes before the timed call and lengthens no cycle where a core
    is free (on 2 cores it did by part of its work: 0.58 ms charged of about 1 ms moved, 2026-12-05). Its CPU
    time shows all the same. The candidate's OpenMP threads spinning after its run land in the next gap,
    whichever contender's it is, so they cancel in the shift; CPU time is charged as time, the most the
    moved work could have taken had it run in the window, one thread after another.

    A candidate that computes for eager's draws too (wasted work, free on a spare core) cancels in that shift;
    `after` (ParentClock.foreign_after) catches it: see after_eager_charge."""
    return max(_foreign_shift(foreign), after_eager_charge(after or {}, foreign))


def _foreign_shift(foreign: dict[str, list[float]]) -> float:
    cand, eager = foreign.get("candidate") or [], foreign.get("eager") or []
    if len(cand) < 4 or len(eager) < 4:
        return 0.0
    shift, noise = _shift_and_noise(cand, eager, CHARGE_SIGMAS)
    return max(0.0, shift - noise)


def after_eager_charge(after: dict[str, list[float]], foreign: dict[str, list[float]]) -> float:
    """CPU ms per candidate run that the candidate's threads spent in the gaps right after eager's runs.

    Those threads had none before its import, and no spin of theirs after a run of the candidate's reaches
    past the next gap, so all of their CPU there is work, whichever contender's run came next: its mean,
    less two standard errors, times the gaps per candidate run (every gap holds it alike, or only those
    before the candidate's runs, half of them)."""
    gaps, runs = after.get("eager") or [], len(foreign.get("candidate") or [])
    if len(gaps) < 4 or not runs:
        return 0.0
    noise = CHARGE_SIGMAS * statistics.pstdev(gaps) / len(gaps) ** 0.5
    return max(0.0, statistics.fmean(gaps) - noise) * sum(map(len, foreign.values())) / runs


def _charge(reported: dict, timed: dict[str, list[float]]) -> float:
    if not _paired(reported, timed):
        return 0.0
    extra, noise = _extra_time(reported, timed, CHARGE_SIGMAS)
    return max(0.0, extra - noise)


def _paired(reported: dict, timed: dict[str, list[float]]) -> bool:
    """Both contenders reported, with a parent's time for each of their runs."""
    return all(reported.get(n) and len(timed.get(n, ())) == len(reported[n]) for n in ("candidate", "eager"))


def harness_growth(calibration: list[tuple[float, float]], cycles: dict[str, list[float]]) -> float:
    """Milliseconds per run by which eager's cycles grew after the candidate's import, beyond noise.

    Eager is the same code before and after, so the growth is work added to the harness's loop once
    candidate code existed in the worker: an answer computed as each input is drawn, for eager's draws
    too, cancels in every comparison with eager but not in this one. harness_drift withholds credit
    only past a floor (DRIFT_MIN_MS: a machine that got busier); below it, a kernel of 0.05 ms could move
    all of its work out of its window for a 2x. Charged instead, such work buys nothing at any size.

    Eager's brackets are not compared so: on an H100, for an honest candidate, they were 0.079 ms (+-0.058)
    longer after the import than in the calibration, eager's own slowdown beside a candidate (the live
    eager, 0.136 ms against 0.079 ms in a clean process), and charging that took 0.021 ms off the honest
    kernel's credit (bench/results/h100-2026-12-05c). clock_readings keeps them, as a reading."""
    eager = _eager_cycles(calibration, cycles)
    return _growth(*eager) if eager else 0.0


def _growth(before: list[float], after: list[float]) -> float:
    return max(0.0, _shift(after, before) - _noise(before, after, CHARGE_SIGMAS))


def _eager_brackets(before: list[float], after: list[float]) -> tuple[list, list] | None:
    """Eager's brackets before the candidate's import (the first dropped, as for cycles) and after it."""
    return (before[1:], after) if len(before) >= 5 and len(after) >= 4 else None


def clock_readings(prof: dict, parent: dict, cycles: dict, calibration: list, foreign: dict | None = None,
                   foreign_after: dict | None = None, calibration_brackets: list | None = None) -> dict[str, float]:
    """What the parent's clock measured, in ms per run, each beside the noise it was judged against: the
    candidate's bracket and cycle time beyond eager's, and eager's cycle growth over the calibration. A
    result keeps them (EvalResult.clock), so a charge, or the lack of one, can be read against its noise."""
    readings, reported = {}, prof.get("batches") or {}
    for name, timed in (("bracket", parent), ("cycle", cycles)):
        if timed and _paired(reported, timed):
            extra, noise = _extra_time(reported, timed, CHARGE_SIGMAS)
            readings.update({f"{name}_extra_ms": extra, f"{name}_noise_ms": noise})
    cand, others = (foreign or {}).get("candidate") or [], (foreign or {}).get("eager") or []
    if cand and others:
        readings["foreign_cpu_extra_ms"] = _shift(cand, others)
    after_eager = (foreign_after or {}).get("eager") or []
    if after_eager:
        readings["foreign_cpu_after_eager_ms"] = statistics.fmean(after_eager)
    eager = _eager_cycles(calibration or [], cycles or {})
    if eager is not None:
        readings.update({"growth_ms": _shift(eager[1], eager[0]), "growth_noise_ms": _noise(*eager, CHARGE_SIGMAS)})
    brackets = _eager_brackets(calibration_brackets or [], (parent or {}).get("eager") or [])
    if brackets is not None:
        readings.update({"bracket_growth_ms": _shift(brackets[1], brackets[0]),
                         "bracket_growth_noise_ms": _noise(*brackets, CHARGE_SIGMAS)})
    return {key: round(value, 5) for key, value in readings.items()}


def _eager_cycles(calibration: list[tuple[float, float]], cycles: dict[str, list[float]]) -> tuple[list, list] | None:
    """Eager's cycles before the candidate's import and after it, or None when either has too few to say."""
    runs = [cycle for cycle, _ in calibration[1:]]  # the first run's cycle had no run before it
    after = cycles.get("eager") or []
    return (runs, after) if len(runs) >= 4 and len(after) >= 4 else None


def _noise(before: list[float], after: list[float], sigmas: float) -> float:
    """sigmas x the standard errors of the two samples' centres, added."""
    return sigmas * (_sigma(before) / len(before) ** 0.5 + _sigma(after) / len(after) ** 0.5)


def harness_drift(calibration: list[tuple[float, float]], cycles: dict[str, list[float]]) -> str:
    """Why eager's timed runs after the candidate's import say the harness's own per-run work changed, or ''.

    `calibration` holds (cycle ms, timed ms) of eager's runs before the candidate existed in the worker
    (ParentClock.calibration): there the loop around a timed call (the input draw, the flush, the bracket,
    the checksum) costs what the harness makes it cost. A candidate can move its work out of its timed
    window into that loop for both contenders alike (an input pool that also answers, a checksum step that
    also works on eager's runs); no comparison with eager in its own process sees that, but eager's cycles
    by the parent's clock then grow beside the candidate. So do they on a machine that got busy in between:
    either way the speed-up is not established. Nothing the worker reported after the import is used."""
    eager = _eager_cycles(calibration, cycles)
    if eager is None:
        return ""
    before, after = statistics.median(eager[0]), statistics.median(eager[1])
    allowed = max(DRIFT_MIN_MS, DRIFT_REL * before) + _noise(*eager, DRIFT_SIGMAS)
    if after - before <= allowed:
        return ""
    return (f"each of eager's timed runs took {after - before:.3g} ms longer by the parent's clock after the "
            f"candidate was loaded than before it ({before:.3g} -> {after:.3g} ms; allowed {allowed:.3g} ms): "
            "work moved out of the candidate's timed window, or a machine that got busy")


def busy(timings: dict) -> str:
    """Why the numbers look like a contended machine, or ''.

    Eager's spread says so: it is the reference's code, timed interleaved with the candidate, so a busy
    machine widens it. The candidate's own spread does not: a kernel of 0.08 ms timed with the sync
    before its start event carries its host path, whose jitter on an idle H100 spread an honest one over
    0.072-0.113 ms (bench/results/h100-2026-12-05b). A wide candidate spread is `jittery` instead."""
    t = timings.get("eager") or {}
    if t.get("median") and _spread(t) > SPREAD_BUSY:
        return (f"eager times spread {t['p10']:.4g}-{t['p90']:.4g} ms around a median of {t['median']:.4g} ms: "
                "the machine looked busy")
    return ""


def jittery(timings: dict) -> float | None:
    """The time to credit a candidate whose runs spread wider than SPREAD_BUSY, or None when they do not.

    A median credits the typical run; with a wide spread, work could sit in a minority of the runs (the
    first run's set-up, say) that the median never sees. The mean counts every run's work once, so the
    credit is the larger of the two: moving work between runs gains nothing."""
    t = timings.get("candidate") or {}
    if not t.get("median") or _spread(t) <= SPREAD_BUSY:
        return None
    return max(t["median"], t.get("mean", t["p90"]))  # a worker without "mean" is credited by its p90


def _spread(t: dict) -> float:
    return (t["p90"] - t["p10"]) / t["median"]


def timed_runs(checksums: list, seeds: list[int]) -> tuple[list[list], str]:
    """([index, seed, sums] for a random sample of the timed runs, drawn here after the profile, with the
    seeds this process handed out), or a violation: a count or a seed that is not the parent's record."""
    if len(checksums) != len(seeds):
        return [], (f"the profile reported {len(checksums)} timed outputs; the parent's clock saw {len(seeds)} "
                    "timed runs of the candidate")
    for index, (claim, seed) in enumerate(zip(checksums, seeds)):
        if not isinstance(claim, list) or len(claim) != 2 or claim[0] != seed:
            return [], (f"timed run {index} reports inputs the parent did not draw for it (inputs repeated, "
                        "or the harness's draw replaced)")
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    picked = sorted(rng.sample(range(len(seeds)), min(CHECKED_RUNS, len(seeds))))
    return [[i, seeds[i], checksums[i][1]] for i in picked], ""
