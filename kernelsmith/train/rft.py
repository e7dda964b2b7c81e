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
    max_reply_tokens: int | None = None  # the student's longest reply at run time (the hf backend's --max-tokens)


def rejection(row: dict, min_reward: float = 0.0, max_reply: int | None = None) -> str:
    """Why a trajectory is not fit to imitate, or '' (kept): its final reward must exceed min_reward, and it
    must not hold a harness violation, a loop, a tool call the tools refused as malformed, or a reply longer
    than the student may write (cut there at run time, the call it learned would never be finished)."""
    if row["rewards"]["final"] <= min_reward:
        return "reward"
    if row.get("flags", {}).get("violations"):
        return "flagged"
    if looping(row.get("messages", [])):
        return "looping"
    if row.get("flags", {}).get("malformed_calls"):
        return "malformed"
    if max_reply is not None and longest_reply(row) > max_reply:
        return "reply_too_long"
    return ""


def longest_reply(row: dict) -> int:
    """Tokens of the trajectory's longest policy turn (its spans are the rendered replies)."""
    return max((t["end"] - t["start"] for t in row.get("turns") or []), default=0)


def looping(messages: list[dict]) -> bool:
    """LOOP_REPEATS assistant turns in a row making the same tool calls with the same arguments."""
    calls = [json.dumps(m.get("tool_calls") or [], sort_keys=True) for m in messages if m.get("role") == "assistant"]
    run = 1
    for before, now in zip(calls, calls[1:]):
        run = run + 1 if now == before and now != "[]" else 1
        if run >= LOOP_REPEATS:
            return True
    return False


def select(rows: list[dict], min_reward: float = 0.0, max_reply: int | None = None) -> tuple[list[dict], Counter]:
    """The trajectories kept, and the count of each rejection reason."""
    verdicts = [rejection(r, min_reward, max_reply) for r in rows]
    reasons = Counter(v for v in verdicts if v)
    return [r for r, v in zip(rows, verdicts) if not v], reasons


def dataset(rows: list[dict], max_tokens: int):
    """A datasets.Dataset TRL takes as processed: input_ids and assistant_masks (the policy's tokens)."""
    from datasets import Dataset

    from kernelsmith.train.value import fitting as within

    fitting = within(rows, max_tokens)[0]
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

    data = dataset(rows, cfg.max_tokens)
    trainer = SFTTrainer(model=policy, args=args, train_dataset=data, processing_class=tokenizer, callbacks=[Logs()])
    trainer.train()
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
    return {"trained_on": len(data), "past_window": len(rows) - len(data), "steps": len(history),
            "first": history[0] if history else {}, "last": history[-1] if history else {}, "out": str(out)}


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
    data: Path | None = None  # trajectories already exported: no teacher is sampled
    one_call_per_reply: bool = False  # the teacher's replies of several calls exported as one reply per call


def run(plan: RftPlan, sandbox, on_row=None, on_log=None) -> dict:
    """Sample the teacher (OUT/rollouts), export with the student's tokenizer (OUT/trajectories.jsonl), or take
    the trajectories of plan.data; select, fine-tune: the student's checkpoint is written to OUT."""
    rows, made = _teacher(plan, sandbox, on_row) if plan.data is None else _given(plan)
    kept, reasons = select(rows, plan.min_reward, plan.config.max_reply_tokens)
    selection = {**made, "trajectories": len(rows), "kept": len(kept), "rejected": dict(reasons)}
    plan.out.mkdir(parents=True, exist_ok=True)
    (plan.out / "rft.json").write_text(json.dumps(selection, indent=1) + "\n")
    if not kept:
        raise BadInput(f"no trajectory is fit to imitate ({_reasons(reasons, made['skipped_sessions'])})",
                       "sample more (--samples), give the teacher more turns, lower --min-reward, "
                       "or let the student write longer replies (--max-reply-tokens)")
    return {**selection, **finetune(kept, plan.model, plan.out, plan.config, plan.settings.device, on_log)}


def _teacher(plan: RftPlan, sandbox, on_row) -> tuple[list[dict], dict]:
    from kernelsmith.train import sessions, value

    rows = sessions.play(plan.settings, plan.tasks, plan.samples, plan.workers, plan.out / "rollouts", sandbox, on_row)
    exported = sessions.export(plan.out / "rollouts", plan.model, plan.out / "trajectories.jsonl",
                               plan.one_call_per_reply)
    return value.read_trajectories(plan.out / "trajectories.jsonl"), {"sessions": len(rows),
                                                                       "skipped_sessions": exported.skipped}


def _given(plan: RftPlan) -> tuple[list[dict], dict]:
    """plan.data's trajectories, once they are known to be the student's tokens; copied to OUT/trajectories.jsonl,
    where `train value` reads an rft run's trajectories whichever way they came."""
    import shutil

    from kernelsmith.train import value

    rows = value.read_trajectories(plan.data)
    plan.out.mkdir(parents=True, exist_ok=True)
    tokenizer = _student_tokenizer(plan.model)
    if plan.one_call_per_reply:  # split, and rendered again from their messages by the student's tokenizer
        rows = _split(rows, tokenizer, plan.model)
    check_tokenizer(rows, plan.model, tokenizer)
    if plan.one_call_per_reply:
        _write_rows(rows, plan.out / "trajectories.jsonl")
    elif plan.data.resolve() != (plan.out / "trajectories.jsonl").resolve():
        shutil.copyfile(plan.data, plan.out / "trajectories.jsonl")
    return rows, {"sessions": len({r.get("session_id") for r in rows}), "skipped_sessions": [], "data": str(plan.data)}


def _student_tokenizer(model: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model), local_files_only=True)


def _split(rows: list[dict], tokenizer, model: Path) -> list[dict]:
    from kernelsmith.train import trajectories

    info = trajectories.tokenizer_info(tokenizer, model)
    return [trajectories.split_row(row, tokenizer, info) for row in rows]


def _write_rows(rows: list[dict], path: Path) -> None:
    from kernelsmith.train.trajectories import replaced_whole

    with replaced_whole(path) as file:  # written aside: plan.data may be this very file
        file.writelines(json.dumps(row) + "\n" for row in rows)


def check_tokenizer(rows: list[dict], model: Path, tokenizer=None) -> None:
    """Trajectories rendered by another tokenizer or chat template are another model's token ids: fine-tuning on
    them teaches noise, silently. Each row's tokenizer record must match the student's (`tokenizer`, loaded from
    `model` when not given)."""
    from kernelsmith.train import trajectories

    tokenizer = _student_tokenizer(model) if tokenizer is None else tokenizer
    want = trajectories.tokenizer_info(tokenizer, model)
    for number, row in enumerate(rows, 1):
        said = row.get("tokenizer") or {}
        if any(said.get(k) != want[k] for k in ("chat_template_sha256", "eos_token_id")):
            raise BadInput(f"trajectory {number} was rendered by another tokenizer or chat template "
                           f"({said.get('name_or_path')!r}), not {model}'s",
                           "export the sessions again with the student's tokenizer (kernelsmith train trajectories)")
        if max(row["input_ids"]) >= len(tokenizer):
            raise BadInput(f"trajectory {number} has token ids beyond {model}'s vocabulary", "export it again")


def _reasons(reasons: Counter, skipped: list) -> str:
    said = [f"{n} {why}" for why, n in reasons.most_common()] + [f"{len(skipped)} sessions skipped"]
    return ", ".join(said)
