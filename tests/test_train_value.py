"""`kernelsmith train value` on the CPU: a tiny causal LM built from a config (no model hub), trajectories of
the exported format, the critic trained on GAE returns of the outcome reward. What a user checks: the loss
falls, the critic tells winning trajectories from losing ones, the saved critic reloads to the same values,
and bad input is one line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from kernelsmith.errors import BadInput  # noqa: E402
from kernelsmith.train import critic as critics  # noqa: E402
from kernelsmith.train import value  # noqa: E402
from tinymodels import tiny_llama  # noqa: E402

VOCAB = 64
WIN, LOSE = 7, 9  # a token the policy writes in every turn of a winning (losing) trajectory


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("tiny-llama"), vocab_size=VOCAB)


def trajectory(rng: random.Random, win: bool) -> dict:
    """Prompt, then policy turns and tool outputs alternating; the policy's tokens say how it ends."""
    ids, mask = [rng.randrange(10, VOCAB) for _ in range(6)], [0] * 6
    for _ in range(3):
        turn = [rng.randrange(10, VOCAB) for _ in range(4)] + [WIN if win else LOSE]
        tool = [rng.randrange(10, VOCAB) for _ in range(5)]
        ids, mask = ids + turn + tool, mask + [1] * len(turn) + [0] * len(tool)
    return {"format": 1, "input_ids": ids, "loss_mask": mask, "rewards": {"final": 3.0 if win else -1.0, "turns": []}}


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def data(tmp_path) -> Path:
    rng = random.Random(1)
    return write(tmp_path / "trajectories.jsonl", [trajectory(rng, win=i % 2 == 0) for i in range(8)])


def mean_values(critic, rows: list[dict]) -> list[float]:
    batch = value.batch_of(rows, 0, "cpu")
    with torch.no_grad():
        values = critic(batch["input_ids"], batch["attention_mask"])
    return [float(v) for v in (values * batch["mask"]).sum(1) / batch["mask"].sum(1)]


