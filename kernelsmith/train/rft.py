"""Rejection-sampling fine-tuning (`kernelsmith train rft`): keep the teacher's good trajectories, then fine-tune
the student on them with TRL's SFTTrainer, the loss on the policy's own tokens only.

The trajectories come already tokenised and masked by `kernelsmith train trajectories` (its re-tokenisation
check is what keeps the mask honest), so TRL gets `input_ids` and `assistant_masks` as they are: it builds
labels from them (-100 wherever the mask is 0) and never re-renders the chat."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernelsmith.errors import BadInput

LOOP_REPEATS = 3  # the same tool call this many times in a row, with nothing changed between: a loop


@dataclass
class RftConfig:
    epochs: float = 2.0
    lr: float = 1e-5
    batch_size: int = 1
    grad_accum: int = 8
    max_tokens: int = 32768
    seed: int = 0


def rejection(row: dict, min_reward: float = 0.0) -> str:
    """Why a trajectory is not fit to imitate, or '' (kept): its final reward must exceed min_reward, and it
    must not hold a harness violation, a loop, or a tool call the tools refused as malformed."""
    if row["rewards"]["final"] <= min_reward:
        return "reward"
    if row.get("flags", {}).get("violations"):
        return "flagged"
    if looping(row.get("messages", [])):
        return "looping"
    if row.get("flags", {}).get("malformed_calls"):
        return "malformed"
    return ""


def looping(messages: list[dict]) -> bool:
    """LOOP_REPEATS assistant turns in a row making the same tool calls with the same arguments."""
    calls = [json.dumps(m.get("tool_calls") or [], sort_keys=True) for m in messages if m.get("role") == "assistant"]
    run = 1
    for before, now in zip(calls, calls[1:]):
        run = run + 1 if now == before and now != "[]" else 1
        if run >= LOOP_REPEATS:
            return True
    return False


def select(rows: list[dict], min_reward: float = 0.0) -> tuple[list[dict], Counter]:
    """The trajectories kept, and the count of each rejection reason."""
    reasons = Counter(rejection(r, min_reward) for r in rows)
    kept = [r for r in rows if not rejection(r, min_reward)]
    reasons.pop("", None)
    return kept, reasons


def dataset(rows: list[dict], max_tokens: int):
    """A datasets.Dataset TRL takes as processed: input_ids and assistant_masks (the policy's tokens)."""
    from datasets import Dataset

    fitting = [r for r in rows if len(r["input_ids"]) <= max_tokens]
    if not fitting:
        raise BadInput(f"no trajectory fits {max_tokens} tokens", "raise --max-tokens")
    return Dataset.from_dict({"input_ids": [r["input_ids"] for r in fitting],
                              "assistant_masks": [r["loss_mask"] for r in fitting]})


def finetune(rows: list[dict], model: Path, out: Path, cfg: RftConfig, device: str = "cpu",
             on_log: Callable[[dict], None] | None = None) -> dict:
    """Fine-tune `model` (a local causal LM checkpoint with its tokenizer) on `rows`; saved to `out`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(str(model), local_files_only=True)
    policy = AutoModelForCausalLM.from_pretrained(str(model), local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    args = SFTConfig(output_dir=str(out), num_train_epochs=cfg.epochs, learning_rate=cfg.lr, seed=cfg.seed,
                     per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.grad_accum,
                     max_length=cfg.max_tokens, logging_steps=1, save_strategy="no", report_to="none",
                     use_cpu=device == "cpu")
    history: list[dict] = []

    class Logs(TrainerCallback):
        def on_log(self, _args, _state, _control, logs=None, **_):
            if logs and "loss" in logs:
                history.append({k: v for k, v in logs.items() if isinstance(v, (int, float))})
                if on_log:
                    on_log(history[-1])

    trainer = SFTTrainer(model=policy, args=args, train_dataset=dataset(rows, cfg.max_tokens),
                         processing_class=tokenizer, callbacks=[Logs()])
    trainer.train()
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
    return {"trajectories": len(rows), "steps": len(history), "first": history[0] if history else {},
            "last": history[-1] if history else {}, "out": str(out)}


TEACHERS = ("builtin", "anthropic", "openai", "scripted", "hf")  # hf: the student samples itself (--model)


@dataclass
class RftPlan:
    tasks: list[Path]
    settings: object  # config.Settings of the teacher's sessions
    samples: int
    model: Path  # the student: a local causal LM checkpoint with its tokenizer (its chat template renders)
    out: Path
    workers: int = 1
    min_reward: float = 0.0
    config: RftConfig = field(default_factory=RftConfig)


def run(plan: RftPlan, sandbox, on_row=None, on_log=None) -> dict:
    """Sample the teacher (OUT/rollouts), export with the student's tokenizer (OUT/trajectories.jsonl), select,
    fine-tune: the student's checkpoint is written to OUT."""
    from kernelsmith.train import sessions, value

    rows = sessions.play(plan.settings, plan.tasks, plan.samples, plan.workers, plan.out / "rollouts", sandbox, on_row)
    exported = sessions.export(plan.out / "rollouts", plan.model, plan.out / "trajectories.jsonl")
    kept, reasons = select(value.read_trajectories(plan.out / "trajectories.jsonl"), plan.min_reward)
    selection = {"sessions": len(rows), "trajectories": exported.lines, "kept": len(kept), "rejected": dict(reasons),
                 "skipped_sessions": exported.skipped}
    (plan.out / "rft.json").write_text(json.dumps(selection, indent=1) + "\n")
    if not kept:
        raise BadInput(f"no trajectory is fit to imitate ({_reasons(reasons, exported)})",
                       "sample more (--samples), give the teacher more turns, or lower --min-reward")
    return {**selection, **finetune(kept, plan.model, plan.out, plan.config, plan.settings.device, on_log)}


def _reasons(reasons: Counter, exported) -> str:
    said = [f"{n} {why}" for why, n in reasons.most_common()] + [f"{len(exported.skipped)} sessions skipped"]
    return ", ".join(said)
