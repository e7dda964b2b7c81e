"""gitops: the user's work is saved first, attempts are snapshots beside the branch, and only
kernel paths land in kernelsmith's own commits (which carry a session trailer)."""

from __future__ import annotations

import git
import pytest

from conftest import TASK
from kernelsmith import workdir as wd
from kernelsmith.errors import BadInput
from kernelsmith.gitops import ATTEMPTS_REF, TRAILER_SESSION, KernelRepo, format_trailers, parse_trailers
from kernelsmith.task import TaskSource


@pytest.fixture
def root(tmp_path):
    """A realistic workdir (initial commit, .gitignore, .kernelsmith/) for the tiny task."""
    path = tmp_path / "wd"
    wd.create(TaskSource(name="axpb", source=TASK, origin="/somewhere/axpb.py"), path, "cpu")
    return path


def status(root) -> str:
    return git.Repo(root).git.status("--porcelain", "--untracked-files=all")


def staged(root) -> str:
    return git.Repo(root).git.diff("--cached", "--name-status")


def blob(root, rev: str, path: str) -> str:
    return git.Repo(root).git.show(f"{rev}:{path}")


def files_in(root, rev: str) -> set[str]:
    return set(git.Repo(root).git.ls_tree("-r", "--name-only", rev).splitlines())


# -- save_user_changes -------------------------------------------------------------------------

def test_user_changes_to_kernel_paths_are_committed_separately_and_the_rest_is_left_alone(root):
    repo = git.Repo(root)
    (root / "SKILL.md").write_text("my own notes on the skill\n")           # modified, tracked
    (root / "scratch.py").write_text("print('mine')\n")                      # new, untracked
    (root / "README.txt").write_text("staged by me\n")
    repo.git.add("README.txt")                                              # staged, outside kernel paths
    (root / "kernels" / "mine.cpp").write_text("// my kernel\n")             # new file in kernel paths
    (root / "model_new.py").write_text("# my candidate\n")
    (root / "notes.md").write_text("my notes\n")
    (root / ".kernelsmith" / "session.json").write_text("{}\n")
    (root / "kernels" / "junk.o").write_text("object\n")                     # ignored
    before_head = repo.head.commit.hexsha

    sha = KernelRepo(root).save_user_changes("s1")

    assert sha and repo.head.commit.hexsha == sha and repo.head.commit.parents[0].hexsha == before_head
    assert repo.head.commit.message.startswith("kernelsmith: save your uncommitted changes before session s1")
    assert blob(root, sha, "kernels/mine.cpp") == "// my kernel"
    assert blob(root, sha, "model_new.py") == "# my candidate" and blob(root, sha, "notes.md") == "my notes"
    changed = set(repo.git.diff_tree("--no-commit-id", "--name-only", "-r", before_head, sha).splitlines())
    assert changed == {"kernels/mine.cpp", "model_new.py", "notes.md"}      # only what a session writes
    # Everything else is exactly as it was: a session never writes there, so nothing needs saving.
    assert sorted(status(root).splitlines()) == sorted([" M SKILL.md", "?? scratch.py", "A  README.txt"])
    assert (root / "scratch.py").read_text() == "print('mine')\n"
    assert not KernelRepo(root).is_ours(sha)                                # the user's work, not ours to undo


def test_save_includes_deletions_and_never_kernelsmith_even_without_gitignore(root):
    repo = git.Repo(root)
    (root / ".gitignore").unlink()
    (root / "kernels" / "example_scale.cpp").unlink()
    sha = KernelRepo(root).save_user_changes("s1")
    tracked = files_in(root, sha)
    assert "kernels/example_scale.cpp" not in tracked
    assert ".gitignore" in tracked                                          # not a kernel path: left as it is
    assert not any(p.startswith(".kernelsmith") for p in tracked)
    assert ".kernelsmith/" in repo.git.status("--porcelain")                # still there, still uncommitted


def test_save_on_a_clean_workdir_is_none(root):
    head = git.Repo(root).head.commit.hexsha
    (root / ".kernelsmith" / "cache.json").write_text("{}\n")               # our own state is not a user change
    assert KernelRepo(root).save_user_changes("s1") is None
    assert git.Repo(root).head.commit.hexsha == head


# -- snapshot_attempt --------------------------------------------------------------------------

