"""`kernelsmith train ppo` on the CPU: the update moves a tiny Llama the right way on trajectories whose outcome
its own tokens decide, and the command runs real rollouts through KernelEnv with a tiny checkpoint, logs a
step's metrics, saves the policy and critic, and resumes."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from kernelsmith.train import critic as critics  # noqa: E402
from kernelsmith.train import ppo, ppo_trainer, value  # noqa: E402
from tinymodels import CHATML, CORPUS, build_tokenizer, tiny_llama  # noqa: E402

WIN, LOSE = 7, 9


def synthetic(rng: random.Random, win: bool) -> dict:
    ids, mask = [rng.randrange(10, 64) for _ in range(6)], [0] * 6
    for _ in range(3):
        turn = [rng.randrange(10, 64) for _ in range(2)] + [WIN if win else LOSE]
        tool = [rng.randrange(10, 64) for _ in range(4)]
        ids, mask = ids + turn + tool, mask + [1] * len(turn) + [0] * len(tool)
    return {"format": 1, "input_ids": ids, "loss_mask": mask, "rewards": {"final": 3.0 if win else -1.0}}


def marker_log_prob(model, rows: list[dict], marker: int) -> float:
    batch = value.batch_of(rows, 0, "cpu")
    with torch.no_grad():
        logp, _ = ppo_trainer.token_log_probs(model, batch, 1.0)
    at = batch["input_ids"] == marker
    return float(logp[at].mean())


def test_ppo_updates_raise_what_won_and_lower_what_lost_and_stay_near_the_reference(tmp_path):
    folder = tiny_llama(tmp_path / "policy", vocab_size=64)
    policy = transformers.AutoModelForCausalLM.from_pretrained(str(folder))
    reference = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    critic = critics.from_causal_lm(folder)
    rng = random.Random(0)
    rows = [synthetic(rng, win=i % 2 == 0) for i in range(8)]
    wins, losses = rows[0::2], rows[1::2]
    before = marker_log_prob(policy, wins, WIN), marker_log_prob(policy, losses, LOSE)
    cfg = ppo_trainer.PpoConfig(epochs=1, lr=2e-3, critic_lr=1e-3, temperature=1.0)
    optimizers = (torch.optim.AdamW(policy.parameters(), lr=cfg.lr), torch.optim.AdamW(critic.parameters(), lr=cfg.critic_lr))
    history = [ppo_trainer.update(policy, reference, critic, optimizers, rows, cfg, "cpu") for _ in range(6)]
    after = marker_log_prob(policy, wins, WIN), marker_log_prob(policy, losses, LOSE)
    assert after[0] > before[0] + 0.5 and after[1] < before[1] - 0.5, (before, after)
    assert history[0]["kl_to_reference"] == pytest.approx(0.0, abs=1e-6) and history[-1]["kl_to_reference"] > 0
    assert history[0]["approx_kl"] == pytest.approx(0.0, abs=1e-6)  # first epoch: the policy is the old policy
    assert history[-1]["value_loss"] < history[0]["value_loss"] and history[0]["reward_mean"] == 1.0
    assert all(0.0 <= h["clip_fraction"] <= 1.0 and h["entropy"] > 0 for h in history)


def test_the_command_rolls_out_updates_saves_and_resumes(tmp_path):
    root = Path(__file__).resolve().parents[1]
    corpus = CORPUS + [p.read_text() for p in (root / "prompts").glob("*.md")] + [(root / "skills" / "cpu" / "SKILL.md").read_text()]
    student = tiny_llama(build_tokenizer(tmp_path / "student", CHATML, corpus, vocab_size=3000), vocab_size=3000)
    critics.from_causal_lm(student).save(tmp_path / "critic", base=str(student))
    task = Path(__file__).parent / "data" / "triple_session" / "triple.py"
    out = tmp_path / "ppo"
    cli = [sys.executable, "-m", "kernelsmith.cli", "train", "ppo", "--tasks", str(task), "--policy", str(student),
           "--critic", str(tmp_path / "critic"), "--out", str(out), "--sessions", "2", "--max-turns", "2",
           "--device", "cpu", "--lr", "1e-4"]
    env = {k: v for k, v in __import__("os").environ.items() if not k.endswith("_API_KEY")}
    env["KERNELSMITH_MAX_TOKENS"] = "16"
    proc = subprocess.run(cli + ["--steps", "1"], capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["sessions"] == 2 and rows[0]["trajectories"] == 2
    for key in ("reward_mean", "kl_to_reference", "entropy", "value_loss", "clip_fraction", "response_length",
                "tool_call_validity", "tokens_per_s", "env_steps_per_s", "rollout_tokens_per_s"):
        assert key in rows[0], key
    assert rows[0]["rollout_tokens_per_s"] > 0 and "rollout tok/s" in proc.stdout
    # the update's throughput counts every token it reads, the prompt and tool outputs too, not only the policy's
    assert rows[0]["sequence_tokens"] > 10 * rows[0]["policy_tokens"] > 0
    assert rows[0]["reward_mean"] == -1.0  # a random model verifies nothing
    assert critics.is_critic(out / "critic") and (out / "policy" / "config.json").is_file()
    again = subprocess.run(cli + ["--steps", "1"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert again.returncode == 2 and "--resume" in again.stderr and "Traceback" not in again.stderr
    more = subprocess.run(cli + ["--steps", "2", "--resume"], capture_output=True, text=True, timeout=900, env=env,
                          cwd=tmp_path)
    assert more.returncode == 0, more.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert "step 2/2: reward -1.000" in more.stdout and more.stdout.count("rollout triple run") == 2  # the live lines
    assert (out / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    adam = torch.load(out / "optimizers.pt")  # Adam's moments carried over the resume: two steps taken in all
    assert [int(next(iter(o["state"].values()))["step"]) for o in adam] == [2, 2]


def test_micro_batches_accumulate_to_the_same_update_as_the_whole_batch(tmp_path):
    """Gradient accumulation must not change the step: each micro-batch's loss is divided by the step's token
    count, so one trajectory per forward gives the weights, losses and metrics of all eight in one forward."""
    folder = tiny_llama(tmp_path / "policy", vocab_size=64)
    rng = random.Random(1)
    rows = [synthetic(rng, win=i % 3 == 0) for i in range(8)]
    rows[0] = {**rows[0], "input_ids": rows[0]["input_ids"][:-4], "loss_mask": rows[0]["loss_mask"][:-4]}  # uneven widths
    results = []
    for size in (8, 1, 3):
        torch.manual_seed(0)
        policy = transformers.AutoModelForCausalLM.from_pretrained(str(folder))
        reference = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
        critic = critics.from_causal_lm(folder)
        cfg = ppo_trainer.PpoConfig(epochs=2, lr=1e-3, critic_lr=1e-3, temperature=1.0, micro_batch=size)
        optimizers = (torch.optim.AdamW(policy.parameters(), lr=cfg.lr), torch.optim.AdamW(critic.parameters(), lr=cfg.critic_lr))
        metrics = ppo_trainer.update(policy, reference, critic, optimizers, rows, cfg, "cpu")
        results.append((metrics, torch.nn.utils.parameters_to_vector(policy.parameters()).detach(),
                        torch.nn.utils.parameters_to_vector(critic.parameters()).detach()))
    (whole, p8, c8), *split = results
    start = torch.nn.utils.parameters_to_vector(transformers.AutoModelForCausalLM.from_pretrained(str(folder)).parameters())
    assert (p8 - start).abs().max() > 1e-4  # the update moved the weights
    for metrics, p, c in split:
        assert torch.allclose(p, p8, atol=2e-6) and torch.allclose(c, c8, atol=2e-6)
        for key in ("policy_loss", "value_loss", "kl_to_reference", "entropy", "clip_fraction", "grad_norm", "reward_mean"):
            assert metrics[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-6), key


def test_a_step_draws_its_tasks_epoch_by_epoch_and_the_same_again_on_resume():
    """--tasks-per-step: every task once an epoch, in a seeded order that differs between epochs, a batch that
    does not divide the task count running over into the next epoch, and step k's batch a function of k alone."""
    tasks = [Path(f"t{i}.py") for i in range(7)]
    batches = [ppo_trainer.step_tasks(tasks, 3, step, seed=0) for step in range(7)]  # 21 draws: three epochs
    stream = [t for b in batches for t in b]
    assert all(len(b) == 3 for b in batches)
    epochs = [stream[0:7], stream[7:14], stream[14:21]]
    assert all(sorted(e) == sorted(tasks) for e in epochs) and len({tuple(e) for e in epochs}) == 3
    assert ppo_trainer.step_tasks(tasks, 3, 5, seed=0) == batches[5]  # a resume at step 5 draws the same
    assert ppo_trainer.step_tasks(tasks, 3, 0, seed=1) != batches[0]
    assert ppo_trainer.step_tasks(tasks, 0, 4, seed=0) == tasks == ppo_trainer.step_tasks(tasks, 9, 4, seed=0)


