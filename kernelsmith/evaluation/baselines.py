"""The compile-baselines cache (parent side): keys, the eager-drift rule, locked merges.

Baselines are measured in a worker that never loads candidate code (the "baselines" job) and
cached per task source, device, precision, GPU name and torch version.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

from kernelsmith.evaluation import build_plan as build, cpu_caches, runner
from kernelsmith.evaluation.checks import QUEUED
from kernelsmith.evaluation.options import COMPILE_MODES, EvalOptions, seed_for
from kernelsmith.evaluation.result import EvalResult

# How an entry's numbers were taken: each baseline by two timers (a device sync before the start event,
# and queued behind the cache flush as do_bench times it), the faster median credited. Entries without it
# were timed with the sync alone, up to 5.5% slower for torch.compile (docs/eval-methodology.md): re-measured.
TIMERS = "settled+queued"


def task_digest(source: bytes, device: str, precision: str, modes: tuple[str, ...] = COMPILE_MODES) -> str:
    """The task part of a baselines cache key: the reference text, device, precision and compile modes."""
    digest = hashlib.sha256(source)
    digest.update(json.dumps([device, precision, list(modes)]).encode())
    return digest.hexdigest()[:24]


def task_key(reference: Path, opts: EvalOptions) -> str:
    return task_digest(Path(reference).read_bytes(), opts.device, opts.precision, baseline_modes(opts))


def cache_key(digest: str, gpu, torch_version) -> str:
    """One baselines cache entry: a task on one GPU model with one torch version."""
    return f"{digest}|{gpu}|{torch_version}"


def default_cache_path(reference: Path) -> Path:
    state = Path(reference).resolve().parent / ".kernelsmith"
    if state.is_dir():
        return state / "baselines.json"
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "kernelsmith" / "baselines.json"


def baseline_modes(opts: EvalOptions) -> tuple[str, ...]:
    return COMPILE_MODES if opts.wants_compile() else ()


def apply_baselines(reference: Path, opts: EvalOptions, prof: dict, result: EvalResult) -> None:
    """Eager (and torch.compile, when asked) from a process that never loaded candidate code, cached.

    The eager that is credited is the clean one, so a candidate that slows eager down in its own process
    gains nothing. The live eager timed beside the candidate guards the clean one: a clean eager slower
    than it by more than the drift, after one re-measurement, means the baselines were taken on a busy
    machine, and the result is marked contended (no speed-up reward)."""
    cache_path = opts.cache_path or default_cache_path(reference)
    key = cache_key(task_key(reference, opts), prof.get("gpu"), prof.get("torch"))
    entry, fresh = build.read_json(cache_path).get(key), False
    live_eager = prof["timings"]["eager"]["median"]
    if entry is not None and not current(entry):
        result.notes.append("baselines re-measured: the cached entry was timed by one timer only")
        entry = None
    if entry is not None and (_inflated(entry, live_eager, opts) or _stale(entry, live_eager, opts)):
        result.notes.append(f"baselines re-measured: live eager {live_eager:.4g} ms, cached eager {entry['eager_ms']:.4g} ms")
        entry = None
    if entry is None:
        entry, fresh = measure_baselines(reference, opts), True  # never under the cache lock: up to minutes
        if entry is None:
            result.contended = "the clean baselines failed to run; speed-ups are unknown"
            return
        update_cache(cache_path, key, entry)
    else:
        seeded = f", seeded from {entry['seeded_from']}" if entry.get("seeded_from") else ""
        result.notes.append(f"baselines from cache (live eager agrees with the cached{seeded})")
    _credit(entry, live_eager, fresh, opts, result)


def current(entry: dict) -> bool:
    """An entry whose baselines were timed the way this version credits them."""
    return entry.get("timers") == TIMERS


def credited(timings: dict, name: str) -> float:
    """A baseline's credited median: the faster of its two timers (the queued one only on the GPU)."""
    medians = [timings[key]["median"] for key in (name, name + QUEUED) if key in timings]
    return min(medians)


def settled_eager(entry: dict) -> float:
    """The clean eager as the live one is timed (a device sync before the start event, so its host path
    counts): what the live eager is compared with. The credited eager is the faster of two timers, and on
    a launch-bound task the queued one hides most of the host path, which the live eager cannot."""
    return (entry.get("by_timer") or {}).get("eager", entry["eager_ms"])


def _inflated(entry: dict, live_eager: float, opts: EvalOptions) -> bool:
    """The clean eager slower than the live one: measured while the machine was busy."""
    return settled_eager(entry) - live_eager > opts.eager_drift * live_eager


