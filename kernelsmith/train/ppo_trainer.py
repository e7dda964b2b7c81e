"""`kernelsmith train ppo`: single-node PPO on rollouts through KernelEnv (issue 19), the math of ppo.py.

Each step: the current policy (a checkpoint folder, run by the hf backend) plays sessions on the tasks
through the fleet (bench's runner: every kernel built, verified and timed by the jailed workers); the
sessions are exported as trajectories with the policy's tokenizer (the same rendering and mask as
`train trajectories`); the actor recomputes the old log-probabilities of the policy's tokens at the
sampling temperature (as verl's actor does), the reference policy (the starting checkpoint) its own,
the critic the values; GAE over the policy's tokens gives advantages and returns (outcome reward on
the last policy token); then PPO epochs update the policy (asymmetric clip, a low-variance KL loss to
the reference, per-token averaging) and the critic (clipped value loss). OUT holds policy/, critic/,
optimizers.pt, state.json (the next step), metrics.jsonl (one row per step) and metrics.png (reward and KL
over steps); --resume goes on from them. The batch goes through in micro-batches with gradients
accumulated, so a step's size is bounded by rollouts, not by memory."""

from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from kernelsmith.errors import BadInput
from kernelsmith.train import critic as critics
from kernelsmith.train import plots, ppo, value


@dataclass
class PpoConfig:
    steps: int = 10
    sessions: int = 4  # rollouts per task per step
    tasks_per_step: int = 0  # tasks a step rolls out on (verl's train_batch_size); 0: all of them
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
    micro_batch: int = 1  # sequences per forward and backward (1 pads nothing); gradients accumulate over the step
    grad_clip: float = 1.0  # verl's actor.grad_clip and critic.grad_clip
    seed: int = 0


