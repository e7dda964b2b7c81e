"""`kernelsmith train trajectories` as a trainer's user checks its output: only the policy's tokens are
masked in, and they decode to exactly its messages; the rewards sit on the right turns and the final
reward is the ledger's best kernel's, whatever a forged record or ledger line claims; --min-reward
filters; a template whose text re-tokenises differently, and bad input, end in one line and exit 2.

One real CPU session (KernelEnv driven by hand, as tests/test_env.py does) is shared by the module;
edge cases are records written by the recorder into a workdir of their own. The tokenizers are built
here: a byte-level BPE trained on a few strings, with chat templates written below."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelsmith import HARNESS_VERSION
from kernelsmith import workdir as wd
from kernelsmith.agent.env import NUDGE, KernelEnv
from kernelsmith.agent.tools import TOOL_NAMES
from kernelsmith.backends.base import Reply, ToolCall
from kernelsmith.cli import main
from kernelsmith.config import Settings
from kernelsmith.gitops import KernelRepo, kernel_row
from kernelsmith.session import reader
from kernelsmith.session.ledger import key_id, own_key
from kernelsmith.session.recorder import Recorder
from kernelsmith.task import TaskSource
from tinymodels import CHATML, NO_TOOLS, SPACE_PROMPT, build_tokenizer  # noqa: F401

DATA = Path(__file__).parent / "data" / "triple_session"
CLI = [sys.executable, "-m", "kernelsmith.cli"]
def load(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


@pytest.fixture(scope="module")
def chatml(tmp_path_factory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("chatml"), CHATML)


def new_workdir(path: Path) -> Path:
    wd.create(TaskSource(name="triple", source=(DATA / "triple.py").read_text(), origin=str(DATA / "triple.py")),
              path, "cpu")
    KernelRepo(path).start_ledger()  # as `kernelsmith init` does
    return path


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> dict:
    """One real session: read, a verified kernel (reward 1, committed), a rejected shortcut (-1), a reply
    without a tool call (nudged), finish."""
    workdir = new_workdir(tmp_path_factory.mktemp("real") / "wd")
    env = KernelEnv(Settings(max_turns=10, warm_baselines=False), model={"backend": "scripted", "model": "by-hand"})
    env.reset(workdir)
    calls = iter(range(1, 100))

    def turn(text: str, *calls_: tuple) -> None:
        made = [ToolCall(f"c{next(calls)}", name, args) for name, args in calls_]
        env.model_turn(Reply(text, made))
        env.step_all(made)

    turn("Let me read the task.", ("read_file", {"path": "model.py"}))
    turn("", ("bash", {"command": "rm kernels/example_scale.cpp"}),
         ("write_file", {"path": "kernels/triple.cpp", "content": (DATA / "triple.cpp").read_text()}),
         ("write_file", {"path": "model_new.py", "content": (DATA / "model_new.py").read_text()}), ("verify", {}))
    shortcut = (DATA / "model_new_torch.py").read_text()
    turn("Now a shortcut.", ("write_file", {"path": "model_new.py", "content": shortcut}), ("verify", {}))
    turn("I am thinking.")
    turn("Done.", ("finish", {"summary": "a C++ triple kernel"}))
    found = {"workdir": workdir, "session": env.session_id, "final": env.final_reward(), "best": env.progress.best.sha}
    env.close("finish")
    found["events"] = reader.find_session(workdir, env.session_id)
    return found


def export(*args) -> tuple[int, list[dict]]:
    """The command in this process (transformers loads once); its lines, when it wrote them."""
    out = Path(args[args.index("--out") + 1])
    code = main(["train", "trajectories", *map(str, args)])
    return code, [json.loads(line) for line in out.read_text().splitlines()] if code == 0 else []


def ks(*args) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, timeout=120)


def assert_one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert all(word in lines[0] for word in words), lines[0]
    return lines[0]


def runs_of(mask: list[int], value: int) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of value in mask."""
    runs, start = [], None
    for i, bit in enumerate(mask + [1 - value]):
        if bit == value and start is None:
            start = i
        elif bit != value and start is not None:
            runs.append((start, i))
            start = None
    return runs


