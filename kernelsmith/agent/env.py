"""KernelEnv: the one seam between a policy and a kernelsmith workdir.

The optimize loop, bench and the trainer drive a session the same way:

    env = KernelEnv(settings, sandbox)
    obs = env.reset(workdir=path)            # lays out or reopens the workdir; obs.text is the task
    while not obs.done:
        reply = policy(env.system, env.messages, env.specs)
        env.model_turn(reply)                 # counts the turn and its usage against the budget
        for call in reply.tool_calls:
            obs = env.step(call)              # the tool's text, the structured part, reward, done
    env.close()                               # records the end, releases the workdir

An observation carries the text the model reads and a structured part (the EvalResult of
verify/profile, the build of compile, the budget, the best kernel so far), so no policy has to
read verdicts back out of text. Tool messages keep the structured part under "observation";
backends send only the text. docs/env.md has the contract.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernelsmith import workdir as wd
from kernelsmith.agent import context
from kernelsmith.agent.progress import Best, Progress
from kernelsmith.agent.tools import Outcome, Toolbox
from kernelsmith.backends.base import Reply, ToolCall, Usage
from kernelsmith.config import Settings
from kernelsmith.evaluation import runner
from kernelsmith.evaluation.options import EvalOptions
from kernelsmith.gitops import KernelRepo
from kernelsmith.lock import workdir_lock
from kernelsmith.sandbox.base import SandboxEvaluator
from kernelsmith.session import reader
from kernelsmith.session.recorder import Listener, Recorder, new_session_id

NUDGE = "Use a tool to continue, or call finish(summary) to end the session."
NO_REWARD = 0.0  # a step that evaluates nothing


@dataclass
class Budget:
    max_turns: int = 200
    max_cost: float | None = None
    timeout_s: float | None = None

    def exhausted(self, turn: int, cost: float, elapsed_s: float) -> str:
        if turn >= self.max_turns:
            return "max_turns"
        if self.max_cost is not None and cost >= self.max_cost:
            return "max_cost"
        if self.timeout_s is not None and elapsed_s >= self.timeout_s:
            return "timeout"
        return ""

    def line(self, turn: int, cost: float, elapsed_s: float) -> str:
        parts = [f"turn {turn} of {self.max_turns}"]
        if self.max_cost is not None:
            parts.append(f"cost ${cost:.2f} of ${self.max_cost:.2f}")
        if self.timeout_s is not None:
            parts.append(f"{max(self.timeout_s - elapsed_s, 0) / 60:.0f} min of {self.timeout_s / 60:.0f} left")
        return "[budget] " + "; ".join(parts)

    def state(self, turn: int, cost: float, elapsed_s: float) -> dict[str, Any]:
        return {"turn": turn, "max_turns": self.max_turns, "turns_left": max(self.max_turns - turn, 0),
                "cost_usd": round(cost, 6), "max_cost": self.max_cost, "elapsed_s": round(elapsed_s, 3),
                "timeout_s": self.timeout_s}


@dataclass
class Observation:
    text: str  # what the model reads
    tool: str = ""
    tool_call_id: str = ""
    ok: bool = True
    eval: dict[str, Any] | None = None  # the EvalResult of verify/profile, as a dict
    build: dict[str, Any] | None = None  # the build of compile (verify/profile carry theirs in eval)
    budget: dict[str, Any] = field(default_factory=dict)
    best: dict[str, Any] | None = None
    reward: float = NO_REWARD  # this step's milestone reward: the eval's, else 0
    done: bool = False
    reason: str = ""  # why the session is done: finish, max_turns, max_cost, timeout
    final_reward: float | None = None  # once done: the best kernel's reward, -1 without one
    seconds: float = 0.0

    def structured(self) -> dict[str, Any]:
        """The structured part without the text: what a policy reads instead of parsing it."""
        return {k: v for k, v in asdict(self).items() if k != "text"}

    def compact(self) -> dict[str, Any]:
        """The structured part as the history and the session record keep it: the verdict, the
        numbers and the build's summary (the whole EvalResult is the record's eval_result event)."""
        kept = self.structured()
        kept["eval"] = _compact_eval(self.eval) if self.eval is not None else None
        kept["build"] = _compact_build(self.build) if self.build is not None else None
        return kept

    def message(self) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": self.tool_call_id, "name": self.tool, "content": self.text,
                "observation": self.compact()}


def budget_of(settings: Settings) -> Budget:
    timeout = settings.timeout_min * 60 if settings.timeout_min else None
    return Budget(settings.max_turns, settings.max_cost, timeout)


def eval_options(settings: Settings, config: wd.WorkdirConfig) -> EvalOptions:
    cache = Path(settings.baselines_cache).expanduser().resolve() if settings.baselines_cache else None
    # spare workers on a GPU only: on the CPU a spare started after an evaluation would import torch on the
    # cores of another session's timed runs. A verify's profile spares import while the verify holds the
    # CPU's evaluation slot (one per machine), so a session's profile skips its workers' imports there too
    return EvalOptions(device=config.device, precision=config.precision, trials=settings.trials, cache_path=cache,
                       spare_workers=config.device == "cuda", profile_spares=True)


# A model with a small window (SmolLM2-135M: 8,192 positions; the CUDA guide alone is about 11,000 of its tokens) gets
# the guide up to its optimisation playbook, or where even that is too long its brief (skills/<device>/BRIEF.md), and
# reads the rest from SKILL.md when it needs it
PLAYBOOK = re.compile(r"\n## \d+\. Optimisation playbook")
PLAYBOOK_POINTER = ("\n(The optimisation playbook, the rest of this guide, is in SKILL.md in the workdir: "
                    "read_file it when you need it. Your context window is too small to hold it here.)\n")
BRIEF_POINTER = ("\n(The whole guide, with the rules in detail and the optimisation playbook, is in SKILL.md in the "
                 "workdir: read_file it when you need it. Your context window is too small to hold it here.)\n")


def system_prompt(workdir: Path, config: wd.WorkdirConfig, window: int | None = None,
                  text_tokens: Callable[[str], int] | None = None, fixed: str = "") -> str:
    """The system prompt: the rules and the workdir's guide, as much of it as leaves the request's fixed part (with
    `fixed`, what else every request holds: the task, the tools) within half of a `window` of tokens (counted by
    `text_tokens`, else estimated): the whole guide, the guide without its playbook, else its brief. Compaction
    aims for half the window: a prefix past it would be compacted to at every turn."""
    skill = (workdir / "SKILL.md").read_text()
    if window:
        count = text_tokens or (lambda text: len(text) // context.CHARS_PER_TOKEN)
        rest = count(fixed) if fixed else 0
        guides = _guides(skill, config)
        skill = next((g for g in guides if count(g) + rest <= window // 2), guides[-1])
    device_name = "CUDA" if config.device == "cuda" else "C++ (CPU)"
    return wd.packaged_text("prompts", "system.md").format(device_name=device_name, skill=skill)


def _guides(skill: str, config: wd.WorkdirConfig) -> list[str]:
    """The workdir's guide, then shorter forms of it, longest first."""
    playbook = PLAYBOOK.search(skill)
    shorter = [skill[:playbook.start()] + PLAYBOOK_POINTER] if playbook else []
    return [skill, *shorter, wd.render_skill(config.device, config.task, config.precision, "BRIEF.md") + BRIEF_POINTER]


