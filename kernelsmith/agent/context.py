"""Keeping a long session (up to 200 turns) inside the model's context window.

The loop measures each request with a `TokenCounter`; when `should_compact` fires it
replaces its message list with `compact(...)`. Compaction works on the neutral message
format of `kernelsmith.backends.base` and, in this order, until the estimate is under
budget:

1. keeps the first message (the task, the rules) verbatim;
2. keeps the last `keep_recent` assistant turns (with their tool results) verbatim;
3. shortens older tool results to a stub (verify/profile keep their verdict lines);
4. elides the file text of older write_file/edit_file calls, superseded files first;
5. drops the oldest turns whole, so that no tool call loses its result;
6. only when asked (`elide_recent_writes`, the loop's last resort): elides the file text of the recent
   turns' writes too, keeping their results (a small model's window that cannot hold its last file).

A "[compaction note]" user message (the loop's summary of the state) goes right after the
first message and replaces the note of any earlier compaction.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from dataclasses import dataclass
from typing import Callable, Iterator

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4  # role and separator tokens every provider adds per message
TOOL_CALL_OVERHEAD = 8  # call id, name and the wrapper of one tool call

NOTE_PREFIX = "[compaction note]"
NOTE_PREAMBLE = ("Older turns were shortened or dropped to fit the context window; "
                 "read files again rather than trusting elided text.")
STUB_LINE_CHARS = 200
VERDICT_TOOLS = {"verify": 3, "profile": 3}  # lines kept: their first lines carry the verdict
WRITE_TOOLS = {"write_file": ("content",), "edit_file": ("old", "new")}
# Text that an earlier compaction already shortened: shortening it again would only
# rewrite the marker (and break the prompt cache) for a couple of characters.
_STUBBED = re.compile(r"\[\.\.\. \d+ chars elided by compaction\]$")
_ELIDED = re.compile(r"^\[\d+ chars elided: ")
SUPERSEDED_REASON = "was rewritten at a later turn"
LIVE_REASON = "was not rewritten later; read_file it for the current text"

# One step of a stage: a message and the in-place change to it (True if it changed).
_Action = tuple[dict, Callable[[dict], bool]]


# --- estimating -------------------------------------------------------------------------

def _text_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _message_tokens(message: dict) -> int:
    chars = len(str(message.get("content") or ""))
    tokens = MESSAGE_OVERHEAD
    for call in message.get("tool_calls") or []:
        args = json.dumps(call.get("arguments") or {}, ensure_ascii=False)
        chars += len(args) + len(call.get("name", "")) + len(call.get("id", ""))
        tokens += TOOL_CALL_OVERHEAD
    return tokens + math.ceil(chars / CHARS_PER_TOKEN)


def estimate_tokens(system: str, messages: list[dict], tools_json: str = "") -> int:
    """An estimate of the input tokens of one request, without a tokenizer.

    About 4 characters per token for text and for tool-call arguments serialised as JSON,
    plus a small overhead per message and per tool call. Real tokenizers differ (code runs
    nearer 3 characters per token); `TokenCounter` corrects for that from reported usage.
    The sum is additive over messages, which lets `compact` keep a running total.
    """
    return (_text_tokens(system) + _text_tokens(tools_json)
            + sum(_message_tokens(m) for m in messages))


class TokenCounter:
    """The estimate, scaled by a factor learnt from the input tokens the API reports.

    `observe` takes the estimate of a request and the provider's count for it. With prompt
    caching the reported count must include cache reads and writes (Anthropic reports them
    apart from input_tokens). The factor is a moving average of reported/estimated, each
    ratio and the factor clamped to [lo, hi] so one odd report cannot derail it.
    """

    def __init__(self, factor: float = 1.0, smoothing: float = 0.3,
                 lo: float = 0.5, hi: float = 3.0) -> None:
        self.lo, self.hi, self.smoothing = lo, hi, smoothing
        self.factor = self._clamp(factor)
        self.observations = 0

    def _clamp(self, value: float) -> float:
        return min(self.hi, max(self.lo, value))

    def observe(self, estimated: int, reported_input_tokens: int) -> None:
        if estimated <= 0 or reported_input_tokens <= 0:
            return  # failed calls report 0: nothing to learn
        ratio = self._clamp(reported_input_tokens / estimated)
        # The first report replaces the default guess outright; later ones are averaged.
        weight = 1.0 if self.observations == 0 else self.smoothing
        self.factor = self._clamp((1 - weight) * self.factor + weight * ratio)
        self.observations += 1

    def calibrate(self, estimated: int, exact: int) -> None:
        """Take an exact count of the request as it is now (a tokenizer's) as the factor outright: the
        context's mix of prose and code, and so its characters per token, changes as the session goes. Not
        clamped: the clamp guards against odd usage reports, and a count of the request itself is not one."""
        if estimated > 0 and exact > 0:
            self.factor = exact / estimated
            self.observations += 1

    def scale(self, estimated: int) -> int:
        return round(estimated * self.factor)

    def count(self, system: str, messages: list[dict], tools_json: str = "") -> int:
        return self.scale(estimate_tokens(system, messages, tools_json))


def should_compact(tokens: int, window: int, threshold: float = 0.75) -> bool:
    """True once a request of `tokens` fills `threshold` of the context `window`."""
    return window > 0 and tokens >= threshold * window


# --- checking ----------------------------------------------------------------------------

def conversation_problems(messages: list[dict]) -> list[str]:
    """What makes `messages` an invalid conversation (empty when it is valid).

    Valid: it starts with a user message; each tool call of an assistant message is answered
    by exactly one tool message among the tool messages right after it; no tool message
    lacks its call.
    """
    problems = []
    if not messages or messages[0].get("role") != "user":
        problems.append("does not start with a user message")
    pending: set[str] = set()
    answering = False  # inside the run of tool messages that follows an assistant message
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            if not answering or m.get("tool_call_id") not in pending:
                problems.append(f"message {i}: tool result {m.get('tool_call_id')!r} has no open call")
            pending.discard(m.get("tool_call_id"))
            continue
        if pending:
            problems.append(f"message {i}: calls {sorted(pending)} were never answered")
        answering = role == "assistant"
        pending = {c["id"] for c in m.get("tool_calls") or []} if answering else set()
    if pending:
        problems.append(f"end: calls {sorted(pending)} were never answered")
    return problems


# --- compacting --------------------------------------------------------------------------

@dataclass
class _Work:
    """The conversation being compacted, with a running token total."""

    head: list[dict]  # the first message, then the note
    units: list[list[dict]]  # older turns, oldest first; each a user or assistant message + its tool results
    tail: list[dict]  # the recent turns, verbatim
    raw: int  # unscaled estimate of system + tools + all messages
    budget: int
    counter: TokenCounter

    def tokens(self) -> int:
        return self.counter.scale(self.raw)

    def fits(self) -> bool:
        return self.tokens() <= self.budget

    def apply(self, message: dict, change: Callable[[dict], bool]) -> bool:
        """Run `change` on one message in place, keeping the total right."""
        before = _message_tokens(message)
        changed = change(message)
        self.raw += _message_tokens(message) - before
        return changed

    def drop_oldest(self) -> None:
        unit = self.units.pop(0)
        self.raw -= sum(_message_tokens(m) for m in unit)

    def messages(self) -> list[dict]:
        return self.head + [m for unit in self.units for m in unit] + self.tail


def _is_note(message: dict) -> bool:
    return message.get("role") == "user" and str(message.get("content", "")).startswith(NOTE_PREFIX)


def _note_message(state_note: str) -> dict:
    """The note as a user message; a note that brings its own prefix is taken as written."""
    if state_note.startswith(NOTE_PREFIX):
        return {"role": "user", "content": state_note}
    return {"role": "user", "content": f"{NOTE_PREFIX} {NOTE_PREAMBLE}\n{state_note}".rstrip()}


def _recent_start(messages: list[dict], keep_recent: int) -> int:
    """Index where the last `keep_recent` assistant turns begin (never before 1)."""
    if keep_recent <= 0:
        return len(messages)
    starts = [i for i, m in enumerate(messages) if i > 0 and m.get("role") == "assistant"]
    return starts[-keep_recent] if len(starts) >= keep_recent else 1


def _units(messages: list[dict]) -> list[list[dict]]:
    """Group messages into turns: tool results belong to the message before them."""
    units: list[list[dict]] = []
    for m in messages:
        if m.get("role") == "tool" and units:
            units[-1].append(m)
        else:
            units.append([m])
    return units


def _stub_text(text: str, lines: int) -> str | None:
    """The first `lines` lines (each cut to STUB_LINE_CHARS) and a marker; None if not shorter."""
    if _STUBBED.search(text):
        return None
    kept = "\n".join(line[:STUB_LINE_CHARS] for line in text.splitlines()[:lines])
    stub = f"{kept}\n[... {len(text) - len(kept)} chars elided by compaction]"
    return stub if len(stub) < len(text) else None


def _stub_tool_result(message: dict) -> bool:
    stub = _stub_text(str(message.get("content") or ""), VERDICT_TOOLS.get(message.get("name"), 1))
    if stub is not None:
        message["content"] = stub
    return stub is not None


def _file_path(call: dict) -> str | None:
    args = call.get("arguments")
    if call.get("name") not in WRITE_TOOLS or not isinstance(args, dict) or not args.get("path"):
        return None
    return os.path.normpath(str(args["path"]))


def _write_calls(messages: list[dict]) -> Iterator[tuple[dict, int, dict, str]]:
    """(message, call index, call, path) of every write_file/edit_file, in order."""
    for m in messages:
        for k, call in enumerate(m.get("tool_calls") or []):
            path = _file_path(call)
            if path is not None:
                yield m, k, call, path


def _superseded(messages: list[dict]) -> set[int]:
    """ids of write/edit calls whose file a later write_file rewrote whole.

    A later edit_file or appended part does not supersede: the earlier text is still the basis of the file.
    """
    rewritten: set[str] = set()
    superseded: set[int] = set()
    for _, _, call, path in reversed(list(_write_calls(messages))):
        if path in rewritten:
            superseded.add(id(call))
        if call["name"] == "write_file" and call["arguments"].get("append") is not True:
            rewritten.add(path)
    return superseded


def _elide_args(index: int, reason: str) -> Callable[[dict], bool]:
    """A change that replaces the file text of one call by a marker naming `reason`."""
    def change(message: dict) -> bool:
        call = message["tool_calls"][index]
        args = dict(call["arguments"])
        for key in WRITE_TOOLS[call["name"]]:
            value = args.get(key)
            if not isinstance(value, str) or _ELIDED.match(value):
                continue
            marker = f"[{len(value)} chars elided: {args['path']} {reason}]"
            if len(marker) < len(value):
                args[key] = marker
        changed = args != call["arguments"]
        call["arguments"] = args
        return changed
    return change


def _run_stage(work: _Work, actions: Iterator[_Action]) -> int:
    """Apply changes oldest first until the conversation fits; how many changed something."""
    done = 0
    for message, change in actions:
        if work.fits():
            break
        done += work.apply(message, change)
    return done


def _older(work: _Work, role: str) -> Iterator[dict]:
    return (m for unit in work.units for m in unit if m.get("role") == role)


def _tool_result_actions(work: _Work) -> Iterator[_Action]:
    return ((m, _stub_tool_result) for m in _older(work, "tool"))


def _recent_write_actions(work: _Work) -> Iterator[_Action]:
    for m, k, _, _ in _write_calls([m for m in work.tail if m.get("role") == "assistant"]):
        yield m, _elide_args(k, LIVE_REASON)


def _write_actions(work: _Work, superseded: set[int], want_superseded: bool) -> Iterator[_Action]:
    reason = SUPERSEDED_REASON if want_superseded else LIVE_REASON
    for m, k, call, _ in _write_calls(list(_older(work, "assistant"))):
        if (id(call) in superseded) == want_superseded:
            yield m, _elide_args(k, reason)


def _split(messages: list[dict], state_note: str, keep_recent: int, raw_fixed: int,
           budget: int, counter: TokenCounter) -> _Work:
    rest = [m for m in messages[1:] if not _is_note(m)]
    start = _recent_start([messages[0]] + rest, keep_recent) - 1
    head = [messages[0], _note_message(state_note)]
    kept = head + rest
    return _Work(head, _units(rest[:start]), rest[start:],
                 raw_fixed + sum(_message_tokens(m) for m in kept), budget, counter)


def compact(messages: list[dict], budget_tokens: int, state_note: str, keep_recent: int = 6,
            system: str = "", *, tools_json: str = "",
            counter: TokenCounter | None = None, elide_recent_writes: bool = False) -> tuple[list[dict], dict]:
    """A shorter copy of `messages` that fits `budget_tokens` if the rules allow; and stats.

    The input is never mutated. Stats: before_tokens, after_tokens, elided_tool_results,
    elided_file_contents, dropped_turns. Tokens are `counter`'s calibrated estimate (the
    plain estimate without one) of system + tools_json + messages. If after_tokens is still
    over budget, the first message and the recent turns alone exceed it: call again with a
    smaller keep_recent. The input should be a valid conversation (see
    `conversation_problems`); the result then is one too.
    """
    counter = counter or TokenCounter()
    stats = {"before_tokens": counter.count(system, messages, tools_json), "after_tokens": 0,
             "elided_tool_results": 0, "elided_file_contents": 0, "dropped_turns": 0}
    if not messages:
        return [], stats
    raw_fixed = _text_tokens(system) + _text_tokens(tools_json)
    work = _split(copy.deepcopy(messages), state_note, keep_recent, raw_fixed, budget_tokens, counter)
    stats["elided_tool_results"] = _run_stage(work, _tool_result_actions(work))
    superseded = _superseded(work.messages())
    stats["elided_file_contents"] = (_run_stage(work, _write_actions(work, superseded, True))
                                     + _run_stage(work, _write_actions(work, superseded, False)))
    while work.units and not work.fits():
        work.drop_oldest()
        stats["dropped_turns"] += 1
    if elide_recent_writes:
        stats["elided_file_contents"] += _run_stage(work, _recent_write_actions(work))
    stats["after_tokens"] = work.tokens()
    return work.messages(), stats