def rendered_assistant(message: dict) -> str:
    """What CHATML writes for an assistant message after its header, up to its <|im_end|>."""
    calls = "".join("<tool_call>" + json.dumps({"name": c["name"], "arguments": c["arguments"]}, ensure_ascii=False)
                    + "</tool_call>" for c in message.get("tool_calls") or [])
    return (message.get("content") or "") + calls + "<|im_end|>"


# -- the real session ------------------------------------------------------------------------------

def test_only_the_policys_tokens_are_masked_in_and_they_decode_to_its_messages(real, chatml, tmp_path):
    code, lines = export(real["workdir"], "--out", tmp_path / "t.jsonl", "--tokenizer", chatml)
    assert code == 0 and len(lines) == 1
    line, tokenizer = lines[0], load(chatml)
    assert line["format"] == 1 and line["session_id"] == real["session"]
    ids, mask = line["input_ids"], line["loss_mask"]
    # the ids are the tokenizer's own for the text, and the text is the template's for the messages
    assert ids == tokenizer(line["text"], add_special_tokens=False)["input_ids"] and len(mask) == len(ids)
    assert line["text"] == tokenizer.apply_chat_template(line["messages"], tools=line["tools"], tokenize=False)

    events = reader.read_events(real["events"])
    replies = [e["message"] for e in events if e["kind"] == "model_turn"]
    masked = [tokenizer.decode(ids[a:b]) for a, b in runs_of(mask, 1)]
    assert masked == [rendered_assistant(m) for m in replies]  # every reply, nothing else, in order
    assert [(s["start"], s["end"]) for s in line["turns"]] == runs_of(mask, 1)
    assert [s["turn"] for s in line["turns"]] == [1, 2, 3, 4, 5]

    context = "\x00".join(tokenizer.decode(ids[a:b]) for a, b in runs_of(mask, 0))
    start = events[0]
    outputs = [e["content"] for e in events if e["kind"] == "tool_result"]
    for text in [start["system"], start["messages"][0]["content"], NUDGE, *outputs]:
        assert text in context  # the prompt, the nudge and every tool output stay unmasked
    assert "[budget]" not in "".join(masked) and start["system"][:60] not in "".join(masked)
    for s in line["turns"]:  # the header before a reply and the newline after its <|im_end|> are the template's
        assert tokenizer.decode(ids[:s["start"]]).endswith("<|im_start|>assistant\n")
        assert mask[s["start"] - 1] == 0 and mask[s["end"]] == 0 and tokenizer.decode([ids[s["end"]]]) == "\n"
    assert line["stats"] == {"tokens": len(ids), "policy_tokens": sum(mask)}


def test_one_call_per_reply_splits_each_reply_at_its_calls_and_keeps_every_output_after_its_own_call(real, chatml, tmp_path):
    _, (whole,) = export(real["workdir"], "--out", tmp_path / "w.jsonl", "--tokenizer", chatml)
    code, (line,) = export(real["workdir"], "--out", tmp_path / "s.jsonl", "--tokenizer", chatml, "--one-call-per-reply")
    assert code == 0 and (whole["replies"], line["replies"]) == ("as made", "one call each")
    tokenizer, ids, mask = load(chatml), line["input_ids"], line["loss_mask"]
    assert ids == tokenizer(line["text"], add_special_tokens=False)["input_ids"]  # re-tokenised as rendered
    # turn 2 made 4 calls and turn 3 two: one reply each, the turn's text with its first call
    assert [s["turn"] for s in line["turns"]] == [1, 2, 2, 2, 2, 3, 3, 4, 5]
    masked = [tokenizer.decode(ids[a:b]) for a, b in runs_of(mask, 1)]
    assert all(m.count("<tool_call>") <= 1 for m in masked) and masked[5].startswith("Now a shortcut.<tool_call>")
    assert "".join(masked).count("<tool_call>") == sum(len(m.get("tool_calls") or []) for m in whole["messages"]) == 8
    # each call is answered right after it: the chat alternates reply, output through turn 2's four calls
    roles = [(m["role"], [c["function"]["name"] for c in m.get("tool_calls") or []]) for m in line["messages"]]
    at = roles.index(("assistant", ["bash"]))
    assert roles[at:at + 8] == [("assistant", ["bash"]), ("tool", []), ("assistant", ["write_file"]), ("tool", []),
                                ("assistant", ["write_file"]), ("tool", []), ("assistant", ["verify"]), ("tool", [])]
    calls = {c["id"]: i for i, m in enumerate(line["messages"]) for c in m.get("tool_calls") or []}
    assert all(calls[m["tool_call_id"]] == i - 1 for i, m in enumerate(line["messages"]) if m["role"] == "tool")
    # the milestone of a turn's verify sits on that turn's last reply, the verify call itself
    ends = {s["turn"]: s["end"] - 1 for s in line["turns"]}
    assert [(r["turn"], r["reward"], r["token"]) for r in line["rewards"]["turns"]] == [(2, 1.0, ends[2]), (3, -1.0, ends[3])]
    assert max(s["end"] - s["start"] for s in line["turns"]) < max(s["end"] - s["start"] for s in whole["turns"])