def task_prompt(workdir: Path, config: wd.WorkdirConfig, budget: Budget) -> str:
    files = "\n".join(f"- {p}" for p in wd.workdir_files(workdir))
    template = wd.packaged_text("prompts", "task.md")
    return template.format(task_name=config.task, device=config.device, precision=config.precision,
                           reference=(workdir / "model.py").read_text(), files=files,
                           budget=budget.line(0, 0.0, 0.0).removeprefix("[budget] "))


class KernelEnv:
    """One session in one workdir: reset, then model_turn and step until done, then close."""

    def __init__(self, settings: Settings, sandbox=None, listeners: list[Listener] | None = None,
                 model: dict[str, str] | None = None, stop: threading.Event | None = None,
                 window: int | None = None, text_tokens: Callable[[str], int] | None = None):
        self.settings, self.sandbox, self.listeners = settings, sandbox, list(listeners or [])
        self.window = window  # the policy's context window in tokens (None: large enough for the whole guide)
        self.text_tokens = text_tokens  # a text's length in the window's own tokens (None: estimated)
        self.stop = stop  # set by a fleet that was interrupted: the session ends at its next turn
        self.model_info = model or {}  # backend and model names for the session record
        self.budget = budget_of(settings)
        self.turn, self.usage, self.elapsed_before_s = 0, Usage(), 0.0
        self.messages: list[dict] = []
        self.pending: list[dict] = []  # tool calls a killed session had not run (resume)
        self.done, self.reason = False, ""
        self._exit = contextlib.ExitStack()

    # -- reset ------------------------------------------------------------------------------------

    def reset(self, workdir: Path, resume: str | None = None, command: str = "kernelsmith optimize") -> Observation:
        """Open workdir (a kernelsmith workdir) for a new session, or for the recorded session `resume`.
        Holds the workdir's writer lock until close()."""
        self.workdir = Path(workdir).resolve()
        self.config = wd.WorkdirConfig.load(self.workdir)
        self._exit.enter_context(workdir_lock(self.workdir, command + (" --resume" if resume else "")))
        try:
            return self._resume(resume) if resume else self._start()
        except BaseException:
            self._exit.close()
            raise

    def _start(self) -> Observation:
        self.repo = KernelRepo(self.workdir)
        session_id = new_session_id()
        saved = self.repo.save_user_changes(session_id)
        self.surface = self.repo.git_exec_surface()
        self.recorder = Recorder(self.workdir, session_id, self.listeners)
        first = {"role": "user", "content": task_prompt(self.workdir, self.config, self.budget)}
        tools = [asdict(spec) for spec in Toolbox(self.workdir, evaluator=None).specs()]
        self.system = system_prompt(self.workdir, self.config, self.window, self.text_tokens,
                                    fixed=first["content"] + json.dumps(tools))
        self.recorder.emit("session_start", session_id=session_id, workdir=str(self.workdir), task=self.config.task,
                           system=self.system, config={**self.settings.public(), **self.model_info,
                                                       "device": self.config.device, "precision": self.config.precision},
                           messages=[first], user_changes_commit=saved, head=self.repo.head_sha(),
                           tools=tools)
        self._open(Progress(self.repo, self.recorder, self.settings.noise), [first])
        return self._observe(first["content"])

    def _resume(self, session: str) -> Observation:
        state = reader.load_session(reader.find_session(self.workdir, session))
        self.repo = KernelRepo(self.workdir)
        self.repo.start_ledger()  # a workdir from before ledgers: adopt its commits before the agent runs again
        self.surface = self.repo.git_exec_surface()
        self.recorder = Recorder(self.workdir, state.session_id, self.listeners)
        self.pending = state.pending_tool_calls()
        self.recorder.emit("resume", from_turn=state.turn, pending_tool_calls=self.pending)
        self.system, self.turn, self.elapsed_before_s = state.system, state.turn, state.elapsed_s
        self.usage = Usage(**{k: v for k, v in state.usage.items() if k in Usage.__dataclass_fields__})
        self._open(Progress(self.repo, self.recorder, self.settings.noise, _best_of(state, self.repo), state.attempts),
                   state.messages)
        last = self.messages[-1] if self.messages else {}
        if last.get("role") == "assistant" and not last.get("tool_calls"):
            self.add_user_message(NUDGE)  # killed before the nudge that follows a reply without tool calls
        return self._observe("resumed at turn " + str(self.turn))

    def _open(self, progress: Progress, messages: list[dict]) -> None:
        self.progress, self.messages, self.started = progress, list(messages), time.monotonic()
        sandbox, opts = self.sandbox or _local_sandbox(self.config.device), eval_options(self.settings, self.config)
        # the baselines and the op watch now, on the evaluation slot, while the policy writes its first kernel
        self.warmup = sandbox.warm_baselines(self.workdir, opts) if self.settings.warm_baselines else None
        self.toolbox = Toolbox(self.workdir, SandboxEvaluator(sandbox, self.workdir, opts), self.settings.bash_timeout_s)
        self.specs = self.toolbox.specs()

    # -- steps ------------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self.recorder.session_id

    def elapsed(self) -> float:
        return self.elapsed_before_s + time.monotonic() - self.started

    def exhausted(self) -> str:
        """Why the budget is spent, or why the session must stop ("" while it goes on)."""
        if self.stop is not None and self.stop.is_set():
            return "interrupted"
        return self.budget.exhausted(self.turn, self.usage.cost_usd, self.elapsed())

    def budget_line(self) -> str:
        return self.budget.line(self.turn, self.usage.cost_usd, self.elapsed())

    def model_turn(self, reply: Reply) -> None:
        """Count a model call against the budget and record it; its message joins the history."""
        self.turn += 1
        self.usage.add(reply.usage)
        self.messages.append(reply.as_message())
        self.recorder.emit("model_turn", turn=self.turn, message=reply.as_message(), usage=reply.usage.to_dict(),
                           stop_reason=reply.stop_reason, model=reply.model)
        if not reply.tool_calls:
            self.add_user_message(NUDGE)

    def step(self, call: ToolCall, last: bool = True) -> Observation:
        """Run one tool call. last: the turn's last call, whose text ends with the budget line."""
        if self.done:
            return self._finish_step(call, Outcome("skipped: the session finished before this call", ok=False), 0.0,
                                     last)
        started = time.monotonic()
        outcome = self.progress.after_tool(call, self.toolbox.run(call), self.turn)
        return self._finish_step(call, outcome, time.monotonic() - started, last)

    def step_all(self, calls: list[ToolCall]) -> list[Observation]:
        return [self.step(call, last=i == len(calls) - 1) for i, call in enumerate(calls)]

    def _finish_step(self, call: ToolCall, outcome: Outcome, seconds: float, last: bool) -> Observation:
        if outcome.finish:
            self.done, self.reason = True, "finish"
            self.summary = outcome.extra.get("summary", "")
        if last:
            outcome.content += "\n" + self.budget_line()
            spent = self.exhausted()
            if spent and not self.done:  # after the turn's last call: every call of it runs
                self.done, self.reason = True, spent
        obs = self._observe(outcome.content, call, outcome, seconds)
        self.messages.append(obs.message())
        self.recorder.emit("tool_result", turn=self.turn, tool_call_id=call.id, name=call.name, ok=outcome.ok,
                           content=outcome.content, seconds=round(seconds, 3), observation=obs.compact())
        return obs

    def _observe(self, text: str, call: ToolCall | None = None, outcome: Outcome | None = None,
                 seconds: float = 0.0) -> Observation:
        result = (outcome.eval if outcome else None) or {}
        is_eval = call is not None and call.name in ("verify", "profile") and "reward" in result
        best = self.progress.best
        return Observation(text=text, tool=call.name if call else "", tool_call_id=call.id if call else "",
                           ok=outcome.ok if outcome else True, eval=result if is_eval else None,
                           build=result.get("build") if call is not None and call.name == "compile" else None,
                           budget=self.budget.state(self.turn, self.usage.cost_usd, self.elapsed()),
                           best=best.__dict__.copy() if best else None,
                           reward=float(result["reward"]) if is_eval else NO_REWARD, done=self.done,
                           reason=self.reason, final_reward=self.final_reward() if self.done else None,
                           seconds=round(seconds, 3))

    def final_reward(self) -> float:
        """The session's outcome: the best committed kernel's reward, -1 when nothing verified."""
        return self.progress.best.reward if self.progress.best else -1.0

    def add_user_message(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})
        self.recorder.emit("user_message", turn=self.turn, content=text)

    def compacted(self, messages: list[dict], tokens: int, stats: dict) -> None:
        """The loop shortened the history to fit the model's window."""
        self.messages = messages
        self.recorder.emit("compaction", turn=self.turn, before_tokens=tokens, after_tokens=stats["after_tokens"],
                           messages=messages, stats=stats)

    def state_note(self) -> str:
        files = self.toolbox.list_files("kernels").content
        return (f"[compaction note] Older turns were shortened to fit the context window.\n"
                f"{self.progress.best_line()}\nattempts so far: {self.progress.attempts}\n"
                f"{self.budget_line()}\nfiles in kernels/:\n{files}\n"
                "The best kernel is committed in git; read the files again before editing them.")

    # -- close ------------------------------------------------------------------------------------

    def close(self, reason: str) -> list[str]:
        """Record how the session ended and release the workdir; returns the files in .git/ that run
        programs and changed during the session."""
        try:
            changed = self.repo.git_exec_changes(self.surface)
            best = self.progress.best
            summary = {"best": best.__dict__ if best else None, "turns": self.turn, "attempts": self.progress.attempts,
                       "usage": self.usage.to_dict(), "elapsed_s": round(self.elapsed(), 1),
                       "finish_summary": getattr(self, "summary", ""), "git_changed": changed}
            self.recorder.emit("session_end", turn=self.turn, reason=reason, summary=summary)
            self.recorder.close()
            return changed
        finally:
            runner.SPARES.retire(self.workdir)  # its workers wait for this workdir's next job: there is none
            self._exit.close()


