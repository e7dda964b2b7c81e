"""The hf backend (`optimize --backend hf --model CKPT`): a local checkpoint as the policy. Tool calls are read
from the generated text; the prompt is rendered as `kernelsmith train trajectories` renders what the model is
trained on; a tiny random Llama (built here, no hub) drives a real CPU session without crashing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from kernelsmith.backends.hf import HFBackend, parse_tool_calls  # noqa: E402
from kernelsmith.errors import BadInput  # noqa: E402
from kernelsmith.session.reader import read_events, session_paths  # noqa: E402
from tinymodels import CHATML, CORPUS, build_tokenizer, tiny_llama  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASK = Path(__file__).parent / "data" / "triple_session" / "triple.py"


def test_tool_calls_are_read_from_the_text_and_a_malformed_one_stays_text():
    text = ('I will check it.<tool_call>{"name": "verify", "arguments": {}}</tool_call>'
            '<tool_call>{"name": "read_file", "arguments": "{\\"path\\": \\"model.py\\"}"}</tool_call>'
            '<tool_call>{"name": "compile", "arguments": </tool_call>')
    rest, calls = parse_tool_calls(text, turn=3)
    assert [(c.name, c.arguments, c.id) for c in calls] == [("verify", {}, "h3_0"), ("read_file", {"path": "model.py"}, "h3_1")]
    assert rest == 'I will check it.<tool_call>{"name": "compile", "arguments": </tool_call>'
    assert parse_tool_calls("no calls at all") == ("no calls at all", [])
    assert parse_tool_calls('<tool_call>["verify"]</tool_call>')[1] == []  # not an object: not a call


def test_a_missing_checkpoint_is_one_line(tmp_path):
    with pytest.raises(BadInput, match="local checkpoint folder"):
        HFBackend(str(tmp_path / "absent"))
    with pytest.raises(BadInput, match="needs --model"):
        HFBackend(None)


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    corpus = CORPUS + [p.read_text() for p in (ROOT / "prompts").glob("*.md")] + [(ROOT / "skills" / "cpu" / "SKILL.md").read_text()]
    folder = build_tokenizer(tmp_path_factory.mktemp("student"), CHATML, corpus, vocab_size=3000)
    return tiny_llama(folder, vocab_size=3000)


def test_a_session_runs_on_a_local_checkpoint_and_its_prompt_is_what_training_renders(student, tmp_path):
    workdir = tmp_path / "wd"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("KERNELSMITH_")}
    proc = subprocess.run([sys.executable, "-m", "kernelsmith.cli", "optimize", str(TASK), "--workdir", str(workdir),
                           "--device", "cpu", "--backend", "hf", "--model", str(student), "--max-turns", "2"],
                          capture_output=True, text=True, timeout=600, env={**env, "KERNELSMITH_MAX_TOKENS": "24"})
    # a random model verifies nothing: exit 1 (rejected), the session whole, no traceback
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    (path,) = list(session_paths(workdir))
    events = list(read_events(path))
    turns = [e for e in events if e["kind"] == "model_turn"]
    assert len(turns) == 2 and events[0]["config"]["backend"] == "hf"
    assert all(0 < t["usage"]["output_tokens"] <= 24 for t in turns)  # it generated, within the budget
    assert events[-1]["kind"] == "session_end" and events[-1]["reason"] == "max_turns"

    # the prompt of the first turn is the head of the chat as `train trajectories` renders it
    from kernelsmith.agent.tools import Toolbox
    from kernelsmith.train import trajectories

    start = events[0]
    backend = HFBackend(str(student))
    prompt = backend.prompt(start["system"], start["messages"], Toolbox(workdir, evaluator=None).specs())
    chat = trajectories.chat_of(start["system"], start["messages"] + [turns[0]["message"]], [None] * 2)
    tokenizer = trajectories.load_tokenizer(student)
    rendered = tokenizer.apply_chat_template(chat.messages, tools=trajectories.agent_tools(), tokenize=False)
    assert rendered.startswith(prompt) and prompt.endswith("<|im_start|>assistant\n")
    assert json.dumps(turns[0]["message"]["content"])  # recorded as text


LOAD_IN_THREADS = """
import sys, threading
from kernelsmith.backends.hf import HFBackend
barrier, errors = threading.Barrier(8), []
def load():
    backend = HFBackend(sys.argv[1], device="cpu")
    barrier.wait()
    try:
        backend._load()
    except Exception as err:
        errors.append(repr(err))