def test_turn_rewards_sit_on_the_turns_that_verified_and_the_final_reward_is_the_best_commits(real, chatml, tmp_path):
    # a session id prefix, looked up in --workdir
    _, (line,) = export(real["session"][:18], "--workdir", real["workdir"], "--out", tmp_path / "t.jsonl",
                        "--tokenizer", chatml)
    ends = {s["turn"]: s["end"] - 1 for s in line["turns"]}
    assert [(r["turn"], r["tool"], r["reward"], r["token"]) for r in line["rewards"]["turns"]] == [
        (2, "verify", 1.0, ends[2]), (3, "verify", -1.0, ends[3])]
    (commit,) = KernelRepo(real["workdir"]).kernel_commits(real["session"])
    assert line["rewards"]["final"] == real["final"] == kernel_row(commit)["reward"] == 1.0
    assert line["rewards"]["best"]["sha"] == real["best"] == commit["sha"]

    prov = line["provenance"]
    assert prov["workdir"] == str(real["workdir"]) and prov["session_id"] == real["session"]
    assert prov["kernel_commits"] == [real["best"]] and prov["unvouched_commits"] == []
    assert prov["harness_versions"] == [HARNESS_VERSION] and (prov["backend"], prov["model"]) == ("scripted", "by-hand")
    assert prov["head"] == reader.read_events(real["events"])[0]["head"] and prov["end_reason"] == "finish"
    assert line["task"]["name"] == "triple"
    assert line["task"]["sha256"] == wd.WorkdirConfig.load(real["workdir"]).reference_sha256


def test_min_reward_keeps_the_sessions_that_reached_it(real, chatml, tmp_path, capsys):
    other = new_workdir(tmp_path / "other")
    record(other, "20261201-000000-aaaaaa", *conversation("20261201-000000-aaaaaa", other))
    # a session folder and a workdir
    _, both = export(real["events"].parent, other, "--out", tmp_path / "all.jsonl", "--tokenizer", chatml)
    assert sorted(line["rewards"]["final"] for line in both) == [-1.0, 1.0]

    capsys.readouterr()
    _, kept = export(real["workdir"], other, "--out", tmp_path / "kept.jsonl", "--tokenizer", chatml,
                     "--min-reward", "1")
    assert [line["session_id"] for line in kept] == [real["session"]]
    assert "final reward -1 is below --min-reward 1" in capsys.readouterr().out

    code, _ = export(real["workdir"], other, "--out", tmp_path / "none.jsonl", "--tokenizer", chatml,
                     "--min-reward", "2")
    assert code == 2 and not (tmp_path / "none.jsonl").exists()
    assert "no trajectory to write" in capsys.readouterr().err


