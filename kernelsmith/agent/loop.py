"""The agent loop: a model call, then an env step for each tool call it made, until done.

Everything about the session (budgets, tools, evaluation, commits, the record) lives in
KernelEnv (env.py); the loop adds only what is the model's: its context window (older turns
compacted when the next call would not fit) and streaming its text. It stops at finish, at a
budget, or on Ctrl-C (raised to the caller, who closes the env).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from kernelsmith.agent import context
from kernelsmith.agent.env import KernelEnv
from kernelsmith.backends.base import Backend, TextSink, ToolSpec

COMPACT_TO = 0.5  # of the window, so that compaction is not needed again at once
COMPACT_AT = 0.75  # of the window: the request length that starts a compaction, at most
# turns kept verbatim by compaction, tried in this order; then, where the window cannot hold even the last turn (a
# 135M student's 8,192 positions: a 5,000-token prefix and a kernel file of 5,700), its file text is elided too
# (the file is on disk; the turn's results, which the model has not read yet, stay)
KEEP_RECENT = ((6, False), (3, False), (1, False), (1, True))
# a request's exact length in the tokens of the model whose window counts (system, messages, tools)
Measure = Callable[[str, list[dict], list[ToolSpec]], int]


@dataclass
class Agent:
    backend: Backend
    env: KernelEnv
    window: int
    on_text: TextSink | None = None
    measure: Measure | None = None  # None: estimated, calibrated by the usage the backend reports
    reply_tokens: int | None = None  # the longest reply the model may write (its max_tokens): room kept for it

    def __post_init__(self):
        self.tools_json = json.dumps([s.__dict__ for s in self.env.specs])
        self.counter = context.TokenCounter()

    def run(self) -> str:
        """Turns until one ends the session; returns why it ended."""
        while not (reason := self.env.exhausted()):
            self.compact_if_needed()
            env = self.env
            estimated = context.estimate_tokens(env.system, env.messages, self.tools_json)  # raw, for calibration
            reply = self.backend.complete(env.system, env.messages, env.specs, on_text=self.on_text)
            env.model_turn(reply)
            u = reply.usage
            if self.measure is None and u.input_tokens + u.cache_read_tokens + u.cache_write_tokens:
                self.counter.observe(estimated, u.input_tokens + u.cache_read_tokens + u.cache_write_tokens)
            env.step_all(reply.tool_calls)
            if env.reason == "finish":
                return "finish"
        return reason

    def compact_if_needed(self) -> None:
        """Compact older turns when the next call would fill the window past the threshold."""
        env = self.env
        tokens = self.tokens(env.messages)
        if not context.should_compact(tokens, self.window, self.compact_at() / max(self.window, 1)):
            return
        budget, note = int(self.window * COMPACT_TO), env.state_note()
        for keep_recent, elide_recent in KEEP_RECENT:  # fewer verbatim recent turns only when the budget demands it
            compacted, stats = context.compact(env.messages, budget, note, keep_recent=keep_recent,
                                               system=env.system, tools_json=self.tools_json, counter=self.counter,
                                               elide_recent_writes=elide_recent)
            if self.measure is not None:  # the compacted text's own ratio, for the next try too
                stats["after_tokens"] = self.tokens(compacted)
            if stats["after_tokens"] <= budget:
                break
        env.compacted(compacted, tokens, stats)

    def compact_at(self) -> int:
        """The request length that starts a compaction: 3/4 of the window, less where the model's longest reply
        would not fit after it (a 135M student's 2,816-token replies in its 8,192 positions: 5,376), though never
        below what compaction aims for."""
        at = COMPACT_AT * self.window
        if self.reply_tokens:
            at = max(COMPACT_TO * self.window, min(at, self.window - self.reply_tokens))
        return int(at)

    def tokens(self, messages: list[dict]) -> int:
        """The next request's length: measured where there is a measure (which calibrates the estimate that
        compaction works with), else the calibrated estimate."""
        estimated = context.estimate_tokens(self.env.system, messages, self.tools_json)
        if self.measure is None:
            return self.counter.scale(estimated)
        exact = self.measure(self.env.system, messages, self.env.specs)
        self.counter.calibrate(estimated, exact)
        return exact
