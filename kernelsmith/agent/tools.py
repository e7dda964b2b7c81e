"""The tools the agent sees. Names and arguments are a contract (DESIGN.md): sessions, the
TUI and the trainer depend on them.

Each tool is a typed method; its JSON schema is derived from the signature and docstring,
as llm's Tool.function does. A tool never raises: a refusal or a failure is a result the
model can read and act on.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from kernelsmith import workdir as wd
from kernelsmith.agent.evaluator import Evaluator, format_build, format_eval
from kernelsmith.backends.base import ToolCall, ToolSpec
from kernelsmith.sandbox import jail

TOOL_NAMES = ("read_file", "write_file", "edit_file", "list_files", "grep", "bash",
              "compile", "verify", "profile", "finish")
MAX_OUTPUT = 12_000  # characters of a tool result shown to the model
HIDDEN = (".git", wd.STATE_DIR, "__pycache__", "build")
# a bash call may write files of at most 256 MiB and run 256 processes, in half the memory
BASH_LIMITS = jail.Limits(file_bytes=256 << 20, processes=256, memory_bytes=jail.physical_memory() // 2)
JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass
class Outcome:
    content: str
    ok: bool = True
    eval: dict[str, Any] | None = None  # the EvalResult of verify/profile, the build of compile
    finish: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def spec_of(method) -> ToolSpec:
    """A tool's schema from its signature; `Args:` lines of the docstring describe parameters."""
    doc = inspect.getdoc(method) or ""
    summary, _, args_doc = doc.partition("Args:")
    described = dict(re.findall(r"^\s*(\w+):\s*(.+)$", args_doc, re.MULTILINE))
    hints = get_type_hints(method)
    props, required = {}, []
    for name, param in inspect.signature(method).parameters.items():
        props[name] = {"type": JSON_TYPES[hints[name]], "description": described.get(name, "")}
        if param.default is inspect.Parameter.empty:
            required.append(name)
    schema = {"type": "object", "properties": props, "required": required}
    return ToolSpec(name=method.__name__, description=" ".join(summary.split()), parameters=schema)


