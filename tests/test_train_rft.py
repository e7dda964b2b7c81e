"""RFT's selection and fine-tuning on the CPU: a tiny Llama and a word-level tokenizer built here (no model hub),
trained with TRL's SFTTrainer on exported-format trajectories. What a user checks: only the trajectories fit
to imitate are kept, with the reasons counted; the student learns the policy's tokens and is not taught the
tool outputs (the loss mask reaches TRL); the checkpoint reloads."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")

from kernelsmith.train import rft  # noqa: E402
from tinymodels import tiny_llama  # noqa: E402

VOCAB = 64
POLICY = [7, 11, 12, 13]  # what the teacher writes every turn
TOOL = [20, 21, 22, 23, 24]  # what every tool answers: context, never a target


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    from tokenizers import Tokenizer, models

    folder = tmp_path_factory.mktemp("student")
    vocab = {f"t{i}": i for i in range(VOCAB)}
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t1")),
                                                unk_token="t1", pad_token="t0", eos_token="t2")
    fast.save_pretrained(folder)
    return tiny_llama(folder, vocab_size=VOCAB)  # its eos_token_id is 2, t2 above


def trajectory(rng: random.Random, final: float = 3.0, **extra) -> dict:
    ids, mask = [rng.randrange(30, VOCAB) for _ in range(6)], [0] * 6
    for _ in range(3):
        ids, mask = ids + POLICY + TOOL, mask + [1] * len(POLICY) + [0] * len(TOOL)
    return {"format": 1, "input_ids": ids, "loss_mask": mask, "rewards": {"final": final, "turns": []}, **extra}


def nll(folder: Path, rows: list[dict], policy: bool) -> float:
    """Mean negative log-likelihood of the policy's tokens (or of the tool outputs' tokens after their first)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    losses = []
    for row in rows:
        ids = torch.tensor([row["input_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, :-1], -1)
        for t in range(1, len(row["input_ids"])):
            tool_inside = not row["loss_mask"][t] and not row["loss_mask"][t - 1] and t > 6
            if (row["loss_mask"][t] == 1) if policy else tool_inside:
                losses.append(-float(logp[t - 1, row["input_ids"][t]]))
    return sum(losses) / len(losses)


def test_the_student_learns_the_policys_tokens_and_not_the_tool_outputs(student, tmp_path):
    rng = random.Random(0)
    rows = [trajectory(rng) for _ in range(8)]
    before = nll(student, rows, policy=True), nll(student, rows, policy=False)
    summary = rft.finetune(rows, student, tmp_path / "ckpt", rft.RftConfig(epochs=15, lr=3e-3, grad_accum=2))
    after = nll(tmp_path / "ckpt", rows, policy=True), nll(tmp_path / "ckpt", rows, policy=False)
    assert summary["steps"] > 10 and summary["last"]["loss"] < summary["first"]["loss"]
    assert summary["trained_on"] == 8 and summary["past_window"] == 0
    assert after[0] < 0.25 * before[0], (before, after)  # the teacher's tokens: learnt
    assert before[1] - after[1] < 0.25 * (before[0] - after[0]), (before, after)  # the tool outputs: not taught
    assert (tmp_path / "ckpt" / "metrics.jsonl").read_text().count("\n") == summary["steps"]
    assert transformers.AutoTokenizer.from_pretrained(str(tmp_path / "ckpt"), local_files_only=True).pad_token == "t0"


def test_only_trajectories_fit_to_imitate_are_kept_and_the_rest_counted_by_reason():
    rng = random.Random(1)
    loop_turn = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "name": "verify", "arguments": {}}]}
    rows = [trajectory(rng, 3.0), trajectory(rng, 2.0), trajectory(rng, -1.0), trajectory(rng, 0.0),
            trajectory(rng, 3.0, flags={"violations": ["timed outputs differ"]}),
            trajectory(rng, 3.0, messages=[loop_turn, {"role": "tool", "content": "x"}] * rft.LOOP_REPEATS),
            trajectory(rng, 3.0, flags={"malformed_calls": 2})]
    kept, reasons = rft.select(rows)
    assert [r["rewards"]["final"] for r in kept] == [3.0, 2.0]
    assert reasons == {"reward": 2, "flagged": 1, "looping": 1, "malformed": 1}
    assert len(rft.select(rows, min_reward=2.0)[0]) == 1
    two = [loop_turn, {"role": "tool", "content": "x"}] * (rft.LOOP_REPEATS - 1)
    assert not rft.looping(two)  # a tool called again once is not a loop


