"""The PPO math of `kernelsmith train ppo` / `train value` (kernelsmith/train/ppo.py, docs/ppo-math.md):
what a user checks before trusting a trainer. GAE by hand with a tool span in the middle, GAE against verl's
formula, the asymmetric clip at its boundaries (gradients by autograd), per-token averaging over a ragged
mask, value clipping, the KL estimators against their definitions, entropy. CPU, every tensor seeded."""

from __future__ import annotations

import math

import pytest
import torch

from kernelsmith.train import ppo


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def verl_gae_without_masking(rewards, values, mask, gamma, lam):
    """verl's compute_gae_advantage_return as it was before it skipped observation tokens (verl PR #2337),
    i.e. the TRL formula: the straightforward recursion over every position, then masked whitening with
    verl's masked_whiten written out (unbiased variance, eps 1e-8)."""
    last, advantages = torch.zeros(rewards.shape[0]), []
    for t in reversed(range(rewards.shape[1])):
        next_value = values[:, t + 1] if t < rewards.shape[1] - 1 else 0.0
        last = rewards[:, t] + gamma * next_value - values[:, t] + gamma * lam * last
        advantages.append(last)
    return _whitened_and_returns(advantages, values, mask)


def _whitened_and_returns(advantages: list, values, mask):
    """The end both transcriptions share: advantages (collected back to front) whitened with verl's
    masked_whiten written out (unbiased variance, eps 1e-8), and returns = advantages + values."""
    advantages = torch.stack(advantages[::-1], dim=1)
    returns = advantages + values
    n = mask.sum()
    mean = (advantages * mask).sum() / n
    var = (((advantages - mean) ** 2) * mask).sum() / n * n / (n - 1)
    return (advantages - mean) / torch.sqrt(var + 1e-8), returns


def verl_gae(rewards, values, mask, gamma, lam):
    """verl's compute_gae_advantage_return today (verl/trainer/ppo/core_algos.py, since PR #2337), transcribed:
    masked positions carry the next policy token's value and advantage; then masked_whiten."""
    next_value, last, advantages = 0, 0, []
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        new_last = delta + gamma * lam * last
        next_value = values[:, t] * mask[:, t] + (1 - mask[:, t]) * next_value
        last = new_last * mask[:, t] + (1 - mask[:, t]) * last
        advantages.append(last)
    return _whitened_and_returns(advantages, values, mask)


# ---------------------------------------------------------------- GAE

# policy tokens p0 p1, a two-token tool output, policy token p2, two padding tokens
TOOL_MASK = torch.tensor([[1, 1, 0, 0, 1, 0, 0]])
TOOL_VALUES = torch.tensor([[0.5, 0.6, 9.0, -9.0, 0.8, 0.0, 0.0]])  # the tool span's values are junk


def test_gae_by_hand_with_a_tool_span_gamma_1_lambda_095():
    rewards = ppo.token_rewards_from_outcome([1.0], TOOL_MASK)
    adv, ret = ppo.gae(rewards, TOOL_VALUES, TOOL_MASK, gamma=1.0, lam=0.95, whiten=False)
    # by hand over p0 p1 p2 (values 0.5 0.6 0.8, reward 1 on p2):
    # A2 = 1 - 0.8 = 0.2; A1 = (0.8 - 0.6) + 0.95 * 0.2 = 0.39; A0 = (0.6 - 0.5) + 0.95 * 0.39 = 0.4705
    torch.testing.assert_close(adv, torch.tensor([[0.4705, 0.39, 0, 0, 0.2, 0, 0]]))
    torch.testing.assert_close(ret, torch.tensor([[0.9705, 0.99, 0, 0, 1.0, 0, 0]]))


@pytest.mark.parametrize("whiten", [False, True])
def test_gae_across_a_tool_span_equals_gae_with_the_span_removed(whiten):
    g = gen(0)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 0],
                         [1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0]])
    values = torch.randn(mask.shape, generator=g) * 3  # junk on the tool tokens too
    rewards = ppo.token_rewards_with_milestones([1.0, -0.5], mask, [[(2, 0.3)], [(4, 0.2)]])
    adv, ret = ppo.gae(rewards, values, mask, gamma=0.97, lam=0.95, whiten=whiten)
    # the same trajectories with the non-policy tokens cut out, left-aligned and right-padded
    keep = [row.bool() for row in mask]
    width = max(int(k.sum()) for k in keep)
    short_mask = torch.zeros(2, width, dtype=torch.long)
    short_values, short_rewards = torch.zeros(2, width), torch.zeros(2, width)
    for i, k in enumerate(keep):
        n = int(k.sum())
        short_mask[i, :n], short_values[i, :n], short_rewards[i, :n] = 1, values[i][k], rewards[i][k]
    short_adv, short_ret = ppo.gae(short_rewards, short_values, short_mask, gamma=0.97, lam=0.95, whiten=whiten)
    for i, k in enumerate(keep):
        n = int(k.sum())
        torch.testing.assert_close(adv[i][k], short_adv[i, :n])
        torch.testing.assert_close(ret[i][k], short_ret[i, :n])
        assert (adv[i][~k] == 0).all() and (ret[i][~k] == 0).all()
    # and the junk values on tool tokens do not matter
    junk = values.clone()
    junk[mask == 0] = torch.randn(int((mask == 0).sum()), generator=g) * 100
    torch.testing.assert_close(ppo.gae(rewards, junk, mask, gamma=0.97, lam=0.95, whiten=whiten)[0], adv)