def token_log_probs(model, batch: dict[str, Tensor], temperature: float) -> tuple[Tensor, Tensor]:
    """(log-probability of each token given those before it, the entropy there): [batch, seq], 0 at position 0.
    Logits divided by the sampling temperature, as verl's actor computes them."""
    logits = _logits(model, batch)[:, :-1] / temperature
    chosen = torch.log_softmax(logits, -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    pad = torch.zeros_like(chosen[:, :1])
    return torch.cat([pad, chosen], 1), torch.cat([pad, ppo.entropy_from_logits(logits)], 1)


LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")  # what a model applies past its head


def _logits(model, batch: dict[str, Tensor]) -> Tensor:
    """float32 logits: the body under the caller's autocast, the LM head in float32. bfloat16 logits are rounded
    by up to 0.06 near 30, and old and new log-probabilities rounded apart would put that noise in the PPO
    ratio. A model that transforms its logits past the head runs whole (its logits as autocast leaves them)."""
    ids, attention = batch["input_ids"], batch["attention_mask"]
    if any(getattr(model.config, name, None) for name in LOGIT_TRANSFORMS) or model.get_output_embeddings() is None:
        return model(input_ids=ids, attention_mask=attention).logits.float()
    hidden = model.base_model(input_ids=ids, attention_mask=attention).last_hidden_state
    with torch.autocast(hidden.device.type, enabled=False):
        return model.get_output_embeddings()(hidden.float())


def advantages(policy, reference, critic, batches: list[dict[str, Tensor]], cfg: PpoConfig) -> list[dict[str, Tensor]]:
    """Old and reference log-probs, old values, advantages and returns of each micro-batch (no gradient).
    Advantages are whitened over the policy tokens of the whole step, as verl whitens its batch."""
    fixed = [_fixed(policy, reference, critic, batch, cfg) for batch in batches]
    flat = ppo.masked_whiten(torch.cat([f["advantages"].flatten() for f in fixed]),
                             torch.cat([b["mask"].flatten() for b in batches]))
    for f, b, whitened in zip(fixed, batches, flat.split([b["mask"].numel() for b in batches])):
        f["advantages"] = torch.where(b["mask"].bool(), whitened.view_as(b["mask"]), 0.0)
    return fixed


def _fixed(policy, reference, critic, batch: dict[str, Tensor], cfg: PpoConfig) -> dict[str, Tensor]:
    mask = batch["mask"]
    with torch.no_grad():
        old, _ = token_log_probs(policy, batch, cfg.temperature)
        ref, _ = token_log_probs(reference, batch, cfg.temperature)
        values = critic(batch["input_ids"], batch["attention_mask"]) * mask
        rewards = ppo.token_rewards_from_outcome(batch["final"], mask)
        adv, returns = ppo.gae(rewards, values, mask, cfg.gamma, cfg.lam, whiten=False)
    return {"old": old, "ref": ref, "values": values, "advantages": adv, "returns": returns}


def update(policy, reference, critic, optimizers, rows: list[dict], cfg: PpoConfig, device: str) -> dict:
    """One PPO step on these trajectories; the step's metrics. Each epoch is one optimizer step per model with
    the gradients of every micro-batch accumulated; each micro-batch's losses are divided by the step's policy
    token count, so the sum is the step's per-token mean (verl's token-mean with batch_num_tokens)."""
    pad = getattr(policy.config, "pad_token_id", None) or 0
    batches = value.micro_batches(rows, pad, device, cfg.micro_batch)
    tokens = sum(b["mask"].sum() for b in batches)
    metrics = {}
    with value.autocast(device):  # the forwards and backwards in bfloat16 on CUDA (value.py says why)
        fixed = advantages(policy, reference, critic, batches, cfg)
        for _ in range(cfg.epochs):
            metrics = _epoch(policy, critic, optimizers, batches, fixed, tokens, cfg)
    final = torch.cat([b["final"] for b in batches])
    lengths = torch.cat([b["mask"].sum(1) for b in batches])
    sequence = sum(int(b["attention_mask"].sum()) for b in batches)  # what each forward and backward reads
    return {**metrics, "reward_mean": float(final.mean()), "policy_tokens": int(tokens), "sequence_tokens": sequence,
            "response_length": float(lengths.mean())}


def _epoch(policy, critic, optimizers, batches, fixed, tokens: Tensor, cfg: PpoConfig) -> dict:
    """Accumulate every micro-batch's gradients, then one clipped optimizer step for the policy and the critic."""
    for optimizer in optimizers:
        optimizer.zero_grad()
    sums: dict[str, float] = {}
    for batch, f in zip(batches, fixed):
        for key, number in _micro_step(policy, critic, batch, f, tokens, cfg).items():
            sums[key] = sums.get(key, 0.0) + number
    sums["grad_norm"] = _clipped_step(optimizers[0], policy, cfg.grad_clip)
    sums["critic_grad_norm"] = _clipped_step(optimizers[1], critic, cfg.grad_clip)
    return sums


def _micro_step(policy, critic, batch, f, tokens: Tensor, cfg: PpoConfig) -> dict[str, float]:
    """Backward of one micro-batch's share of the step's losses; its metrics weighted by its share of tokens,
    so summing over micro-batches gives the step's per-token means."""
    mask, share = batch["mask"], float(batch["mask"].sum() / tokens)
    log_probs, entropy = token_log_probs(policy, batch, cfg.temperature)
    pg = ppo.policy_loss(f["old"], log_probs, f["advantages"], mask, cfg.clip_low, cfg.clip_high, num_tokens=tokens)
    kl = ppo.token_mean(ppo.kl_penalty(log_probs, f["ref"], "low_var_kl"), mask, tokens)
    (pg.loss + cfg.kl_coef * kl).backward()
    values = critic(batch["input_ids"], batch["attention_mask"])
    vl = ppo.value_loss(values, f["values"], f["returns"], mask, clip=cfg.value_clip, num_tokens=tokens)
    vl.loss.backward()
    return {"policy_loss": float(pg.loss.detach()), "kl_to_reference": float(kl.detach()),
            "value_loss": float(vl.loss.detach()), "clip_fraction": float(pg.clipfrac) * share,
            "approx_kl": float(pg.approx_kl) * share, "entropy": float(ppo.token_mean(entropy.detach(), mask)) * share}


def _clipped_step(optimizer, model, clip: float) -> float:
    """Clip the gradient norm (verl's grad_clip, 1.0) and step; the norm before clipping. A non-finite norm
    skips the step, as verl's actor does, rather than writing NaN into the weights."""
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    if torch.isfinite(norm):
        optimizer.step()
    optimizer.zero_grad()
    return float(norm)


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
        return next_step(plan.out)
    if state.is_file():
        raise BadInput(f"{plan.out} holds a PPO run", "pass --resume to go on with it, or another --out")
    plan.out.mkdir(parents=True, exist_ok=True)
    _replace_dir(plan.policy, plan.out / "policy")
    _replace_dir(plan.critic, plan.out / "critic")
    _save_state(plan, 0)
    return 0


def next_step(out: Path) -> int:
    """The step a --resume of the run in `out` starts at (0 when there is none)."""
    state = out / "state.json"
    return int(json.loads(state.read_text())["step"]) if state.is_file() else 0


def _replace_dir(source: Path, target: Path) -> None:
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("metrics.jsonl"))
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def _save_state(plan: PpoPlan, step: int) -> None:
    (plan.out / "state.json").write_text(json.dumps({"step": step, "config": asdict(plan.config)}, indent=1) + "\n")