def test_snapshot_records_working_files_without_touching_anything(root):
    repo = git.Repo(root)
    (root / "model_new.py").write_text("# attempt one\n")
    (root / "kernels" / "fast.cpp").write_text("// fast\n")
    (root / "kernels" / "example_scale.cpp").unlink()                       # a deletion
    (root / "notes.md").write_text("tiling by 32 helped\n")
    (root / "other.txt").write_text("not a kernel\n")
    (root / "SKILL.md").write_text("staged user edit\n")
    repo.git.add("SKILL.md")
    before = (status(root), staged(root), repo.head.commit.hexsha, repo.active_branch.name)

    sha = KernelRepo(root).snapshot_attempt("s1", 3, "tiled version")

    assert (status(root), staged(root), repo.head.commit.hexsha, repo.active_branch.name) == before
    ref = f"{ATTEMPTS_REF}/s1/0003"
    assert repo.git.rev_parse(ref) == sha
    assert repo.commit(sha).parents[0].hexsha == before[2]
    assert blob(root, ref, "model_new.py") == "# attempt one"
    assert blob(root, ref, "kernels/fast.cpp") == "// fast"
    assert blob(root, ref, "notes.md") == "tiling by 32 helped"
    tracked = files_in(root, ref)
    assert "kernels/example_scale.cpp" not in tracked                       # deleted in the snapshot too
    assert "other.txt" not in tracked                                       # only kernel paths and notes
    assert blob(root, ref, "SKILL.md") == blob(root, "HEAD", "SKILL.md")    # HEAD's version, not the staged one
    assert (root / "model_new.py").read_text() == "# attempt one\n"


def test_snapshot_of_a_deleted_kernels_folder(root):
    import shutil

    shutil.rmtree(root / "kernels")
    sha = KernelRepo(root).snapshot_attempt("s1", 1)
    assert not any(p.startswith("kernels/") for p in files_in(root, sha))
    assert "model_new.py" in files_in(root, sha)


def test_attempts_are_listed_per_session_in_order(root):
    kr = KernelRepo(root)
    for session, attempt, text in [("s2", 1, "b"), ("s1", 10, "c"), ("s1", 2, "a\n\nsecond paragraph")]:
        (root / "model_new.py").write_text(f"# {session} {attempt}\n")
        kr.snapshot_attempt(session, attempt, text)
    listed = kr.attempts()
    assert [(a["session"], a["attempt"]) for a in listed] == [("s1", 2), ("s1", 10), ("s2", 1)]
    assert listed[0]["message"] == "a\n\nsecond paragraph" and listed[0]["ref"] == f"{ATTEMPTS_REF}/s1/0002"
    assert [a["attempt"] for a in kr.attempts("s1")] == [2, 10]
    assert blob(root, listed[1]["sha"], "model_new.py") == "# s1 10"
    assert all(kr.is_ours(a["sha"]) for a in listed)
    assert kr.kernel_commits() == []                                        # snapshots are not on the branch


# -- commit_kernel and kernel_commits ----------------------------------------------------------

def test_commit_kernel_commits_only_kernel_paths_and_keeps_staged_work(root):
    repo = git.Repo(root)
    (root / "model_new.py").write_text("# the kept kernel\n")
    (root / "kernels" / "fast.cpp").write_text("// fast\n")
    (root / "kernels" / "example_scale.cpp").unlink()
    (root / "NOTES.md").write_text("what worked\n")
    (root / "SKILL.md").write_text("staged, unrelated\n")
    repo.git.add("SKILL.md")
    (root / "scratch.txt").write_text("untracked, unrelated\n")
    parent = repo.head.commit.hexsha

    sha = KernelRepo(root).commit_kernel("Tiled axpb, 1.8x", "Rows are split over 4 threads.",
                                         {TRAILER_SESSION: "s1", "Kernelsmith-Speedup": "1.80"})

    assert repo.head.commit.hexsha == sha and repo.commit(sha).parents[0].hexsha == parent
    changed = set(repo.git.diff_tree("--no-commit-id", "--name-only", "-r", parent, sha).splitlines())
    assert changed == {"model_new.py", "kernels/fast.cpp", "kernels/example_scale.cpp", "NOTES.md"}
    assert staged(root) == "M\tSKILL.md"                                    # still staged, still uncommitted
    assert (root / "SKILL.md").read_text() == "staged, unrelated\n"
    assert status(root).splitlines() == ["M  SKILL.md", "?? scratch.txt"]
    assert repo.commit(sha).message == ("Tiled axpb, 1.8x\n\nRows are split over 4 threads.\n\n"
                                        "Kernelsmith-Session: s1\nKernelsmith-Speedup: 1.80\n")
    [listed] = KernelRepo(root).kernel_commits()
    assert listed["sha"] == sha and listed["summary"] == "Tiled axpb, 1.8x"
    assert listed["trailers"] == {TRAILER_SESSION: "s1", "Kernelsmith-Speedup": "1.80"}
    assert listed["time"] == repo.commit(sha).committed_date