def test_gae_without_tool_tokens_equals_verls_formula():
    g = gen(1)
    lengths = [9, 5, 7]  # right padding; verl's critic zeroes values there (dp_critic: values * response_mask)
    mask = (torch.arange(9)[None, :] < torch.tensor(lengths)[:, None]).long()
    values = torch.randn(3, 9, generator=g) * mask
    rewards = ppo.token_rewards_from_outcome(torch.randn(3, generator=g), mask)
    rewards += torch.randn(3, 9, generator=g) * 0.1 * mask  # e.g. KL shaping on every policy token
    for gamma, lam in [(1.0, 0.95), (0.9, 0.7)]:
        adv, ret = ppo.gae(rewards, values, mask, gamma=gamma, lam=lam)
        ref_adv, ref_ret = verl_gae_without_masking(rewards, values, mask, gamma, lam)
        on = mask.bool()
        torch.testing.assert_close(adv[on], ref_adv[on])
        torch.testing.assert_close(ret[on], ref_ret[on])


def test_gae_with_tool_spans_equals_verls_masked_gae():
    g = gen(8)
    mask = (torch.rand(5, 30, generator=g) > 0.4).float()
    mask[:, 0], mask[:, -4:] = 1, 0
    values = torch.randn(5, 30, generator=g) * mask  # verl's critic zeroes values off the mask
    rewards = ppo.token_rewards_from_outcome(torch.randn(5, generator=g), mask)
    adv, ret = ppo.gae(rewards, values, mask, gamma=1.0, lam=0.95)
    ref_adv, ref_ret = verl_gae(rewards, values, mask, 1.0, 0.95)
    on = mask.bool()
    torch.testing.assert_close(adv[on], ref_adv[on])
    torch.testing.assert_close(ret[on], ref_ret[on])


def test_gae_whitens_advantages_over_the_mask_only():
    g = gen(2)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 0, 1, 0, 0]])
    rewards = ppo.token_rewards_from_outcome(torch.tensor([2.0, -1.0]), mask)
    adv, _ = ppo.gae(rewards, torch.randn(2, 8, generator=g), mask)
    on = adv[mask.bool()]
    assert abs(float(on.mean())) < 1e-6 and abs(float(on.std(unbiased=True)) - 1) < 1e-4


def test_gae_refuses_a_reward_on_a_tool_token():
    rewards = torch.zeros(1, 7)
    rewards[0, 2] = 1.0  # inside the tool span: verl would drop it silently
    with pytest.raises(ValueError, match="outside the policy mask"):
        ppo.gae(rewards, TOOL_VALUES, TOOL_MASK)


# ---------------------------------------------------------------- reward placement

def test_outcome_reward_goes_on_the_last_policy_token_not_a_trailing_tool_output():
    mask = torch.tensor([[0, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 1, 1, 0]])
    rewards = ppo.token_rewards_from_outcome([0.5, 1.0, -1.0], mask)
    assert rewards.tolist() == [[0, 0, 0.5, 0, 0], [0, 0, 0, 0, 1.0], [0, 0, 0, -1.0, 0]]
    with pytest.raises(ValueError, match="no policy tokens"):
        ppo.token_rewards_from_outcome([1.0], torch.zeros(1, 4))


def test_milestones_add_at_their_token_or_the_policy_token_before_a_tool_span():
    mask = torch.tensor([[1, 1, 0, 0, 1, 1]])
    # a milestone at 1 (policy token), one at 3 (in the tool output that showed it: goes to token 1), one at 5
    rewards = ppo.token_rewards_with_milestones([1.0], mask, [[(1, 0.1), (3, 0.2), (5, 0.25)]])
    torch.testing.assert_close(rewards, torch.tensor([[0, 0.3, 0, 0, 0, 1.25]]))
    with pytest.raises(ValueError, match="before any policy token"):
        ppo.token_rewards_with_milestones([1.0], torch.tensor([[0, 1]]), [[(0, 0.1)]])