def step_tasks(tasks: list[Path], per_step: int, step: int, seed: int) -> list[Path]:
    """Step `step`'s tasks: the next `per_step` of a stream of seeded shuffles of `tasks`, one epoch after
    another (verl's dataloader draws train_batch_size prompts a step so), the same again on --resume; all of
    them when per_step is 0 or covers them."""
    if not per_step or per_step >= len(tasks):
        return list(tasks)
    first = step * per_step
    epoch, offset = divmod(first, len(tasks))
    stream: list[Path] = []
    while len(stream) < offset + per_step:
        stream += random.Random(f"{seed}:{epoch}").sample(list(tasks), len(tasks))
        epoch += 1
    return stream[offset:offset + per_step]


def rollouts(plan: PpoPlan, step: int, sandbox, on_row=None) -> tuple[list[dict], dict]:
    """The step's sessions by the current policy, exported; and the environment's numbers."""
    import dataclasses

    from kernelsmith.train import sessions

    folder, policy = plan.out / "rollouts" / f"step-{step}", plan.out / "policy"
    settings = dataclasses.replace(plan.settings, backend="hf", model=str(policy))
    earlier = _played(folder)
    began = time.perf_counter()
    batch = step_tasks(plan.tasks, plan.config.tasks_per_step, step, plan.config.seed)
    rows = sessions.play(settings, batch, plan.config.sessions, plan.workers, folder, sandbox, on_row)
    wall = time.perf_counter() - began
    sessions.export(folder, policy, folder / "trajectories.jsonl")
    lines = value.read_trajectories(folder / "trajectories.jsonl")
    return value.fitting(lines, plan.config.max_tokens)[0], _env_numbers(rows, lines, wall, earlier)


def _played(folder: Path) -> set[tuple]:
    """Sessions a killed call already ended in the step's folder: the fleet's resume keeps them, unplayed."""
    from kernelsmith.agent.fleet import RowLog

    return set(RowLog(folder).finished())


def _env_numbers(rows: list[dict], lines: list[dict], wall: float, earlier: set[tuple] = frozenset()) -> dict:
    """Tool-call validity over all the step's sessions; the rates over those played in this call alone, whose
    time `wall` is (a resumed step's earlier sessions took time a killed call never logged). No fresh session
    (the step's rollouts were all played before a kill): no rates, rather than tokens over zero seconds."""
    calls = sum(sum(len(m.get("tool_calls") or []) for m in line["messages"]) for line in lines)
    malformed = sum(line.get("flags", {}).get("malformed_calls", 0) for line in lines)
    from kernelsmith.agent.fleet import row_key

    fresh = [r for r in rows if row_key(r) not in earlier]
    ids = {r.get("session_id") for r in fresh}
    turns = sum(r.get("turns") or 0 for r in fresh)
    # the policy's own tokens over the rollouts' wall time (generation, builds and evaluations together)
    generated = sum(line.get("stats", {}).get("policy_tokens", 0) for line in lines if line.get("session_id") in ids)
    timed = bool(fresh) and wall > 0
    return {"sessions": len(rows), "resumed_sessions": len(rows) - len(fresh),
            "env_steps_per_s": round(turns / wall, 3) if timed else None,
            "tool_call_validity": round(1 - malformed / calls, 3) if calls else 0.0,
            "rollout_tokens_per_s": round(generated / wall, 1) if timed else None,
            "rollout_s": round(wall, 1)}


