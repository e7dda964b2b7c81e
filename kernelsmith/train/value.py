"""`kernelsmith train value`: pretrain the critic on exported trajectories (docs/trajectories.md) before PPO.

CUDA Agent found that PPO without value pretraining collapsed. Targets are GAE returns with gamma 1 and
lambda 0.95, the outcome reward (the trajectory's final milestone reward) on its last policy token, and
only the policy's own tokens count (kernelsmith/train/ppo.py). Each step recomputes the targets with the
critic as it is (no gradient), then regresses onto them with the clipped value loss, as verl's critic
update does. Writes CRITIC/ (critic.py's format) and CRITIC/metrics.jsonl, one row per step."""

from __future__ import annotations

import contextlib
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from kernelsmith.errors import BadInput
from kernelsmith.train import critic as critics
from kernelsmith.train import ppo

TRAJECTORY_FORMAT = 1


@dataclass
class ValueConfig:
    epochs: int = 2
    lr: float = 1e-5
    batch_size: int = 4  # trajectories per optimizer step
    micro_batch: int = 1  # trajectories per forward and backward
    max_tokens: int = 32768  # longer trajectories are skipped (counted), never cut inside their policy tokens
    gamma: float = 1.0
    lam: float = 0.95
    clip: float = 0.2
    seed: int = 0


def read_trajectories(path: Path, min_reward: float | None = None) -> list[dict]:
    """The trajectories of a JSONL file (format 1) with a final reward of at least `min_reward`."""
    if not path.is_file():
        raise BadInput(f"no trajectory file {path}", "export one with `kernelsmith train trajectories`")
    rows = [_parsed(line, path, n) for n, line in enumerate(path.read_text().split("\n"), 1) if line.strip()]
    return [r for r in rows if min_reward is None or r["rewards"]["final"] >= min_reward]


def _parsed(line: str, path: Path, number: int) -> dict:
    try:
        row = json.loads(line)
    except ValueError:
        raise BadInput(f"{path}:{number} is not JSON", "pass a file written by `kernelsmith train trajectories`") from None
    if not isinstance(row, dict) or row.get("format") != TRAJECTORY_FORMAT:
        raise BadInput(f"{path}:{number} is not a format-{TRAJECTORY_FORMAT} trajectory", "export it again")
    if len(row.get("input_ids", ())) != len(row.get("loss_mask", ())) or not any(row.get("loss_mask", ())):
        raise BadInput(f"{path}:{number} has no policy tokens or a loss mask of the wrong length", "export it again")
    return row


def fitting(rows: list[dict], max_tokens: int) -> tuple[list[dict], int]:
    """The rows whose policy tokens all lie within `max_tokens`, each cut there, and how many were left out. What a
    cut takes is the tool results after a row's last reply: no loss, no reward sits on them (the rewards are on
    policy tokens), and the next row's context holds them. A row is never cut inside its policy tokens."""
    kept = [_cut(r, max_tokens) for r in rows if policy_length(r) <= max_tokens]
    return kept, len(rows) - len(kept)


def policy_length(row: dict) -> int:
    """Tokens up to and with the row's last policy token."""
    mask = row["loss_mask"]
    return next((len(mask) - i for i, m in enumerate(reversed(mask)) if m), 0)


def _cut(row: dict, max_tokens: int) -> dict:
    if len(row["input_ids"]) <= max_tokens:
        return row
    return {**row, "input_ids": row["input_ids"][:max_tokens], "loss_mask": row["loss_mask"][:max_tokens]}


def batch_of(rows: list[dict], pad_id: int, device: str) -> dict[str, Tensor]:
    """Right-padded ids, attention mask, policy mask and final rewards of some trajectories."""
    width = max(len(r["input_ids"]) for r in rows)
    pad = lambda seq, value: list(seq) + [value] * (width - len(seq))  # noqa: E731
    as_tensor = lambda key, value: torch.tensor([pad(r[key], value) for r in rows], device=device)  # noqa: E731
    attention = torch.tensor([pad([1] * len(r["input_ids"]), 0) for r in rows], device=device)
    return {"input_ids": as_tensor("input_ids", pad_id), "attention_mask": attention,
            "mask": as_tensor("loss_mask", 0).float(),
            "final": torch.tensor([float(r["rewards"]["final"]) for r in rows], device=device)}


def micro_batches(rows: list[dict], pad: int, device: str, size: int) -> list[dict[str, Tensor]]:
    """The rows as padded batches of at most `size` sequences, longest first (so memory runs out, if it
    does, at the start; and sequences of like length share a batch, padding little): one forward and
    backward each, so memory holds one micro-batch's activations (verl's ppo_micro_batch_size_per_gpu)."""
    ordered = sorted(rows, key=lambda r: -len(r["input_ids"]))
    return [batch_of(ordered[i:i + size], pad, device) for i in range(0, len(ordered), size)]