# ---------------------------------------------------------------- policy loss

def clip_case(advantages, ratios, **kw):
    old = torch.log(torch.tensor([[0.3, 0.5, 0.2, 0.4, 0.6]]))
    new = (old + torch.log(torch.tensor([ratios]))).requires_grad_(True)
    out = ppo.policy_loss(old, new, torch.tensor([advantages]), torch.ones(1, 5), **kw)
    out.loss.backward()
    return out, new.grad[0]


def test_clipped_loss_at_the_asymmetric_boundaries_with_autograd():
    # A<0, r=0.7 < 0.8: clipped (loss -A*0.8); A>0, r=1.5 > 1.28: clipped (loss -A*1.28);
    # A>0, r=0.7 and A<0, r=1.5: the unclipped side is the max; A>0, r=1.25: inside [0.8, 1.28]
    adv, ratios = [-1.0, 2.0, 1.0, -1.0, 1.0], [0.7, 1.5, 0.7, 1.5, 1.25]
    out, grad = clip_case(adv, ratios)
    per_token = [0.8, -2 * 1.28, -0.7, 1.5, -1.25]
    torch.testing.assert_close(out.loss, torch.tensor(sum(per_token) / 5))
    # d loss / d log_prob = -A * r / 5 where unclipped, exactly 0 where clipped
    torch.testing.assert_close(grad, torch.tensor([0.0, 0.0, -0.7 / 5, 1.5 / 5, -1.25 / 5]))
    torch.testing.assert_close(out.clipfrac, torch.tensor(2 / 5))
    torch.testing.assert_close(out.approx_kl, torch.tensor(-sum(math.log(r) for r in ratios) / 5))
    assert out.clipfrac_lower == 0


def test_high_clip_is_0_28_not_0_2():
    out, grad = clip_case([1.0] * 5, [1.25] * 5)  # clipped at 1.2 under symmetric PPO, not here
    assert out.clipfrac == 0 and (grad != 0).all()
    out, grad = clip_case([1.0] * 5, [1.25] * 5, clip_high=0.2)
    assert out.clipfrac == 1 and (grad == 0).all()


def test_dual_clip_caps_negative_advantages():
    adv, ratios = [-1.0, -1.0, 1.0, -2.0, 1.0], [4.0, 2.0, 4.0, 3.5, 1.0]
    out, grad = clip_case(adv, ratios, dual_clip=3.0)
    per_token = [3.0, 2.0, -1.28, 6.0, -1.0]  # -A*min(r, 3) for A<0 past 3; the A>0 r=4 token clips at 1.28
    torch.testing.assert_close(out.loss, torch.tensor(sum(per_token) / 5))
    torch.testing.assert_close(grad, torch.tensor([0.0, 2.0 / 5, 0.0, 0.0, -1.0 / 5]))
    torch.testing.assert_close(out.clipfrac_lower, torch.tensor(2 / 5))
    with pytest.raises(ValueError):
        clip_case(adv, ratios, dual_clip=1.0)


def test_token_mean_over_a_ragged_mask_is_the_sum_over_masked_tokens_over_their_count():
    g = gen(3)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0, 0, 0], [0, 1, 1, 0, 1, 0, 0, 0]])
    advantages = torch.randn(3, 8, generator=g)
    advantages[mask == 0] = float("nan")  # whatever sits outside the mask must not leak in
    log_prob = torch.randn(3, 8, generator=g)
    loss = ppo.policy_loss(log_prob, log_prob, advantages, mask).loss  # ratio 1: per-token loss is -A
    expected = -advantages[mask.bool()].sum() / 12
    torch.testing.assert_close(loss, expected)
    seq_mean = -torch.stack([advantages[i][mask[i].bool()].mean() for i in range(3)]).mean()
    assert not torch.isclose(loss, seq_mean)  # per token, not per sequence


def test_micro_batches_with_the_batch_token_count_sum_to_the_batch_loss():
    g = gen(4)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0]])
    old, new, adv = (torch.randn(4, 4, generator=g) for _ in range(3))
    whole = ppo.policy_loss(old, old + 0.3 * new, adv, mask).loss
    parts = sum(ppo.policy_loss(old[s], old[s] + 0.3 * new[s], adv[s], mask[s], num_tokens=mask.sum()).loss
                for s in (slice(0, 2), slice(2, 4)))
    torch.testing.assert_close(parts, whole)