@pytest.mark.parametrize("extra,message", [(["--steps", "0"], "--steps, --sessions and --micro-batch must be at least 1"),
                                           (["--tasks-per-step", "-1"], "--tasks-per-step must be 0 (every task) or more")])
def test_bad_numbers_are_one_line_and_exit_2(tmp_path, extra, message):
    student = tiny_llama(build_tokenizer(tmp_path / "student", CHATML))
    critics.from_causal_lm(student).save(tmp_path / "critic", base=str(student))
    task = Path(__file__).parent / "data" / "triple_session" / "triple.py"
    proc = subprocess.run([sys.executable, "-m", "kernelsmith.cli", "train", "ppo", "--tasks", str(task), "--policy",
                           str(student), "--critic", str(tmp_path / "critic"), "--out", str(tmp_path / "ppo"),
                           "--device", "cpu", *extra], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "ppo").exists()  # nothing started


def test_the_log_probabilities_are_those_of_the_models_own_logits(tmp_path):
    """token_log_probs runs the body and the LM head apart (the head in float32 under autocast); on the CPU, in
    float32, it must give exactly what the model's own forward gives, padding and all."""
    folder = tiny_llama(tmp_path / "policy", vocab_size=64)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    rng = random.Random(2)
    rows = [synthetic(rng, win=True), synthetic(rng, win=False)]
    rows[1] = {**rows[1], "input_ids": rows[1]["input_ids"][:-5], "loss_mask": rows[1]["loss_mask"][:-5]}
    batch = value.batch_of(rows, 0, "cpu")
    with torch.no_grad():
        logp, entropy = ppo_trainer.token_log_probs(model, batch, 0.7)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1] / 0.7
    expected = torch.log_softmax(logits, -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    assert torch.allclose(logp[:, 1:], expected, atol=1e-6) and logp.shape == batch["input_ids"].shape
    assert torch.allclose(entropy[:, 1:], ppo.entropy_from_logits(logits), atol=1e-6)


def test_a_resumed_steps_rates_count_only_the_sessions_this_call_played():
    """A call killed after its rollouts leaves them in the step's folder; the resumed call plays nothing, and
    its rates were the earlier sessions' tokens over ~0 s (8.4M tok/s on an H100, 2026-12-06)."""
    from kernelsmith.train.ppo_trainer import _env_numbers

    rows = [{"task": "a", "run": 0, "session_id": "s1", "turns": 4}, {"task": "b", "run": 0, "session_id": "s2", "turns": 2}]
    lines = [{"session_id": "s1", "messages": [{"tool_calls": [{}, {}]}], "flags": {"malformed_calls": 1},
              "stats": {"policy_tokens": 400}},
             {"session_id": "s2", "messages": [{"tool_calls": [{}, {}]}], "flags": {}, "stats": {"policy_tokens": 100}}]
    fresh = _env_numbers(rows, lines, 10.0)
    assert (fresh["env_steps_per_s"], fresh["rollout_tokens_per_s"], fresh["tool_call_validity"]) == (0.6, 50.0, 0.75)
    half = _env_numbers(rows, lines, 10.0, earlier={("", "a", 0)})
    assert (half["env_steps_per_s"], half["rollout_tokens_per_s"], half["resumed_sessions"]) == (0.2, 10.0, 1)
    assert half["tool_call_validity"] == 0.75  # validity is over every session of the step
    replayed = _env_numbers(rows, lines, 0.01, earlier={("", "a", 0), ("", "b", 0)})
    assert replayed["env_steps_per_s"] is None and replayed["rollout_tokens_per_s"] is None
