"""The math of `kernelsmith train ppo` and `kernelsmith train value` (issue 19): pure torch functions over
batched token tensors [batch, seq], kept the same as verl's (verl/trainer/ppo/core_algos.py and
verl/utils/torch_functional.py, read at verl commit b178a3cd, January 2026). docs/ppo-math.md has the
formulas, the defaults and every place this departs from verl.

`mask` is always the policy's own tokens (verl's `response_mask`): 1 on tokens the policy sampled, 0 on the
prompt, tool outputs and padding. Losses are averaged per token over the whole batch (verl's "token-mean")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["masked_sum", "masked_mean", "masked_var", "masked_whiten", "token_mean", "gae",
           "token_rewards_from_outcome", "token_rewards_with_milestones", "PolicyLoss", "policy_loss",
           "ValueLoss", "value_loss", "kl_penalty", "entropy_from_logits"]


def masked_sum(values: Tensor, mask: Tensor, axis: int | None = None) -> Tensor:
    """Sum of `values` where `mask` is set; NaN or inf outside the mask cannot leak in.
    Same as verl/utils/torch_functional.py masked_sum."""
    return (torch.where(mask.bool(), values, 0.0) * mask).sum(dim=axis)


def masked_mean(values: Tensor, mask: Tensor, axis: int | None = None) -> Tensor:
    """Mean of `values` over the mask (denominator + 1e-8, so an empty mask gives 0).
    Same as verl/utils/torch_functional.py masked_mean."""
    return masked_sum(values, mask, axis) / (mask.sum(dim=axis) + 1e-8)


def masked_var(values: Tensor, mask: Tensor) -> Tensor:
    """Unbiased (Bessel-corrected) variance over the mask; fewer than 2 masked elements is an error.
    Same as verl/utils/torch_functional.py masked_var (unbiased=True)."""
    count = mask.sum()
    if count < 2:
        raise ValueError(f"masked_var needs at least 2 masked elements, got {int(count)}")
    centered = values - masked_mean(values, mask)
    return masked_mean(centered**2, mask) * count / (count - 1)


def masked_whiten(values: Tensor, mask: Tensor, shift_mean: bool = True) -> Tensor:
    """(values - mean) / sqrt(var + 1e-8) with mean and unbiased variance over the mask.
    Same as verl/utils/torch_functional.py masked_whiten (positions outside the mask are transformed too)."""
    mean = masked_mean(values, mask)
    whitened = (values - mean) * torch.rsqrt(masked_var(values, mask) + 1e-8)
    return whitened + mean if not shift_mean else whitened


def token_mean(losses: Tensor, mask: Tensor, num_tokens: int | Tensor | None = None) -> Tensor:
    """Per-token loss averaging: the sum of `losses` over the batch's masked tokens divided by their count,
    so every policy token weighs the same, whatever its sequence's length. `num_tokens` replaces the count
    for gradient accumulation (pass the mini-batch's token count to every micro-batch, then sum).
    verl/trainer/ppo/core_algos.py agg_loss, loss_agg_mode="token-mean", num_tokens as its batch_num_tokens
    (dp_size 1). Departs: an empty mask gives 0 here, NaN (0/0) there."""
    count = mask.sum() if num_tokens is None else torch.as_tensor(num_tokens)
    return masked_sum(losses, mask) / count.clamp(min=1)


def _check_rewards_on_policy_tokens(token_rewards: Tensor, mask: Tensor) -> None:
    stray = torch.where(mask.bool(), 0.0, token_rewards.abs())
    if stray.max() > 0:
        rows = sorted({int(r) for r in stray.nonzero()[:, 0]})
        raise ValueError(f"rows {rows} have a reward on a token outside the policy mask: GAE would drop it "
                         "(place it with token_rewards_from_outcome / token_rewards_with_milestones)")


def gae(token_rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0, lam: float = 0.95,
        whiten: bool = True) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over the policy's tokens only: returns (advantages, returns).

    Walking back over the sequence, a token outside the mask (a tool output, padding) changes nothing: the
    value and advantage carried from the next policy token pass across it untouched, so the result on policy
    tokens is the one the sequence with those spans cut out would give. returns = advantages + values
    (before whitening); advantages are then whitened over the mask. Both are 0 outside the mask.
    Matches verl/trainer/ppo/core_algos.py compute_gae_advantage_return, which skips masked tokens since
    verl PR #2337 ("mask out observation token in GAE"). Departs: verl leaves carried numbers at masked
    positions (we zero them) and silently drops a reward on a masked token (we raise); whiten=False is ours."""
    _check_rewards_on_policy_tokens(token_rewards, mask)
    on = mask.bool()
    with torch.no_grad():
        next_value, carry = torch.zeros_like(values[:, 0]), torch.zeros_like(values[:, 0])
        advantages = torch.zeros_like(values)
        for t in reversed(range(values.shape[1])):
            delta = token_rewards[:, t] + gamma * next_value - values[:, t]
            carry = torch.where(on[:, t], delta + gamma * lam * carry, carry)
            next_value = torch.where(on[:, t], values[:, t], next_value)
            advantages[:, t] = carry
        returns = torch.where(on, advantages + values, 0.0)
        advantages = masked_whiten(advantages, mask) if whiten else advantages
    return torch.where(on, advantages, 0.0), returns


def _last_policy_index(mask: Tensor) -> Tensor:
    """[batch, seq] -> for each position, the index of the last policy token at or before it (-1: none)."""
    positions = torch.arange(mask.shape[-1], device=mask.device).expand(mask.shape)
    return torch.cummax(torch.where(mask.bool(), positions, -1), dim=-1).values


def token_rewards_from_outcome(final_reward: Sequence[float] | Tensor, mask: Tensor) -> Tensor:
    """Token rewards [batch, seq] (float32) that are 0 except the outcome reward on each row's last policy
    token. verl's agent loop (verl/experimental/agent_loop/agent_loop.py, rm_scores) puts the score on the last
    non-padding response token instead, which is a tool/user token if a trajectory ends on one (its GAE then
    drops the reward); tool_agent_loop.py avoids ending on a tool turn. Here it is always a policy token."""
    last = _last_policy_index(mask)[:, -1]
    if (last < 0).any():
        raise ValueError(f"rows {(last < 0).nonzero()[:, 0].tolist()} have no policy tokens to reward")
    rewards = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    rewards[torch.arange(mask.shape[0], device=mask.device), last] = torch.as_tensor(
        final_reward, dtype=torch.float32, device=mask.device)
    return rewards


def token_rewards_with_milestones(final_reward: Sequence[float] | Tensor, mask: Tensor,
                                  milestones: Sequence[Sequence[tuple[int, float]]]) -> Tensor:
    """token_rewards_from_outcome plus per-turn milestone rewards: `milestones[row]` lists (token_index,
    reward). A milestone on a non-policy token (e.g. inside the tool output that showed it) goes to the last
    policy token at or before that index: the action that earned it. Rewards at one token add up.
    Not in verl (its tool_agent_loop collects turn_scores/tool_rewards but no estimator places them)."""
    if len(milestones) != mask.shape[0]:
        raise ValueError(f"{len(milestones)} milestone lists for a batch of {mask.shape[0]}")
    rewards, snap = token_rewards_from_outcome(final_reward, mask), _last_policy_index(mask)
    for row, marks in enumerate(milestones):
        for index, reward in marks:
            if snap[row, index] < 0:
                raise ValueError(f"row {row}: milestone at token {index} comes before any policy token")
            rewards[row, snap[row, index]] += reward
    return rewards


class PolicyLoss(NamedTuple):
    loss: Tensor  # scalar, differentiable
    clipfrac: Tensor  # verl's actor/pg_clipfrac: share of policy tokens where the clip is active
    approx_kl: Tensor  # verl's actor/ppo_kl: mean of (old_log_prob - log_prob) over the mask
    clipfrac_lower: Tensor  # verl's actor/pg_clipfrac_lower: share capped by the dual clip (0 without it)


def _dual_clip(losses: Tensor, advantages: Tensor, c: float, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Dual-clip PPO (arXiv 1912.09729): for A < 0 the loss is capped at -A * c, c > 1."""
    if c <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {c}")
    cap = -advantages * c
    capped = ((losses > cap) & (advantages < 0)).float()
    return torch.where(advantages < 0, torch.minimum(losses, cap), losses), masked_mean(capped, mask)


def policy_loss(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, mask: Tensor, clip_low: float = 0.2,
                clip_high: float = 0.28, dual_clip: float | None = None,
                num_tokens: int | Tensor | None = None) -> PolicyLoss:
    """The clipped PPO objective with asymmetric clipping, per token: max(-A r, -A clip(r, 1-low, 1+high)) with
    r = exp(clamp(log_prob - old_log_prob, -20, 20)), then token_mean over the mask.
    Same as verl/trainer/ppo/core_algos.py compute_policy_loss_vanilla (clip_ratio_low, clip_ratio_high,
    clip_ratio_c, loss_agg_mode="token-mean"). Departs: verl always applies the dual clip (clip_ratio_c
    default 3.0); here it is off unless dual_clip is given. Pass dual_clip=3.0 for verl's behaviour."""
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    losses, lower = torch.maximum(unclipped, clipped), torch.zeros((), device=ratio.device)
    if dual_clip is not None:
        losses, lower = _dual_clip(losses, advantages, dual_clip, mask)
    clipfrac = masked_mean((clipped > unclipped).float(), mask)
    return PolicyLoss(token_mean(losses, mask, num_tokens), clipfrac.detach(),
                      masked_mean(-log_ratio, mask).detach(), lower.detach())


class ValueLoss(NamedTuple):
    loss: Tensor  # scalar, differentiable
    clipfrac: Tensor  # verl's critic/vf_clipfrac: share of tokens where the clipped error is the larger


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip: float = 0.2,
               num_tokens: int | Tensor | None = None) -> ValueLoss:
    """Clipped value loss: 0.5 * token_mean(max((v - R)^2, (clamp(v, v_old - clip, v_old + clip) - R)^2)).
    Same as verl/trainer/ppo/core_algos.py compute_value_loss (cliprange_value, loss_agg_mode="token-mean").
    Departs only in the default: verl's critic.cliprange_value is 0.5; 0.2 here (issue 19's brief)."""
    clipped = torch.clamp(values, old_values - clip, old_values + clip)
    plain, capped = (values - returns) ** 2, (clipped - returns) ** 2
    loss = 0.5 * token_mean(torch.maximum(plain, capped), mask, num_tokens)
    return ValueLoss(loss, masked_mean((capped > plain).float(), mask).detach())


def _k3(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    log_ratio = torch.clamp(ref_log_prob - log_prob, min=-20, max=20)
    return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10, max=10)


_KL = {"kl": lambda lp, ref: lp - ref, "k1": lambda lp, ref: lp - ref,
       "abs": lambda lp, ref: (lp - ref).abs(),
       "mse": lambda lp, ref: 0.5 * (lp - ref).square(), "k2": lambda lp, ref: 0.5 * (lp - ref).square(),
       "low_var_kl": _k3, "k3": _k3}


def kl_penalty(log_prob: Tensor, ref_log_prob: Tensor, kind: str) -> Tensor:
    """Per-token estimate of KL(policy || ref) from sampled tokens' log-probs (Schulman, "Approximating KL
    divergence"): "kl"/"k1" log p - log q; "abs" |log p - log q|; "mse"/"k2" 0.5 (log p - log q)^2;
    "low_var_kl"/"k3" q/p - log(q/p) - 1 (clamped as verl does). A "+" suffix ("k3+") keeps the value and
    takes the gradient of k2 (straight-through). Same as verl/trainer/ppo/core_algos.py kl_penalty and
    kl_penalty_forward; verl at b178a3cd raises NotImplementedError on "+" names (it forgot to strip the
    suffix; fixed in verl PR #6058), here they work as documented. "full" is unsupported, as in verl."""
    base = kind[:-1] if kind.endswith("+") else kind
    if base not in _KL:
        raise ValueError(f"unknown KL estimator {kind!r}; one of {sorted(_KL)} (optionally with '+')")
    value = _KL[base](log_prob, ref_log_prob)
    if not kind.endswith("+") or base in ("mse", "k2"):
        return value
    k2 = 0.5 * (log_prob - ref_log_prob).square()
    return k2 - k2.detach() + value.detach()


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the softmax over the last axis, [..., vocab] -> [...]: logsumexp(z) - sum(softmax(z) z).
    Same as verl/utils/torch_functional.py entropy_from_logits."""
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)