def autocast(device: str):
    """bfloat16 autocast on a CUDA device that has it (float32 weights, as verl's FSDP mixed precision keeps
    them), else nothing: CPU runs stay float32 and bit-comparable."""
    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def targets(critic: critics.Critic, batch: dict[str, Tensor], cfg: ValueConfig) -> tuple[Tensor, Tensor]:
    """(old values, GAE returns) under the critic as it is now."""
    with torch.no_grad():
        values = critic(batch["input_ids"], batch["attention_mask"]) * batch["mask"]
        rewards = ppo.token_rewards_from_outcome(batch["final"], batch["mask"])
        _, returns = ppo.gae(rewards, values, batch["mask"], cfg.gamma, cfg.lam, whiten=False)
    return values, returns


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over the policy tokens (verl's critic/vf_explained_var)."""
    if mask.sum() < 2:
        return float("nan")
    residual = ppo.masked_var(returns - values, mask)
    return float(1.0 - residual / (ppo.masked_var(returns, mask) + 1e-8))


def step(critic: critics.Critic, optimizer, batches: list[dict[str, Tensor]], cfg: ValueConfig, device: str) -> dict:
    """One optimizer step over the micro-batches of a batch; its metrics over all of their policy tokens."""
    tokens = sum(b["mask"].sum() for b in batches)
    optimizer.zero_grad()
    with autocast(device):  # the forwards and backwards (PPO's update does the same)
        fixed = [targets(critic, batch, cfg) for batch in batches]
        parts = [_accumulate(critic, batch, old, returns, tokens, cfg) for batch, (old, returns) in zip(batches, fixed)]
    optimizer.step()
    values, returns = torch.cat([p["values"] for p in parts]), torch.cat([p["returns"] for p in parts])
    everywhere = torch.ones_like(values)
    return {"value_loss": sum(p["loss"] for p in parts), "value_clipfrac": sum(p["clipfrac"] for p in parts),
            "explained_variance": explained_variance(values, returns, everywhere),
            "values_mean": float(values.mean()), "returns_mean": float(returns.mean()),
            "tokens": sum(int(b["attention_mask"].sum()) for b in batches)}  # every token the critic reads


def _accumulate(critic, batch, old, returns, tokens: Tensor, cfg: ValueConfig) -> dict:
    """Backward of one micro-batch's share of the step's loss; its policy tokens' values and returns."""
    mask = batch["mask"]
    values = critic(batch["input_ids"], batch["attention_mask"])
    loss = ppo.value_loss(values, old, returns, mask, clip=cfg.clip, num_tokens=tokens)
    loss.loss.backward()
    policy = mask.bool()
    return {"loss": float(loss.loss.detach()), "clipfrac": float(loss.clipfrac) * float(mask.sum() / tokens),
            "values": values.detach()[policy], "returns": returns[policy]}


def train(rows: list[dict], model: Path, out: Path, cfg: ValueConfig, device: str = "cpu",
          on_step: Callable[[dict], None] | None = None) -> dict:
    """Train a critic from `model` (a causal LM checkpoint, or a critic to go on from) on `rows`."""
    torch.manual_seed(cfg.seed)
    critic = (critics.load(model) if critics.is_critic(model) else critics.from_causal_lm(model)).to(device)
    critics.for_training(critic)
    optimizer = torch.optim.AdamW(critic.parameters(), lr=cfg.lr)
    pad_id = getattr(critic.body.config, "pad_token_id", None) or 0
    rng, total = random.Random(cfg.seed), math.ceil(len(rows) / cfg.batch_size) * cfg.epochs
    out.mkdir(parents=True, exist_ok=True)
    history = []
    with open(out / "metrics.jsonl", "w") as log:
        for epoch in range(cfg.epochs):
            order = rows[:]
            rng.shuffle(order)
            for start in range(0, len(order), cfg.batch_size):
                began = time.perf_counter()
                batches = micro_batches(order[start:start + cfg.batch_size], pad_id, device, cfg.micro_batch)
                row = step(critic, optimizer, batches, cfg, device)
                row = {"step": len(history) + 1, "of": total, "epoch": epoch + 1, **row,
                       "tokens_per_s": round(row["tokens"] / (time.perf_counter() - began), 1)}
                history.append(row)
                log.write(json.dumps(row) + "\n")
                log.flush()
                if on_step:
                    on_step(row)
    critic.save(out, base=str(model))
    return {"steps": len(history), "first": history[0], "last": history[-1], "out": str(out)}