def test_a_forged_commit_or_ledger_entry_never_raises_the_final_reward(real, chatml, tmp_path, capsys):
    forged = tmp_path / "wd"
    shutil.copytree(real["workdir"], forged, symlinks=True)
    session = real["session"]
    # what an unjailed agent can do: commit with kernelsmith's trailers, add a ledger line without the key,
    # and append commit events claiming reward 3 to the record
    fake = git_commit(forged, {"Kernelsmith-Session": session, "Reward": "3", "Attempt": "99", "Turn": "5"})
    with open(forged / ".kernelsmith" / "ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps({"v": 2, "t": 1.0, "task": wd.WorkdirConfig.load(forged).reference_sha256,
                                 "kind": "kernel", "sha": fake, "session": session, "summary": "97x",
                                 "trailers": {"Kernelsmith-Session": session, "Reward": "3", "Attempt": "99"},
                                 "time": 1, "key": key_id(own_key()), "mac": "0" * 64}) + "\n")
    record(forged, session, ("commit", {"turn": 5, "sha": "f" * 40, "summary": "kernelsmith: 97x", "reward": 3.0,
                                        "speedup_vs_eager": 97.0, "speedup_vs_compile": 90.0}),
           ("commit", {"turn": 5, "sha": fake, "summary": "kernelsmith: 9x", "reward": 3.0, "speedup_vs_eager": 9.0,
                       "speedup_vs_compile": 9.0}))
    events = forged / ".kernelsmith" / "sessions" / session / "events.jsonl"
    assert reader.load_session(events).best["reward"] == 3.0  # what the record alone would say
    # another session's record claiming the real session's genuine kernel as its own
    thief = "20261201-000000-bbbbbb"
    record(forged, thief, *conversation(thief, forged),
           ("commit", {"turn": 1, "sha": real["best"], "summary": "mine", "speedup_vs_eager": 5.0,
                       "speedup_vs_compile": 5.0, "reward": 3.0}))

    _, lines = export(forged, "--out", tmp_path / "t.jsonl", "--tokenizer", chatml)
    by_session = {line["session_id"]: line for line in lines}
    assert by_session[session]["rewards"]["final"] == 1.0
    assert by_session[session]["rewards"]["best"]["sha"] == real["best"]
    assert by_session[session]["provenance"]["unvouched_commits"] == ["f" * 40, fake]
    assert by_session[thief]["rewards"]["final"] == -1.0 and by_session[thief]["rewards"]["best"] is None
    assert "not in kernelsmith's ledger" in capsys.readouterr().err  # the ledger's note on the claim


# -- tokenizers that must be refused ---------------------------------------------------------------

