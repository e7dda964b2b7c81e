"""Git operations on a workdir, in the spirit of Aider's repo.py.

A session first commits the user's uncommitted work on the paths it writes (model_new.py,
kernels/, notes), snapshots each attempt under refs/kernelsmith/attempts/<session>/<NNNN>
without touching HEAD, the index or the working tree, and commits the kernel it keeps with a
`Kernelsmith-Session:` trailer. Trailers are claims anyone can write, so every commit kernelsmith
makes is also signed into the workdir's ledger (kernelsmith/session/ledger.py), and only commits
in the ledger count as kernelsmith's: only those are listed, accepted, exported or undone.

Commits are built with plumbing (a temporary index through GIT_INDEX_FILE, write-tree,
commit-tree, update-ref) so that the user's staging area is never used as scratch space.

The agent wrote the working tree, and where no jail could be made it may have written .git/
too. So every git process kernelsmith starts pins the config through which git runs programs
(hooks, fsmonitor, signing; see SafeGit), and kernelsmith never runs a git command that applies
.gitattributes drivers (clean and smudge filters, textconv, external diffs): it reads working
files itself, never through a symlink, stores them as blobs as they are, and writes files back
itself. Objects it hands on (export, restore, revert) are checked against their hashes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import re
import stat
import tempfile
import time
from pathlib import Path

import git
from gitdb.base import IStream

from kernelsmith.errors import BadInput
from kernelsmith.lock import workdir_lock
from kernelsmith.session.ledger import TRUSTED_KEYS_DIR, Ledger, config_dir

KERNEL_PATHS = ("model_new.py", "kernels")
NOTES_FILES = ("notes.md", "NOTES.md")
KERNEL_ROOTS = KERNEL_PATHS + NOTES_FILES  # all that a session writes, and all that kernelsmith commits
TRAILER_SESSION = "Kernelsmith-Session"
TRAILER_ATTEMPT = "Kernelsmith-Attempt"
ATTEMPTS_REF = "refs/kernelsmith/attempts"
ACCEPTED_REF = "refs/kernelsmith/accepted"
ACCEPTED_TAG_PREFIX = "kernelsmith-accepted-"
TRAILER_REVERTS = "Kernelsmith-Reverts"
# No kernel source is this big; an agent's dump or a runaway log is, and git would keep it forever.
MAX_FILE_BYTES = 16 << 20
KERNEL_KINDS = ("kernel", "revert")  # ledger kinds of the commits on the branch that log lists
COMMIT_KINDS = KERNEL_KINDS + ("attempt", "save")
ZERO_SHA = "0" * 40
# Files in .git/ that make git run a program for whoever runs git next (hooks/* too).
GIT_EXEC_FILES = ("config", "config.worktree", "info/attributes")

# Config through which git runs a program, pinned on the command line, where it beats every
# config file (and every include.path) the agent or anyone could have written.
SAFE_CONFIG = (
    "core.hooksPath=/dev/null",  # no hook at all: .git/hooks/*, reference-transaction, post-index-change
    "core.fsmonitor=",  # empty reads as false in every git (before 2.36 it was a program to run)
    "core.useReplaceRefs=false",  # refs/replace/ could swap one of our commits for another
    "commit.gpgSign=false", "tag.gpgSign=false", "tag.forceSignAnnotated=false",  # signing runs gpg.program
    "log.showSignature=false",  # and so does verifying
    "gc.auto=0", "maintenance.auto=false",
)
SAFE_ENV = {"GIT_NO_REPLACE_OBJECTS": "1", "GIT_TERMINAL_PROMPT": "0",
            "GIT_LITERAL_PATHSPECS": "1"}  # an agent's file named "kernels/*" is one path, never a glob
_DIFFING = {"diff", "show", "log"}  # porcelain that would run textconv and external diff programs
_FILTER_KEY = re.compile(r"^filter\.(.+)\.(clean|smudge|process|required)$", re.I)

# A session id becomes one ref component, so it must not smuggle in "/", "..", spaces or ".lock".
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_TRAILER_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")
# Unit and record separators keep `git log` fields apart whatever a commit message contains.
_US, _RS = "\x1f", "\x1e"
_IN_PROGRESS = {"MERGE_HEAD": "a merge", "rebase-merge": "a rebase", "rebase-apply": "a rebase or am",
                "CHERRY_PICK_HEAD": "a cherry-pick", "REVERT_HEAD": "a revert"}


LOCK_WAITS_S = (0.05, 0.2, 0.5, 1.0)  # git holds a lock for milliseconds: one held after these is stale or long
_LOCK_HELD = re.compile(r"Unable to create '(.+\.lock)': File exists")  # greedy: a path may hold a quote


def _held_lock(err: git.GitCommandError) -> str | None:
    """The lock file a git command could not take, from its message."""
    found = _LOCK_HELD.search(str(err.stderr or ""))
    return found.group(1) if found else None


def _past_locks(action):
    """action(), again after short waits while a git lock file stands in its way (a user's git running)."""
    for wait in LOCK_WAITS_S:
        try:
            return action()
        except git.GitCommandError as err:
            if not _held_lock(err):
                raise
            time.sleep(wait)
    return action()


def _action(method):
    """A public gitops action: the last action's index note cleared, and a git lock file still in the way
    after _past_locks' waits named in a one-line refusal (a raw GitCommandError crashed the review UI)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        self.index_note = None
        try:
            return method(self, *args, **kwargs)
        except git.GitCommandError as err:
            if not (lock := _held_lock(err)):
                raise
            raise _lock_refusal(lock, "is in the way") from None
    return run


def _lock_refusal(lock: str, what: str) -> BadInput:
    return BadInput(f"git's lock file {lock} {what}: a git command is running in the workdir, or one was killed "
                    "and left it", "if none is running, delete that file and try again")


def format_trailers(trailers: dict[str, str]) -> str:
    """`Key: value` lines, one per trailer; values are folded onto one line so git parses them back."""
    lines = []
    for key, value in _folded(trailers).items():
        if not _TRAILER_KEY.match(key):
            raise BadInput(f"bad git trailer key {key!r}",
                           "use letters, digits and dashes, e.g. Kernelsmith-Speedup")
        lines.append(f"{key}: {value}")
    return "\n".join(lines)


def _folded(trailers: dict[str, str]) -> dict[str, str]:
    return {key: " ".join(str(value).split()) for key, value in trailers.items()}


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


class SafeGit(git.cmd.Git):
    """repo.git of a KernelRepo: every git process it starts (GitPython's object reader too)
    gets SAFE_CONFIG and SAFE_ENV, works on the workdir whatever core.worktree says, and shows
    diffs without textconv or an external diff program."""

    def __init__(self, root: Path, _working_dir=None):
        super().__init__(str(root))
        self.set_persistent_git_options(c=list(SAFE_CONFIG))
        self.update_environment(**SAFE_ENV, GIT_WORK_TREE=str(Path(root).resolve()))

    def _call_process(self, method, *args, **kwargs):
        if method in _DIFFING:
            args = ("--no-ext-diff", "--no-textconv", *args)
        return super()._call_process(method, *args, **kwargs)

    def pin_filters(self) -> None:
        """Blank every filter driver the config names, for every later git process. Writing the
        user's index makes git re-read racily clean files through their clean filter, and the
        names are the config's to choose, so they go by GIT_CONFIG_COUNT (git >= 2.31), which
        takes a name as it is (no "=" parsing, as -c does)."""
        out = self.config("-l", "-z", with_exceptions=False)
        keys = sorted({item.split("\n", 1)[0] for item in out.split("\0") if _FILTER_KEY.match(item.split("\n", 1)[0])})
        pins = {"GIT_CONFIG_COUNT": str(len(keys))}
        for n, key in enumerate(keys):
            pins[f"GIT_CONFIG_KEY_{n}"] = key
            pins[f"GIT_CONFIG_VALUE_{n}"] = "false" if key.lower().endswith(".required") else ""
        self.update_environment(**pins)


def _open_repo(root: Path) -> git.Repo:
    class Repo(git.Repo):
        GitCommandWrapperType = functools.partial(SafeGit, root)

    return Repo(root)


class KernelRepo:
    """The workdir's git repository, seen through what kernelsmith may do to it."""

    def __init__(self, workdir: Path):
        self.root = Path(workdir)
        try:
            self.repo = _open_repo(self.root)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise BadInput(f"{self.root} is not a git repository",
                           "create a workdir with: kernelsmith init TASK --workdir DIR") from None
        self.git = self.repo.git
        self.git.pin_filters()
        self.ledger = Ledger(self.root)
        self.index_note: str | None = None  # the last commit's word on an index it could not update (_advance_branch)

    # -- state ---------------------------------------------------------------------------------

    def head_sha(self) -> str:
        try:
            return self.git.rev_parse("--verify", "-q", "HEAD^{commit}")
        except git.GitCommandError:
            raise BadInput(f"{self.root} has no commits yet",
                           "make an initial commit first (kernelsmith init does)") from None

    def _head_tree(self) -> str:
        return self.git.rev_parse(f"{self.head_sha()}^{{tree}}")

    def _require_branch(self) -> None:
        """Refuse states where a commit would land somewhere the user does not expect."""
        self.head_sha()
        if self.repo.head.is_detached:
            raise BadInput(f"{self.root} has a detached HEAD", "check out a branch first: git switch -c kernels")
        for name, what in _IN_PROGRESS.items():
            if Path(self.root, self.git.rev_parse("--git-path", name)).exists():
                raise BadInput(f"{self.root} is in the middle of {what}",
                               "finish or abort it (git status says how) before running a session")

    # -- the working files, read as the agent may have left them -------------------------------

    @contextlib.contextmanager
    def _scratch_index(self, treeish: str = "HEAD"):
        with tempfile.TemporaryDirectory(prefix="kernelsmith-index-") as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            self.git.read_tree(treeish, env=env)
            yield env

    def _candidates(self, roots: tuple[str, ...], env: dict) -> list[str]:
        """Paths under roots that a commit of the working files holds: in HEAD, or untracked and
        not ignored (env's index is HEAD's). "sub/" is a nested repository: never committed."""
        tracked = _nul_split(self.git.ls_tree("-r", "-z", "--name-only", "HEAD", "--", *roots))
        untracked = _nul_split(self.git.ls_files("-z", "--others", *self._exclude_args(), "--", *roots, env=env))
        return sorted(set(tracked) | {p for p in untracked if not p.endswith("/")})

    def _exclude_args(self) -> list[str]:
        """Ignore rules the agent cannot write: the workdir's top .gitignore, .git/info/exclude and the
        user's excludes file. A .gitignore inside kernels/ (agent-writable) would otherwise leave the
        sources that were built and measured out of the kernel's commit."""
        files = [self.root / ".gitignore", Path(self.repo.git_dir) / "info" / "exclude"]
        user = self.repo.config_reader().get_value("core", "excludesFile", "")
        files.append(Path(os.path.expanduser(str(user))) if user else
                     Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "git" / "ignore")
        return [f"--exclude-from={f}" for f in files if f.is_file()]

    def _inside(self, path: str) -> Path | None:
        """root/path, or None when a folder on the way is not a real folder: git never looks
        beyond a symlink, and neither do we (a symlinked kernels/sub must not lead out)."""
        parts, here = Path(path).parts, self.root
        for part in parts[:-1]:
            here = here / part
            try:
                if not stat.S_ISDIR(os.lstat(here).st_mode):
                    return None
            except OSError:
                return None
        return here / parts[-1]

    def _working_entry(self, path: str) -> tuple[str, bytes] | None:
        """(mode, content) of a working file as git stores it; None where git sees no file."""
        full = self._inside(path)
        try:
            st = os.lstat(full) if full else None
        except OSError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            return "120000", os.fsencode(os.readlink(full))
        if st is None or not stat.S_ISREG(st.st_mode):
            return None  # missing, a folder (its files are candidates of their own), a fifo...
        if st.st_size > MAX_FILE_BYTES:
            raise _TooBig(path, st.st_size)
        data = _read_regular(full, path)
        return None if data is None else ("100755" if st.st_mode & stat.S_IXUSR else "100644", data)

    def _working_entries(self, roots: tuple[str, ...], env: dict) -> tuple[dict, list[tuple[str, int]]]:
        """{path: (mode, blob sha) or None for a deletion}, and the (path, size) of files too big."""
        entries, too_big = {}, []
        for path in self._candidates(roots, env):
            try:
                found = self._working_entry(path)
            except _TooBig as big:
                too_big.append((big.path, big.size))
                continue
            entries[path] = None if found is None else (found[0], self._store_blob(found[1]))
        return entries, too_big

    def _store_blob(self, data: bytes) -> str:
        """The content as it is: no clean filter, no end-of-line conversion."""
        return self.repo.odb.store(IStream(b"blob", len(data), io.BytesIO(data))).hexsha.decode()

    def _update_index(self, lines: list[str], env: dict | None = None) -> None:
        """Feed `mode sha<TAB>path` lines to an index (mode 0 removes the path); --replace lets a
        file take a folder's place and back."""
        if not lines:
            return
        with tempfile.TemporaryFile() as info:
            info.write("".join(line + "\0" for line in lines).encode("utf-8", "surrogateescape"))
            info.seek(0)
            self.git.update_index("-z", "--replace", "--index-info", istream=info, env=env)

    def _tree_entries(self, treeish: str, paths: tuple[str, ...] | list[str]) -> dict[str, tuple[str, str]]:
        """{path: (mode, blob sha)} of the files under paths in treeish."""
        entries = {}
        for record in _nul_split(self.git.ls_tree("-r", "-z", treeish, "--", *paths)):
            meta, path = record.split("\t", 1)
            mode, kind, sha = meta.split()
            if kind == "blob":
                entries[path] = (mode, sha)
        return entries

    def _index_paths_from(self, treeish: str, paths, env: dict | None = None) -> None:
        """Make an index's entries under paths treeish's (those it lacks are removed): what
        `git reset -- paths` does, without the refresh after it, which runs clean filters."""
        wanted = self._tree_entries(treeish, paths)
        present = _nul_split(self.git.ls_files("-z", "--", *paths, env=env))
        removals = [f"0 {ZERO_SHA}\t{path}" for path in present if path not in wanted]
        self._update_index(removals + [f"{mode} {sha}\t{path}" for path, (mode, sha) in wanted.items()], env)

    # -- building commits without the user's index ---------------------------------------------

    def _tree_with(self, roots, refuse_big: bool = True) -> tuple[str, list[tuple[str, int]]]:
        """HEAD's tree with the working versions of roots (additions, edits and deletions), and the
        files left out as too big (HEAD's version stays). refuse_big: one of those is a BadInput."""
        with self._scratch_index() as env:
            entries, too_big = self._working_entries(tuple(roots), env)
            if too_big and refuse_big:
                raise BadInput(_too_big_line(*too_big[0]) + "; it stays on disk, uncommitted",
                               "move it out of the workdir, or add it to .gitignore")
            self._update_index([f"0 {ZERO_SHA}\t{path}" for path, found in entries.items() if found is None]
                               + [f"{found[0]} {found[1]}\t{path}" for path, found in entries.items() if found], env)
            return self.git.write_tree(env=env), too_big

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

    def _advance_branch(self, new: str, old: str, summary: str, paths) -> None:
        """Move the branch from old to new (refusing if it moved meanwhile) and sync the index for paths.
        self.index_note says when the commit landed but the user's index could not follow it (the public
        action calling this cleared it first: _action)."""
        try:
            _past_locks(lambda: self.git.update_ref("-m", f"commit: {summary}", "HEAD", new, old))
        except git.GitCommandError as err:
            if lock := _held_lock(err):
                raise _lock_refusal(lock, "blocks the commit") from None
            raise BadInput("the branch moved while kernelsmith was committing", "run the command again") from None
        # Only the committed paths are reset in the user's index: anything else they staged stays staged.
        self.git.pin_filters()  # again: the config may have changed since this repo was opened
        try:
            _past_locks(lambda: self._index_paths_from("HEAD", paths))
        except git.GitCommandError as err:
            if not (lock := _held_lock(err)):
                raise
            # the commit is on the branch: failing now would hide it; the index still holds the old versions,
            # which a plain `git commit` would commit back over the kernel, so the user must hear of it
            self.index_note = (f"committed {new[:8]}, but git's index still holds the old versions of "
                               f"{', '.join(paths)} (its lock file {lock} is held): once no git command runs, "
                               f"delete that file if it is still there and run `git reset -q -- {' '.join(paths)}`")

    # -- the ledger: which commits kernelsmith made --------------------------------------------

    def start_ledger(self) -> None:
        """Make sure the workdir has a ledger before an agent runs in it, so that no commit made
        from then on can pass for one of kernelsmith's from before ledgers."""
        if not self.ledger.path.exists():
            self.ledger.append(self._legacy_entries() + [{"kind": "start"}])

    def _record(self, kind: str, sha: str, **fields) -> None:
        self.start_ledger()
        self.ledger.append([{"kind": kind, "sha": sha, **fields}])

    def _entries(self) -> list[dict]:
        return self._legacy_entries() if self.ledger.is_legacy() else self.ledger.read().entries

    def _trusted(self, kinds=COMMIT_KINDS) -> dict[str, dict]:
        """sha -> the ledger's entry, for the commits kernelsmith made here."""
        return {e["sha"]: e for e in self._entries() if e.get("kind") in kinds}

    def _legacy_entries(self) -> list[dict]:
        """A workdir from before ledgers: its trailer commits are taken as kernelsmith's, as they
        were before (marked legacy). This happens only until the ledger exists, and the first
        writer of this version starts it before any agent runs (see start_ledger)."""
        if not self.ledger.is_legacy() or not self._has_head():
            return []
        fields = _US.join(["%H", "%T", "%P", "%s", "%ct", "%(trailers:only,unfold)", "%b"])
        # Branches, tags and our own refs; not --all, which would walk refs/replace/ too.
        out = self.git.log("HEAD", "--branches", "--tags", "--glob=refs/kernelsmith/*", f"--format={fields}{_RS}", "--")
        entries = [e for e in map(_legacy_entry, filter(str.strip, out.split(_RS))) if e]
        accepted = self._accepted_ref()
        if accepted in {e["sha"] for e in entries if e["kind"] in KERNEL_KINDS}:
            entries.append({"kind": "accept", "sha": accepted, "legacy": True})
        return entries

    def ledger_notes(self) -> list[str]:
        """One line for each reason a commit with kernelsmith's trailers is not listed."""
        notes, claims = [], self.unlisted_claims()
        if claims:
            notes.append(f"{len(claims)} commit(s) with kernelsmith's trailers are not in kernelsmith's ledger of the "
                         f"commits it made, so they are not listed ({', '.join(s[:8] for s in claims[:5])}): "
                         "made by hand or by the agent, not by kernelsmith")
        foreign = self.ledger.read().foreign_keys
        if foreign:
            notes.append(f"ledger entries signed by key {', '.join(sorted(foreign))} are not checked: copy that "
                         f"machine's ledger.key into {config_dir() / TRUSTED_KEYS_DIR}/ to list them")
        return notes

    def unlisted_claims(self) -> list[str]:
        """Commits on the branch that carry the session trailer but are not in the ledger."""
        if not self._has_head():
            return []
        trusted = self._trusted(KERNEL_KINDS)
        out = self.git.log(f"--format=%H{_US}%(trailers:only,unfold){_RS}", "HEAD", "--")
        claims = []
        for record in filter(str.strip, out.split(_RS)):
            sha, _, text = record.lstrip("\n").partition(_US)
            if _session_of(parse_trailers(text)) is not None and sha not in trusted:
                claims.append(sha)
        return claims

    def git_exec_surface(self) -> dict[str, str]:
        """{path in .git/: sha256} of the files through which git runs programs (config, hooks,
        info/attributes). A session compares it before and after: without a jail the agent could
        plant a hook that runs on the user's next `git commit`, which no pinning of ours prevents."""
        git_dir = Path(self.repo.git_dir)
        hooks = sorted(p.relative_to(git_dir) for p in (git_dir / "hooks").glob("*"))  # none: no folder
        surface = {}
        for rel in [Path(name) for name in GIT_EXEC_FILES] + hooks:
            with contextlib.suppress(OSError):
                surface[str(rel)] = hashlib.sha256((git_dir / rel).read_bytes()).hexdigest()
        return surface

    def git_exec_changes(self, before: dict[str, str]) -> list[str]:
        """The .git/ files of git_exec_surface added, changed or removed since before."""
        after = self.git_exec_surface()
        return sorted(f".git/{path}" for path in set(before) | set(after) if before.get(path) != after.get(path))

    # -- the API -------------------------------------------------------------------------------

    @_action
    def save_user_changes(self, session_id: str) -> str | None:
        """Commit the user's uncommitted work on the paths a session writes (model_new.py,
        kernels/, notes) as a commit of its own before a session, so the session never clobbers
        it. Changes anywhere else stay as they are, uncommitted: a session never writes there,
        and without a jail they may be the agent's (an edited model.py is a violation, never a new
        reference). A file over MAX_FILE_BYTES is refused by name and stays on disk. Returns the
        commit's sha, or None when there was nothing to save."""
        _check_session_id(session_id)
        self._require_branch()
        self.start_ledger()
        head = self.head_sha()
        tree, _ = self._tree_with(KERNEL_ROOTS)
        if tree == self._head_tree():
            return None
        summary = f"kernelsmith: save your uncommitted changes before session {session_id}"
        sha = self._commit_tree(tree, head, summary + "\n")
        self._record("save", sha, tree=tree, parents=[head], session=session_id)
        self._advance_branch(sha, head, summary, KERNEL_ROOTS)
        return sha

    @_action
    def snapshot_attempt(self, session_id: str, attempt: int, message: str = "") -> str:
        """Record the working versions of KERNEL_PATHS and notes as a commit on top of HEAD,
        under refs/kernelsmith/attempts/<session_id>/<attempt:04d>. HEAD, the branch, the index
        and the working tree are left exactly as they were. A file too big is left out, and the
        message says so (a snapshot is a record, not a credit). Returns the snapshot's sha."""
        _check_session_id(session_id)
        if not 0 <= attempt <= 9999:
            raise BadInput(f"bad attempt number {attempt}", "attempts are numbered 0 to 9999")
        head = self.head_sha()
        tree, too_big = self._tree_with(KERNEL_ROOTS, refuse_big=False)
        message = "\n".join([message.strip()] + [f"Left out: {_too_big_line(*big)}." for big in too_big]).strip()
        summary = f"kernelsmith: attempt {attempt:04d} of session {session_id}"
        trailers = {TRAILER_SESSION: session_id, TRAILER_ATTEMPT: str(attempt)}
        sha = self._commit_tree(tree, head, _message(summary, message, trailers))
        self._record("attempt", sha, tree=tree, parents=[head], session=session_id, attempt=attempt, message=message)
        _past_locks(lambda: self.git.update_ref("-m", summary, f"{ATTEMPTS_REF}/{session_id}/{attempt:04d}", sha))
        return sha

    def has_kernel_changes(self) -> bool:
        """Whether the working kernel paths (and notes) differ from HEAD, i.e. commit_kernel has work."""
        return self._tree_with(KERNEL_ROOTS, refuse_big=False)[0] != self._head_tree()

    @_action
    def commit_kernel(self, summary: str, body: str, trailers: dict[str, str], allow_empty: bool = False) -> str:
        """Commit only KERNEL_PATHS and notes to the current branch; every other change, staged
        or not, stays exactly as it was. trailers must name the session (TRAILER_SESSION).
        allow_empty: commit even when the kernel is HEAD's, to record its first measured speed.
        A file too big is refused by name: a credited commit holds exactly what was measured."""
        if not (trailers.get(TRAILER_SESSION) or "").strip():
            raise BadInput(f"a kernelsmith commit needs a {TRAILER_SESSION} trailer")
        self._require_branch()
        head = self.head_sha()
        tree, _ = self._tree_with(KERNEL_ROOTS)
        if tree == self._head_tree() and not allow_empty:
            raise BadInput("no changes to model_new.py, kernels/ or notes to commit")
        sha = self._commit_tree(tree, head, _message(summary, body, trailers))
        self._record("kernel", sha, tree=tree, parents=[head], session=trailers[TRAILER_SESSION],
                     summary=" ".join(summary.split()), body=body.strip(), trailers=_folded(trailers),
                     time=int(self.repo.commit(sha).committed_date))
        self._advance_branch(sha, head, summary, KERNEL_ROOTS)
        return sha

    def kernel_commits(self, session_id: str | None = None) -> list[dict]:
        """The commits kernelsmith made on the current branch (kernels and reverts), newest first,
        as its ledger recorded them: {"sha", "summary", "trailers", "time" (Unix seconds), "legacy"}."""
        if not self._has_head():
            return []
        trusted = self._trusted(KERNEL_KINDS)
        on_branch = self.git.log("--format=%H", "HEAD", "--").split()
        commits = [_listed(trusted[sha]) for sha in on_branch if sha in trusted]
        return [c for c in commits if session_id in (None, _session_of(c["trailers"]))]

    def attempts(self, session_id: str | None = None) -> list[dict]:
        """Attempt snapshots kernelsmith made {"ref", "sha", "session", "attempt", "message"},
        sorted by (session, attempt); a ref someone else put under our namespace is not one."""
        if session_id is not None:
            _check_session_id(session_id)
        prefix = f"{ATTEMPTS_REF}/{session_id}/" if session_id else f"{ATTEMPTS_REF}/"
        fields = _US.join(["%(refname)", "%(objectname)", "%(contents:body)"])
        out = self.git.for_each_ref(f"--format={fields}{_RS}", prefix)
        ours = self._trusted(("attempt",))
        found = [_attempt(record) for record in filter(str.strip, out.split(_RS))]
        return sorted((a for a in found if a and a["sha"] in ours), key=lambda a: (a["session"], a["attempt"]))

    def is_kernel_commit(self, sha: str) -> bool:
        """Whether kernelsmith made this commit as a kernel (or a revert); never raises."""
        return sha in self.kernel_shas()

    def kernel_shas(self) -> set[str]:
        """The kernel commits (and reverts) kernelsmith made here, on any branch."""
        return set(self._trusted(KERNEL_KINDS))

    def is_ours(self, sha: str) -> bool:
        """True when kernelsmith made the commit as a kernel, a revert or an attempt (only those
        may be undone); the user's saved changes and everything else are not."""
        return self.resolve(sha) in self._trusted(KERNEL_KINDS + ("attempt",))

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
        """{"sha", "summary", "body" (without the trailers), "trailers", "time", "parents"} of one
        commit, as git has it (what it claims: trusted_commit says whether kernelsmith made it)."""
        sha = self.resolve(rev)
        fields = _US.join(["%H", "%s", "%ct", "%P", "%(trailers:only,unfold)", "%b"])
        out = self.git.show("-s", f"--format={fields}", sha, "--")
        sha, summary, time, parents, trailer_text, body = out.split(_US, 5)
        trailers = parse_trailers(trailer_text)
        return {"sha": sha, "summary": summary, "body": _body_without(body, trailers), "time": int(time),
                "parents": parents.split(), "trailers": trailers}

    def trusted_commit(self, rev: str, action: str) -> dict:
        """The ledger's record of a kernel commit or a revert: {"sha", "tree", "parents",
        "summary", "body", "trailers", ...}; anything else is refused in one line naming why."""
        sha = self.resolve(rev)
        entry, short = self._trusted().get(sha), sha[:8]
        if entry is None and _session_of(self.commit_info(sha)["trailers"]) is not None:
            raise BadInput(f"cannot {action} {short}: it is not a kernelsmith commit: it carries kernelsmith's "
                           "trailers, but kernelsmith's ledger of the commits it made has no record of it",
                           "it was made by hand or by the agent; `kernelsmith log` lists the real ones")
        if entry is None or entry["kind"] == "save":
            raise BadInput(f"cannot {action} {short}: it is not a kernelsmith commit",
                           "kernelsmith only touches the kernel commits it made; `kernelsmith log` lists them")
        if entry["kind"] == "attempt":
            raise BadInput(f"cannot {action} {short}: it is an attempt snapshot, not a commit on the branch",
                           "restore the attempt into the working files instead (kernelsmith review)")
        return {"body": "", "summary": "", "trailers": {}, **entry}

    def _accepted_ref(self) -> str | None:
        try:
            return self.git.rev_parse("--verify", "-q", f"{ACCEPTED_REF}^{{commit}}")
        except git.GitCommandError:
            return None

    def accepted(self) -> str | None:
        """The kernel commit last accepted through kernelsmith (the ledger's, not whatever
        refs/kernelsmith/accepted names now), or None."""
        accepts = [e["sha"] for e in self._entries() if e.get("kind") == "accept"]
        return accepts[-1] if accepts else None

    @_action
    def accept(self, rev: str) -> dict:
        """Record a kernel commit as the accepted one: in the ledger, refs/kernelsmith/accepted and
        an annotated tag kernelsmith-accepted-<sha8>. Returns the commit's info and the tag's name."""
        with workdir_lock(self.root, "kernelsmith accept"):
            info = self._kernel_commit_on_branch(rev, "accept")
            tag = ACCEPTED_TAG_PREFIX + info["sha"][:8]
            _past_locks(lambda: self.git.update_ref("-m", f"kernelsmith accept {info['sha'][:8]}", ACCEPTED_REF,
                                                    info["sha"]))
            _past_locks(lambda: self.git.tag("-f", "-a", tag, "-m", f"kernelsmith: accepted {info['summary']}",
                                             info["sha"], env=self._identity_env()))
            self._record("accept", info["sha"])  # last: the ledger's accept (what counts) only once the ref moved
        return {**info, "tag": tag}

    def changed_paths(self, sha: str) -> list[str]:
        """The paths a (single-parent) commit changed against its parent."""
        return _nul_split(self.git.diff_tree("--no-commit-id", "--name-only", "-z", "-r", "--root", sha, "--"))

    @_action
    def revert(self, rev: str) -> str:
        """A new commit that undoes a kernelsmith commit; refused with the reason when unsafe
        (rules in _revert_refusal). The working files of the reverted paths follow HEAD."""
        with workdir_lock(self.root, "kernelsmith revert"):
            info = self._kernel_commit_on_branch(rev, "revert")
            self._require_branch()
            paths = self.changed_paths(info["sha"])
            reason = self._revert_refusal(info, paths)
            if reason:
                raise BadInput(f"cannot revert {info['sha'][:8]}: {reason}")
            return self._commit_revert(info, paths)

    def _commit_revert(self, info: dict, paths: list[str]) -> str:
        head = self.head_sha()
        tree = self._tree_reverting(info["parents"][0], paths)
        summary = f"kernelsmith: revert {info['sha'][:8]} ({info['summary']})"
        trailers = {TRAILER_SESSION: _session_of(info["trailers"]) or info.get("session", ""),
                    TRAILER_REVERTS: info["sha"]}
        sha = self._commit_tree(tree, head, _message(summary, "", trailers))
        self._record("revert", sha, tree=tree, parents=[head], session=trailers[TRAILER_SESSION],
                     summary=summary, body="", trailers=trailers, time=int(self.repo.commit(sha).committed_date))
        self._advance_branch(sha, head, summary, paths)
        self._checkout_paths(paths)
        return sha

    def _kernel_commit_on_branch(self, rev: str, action: str) -> dict:
        info = self.trusted_commit(rev, action)
        if not self._is_ancestor(info["sha"], self.head_sha()):
            raise BadInput(f"cannot {action} {info['sha'][:8]}: it is not on the current branch")
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
            shared = sorted(set(paths) & set(self.changed_paths(later))) or paths  # a merge lists none
            return f"the later commit {later[:8]} also changes {', '.join(shared)}; revert that one first"
        dirty = self._dirty_among(paths)
        if dirty:
            return f"{', '.join(dirty)} has uncommitted changes that the revert would overwrite; commit or stash them first"
        return ""

    def _later_commit_touching(self, sha: str, paths: list[str]) -> str | None:
        out = self.git.rev_list(f"{sha}..HEAD", "--", *paths)
        later = out.split()
        return later[-1] if later else None  # the oldest one: the first to revert

    def _dirty_among(self, paths: list[str]) -> list[str]:
        """Paths whose index or working copy differs from HEAD, or untracked files in their place
        (compared by content, as stored: git's own comparison would run clean filters)."""
        staged = _nul_split(self.git.diff_index("--cached", "-z", "--name-only", "HEAD", "--", *paths))
        tree, too_big = self._tree_with(paths, refuse_big=False)
        working = _nul_split(self.git.diff_tree("-r", "-z", "--name-only", "HEAD", tree, "--", *paths))
        return sorted(set(staged) | set(working) | {path for path, _ in too_big})

    def _tree_reverting(self, parent: str, paths: list[str]) -> str:
        """HEAD's tree with paths as they were in parent (absent there: removed)."""
        with self._scratch_index() as env:
            self._index_paths_from(parent, paths, env)
            return self.git.write_tree(env=env)

    def _checkout_paths(self, paths: list[str]) -> None:
        """Make the working copies of paths match HEAD (they were clean, so nothing is lost)."""
        tracked = self._tree_entries("HEAD", paths)
        for path, (mode, sha) in tracked.items():
            self._write_working(path, mode, self._object(sha, "blob"))
        for path in set(paths) - set(tracked):
            self._remove_working(path)

    @_action
    def restore_attempt(self, rev: str) -> list[str]:
        """Write an attempt snapshot's model_new.py, kernels/ and notes into the working files;
        HEAD, the branch and the index stay as they are. Kernel files the snapshot lacks are
        removed. Returns the paths written or removed."""
        with workdir_lock(self.root, "kernelsmith review (restore)"):
            sha = self.resolve(rev)
            entry = self._trusted().get(sha)
            if entry is None:
                raise BadInput(f"cannot restore {sha[:8]}: it is not a snapshot or commit that kernelsmith made")
            snapshot = self.verified_files(entry["tree"], KERNEL_ROOTS)
            present = self._working_kernel_files()
            for path, (mode, data) in snapshot.items():
                self._write_working(path, mode, data)
            for path in present - set(snapshot):
                self._remove_working(path)
        return sorted(set(snapshot) | present)

    def _working_kernel_files(self) -> set[str]:
        """Kernel files in the working tree now that a commit would hold (ignored build output stays)."""
        with self._scratch_index() as env:
            candidates = self._candidates(KERNEL_ROOTS, env)
        return {p for p in candidates if (full := self._inside(p)) and os.path.lexists(full) and not full.is_dir()}

    def _write_working(self, path: str, mode: str, data: bytes) -> None:
        """Write one working file as git would check it out: written aside and renamed over what
        is there, and a symlink on the way replaced by a real folder, so nothing lands outside."""
        try:
            target = self._real_parents(path)
            aside = target.with_name(f".{target.name}.kernelsmith-{os.getpid()}")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(aside)
            if mode == "120000":
                os.symlink(os.fsdecode(data), aside)
            else:
                fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o755 if mode == "100755" else 0o644)
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
            os.replace(aside, target)
        except OSError as err:
            raise BadInput(f"cannot write {path} in {self.root}: {err.strerror}") from None

    def _real_parents(self, path: str) -> Path:
        here = self.root
        parts = Path(path).parts
        for part in parts[:-1]:
            here = here / part
            if here.is_symlink():
                here.unlink()
            here.mkdir(exist_ok=True)
        return here / parts[-1]

    def _remove_working(self, path: str) -> None:
        full = self._inside(path)
        if full is not None and (full.is_symlink() or full.is_file()):
            full.unlink()

    def verified_files(self, tree: str, roots) -> dict[str, tuple[str, bytes]]:
        """{path: (mode, content)} of the files under roots in tree, each object checked against
        its hash: git does not check what it reads, and without a jail .git/objects is writable."""
        files: dict[str, tuple[str, bytes]] = {}
        for mode, name, sha in _tree_items(self._object(tree, "tree"), len(tree) // 2):
            if name in roots:
                self._collect(mode, name, sha, files)
        return files

    def _collect(self, mode: str, path: str, sha: str, files: dict) -> None:
        if mode == "40000":
            for child_mode, name, child in _tree_items(self._object(sha, "tree"), len(sha) // 2):
                self._collect(child_mode, f"{path}/{name}", child, files)
        elif mode != "160000":  # a submodule's commit has no content here
            files[path] = (mode, self._object(sha, "blob"))

    def _object(self, sha: str, kind: str) -> bytes:
        try:
            stream = self.repo.odb.stream(bytes.fromhex(sha))
        except (ValueError, git.GitCommandError):
            raise BadInput(f"the {kind} {sha[:8]} is missing from {self.root}") from None
        data = stream.read()
        digest = hashlib.new("sha1" if len(sha) == 40 else "sha256", f"{kind} {len(data)}\0".encode() + data)
        if stream.type != kind.encode() or digest.hexdigest() != sha:
            raise BadInput(f"the {kind} {sha[:8]} in {self.root} does not match its hash",
                           "the repository's objects were tampered with; nothing was read from it")
        return data

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


class _TooBig(Exception):
    def __init__(self, path: str, size: int):
        super().__init__(path)
        self.path, self.size = path, size


def _too_big_line(path: str, size: int) -> str:
    cap = MAX_FILE_BYTES >> 20
    return f"{path} is {size / (1 << 20):.1f} MiB, over the {cap} MiB that kernelsmith commits of one file"


def _read_regular(full: Path, path: str) -> bytes | None:
    """A regular file's bytes, opened without following a symlink (one swapped in since lstat)."""
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise _TooBig(path, len(data))  # it grew since lstat
    return data


def _nul_split(out: str) -> list[str]:
    return [item for item in out.split("\0") if item]


def _tree_items(data: bytes, size: int) -> list[tuple[str, str, str]]:
    """(mode, name, sha) of a raw tree object (size: bytes per object id); a name with "/" or
    ".." would be a way out of the folder it is written to."""
    items, at = [], 0
    while at < len(data):
        space, nul = data.index(b" ", at), data.index(b"\0", at)
        name = os.fsdecode(data[space + 1:nul])
        if name in ("", ".", "..") or "/" in name:
            raise BadInput(f"a tree holds the file name {name!r}", "the repository's objects were tampered with")
        items.append((data[at:space].decode(), name, data[nul + 1:nul + 1 + size].hex()))
        at = nul + 1 + size
    return items


def _body_without(body: str, trailers: dict[str, str]) -> str:
    """A commit body without its trailer block (already in trailers)."""
    paragraphs = body.strip().split("\n\n")
    if trailers and paragraphs and set(parse_trailers(paragraphs[-1])) == set(trailers):
        paragraphs.pop()
    return "\n\n".join(paragraphs).strip()


def _legacy_entry(record: str) -> dict | None:
    """One `git log` record of a workdir from before ledgers as a ledger entry, or None."""
    try:
        sha, tree, parents, summary, time, trailer_text, body = record.lstrip("\n").split(_US, 6)
        time_s = int(time)
    except ValueError:
        return None  # a message that holds our separators: not one of ours
    trailers = parse_trailers(trailer_text)
    session, keys = _session_of(trailers), {key.lower() for key in trailers}
    if session is None:
        return None
    kind = ("attempt" if TRAILER_ATTEMPT.lower() in keys else
            "revert" if TRAILER_REVERTS.lower() in keys else "kernel")
    return {"kind": kind, "sha": sha, "tree": tree, "parents": parents.split(), "session": session,
            "summary": summary, "body": _body_without(body, trailers), "trailers": trailers, "time": time_s,
            "legacy": True}


def _listed(entry: dict) -> dict:
    return {"sha": entry["sha"], "summary": entry["summary"], "trailers": entry["trailers"],
            "time": entry["time"], "legacy": bool(entry.get("legacy"))}


def kernel_row(commit: dict) -> dict:
    """The fields a reviewer wants from a kernel commit's trailers, typed (None when absent)."""
    trailers = {key.lower(): value for key, value in commit["trailers"].items()}
    return {"sha": commit["sha"], "summary": commit["summary"], "session": _session_of(commit["trailers"]),
            "turn": _number(trailers.get("turn"), int), "reward": _number(trailers.get("reward"), float),
            "speedup_vs_eager": _number(trailers.get("speedup-vs-eager", "").rstrip("x"), float),
            "speedup_vs_compile": _number(trailers.get("speedup-vs-compile", "").rstrip("x"), float),
            "reverts": trailers.get(TRAILER_REVERTS.lower()), "legacy": bool(commit.get("legacy"))}


def _number(text: str | None, kind):
    try:
        return kind(text)
    except (TypeError, ValueError):  # "n/a", missing, or someone's hand-written trailer
        return None


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
