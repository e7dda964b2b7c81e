"""One optimize session, start or resume: the workdir, the backend, the record, the loop.

Exit codes: 0 when the session has a committed, verified kernel; 1 when it ended without
one; 2 for bad input (raised as BadInput before anything is written).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith import workdir as wd
from kernelsmith.agent.loop import NUDGE, Agent, Budget
from kernelsmith.agent.progress import Best, Progress
from kernelsmith.agent.tools import Toolbox
from kernelsmith.backends import backend_name, context_window, create_backend
from kernelsmith.backends.base import TextSink, Usage
from kernelsmith.config import Settings
from kernelsmith.errors import BadInput, KernelsmithError
from kernelsmith.evaluation.options import EvalOptions
from kernelsmith.gitops import KernelRepo
from kernelsmith.lock import workdir_lock
from kernelsmith.sandbox.base import SandboxEvaluator
from kernelsmith.session import reader
from kernelsmith.session.recorder import Listener, Recorder, new_session_id


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
        return 0 if self.best is not None else 1


def system_prompt(workdir: Path, config: wd.WorkdirConfig) -> str:
    skill = (workdir / "SKILL.md").read_text()
    device_name = "CUDA" if config.device == "cuda" else "C++ (CPU)"
    return wd.packaged_text("prompts", "system.md").format(device_name=device_name, skill=skill)


def task_prompt(workdir: Path, config: wd.WorkdirConfig, budget: Budget) -> str:
    files = "\n".join(f"- {p}" for p in wd.workdir_files(workdir))
    template = wd.packaged_text("prompts", "task.md")
    return template.format(task_name=config.task, device=config.device, precision=config.precision,
                           reference=(workdir / "model.py").read_text(), files=files,
                           budget=budget.line(0, 0.0, 0.0).removeprefix("[budget] "))


def budget_of(settings: Settings) -> Budget:
    timeout = settings.timeout_min * 60 if settings.timeout_min else None
    return Budget(settings.max_turns, settings.max_cost, timeout)


def eval_options(settings: Settings, config: wd.WorkdirConfig) -> EvalOptions:
    cache = Path(settings.baselines_cache).expanduser().resolve() if settings.baselines_cache else None
    return EvalOptions(device=config.device, precision=config.precision, trials=settings.trials, cache_path=cache)


def start(settings: Settings, workdir: Path, listeners: list[Listener], on_text: TextSink | None,
          sandbox=None) -> Ending:
    """A new session in an existing workdir; evaluations go to `sandbox` when given. The session
    holds the workdir's writer lock from before it saves the user's changes to after its end."""
    backend = create_backend(settings)  # a bad key or URL fails here, before anything is written
    config = wd.WorkdirConfig.load(workdir)
    with workdir_lock(workdir, "kernelsmith optimize"):
        return _start(settings, workdir, listeners, on_text, sandbox, backend, config)


def _start(settings, workdir, listeners, on_text, sandbox, backend, config) -> Ending:
    session_id = new_session_id()
    repo = KernelRepo(workdir)
    saved = repo.save_user_changes(session_id)
    surface = repo.git_exec_surface()
    recorder = Recorder(workdir, session_id, listeners)
    budget = budget_of(settings)
    system, first = system_prompt(workdir, config), {"role": "user", "content": task_prompt(workdir, config, budget)}
    recorder.emit("session_start", session_id=session_id, workdir=str(workdir), task=config.task, system=system,
                  config={**settings.public(), "backend": backend.name, "model": backend.model,
                          "device": config.device, "precision": config.precision},
                  messages=[first], user_changes_commit=saved, head=repo.head_sha())
    agent = _agent(settings, workdir, config, backend, recorder, Progress(repo, recorder, settings.noise),
                   system, [first], on_text, sandbox=sandbox)
    return _drive(agent, recorder, surface=surface)


def resume(settings: Settings, workdir: Path, session: str, listeners: list[Listener],
           on_text: TextSink | None, sandbox=None) -> Ending:
    """Continue a session after Ctrl-C, a crash or kill -9, from its record alone (and the
    ledger: a best commit kernelsmith did not make is no best). A resumed session writes too."""
    wd.WorkdirConfig.load(workdir)  # not a workdir: that error, not one about its lock
    with workdir_lock(workdir, "kernelsmith optimize --resume"):
        return _resume(settings, workdir, session, listeners, on_text, sandbox)


def _resume(settings, workdir, session, listeners, on_text, sandbox) -> Ending:
    path = reader.find_session(workdir, session)
    state = reader.load_session(path)
    if state.end and state.end.get("reason") == "finish":
        raise BadInput(f"session {state.session_id} already finished", hint="start a new one without --resume")
    settings = _resumed_settings(state, settings)
    backend = create_backend(settings)
    if hasattr(backend, "skip"):
        backend.skip(state.turn)  # a replayed script goes on where the session stopped
    config = wd.WorkdirConfig.load(workdir)
    recorder = Recorder(workdir, state.session_id, listeners)
    pending = state.pending_tool_calls()
    recorder.emit("resume", from_turn=state.turn, pending_tool_calls=pending)
    repo = KernelRepo(workdir)
    repo.start_ledger()  # a workdir from before ledgers: adopt its commits before the agent runs again
    surface = repo.git_exec_surface()
    progress = Progress(repo, recorder, settings.noise, _best_of(state, repo), state.attempts)
    agent = _agent(settings, workdir, config, backend, recorder, progress, state.system, state.messages, on_text,
                   turn=state.turn, usage=Usage(**{k: v for k, v in state.usage.items() if k in Usage.__dataclass_fields__}),
                   elapsed_before_s=state.elapsed_s, sandbox=sandbox)
    last = agent.messages[-1] if agent.messages else {}
    if last.get("role") == "assistant" and not last.get("tool_calls"):
        agent.add_user_message(NUDGE)  # killed before the nudge that follows a reply without tool calls
    return _drive(agent, recorder, pending, surface)


def _resumed_settings(state: reader.SessionState, flags: Settings) -> Settings:
    """The recorded settings, with the flags given now on top (e.g. a larger --max-turns)."""
    recorded = {k: v for k, v in state.config.items() if k in Settings.__dataclass_fields__}
    defaults = Settings().public()
    given = {k: v for k, v in flags.public().items() if v != defaults[k]}
    return Settings(**{**recorded, **given})


def _best_of(state: reader.SessionState, repo: KernelRepo) -> Best | None:
    b = state.best
    if not b or not repo.is_kernel_commit(b["sha"]):
        return None
    return Best(b["sha"], b["turn"], b["speedup_vs_eager"], b["speedup_vs_compile"], b["reward"])


def _agent(settings, workdir, config, backend, recorder, progress, system, messages, on_text, sandbox=None,
           **state) -> Agent:
    opts = eval_options(settings, config)
    toolbox = Toolbox(workdir, SandboxEvaluator(sandbox or _local_sandbox(config.device), workdir, opts),
                      settings.bash_timeout_s)
    if hasattr(backend, "bind"):  # the built-in policy reads the task from the workdir
        backend.bind(workdir, config.device, config.precision)
    window = context_window(backend_name(settings), settings)
    return Agent(backend, toolbox, progress, recorder, system, list(messages), budget_of(settings), window,
                 on_text=on_text, **state)


def _local_sandbox(device: str):
    """A session on its own evaluates on this machine: one evaluation per GPU at a time."""
    from kernelsmith.sandbox.local import LocalSandbox

    return LocalSandbox(device)


def _drive(agent: Agent, recorder: Recorder, pending: list[dict] | None = None,
           surface: dict[str, str] | None = None) -> Ending:
    """Run the loop and always record how it ended (also on Ctrl-C and on errors), with the
    files in .git/ that run programs and changed during the session (surface: before)."""
    reason, changed = "error", []
    try:
        if pending:
            from kernelsmith.backends.base import ToolCall

            if agent.run_calls([ToolCall(**c) for c in pending]):
                reason = "finish"
        reason = reason if reason == "finish" else agent.run()
    except KeyboardInterrupt:
        reason = "interrupted"
        raise
    except KernelsmithError as err:  # e.g. the backend: recorded, then shown as one line by the CLI
        recorder.emit("error", turn=agent.turn, message=str(err))
        raise
    finally:
        changed = agent.progress.repo.git_exec_changes(surface) if surface is not None else []
        _end(agent, recorder, reason, changed)
    return Ending(recorder.session_id, reason, agent.progress.best, agent.turn, agent.usage, agent.elapsed(), changed)


def _end(agent: Agent, recorder: Recorder, reason: str, git_changed: list[str]) -> None:
    best = agent.progress.best
    summary = {"best": best.__dict__ if best else None, "turns": agent.turn, "attempts": agent.progress.attempts,
               "usage": agent.usage.to_dict(), "elapsed_s": round(agent.elapsed(), 1), "finish_summary": agent.summary,
               "git_changed": git_changed}
    recorder.emit("session_end", turn=agent.turn, reason=reason, summary=summary)
    recorder.close()


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
    wd.create(source, target, device, precision)
    return target.resolve()
