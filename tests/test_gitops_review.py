"""Reviewing kernel commits: accept (tag + ref), revert (a new commit, refused when unsafe),
restore an attempt into the working files; and the `log`, `accept`, `revert` commands.
Real git repositories in tmp dirs, the real CLI in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import git
import pytest

from conftest import TASK
from kernelsmith import workdir as wd
from kernelsmith.errors import BadInput
from kernelsmith.gitops import ACCEPTED_REF, TRAILER_SESSION, KernelRepo, kernel_row
from kernelsmith.task import TaskSource

CLI = [sys.executable, "-m", "kernelsmith.cli"]


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "wd"
    wd.create(TaskSource(name="axpb", source=TASK, origin="/somewhere/axpb.py"), path, "cpu")
    return path


def kernel_commit(root, files: dict[str, str], turn: int, eager: str = "1.500x") -> str:
    """Write files (None deletes) and commit them as the agent does, with its trailers."""
    for name, text in files.items():
        path = root / name
        if text is None:
            path.unlink()
        else:
            path.write_text(text)
    trailers = {TRAILER_SESSION: "s1", "Speedup-Vs-Eager": eager, "Speedup-Vs-Compile": "n/a",
                "Reward": "2", "Turn": str(turn)}
    return KernelRepo(root).commit_kernel(f"kernelsmith: {eager} vs eager (turn {turn})", "", trailers)


def user_commit(root, name: str, text: str) -> str:
    (root / name).write_text(text)
    repo = git.Repo(root)
    repo.git.add(name)
    repo.git.commit("-q", "-m", "my own change")
    return repo.head.commit.hexsha


def ks(*args, cwd=None):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=120)


def one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    return lines[0]


# -- accept --------------------------------------------------------------------------------------

def test_accept_writes_the_ref_and_an_annotated_tag(root):
    first = kernel_commit(root, {"kernels/fast.cpp": "// v1\n"}, turn=3)
    second = kernel_commit(root, {"kernels/fast.cpp": "// v2\n"}, turn=7)
    repo = KernelRepo(root)
    assert repo.accepted() is None

    done = repo.accept(first[:10])

    assert done["sha"] == first and repo.accepted() == first
    tag = git.Repo(root).tags[done["tag"]]
    assert tag.commit.hexsha == first and "accepted" in tag.tag.message
    repo.accept("HEAD")  # accepting another moves the ref; the first tag stays as history
    assert repo.accepted() == second
    assert git.Repo(root).git.rev_parse(ACCEPTED_REF) == second
    assert {t.name for t in git.Repo(root).tags} == {done["tag"], "kernelsmith-accepted-" + second[:8]}


def test_accept_refuses_what_is_not_a_kernel_commit_on_the_branch(root):
    kernel_commit(root, {"kernels/fast.cpp": "// v1\n"}, turn=3)
    mine = user_commit(root, "mine.txt", "mine\n")
    repo = KernelRepo(root)
    (root / "kernels" / "fast.cpp").write_text("// an attempt\n")
    snapshot = repo.snapshot_attempt("s1", 1)
    with pytest.raises(BadInput, match="not a kernelsmith commit"):
        repo.accept(mine)
    with pytest.raises(BadInput, match="attempt snapshot"):
        repo.accept(snapshot)
    with pytest.raises(BadInput, match="is not a commit"):
        repo.accept("no-such-rev")
    with pytest.raises(BadInput, match="is not a commit"):
        repo.accept("--all")
    assert repo.accepted() is None


# -- revert --------------------------------------------------------------------------------------

def test_revert_makes_a_new_commit_that_restores_the_parent_files(root):
    before = (root / "model_new.py").read_text()
    example = (root / "kernels" / "example_scale.cpp").read_text()
    sha = kernel_commit(root, {"model_new.py": "# uses fast\n", "kernels/fast.cpp": "// fast\n",
                               "kernels/example_scale.cpp": None}, turn=4)
    (root / "scratch.txt").write_text("untouched\n")
    repo = KernelRepo(root)

    new = repo.revert(sha[:8])

    head = git.Repo(root).head.commit
    assert head.hexsha == new and head.parents[0].hexsha == sha
    assert head.message.startswith(f"kernelsmith: revert {sha[:8]}")
    assert f"Kernelsmith-Reverts: {sha}" in head.message
    assert (root / "model_new.py").read_text() == before
    assert (root / "kernels" / "example_scale.cpp").read_text() == example
    assert not (root / "kernels" / "fast.cpp").exists()
    assert git.Repo(root).git.status("--porcelain") == "?? scratch.txt"
    assert kernel_row(repo.kernel_commits()[0])["reverts"] == sha


def test_revert_refuses_when_a_later_commit_touches_the_same_files(root):
    first = kernel_commit(root, {"kernels/fast.cpp": "// v1\n"}, turn=3)
    second = kernel_commit(root, {"kernels/fast.cpp": "// v2\n"}, turn=5)
    repo = KernelRepo(root)
    with pytest.raises(BadInput, match=f"later commit {second[:8]} also changes kernels/fast.cpp"):
        repo.revert(first)
    repo.revert(second)   # the newest first ...
    assert (root / "kernels" / "fast.cpp").read_text() == "// v1\n"
    with pytest.raises(BadInput, match="later commit"):
        repo.revert(first)  # ... and the revert itself touches the file: undo that, not the first


def test_revert_of_an_older_commit_on_other_files_is_allowed(root):
    first = kernel_commit(root, {"kernels/a.cpp": "// a\n"}, turn=2)
    kernel_commit(root, {"kernels/b.cpp": "// b\n"}, turn=3)
    KernelRepo(root).revert(first)
    assert not (root / "kernels" / "a.cpp").exists() and (root / "kernels" / "b.cpp").exists()


def test_revert_refuses_to_overwrite_uncommitted_work(root):
    sha = kernel_commit(root, {"kernels/fast.cpp": "// v1\n", "model_new.py": "# v1\n"}, turn=3)
    (root / "model_new.py").write_text("# my edit, not committed\n")
    with pytest.raises(BadInput, match="model_new.py has uncommitted changes"):
        KernelRepo(root).revert(sha)
    assert (root / "model_new.py").read_text() == "# my edit, not committed\n"
    assert git.Repo(root).head.commit.hexsha == sha


def test_revert_refuses_an_untracked_file_where_a_deleted_one_would_return(root):
    sha = kernel_commit(root, {"kernels/example_scale.cpp": None}, turn=3)
    (root / "kernels" / "example_scale.cpp").write_text("// mine now\n")
    with pytest.raises(BadInput, match="kernels/example_scale.cpp has uncommitted changes"):
        KernelRepo(root).revert(sha)


def test_revert_refusals_for_user_accepted_empty_and_detached(root):
    sha = kernel_commit(root, {"kernels/fast.cpp": "// v1\n"}, turn=3)
    repo = KernelRepo(root)
    measured = repo.commit_kernel("kernelsmith: measured", "", {TRAILER_SESSION: "s1"}, allow_empty=True)
    with pytest.raises(BadInput, match="changes no files"):
        repo.revert(measured)
    repo.accept(sha)
    with pytest.raises(BadInput, match="is the accepted kernel"):
        repo.revert(sha)
    mine = user_commit(root, "mine.txt", "mine\n")
    with pytest.raises(BadInput, match="not a kernelsmith commit"):
        repo.revert(mine)
    git.Repo(root).git.checkout("-q", "--detach")
    with pytest.raises(BadInput, match="detached HEAD"):
        repo.revert(measured)


# -- restore an attempt --------------------------------------------------------------------------

def test_restore_attempt_writes_the_snapshot_into_the_working_files_only(root):
    repo = KernelRepo(root)
    (root / "kernels" / "try1.cpp").write_text("// attempt one\n")
    (root / "model_new.py").write_text("# attempt one\n")
    snapshot = repo.snapshot_attempt("s1", 1)
    (root / "kernels" / "try1.cpp").unlink()
    (root / "kernels" / "try2.cpp").write_text("// attempt two\n")
    (root / "model_new.py").write_text("# attempt two\n")
    (root / "kernels" / "junk.o").write_text("ignored build output\n")
    head, index = git.Repo(root).head.commit.hexsha, git.Repo(root).git.diff("--cached")

    changed = repo.restore_attempt(snapshot)

    assert (root / "kernels" / "try1.cpp").read_text() == "// attempt one\n"
    assert (root / "model_new.py").read_text() == "# attempt one\n"
    assert not (root / "kernels" / "try2.cpp").exists()
    assert (root / "kernels" / "junk.o").exists()
    assert "kernels/try2.cpp" in changed and "kernels/try1.cpp" in changed
    assert git.Repo(root).head.commit.hexsha == head and git.Repo(root).git.diff("--cached") == index


# -- the commands --------------------------------------------------------------------------------

def test_log_accept_revert_commands(root):
    first = kernel_commit(root, {"kernels/a.cpp": "// a\n"}, turn=2, eager="1.250x")
    second = kernel_commit(root, {"kernels/b.cpp": "// b\n"}, turn=9, eager="2.000x")

    proc = ks("accept", first[:8], "--workdir", root)
    assert proc.returncode == 0, proc.stderr
    assert f"accepted {first[:8]}" in proc.stdout

    proc = ks("log", root)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if first[:8] in line or second[:8] in line]
    assert second[:8] in lines[0] and "2.00x" in lines[0] and "9" in lines[0] and "✓" not in lines[0]
    assert first[:8] in lines[1] and "1.25x" in lines[1] and "✓" in lines[1]

    data = json.loads(ks("log", root, "--json").stdout)
    assert data["accepted"] == first and [c["turn"] for c in data["commits"]] == [9, 2]

    proc = ks("revert", second[:8], cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert not (root / "kernels" / "b.cpp").exists()
    assert "reverted" in proc.stdout


def test_command_errors_are_one_line(root, tmp_path):
    sha = kernel_commit(root, {"kernels/a.cpp": "// a\n"}, turn=2)
    kernel_commit(root, {"kernels/a.cpp": "// a2\n"}, turn=3)
    assert "later commit" in one_line_error(ks("revert", sha, "--workdir", root))
    assert "is not a commit" in one_line_error(ks("accept", "nope", "--workdir", root))
    assert "not a git repository" in one_line_error(ks("log", tmp_path / "empty"))
    (tmp_path / "plain").mkdir()
    git.Repo.init(tmp_path / "plain")
    proc = ks("log", tmp_path / "plain")
    assert proc.returncode == 0 and "no kernel commits" in proc.stdout


def test_a_refused_revert_names_only_the_files_the_later_commit_shares_with_it(root):
    first = kernel_commit(root, {"model_new.py": "# uses a and b\n", "kernels/a.cpp": "// a\n", "kernels/b.cpp": "// b\n"},
                          turn=2)
    later = kernel_commit(root, {"kernels/b.cpp": "// b2\n"}, turn=4)
    with pytest.raises(BadInput) as refused:
        KernelRepo(root).revert(first)
    assert f"the later commit {later[:8]} also changes kernels/b.cpp; revert that one first" in str(refused.value)
    assert "a.cpp" not in str(refused.value) and "model_new.py" not in str(refused.value)


def test_a_revert_behind_a_stale_index_lock_lands_and_warns_in_one_line(root):
    """`kernelsmith revert` moves the branch, then cannot update git's index under a lock a killed git left:
    the revert stands, exit 0, and the warning says what a plain `git commit` would otherwise undo."""
    sha = kernel_commit(root, {"kernels/b.cpp": "// b\n"}, turn=9, eager="2.000x")
    (root / ".git" / "index.lock").write_text("")
    proc = ks("revert", sha[:8], "--workdir", root)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "reverted" in proc.stdout and not (root / "kernels" / "b.cpp").exists()
    said = " ".join(proc.stdout.split())  # rich wraps long lines
    assert "warning:" in said and "index.lock" in said and "git reset -q" in said, proc.stdout