def test_a_template_that_re_tokenises_differently_fails_loudly(real, tmp_path):
    spaced = build_tokenizer(tmp_path / "spaced", SPACE_PROMPT)
    proc = ks("train", "trajectories", real["workdir"], "--out", tmp_path / "t.jsonl", "--tokenizer", spaced)
    line = assert_one_line_error(proc, f"session {real['session']}", "re-tokenising")
    assert not (tmp_path / "t.jsonl").exists()
    # the first difference is where the generation prompt's trailing space meets the first reply
    tokenizer = load(spaced)
    events = reader.read_events(real["events"])
    chat = [{"role": "system", "content": events[0]["system"]},
            {"role": "user", "content": events[0]["messages"][0]["content"]}]
    tools = [{"type": "function", "function": {"name": name}} for name in TOOL_NAMES]  # the template shows names
    prompt = tokenizer.apply_chat_template(chat, tools=tools, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("Assistant: ")
    assert f"first at token {len(tokenizer(prompt, add_special_tokens=False)['input_ids']) - 1} " in line


@pytest.mark.parametrize("template, words", [
    (NO_TOOLS, "ignores tools="),
    (CHATML.replace("{%- for call in message.tool_calls or [] %}", "{%- for call in [] %}"), "tool_calls"),
    (CHATML.replace("{%- elif message.role == 'tool' %}",
                    "{%- elif message.role == 'tool' %}{{ raise_exception('roles must alternate') }}"),
     "cannot render it: TemplateError: roles must alternate")], ids=["no tools", "no tool calls", "raises"])
def test_a_template_that_hides_tools_or_tool_calls_or_cannot_render_them_is_refused(real, tmp_path, capsys, template,
                                                                                     words):
    folder = build_tokenizer(tmp_path / "tok", template)
    code, _ = export(real["events"], "--out", tmp_path / "t.jsonl", "--tokenizer", folder)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error:") and words in err and len(err.splitlines()) == 1


# -- records with rough edges ----------------------------------------------------------------------

def test_torn_lines_a_killed_session_a_foreign_record_and_a_newer_format(chatml, tmp_path, capsys):
    workdir = new_workdir(tmp_path / "wd")
    resumed = "20261201-000000-cccccc"
    events = conversation(resumed, workdir)
    record(workdir, resumed, *events[:2])  # killed while its first tool ran
    path = workdir / ".kernelsmith" / "sessions" / resumed / "events.jsonl"
    with open(path, "a") as f:
        f.write('{"v":1,"t":1796000100.0,"kind":"tool_res')  # the event being written when it was killed
    record(workdir, resumed, ("resume", {"from_turn": 1, "pending_tool_calls": events[1][1]["message"]["tool_calls"]}),
           *events[2:])
    killed = "20261201-000000-dddddd"
    record(workdir, killed, *conversation(killed, workdir)[:2])
    with open(workdir / ".kernelsmith" / "sessions" / killed / "events.jsonl", "a") as f:
        f.write('{"v":1,"t":1796000100.0,"kind":"model_tu')
    newer = "20261201-000000-eeeeee"
    record(workdir, newer, *conversation(newer, workdir))
    with open(workdir / ".kernelsmith" / "sessions" / newer / "events.jsonl", "a") as f:
        f.write(json.dumps({"v": 2, "t": 1796000200.0, "kind": "something_new"}) + "\n")
    copied = workdir / ".kernelsmith" / "sessions" / "20261201-000000-ffffff"
    shutil.copytree(path.parent, copied)  # a copy of a record under another id: counted once, not twice

    capsys.readouterr()
    _, lines = export(workdir, "--out", tmp_path / "t.jsonl", "--tokenizer", chatml)
    assert [line["session_id"] for line in lines] == [resumed]
    out = capsys.readouterr().out
    assert "not over: running, or killed and not resumed" in out and killed in out
    assert "record format v2 is newer" in out and "not its folder's" in out
    (line,) = lines
    assert line["rewards"]["final"] == -1.0 and line["rewards"]["best"] is None
    assert [(r["turn"], r["reward"]) for r in line["rewards"]["turns"]] == [(2, -1.0)]
    assert [s["turn"] for s in line["turns"]] == [1, 2, 3]
    assert "tool_res" not in line["text"]


def test_a_compaction_starts_a_new_context_whose_kept_replies_are_not_trained_again(chatml, tmp_path):
    workdir = new_workdir(tmp_path / "wd")
    session = "20261201-000000-abcdef"
    events = conversation(session, workdir)
    first_reply = events[1][1]["message"]
    kept = [events[0][1]["messages"][0], {"role": "user", "content": "[compaction note] shortened"}, first_reply,
            {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": "(elided)"}]
    events.insert(3, ("compaction", {"turn": 1, "before_tokens": 100, "after_tokens": 50, "messages": kept}))
    record(workdir, session, *events)

    _, lines = export(workdir, "--out", tmp_path / "t.jsonl", "--tokenizer", chatml)
    assert [line["segment"] for line in lines] == [{"index": 0, "count": 2}, {"index": 1, "count": 2}]
    assert [[s["turn"] for s in line["turns"]] for line in lines] == [[1], [2, 3]]
    second, tokenizer = lines[1], load(chatml)
    assert second["messages"][1] == {"role": "user", "content": events[0][1]["messages"][0]["content"]
                                     + "\n\n[compaction note] shortened"}  # as the openai backend sends them
    masked = [tokenizer.decode(second["input_ids"][a:b]) for a, b in runs_of(second["loss_mask"], 1)]
    replies = [e[1]["message"] for e in events if e[0] == "model_turn"]
    assert masked == [rendered_assistant(m) for m in replies[1:]]  # the kept first reply is context now
    assert [(r["turn"], r["reward"]) for r in second["rewards"]["turns"]] == [(2, -1.0)]
    assert lines[0]["rewards"]["turns"] == []


# -- bad input -------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["no tokenizer", "missing tokenizer", "no sessions", "no such path"])
def test_bad_input_is_one_line_and_exit_2(real, chatml, tmp_path, case):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = {"no tokenizer": [real["workdir"]],
            "missing tokenizer": [real["workdir"], "--tokenizer", tmp_path / "nope"],
            "no sessions": [empty, "--tokenizer", chatml],
            "no such path": [tmp_path / "nope" / "events.jsonl", "--tokenizer", chatml]}[case]
    words = {"no tokenizer": "--tokenizer is required", "missing tokenizer": "tokenizer folder not found",
             "no sessions": "no session records", "no such path": "no such workdir"}[case]
    assert_one_line_error(ks("train", "trajectories", *args, "--out", tmp_path / "t.jsonl"), words)
    assert not (tmp_path / "t.jsonl").exists()


# -- helpers that write records --------------------------------------------------------------------

def conversation(session: str, workdir: Path) -> list[tuple[str, dict]]:
    """A small ended session: read a file, a verify that fails (reward -1), finish."""
    def reply(turn: int, text: str, name: str, **arguments) -> tuple[str, dict]:
        call = {"id": f"c{turn}", "name": name, "arguments": arguments}
        return "model_turn", {"turn": turn, "message": {"role": "assistant", "content": text, "tool_calls": [call]},
                              "usage": {"input_tokens": 10, "output_tokens": 5}}

    def result(turn: int, name: str, content: str) -> tuple[str, dict]:
        return "tool_result", {"turn": turn, "tool_call_id": f"c{turn}", "name": name, "ok": True, "content": content}

    return [("session_start", {"session_id": session, "workdir": str(workdir), "task": "triple",
                               "system": "You write kernels.", "config": {"backend": "scripted", "model": "m"},
                               "messages": [{"role": "user", "content": "Optimize triple."}]}),
            reply(1, "Reading.", "read_file", path="model.py"),
            result(1, "read_file", "class Model: ..."),
            reply(2, "Verifying.", "verify"),
            ("eval_result", {"turn": 2, "tool": "verify", "attempt": 1, "result": {"correct": False, "reward": -1.0}}),
            result(2, "verify", "rejected"),
            reply(3, "Done.", "finish", summary="nothing"),
            result(3, "finish", "finished"),
            ("session_end", {"turn": 3, "reason": "finish", "summary": {"best": None}})]


def git_commit(workdir: Path, trailers: dict[str, str]) -> str:
    """A commit on the branch made with git alone, as the agent's bash could make it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=agent", "-c", "user.email=agent@example.com", *args],
                              cwd=workdir, capture_output=True, text=True, check=True).stdout.strip()

    message = "kernelsmith: 97x vs eager\n\n" + "".join(f"{k}: {v}\n" for k, v in trailers.items())
    sha = git("commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", message)
    git("update-ref", "HEAD", sha)
    return sha


def record(workdir: Path, session: str, *events: tuple[str, dict]) -> None:
    recorder = Recorder(workdir, session)
    for kind, fields in events:
        recorder.emit(kind, **fields)
    recorder.close()


def test_the_tools_the_session_recorded_are_the_tools_rendered(real, chatml, tmp_path):
    """A session renders with the tool schemas its policy was given (session_start.tools), not today's."""
    from kernelsmith.train import trajectories

    recorded = reader.read_events(real["events"])[0]["tools"]
    code, lines = export(real["workdir"], "--out", tmp_path / "t.jsonl", "--tokenizer", chatml)
    assert code == 0 and [t["function"]["name"] for t in lines[0]["tools"]] == [s["name"] for s in recorded]
    assert "finish" in [s["name"] for s in recorded]

    start = {"kind": "session_start", "tools": [{"name": "old_tool", "description": "gone since", "parameters": {}}]}
    assert trajectories.recorded_tools(start) == [{"type": "function", "function": {
        "name": "old_tool", "description": "gone since", "parameters": {}}}]
    assert trajectories.recorded_tools({"kind": "session_start"}) is None  # older records: today's tools
    assert trajectories.recorded_tools({"tools": "nonsense"}) is None
