"""Git operations on a workdir, in the spirit of Aider's repo.py.

A session first commits whatever the user left uncommitted (so nothing of theirs is ever
clobbered), snapshots each attempt under refs/kernelsmith/attempts/<session>/<NNNN> without
touching HEAD, the index or the working tree, and commits the kernel it keeps with a
`Kernelsmith-Session:` trailer. That trailer is how kernelsmith tells its own commits from
the user's: only commits that carry it may ever be undone or rewritten by kernelsmith.

Commits are built with plumbing (a temporary index through GIT_INDEX_FILE, write-tree,
commit-tree, update-ref) so that the user's staging area is never used as scratch space.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import git

from kernelsmith.errors import BadInput
from kernelsmith.workdir import STATE_DIR

KERNEL_PATHS = ("model_new.py", "kernels")
NOTES_FILES = ("notes.md", "NOTES.md")
TRAILER_SESSION = "Kernelsmith-Session"
TRAILER_ATTEMPT = "Kernelsmith-Attempt"
ATTEMPTS_REF = "refs/kernelsmith/attempts"
ACCEPTED_REF = "refs/kernelsmith/accepted"
ACCEPTED_TAG_PREFIX = "kernelsmith-accepted-"
TRAILER_REVERTS = "Kernelsmith-Reverts"

# A session id becomes one ref component, so it must not smuggle in "/", "..", spaces or ".lock".
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_TRAILER_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")
# Unit and record separators keep `git log` fields apart whatever a commit message contains.
_US, _RS = "\x1f", "\x1e"
_IN_PROGRESS = {"MERGE_HEAD": "a merge", "rebase-merge": "a rebase", "rebase-apply": "a rebase or am",
                "CHERRY_PICK_HEAD": "a cherry-pick", "REVERT_HEAD": "a revert"}


def format_trailers(trailers: dict[str, str]) -> str:
    """`Key: value` lines, one per trailer; values are folded onto one line so git parses them back."""
    lines = []
    for key, value in trailers.items():
        if not _TRAILER_KEY.match(key):
            raise BadInput(f"bad git trailer key {key!r}",
                           "use letters, digits and dashes, e.g. Kernelsmith-Speedup")
        lines.append(f"{key}: {' '.join(str(value).split())}")
    return "\n".join(lines)


def parse_trailers(text: str) -> dict[str, str]:
    """The output of git's %(trailers:only,unfold) as a dict (a repeated key keeps its last value)."""
    trailers = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            trailers[key.strip()] = value.strip()
    return trailers


def _session_of(trailers: dict[str, str]) -> str | None:
    # git treats trailer keys case-insensitively; so do we.
    for key, value in trailers.items():
        if key.lower() == TRAILER_SESSION.lower():
            return value
    return None


def _check_session_id(session_id: str) -> None:
    if not _SESSION_ID.match(session_id) or session_id.endswith(".lock") or ".." in session_id:
        raise BadInput(f"bad session id {session_id!r}", "use letters, digits, '.', '_' and '-'")


def _message(summary: str, body: str, trailers: dict[str, str]) -> str:
    paragraphs = [" ".join(summary.split()), body.strip(), format_trailers(trailers)]
    return "\n\n".join(p for p in paragraphs if p) + "\n"


