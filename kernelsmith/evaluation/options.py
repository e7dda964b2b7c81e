"""EvalOptions: what one evaluation asks for (device, precision, trials, budgets, the baselines cache)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith.evaluation.reward import DEFAULT, RewardThresholds

COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
# The clean eager is credited; eager timed beside the candidate only guards it. A clean eager slower
# than the live one by more than EAGER_DRIFT was measured on a busy machine (it would inflate every
# speed-up): re-measured, then contended. A live eager slower than the clean one understates the
# speed-up instead (the candidate's process is the slower place; on the H200 by 15-25% for a
# launch-heavy eager, bench/probes/eager_drift.py), so it only re-measures a cached entry when it is
# more than LIVE_SLOWDOWN slower, and never withholds credit.
EAGER_DRIFT = 0.10
LIVE_SLOWDOWN = 1.0


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
    live_slowdown: float = LIVE_SLOWDOWN
    seed: int | None = None
    cache_path: Path | None = None
    # after an evaluation, start the next verify's candidate worker (runner.Spares): for a session, which
    # evaluates its workdir again and again; not for one-shot commands, where it would never be used
    spare_workers: bool = False
    # a verify starts the profile workers of these files (runner.Spares), so that a profile next finds torch
    # imported: implied by spare_workers; on its own (a session on the CPU) only that, within the verify
    profile_spares: bool = False
    thresholds: RewardThresholds = field(default_factory=lambda: DEFAULT)

    def threads(self) -> int | None:
        """On the CPU, eager and the candidate get the same threads: the cores this process may use."""
        return len(os.sched_getaffinity(0)) if self.device == "cpu" and hasattr(os, "sched_getaffinity") else None

    def wants_compile(self) -> bool:
        return self.device == "cuda" if self.compile_baseline is None else self.compile_baseline


def seed_for(opts: EvalOptions) -> int:
    return opts.seed if opts.seed is not None else int.from_bytes(os.urandom(6), "little")
