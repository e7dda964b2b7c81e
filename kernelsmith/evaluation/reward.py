"""The milestone reward of DESIGN.md, with configurable thresholds.

-1 when the build or correctness fails (or a rule is broken); 3 when more than
`margin` faster than both eager and torch.compile; 2 when more than `margin`
faster than eager; 1 otherwise. CUDA Agent found this milestone shape trains far
better than a continuous speed-up reward.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RewardThresholds:
    fail: float = -1.0
    correct: float = 1.0
    beats_eager: float = 2.0
    beats_both: float = 3.0
    margin: float = 0.05  # "more than 5% faster"


DEFAULT = RewardThresholds()


def milestone_reward(correct: bool, clean: bool, speedup_vs_eager: float | None,
                     speedup_vs_compile: float | None, t: RewardThresholds = DEFAULT) -> float:
    if not (correct and clean):
        return t.fail
    faster = 1.0 + t.margin
    beats_eager = speedup_vs_eager is not None and speedup_vs_eager > faster
    beats_compile = speedup_vs_compile is not None and speedup_vs_compile > faster
    if beats_eager and beats_compile:
        return t.beats_both
    if beats_eager:
        return t.beats_eager
    return t.correct


def reward_for(result, t: RewardThresholds = DEFAULT) -> float:
    """Reward of an EvalResult: timings from a contended machine earn no speed milestone."""
    if getattr(result, "contended", ""):
        return milestone_reward(result.correct, not result.violations, None, None, t)
    return milestone_reward(result.correct, not result.violations,
                            result.speedup_vs_eager, result.speedup_vs_compile, t)