threads = [threading.Thread(target=load) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
print(errors)
sys.exit(1 if errors else 0)
"""


def test_bench_workers_load_their_policies_at_once_in_a_fresh_process(student):
    """`bench --backend hf --workers N` loads N policies on N threads at the same moment; transformers imports its
    classes lazily, and on the device its lazy import raced (ImportError on 12 of 12 rows of a bench)."""
    proc = subprocess.run([sys.executable, "-c", LOAD_IN_THREADS, str(student)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_a_session_compacts_at_the_checkpoints_own_window(student, tmp_path):
    """The hf policy's window is the positions its checkpoint was trained for, not a guess: SmolLM2-135M has
    8,192, and sessions that assumed 32,768 sent it 14,700-token prompts without ever compacting."""
    from kernelsmith.backends import context_window
    from kernelsmith.config import Settings

    small = tmp_path / "small"
    small.mkdir()
    config = json.loads((student / "config.json").read_text())
    (small / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 8192}))
    assert context_window("hf", Settings(backend="hf", model=str(small))) == 8192
    assert context_window("hf", Settings(backend="hf", model=str(small), context_window=999)) == 999
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert context_window("hf", Settings(backend="hf", model=str(broken))) == 32_768


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_small_window_gets_the_guide_without_its_playbook_which_stays_in_the_workdir(tmp_path, device):
    """The CUDA guide alone is about 11,000 of SmolLM2-135M's tokens, more than its whole window: such a policy
    gets the guide up to its playbook where that fits half the window, else the guide's brief, each with a pointer
    to SKILL.md; a large window gets all of it."""
    from kernelsmith import workdir as wd
    from kernelsmith.agent.env import PLAYBOOK, system_prompt

    (tmp_path / "SKILL.md").write_text(wd.render_skill(device, "task", "fp32"))
    config = wd.WorkdirConfig(task="task", origin="model.py", device=device, precision="fp32")
    rules = PLAYBOOK.search((tmp_path / "SKILL.md").read_text()).start()
    whole, shorter, brief = (system_prompt(tmp_path, config, window) for window in (200_000, rules // 2 + 200, 2048))
    assert "Optimisation playbook" in whole and system_prompt(tmp_path, config) == whole
    assert "Optimisation playbook" not in shorter and "is in SKILL.md" in shorter and len(shorter) < len(whole) * 0.8
    assert "## 1. The workdir" in shorter and "Optimisation playbook" in (tmp_path / "SKILL.md").read_text()
    assert "## 1. The workdir" not in brief and "skill, in brief" in brief and "append: true" in brief
    assert "is in SKILL.md in the workdir: read_file it" in brief and len(brief) < len(shorter) * 0.6
    # counted in the window's own tokens where they are known: a guide that fits half the window at 4 characters
    # a token but not at one (a small model's tokenizer on text it was not trained on) loses its playbook
    guide = len((tmp_path / "SKILL.md").read_text())
    window = guide  # the estimate: a quarter of the window; one token a character: all of it
    assert "Optimisation playbook" in system_prompt(tmp_path, config, window)
    assert "Optimisation playbook" not in system_prompt(tmp_path, config, window, text_tokens=len)


def test_sessions_at_once_share_one_policy_and_get_their_own_replies_from_one_batch(student):
    """bench's and PPO's sessions run on threads; generating a small model is bound by the host and the
    threads share one interpreter lock, so each loading and calling its own copy bought nothing. One policy
    per checkpoint generates the turns that come together as one left-padded batch, and each session gets
    the reply it would have got alone (greedy decoding, prompts of different lengths)."""
    import threading

    from kernelsmith.backends.hf_batching import shared_policy

    asks = [[{"role": "user", "content": "Write a kernel. " * n}] for n in (1, 5, 9, 14)]
    backends = [HFBackend(str(student), max_tokens=12, device="cpu", temperature=0.0) for _ in asks]
    alone = [backends[0].complete("You write kernels.", ask, []).text for ask in asks]
    policy = shared_policy(student, "cpu", 0)
    assert all(b._load()[1] is policy for b in backends)  # one model in memory, not four
    batches_before, together, barrier = len(policy.batches), [None] * len(asks), threading.Barrier(len(asks))

    def turn(i: int) -> None:
        barrier.wait()
        together[i] = backends[i].complete("You write kernels.", asks[i], []).text

    threads = [threading.Thread(target=turn, args=(i,)) for i in range(len(asks))]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    assert together == alone
    assert max(policy.batches[batches_before:]) > 1  # generated together


def test_a_checkpoint_written_over_is_loaded_again(student, tmp_path):
    """PPO writes each step's policy over the last one's, in the same folder: the next step's sessions must
    generate with the new weights, not the shared copy of the old ones."""
    import shutil
    import time

    from kernelsmith.backends.hf_batching import shared_policy

    folder = tmp_path / "policy"
    shutil.copytree(student, folder)
    first = shared_policy(folder, "cpu", 0)
    assert shared_policy(folder, "cpu", 0) is first
    ids = first.tokenizer("a kernel", add_special_tokens=False)["input_ids"]
    how = {"max_new_tokens": 3, "do_sample": False, "pad_token_id": 0, "eos_token_id": first.tokenizer.eos_token_id}
    before = first.generate(ids, how)
    assert first._serving  # its thread waits for the next turn
    config = folder / "config.json"
    os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))  # the next step's save
    second = shared_policy(folder, "cpu", 0)
    assert second is not first
    for _ in range(100):  # the old copy's thread ends: nothing keeps its model in memory but its sessions
        if not first._serving:
            break
        time.sleep(0.05)
    assert not first._serving
    assert first.generate(ids, how) == before == second.generate(ids, how)  # one still holding it is served


def test_continuous_batching_gives_each_session_its_own_reply_and_a_failed_request_fails_alone(student, monkeypatch):
    """The GPU's default engine (transformers' continuous batching, hf_continuous.py), run here on the CPU:
    sessions that ask at once get what they would have got alone (greedy), and a prompt the paged cache
    cannot hold fails that turn with an error while the others are served, then and after."""
    import threading

    from kernelsmith.backends.hf_batching import shared_policy
    from kernelsmith.backends.hf_continuous import ContinuousPolicy

    asks = [[{"role": "user", "content": "Write a kernel. " * n}] for n in (1, 5, 9, 14)]
    alone = [HFBackend(str(student), max_tokens=12, device="cpu", temperature=0.0).complete("You write kernels.", a, []).text
             for a in asks]
    monkeypatch.setenv("KERNELSMITH_HF_ENGINE", "continuous")
    monkeypatch.setenv("KERNELSMITH_HF_KV_TOKENS", "1024")
    policy = shared_policy(student, "cpu", 0)
    assert isinstance(policy, ContinuousPolicy)
    backends = [HFBackend(str(student), max_tokens=12, device="cpu", temperature=0.0) for _ in asks]
    together, barrier = [None] * len(asks), threading.Barrier(len(asks) + 1)
    too_long: list = []

    def turn(i: int) -> None:
        barrier.wait()
        try:
            together[i] = backends[i].complete("You write kernels.", asks[i], []).text
        except Exception as err:  # noqa: BLE001  shown by the assertion below
            together[i] = repr(err)

    def overflow() -> None:
        barrier.wait()
        ids = policy.tokenizer("kernel " * 1500, add_special_tokens=False)["input_ids"]
        try:
            policy.generate(ids, backends[0]._sampling(policy.tokenizer))
        except RuntimeError as err:
            too_long.append(str(err))

    threads = [threading.Thread(target=turn, args=(i,)) for i in range(len(asks))] + [threading.Thread(target=overflow)]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    assert together == alone
    assert len(too_long) == 1 and "generation failed" in too_long[0], too_long
    assert backends[1].complete("You write kernels.", asks[1], []).text == alone[1]  # served after the failure
    policy.retire()


def test_bad_engine_settings_are_one_line_errors(student, monkeypatch):
    monkeypatch.setenv("KERNELSMITH_HF_ENGINE", "warp")
    with pytest.raises(BadInput, match="KERNELSMITH_HF_ENGINE='warp'"):
        HFBackend(str(student))
    monkeypatch.setenv("KERNELSMITH_HF_ENGINE", "batched")
    monkeypatch.setenv("KERNELSMITH_HF_KV_TOKENS", "0")
    with pytest.raises(BadInput, match="positive number of tokens"):
        HFBackend(str(student))


def test_continuous_streams_stop_when_idle_or_retired_and_a_late_turn_is_still_served(student, monkeypatch):
    """A manager left idle stops and frees its cache (PPO's update wants the GPU); a turn after that, or on a
    policy already replaced, or meeting a stream that has just stopped, is served by a new manager."""
    import time

    from kernelsmith.backends import hf_continuous
    from kernelsmith.backends.hf_batching import shared_policy

    monkeypatch.setenv("KERNELSMITH_HF_ENGINE", "continuous")
    monkeypatch.setenv("KERNELSMITH_HF_KV_TOKENS", "1024")
    monkeypatch.setattr(hf_continuous, "IDLE_S", 0.0)
    policy = shared_policy(student, "cpu", 0)
    ids = policy.tokenizer("a kernel", add_special_tokens=False)["input_ids"]
    how = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0, "eos_token_id": policy.tokenizer.eos_token_id}
    first = policy.generate(ids, how)
    stream = policy._stream(how)
    for _ in range(200):  # idle: the router stops it at its next poll, and its generation loop ends
        if stream.stopped and not stream.manager.is_running():
            break
        time.sleep(0.05)
    assert stream.stopped and not stream.manager.is_running()
    assert policy.generate(ids, how) == first and policy._stream(how) is not stream
    stopped = policy._stream(how)
    stopped.stopped = True  # a stream that stopped between a session taking it and asking it
    assert policy.generate(ids, how) == first
    policy.retire()
    assert policy.generate(ids, how) == first  # a session still holding the replaced policy


def test_a_process_that_used_continuous_batching_exits(student):
    """transformers' generation thread is not a daemon: started as it comes, a bench or PPO process that used
    the policy never exited (a device call ran to its limit)."""
    script = ("import sys; from kernelsmith.backends.hf_batching import shared_policy\n"
              "p = shared_policy(sys.argv[1], 'cpu', 0)\n"
              "ids = p.tokenizer('a kernel', add_special_tokens=False)['input_ids']\n"
              "print(len(p.generate(ids, {'max_new_tokens': 4, 'do_sample': False, 'pad_token_id': 0})))\n")
    env = {**os.environ, "KERNELSMITH_HF_ENGINE": "continuous", "KERNELSMITH_HF_KV_TOKENS": "1024",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script, str(student)], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "4", proc.stderr[-2000:]


def test_the_playbook_decision_counts_the_task_and_tools_every_request_holds(tmp_path):
    """SmolLM2's CPU guide (3,718 of its tokens) fits half its 8,192 positions alone, but not with the tools
    (858) and the task beside it: the prefix would be over what compaction aims for at every turn."""
    from kernelsmith import workdir as wd
    from kernelsmith.agent.env import system_prompt

    (tmp_path / "SKILL.md").write_text(wd.render_skill("cpu", "task", "fp32"))
    config = wd.WorkdirConfig(task="task", origin="model.py", device="cpu", precision="fp32")
    guide = len((tmp_path / "SKILL.md").read_text())
    window = 2 * guide + 100  # one token a character: the guide alone is under half the window
    assert "Optimisation playbook" in system_prompt(tmp_path, config, window, text_tokens=len)
    fixed = "x" * 200  # the task and the tools
    assert "Optimisation playbook" not in system_prompt(tmp_path, config, window, text_tokens=len, fixed=fixed)