def test_kernel_commits_ignore_user_commits_and_filter_by_session(root):
    repo = git.Repo(root)
    kr = KernelRepo(root)
    shas = {}
    for session in ("s1", "s2"):
        (root / "model_new.py").write_text(f"# {session}\n")
        shas[session] = kr.commit_kernel(f"kernel of {session}", "", {TRAILER_SESSION: session})
        (root / "user.txt").write_text(f"user work after {session}\n")
        repo.git.add("user.txt")
        repo.git.commit("-m", f"user commit mentioning {TRAILER_SESSION} in the body")
    (root / "SKILL.md").write_text("edited\n")
    kr.save_user_changes("s3")
    assert [c["sha"] for c in kr.kernel_commits()] == [shas["s2"], shas["s1"]]
    assert [c["sha"] for c in kr.kernel_commits("s1")] == [shas["s1"]]
    assert kr.is_ours(shas["s1"]) and not kr.is_ours(repo.head.commit.hexsha)
    assert not kr.is_ours(repo.commit(f"{shas['s1']}~1").hexsha)            # the initial commit


def test_commit_kernel_refusals(root):
    repo = git.Repo(root)
    kr = KernelRepo(root)
    assert not kr.has_kernel_changes()
    with pytest.raises(BadInput, match="no changes"):
        kr.commit_kernel("nothing", "", {TRAILER_SESSION: "s1"})
    (root / "model_new.py").write_text("# changed\n")
    assert kr.has_kernel_changes()
    with pytest.raises(BadInput, match=TRAILER_SESSION):
        kr.commit_kernel("no trailer", "", {"Kernelsmith-Speedup": "2"})
    with pytest.raises(BadInput, match="trailer key"):
        kr.commit_kernel("bad key", "", {TRAILER_SESSION: "s1", "Bad Key": "x"})
    branch = repo.active_branch.name
    repo.git.checkout("--detach")
    with pytest.raises(BadInput, match="detached"):
        kr.commit_kernel("detached", "", {TRAILER_SESSION: "s1"})
    repo.git.checkout(branch)
    (root / ".git" / "MERGE_HEAD").write_text(repo.head.commit.hexsha + "\n")
    with pytest.raises(BadInput, match="middle of a merge"):
        kr.commit_kernel("mid-merge", "", {TRAILER_SESSION: "s1"})
    assert len(list(repo.iter_commits())) == 1                              # nothing was committed
    assert (root / "model_new.py").read_text() == "# changed\n"


# -- errors and helpers ------------------------------------------------------------------------

def test_not_a_repository(tmp_path):
    with pytest.raises(BadInput, match="not a git repository"):
        KernelRepo(tmp_path)
    with pytest.raises(BadInput, match="not a git repository"):
        KernelRepo(tmp_path / "missing")


def test_unborn_head_is_a_clear_error(tmp_path):
    git.Repo.init(tmp_path)
    (tmp_path / "model_new.py").write_text("# x\n")
    kr = KernelRepo(tmp_path)
    with pytest.raises(BadInput, match="no commits yet"):
        kr.head_sha()
    with pytest.raises(BadInput, match="no commits yet"):
        kr.snapshot_attempt("s1", 1)
    with pytest.raises(BadInput, match="no commits yet"):
        kr.save_user_changes("s1")
    assert kr.kernel_commits() == [] and kr.attempts() == []


def test_bad_session_ids_and_unknown_commits(root):
    kr = KernelRepo(root)
    for bad in ("a/b", "..", "x y", "s.lock", "-s"):
        with pytest.raises(BadInput, match="session id"):
            kr.snapshot_attempt(bad, 1)
    with pytest.raises(BadInput, match="attempt number"):
        kr.snapshot_attempt("s1", -1)
    for unknown in ("0" * 40, "--all"):
        with pytest.raises(BadInput, match="not a commit"):
            kr.is_ours(unknown)


def test_trailers_round_trip():
    text = format_trailers({TRAILER_SESSION: "s1", "Kernelsmith-Note": "two\nlines"})
    assert text == "Kernelsmith-Session: s1\nKernelsmith-Note: two lines"
    assert parse_trailers(text) == {TRAILER_SESSION: "s1", "Kernelsmith-Note": "two lines"}


# -- git's lock files, left by a git command that was killed ---------------------------------------

