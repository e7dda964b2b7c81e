"""verl's custom reward function (`reward.custom_reward_function.path: pkg://kernelsmith.train.verl.reward`,
`name: compute_score`): the reward the agent loop already computed, and nothing else.

The agent loop sets each sample's `reward_score` itself (verl then skips its reward loop for that sample):
the session's outcome as kernelsmith's signed ledger records it, the milestone reward of the best kernel
the session committed (-1 when none verified), after every kernel was built, verified and timed by the
sandbox pool's jailed workers inside KernelEnv. This function re-verifies nothing. It exists for the paths
where verl calls its reward manager anyway: it reads the same number from the sample's extra fields, which
verl's reward managers hand over as `extra_info`, and scores a sample without one (a rollout that crashed
before its end) 0, the failed sample's reward."""

from __future__ import annotations

from typing import Any

FIELD = "kernelsmith"  # the agent loop's extra field with the session's outcome
FAILED = 0.0


def outcome_of(extra_info: dict[str, Any] | None) -> dict[str, Any]:
    """The session's outcome as the agent loop wrote it ({} when there is none)."""
    found = (extra_info or {}).get(FIELD)
    return found if isinstance(found, dict) else {}


def reward_info(outcome: dict[str, Any]) -> dict[str, Any]:
    """The per-sample numbers verl logs beside the score (the same keys for every sample, as verl needs)."""
    failed = bool(outcome.get("error")) or "reward" not in outcome
    reward = FAILED if failed else float(outcome["reward"])
    return {"score": reward, "kernelsmith_reward": reward, "verified": float(reward > 0),
            "failed": float(failed)}


def compute_score(data_source: str = "", solution_str: str = "", ground_truth: Any = None,
                  extra_info: dict[str, Any] | None = None, **_: Any) -> dict[str, Any]:
    """verl's compute_score signature; the score is the ledger's reward the agent loop recorded."""
    return reward_info(outcome_of(extra_info))