# ---------------------------------------------------------------- value loss

def test_value_clipping():
    old = torch.zeros(1, 4)
    returns = torch.tensor([[1.0, 1.0, 1.0, 5.0]])
    values = torch.tensor([[0.5, -0.5, 0.1, 9.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0]])
    out = ppo.value_loss(values, old, returns, mask, clip=0.2)
    out.loss.backward()
    # 0.5 -> clipped to 0.2: (0.2-1)^2 = 0.64 > 0.25, kept, no gradient;
    # -0.5 -> clipped to -0.2: 1.44 < 2.25, the unclipped error is kept; 0.1 inside the range: 0.81
    torch.testing.assert_close(out.loss, torch.tensor(0.5 * (0.64 + 2.25 + 0.81) / 3))
    torch.testing.assert_close(values.grad, torch.tensor([[0.0, -1.5 / 3, -0.9 / 3, 0.0]]))
    torch.testing.assert_close(out.clipfrac, torch.tensor(1 / 3))


# ---------------------------------------------------------------- KL, entropy

def test_kl_estimators_against_their_definitions():
    g = gen(5)
    log_p = torch.log_softmax(torch.randn(4, 50, generator=g) * 0.5, dim=-1)
    log_q = torch.log_softmax(torch.randn(4, 50, generator=g) * 0.5, dim=-1)
    d = log_p - log_q
    torch.testing.assert_close(ppo.kl_penalty(log_p, log_q, "kl"), d)
    torch.testing.assert_close(ppo.kl_penalty(log_p, log_q, "k1"), d)
    torch.testing.assert_close(ppo.kl_penalty(log_p, log_q, "abs"), d.abs())
    torch.testing.assert_close(ppo.kl_penalty(log_p, log_q, "mse"), 0.5 * d**2)
    k3 = ppo.kl_penalty(log_p, log_q, "low_var_kl")
    torch.testing.assert_close(k3, torch.exp(-d) + d - 1)
    torch.testing.assert_close(ppo.kl_penalty(log_p, log_q, "k3"), k3)
    assert (k3 >= 0).all()
    # k1 and k3 are unbiased: their expectation under p (the sampling policy) is KL(p || q) exactly
    kl = (log_p.exp() * d).sum(-1)
    torch.testing.assert_close((log_p.exp() * ppo.kl_penalty(log_p, log_q, "k1")).sum(-1), kl)
    torch.testing.assert_close((log_p.exp() * k3).sum(-1), kl)
    # as in verl, k3 is clamped to [-10, 10] (and its log-ratio to [-20, 20]) for stability
    assert float((torch.exp(-d) + d - 1).max()) < 10
    assert ppo.kl_penalty(torch.zeros(1), torch.tensor([5.0]), "k3") == 10
    with pytest.raises(ValueError):
        ppo.kl_penalty(log_p, log_q, "full")


def test_kl_straight_through_keeps_the_k3_value_and_takes_the_k2_gradient():
    g = gen(6)
    log_p = torch.randn(3, 5, generator=g).requires_grad_(True)
    log_q = torch.randn(3, 5, generator=g)
    value = ppo.kl_penalty(log_p, log_q, "k3+")
    torch.testing.assert_close(value, ppo.kl_penalty(log_p, log_q, "k3"))
    value.sum().backward()
    torch.testing.assert_close(log_p.grad, (log_p - log_q).detach())


def test_entropy_of_uniform_logits_is_log_vocab_and_matches_the_definition():
    for vocab in (2, 1000):
        torch.testing.assert_close(ppo.entropy_from_logits(torch.full((2, 3, vocab), 0.7)),
                                   torch.full((2, 3), math.log(vocab)))
    logits = torch.randn(2, 3, 40, generator=gen(7)) * 4
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(ppo.entropy_from_logits(logits), -(p * p.log()).sum(-1))


def test_masked_mean_and_whiten_ignore_what_lies_outside_the_mask():
    values = torch.tensor([[1.0, 2.0, float("inf")], [3.0, float("nan"), 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    torch.testing.assert_close(ppo.masked_mean(values, mask), torch.tensor(3.0))
    torch.testing.assert_close(ppo.masked_mean(values, mask, axis=-1), torch.tensor([1.5, 4.5]))
    white = ppo.masked_whiten(values, mask)[mask.bool()]
    torch.testing.assert_close(white, (torch.tensor([1.0, 2.0, 3.0, 6.0]) - 3) / math.sqrt(14 / 3))
    with pytest.raises(ValueError):
        ppo.masked_whiten(values, torch.tensor([[1, 0, 0], [0, 0, 0]]))