class KernelRepo:
    """The workdir's git repository, seen through what kernelsmith may do to it."""

    def __init__(self, workdir: Path):
        self.root = Path(workdir)
        try:
            self.repo = git.Repo(self.root)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise BadInput(f"{self.root} is not a git repository",
                           "create a workdir with: kernelsmith init TASK --workdir DIR") from None
        self.git = self.repo.git

    # -- state ---------------------------------------------------------------------------------

    def head_sha(self) -> str:
        try:
            return self.git.rev_parse("--verify", "-q", "HEAD^{commit}")
        except git.GitCommandError:
            raise BadInput(f"{self.root} has no commits yet",
                           "make an initial commit first (kernelsmith init does)") from None

    def _require_branch(self) -> None:
        """Refuse states where a commit would land somewhere the user does not expect."""
        self.head_sha()
        if self.repo.head.is_detached:
            raise BadInput(f"{self.root} has a detached HEAD", "check out a branch first: git switch -c kernels")
        for name, what in _IN_PROGRESS.items():
            if Path(self.root, self.git.rev_parse("--git-path", name)).exists():
                raise BadInput(f"{self.root} is in the middle of {what}",
                               "finish or abort it (git status says how) before running a session")

    def _kernel_pathspecs(self) -> list[str]:
        """KERNEL_PATHS and notes that exist now or in HEAD; git add refuses a pathspec matching nothing."""
        head = self.repo.head.commit.tree
        specs = []
        for path in KERNEL_PATHS + NOTES_FILES:
            if os.path.lexists(self.root / path) or _in_tree(head, path):
                specs.append(path)
        return specs

    def _user_pathspecs(self) -> list[str]:
        """Everything but STATE_DIR. git add fails on an :(exclude) of an ignored folder, and
        needs none then; without .gitignore the exclude keeps session records out."""
        try:
            self.git.check_ignore("-q", STATE_DIR)
            return ["."]
        except git.GitCommandError:  # exit 1: not ignored
            return [".", f":(exclude){STATE_DIR}"]

    # -- building commits without the user's index ---------------------------------------------

    def _tree_with(self, pathspecs: list[str]) -> str:
        """HEAD's tree with the working versions of pathspecs (additions, edits and deletions)."""
        with tempfile.TemporaryDirectory(prefix="kernelsmith-index-") as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            self.git.read_tree("HEAD", env=env)
            if pathspecs:
                self.git.add("-A", "--", *pathspecs, env=env)
            return self.git.write_tree(env=env)

    def _commit_tree(self, tree: str, parent: str, message: str) -> str:
        return self.git.commit_tree(tree, "-p", parent, "-m", message, env=self._identity_env())

    def _identity_env(self) -> dict[str, str]:
        """A fallback author for repos with no user.name/email, so commit-tree does not fail."""
        reader = self.repo.config_reader()
        if reader.get_value("user", "name", "") and reader.get_value("user", "email", ""):
            return {}
        fallback = {"GIT_AUTHOR_NAME": "kernelsmith", "GIT_AUTHOR_EMAIL": "kernelsmith@localhost",
                    "GIT_COMMITTER_NAME": "kernelsmith", "GIT_COMMITTER_EMAIL": "kernelsmith@localhost"}
        return {key: os.environ.get(key, value) for key, value in fallback.items()}

    def _advance_branch(self, new: str, old: str, summary: str, pathspecs: list[str]) -> None:
        """Move the branch from old to new (refusing if it moved meanwhile) and sync the index for pathspecs."""
        try:
            self.git.update_ref("-m", f"commit: {summary}", "HEAD", new, old)
        except git.GitCommandError:
            raise BadInput("the branch moved while kernelsmith was committing", "run the command again") from None
        # Only the committed paths are reset in the user's index: anything else they staged stays staged.
        self.git.reset("-q", "HEAD", "--", *pathspecs)

    # -- the API -------------------------------------------------------------------------------

    def save_user_changes(self, session_id: str) -> str | None:
        """Commit the user's own uncommitted changes (tracked modifications and untracked, not
        ignored files, but never .kernelsmith/) as a separate commit before a session, so a
        session never clobbers them. Returns its sha, or None when there was nothing to save."""
        _check_session_id(session_id)
        self._require_branch()
        head = self.head_sha()
        tree = self._tree_with(self._user_pathspecs())
        if tree == self.repo.commit(head).tree.hexsha:
            return None
        summary = f"kernelsmith: save your uncommitted changes before session {session_id}"
        sha = self._commit_tree(tree, head, summary + "\n")
        # The exclude spares anything the user force-added under STATE_DIR from being unstaged.
        self._advance_branch(sha, head, summary, [".", f":(exclude){STATE_DIR}"])
        return sha

    def snapshot_attempt(self, session_id: str, attempt: int, message: str = "") -> str:
        """Record the working versions of KERNEL_PATHS and notes as a commit on top of HEAD,
        under refs/kernelsmith/attempts/<session_id>/<attempt:04d>. HEAD, the branch, the index
        and the working tree are left exactly as they were. Returns the snapshot's sha."""
        _check_session_id(session_id)
        if not 0 <= attempt <= 9999:
            raise BadInput(f"bad attempt number {attempt}", "attempts are numbered 0 to 9999")
        head = self.head_sha()
        tree = self._tree_with(self._kernel_pathspecs())
        summary = f"kernelsmith: attempt {attempt:04d} of session {session_id}"
        trailers = {TRAILER_SESSION: session_id, TRAILER_ATTEMPT: str(attempt)}
        sha = self._commit_tree(tree, head, _message(summary, message, trailers))
        self.git.update_ref("-m", summary, f"{ATTEMPTS_REF}/{session_id}/{attempt:04d}", sha)
        return sha

    def has_kernel_changes(self) -> bool:
        """Whether the working kernel paths (and notes) differ from HEAD, i.e. commit_kernel has work."""
        return self._tree_with(self._kernel_pathspecs()) != self.repo.commit(self.head_sha()).tree.hexsha

    def commit_kernel(self, summary: str, body: str, trailers: dict[str, str], allow_empty: bool = False) -> str:
        """Commit only KERNEL_PATHS and notes to the current branch; every other change, staged
        or not, stays exactly as it was. trailers must name the session (TRAILER_SESSION).
        allow_empty: commit even when the kernel is HEAD's, to record its first measured speed."""
        if not (trailers.get(TRAILER_SESSION) or "").strip():
            raise BadInput(f"a kernelsmith commit needs a {TRAILER_SESSION} trailer")
        self._require_branch()
        head, pathspecs = self.head_sha(), self._kernel_pathspecs()
        tree = self._tree_with(pathspecs)
        if tree == self.repo.commit(head).tree.hexsha and not allow_empty:
            raise BadInput("no changes to model_new.py, kernels/ or notes to commit")
        sha = self._commit_tree(tree, head, _message(summary, body, trailers))
        self._advance_branch(sha, head, summary, pathspecs)
        return sha

    def kernel_commits(self, session_id: str | None = None) -> list[dict]:
        """Commits on the current branch that carry the session trailer, newest first:
        {"sha", "summary", "trailers", "time" (commit time, Unix seconds)}."""
        if not self._has_head():
            return []
        fields = _US.join(["%H", "%s", "%ct", "%(trailers:only,unfold)"])
        out = self.git.log(f"--format={fields}{_RS}", "HEAD", "--")
        commits = []
        for record in filter(str.strip, out.split(_RS)):
            sha, summary, time, trailer_text = record.lstrip("\n").split(_US, 3)
            trailers = parse_trailers(trailer_text)
            session = _session_of(trailers)
            if session is not None and session_id in (None, session):
                commits.append({"sha": sha, "summary": summary, "trailers": trailers, "time": int(time)})
        return commits

    def attempts(self, session_id: str | None = None) -> list[dict]:
        """Attempt snapshots {"ref", "sha", "session", "attempt", "message"}, sorted by (session, attempt)."""
        if session_id is not None:
            _check_session_id(session_id)
        prefix = f"{ATTEMPTS_REF}/{session_id}/" if session_id else f"{ATTEMPTS_REF}/"
        fields = _US.join(["%(refname)", "%(objectname)", "%(contents:body)"])
        out = self.git.for_each_ref(f"--format={fields}{_RS}", prefix)
        found = [_attempt(record) for record in filter(str.strip, out.split(_RS))]
        return sorted((a for a in found if a), key=lambda a: (a["session"], a["attempt"]))

    def is_ours(self, sha: str) -> bool:
        """True when the commit carries the kernelsmith session trailer (only those may be undone)."""
        if sha.startswith("-"):  # never let a caller's string be read as a git option
            raise BadInput(f"{sha!r} is not a commit in {self.root}")
        try:
            out = self.git.show("-s", "--format=%(trailers:only,unfold)", f"{sha}^{{commit}}", "--")
        except git.GitCommandError:
            raise BadInput(f"{sha!r} is not a commit in {self.root}") from None
        return _session_of(parse_trailers(out)) is not None

    # -- reviewing: resolve, accept, revert, restore -------------------------------------------

    def resolve(self, rev: str) -> str:
        """The full sha of a commit named by rev (sha, prefix, tag, HEAD~1, ...)."""
        if not rev or rev.startswith("-"):  # never let a caller's string be read as a git option
            raise BadInput(f"{rev!r} is not a commit in {self.root}")
        try:
            return self.git.rev_parse("--verify", "-q", f"{rev}^{{commit}}")
        except git.GitCommandError:
            raise BadInput(f"{rev!r} is not a commit in {self.root}", "`kernelsmith log` lists the kernel commits") from None

    def commit_info(self, rev: str) -> dict:
        """{"sha", "summary", "body" (without the trailers), "trailers", "time", "parents"} of one commit."""
        sha = self.resolve(rev)
        fields = _US.join(["%H", "%s", "%ct", "%P", "%b", "%(trailers:only,unfold)"])
        out = self.git.show("-s", f"--format={fields}", sha, "--")
        sha, summary, time, parents, body, trailer_text = out.split(_US, 5)
        trailers = parse_trailers(trailer_text)
        paragraphs = body.strip().split("\n\n")
        if trailers and paragraphs and set(parse_trailers(paragraphs[-1])) == set(trailers):
            paragraphs.pop()  # the trailer block: already in trailers
        return {"sha": sha, "summary": summary, "body": "\n\n".join(paragraphs).strip(), "time": int(time),
                "parents": parents.split(), "trailers": trailers}

    def accepted(self) -> str | None:
        """The sha that refs/kernelsmith/accepted names, or None when nothing was accepted."""
        try:
            return self.git.rev_parse("--verify", "-q", f"{ACCEPTED_REF}^{{commit}}")
        except git.GitCommandError:
            return None

    def accept(self, rev: str) -> dict:
        """Record a kernel commit as the accepted one: refs/kernelsmith/accepted and an annotated
        tag kernelsmith-accepted-<sha8>. Returns the commit's info and the tag's name."""
        info = self._kernel_commit_on_branch(rev, "accept")
        tag = ACCEPTED_TAG_PREFIX + info["sha"][:8]
        self.git.update_ref("-m", f"kernelsmith accept {info['sha'][:8]}", ACCEPTED_REF, info["sha"])
        self.git.tag("-f", "-a", tag, "-m", f"kernelsmith: accepted {info['summary']}", info["sha"],
                     env=self._identity_env())
        return {**info, "tag": tag}

    def changed_paths(self, sha: str) -> list[str]:
        """The paths a (single-parent) commit changed against its parent."""
        out = self.git.diff_tree("--no-commit-id", "--name-only", "-r", "--root", sha, "--")
        return [line for line in out.splitlines() if line]

    def revert(self, rev: str) -> str:
        """A new commit that undoes a kernelsmith commit; refused with the reason when unsafe
        (rules in _revert_refusal). The working files of the reverted paths follow HEAD."""
        info = self._kernel_commit_on_branch(rev, "revert")
        self._require_branch()
        paths = self.changed_paths(info["sha"])
        reason = self._revert_refusal(info, paths)
        if reason:
            raise BadInput(f"cannot revert {info['sha'][:8]}: {reason}")
        head = self.head_sha()
        tree = self._tree_reverting(info["parents"][0], paths)
        summary = f"kernelsmith: revert {info['sha'][:8]} ({info['summary']})"
        trailers = {TRAILER_SESSION: _session_of(info["trailers"]), TRAILER_REVERTS: info["sha"]}
        sha = self._commit_tree(tree, head, _message(summary, "", trailers))
        self._advance_branch(sha, head, summary, paths)
        self._checkout_paths(paths)
        return sha

    def _kernel_commit_on_branch(self, rev: str, action: str) -> dict:
        info = self.commit_info(rev)
        short = info["sha"][:8]
        if _session_of(info["trailers"]) is None:
            raise BadInput(f"cannot {action} {short}: it is not a kernelsmith commit",
                           "kernelsmith only touches commits with a Kernelsmith-Session trailer")
        if any(key.lower() == TRAILER_ATTEMPT.lower() for key in info["trailers"]):
            raise BadInput(f"cannot {action} {short}: it is an attempt snapshot, not a commit on the branch",
                           "restore the attempt into the working files instead (kernelsmith review)")
        if not self._is_ancestor(info["sha"], self.head_sha()):
            raise BadInput(f"cannot {action} {short}: it is not on the current branch")
        return info

    def _revert_refusal(self, info: dict, paths: list[str]) -> str:
        """Why reverting this commit now would lose or tangle work (Aider's undo rules, widened
        from "only the last commit" to "no later commit touches the same files"), or ""."""
        if len(info["parents"]) != 1:
            return "it is a merge or a root commit"
        if not paths:
            return "it changes no files (it records a measured speed); revert the commit before it"
        if info["sha"] == self.accepted():
            return "it is the accepted kernel; accept another commit first"
        later = self._later_commit_touching(info["sha"], paths)
        if later:
            return f"the later commit {later[:8]} also changes {', '.join(paths)}; revert that one first"
        dirty = self._dirty_among(paths)
        if dirty:
            return f"{', '.join(dirty)} has uncommitted changes that the revert would overwrite; commit or stash them first"
        return ""

    def _later_commit_touching(self, sha: str, paths: list[str]) -> str | None:
        out = self.git.rev_list(f"{sha}..HEAD", "--", *paths)
        later = out.split()
        return later[-1] if later else None  # the oldest one: the first to revert

    def _dirty_among(self, paths: list[str]) -> list[str]:
        """Paths whose index or working copy differs from HEAD, or untracked files in their place."""
        changed = self.git.diff("--name-only", "HEAD", "--", *paths).split("\n")
        untracked = self.git.ls_files("--others", "--exclude-standard", "--", *paths).split("\n")
        return sorted({p for p in changed + untracked if p})

    def _tree_reverting(self, parent: str, paths: list[str]) -> str:
        """HEAD's tree with paths as they were in parent (absent there: removed)."""
        with tempfile.TemporaryDirectory(prefix="kernelsmith-index-") as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            self.git.read_tree("HEAD", env=env)
            self.git.reset("-q", parent, "--", *paths, env=env)
            return self.git.write_tree(env=env)

    def _checkout_paths(self, paths: list[str]) -> None:
        """Make the working copies of paths match HEAD (they were clean, so nothing is lost)."""
        tracked = set(self.git.ls_tree("-r", "--name-only", "HEAD", "--", *paths).split("\n")) - {""}
        if tracked:
            self.git.checkout("HEAD", "--", *sorted(tracked))
        for path in set(paths) - tracked:
            (self.root / path).unlink(missing_ok=True)

    def restore_attempt(self, rev: str) -> list[str]:
        """Write an attempt snapshot's model_new.py, kernels/ and notes into the working files;
        HEAD, the branch and the index stay as they are. Kernel files the snapshot lacks are
        removed. Returns the paths written or removed."""
        sha = self.resolve(rev)
        snapshot = set(self.git.ls_tree("-r", "--name-only", sha, "--", *self._kernel_roots(sha)).split("\n")) - {""}
        present = self._working_kernel_files()
        with tempfile.TemporaryDirectory(prefix="kernelsmith-index-") as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            self.git.read_tree(sha, env=env)
            if snapshot:
                self.git.checkout_index("-f", "--", *sorted(snapshot), env=env)
        for path in present - snapshot:
            (self.root / path).unlink()
        return sorted(snapshot | present)

    def _kernel_roots(self, sha: str) -> list[str]:
        tree = self.repo.commit(sha).tree
        return [p for p in KERNEL_PATHS + NOTES_FILES if _in_tree(tree, p)]

    def _working_kernel_files(self) -> set[str]:
        """Kernel files in the working tree now that git does not ignore (build output stays)."""
        found = {p for p in KERNEL_PATHS + NOTES_FILES if (self.root / p).is_file()}
        kernels = self.root / "kernels"
        if kernels.is_dir():
            found |= {str(p.relative_to(self.root)) for p in kernels.rglob("*") if p.is_file()}
        ignored = self._ignored(sorted(found))
        return found - ignored

    def _ignored(self, paths: list[str]) -> set[str]:
        if not paths:
            return set()
        try:
            return set(self.git.check_ignore("--", *paths).split("\n")) - {""}
        except git.GitCommandError:  # exit 1: none ignored
            return set()

    def _is_ancestor(self, sha: str, head: str) -> bool:
        try:
            self.git.merge_base("--is-ancestor", sha, head)
            return True
        except git.GitCommandError:
            return False

    def _has_head(self) -> bool:
        try:
            self.head_sha()
            return True
        except BadInput:
            return False


