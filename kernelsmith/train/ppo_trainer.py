"""`kernelsmith train ppo`: single-node PPO on rollouts through KernelEnv (issue 19), the math of ppo.py.

Each step: the current policy (a checkpoint folder, run by the hf backend) plays sessions on the tasks
through the fleet (bench's runner: every kernel built, verified and timed by the jailed workers); the
sessions are exported as trajectories with the policy's tokenizer (the same rendering and mask as
`train trajectories`); the actor recomputes the old log-probabilities of the policy's tokens at the
sampling temperature (as verl's actor does), the reference policy (the starting checkpoint) its own,
the critic the values; GAE over the policy's tokens gives advantages and returns (outcome reward on
the last policy token); then PPO epochs update the policy (asymmetric clip, a low-variance KL loss to
the reference, per-token averaging) and the critic (clipped value loss). OUT holds policy/, critic/,
state.json (the next step) and metrics.jsonl (one row per step); --resume goes on from them."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from kernelsmith.errors import BadInput
from kernelsmith.train import critic as critics
from kernelsmith.train import ppo, value


@dataclass
class PpoConfig:
    steps: int = 10
    sessions: int = 4  # rollouts per task per step
    epochs: int = 1  # PPO epochs over each step's batch
    lr: float = 1e-6
    critic_lr: float = 1e-5
    clip_low: float = 0.2
    clip_high: float = 0.28
    value_clip: float = 0.2
    kl_coef: float = 1e-3  # verl's use_kl_loss with low_var_kl
    gamma: float = 1.0
    lam: float = 0.95
    temperature: float = 0.7
    max_tokens: int = 32768
    seed: int = 0


def token_log_probs(model, batch: dict[str, Tensor], temperature: float) -> tuple[Tensor, Tensor]:
    """(log-probability of each token given those before it, the entropy there): [batch, seq], 0 at position 0.
    Logits divided by the sampling temperature, as verl's actor computes them."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
    logits = logits / temperature
    chosen = torch.log_softmax(logits, -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    pad = torch.zeros_like(chosen[:, :1])
    return torch.cat([pad, chosen], 1), torch.cat([pad, ppo.entropy_from_logits(logits)], 1)


def advantages(policy, reference, critic, batch: dict[str, Tensor], cfg: PpoConfig) -> dict[str, Tensor]:
    """Old and reference log-probs, old values, advantages and returns of a batch (no gradient)."""
    mask = batch["mask"]
    with torch.no_grad():
        old, _ = token_log_probs(policy, batch, cfg.temperature)
        ref, _ = token_log_probs(reference, batch, cfg.temperature)
        values = critic(batch["input_ids"], batch["attention_mask"]) * mask
        rewards = ppo.token_rewards_from_outcome(batch["final"], mask)
        adv, returns = ppo.gae(rewards, values, mask, cfg.gamma, cfg.lam)
    return {"old": old, "ref": ref, "values": values, "advantages": adv, "returns": returns}


def update(policy, reference, critic, optimizers, rows: list[dict], cfg: PpoConfig, device: str) -> dict:
    """One PPO step on these trajectories; the step's metrics."""
    pad = getattr(policy.config, "pad_token_id", None) or 0
    batch = value.batch_of(rows, pad, device)
    fixed, mask, metrics = advantages(policy, reference, critic, batch, cfg), batch["mask"], {}
    for _ in range(cfg.epochs):
        log_probs, entropy = token_log_probs(policy, batch, cfg.temperature)
        pg = ppo.policy_loss(fixed["old"], log_probs, fixed["advantages"], mask, cfg.clip_low, cfg.clip_high)
        kl = ppo.token_mean(ppo.kl_penalty(log_probs, fixed["ref"], "low_var_kl"), mask)
        _step(optimizers[0], pg.loss + cfg.kl_coef * kl)
        values = critic(batch["input_ids"], batch["attention_mask"])
        vl = ppo.value_loss(values, fixed["values"], fixed["returns"], mask, clip=cfg.value_clip)
        _step(optimizers[1], vl.loss)
        metrics = {"policy_loss": float(pg.loss.detach()), "clip_fraction": float(pg.clipfrac),
                   "approx_kl": float(pg.approx_kl), "kl_to_reference": float(kl.detach()),
                   "entropy": float(ppo.token_mean(entropy.detach(), mask)), "value_loss": float(vl.loss.detach())}
    return {**metrics, "reward_mean": float(batch["final"].mean()), "policy_tokens": int(mask.sum()),
            "response_length": float(mask.sum(1).float().mean())}


def _step(optimizer, loss: Tensor) -> None:
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


@dataclass
class PpoPlan:
    tasks: list[Path]
    settings: object  # config.Settings of the rollouts (its backend and model are set here)
    policy: Path  # the starting checkpoint: also the reference policy
    critic: Path
    out: Path
    config: PpoConfig
    workers: int = 1


def start_state(plan: PpoPlan, resume: bool) -> int:
    """The step to run next; a fresh run copies the policy and critic into OUT (a run's own copies)."""
    state = plan.out / "state.json"
    if resume and state.is_file():
        return int(json.loads(state.read_text())["step"])
    if state.is_file():
        raise BadInput(f"{plan.out} holds a PPO run", "pass --resume to go on with it, or another --out")
    plan.out.mkdir(parents=True, exist_ok=True)
    _replace_dir(plan.policy, plan.out / "policy")
    _replace_dir(plan.critic, plan.out / "critic")
    _save_state(plan, 0)
    return 0


def _replace_dir(source: Path, target: Path) -> None:
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("metrics.jsonl"))
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def _save_state(plan: PpoPlan, step: int) -> None:
    (plan.out / "state.json").write_text(json.dumps({"step": step, "config": asdict(plan.config)}, indent=1) + "\n")


