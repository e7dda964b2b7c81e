"""The agent's tools: their schemas (a contract), the write/read fences around the workdir,
edit semantics, errors as results rather than exceptions, and the bash tool's timeout,
process cleanup and network isolation. Fast: no GPU, no extension builds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TASK, live_processes_with
from kernelsmith import workdir as wd
from kernelsmith.sandbox import jail
from kernelsmith.agent.tools import (MAX_OUTPUT, TOOL_NAMES, Outcome, Toolbox, clip, network_isolation,
                                     spec_of)
from kernelsmith.backends.base import ToolCall
from kernelsmith.evaluation.result import EvalResult
from kernelsmith.task import TaskSource

REFUSAL_HINT = ("model_new.py", "kernels/", "notes.md")


class FakeEvaluator:
    """The Evaluator protocol with canned answers; records what was called."""

    def __init__(self, build=None, verify=None, profile=None):
        self.build = build if build is not None else {"ok": True, "seconds": 1.25, "cached": True}
        self.verify_result = verify if verify is not None else EvalResult()
        self.profile_result = profile if profile is not None else EvalResult()
        self.calls: list[str] = []

    def compile(self):
        self.calls.append("compile")
        return self.build

    def verify(self):
        self.calls.append("verify")
        return self.verify_result

    def profile(self):
        self.calls.append("profile")
        return self.profile_result


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("template") / "wd"
    wd.create(TaskSource(name="axpb", source=TASK, origin="/tasks/axpb.py"), path, "cpu")
    return path


@pytest.fixture
def root(tmp_path, template) -> Path:
    """A real workdir (cpu, as `kernelsmith init` lays it out, .git included) inside tmp_path, with a
    secret file beside it, outside the workdir. Copied from one created per module: git is slow."""
    path = tmp_path / "wd"
    shutil.copytree(template, path, symlinks=True)
    (tmp_path / "outside.txt").write_text("SECRET outside the workdir\n")
    return path


@pytest.fixture
def tools(root) -> Toolbox:
    return Toolbox(root, FakeEvaluator(), bash_timeout_s=1.5)


def call(tools: Toolbox, name: str, **arguments) -> Outcome:
    return tools.run(ToolCall(id="c1", name=name, arguments=arguments))


def snapshot(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


# --- schemas ------------------------------------------------------------------------------

EXPECTED_PARAMS = {
    "read_file": ({"path": "string"}, ["path"]),
    "write_file": ({"path": "string", "content": "string", "append": "boolean"}, ["path", "content"]),
    "edit_file": ({"path": "string", "old": "string", "new": "string"}, ["path", "old", "new"]),
    "list_files": ({"path": "string"}, []),
    "grep": ({"pattern": "string", "path": "string"}, ["pattern"]),
    "bash": ({"command": "string"}, ["command"]),
    "compile": ({}, []),
    "verify": ({}, []),
    "profile": ({}, []),
    "finish": ({"summary": "string"}, ["summary"]),
}


def test_the_ten_tools_in_order(tools):
    names = [spec.name for spec in tools.specs()]
    assert names == ["read_file", "write_file", "edit_file", "list_files", "grep", "bash",
                     "compile", "verify", "profile", "finish"]
    assert tuple(names) == TOOL_NAMES


@pytest.mark.parametrize("name", list(EXPECTED_PARAMS))
def test_schema_parameters_types_and_required(tools, name):
    spec = {s.name: s for s in tools.specs()}[name]
    types, required = EXPECTED_PARAMS[name]
    schema = spec.parameters
    assert schema["type"] == "object"
    assert {p: v["type"] for p, v in schema["properties"].items()} == types
    assert list(schema["properties"]) == list(types)  # in signature order
    assert schema["required"] == required
    for param, prop in schema["properties"].items():
        assert prop["description"], f"{name}.{param} has no description"
    # a one-line summary of the docstring, without the Args: section
    assert spec.description and "\n" not in spec.description and "Args:" not in spec.description
    json.dumps(schema)  # sent as-is on the wire


def test_descriptions_come_from_the_docstrings(tools):
    specs = {s.name: s for s in tools.specs()}
    read = specs["read_file"]
    assert read.description == "Read a text file of the workdir."
    assert read.parameters["properties"]["path"]["description"] == \
        "path relative to the workdir, e.g. model.py or kernels/example_scale.cu"
    assert specs["edit_file"].parameters["properties"]["old"]["description"] == \
        "the exact text to replace; it must occur exactly once"
    assert "model_new.py" in specs["write_file"].description and "notes.md" in specs["write_file"].description
    assert specs["finish"].parameters["properties"]["summary"]["description"] == \
        "what you built, and its measured speed-up"
    assert specs["compile"].description.startswith("Build kernels/")


def test_spec_of_maps_python_types_and_defaults():
    def tune(name: str, blocks: int, scale: float, fast: bool = False, label: str = "x") -> str:
        """Tune a kernel.
        Second line of the summary.

        Args:
            name: the kernel
            blocks: how many blocks
            scale: a factor
            fast: use fast math
        """
        return name

    spec = spec_of(tune)
    assert spec.name == "tune"
    assert spec.description == "Tune a kernel. Second line of the summary."
    props = spec.parameters["properties"]
    assert {k: v["type"] for k, v in props.items()} == {
        "name": "string", "blocks": "integer", "scale": "number", "fast": "boolean", "label": "string"}
    assert spec.parameters["required"] == ["name", "blocks", "scale"]
    assert props["blocks"]["description"] == "how many blocks"
    assert props["label"]["description"] == ""  # undocumented parameter: empty, not missing


# --- writes -------------------------------------------------------------------------------

def _symlink_dir_outside(root: Path) -> str:
    (root / "kernels" / "out").symlink_to(root.parent, target_is_directory=True)
    return "kernels/out/outside.txt"


def _symlink_file_outside(root: Path) -> str:
    (root / "kernels" / "evil.cu").symlink_to(root.parent / "outside.txt")
    return "kernels/evil.cu"


def _symlink_to_reference(root: Path) -> str:
    (root / "kernels" / "ref.cu").symlink_to(root / "model.py")
    return "kernels/ref.cu"


REFUSED_WRITES = {
    "model.py": lambda root: "model.py",
    "binding.cpp": lambda root: "binding.cpp",
    "SKILL.md": lambda root: "SKILL.md",
    "build.py": lambda root: "build.py",
    "parent": lambda root: "../escape.txt",
    "absolute outside": lambda root: str(root.parent / "abs.txt"),
    "absolute reference": lambda root: str(root / "model.py"),
    "dotdot through kernels": lambda root: "kernels/../model.py",
    "deep dotdot": lambda root: "kernels/a/../../../escape.txt",
    "symlinked dir outside": _symlink_dir_outside,
    "symlinked file outside": _symlink_file_outside,
    "symlink to the reference": _symlink_to_reference,
    "git config": lambda root: ".git/config",
    "state config": lambda root: ".kernelsmith/config.json",
    "kernels folder itself": lambda root: "kernels",
    "new top-level file": lambda root: "helper.py",
}


@pytest.mark.parametrize("case", list(REFUSED_WRITES))
def test_write_outside_the_allowed_files_is_refused(root, tools, case):
    path = REFUSED_WRITES[case](root)
    watched = [root / "model.py", root / "binding.cpp", root / "SKILL.md", root / "build.py",
               root / ".git" / "config", root / ".kernelsmith" / "config.json", root.parent / "outside.txt",
               root.parent / "escape.txt", root.parent / "abs.txt", root / "helper.py"]
    before = {p: snapshot(p) for p in watched}
    out = call(tools, "write_file", path=path, content="PWNED\n")
    assert not out.ok
    assert out.content.startswith("refused") and path in out.content
    assert all(hint in out.content for hint in REFUSAL_HINT)  # says what may be written
    assert {p: snapshot(p) for p in watched} == before
    assert "PWNED" not in "".join(
        f.read_text(errors="replace") for f in root.parent.rglob("*") if f.is_file() and ".git" not in f.parts)


@pytest.mark.parametrize("case", ["model.py", "symlinked file outside", "git config", "parent"])
def test_edit_outside_the_allowed_files_is_refused(root, tools, case):
    path = REFUSED_WRITES[case](root)
    target = root / path
    before = snapshot(target) if target.resolve().is_file() else None
    out = call(tools, "edit_file", path=path, old="torch", new="PWNED")
    assert not out.ok and out.content.startswith("refused")
    assert all(hint in out.content for hint in REFUSAL_HINT)
    if before is not None:
        assert snapshot(target) == before
    assert (root / "model.py").read_text() == TASK
    assert (root.parent / "outside.txt").read_text() == "SECRET outside the workdir\n"


@pytest.mark.parametrize("path", ["model_new.py", "kernels/new/deep.cu", "notes.md", "kernels/./k.cpp",
                                  "kernels/sub/../k2.cpp"])
def test_allowed_writes(root, tools, path):
    content = "line one\nline two\nline three\n"
    out = call(tools, "write_file", path=path, content=content)
    assert out.ok, out.content
    assert out.content == f"wrote {path} (3 lines)"
    assert (root / path).read_text() == content


def test_write_overwrites_the_whole_file(root, tools):
    assert call(tools, "write_file", path="model_new.py", content="first version\n" * 10).ok
    assert call(tools, "write_file", path="model_new.py", content="second\n").ok
    assert (root / "model_new.py").read_text() == "second\n"


def test_a_file_written_in_parts_is_the_parts_joined(root, tools):
    """A file too long for one reply: the first part written, the rest appended, byte for byte."""
    parts = ["#include <cuda_runtime.h>\n", "__global__ void k(float* x) {\n", "  x[0] = 1.f;\n}\n"]
    assert call(tools, "write_file", path="kernels/k.cu", content=parts[0]).ok
    for part in parts[1:]:
        out = call(tools, "write_file", path="kernels/k.cu", content=part, append=True)
        assert out.ok, out.content
    assert (root / "kernels" / "k.cu").read_text() == "".join(parts)
    assert out.content == "appended to kernels/k.cu (now 4 lines)"


@pytest.mark.parametrize("append", ["false", "true", 1, None])
def test_append_must_be_a_boolean(root, tools, append):
    """A model that writes append as a string must not append (nor overwrite) by accident."""
    (root / "model_new.py").write_text("kept\n")
    out = call(tools, "write_file", path="model_new.py", content="x\n", append=append)
    assert not out.ok and "append must be true or false" in out.content
    assert (root / "model_new.py").read_text() == "kept\n"


def test_appending_to_a_missing_or_fixed_file_is_refused(root, tools):
    out = call(tools, "write_file", path="kernels/none.cu", content="x\n", append=True)
    assert not out.ok and "does not exist" in out.content and not (root / "kernels" / "none.cu").exists()
    out = call(tools, "write_file", path="model.py", content="PWNED\n", append=True)
    assert not out.ok and out.content.startswith("refused")
    assert (root / "model.py").read_text() == TASK


# --- reads --------------------------------------------------------------------------------

def test_read_a_workdir_file(root, tools):
    out = call(tools, "read_file", path="model.py")
    assert out.ok and out.content == TASK
    kernel = call(tools, "read_file", path="kernels/example_scale.cpp")
    assert kernel.ok and kernel.content == (root / "kernels" / "example_scale.cpp").read_text()


@pytest.mark.parametrize("case", ["../outside.txt", "absolute", "symlink", "dotdot", ".git/config",
                                  ".git/HEAD", ".kernelsmith/config.json", "symlink to .git"])
def test_reads_outside_the_workdir_and_of_state_are_refused(root, tools, case):
    path = {
        "../outside.txt": "../outside.txt",
        "absolute": str(root.parent / "outside.txt"),
        "dotdot": "kernels/../../outside.txt",
    }.get(case, case)
    if case == "symlink":
        path = _symlink_file_outside(root)
    if case == "symlink to .git":
        (root / "kernels" / "g").symlink_to(root / ".git", target_is_directory=True)
        path = "kernels/g/config"
    out = call(tools, "read_file", path=path)
    assert not out.ok and out.content.startswith("refused")
    assert "SECRET" not in out.content and "[core]" not in out.content and '"task"' not in out.content


def test_reading_a_missing_file_is_an_error_result(tools):
    out = call(tools, "read_file", path="kernels/nope.cu")
    assert isinstance(out, Outcome) and not out.ok
    assert "does not exist" in out.content and "list_files" in out.content


def test_reading_a_folder_is_an_error_result(tools):
    out = call(tools, "read_file", path="kernels")
    assert not out.ok and out.content.startswith("error")


def test_long_file_is_clipped_head_and_tail(root, tools):
    body = "HEAD-MARK\n" + "x" * 50_000 + "\nTAIL-MARK\n"
    assert call(tools, "write_file", path="kernels/big.txt", content=body).ok
    out = call(tools, "read_file", path="kernels/big.txt")
    assert out.ok and len(out.content) < MAX_OUTPUT + 100
    assert out.content.startswith("HEAD-MARK") and out.content.rstrip().endswith("TAIL-MARK")
    assert "characters cut" in out.content


# --- edit_file ----------------------------------------------------------------------------

def test_edit_replaces_exactly_one_occurrence(root, tools):
    (root / "notes.md").write_text("alpha\nbeta\ngamma\n")
    out = call(tools, "edit_file", path="notes.md", old="beta", new="BETA")
    assert out.ok and out.content == "edited notes.md"
    assert (root / "notes.md").read_text() == "alpha\nBETA\ngamma\n"


@pytest.mark.parametrize("old,count", [("delta", 0), ("beta", 2), ("", 0)])
def test_edit_needs_exactly_one_occurrence(root, tools, old, count):
    text = "alpha\nbeta\ngamma\nbeta\n"
    (root / "notes.md").write_text(text)
    out = call(tools, "edit_file", path="notes.md", old=old, new="X")
    assert not out.ok
    assert f"occurs {count} times" in out.content and "exactly once" in out.content
    assert (root / "notes.md").read_text() == text


def test_edit_of_a_missing_file_is_an_error_and_creates_nothing(root, tools):
    out = call(tools, "edit_file", path="kernels/missing.cu", old="a", new="b")
    assert not out.ok and "does not exist" in out.content
    assert not (root / "kernels" / "missing.cu").exists()


# --- dispatch: errors are results ---------------------------------------------------------

def test_unknown_tool_is_an_error_outcome(tools):
    out = call(tools, "delete_everything", path="model.py")
    assert not out.ok and "delete_everything" in out.content
    assert all(name in out.content for name in TOOL_NAMES)  # the model learns the real names


@pytest.mark.parametrize("name,arguments", [
    ("write_file", {"path": "notes.md"}),                              # missing content
    ("read_file", {}),                                                 # missing path
    ("read_file", {"path": "model.py", "mode": "rb"}),                 # extra argument
    ("write_file", {"path": "notes.md", "content": "x", "mode": "a"}),  # extra argument
    ("compile", {"target": "all"}),
    ("bash", {"_raw": '{"command": "ls'}),                             # broken JSON from a backend
])
def test_bad_arguments_are_error_outcomes(root, tools, name, arguments):
    out = tools.run(ToolCall(id="c", name=name, arguments=arguments))
    assert not out.ok and out.content.startswith(f"error: bad arguments for {name}")
    assert not (root / "notes.md").exists()  # nothing ran
    assert tools.evaluator.calls == []


@pytest.mark.parametrize("name,arguments,exc", [
    ("write_file", {"path": "kernels/sub", "content": "x"}, "IsADirectoryError"),  # a folder
    ("write_file", {"path": "kernels/example_scale.cpp/x.cu", "content": "x"}, "Error"),  # under a file
    ("read_file", {"path": 123}, "TypeError"),                                     # wrong JSON type
    ("read_file", {"path": "model\x00.py"}, "ValueError"),
])
def test_a_tool_that_raises_becomes_an_error_outcome(root, tools, name, arguments, exc):
    (root / "kernels" / "sub").mkdir()
    out = tools.run(ToolCall(id="c", name=name, arguments=arguments))
    assert not out.ok
    assert out.content.startswith(f"error: {name} failed: ") and exc in out.content


def test_an_evaluator_that_raises_becomes_an_error_outcome(root):
    class Broken(FakeEvaluator):
        def verify(self):
            raise RuntimeError("worker died")

    out = Toolbox(root, Broken()).run(ToolCall(id="c", name="verify", arguments={}))
    assert not out.ok and "RuntimeError: worker died" in out.content


# --- list_files and grep ------------------------------------------------------------------

def _plant_hidden(root: Path, text: str) -> None:
    for folder in (root / "__pycache__", root / "kernels" / "__pycache__", root / ".git", root / ".kernelsmith",
                   root / "kernels" / "build"):
        folder.mkdir(exist_ok=True)
        (folder / "planted_marker.txt").write_text(text)


def test_list_files_shows_the_workdir_and_hides_state(root, tools):
    _plant_hidden(root, "hidden\n")
    out = call(tools, "list_files")
    assert out.ok
    lines = out.content.splitlines()
    size = (root / "model.py").stat().st_size
    assert f"model.py  ({size} bytes)" in lines
    assert any(line.startswith("kernels/example_scale.cpp  (") for line in lines)
    assert any(line.startswith("model_new.py  (") for line in lines)
    assert "planted_marker" not in out.content
    assert not any(part in out.content for part in (".git/", ".kernelsmith", "__pycache__"))


def test_list_files_of_a_subfolder_and_bad_folders(root, tools):
    assert call(tools, "write_file", path="kernels/new/deep.cu", content="x\n").ok
    out = call(tools, "list_files", path="kernels")
    assert out.ok and "kernels/new/deep.cu  (2 bytes)" in out.content and "model.py" not in out.content
    for bad in ("..", "model.py", "nowhere", ".git"):
        res = call(tools, "list_files", path=bad)
        assert not res.ok and res.content.startswith("error"), bad


def test_grep_finds_file_and_line(root, tools):
    (root / "kernels" / "k.cpp").write_text("int a;\n// needle_42 here\nint b;\n")
    out = call(tools, "grep", pattern=r"needle_\d+")
    assert out.ok
    assert out.content.splitlines() == ["kernels/k.cpp:2: // needle_42 here"]
    single = call(tools, "grep", pattern="int", path="kernels/k.cpp")
    assert single.content.splitlines() == ["kernels/k.cpp:1: int a;", "kernels/k.cpp:3: int b;"]


def test_grep_skips_hidden_folders_and_reports_no_matches(root, tools):
    _plant_hidden(root, "zebra_marker_77\n")
    out = call(tools, "grep", pattern="zebra_marker_77")
    assert out.ok and out.content == "no matches"


def test_grep_bad_regex_and_bad_path_are_errors(root, tools):
    bad = call(tools, "grep", pattern="(unclosed")
    assert not bad.ok and bad.content.startswith("error: bad pattern")
    for path in ("../", ".git", "nowhere"):
        res = call(tools, "grep", pattern="x", path=path)
        assert not res.ok and res.content.startswith("error"), path


# --- bash ---------------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    """Running: not gone and not a zombie waiting for init (killed, only not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _assert_dead(pid: int, within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert not _alive(pid), f"process {pid} survived the bash tool"
    finally:
        if _alive(pid):  # our own stray child: do not leave it behind
            os.kill(pid, signal.SIGKILL)


def test_bash_runs_in_the_workdir_with_output_and_exit_code(root, tools):
    out = call(tools, "bash", command="pwd; ls")
    assert out.ok and out.content.endswith("[exit code 0]")
    assert out.content.splitlines()[0] == str(root.resolve())
    assert "model.py" in out.content
    failed = call(tools, "bash", command="echo to-stdout; echo to-stderr >&2; exit 3")
    assert not failed.ok
    assert "to-stdout" in failed.content and "to-stderr" in failed.content
    assert failed.content.endswith("[exit code 3]")


def test_bash_writes_land_in_the_workdir(root, tools):
    assert call(tools, "bash", command="echo made-by-bash > notes.md").ok
    assert (root / "notes.md").read_text() == "made-by-bash\n"


def test_bash_hang_is_killed_at_the_timeout(tools):
    start = time.monotonic()
    out = call(tools, "bash", command="echo before-the-hang; sleep 600")
    elapsed = time.monotonic() - start
    assert 1.4 < elapsed < 5
    assert not out.ok
    assert "before-the-hang" in out.content  # output up to the kill is kept
    assert "killed" in out.content and "1.5 s" in out.content


def _assert_none_with(token: str, within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while live_processes_with(token) and time.monotonic() < deadline:
        time.sleep(0.02)
    survivors = live_processes_with(token)
    for pid in survivors:  # our own strays: do not leave them behind
        os.kill(pid, signal.SIGKILL)
    assert survivors == [], f"processes {survivors} survived the bash tool"


def test_bash_hang_with_a_background_child_leaves_no_survivor(root, tools):
    start = time.monotonic()
    out = call(tools, "bash", command="sleep 600.125 & sleep 600")
    assert time.monotonic() - start < 5
    assert not out.ok and "killed" in out.content
    _assert_none_with("600.125")


@pytest.mark.parametrize("redirect", ["", " > /dev/null 2>&1"])
def test_bash_backgrounded_process_returns_promptly_and_dies(root, redirect):
    tools = Toolbox(root, FakeEvaluator(), bash_timeout_s=10)
    start = time.monotonic()
    out = call(tools, "bash", command=f"sleep 600.25{redirect} & echo launched; exit 0")
    assert time.monotonic() - start < 3  # bash itself finished at once: no wait for the child's output pipe
    assert out.ok and "launched" in out.content and out.content.endswith("[exit code 0]")
    _assert_none_with("600.25")


def test_bash_long_output_keeps_head_and_exit_code(tools):
    out = call(tools, "bash", command="echo FIRST-LINE; head -c 100000 /dev/zero | tr '\\0' x; echo; echo LAST-LINE")
    assert out.ok and len(out.content) < MAX_OUTPUT + 100
    assert out.content.startswith("FIRST-LINE") and "LAST-LINE" in out.content
    assert out.content.endswith("[exit code 0]")


def test_bash_cannot_reach_the_network_when_isolated(tools):
    if not jail.status().jailed and not network_isolation():
        pytest.skip("this OS does not allow an unprivileged network namespace (unshare -rn); "
                    "bash runs with the host's network here")
    server = socket.socket()
    try:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = (f"{sys.executable} -c \"import socket; "
                 f"socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\"")
        # the same command outside the tool reaches the listener: the probe itself works
        direct = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=10)
        assert direct.returncode == 0 and "CONNECTED" in direct.stdout
        server.accept()[0].close()

        out = call(tools, "bash", command=probe)
        assert not out.ok and "CONNECTED" not in out.content
        assert "[exit code 0]" not in out.content and "[exit code" in out.content
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing came through from inside the tool
    finally:
        server.close()


def test_network_isolation_is_a_fresh_list():
    first = network_isolation()
    first.append("--oops")
    assert "--oops" not in network_isolation()


# --- compile / verify / profile / finish --------------------------------------------------

def test_compile_reports_the_build(root):
    ev = FakeEvaluator(build={"ok": True, "seconds": 1.25, "cached": True})
    out = call(Toolbox(root, ev), "compile")
    assert out.ok and out.content == "build ok (cache hit) in 1.2 s"
    assert out.eval == {"build": ev.build} and ev.calls == ["compile"]

    ev = FakeEvaluator(build={"ok": False, "summary": "kernels/k.cu:3: error: expected ';'"})
    out = call(Toolbox(root, ev), "compile")
    assert not out.ok and "build FAILED" in out.content and "kernels/k.cu:3" in out.content


def test_verify_and_profile_return_the_eval_result(root):
    good = EvalResult(correct=True, reward=1.5, stage="done", trials=[{"max_abs_err": 2e-6}, {"max_abs_err": 1e-6}],
                      timings_ms={"candidate": 0.5, "eager": 1.0, "compile": 0.75},
                      speedup_vs_eager=2.0, speedup_vs_compile=1.5, compile_mode="default")
    bad = EvalResult(correct=False, stage="verify", reward=-1.0, error="mismatch: max abs err 0.5")
    ev = FakeEvaluator(verify=good, profile=bad)
    tools = Toolbox(root, ev)
    v = call(tools, "verify")
    assert v.ok and v.content.startswith("CORRECT (2 trials") and v.eval == good.to_dict()
    p = call(tools, "profile")
    assert not p.ok and p.content.startswith("REJECTED at verify") and "mismatch" in p.content
    assert p.eval == bad.to_dict()
    assert ev.calls == ["verify", "profile"]


def test_a_correct_result_with_violations_is_not_ok(root):
    cheat = EvalResult(correct=True, violations=["fixed infrastructure file binding.cpp was modified"],
                       stage="verify", error="violation")
    out = call(Toolbox(root, FakeEvaluator(verify=cheat)), "verify")
    assert not out.ok and "binding.cpp" in out.content


def test_finish_ends_the_session_with_the_summary(tools):
    out = call(tools, "finish", summary="fused kernel, 2.1x vs eager")
    assert out.ok and out.finish and out.extra == {"summary": "fused kernel, 2.1x vs eager"}


# --- clip ---------------------------------------------------------------------------------

def test_clip_leaves_short_text_alone():
    assert clip("short") == "short"
    exact = "y" * MAX_OUTPUT
    assert clip(exact) == exact


def test_clip_keeps_head_and_tail():
    text = "HEAD" + "m" * 30_000 + "TAIL"
    out = clip(text, limit=1000)
    assert out.startswith("HEAD" + "m" * 496) and out.endswith("m" * 496 + "TAIL")
    assert f"[... {len(text) - 1000} characters cut ...]" in out
    assert len(out) < 1100
    assert len(clip("z" * 100_000)) < MAX_OUTPUT + 100


# --- the jail around bash ------------------------------------------------------------------

needs_jail = pytest.mark.skipif(not jail.status().jailed, reason=f"no jail on this machine: {jail.status().describe()}")


@needs_jail
def test_bash_writes_only_the_agents_files(root, tools):
    trusted = {p: snapshot(root / p) for p in ("model.py", ".kernelsmith/config.json", "SKILL.md", ".git/HEAD")}
    attack = ("chmod u+w model.py; echo 'class Model: pass' > model.py; echo '{}' > .kernelsmith/config.json; "
              "echo hacked > SKILL.md; echo 'touch /tmp/pwned' > .git/hooks/pre-commit; "
              "git commit --allow-empty -qm forged; echo ok > kernels/made.cu; echo ok > model_new.py; "
              "echo ok > notes.md; echo scratch > /tmp/scratch && cat /tmp/scratch")
    out = call(tools, "bash", command=attack)
    assert "Read-only file system" in out.content and "scratch" in out.content
    assert {p: snapshot(root / p) for p in trusted} == trusted
    assert not (root / ".git" / "hooks" / "pre-commit").exists()
    assert [(root / p).read_text() for p in ("kernels/made.cu", "model_new.py", "notes.md")] == ["ok\n"] * 3


@needs_jail
def test_a_setsid_daemon_dies_with_the_call(tools):
    out = call(tools, "bash", command="setsid sleep 600.5 > /dev/null 2>&1 < /dev/null & disown; echo gone")
    assert out.ok and "gone" in out.content
    _assert_none_with("600.5")


@needs_jail
def test_bash_cannot_write_a_file_past_the_size_cap(root, tools):
    out = call(tools, "bash", command="head -c 300M /dev/zero > kernels/huge.bin; echo rc=$?")
    assert "rc=0" not in out.content
    assert (root / "kernels" / "huge.bin").stat().st_size <= 256 << 20


@needs_jail
def test_bash_cannot_read_kernelsmiths_key(root, monkeypatch):
    config = root / ".config"  # inside the workdir, which bash sees: only the hiding keeps the key out of view
    (config / "kernelsmith").mkdir(parents=True)
    (config / "kernelsmith" / "commit.key").write_text("TOP-SECRET-KEY")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    out = call(Toolbox(root, FakeEvaluator(), bash_timeout_s=10), "bash",
               command=f"cat {config}/kernelsmith/commit.key; ls -a {config}/kernelsmith")
    assert "TOP-SECRET-KEY" not in out.content


def test_grep_does_not_follow_a_symlink_out_of_the_workdir(root, tools):
    (root / "kernels" / "evil.cu").symlink_to(root.parent / "outside.txt")
    out = call(tools, "grep", pattern="SECRET", path=".")
    assert "SECRET" not in out.content
    out = call(tools, "grep", pattern="SECRET", path="kernels")
    assert "SECRET" not in out.content


@needs_jail
def test_a_parent_run_from_tmp_still_gives_the_jail_a_writable_tmp(tools, monkeypatch):
    """A script in /tmp that drives kernelsmith puts /tmp on sys.path; the jail showed all of /tmp
    read-only then, and every candidate's tempfile failed ("No usable temporary directory")."""
    monkeypatch.setattr(sys, "path", ["/tmp", *sys.path])
    out = call(tools, "bash", command="echo scratch > /tmp/scratch && cat /tmp/scratch && ls /tmp | wc -l")
    assert out.ok and "scratch" in out.content, out.content