def test_the_critic_learns_the_outcome_and_its_loss_falls(tiny_model, data, tmp_path):
    rows = value.read_trajectories(data)
    cfg = value.ValueConfig(epochs=40, lr=3e-3, batch_size=4, seed=0)
    summary = value.train(rows, tiny_model, tmp_path / "critic", cfg)
    assert summary["steps"] == 80 and summary["last"]["value_loss"] < 0.2 * summary["first"]["value_loss"]
    metrics = [json.loads(line) for line in (tmp_path / "critic" / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 80 and metrics[-1]["explained_variance"] > 0.5, metrics[-1]
    critic = critics.load(tmp_path / "critic")
    means = mean_values(critic, rows)
    wins, losses = means[0::2], means[1::2]
    assert min(wins) > max(losses), means  # every winning trajectory valued above every losing one
    assert min(wins) > 1.0 and max(losses) < 0.5, means


def test_a_saved_critic_reloads_to_the_same_values_and_training_goes_on_from_it(tiny_model, data, tmp_path):
    rows = value.read_trajectories(data)
    cfg = value.ValueConfig(epochs=2, lr=1e-3, batch_size=4)
    value.train(rows, tiny_model, tmp_path / "a", cfg)
    first = critics.load(tmp_path / "a")
    again = critics.load(tmp_path / "a")
    assert mean_values(first, rows) == mean_values(again, rows)
    assert any(abs(v) > 1e-4 for v in mean_values(first, rows))  # trained: the head is no longer zero
    more = value.train(rows, tmp_path / "a", tmp_path / "b", cfg)  # from the critic, not a fresh head
    assert more["first"]["values_mean"] != 0.0


def test_min_reward_filters_and_long_trajectories_are_skipped_not_cut(data):
    rows = value.read_trajectories(data, min_reward=0.0)
    assert len(rows) == 4 and all(r["rewards"]["final"] == 3.0 for r in rows)
    kept, skipped = value.fitting(value.read_trajectories(data), max_tokens=20)
    assert kept == [] and skipped == 8
    kept, skipped = value.fitting(value.read_trajectories(data), max_tokens=30)  # the last turn ends at 31
    assert kept == [] and skipped == 8


def test_only_the_tool_results_after_the_last_reply_are_cut(data):
    """36 tokens: the last policy token is the 31st, a 5-token tool result follows. At 31 the row is kept without
    that result: nothing is trained on it, and the reward sits on the last policy token, which stays."""
    rows = value.read_trajectories(data)
    kept, skipped = value.fitting(rows, max_tokens=31)
    assert skipped == 0 and [len(r["input_ids"]) for r in kept] == [31] * 8
    assert all(r["input_ids"] == w["input_ids"][:31] and r["loss_mask"] == w["loss_mask"][:31] and r["loss_mask"][-1]
               for r, w in zip(kept, rows))
    assert value.fitting(rows, max_tokens=36)[0] == rows  # rows that fit are kept whole


@pytest.mark.parametrize("text, message", [
    ("{not json\n", "is not JSON"),
    (json.dumps({"format": 99, "input_ids": [1], "loss_mask": [1]}) + "\n", "is not a format-1 trajectory"),
    (json.dumps({"format": 1, "input_ids": [1, 2], "loss_mask": [0, 0], "rewards": {"final": 1}}) + "\n",
     "no policy tokens"),
])
def test_bad_trajectory_files_are_one_line_errors(tmp_path, text, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(BadInput, match=message):
        value.read_trajectories(path)
    with pytest.raises(BadInput, match="no trajectory file"):
        value.read_trajectories(tmp_path / "absent.jsonl")


def test_the_command_trains_a_critic_and_refuses_bad_input_in_one_line(tiny_model, data, tmp_path):
    import subprocess
    import sys

    cli = [sys.executable, "-m", "kernelsmith.cli", "train", "value"]
    args = ["--data", str(data), "--model", str(tiny_model), "--out", str(tmp_path / "critic"), "--epochs", "3",
            "--lr", "3e-3", "--device", "cpu"]
    proc = subprocess.run(cli + args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "explained variance" in proc.stdout and critics.is_critic(tmp_path / "critic")
    assert len((tmp_path / "critic" / "metrics.jsonl").read_text().splitlines()) == 6  # 8 rows / 4 x 3 epochs
    for bad, words in [(["--model", str(tmp_path / "absent")], "no model checkpoint"),
                       (["--min-reward", "5"], "no trajectory to train on"),
                       (["--data", str(tmp_path / "absent.jsonl")], "no trajectory file")]:
        again = subprocess.run(cli + args + bad, capture_output=True, text=True, timeout=120)
        assert again.returncode == 2 and words in again.stderr and "Traceback" not in again.stderr, again.stderr


def test_training_mode_recomputes_activations_and_gives_the_same_gradients(tmp_path):
    """for_training turns on gradient checkpointing (long trajectories do not fit otherwise); the gradients must
    be those of the plain backward."""
    import torch
    from kernelsmith.train import critic as critics
    from tinymodels import tiny_llama

    folder = tiny_llama(tmp_path / "m", vocab_size=64)
    ids = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    grads = []
    for checkpointed in (False, True):
        critic = critics.from_causal_lm(folder)
        torch.manual_seed(1)
        torch.nn.init.normal_(critic.head.weight)  # a zero head passes no gradient to the body
        if checkpointed:
            critics.for_training(critic)
            assert critic.body.is_gradient_checkpointing and critic.training
        critic(ids, mask).square().sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in critic.body.parameters() if p.grad is not None]))
    assert grads[0].abs().max() > 0 and torch.allclose(grads[0], grads[1], atol=1e-6)


def test_micro_batches_accumulate_to_the_same_critic_as_the_whole_batch(tiny_model, tmp_path):
    """A step's trajectories go through one at a time (no padding) by default; the accumulated update must be the
    whole batch's: each micro-batch's loss is divided by the step's token count. Uneven lengths, so a per-micro-batch
    mean (the mistake) would weigh short trajectories' tokens more and fail this."""
    rng = random.Random(3)
    rows = [trajectory(rng, win=i % 3 == 0) for i in range(8)]
    for i in (1, 4):
        rows[i] = {**rows[i], "input_ids": rows[i]["input_ids"][:-9], "loss_mask": rows[i]["loss_mask"][:-9]}
    results = []
    for size in (8, 1, 3):
        cfg = value.ValueConfig(epochs=2, lr=3e-3, batch_size=8, micro_batch=size)
        summary = value.train(rows, tiny_model, tmp_path / f"critic{size}", cfg)
        critic = critics.load(tmp_path / f"critic{size}")
        results.append((summary["last"], torch.nn.utils.parameters_to_vector(critic.parameters()).detach()))
    (whole, weights), *split = results
    assert weights.abs().max() > 0 and whole["value_loss"] > 0
    for last, w in split:
        assert torch.allclose(w, weights, atol=2e-6)
        for key in ("value_loss", "value_clipfrac", "explained_variance", "values_mean", "returns_mean", "tokens"):
            assert last[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-6), key


def test_micro_batches_go_longest_first_and_one_trajectory_pads_nothing(data):
    rows = value.read_trajectories(data)
    rows[2] = {**rows[2], "input_ids": rows[2]["input_ids"] + [11] * 5, "loss_mask": rows[2]["loss_mask"] + [0] * 5}
    ones = value.micro_batches(rows, 0, "cpu", 1)
    assert len(ones) == len(rows) and all(bool(b["attention_mask"].all()) for b in ones)
    assert ones[0]["input_ids"][0].tolist() == rows[2]["input_ids"]
    widths = [b["input_ids"].shape[1] for b in value.micro_batches(rows, 0, "cpu", 3)]
    assert widths == sorted(widths, reverse=True) and sum(len(b["final"]) for b in value.micro_batches(rows, 0, "cpu", 3)) == 8