def test_a_stale_branch_lock_is_named_and_the_commit_lands_once_it_is_gone(root):
    """A killed commit can leave refs/heads/<branch>.lock: the refusal names that file (not "the branch
    moved"), nothing moves, and the same commit lands once the file is deleted."""
    repo = git.Repo(root)
    head = repo.head.commit.hexsha
    lock = root / ".git" / "refs" / "heads" / f"{repo.active_branch.name}.lock"
    lock.write_text("")
    (root / "model_new.py").write_text("# faster\n")
    with pytest.raises(BadInput, match=r"lock file .*\.lock blocks the commit") as refused:
        KernelRepo(root).commit_kernel("k", "", {TRAILER_SESSION: "s1"})
    assert "branch moved" not in str(refused.value) and "delete that file" in refused.value.hint
    assert repo.head.commit.hexsha == head and (root / "model_new.py").read_text() == "# faster\n"
    lock.unlink()
    sha = KernelRepo(root).commit_kernel("k", "", {TRAILER_SESSION: "s1"})
    assert blob(root, sha, "model_new.py") == "# faster"


def test_a_lock_held_for_a_moment_is_waited_out(root):
    """A user's git command holds its lock for milliseconds: kernelsmith waits, it does not refuse."""
    import threading

    lock = root / ".git" / "index.lock"
    lock.write_text("")
    threading.Timer(0.3, lock.unlink).start()
    (root / "model_new.py").write_text("# faster\n")
    repo = KernelRepo(root)
    sha = repo.commit_kernel("k", "", {TRAILER_SESSION: "s1"})
    assert repo.index_note is None and staged(root) == ""  # the index followed the commit
    assert git.Repo(root).head.commit.hexsha == sha


@pytest.mark.parametrize("folder", ["wd", "o'brien's wd"])  # git quotes the lock's path: a quote in it too
def test_a_stale_index_lock_after_the_branch_moved_keeps_the_commit_and_says_so(root, tmp_path, folder):
    """The branch has moved when the user's index is updated: a stale .git/index.lock then must not hide
    the commit behind an error, and the user must hear that a plain `git commit` would undo it."""
    if folder != "wd":
        root = root.rename(tmp_path / folder)
    (root / "model_new.py").write_text("# faster\n")
    (root / ".git" / "index.lock").write_text("")
    repo = KernelRepo(root)
    sha = repo.commit_kernel("k", "", {TRAILER_SESSION: "s1"})
    assert git.Repo(root).head.commit.hexsha == sha and [c["sha"] for c in repo.kernel_commits()] == [sha]
    assert repo.index_note and "index.lock" in repo.index_note and "git reset -q -- model_new.py" in repo.index_note
    (root / ".git" / "index.lock").unlink()
    git.Repo(root).git.reset("-q", "--", "model_new.py", "kernels")  # what the note says to run
    assert staged(root) == "" and status(root) == ""


def test_a_refused_commit_leaves_no_note_of_the_commit_before_it(root):
    """The index note belongs to the action that made it: a later action, refused or not, does not repeat it."""
    from kernelsmith.gitops import MAX_FILE_BYTES

    (root / "model_new.py").write_text("# faster\n")
    (root / ".git" / "index.lock").write_text("")
    repo = KernelRepo(root)
    repo.commit_kernel("k", "", {TRAILER_SESSION: "s1"})
    assert repo.index_note
    (root / ".git" / "index.lock").unlink()
    (root / "kernels" / "big.bin").write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    with pytest.raises(BadInput):
        repo.commit_kernel("k2", "", {TRAILER_SESSION: "s1"})
    assert repo.index_note is None


def test_accept_and_attempts_behind_stale_ref_locks_are_one_line_refusals(root):
    """refs/kernelsmith/accepted.lock or an attempt ref's lock left by a killed git: a BadInput naming the
    file (a raw GitCommandError crashed the review UI), and no accept in the ledger that the ref never got."""
    (root / "model_new.py").write_text("# faster\n")
    repo = KernelRepo(root)
    sha = repo.commit_kernel("k", "", {TRAILER_SESSION: "s1"})
    lock = root / ".git" / "refs" / "kernelsmith" / "accepted.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    with pytest.raises(BadInput, match="accepted.lock is in the way"):
        repo.accept(sha)
    assert repo.accepted() is None
    lock.unlink()
    assert repo.accept(sha)["sha"] == sha and repo.accepted() == sha
    attempt_lock = root / ".git" / "refs" / "kernelsmith" / "attempts" / "s1" / "0001.lock"
    attempt_lock.parent.mkdir(parents=True)
    attempt_lock.write_text("")
    with pytest.raises(BadInput, match="0001.lock is in the way"):
        repo.snapshot_attempt("s1", 1)
