"""One optimize session, start or resume: the workdir, the backend, the record, the loop.

Exit codes: 0 when the session has a committed, verified kernel; 1 when it ended without
one; 2 for bad input (raised as BadInput before anything is written).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith import workdir as wd
from kernelsmith.agent.env import KernelEnv
from kernelsmith.agent.loop import Agent
from kernelsmith.agent.progress import Best
from kernelsmith.backends import backend_name, context_window, create_backend
from kernelsmith.backends.base import Backend, TextSink, ToolCall, Usage
from kernelsmith.config import Settings
from kernelsmith.errors import BadInput, KernelsmithError
from kernelsmith.lock import workdir_lock
from kernelsmith.session import reader
from kernelsmith.session.verdict import verdict
from kernelsmith.session.recorder import Listener


@dataclass
class Ending:
    session_id: str
    reason: str
    best: Best | None
    turns: int
    usage: Usage
    elapsed_s: float
    git_changed: list[str] = field(default_factory=list)  # .git/ files that run programs, changed meanwhile

    @property
    def exit_code(self) -> int:
        """0 only for a verified kernel measured faster than eager (progress.verdict)."""
        return 0 if verdict(dataclasses.asdict(self.best) if self.best else None)[0] else 1


def start(settings: Settings, workdir: Path, listeners: list[Listener], on_text: TextSink | None,
          sandbox=None, stop: threading.Event | None = None) -> Ending:
    """A new session in an existing workdir; evaluations go to `sandbox` when given. The session
    holds the workdir's writer lock from before it saves the user's changes to after its end."""
    measure = _measure(settings)
    backend = create_backend(settings, _text(measure))  # a bad key or URL fails here, before anything is written
    wd.WorkdirConfig.load(workdir)
    env = _env(settings, backend, sandbox, listeners, stop, measure)
    env.reset(workdir)
    return _drive(_agent(settings, backend, env, on_text, measure), env)


def resume(settings: Settings, workdir: Path, session: str, listeners: list[Listener],
           on_text: TextSink | None, sandbox=None, stop: threading.Event | None = None) -> Ending:
    """Continue a session after Ctrl-C, a crash or kill -9, from its record alone (and the
    ledger: a best commit kernelsmith did not make is no best). A resumed session writes too."""
    wd.WorkdirConfig.load(workdir)  # not a workdir: that error, not one about its lock
    with workdir_lock(workdir, "kernelsmith optimize --resume"):  # before the record is read; the env keeps it
        state = reader.load_session(reader.find_session(workdir, session))
        if state.end and state.end.get("reason") == "finish":
            raise BadInput(f"session {state.session_id} already finished", hint="start a new one without --resume")
        settings = _resumed_settings(state, settings)
        measure = _measure(settings)
        backend = create_backend(settings, _text(measure))
        backend.skip(state.turn)  # a replayed script goes on where the session stopped
        env = _env(settings, backend, sandbox, listeners, stop, measure)
        env.reset(workdir, resume=state.session_id)
    return _drive(_agent(settings, backend, env, on_text, measure), env)


def _env(settings: Settings, backend: Backend, sandbox, listeners, stop=None, measure=None) -> KernelEnv:
    return KernelEnv(settings, sandbox, listeners, model={"backend": backend.name, "model": backend.model}, stop=stop,
                     window=context_window(backend_name(settings), settings),
                     text_tokens=_text(measure))


def _resumed_settings(state: reader.SessionState, flags: Settings) -> Settings:
    """The recorded settings, with the flags given now on top (e.g. a larger --max-turns)."""
    recorded = {k: v for k, v in state.config.items() if k in Settings.__dataclass_fields__}
    defaults = Settings().public()
    given = {k: v for k, v in flags.public().items() if v != defaults[k]}
    return Settings(**{**recorded, **given})


def _agent(settings: Settings, backend: Backend, env: KernelEnv, on_text: TextSink | None, measure=None) -> Agent:
    backend.bind(env.workdir, env.config.device, env.config.precision)
    return Agent(backend, env, context_window(backend_name(settings), settings), on_text=on_text, measure=measure,
                 reply_tokens=settings.max_tokens)


def _measure(settings: Settings):
    """Requests counted in the tokens of the model whose window it is: the window_tokenizer setting's (train rft:
    the student's, whatever the teacher), else a local hf checkpoint's own; None: estimated."""
    folder = settings.window_tokenizer or (settings.model if backend_name(settings) == "hf" else None)
    if not folder:
        return None
    from kernelsmith.backends.hf import PromptTokens

    return PromptTokens(folder)


def _text(measure):
    return measure.text if measure else None


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a session, raised once its end is recorded: it knows the command that continues it."""

    def __init__(self, session_id: str, workdir: Path):
        super().__init__(session_id)
        self.session_id, self.workdir = session_id, workdir

    @property
    def resume_command(self) -> str:
        import shlex

        return f"kernelsmith optimize --resume {self.session_id} --workdir {shlex.quote(str(self.workdir))}"


def _drive(agent: Agent, env: KernelEnv) -> Ending:
    """Run the loop and always close the env (also on Ctrl-C and on errors): it records how the
    session ended, with the files in .git/ that run programs and changed during it. A resumed
    session's pending tool calls run first."""
    reason = "error"
    try:
        if env.pending:
            env.step_all([ToolCall(**c) for c in env.pending])
        reason = "finish" if env.reason == "finish" else agent.run()
    except KeyboardInterrupt as stop:
        reason = "interrupted"
        raise Interrupted(env.session_id, env.workdir) from stop
    except KernelsmithError as err:  # e.g. the backend: recorded, then shown as one line by the CLI
        env.recorder.emit("error", turn=env.turn, message=str(err))
        raise
    finally:
        changed = env.close(reason)
    return Ending(env.session_id, reason, env.progress.best, env.turn, env.usage, env.elapsed(), changed)


def prepare_workdir(task: str | None, workdir: Path | None, device: str, precision: str,
                    inputs: list[str], init_args: str | None) -> Path:
    """An existing workdir as is, or a new one laid out from the task."""
    from kernelsmith import task as task_mod

    if workdir is not None and (workdir / wd.STATE_DIR / "config.json").is_file():
        return workdir.resolve()
    if task is None:
        raise BadInput("give a TASK file, or --workdir of an existing workdir")
    source = task_mod.load_task(task, inputs, init_args)
    target = workdir or Path(f"kernelsmith-{Path(task.split(':')[0]).stem}")
    try:
        wd.create(source, target, device, precision)
    except OSError as err:  # read-only, not a directory, no permission, disk full: the user's to fix
        raise BadInput(f"cannot create the workdir {target}: {err.strerror or err}",
                       "give a --workdir in a folder you can write") from None
    return target.resolve()
