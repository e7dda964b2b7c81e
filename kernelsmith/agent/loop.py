"""The agent loop: budgets checked before each model call, every step recorded as it happens.

One turn: the backend sees the messages and the tools and returns text and tool calls; the
tools run; their results go back. It stops at finish, at a budget, or on Ctrl-C (raised to
the caller, who records the end).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from kernelsmith.agent import context
from kernelsmith.agent.progress import Progress
from kernelsmith.agent.tools import Outcome, Toolbox
from kernelsmith.backends.base import Backend, TextSink, ToolCall, Usage
from kernelsmith.session.recorder import Recorder

NUDGE = "Use a tool to continue, or call finish(summary) to end the session."
COMPACT_TO = 0.5  # of the window, so that compaction is not needed again at once
KEEP_RECENT = (6, 3, 1)  # turns kept verbatim by compaction, tried in this order


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


@dataclass
class Agent:
    backend: Backend
    toolbox: Toolbox
    progress: Progress
    recorder: Recorder
    system: str
    messages: list[dict]
    budget: Budget
    window: int
    turn: int = 0
    usage: Usage = field(default_factory=Usage)
    elapsed_before_s: float = 0.0
    on_text: TextSink | None = None
    summary: str = ""

    def __post_init__(self):
        self.started = time.monotonic()
        self.specs = self.toolbox.specs()
        self.tools_json = json.dumps([s.__dict__ for s in self.specs])
        self.counter = context.TokenCounter()

    def elapsed(self) -> float:
        return self.elapsed_before_s + time.monotonic() - self.started

    def run(self) -> str:
        """Turns until one ends the session; returns why it ended."""
        while True:
            reason = self.budget.exhausted(self.turn, self.usage.cost_usd, self.elapsed())
            if reason:
                return reason
            self.compact_if_needed()
            estimated = context.estimate_tokens(self.system, self.messages, self.tools_json)  # raw, for calibration
            reply = self.backend.complete(self.system, self.messages, self.specs, on_text=self.on_text)
            self.turn += 1
            self.usage.add(reply.usage)
            prompt_tokens = reply.usage.input_tokens + reply.usage.cache_read_tokens + reply.usage.cache_write_tokens
            if prompt_tokens:
                self.counter.observe(estimated, prompt_tokens)
            self.messages.append(reply.as_message())
            self.recorder.emit("model_turn", turn=self.turn, message=reply.as_message(),
                               usage=reply.usage.to_dict(), stop_reason=reply.stop_reason, model=reply.model)
            if not reply.tool_calls:
                self.add_user_message(NUDGE)
            elif self.run_calls(reply.tool_calls):
                return "finish"

    def run_calls(self, calls: list[ToolCall]) -> bool:
        """Run one turn's tool calls in order; True when one of them finished the session."""
        finished = False
        for i, call in enumerate(calls):
            if finished:
                outcome = Outcome("skipped: the session finished before this call", ok=False)
            else:
                started = time.monotonic()
                outcome = self.progress.after_tool(call, self.toolbox.run(call), self.turn)
                outcome.extra["seconds"] = round(time.monotonic() - started, 3)
            finished = finished or outcome.finish
            self.summary = outcome.extra.get("summary", self.summary)
            if i == len(calls) - 1:
                outcome.content += "\n" + self.budget.line(self.turn, self.usage.cost_usd, self.elapsed())
            self.add_tool_result(call, outcome)
        return finished

    def add_tool_result(self, call: ToolCall, outcome: Outcome) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": outcome.content})
        self.recorder.emit("tool_result", turn=self.turn, tool_call_id=call.id, name=call.name, ok=outcome.ok,
                           content=outcome.content, seconds=outcome.extra.get("seconds", 0.0))

    def add_user_message(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})
        self.recorder.emit("user_message", turn=self.turn, content=text)

    def compact_if_needed(self) -> None:
        """Compact older turns when the next call would fill the window past the threshold."""
        tokens = self.counter.count(self.system, self.messages, self.tools_json)
        if not context.should_compact(tokens, self.window):
            return
        budget, note = int(self.window * COMPACT_TO), self.state_note()
        for keep_recent in KEEP_RECENT:  # fewer verbatim recent turns only when the budget demands it
            compacted, stats = context.compact(self.messages, budget, note, keep_recent=keep_recent,
                                               system=self.system, tools_json=self.tools_json, counter=self.counter)
            if stats["after_tokens"] <= budget:
                break
        self.messages = compacted
        self.recorder.emit("compaction", turn=self.turn, before_tokens=tokens, after_tokens=stats["after_tokens"],
                           messages=self.messages, stats=stats)

    def state_note(self) -> str:
        files = self.toolbox.list_files("kernels").content
        return (f"[compaction note] Older turns were shortened to fit the context window.\n"
                f"{self.progress.best_line()}\nattempts so far: {self.progress.attempts}\n"
                f"{self.budget.line(self.turn, self.usage.cost_usd, self.elapsed())}\n"
                f"files in kernels/:\n{files}\n"
                "The best kernel is committed in git; read the files again before editing them.")
