"""The trainer's CUDA path: the critic and the policy's forwards run under bfloat16 autocast (value.autocast), the
value head and the LM head in float32, and value pretraining on the GPU still learns the outcome. Run on the device."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device)")]

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernelsmith.train import critic as critics  # noqa: E402
from kernelsmith.train import ppo_trainer, value  # noqa: E402
from test_train_value import VOCAB, trajectory  # noqa: E402
from tinymodels import tiny_llama  # noqa: E402


def body_dtypes(model, run) -> set:
    """The dtypes of the body's linear layers' outputs while `run` runs."""
    seen, hooks = set(), []
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            hooks.append(module.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype)))
    try:
        out = run()
    finally:
        for hook in hooks:
            hook.remove()
    return seen, out


def test_the_body_runs_in_bfloat16_and_the_heads_in_float32(tmp_path):
    folder = tiny_llama(tmp_path / "m", vocab_size=VOCAB)
    rows = [trajectory(random.Random(0), win=True)]
    batch = value.batch_of(rows, 0, "cuda")
    critic = critics.from_causal_lm(folder).cuda()
    policy = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).cuda()
    with torch.no_grad(), value.autocast("cuda"):
        dtypes, values = body_dtypes(critic.body, lambda: critic(batch["input_ids"], batch["attention_mask"]))
        logp, _ = ppo_trainer.token_log_probs(policy, batch, 1.0)
    assert dtypes == {torch.bfloat16} and values.dtype == torch.float32 and logp.dtype == torch.float32
    with torch.no_grad():
        plain, _ = ppo_trainer.token_log_probs(policy, batch, 1.0)
    assert (logp - plain).abs().max() < 0.1  # a 2-layer model's bfloat16 rounding, far below a token's log-prob spread


def test_value_pretraining_on_the_gpu_learns_the_outcome(tmp_path):
    folder = tiny_llama(tmp_path / "m", vocab_size=VOCAB)
    rng = random.Random(1)
    rows = [trajectory(rng, win=i % 2 == 0) for i in range(8)]
    cfg = value.ValueConfig(epochs=40, lr=3e-3, batch_size=4, seed=0)
    summary = value.train(rows, folder, tmp_path / "critic", cfg, device="cuda")
    assert summary["last"]["value_loss"] < 0.2 * summary["first"]["value_loss"], summary
    assert summary["last"]["explained_variance"] > 0.5, summary["last"]


def test_the_gpu_default_engine_serves_sessions_at_once_as_each_alone(tmp_path, monkeypatch):
    """On the GPU the hf backend generates through transformers' continuous batching (hf_continuous.py): eight
    sessions asking at once get the greedy replies the batched generate gives each alone."""
    import threading

    from kernelsmith.backends import hf_batching
    from kernelsmith.backends.hf_continuous import ContinuousPolicy
    from tinymodels import CHATML, CORPUS, build_tokenizer

    folder = tiny_llama(build_tokenizer(tmp_path / "m", CHATML, CORPUS, vocab_size=3000), vocab_size=3000)
    monkeypatch.setenv("KERNELSMITH_HF_ENGINE", "batched")
    batched = hf_batching.shared_policy(folder, "cuda", 0)
    ids = [batched.tokenizer("Write a kernel. " * n, add_special_tokens=False)["input_ids"] for n in range(1, 9)]
    how = {"max_new_tokens": 40, "do_sample": False, "pad_token_id": 0, "eos_token_id": batched.tokenizer.eos_token_id}
    alone = [batched.generate(i, how) for i in ids]
    monkeypatch.delenv("KERNELSMITH_HF_ENGINE")
    policy = hf_batching.shared_policy(folder, "cuda", 0)
    assert isinstance(policy, ContinuousPolicy)
    together = [None] * len(ids)

    def turn(k: int) -> None:
        together[k] = policy.generate(ids[k], how)

    threads = [threading.Thread(target=turn, args=(k,)) for k in range(len(ids))]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    assert together == alone
    policy.retire()