def clip(text: str, limit: int = MAX_OUTPUT) -> str:
    """Head and tail of a long output: errors tend to be at either end."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


class Toolbox:
    def __init__(self, workdir: Path, evaluator: Evaluator, bash_timeout_s: float = 120.0):
        self.workdir = Path(workdir).resolve()
        self.evaluator = evaluator
        self.bash_timeout_s = bash_timeout_s

    def specs(self) -> list[ToolSpec]:
        return [spec_of(getattr(self, name)) for name in TOOL_NAMES]

    def run(self, call: ToolCall) -> Outcome:
        if call.name not in TOOL_NAMES:
            return Outcome(f"error: no tool named {call.name!r}; the tools are {', '.join(TOOL_NAMES)}", ok=False)
        method = getattr(self, call.name)
        try:
            inspect.signature(method).bind(**call.arguments)
        except TypeError as err:
            return Outcome(f"error: bad arguments for {call.name}: {err}", ok=False)
        try:
            result = method(**call.arguments)
        except Exception as err:  # a tool bug must not end the session; the model sees it
            return Outcome(f"error: {call.name} failed: {type(err).__name__}: {err}", ok=False)
        return result if isinstance(result, Outcome) else Outcome(result)

    # --- paths ------------------------------------------------------------------------

    def _resolve(self, path: str) -> Path | None:
        """The path inside the workdir, or None when it escapes it (.., absolute, symlinks)."""
        target = (self.workdir / path).resolve()
        if target != self.workdir and self.workdir not in target.parents:
            return None
        rel = target.relative_to(self.workdir).parts
        return None if rel and rel[0] in (".git", wd.STATE_DIR) else target

    def _refuse_write(self, path: str) -> Outcome | None:
        target = self._resolve(path)
        if target is None or not wd.is_writable(str(target.relative_to(self.workdir))):
            return Outcome(f"refused: {path} is not writable. You may write only model_new.py, files "
                           "under kernels/ and notes.md; model.py and the harness files are fixed.", ok=False)
        return None

    # --- file tools -------------------------------------------------------------------

    def read_file(self, path: str) -> Outcome:
        """Read a text file of the workdir.

        Args:
            path: path relative to the workdir, e.g. model.py or kernels/example_scale.cu
        """
        target = self._resolve(path)
        if target is None:
            return Outcome(f"refused: {path} is outside the workdir", ok=False)
        if not target.is_file():
            return Outcome(f"error: {path} does not exist (list_files shows what does)", ok=False)
        return Outcome(clip(target.read_text(errors="replace")))

    def write_file(self, path: str, content: str, append: bool = False) -> Outcome:
        """Create or overwrite a file, or add to its end: a file too long for one reply is written in parts.
        Only model_new.py, kernels/... and notes.md are writable.

        Args:
            path: path relative to the workdir
            content: the whole new text of the file, or with append the text that follows its end
            append: true to add content to the end of the existing file (its next part)
        """
        if not isinstance(append, bool):  # a model's "false" must not append
            return Outcome(f"error: append must be true or false, not {append!r}", ok=False)
        refused = self._refuse_write(path) or (self._missing(path) if append else None)
        if refused:
            return refused
        target = self.workdir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if append:
            with target.open("a") as file:
                file.write(content)
            return Outcome(f"appended to {path} (now {len(target.read_text().splitlines())} lines)")
        target.write_text(content)
        return Outcome(f"wrote {path} ({len(content.splitlines())} lines)")

    def edit_file(self, path: str, old: str, new: str) -> Outcome:
        """Replace one exact occurrence of `old` with `new` in a writable file.

        Args:
            path: path relative to the workdir
            old: the exact text to replace; it must occur exactly once
            new: the replacement text
        """
        refused = self._refuse_write(path) or self._missing(path)
        if refused:
            return refused
        target = self.workdir / path
        text = target.read_text()
        count = text.count(old) if old else 0
        if count != 1:
            return Outcome(f"error: `old` occurs {count} times in {path}; it must occur exactly once "
                           "(include more surrounding lines)", ok=False)
        target.write_text(text.replace(old, new, 1))
        return Outcome(f"edited {path}")

    def _missing(self, path: str) -> Outcome | None:
        if not (self.workdir / path).is_file():
            return Outcome(f"error: {path} does not exist", ok=False)
        return None

    def list_files(self, path: str = ".") -> Outcome:
        """List the files under a folder of the workdir, with sizes.

        Args:
            path: folder relative to the workdir (default: the workdir itself)
        """
        root = self._resolve(path)
        if root is None or not root.is_dir():
            return Outcome(f"error: {path} is not a folder of the workdir", ok=False)
        lines = []
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in HIDDEN)
            for name in sorted(files):
                full = Path(dirpath) / name
                lines.append(f"{full.relative_to(self.workdir)}  ({full.stat().st_size} bytes)")
        return Outcome(clip("\n".join(lines) or "(empty)"))

    def grep(self, pattern: str, path: str = ".") -> Outcome:
        """Search files of the workdir for a regular expression; prints file:line: text.

        Args:
            pattern: a Python regular expression
            path: a file or folder relative to the workdir (default: the workdir)
        """
        root = self._resolve(path)
        if root is None or not root.exists():
            return Outcome(f"error: {path} is not in the workdir", ok=False)
        try:
            regex = re.compile(pattern)
        except re.error as err:
            return Outcome(f"error: bad pattern: {err}", ok=False)
        hits = [hit for file in self._files_under(root) for hit in self._grep_file(regex, file)]
        return Outcome(clip("\n".join(hits[:500]) or "no matches"))

    def _files_under(self, root: Path):
        """Files under root that are the workdir's own: a symlink is read only when it points
        inside the workdir (and not into .git or .kernelsmith)."""
        if root.is_file():
            yield root
            return
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in HIDDEN)
            for name in sorted(files):
                path = Path(dirpath) / name
                if not path.is_symlink() or self._resolve(str(path.relative_to(self.workdir))) is not None:
                    yield path

    def _grep_file(self, regex, file: Path) -> list[str]:
        try:
            lines = file.read_text().splitlines()
        except (UnicodeDecodeError, OSError):
            return []
        rel = file.relative_to(self.workdir)
        return [f"{rel}:{n}: {line}" for n, line in enumerate(lines, start=1) if regex.search(line)]

    # --- shell ------------------------------------------------------------------------

    def bash(self, command: str) -> Outcome:
        """Run a shell command in the workdir, in a jail: only model_new.py, kernels/, notes.md and a
        private /tmp are writable; no network, no GPU; nothing it starts outlives the call (timeout).

        Args:
            command: a bash command line
        """
        argv = jail.wrap(["bash", "-c", command], self._bash_jail()) if jail.status().jailed \
            else network_isolation() + ["bash", "-c", command]
        proc = subprocess.Popen(argv, cwd=self.workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=jail.preexec(BASH_LIMITS))
        # Wait for bash itself, not for the end of its output: a background child that keeps the
        # pipe open (`server &`) must neither hold the call until the timeout nor past it.
        chunks: list[bytes] = []
        reader = threading.Thread(target=_drain, args=(proc.stdout, chunks), daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=self.bash_timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc)  # background children left behind die with the group
        reader.join(timeout=2.0)  # a process that left the group (setsid) may still hold the pipe
        out = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")
        if timed_out:
            return Outcome(clip(f"{out}\n[killed: the command ran past {self.bash_timeout_s:g} s]"), ok=False)
        return Outcome(clip(f"{out}\n[exit code {proc.returncode}]"), ok=proc.returncode == 0)

    def _bash_jail(self) -> jail.JailSpec:
        """The writable paths must exist to be bound: an empty notes.md is made on first use."""
        (self.workdir / "kernels").mkdir(exist_ok=True)
        for name in ("model_new.py", "notes.md"):
            (self.workdir / name).touch(exist_ok=True)
        writable = tuple(str(self.workdir / p) for p in ("model_new.py", "kernels", "notes.md"))
        return jail.JailSpec(readable=(str(self.workdir),), writable=writable, hidden=jail.user_secret_dirs(),
                             cwd=str(self.workdir))

    # --- harness ----------------------------------------------------------------------

    def compile(self) -> Outcome:
        """Build kernels/ (incremental). Errors come back summarised with file:line."""
        built = self.evaluator.compile()
        return Outcome(format_build(built), ok=bool(built.get("ok")), eval={"build": built})

    def verify(self) -> Outcome:
        """Build, then check ModelNew against the reference on fresh inputs and weights."""
        result = self.evaluator.verify()
        return Outcome(format_eval(result, "verify"), ok=result.clean, eval=result.to_dict())

    def profile(self) -> Outcome:
        """Verify, then time ModelNew against PyTorch eager and torch.compile on this device."""
        result = self.evaluator.profile()
        return Outcome(format_eval(result, "profile"), ok=result.clean, eval=result.to_dict())

    def finish(self, summary: str) -> Outcome:
        """End the session.

        Args:
            summary: what you built, and its measured speed-up
        """
        return Outcome("session finished", finish=True, extra={"summary": summary})


def _drain(stream, chunks: list[bytes]) -> None:
    for chunk in iter(lambda: stream.read1(65536), b""):
        chunks.append(chunk)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_ISOLATION: list[str] | None = None


def network_isolation() -> list[str]:
    """`unshare -rn` (a new, empty network namespace) when this OS allows it unprivileged: what
    is left of the jail where bubblewrap cannot run. Checked once per process."""
    global _ISOLATION
    if _ISOLATION is None:
        _ISOLATION = []
        if shutil.which("unshare"):
            probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
            _ISOLATION = ["unshare", "-rn"] if probe.returncode == 0 else []
    return list(_ISOLATION)