def test_a_reply_longer_than_the_student_may_write_is_not_imitated():
    """An H100 run's built-in teacher wrote first turns of 2,485-25,615 tokens, its student 384 a reply: it
    learned to open calls it was always cut off in (tool-call validity 0.00 over 4 PPO steps)."""
    rng = random.Random(2)
    short, long = (trajectory(rng, 3.0, turns=[{"start": 6, "end": 10}, {"start": 15, "end": 15 + n}]) for n in (4, 40))
    kept, reasons = rft.select([short, long], max_reply=39)
    assert kept == [short] and reasons == {"reply_too_long": 1}
    assert rft.select([short, long], max_reply=40)[0] == [short, long]  # a reply of exactly the limit fits
    assert rft.select([short, long])[0] == [short, long]  # no limit given: none applies


def test_rft_end_to_end_with_the_builtin_teacher_and_no_api_key(tmp_path):
    """`kernelsmith train rft`: the built-in policy's sessions on a CPU task (verified kernels, no API key),
    exported with the student's tokenizer, selected, and the student fine-tuned on them; then bad input."""
    import subprocess
    import sys

    from tinymodels import CHATML, CORPUS, build_tokenizer

    root = Path(__file__).resolve().parents[1]
    corpus = CORPUS + [p.read_text() for p in (root / "prompts").glob("*.md")] + [(root / "skills" / "cpu" / "SKILL.md").read_text()]
    student = build_tokenizer(tmp_path / "student", CHATML, corpus, vocab_size=3000)
    tiny_llama(student, vocab_size=3000)
    config = json.loads((student / "config.json").read_text())  # a window too small for the whole CPU guide
    (student / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 4096}))
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "kernelsmith.cli", "train", "rft"]
    args = ["--tasks", str(Path(__file__).parent / "data" / "builtin" / "pointwise.py"), "--model", str(student),
            "--out", str(out), "--samples", "1", "--max-turns", "4", "--device", "cpu", "--epochs", "1",
            "--grad-accum", "1", "--lr", "1e-3", "--max-tokens", "32768"]  # see the --data run without it below
    proc = subprocess.run(cli + args, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    selection = json.loads((out / "rft.json").read_text())
    # the teacher's verified kernel: one trajectory per context it worked in (the small window compacts)
    assert selection["sessions"] == 1 and selection["kept"] >= 1, selection
    kept = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert kept[0]["rewards"]["final"] >= 1.0 and kept[0]["provenance"]["backend"] == "builtin"
    # the teacher worked in the student's window: the system prompt the student is trained on is the one it
    # gets at run time (the guide's playbook left in SKILL.md)
    for line in kept:
        system = line["messages"][0]
        assert system["role"] == "system" and "is in SKILL.md" in system["content"], system["content"][-300:]
        assert "Optimisation playbook" not in system["content"]
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    assert (out / "metrics.jsonl").read_text().strip()
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True)
    assert reloaded.config.vocab_size == 3000

    for bad, words in [(["--teacher", "oracle"], "unknown --teacher"), (["--samples", "0"], "--samples"),
                       (["--max-reply-tokens", "0"], "--max-reply-tokens"), (["--max-tokens", "0"], "--max-tokens"),
                       (["--model", str(tmp_path / "absent")], "no model checkpoint")]:
        again = subprocess.run(cli + args + bad, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert again.returncode == 2 and words in again.stderr and "Traceback" not in again.stderr, again.stderr

    # the same trajectories again, fine-tuned on without a teacher (--data): no session is played
    again_out = tmp_path / "again"
    data_args = ["--data", str(out / "trajectories.jsonl"), "--model", str(student), "--out", str(again_out),
                 "--device", "cpu", "--epochs", "1", "--grad-accum", "1", "--max-tokens", "32768"]
    proc = subprocess.run(cli + data_args, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    reused = json.loads((again_out / "rft.json").read_text())
    assert reused["kept"] == selection["kept"] and reused["sessions"] == 1 and not (again_out / "rollouts").exists()
    assert (again_out / "trajectories.jsonl").read_text() == (out / "trajectories.jsonl").read_text()  # train value reads it
    assert (again_out / "config.json").is_file() and (again_out / "metrics.jsonl").read_text().strip()
    # without --max-tokens the student's window (4,096 positions) bounds the rows: those whose replies reach past it
    # (the batched teacher writes whole files in one reply) are left out, and with only those nothing is left
    from kernelsmith.train.value import policy_length

    past = [row for row in kept if policy_length(row) > 4096]
    assert past, [policy_length(row) for row in kept]
    (tmp_path / "past.jsonl").write_text("".join(json.dumps(row) + "\n" for row in past))
    windowed = ["--data", str(tmp_path / "past.jsonl")] + data_args[2:5] + [str(tmp_path / "windowed")] + data_args[6:-2]
    refused = subprocess.run(cli + windowed, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "no trajectory fits 4096 tokens" in refused.stderr and "Traceback" not in refused.stderr
    # trajectories exported with replies as made, split one call per reply on the way in (--data with
    # --one-call-per-reply): the same rows as the sessions exported that way, and what value reads
    split_out, direct = tmp_path / "split", tmp_path / "direct.jsonl"
    proc = subprocess.run(cli + data_args[:5] + [str(split_out)] + data_args[6:] + ["--one-call-per-reply"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    exported = subprocess.run([sys.executable, "-m", "kernelsmith.cli", "train", "trajectories", str(out / "rollouts"),
                               "--out", str(direct), "--tokenizer", str(student), "--one-call-per-reply"],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    split = [json.loads(line) for line in (split_out / "trajectories.jsonl").read_text().splitlines()]
    want = [json.loads(line) for line in direct.read_text().splitlines()]
    fields = ("messages", "input_ids", "loss_mask", "turns", "rewards", "replies")
    assert [[row[f] for f in fields] for row in split] == [[row[f] for f in fields] for row in want]
    def several(rows):  # replies of more than one call (one whose calls were not all answered stays whole)
        return sum(len(m.get("tool_calls") or []) > 1 for row in rows for m in row["messages"])
    assert several(split) < several(kept) and all(row["replies"] == "one call each" for row in split)
    # another chat template's token ids are another model's: refused in one line, as is asking for both sources
    other = build_tokenizer(tmp_path / "other", CHATML.replace("# Tools", "## Tools"), corpus, vocab_size=3000)
    tiny_llama(other, vocab_size=3000)
    for bad, words in [(["--model", str(other)], "another tokenizer"),
                       (["--tasks", str(Path(__file__).parent / "data" / "builtin" / "pointwise.py")], "one of them")]:
        refused = subprocess.run(cli + data_args + bad, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert refused.returncode == 2 and words in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    # a student whose replies are cut at 8 tokens can imitate none of the teacher's turns
    short = subprocess.run(cli + data_args[:5] + [str(tmp_path / "short")] + data_args[6:] + ["--max-reply-tokens", "8"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert short.returncode == 2 and "reply_too_long" in short.stderr and "--max-reply-tokens" in short.stderr, short.stderr


def test_given_trajectories_must_be_the_students_tokens(student):
    """`train rft --data`: a line rendered by the student's tokenizer passes; one whose record names another
    end-of-sequence token, or whose ids run past the student's vocabulary (an embedding index error at training
    time, or another model's ids), is one line."""
    from kernelsmith.errors import BadInput
    from kernelsmith.train import trajectories

    info = trajectories.tokenizer_info(transformers.AutoTokenizer.from_pretrained(str(student)), student)
    good = trajectory(random.Random(0), tokenizer=info)
    rft.check_tokenizer([good], student)
    with pytest.raises(BadInput, match="another tokenizer"):
        rft.check_tokenizer([good, {**good, "tokenizer": {**info, "eos_token_id": 7}}], student)
    with pytest.raises(BadInput, match="beyond"):
        rft.check_tokenizer([{**good, "input_ids": good["input_ids"][:-1] + [VOCAB]}], student)