def _compact_eval(result: dict[str, Any]) -> dict[str, Any]:
    kept = {k: result.get(k) for k in ("correct", "reward", "speedup_vs_eager", "speedup_vs_compile", "contended",
                                       "stage", "timings_ms", "compile_mode", "precision", "device")}
    kept.update(clean=bool(result.get("correct")) and not result.get("violations"),
                error=str(result.get("error") or "")[:500], violations=list(result.get("violations") or [])[:4],
                build=_compact_build(result.get("build") or {}),
                seconds=dict(list((result.get("seconds") or {}).items())[:40]))  # where the evaluation's time went
    return kept


def _compact_build(build: dict[str, Any]) -> dict[str, Any]:
    return {"ok": bool(build.get("ok")), "cached": bool(build.get("cached")), "seconds": build.get("seconds"),
            "summary": str(build.get("summary") or "")[-2000:]}


def _best_of(state: reader.SessionState, repo: KernelRepo) -> Best | None:
    b = state.best
    if not b or not repo.is_kernel_commit(b["sha"]):
        return None
    return Best(b["sha"], b["turn"], b["speedup_vs_eager"], b["speedup_vs_compile"], b["reward"])


def _local_sandbox(device: str):
    """A session on its own evaluates on this machine: one evaluation per GPU at a time."""
    from kernelsmith.sandbox.local import LocalSandbox

    return LocalSandbox(device)