def kernel_row(commit: dict) -> dict:
    """The fields a reviewer wants from a kernel commit's trailers, typed (None when absent)."""
    trailers = {key.lower(): value for key, value in commit["trailers"].items()}
    return {"sha": commit["sha"], "summary": commit["summary"], "session": _session_of(commit["trailers"]),
            "turn": _number(trailers.get("turn"), int), "reward": _number(trailers.get("reward"), float),
            "speedup_vs_eager": _number(trailers.get("speedup-vs-eager", "").rstrip("x"), float),
            "speedup_vs_compile": _number(trailers.get("speedup-vs-compile", "").rstrip("x"), float),
            "reverts": trailers.get(TRAILER_REVERTS.lower())}


def _number(text: str | None, kind):
    try:
        return kind(text)
    except (TypeError, ValueError):  # "n/a", missing, or someone's hand-written trailer
        return None


def _in_tree(tree, path: str) -> bool:
    try:
        tree[path]
        return True
    except KeyError:
        return False


def _attempt(record: str) -> dict | None:
    """One for-each-ref record; the ref name, not the message, says which session and attempt."""
    ref, sha, body = record.lstrip("\n").split(_US, 2)
    parts = ref[len(ATTEMPTS_REF) + 1:].split("/")
    if len(parts) != 2 or not parts[1].isdigit():
        return None  # someone else's ref under our namespace; not ours to interpret
    paragraphs = body.strip().split("\n\n")
    # The last paragraph is the trailer block we wrote; what is left is the caller's message.
    message = "\n\n".join(paragraphs[:-1]).strip()
    return {"ref": ref, "sha": sha, "session": parts[0], "attempt": int(parts[1]), "message": message}
