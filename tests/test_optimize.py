"""`kernelsmith optimize` end to end: the real CLI, real git, real builds and workers on the CPU,
and the official Anthropic and OpenAI SDKs talking to a local server that speaks their wire
formats (tests/fakeapi.py)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest

from conftest import default_sigint
from fakeapi import FakeAPI
from kernelsmith.backends.scripted import ScriptedBackend
from kernelsmith.gitops import KernelRepo
from kernelsmith.session.reader import load_session, read_events, session_paths

DATA = Path(__file__).parent / "data" / "triple_session"
CLI = [sys.executable, "-m", "kernelsmith.cli"]
NO_KEYS = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")
           and not k.startswith("KERNELSMITH_")}


SET_BY_CONFTEST = ("KERNELSMITH_JAIL_READABLE", "KERNELSMITH_BUSY_OK")  # NO_KEYS drops KERNELSMITH_*


def ks(*args, env=None, cwd=None, timeout=900):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**NO_KEYS, **{k: os.environ.get(k, "") for k in SET_BY_CONFTEST}, **(env or {})})


def json_events(proc) -> list[dict]:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def assert_exit_says_whether_it_beat_eager(proc, events: list[dict]) -> None:
    """Exit 0 only when the session's best kernel was measured faster than eager; a verified but slower kernel
    is committed and still exits 1 (on a busy 2-core machine the triple kernel can go either way)."""
    best = events[-1]["summary"]["best"]
    assert best and best["speedup_vs_eager"] is not None, events[-1]
    assert proc.returncode == (0 if best["speedup_vs_eager"] > 1.0 else 1), proc.stdout[-3000:] + proc.stderr[-3000:]


def only_session(workdir: Path) -> Path:
    paths = list(session_paths(workdir))
    assert len(paths) == 1, paths
    return paths[0]


def the_script() -> list[dict]:
    """The scripted session with its kernel files resolved, as turns for the fake API."""
    return ScriptedBackend(DATA / "script.json").turns


def assert_triple_session(workdir: Path, events: list[dict]) -> None:
    """What the user checks after the session: history, record, attempts."""
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "session_start" and kinds[-1] == "session_end"
    assert events[-1]["reason"] == "finish"
    results = [e for e in events if e["kind"] == "tool_result"]
    compiles = [e for e in results if e["name"] == "compile"]
    assert not compiles[0]["ok"] and "alpah" in compiles[0]["content"]  # the typo, summarised
    assert compiles[1]["ok"]
    verifies = [e for e in events if e["kind"] == "eval_result" and e["tool"] == "verify"]
    cheat, honest = verifies[0]["result"], verifies[1]["result"]
    assert not (cheat["correct"] and not cheat["violations"])
    assert any("aten" in v or "torch" in v for v in cheat["violations"]), cheat["violations"]
    assert honest["correct"] and honest["violations"] == []
    commits = [e for e in events if e["kind"] == "commit"]
    assert [c["turn"] for c in commits] == [5, 6]  # first verified kernel, then its first measured speed
    assert commits[1]["speedup_vs_eager"] > 0
    repo = KernelRepo(workdir)
    ours = repo.kernel_commits()
    assert [c["sha"] for c in ours] == [c["sha"] for c in reversed(commits)]
    assert ours[0]["trailers"]["Turn"] == "6" and "Speedup-Vs-Eager" in ours[0]["trailers"]
    head_tree = git.Repo(workdir).head.commit.tree
    assert "torch compute" not in (head_tree / "model_new.py").data_stream.read().decode()
    assert "3.0f * in[i]" in (head_tree / "kernels/triple.cpp").data_stream.read().decode()
    assert len(repo.attempts()) == 5  # compile, compile, verify, verify, profile: each snapshotted


@pytest.mark.slow_build
def test_optimize_through_the_anthropic_sdk_streamed(tmp_path):
    workdir = tmp_path / "wd"
    with FakeAPI(the_script()) as api:
        proc = ks("optimize", DATA / "triple.py", "--workdir", workdir, "--device", "cpu", "--backend", "anthropic",
                  "--model", "claude-test", "--base-url", api.anthropic_url, "--json",
                  env={"ANTHROPIC_API_KEY": "test-key"})
        requests = api.requests
    events = json_events(proc)
    assert_exit_says_whether_it_beat_eager(proc, events)
    assert events[0]["kind"] == "session_start" and events[0]["session_id"]
    assert events == read_events(only_session(workdir))  # stdout and the record agree
    assert_triple_session(workdir, events)
    assert all(r["body"].get("stream") for r in requests)
    system = requests[0]["body"]["system"]
    assert system[-1]["cache_control"] == {"type": "ephemeral"} and "SKILL" in json.dumps(requests[0]["body"])
    last = json.dumps(requests[-1]["body"]["messages"])
    assert "[budget] turn 6 of 200" in last and "best so far" in last


def openai_script(task_dir: Path) -> list[dict]:
    """A build-free story (the kernel is a gcc-built library called through ctypes): torch in
    forward is rejected, the honest kernel verifies and is profiled, then finish."""
    honest = (DATA.parent / "bench" / "model_new_ctypes.py").read_text().replace(
        "LIBAXPB", str(task_dir / "libaxpb.so"))
    cheat = honest.replace("y = torch.empty_like(x)", "return x * 2.0 + self.bias  # torch compute")
    return [
        {"text": "Shortcut first.", "tool_calls": [
            {"name": "bash", "arguments": {"command": "rm -r kernels"}},
            {"name": "write_file", "arguments": {"path": "model_new.py", "content": cheat}},
            {"name": "verify", "arguments": {}}]},
        {"text": ["The ", "kernel."], "tool_calls": [
            {"name": "write_file", "arguments": {"path": "model_new.py", "content": honest}},
            {"name": "verify", "arguments": {}}]},
        {"text": "Time it.", "tool_calls": [{"name": "profile", "arguments": {}}]},
        {"text": "Done.", "tool_calls": [{"name": "finish", "arguments": {"summary": "ctypes axpb"}}],
         "no_usage": True}]


def test_optimize_through_the_openai_sdk(tmp_path, task_dir):
    workdir = tmp_path / "wd"
    with FakeAPI(openai_script(task_dir), models=("qwen-local",)) as api:
        proc = ks("optimize", task_dir / "model.py", "--workdir", workdir, "--device", "cpu", "--backend", "openai",
                  "--model", "qwen-local", "--base-url", api.openai_url)
        requests = api.requests
    assert "committed" in proc.stdout and "session ended: finish" in proc.stdout  # the live view
    events = read_events(only_session(workdir))
    assert_exit_says_whether_it_beat_eager(proc, events)
    assert ("faster than eager: " in proc.stdout) == (proc.returncode == 0)  # the summary's verdict line
    assert ("no kernel beat eager; best " in proc.stdout) == (proc.returncode == 1)
    verifies = [e["result"] for e in events if e["kind"] == "eval_result" and e["tool"] == "verify"]
    assert verifies[0]["violations"] and not verifies[1]["violations"] and verifies[1]["correct"]
    commits = [e for e in events if e["kind"] == "commit"]
    assert [c["turn"] for c in commits] == [2, 3] and commits[1]["speedup_vs_eager"] > 0
    assert [c["sha"] for c in KernelRepo(workdir).kernel_commits()] == [c["sha"] for c in reversed(commits)]
    assert all(r["path"] == "/v1/chat/completions" and r["body"]["stream"] for r in requests)
    last = requests[-1]["body"]["messages"]
    assert last[0]["role"] == "system" and any(m["role"] == "tool" and m["tool_call_id"] for m in last)


def test_unknown_model_and_wrong_url_are_one_line_errors(tmp_path):
    with FakeAPI([{"status": 404, "message": "model 'nope' not found"}]) as api:
        proc = ks("optimize", DATA / "triple.py", "--workdir", tmp_path / "wd", "--device", "cpu",
                  "--backend", "openai", "--model", "nope", "--base-url", api.openai_url)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "'nope'" in proc.stderr and proc.stderr.strip().count("\n") == 0
    events = read_events(only_session(tmp_path / "wd"))
    assert [e["kind"] for e in events][-2:] == ["error", "session_end"]
    refused = ks("optimize", "--workdir", tmp_path / "wd", "--backend", "openai", "--model", "m",
                 "--base-url", "http://127.0.0.1:9/v1")
    assert refused.returncode == 3 and "Traceback" not in refused.stderr
    assert "127.0.0.1:9" in refused.stderr and refused.stderr.strip().count("\n") == 0


def write_script(path: Path, turns: list[dict]) -> Path:
    path.write_text(json.dumps(turns))
    return path


def make_workdir(tmp_path: Path) -> Path:
    workdir = tmp_path / "wd"
    proc = ks("init", DATA / "triple.py", "--workdir", workdir, "--device", "cpu", "--no-check")
    assert proc.returncode == 0, proc.stderr
    return workdir


def test_budget_exhaustion_ends_with_exit_1_and_no_commit(tmp_path):
    workdir = make_workdir(tmp_path)
    turn = {"text": "look", "tool_calls": [{"name": "list_files", "arguments": {}}]}
    script = write_script(tmp_path / "s.json", [turn] * 10)
    proc = ks("optimize", "--workdir", workdir, "--backend", "scripted", "--script", script, "--max-turns", "3",
              "--json")
    assert proc.returncode == 1, proc.stderr
    events = json_events(proc)
    assert [e["turn"] for e in events if e["kind"] == "model_turn"] == [1, 2, 3]
    assert events[-1]["kind"] == "session_end" and events[-1]["reason"] == "max_turns"
    results = [e["content"] for e in events if e["kind"] == "tool_result"]
    assert "[budget] turn 3 of 3" in results[-1]
    assert KernelRepo(workdir).kernel_commits() == []


def test_refused_write_and_hanging_bash_are_results_the_session_survives(tmp_path):
    workdir = make_workdir(tmp_path)
    reference = (workdir / "model.py").read_text()
    script = write_script(tmp_path / "s.json", [
        {"text": "", "tool_calls": [{"name": "write_file", "arguments": {"path": "model.py", "content": "x = 1"}}]},
        {"text": "", "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 600"}}]},
        {"text": "", "tool_calls": [{"name": "finish", "arguments": {"summary": "nothing"}}]}])
    start = time.monotonic()
    proc = ks("optimize", "--workdir", workdir, "--backend", "scripted", "--script", script, "--json",
              env={"KERNELSMITH_BASH_TIMEOUT_S": "2"})
    assert time.monotonic() - start < 120
    assert proc.returncode == 1  # finished, but nothing verified
    results = [e for e in json_events(proc) if e["kind"] == "tool_result"]
    assert not results[0]["ok"] and results[0]["content"].startswith("refused:")
    assert not results[1]["ok"] and "killed" in results[1]["content"]
    assert (workdir / "model.py").read_text() == reference


class RecordingScript(ScriptedBackend):
    """A scripted backend that also notes the size of each request it is sent."""

    def __init__(self, turns):
        super().__init__(turns)
        self.sizes, self.last = [], []

    def complete(self, system, messages, tools, on_text=None):
        from kernelsmith.agent.context import estimate_tokens

        self.sizes.append(estimate_tokens(system, messages, json.dumps([t.__dict__ for t in tools])))
        self.last = json.loads(json.dumps(messages))
        return super().complete(system, messages, tools, on_text)


def test_long_session_stays_inside_a_small_window(tmp_path, monkeypatch):
    """60 turns that each write a 2 KB kernel and read it back, in an 8000-token window."""
    from kernelsmith.agent import run as session
    from kernelsmith.config import Settings

    workdir = make_workdir(tmp_path)
    turns = [{"text": f"variant {i}", "tool_calls": [
        {"name": "write_file", "arguments": {"path": f"kernels/k{i % 3}.cpp", "content": f"// v{i}\n" + "x" * 2000}},
        {"name": "read_file", "arguments": {"path": f"kernels/k{i % 3}.cpp"}}]} for i in range(60)]
    backend = RecordingScript(turns)
    monkeypatch.setattr(session, "create_backend", lambda settings, text_tokens=None: backend)
    settings = Settings(backend="scripted", script="-", max_turns=60, context_window=8000)
    ending = session.start(settings, workdir, [], None)
    events = read_events(only_session(workdir))
    compactions = [e for e in events if e["kind"] == "compaction"]
    assert ending.turns == 60 and len(compactions) >= 3
    assert max(backend.sizes) < 8000, max(backend.sizes)
    state = load_session(only_session(workdir))
    assert state.messages[0]["content"].startswith("Task:")  # the task survives every compaction
    assert sum(m["content"].startswith("[compaction note]") for m in state.messages if m["role"] == "user") == 1
    # the record rebuilds the conversation the model was last sent, then the last turn
    assert state.messages[:len(backend.last)] == backend.last


def test_resume_after_kill_9_continues_with_the_pending_call(tmp_path):
    workdir = make_workdir(tmp_path)
    marker = tmp_path / "go"
    script = write_script(tmp_path / "s.json", [
        {"text": "one", "tool_calls": [{"name": "list_files", "arguments": {}}]},
        {"text": "two", "tool_calls": [
            {"name": "write_file", "arguments": {"path": "notes.md", "content": "plan"}},
            {"name": "bash", "arguments": {"command": f"while [ ! -f {marker} ]; do sleep 0.2; done; echo resumed-ok"}}]},
        {"text": "three", "tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]}])
    args = ["--workdir", workdir, "--backend", "scripted", "--script", script, "--json"]
    proc = subprocess.Popen(CLI + ["optimize", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=NO_KEYS, start_new_session=True)
    record = wait_for(lambda: next(session_paths(workdir), None))
    wait_for(lambda: any(e["kind"] == "tool_result" and e["name"] == "write_file" for e in read_events(record)))
    os.killpg(proc.pid, signal.SIGKILL)  # mid-turn: the bash call has no result yet
    proc.wait()
    session_id = record.parent.name
    before = read_events(record)
    marker.write_text("")
    resumed = ks("optimize", "--resume", session_id[:12], *args[:-1], "--json")
    assert resumed.returncode == 1, resumed.stderr  # finished without a verified kernel
    after = read_events(record)
    assert after[:len(before)] == before  # nothing recorded was lost or rewritten
    resume = next(e for e in after if e["kind"] == "resume")
    assert resume["from_turn"] == 2 and [c["name"] for c in resume["pending_tool_calls"]] == ["bash"]
    bash = [e for e in after if e["kind"] == "tool_result" and e["name"] == "bash"]
    assert len(bash) == 1 and "resumed-ok" in bash[0]["content"]
    turns = [e["turn"] for e in after if e["kind"] == "model_turn"]
    assert turns == [1, 2, 3] and after[-1]["reason"] == "finish"
    assert load_session(record).pending_tool_calls() == []


def wait_for(probe, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def test_ctrl_c_records_the_end_and_the_session_resumes(tmp_path):
    workdir = make_workdir(tmp_path)
    script = write_script(tmp_path / "s.json", [
        {"text": "wait", "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 600"}}]},
        {"text": "done", "tool_calls": [{"name": "finish", "arguments": {"summary": "after the interrupt"}}]}])
    args = ["--workdir", workdir, "--backend", "scripted", "--script", script, "--json"]
    proc = subprocess.Popen(CLI + ["optimize", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=NO_KEYS, preexec_fn=default_sigint)
    record = wait_for(lambda: next(session_paths(workdir), None))
    wait_for(lambda: any(e["kind"] == "model_turn" for e in read_events(record)))
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    said = err.strip().splitlines()[-1]  # how to go on, as one line
    assert said.startswith("interrupted; continue with: kernelsmith optimize --resume ") and "--workdir" in said, err
    resume_args = shlex.split(said.split("continue with: ", 1)[1])[2:]
    assert resume_args[:2] == ["--resume", record.parent.name] and Path(resume_args[3]) == Path(workdir).resolve()
    events = read_events(record)
    assert events[-1]["kind"] == "session_end" and events[-1]["reason"] == "interrupted"
    resumed = ks("optimize", *resume_args, *args[2:-1], "--json",
                 env={"KERNELSMITH_BASH_TIMEOUT_S": "1"})
    assert resumed.returncode == 1, resumed.stderr
    after = read_events(record)
    assert after[-1]["reason"] == "finish" and after[-1]["summary"]["finish_summary"] == "after the interrupt"


def test_resume_after_a_kill_between_a_text_reply_and_its_nudge(tmp_path):
    workdir = make_workdir(tmp_path)
    script = write_script(tmp_path / "s.json", [
        {"text": "Thinking out loud, no tool call."},
        {"text": "done", "tool_calls": [{"name": "finish", "arguments": {"summary": "ok"}}]}])
    args = ["--workdir", workdir, "--backend", "scripted", "--script", script, "--json"]
    assert ks("optimize", *args, "--max-turns", "1").returncode == 1
    record = only_session(workdir)
    lines = record.read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "model_turn") + 1
    record.write_text("\n".join(lines[:cut]) + "\n")  # as if killed right after the text reply
    resumed = ks("optimize", "--resume", record.parent.name, *args, "--max-turns", "3")
    assert resumed.returncode == 1, resumed.stderr
    kinds = [e["kind"] for e in read_events(record)]
    assert kinds[kinds.index("resume") + 1] == "user_message"  # the nudge the kill cut off
    state = load_session(record)
    assert [m["role"] for m in state.messages[:3]] == ["user", "assistant", "user"]
    assert state.end["reason"] == "finish"