def _stale(entry: dict, live_eager: float, opts: EvalOptions) -> bool:
    """The live eager far slower than the cached clean one: the machine has changed since."""
    return live_eager - settled_eager(entry) > opts.live_slowdown * settled_eager(entry)


def _credit(entry: dict, live_eager: float, fresh: bool, opts: EvalOptions, result: EvalResult) -> None:
    candidate = result.timings_ms["candidate"]
    result.timings_ms.update({"eager": entry["eager_ms"], "eager_live": live_eager})
    result.speedup_vs_eager = entry["eager_ms"] / candidate if candidate > 0 else None
    if fresh and _inflated(entry, live_eager, opts):
        result.contended = (f"eager in a clean process ({entry['eager_ms']:.4g} ms) is slower than eager timed beside "
                            f"the candidate ({live_eager:.4g} ms) by more than {opts.eager_drift:.0%}: the machine "
                            "was busy while the baselines were measured")
    elif live_eager > settled_eager(entry) * (1 + opts.eager_drift):
        result.notes.append(f"eager timed beside the candidate ({live_eager:.4g} ms) is slower than in a clean process "
                            f"({settled_eager(entry):.4g} ms, the same timer); the clean one is credited, so a candidate "
                            "that slows eager down gains nothing, and the candidate's own speed-up may be understated")
    _note_timers(entry, result)
    if entry.get("compile_ms"):
        best_mode = min(entry["compile_ms"], key=entry["compile_ms"].get)
        result.timings_ms.update({f"compile:{m}": t for m, t in entry["compile_ms"].items()})
        result.timings_ms["compile"] = entry["compile_ms"][best_mode]
        result.compile_mode = best_mode
        result.speedup_vs_compile = entry["compile_ms"][best_mode] / candidate if candidate > 0 else None


def _note_timers(entry: dict, result: EvalResult) -> None:
    """Say so where eager is credited at a timer the candidate cannot have: more than 5% apart."""
    settled = settled_eager(entry)
    if settled > entry["eager_ms"] * 1.05:
        result.notes.append(
            f"eager is credited at {entry['eager_ms']:.4g} ms, queued behind the cache flush as do_bench times it; "
            f"the candidate is timed with a device sync before its start, so its host path counts, and eager so "
            f"timed took {settled:.4g} ms: on a task this short the speed-up is understated by up to "
            f"{settled / entry['eager_ms']:.2f}x")


def measure_baselines(reference: Path, opts: EvalOptions, skip_platforms: list | None = None) -> dict | None:
    """Eager and compile in a trusted worker. skip_platforms: [gpu, torch] pairs the cache has
    already, for which the worker measures nothing and answers {"cached": True, "gpu", "torch"}."""
    job = {"kind": "baselines", "reference": str(reference), "device": opts.device, "precision": opts.precision,
           "seed": seed_for(opts), "compile_modes": list(baseline_modes(opts)), "min_runs": opts.min_runs,
           "min_seconds": opts.min_seconds, "cwd": str(Path(reference).parent), "threads": opts.threads(),
           "skip_platforms": skip_platforms or [], **cpu_caches.job_fields(opts.device)}
    try:
        value = runner.run_job(job, max(opts.timeout_s, 1800.0))
    except runner.JobFailed:
        return None
    if value.get("cached"):
        return value
    timings = value["timings"]
    modes = [name.split(":", 1)[1] for name in timings if name.startswith("compile:") and not name.endswith(QUEUED)]
    return {"eager_ms": credited(timings, "eager"), "compile_ms": {m: credited(timings, f"compile:{m}") for m in modes},
            "by_timer": {name: t["median"] for name, t in timings.items()}, "timers": TIMERS,
            "warmup_s": value["warmup_s"], "measured_at": time.time(), "platform": [value["gpu"], value["torch"]]}


def warm(reference: Path, opts: EvalOptions) -> dict:
    """A session's baselines, measured when it starts, before any candidate of it runs, so that its
    first profile finds them cached; nothing is measured when this GPU and torch have them already.
    Runs on the session's evaluation slot, so no candidate shares the GPU with it."""
    start = time.perf_counter()
    cache_path = opts.cache_path or default_cache_path(reference)
    digest = task_key(reference, opts)
    have = [key.split("|")[1:] for key, entry in build.read_json(cache_path).items()
            if key.startswith(digest + "|") and current(entry)]
    entry = measure_baselines(reference, opts, skip_platforms=have)
    if entry is None:
        return {"ok": False, "seconds": round(time.perf_counter() - start, 3)}
    if not entry.get("cached"):
        update_cache(cache_path, cache_key(digest, *entry["platform"]), entry)
    return {"ok": True, "cached": bool(entry.get("cached")), "seconds": round(time.perf_counter() - start, 3)}


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