@dataclass
class Learner:
    """The models and optimizers a run trains, kept across steps: Adam's moments carry from step to step as in
    verl, and go into OUT/optimizers.pt with each checkpoint, so --resume goes on with them."""
    policy: object
    critic: object
    optimizers: tuple


def load_learner(plan: PpoPlan, device: str) -> Learner:
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(str(plan.out / "policy"), local_files_only=True).to(device)
    critic = critics.load(plan.out / "critic").to(device)
    critics.for_training(policy)
    critics.for_training(critic)
    optimizers = (torch.optim.AdamW(policy.parameters(), lr=plan.config.lr),
                  torch.optim.AdamW(critic.parameters(), lr=plan.config.critic_lr))
    saved = plan.out / "optimizers.pt"
    if saved.is_file():
        for optimizer, state in zip(optimizers, torch.load(saved, map_location=device)):
            optimizer.load_state_dict(state)
    return Learner(policy, critic, optimizers)


def train(plan: PpoPlan, sandbox, resume: bool = False, on_step: Callable[[dict], None] | None = None,
          on_row: Callable[[dict], None] | None = None) -> dict:
    """Run the plan's steps from where OUT stands; `on_row` sees each rollout session, `on_step` each step."""
    from transformers import AutoModelForCausalLM

    first, device = start_state(plan, resume), plan.settings.device
    torch.manual_seed(plan.config.seed)
    reference = AutoModelForCausalLM.from_pretrained(str(plan.policy), local_files_only=True).to(device).eval()
    learner, done = load_learner(plan, device), []
    for step in range(first, plan.config.steps):
        row = _one_step(plan, learner, reference, step, sandbox, on_row)
        done.append(row)
        if on_step:
            on_step(row)
    return {"steps": done, "out": str(plan.out)}


def _one_step(plan: PpoPlan, learner: Learner, reference, step: int, sandbox, on_row) -> dict:
    rows, env = rollouts(plan, step, sandbox, on_row)
    if not rows:
        raise BadInput(f"step {step}: no rollout gave a trajectory", "see OUT/rollouts for the sessions")
    began = time.perf_counter()
    metrics = update(learner.policy, reference, learner.critic, learner.optimizers, rows, plan.config,
                     plan.settings.device)
    # every token of the step's sequences (the prompt and tool outputs too: the forward and backward read them),
    # as verl's throughput counts them; the policy's own tokens are a few percent of an agentic trajectory
    metrics["tokens_per_s"] = round(metrics["sequence_tokens"] / (time.perf_counter() - began), 1)
    _save_models(plan, learner)
    row = {"step": step + 1, "of": plan.config.steps, "trajectories": len(rows), **env, **metrics,
           "gpu_memory_gb": _peak_memory_gb(plan.settings.device)}
    with open(plan.out / "metrics.jsonl", "a") as log:
        log.write(json.dumps(row) + "\n")
    _save_state(plan, step + 1)
    plots.write(plan.out / "metrics.jsonl", plan.out / "metrics.png", PLOTTED)
    return row


PLOTTED = (("reward_mean", "reward"), ("kl_to_reference", "KL to the initial policy"))


def _peak_memory_gb(device: str) -> float | None:
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / 2**30, 2)


def _save_models(plan: PpoPlan, learner: Learner) -> None:
    """The new policy (with its tokenizer), critic and optimizer states, each replacing the old one whole."""
    from transformers import AutoTokenizer

    staged = plan.out / "policy.new"
    shutil.rmtree(staged, ignore_errors=True)
    learner.policy.save_pretrained(str(staged))
    AutoTokenizer.from_pretrained(str(plan.out / "policy"), local_files_only=True).save_pretrained(str(staged))
    learner.critic.save(plan.out / "critic.new", base=str(plan.policy))
    torch.save([o.state_dict() for o in learner.optimizers], plan.out / "optimizers.pt.new")
    for name in ("policy", "critic"):
        shutil.rmtree(plan.out / name, ignore_errors=True)
        (plan.out / f"{name}.new").rename(plan.out / name)
    (plan.out / "optimizers.pt.new").replace(plan.out / "optimizers.pt")