def rollouts(plan: PpoPlan, step: int, sandbox) -> tuple[list[dict], dict]:
    """The step's sessions by the current policy, exported; and the environment's numbers."""
    import dataclasses

    from kernelsmith.train import sessions

    folder, policy = plan.out / "rollouts" / f"step-{step}", plan.out / "policy"
    settings = dataclasses.replace(plan.settings, backend="hf", model=str(policy))
    began = time.perf_counter()
    rows = sessions.play(settings, plan.tasks, plan.config.sessions, plan.workers, folder, sandbox)
    wall = time.perf_counter() - began
    sessions.export(folder, policy, folder / "trajectories.jsonl")
    lines = value.read_trajectories(folder / "trajectories.jsonl")
    return value.fitting(lines, plan.config.max_tokens)[0], _env_numbers(rows, lines, wall)


def _env_numbers(rows: list[dict], lines: list[dict], wall: float) -> dict:
    turns = sum(r.get("turns") or 0 for r in rows)
    calls = sum(sum(len(m.get("tool_calls") or []) for m in line["messages"]) for line in lines)
    malformed = sum(line.get("flags", {}).get("malformed_calls", 0) for line in lines)
    return {"sessions": len(rows), "env_steps_per_s": round(turns / wall, 3) if wall else 0.0,
            "tool_call_validity": round(1 - malformed / calls, 3) if calls else 0.0,
            "rollout_s": round(wall, 1)}


def train(plan: PpoPlan, sandbox, resume: bool = False, on_step: Callable[[dict], None] | None = None) -> dict:
    from transformers import AutoModelForCausalLM

    first, device = start_state(plan, resume), plan.settings.device
    torch.manual_seed(plan.config.seed)
    reference = AutoModelForCausalLM.from_pretrained(str(plan.policy), local_files_only=True).to(device).eval()
    done = []
    for step in range(first, plan.config.steps):
        rows, env = rollouts(plan, step, sandbox)
        if not rows:
            raise BadInput(f"step {step}: no rollout gave a trajectory", "see OUT/rollouts for the sessions")
        policy = AutoModelForCausalLM.from_pretrained(str(plan.out / "policy"), local_files_only=True).to(device)
        critic = critics.load(plan.out / "critic").to(device)
        optimizers = (torch.optim.AdamW(policy.parameters(), lr=plan.config.lr),
                      torch.optim.AdamW(critic.parameters(), lr=plan.config.critic_lr))
        began = time.perf_counter()
        metrics = update(policy, reference, critic, optimizers, rows, plan.config, device)
        metrics["tokens_per_s"] = round(metrics["policy_tokens"] / (time.perf_counter() - began), 1)
        _save_models(plan, policy, critic)
        row = {"step": step + 1, "of": plan.config.steps, "trajectories": len(rows), **env, **metrics}
        with open(plan.out / "metrics.jsonl", "a") as log:
            log.write(json.dumps(row) + "\n")
        _save_state(plan, step + 1)
        done.append(row)
        if on_step:
            on_step(row)
    return {"steps": done, "out": str(plan.out)}


def _save_models(plan: PpoPlan, policy, critic) -> None:
    """The new policy (with its tokenizer) and critic, each replacing the old folder whole."""
    from transformers import AutoTokenizer

    staged = plan.out / "policy.new"
    shutil.rmtree(staged, ignore_errors=True)
    policy.save_pretrained(str(staged))
    AutoTokenizer.from_pretrained(str(plan.out / "policy"), local_files_only=True).save_pretrained(str(staged))
    critic.save(plan.out / "critic.new", base=str(plan.policy))
    for name in ("policy", "critic"):
        shutil.rmtree(plan.out / name, ignore_errors=True)
        (plan.out / f"{name}.new").rename(plan.out / name)
