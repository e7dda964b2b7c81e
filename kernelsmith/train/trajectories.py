"""Trajectories for trainers: kernelsmith session records as rendered chats, token ids, a loss mask
over the policy's own tokens, per-turn and final milestone rewards, the task and provenance.

One trajectory per line of a JSONL file; the format (version FORMAT) is docs/trajectories.md.
The chat is rendered with a tokenizer's chat template; the mask comes from rendering growing
prefixes of the chat, and the ids of the pieces must be the ids of the whole text, else the
export stops with a one-line error (a misaligned mask would train on the wrong tokens).

Rewards come only from kernelsmith's own records: the final reward is that of the session's best
kernel commit in the signed ledger (kernelsmith/session/ledger.py), as KernelEnv's final_reward
is the best committed kernel's; a commit event the ledger does not vouch for raises nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from kernelsmith import __version__
from kernelsmith.errors import BadInput
from kernelsmith.session import events as session_events
from kernelsmith.session.reader import SessionState, find_session, fold, read_events

FORMAT = 1
STATE_DIR = ".kernelsmith"
EVAL_TOOLS = ("verify", "profile")  # the tools whose results carry a milestone reward
NOT_WORKDIRS = {".git", "build", "__pycache__", "node_modules"}  # never searched for sessions


# -- the chat as the policy saw it ----------------------------------------------------------------

@dataclass
class Chat:
    """A chat in the HF format (system first) and, for each message, the turn that wrote it when
    the policy wrote it in this context (None for the prompt, tool outputs and user messages)."""

    messages: list[dict[str, Any]]
    turns: list[int | None]


def context_parts(events: list[dict]) -> list[list[dict]]:
    """The session's events cut at each compaction. Each part starts with a session_start whose
    messages are the context the part's turns were sampled in."""
    start = next(e for e in events if e["kind"] == "session_start")
    parts: list[list[dict]] = [[]]
    for event in events:
        if event["kind"] == "compaction":
            parts.append([{**start, "messages": event["messages"]}])
        else:
            parts[-1].append(event)
    return parts


def part_chat(part: list[dict]) -> tuple[SessionState, Chat]:
    """The folded state of one part and its chat: the messages after the part's context are the
    policy's, one assistant message per model_turn event, in order."""
    state = fold(part)
    context = len(part[0].get("messages") or [])
    turns = iter([e["turn"] for e in part if e["kind"] == "model_turn"])
    owners = [next(turns, None) if i >= context and m["role"] == "assistant" else None
              for i, m in enumerate(state.messages)]
    return state, chat_of(state.system, state.messages, owners)


def chat_of(system: str, messages: list[dict], owners: list[int | None]) -> Chat:
    """Neutral messages as the openai backend sends them (backends/openai.py to_wire): system
    first, consecutive user messages merged, an assistant message with no text and no call left out."""
    chat = Chat([{"role": "system", "content": system}] if system else [], [])
    chat.turns = [None] * len(chat.messages)
    for message, turn in zip(messages, owners):
        add_message(chat, hf_message(message), turn)
    return chat


def add_message(chat: Chat, message: dict, turn: int | None) -> None:
    if message["role"] == "assistant" and not message["content"].strip() and not message.get("tool_calls"):
        return
    last = chat.messages[-1] if chat.messages else {}
    if message["role"] == "user" and last.get("role") == "user":
        last["content"] = f"{last['content']}\n\n{message['content']}"
        return
    chat.messages.append(message)
    chat.turns.append(turn)


def split_replies(chat: Chat) -> Chat:
    """Each policy reply that made several tool calls, as one reply per call, each followed by its own output
    (its text goes with the first). The tools ran one after another either way, so every call is made with
    the same outputs before it as the reply made it with, and one more. A student whose replies are capped
    learns replies as long as one call, not all of a turn's files at once (the built-in teacher writes every
    file of a version and compiles in one reply: 2,485-25,615 tokens on an H100 run, 2026-12-06)."""
    out, i = Chat([], []), 0
    while i < len(chat.messages):
        message, turn = chat.messages[i], chat.turns[i]
        calls, outputs = message.get("tool_calls") or [], _outputs_after(chat.messages, i)
        if turn is None or len(calls) < 2 or sorted(c["id"] for c in calls) != sorted(outputs):
            out.messages.append(message)
            out.turns.append(turn)
            i += 1
            continue
        for k, call in enumerate(calls):
            out.messages += [{"role": "assistant", "content": message["content"] if k == 0 else "",
                              "tool_calls": [call]}, outputs[call["id"]]]
            out.turns += [turn, None]
        i += 1 + len(outputs)
    return out


def split_row(row: dict[str, Any], tokenizer, info: dict[str, Any]) -> dict[str, Any]:
    """An exported trajectory with one call per reply (split_replies; idempotent), rendered again from its
    messages by `tokenizer` (recorded as `info`) and checked as an export is: its ids become that tokenizer's,
    whichever rendered it before. Each milestone reward moves to the last token of its turn's last reply."""
    turns: list[int | None] = [None] * len(row["messages"])
    for span in row["turns"]:
        turns[span["message"]] = span["turn"]
    chat = split_replies(Chat(row["messages"], turns))
    rendered = render_chat(tokenizer, chat, row["tools"], f"the trajectory of session {row.get('session_id')}")
    last = last_tokens(rendered.spans)
    rewards = {**row["rewards"], "turns": [{**r, "token": last[r["turn"]]} for r in row["rewards"].get("turns", [])
                                           if r["turn"] in last]}
    return {**row, "messages": chat.messages, "text": rendered.text, "input_ids": rendered.input_ids,
            "loss_mask": rendered.loss_mask, "turns": rendered.spans, "rewards": rewards, "replies": "one call each",
            "stats": token_stats(rendered), "tokenizer": info}


def _outputs_after(messages: list[dict], i: int) -> dict[str, dict]:
    """The tool messages right after message i, by the call they answer."""
    found: dict[str, dict] = {}
    for message in messages[i + 1:]:
        if message["role"] != "tool":
            break
        found[message["tool_call_id"]] = message
    return found


def hf_message(message: dict) -> dict[str, Any]:
    """One neutral message (backends/base.py) in the chat format of transformers' templates."""
    text = message.get("content") or ""
    if message["role"] == "tool":
        return {"role": "tool", "tool_call_id": message["tool_call_id"], "name": message["name"], "content": text}
    if message["role"] != "assistant":
        return {"role": "user", "content": text}
    calls = [hf_tool_call(call) for call in message.get("tool_calls") or []]
    return {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}


def hf_tool_call(call: dict) -> dict[str, Any]:
    return {"id": call["id"], "type": "function",
            "function": {"name": call["name"], "arguments": call.get("arguments") or {}}}


def hf_tools(specs) -> list[dict[str, Any]]:
    """Tool specs (backends/base.py ToolSpec) as the `tools=` of a chat template."""
    return [{"type": "function", "function": {"name": s.name, "description": s.description,
                                              "parameters": s.parameters}} for s in specs]


def agent_tools() -> list[dict[str, Any]]:
    """The tools the agent is given (agent/tools.py), as chat-template tools."""
    from kernelsmith.agent.tools import Toolbox

    return hf_tools(Toolbox(Path("."), evaluator=None).specs())


# -- rendering, ids and the loss mask --------------------------------------------------------------

@dataclass
class Piece:
    """Text the chat adds with one message (a policy message's generation prompt is a piece of
    its own): turn is set only on text the policy wrote."""

    text: str
    message: int
    turn: int | None = None


@dataclass
class Rendered:
    text: str
    input_ids: list[int]
    loss_mask: list[int]
    spans: list[dict[str, int]]  # each policy message: {"turn", "message", "start", "end"} (end exclusive)


def render(tokenizer, messages: list[dict], tools: list[dict], where: str, generation_prompt: bool = False) -> str:
    if not messages:
        return ""
    try:
        return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                             add_generation_prompt=generation_prompt)
    except Exception as err:  # the template's own code: raise_exception(), a role it refuses, a missing field
        raise BadInput(f"{where}: the chat template cannot render it: {type(err).__name__}: "
                       f"{' '.join(str(err).split())[:300]}",
                       "use a template that renders system, user, assistant (with tool_calls) and tool messages "
                       "in any order") from err


def text_added(before: str, after: str, where: str, message: int) -> str:
    """What rendering one more message adds; a template that re-renders earlier text is refused."""
    if not after.startswith(before):
        raise BadInput(f"{where}: the chat template renders the chat before message {message} differently once "
                       "it follows, so no token span belongs to one message",
                       "the mask is computed from growing prefixes of the chat; use a template whose "
                       "rendering of a prefix is a prefix of the rendering of the whole chat")
    return after[len(before):]


def chat_pieces(tokenizer, chat: Chat, tools: list[dict], where: str) -> list[Piece]:
    """The rendered chat cut where each message starts, and where the policy's text starts."""
    pieces, done = [], ""
    for i, turn in enumerate(chat.turns):
        if turn is not None:
            prompt = render(tokenizer, chat.messages[:i], tools, where, generation_prompt=True)
            pieces.append(Piece(text_added(done, prompt, where, i), i))
            done = prompt
        rendered = render(tokenizer, chat.messages[:i + 1], tools, where)
        pieces.append(Piece(text_added(done, rendered, where, i), i, turn))
        done = rendered
    return pieces


def token_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    return tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []


def first_difference(a: list[int], b: list[int]) -> int | None:
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return None if same == len(a) == len(b) else same


def check_retokenised(tokenizer, whole: list[int], parts: list[list[int]], pieces: list[Piece],
                      chat: Chat, where: str) -> None:
    """The ids of the pieces, one after another, must be the ids of the whole text."""
    joined = [t for ids in parts for t in ids]
    at = first_difference(whole, joined)
    if at is None:
        return
    ends = _running_ends(parts)
    piece = pieces[next((k for k, end in enumerate(ends) if end > at), len(pieces) - 1)]
    role = chat.messages[piece.message]["role"]
    raise BadInput(f"{where}: re-tokenising the rendered chat gives other ids than its messages do, first at "
                   f"token {at} (in message {piece.message}, {role}): {_token(tokenizer, whole, at)} "
                   f"in the whole text, {_token(tokenizer, joined, at)} message by message; "
                   "its loss mask would be misaligned",
                   "the template's text merges across a message boundary (a generation prompt ending in a "
                   "space, say): fix the template or use another tokenizer")


def _running_ends(parts: list[list[int]]) -> list[int]:
    ends, total = [], 0
    for ids in parts:
        total += len(ids)
        ends.append(total)
    return ends


def _token(tokenizer, ids: list[int], at: int) -> str:
    if at >= len(ids):
        return "the end"
    return f"id {ids[at]} {tokenizer.convert_ids_to_tokens(ids[at])!r}"


def policy_end(ids: list[int], start: int, end: int, eos_id: int | None) -> int:
    """Where the policy stopped in a span: just after its last end-of-sequence token; what the
    template writes after it (a newline, say) was never sampled."""
    last = next((i for i in range(end - 1, start - 1, -1) if ids[i] == eos_id), None)
    return end if eos_id is None or last is None else last + 1


def render_chat(tokenizer, chat: Chat, tools: list[dict], where: str) -> Rendered:
    """The chat's text, its ids, and a mask of 1 on the tokens the policy wrote."""
    text = render(tokenizer, chat.messages, tools, where)
    pieces = chat_pieces(tokenizer, chat, tools, where)
    text_added("".join(p.text for p in pieces), text, where, len(chat.messages))
    whole, parts = token_ids(tokenizer, [text])[0], token_ids(tokenizer, [p.text for p in pieces])
    check_retokenised(tokenizer, whole, parts, pieces, chat, where)
    mask, spans, start = [0] * len(whole), [], 0
    for piece, ids in zip(pieces, parts):
        end = start + len(ids)
        if piece.turn is not None:
            stop = policy_end(whole, start, end, tokenizer.eos_token_id)
            mask[start:stop] = [1] * (stop - start)
            spans.append({"turn": piece.turn, "message": piece.message, "start": start, "end": stop})
        start = end
    return Rendered(text, whole, mask, spans)


def check_template(tokenizer, tools: list[dict], where: str) -> None:
    """Refuse a chat template that would hide the tools or the tool calls from the policy."""
    probe = [{"role": "system", "content": "probe"}, {"role": "user", "content": "probe"}]
    named = f"the probe chat of {where}"
    if render(tokenizer, probe, tools, named) == render(tokenizer, probe, [], named):
        raise BadInput(f"the chat template of {where} ignores tools=: the policy would never see the tools' schemas",
                       "use a tokenizer whose chat template renders tools (most tool-calling models' do)")
    name = tools[0]["function"]["name"] if tools else "verify"
    call = {"role": "assistant", "content": "", "tool_calls": [hf_tool_call({"id": "c1", "name": name})]}
    added = text_added(render(tokenizer, probe, tools, named, True), render(tokenizer, probe + [call], tools, named),
                       named, 2)
    if name not in added:
        raise BadInput(f"the chat template of {where} does not render an assistant message's tool_calls",
                       "use a tokenizer whose chat template renders tool calls")


# -- rewards: per turn from the record, final from the ledger -------------------------------------

def turn_rewards(evals: list[dict], spans: list[dict[str, int]]) -> list[dict[str, Any]]:
    """Each verify or profile's milestone reward, on the last policy token of the turn that called it."""
    last_token = last_tokens(spans)
    return [{"turn": e["turn"], "token": last_token[e["turn"]], "tool": e["tool"], "attempt": e["attempt"],
             "reward": float(e["result"]["reward"])}
            for e in evals if e["tool"] in EVAL_TOOLS and _has_reward(e) and e["turn"] in last_token]


def last_tokens(spans: list[dict[str, int]]) -> dict[int, int]:
    """Each turn's last policy token (spans in order, so a turn of several replies gets its last one's)."""
    return {span["turn"]: span["end"] - 1 for span in spans if span["end"] > span["start"]}


def _has_reward(event: dict) -> bool:
    return isinstance(event.get("result"), dict) and isinstance(event["result"].get("reward"), (int, float))


def _trailer(entry: dict, key: str) -> str | None:
    return {k.lower(): v for k, v in (entry.get("trailers") or {}).items()}.get(key.lower())


def _number(text: str | None, kind=float):
    try:
        return kind(str(text).rstrip("x"))
    except (TypeError, ValueError):
        return None


def commit_order(entry: dict) -> tuple:
    """Kernel commits in the order a session made them: by the attempt in their signed trailers."""
    return (_number(_trailer(entry, "Attempt"), int) or 0, _number(_trailer(entry, "Turn"), int) or 0,
            entry.get("time") or 0)


def session_kernels(kernels: dict[str, dict], session_id: str) -> list[dict]:
    """The ledger's kernel commits of one session, oldest first: each one was a new best."""
    return sorted((k for k in kernels.values() if k.get("session") == session_id), key=commit_order)


def best_kernel(commits: list[dict]) -> dict[str, Any] | None:
    """The session's best kernel as the ledger signed it: its last kernel commit."""
    if not commits:
        return None
    entry = commits[-1]
    return {"sha": entry["sha"], "reward": _number(_trailer(entry, "Reward")),
            "turn": _number(_trailer(entry, "Turn"), int), "attempt": _number(_trailer(entry, "Attempt"), int),
            "speedup_vs_eager": _number(_trailer(entry, "Speedup-Vs-Eager")),
            "speedup_vs_compile": _number(_trailer(entry, "Speedup-Vs-Compile"))}


def final_reward(best: dict[str, Any] | None) -> float:
    """KernelEnv's final reward: the best committed kernel's, -1 when nothing verified."""
    return -1.0 if best is None or best["reward"] is None else float(best["reward"])


def unvouched_commits(commits: list[dict], vouched: list[dict]) -> list[str]:
    """Commit events of the record that the ledger does not hold as this session's kernels."""
    shas = {entry["sha"] for entry in vouched}
    return [str(e.get("sha")) for e in commits if e.get("sha") not in shas]


# -- one trajectory --------------------------------------------------------------------------------

@dataclass
class Source:
    """What a session's lines are made from, besides its events."""

    path: Path
    workdir: Path
    task: dict[str, Any]
    kernels: dict[str, dict]  # sha -> the ledger's entry, for the workdir's kernel commits


@dataclass
class Template:
    """The tokenizer whose chat template renders the chats, the tools it is given, and what a line
    says of the tokenizer."""

    tokenizer: Any
    tools: list[dict]
    info: dict[str, Any]
    one_call_per_reply: bool = False  # split_replies: each reply of several calls as one reply per call


def trajectory(source: Source, start: dict, state: SessionState, chat: Chat, rendered: Rendered,
               rewards: dict[str, Any], segment: tuple[int, int], template: Template) -> dict[str, Any]:
    return {"format": FORMAT, "task": source.task, "session_id": start["session_id"],
            "segment": {"index": segment[0], "count": segment[1]}, "rewards": rewards,
            "messages": chat.messages, "tools": template.tools, "text": rendered.text,
            "input_ids": rendered.input_ids, "loss_mask": rendered.loss_mask, "turns": rendered.spans,
            "stats": token_stats(rendered), "tokenizer": template.info, "provenance": provenance(source, start, state)}


def token_stats(rendered: Rendered) -> dict[str, int]:
    return {"tokens": len(rendered.input_ids), "policy_tokens": sum(rendered.loss_mask)}


def provenance(source: Source, start: dict, state: SessionState) -> dict[str, Any]:
    config = start.get("config") or {}
    vouched = session_kernels(source.kernels, start["session_id"])
    return {"workdir": str(source.workdir), "events": str(source.path), "session_id": start["session_id"],
            "backend": config.get("backend"), "model": config.get("model"), "base_url": config.get("base_url"),
            "harness_versions": harness_versions(state.evals),
            "kernelsmith_version": __version__, "head": start.get("head"),
            "user_changes_commit": start.get("user_changes_commit"),
            "kernel_commits": [k["sha"] for k in vouched],
            "unvouched_commits": unvouched_commits(state.commits, vouched),
            "end_reason": (state.end or {}).get("reason"), "turns": state.turn, "started": start.get("t")}


def harness_versions(evals: list[dict]) -> list[str]:
    """The harness versions that evaluated the session's kernels (EvalResult.harness_version)."""
    results = [e["result"] for e in evals if isinstance(e.get("result"), dict)]
    return sorted({str(r["harness_version"]) for r in results if r.get("harness_version")})


MALFORMED = ("error: no tool named ", "error: bad arguments for ")  # agent/tools.py's answers to a malformed call


def flags_of(events: list[dict]) -> dict[str, int]:
    """What a trainer's selection reads (RFT keeps neither): the session's evaluations the harness flagged
    with violations, and its tool calls the tools refused as malformed."""
    results = [e for e in events if e["kind"] == "tool_result"]
    evals = [e for e in events if e["kind"] == "eval_result" and isinstance(e.get("result"), dict)]
    return {"violations": sum(1 for e in evals if e["result"].get("violations")),
            "malformed_calls": sum(1 for e in results if str(e.get("content", "")).startswith(MALFORMED))}


def recorded_tools(start: dict) -> list[dict[str, Any]] | None:
    """The tool schemas the session's policy was given, as its session_start recorded them (None in records
    from before they were: those are rendered with today's tools)."""
    specs = start.get("tools")
    if not isinstance(specs, list) or not all(isinstance(s, dict) and "name" in s for s in specs):
        return None
    return [{"type": "function", "function": {"name": s["name"], "description": s.get("description", ""),
                                              "parameters": s.get("parameters", {})}} for s in specs]


def session_trajectories(source: Source, events: list[dict], template: Template) -> list[dict[str, Any]]:
    """One line per context the policy worked in (a compaction starts a new one)."""
    start = next(e for e in events if e["kind"] == "session_start")
    template = replace(template, tools=recorded_tools(start) or template.tools)
    whole = fold(events)
    flags = flags_of(events)
    best = best_kernel(session_kernels(source.kernels, start["session_id"]))
    parts, lines = context_parts(events), []
    for index, part in enumerate(parts):
        state, chat = part_chat(part)
        chat = split_replies(chat) if template.one_call_per_reply else chat
        if not any(turn is not None for turn in chat.turns):
            continue  # a context in which the policy wrote nothing (killed right after a compaction)
        where = f"session {start['session_id']}" + (f" (context {index + 1} of {len(parts)})" if index else "")
        rendered = render_chat(template.tokenizer, chat, template.tools, where)
        rewards = {"final": final_reward(best), "best": best, "turns": turn_rewards(state.evals, rendered.spans)}
        lines.append({**trajectory(source, start, whole, chat, rendered, rewards, (index, len(parts)), template),
                      "flags": flags, "replies": "one call each" if template.one_call_per_reply else "as made"})
    return lines


# -- reading sessions, workdirs and the ledger -----------------------------------------------------

def session_files(targets: Iterable[str], workdir: Path) -> list[Path]:
    """The events files named by workdirs, folders of workdirs, session folders, events files and
    session ids (or unique prefixes) of `workdir`; each once, in the order given."""
    found: dict[Path, None] = {}
    for target in targets:
        for path in _target_files(target, workdir):
            found.setdefault(path.resolve())
    return list(found)


def _target_files(target: str, workdir: Path) -> list[Path]:
    path = Path(target)
    if path.is_file():
        return [path]
    if (path / "events.jsonl").is_file():
        return [path / "events.jsonl"]
    if path.is_dir():
        return sorted(p for found in workdirs_under(path)
                      for p in (found / STATE_DIR / "sessions").glob("*/events.jsonl"))
    if "/" not in target and (workdir / STATE_DIR).is_dir():
        return [find_session(workdir, target)]
    raise BadInput(f"no such workdir, session folder or events file: {target}",
                   f"a session id is looked up in the workdir given by --workdir (now {workdir})")


def workdirs_under(folder: Path) -> Iterator[Path]:
    """folder itself when it is a workdir, else the workdirs below it (a bench or fleet output)."""
    for root, dirs, _ in os.walk(folder):
        if STATE_DIR in dirs:
            dirs.clear()
            yield Path(root)
        else:
            dirs[:] = sorted(d for d in dirs if d not in NOT_WORKDIRS and not d.startswith("."))


def workdir_of(events_path: Path) -> Path | None:
    """The workdir of <workdir>/.kernelsmith/sessions/<id>/events.jsonl; None elsewhere."""
    sessions = Path(events_path).resolve().parent.parent
    return sessions.parent.parent if sessions.name == "sessions" and sessions.parent.name == STATE_DIR else None


def readable_events(path: Path) -> list[dict]:
    """The record's whole events (torn lines and lines that are not events left out)."""
    return [e for e in read_events(path) if isinstance(e, dict) and isinstance(e.get("kind"), str) and "t" in e]


def vouched_kernels(workdir: Path) -> tuple[dict[str, dict], list[str]]:
    """sha -> the ledger's signed entry, for each kernel commit kernelsmith made in the workdir, and
    the ledger's notes (claims it does not hold, entries signed by keys this user does not trust)."""
    from kernelsmith.gitops import KernelRepo

    repo = KernelRepo(workdir)
    entries = {}
    for sha in sorted(repo.kernel_shas()):
        try:
            entries[sha] = repo.trusted_commit(sha, "read")
        except BadInput:
            continue  # the ledger's commit is gone from git (a pruned branch): nothing to read its reward from
    return {sha: e for sha, e in entries.items() if e.get("kind") == "kernel"}, repo.ledger_notes()


def task_of(workdir: Path) -> dict[str, Any]:
    try:
        config = json.loads((workdir / STATE_DIR / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    return {"name": config.get("task"), "sha256": config.get("reference_sha256"), "device": config.get("device"),
            "precision": config.get("precision")}


def skip_reason(events: list[dict], path: Path, workdir: Path | None) -> str:
    """Why a record gives no trajectory ("" when it may give one)."""
    starts = [e for e in events if e["kind"] == "session_start"]
    newer = max((e["v"] for e in events if isinstance(e.get("v"), int)), default=1)
    if newer > session_events.VERSION:
        return f"record format v{newer} is newer than this reader's v{session_events.VERSION}"
    if not starts:
        return "no session_start: not a session record"
    if workdir is None:
        return ("not inside a workdir (<workdir>/.kernelsmith/sessions/<id>/events.jsonl): "
                "no ledger to vouch for its rewards")
    if starts[0].get("session_id") != path.parent.name:
        return f"its session_start names session {starts[0].get('session_id')!r}, not its folder's"
    return _state_skip(events)


def _state_skip(events: list[dict]) -> str:
    try:
        state = fold(events)
    except (KeyError, TypeError, ValueError) as err:
        return f"damaged record ({type(err).__name__}: {err})"
    if state.end is None:
        return "not over: running, or killed and not resumed"
    if state.turn == 0:
        return "no model turns"
    return ""


# -- the export ------------------------------------------------------------------------------------

@dataclass
class Summary:
    read: int = 0
    exported: int = 0  # sessions with lines written
    lines: int = 0
    tokens: int = 0
    policy_tokens: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (session, reason)
    notes: list[str] = field(default_factory=list)

    @property
    def policy_fraction(self) -> float:
        return self.policy_tokens / self.tokens if self.tokens else 0.0


def check_tokenizer_folder(path: Path | None) -> Path:
    if path is None:
        raise BadInput("--tokenizer is required: trajectories are rendered with a tokenizer's chat template",
                       "give a local tokenizer folder (tokenizer.json and a chat template), e.g. the model's own")
    if not Path(path).is_dir():
        raise BadInput(f"tokenizer folder not found: {path}", "give a local folder; nothing is fetched from a hub")
    return Path(path)


def load_tokenizer(path: Path | None):
    """A local tokenizer folder with a chat template; nothing is fetched from a model hub."""
    tokenizer = _from_folder(check_tokenizer_folder(path))
    if not getattr(tokenizer, "chat_template", None):
        raise BadInput(f"the tokenizer in {path} has no chat template", "use the tokenizer of a chat model")
    return tokenizer


def _from_folder(path: Path):
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise BadInput("the trainer needs transformers", "pip install 'kernelsmith[train]'") from None
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise BadInput(f"cannot load a tokenizer from {path}: {' '.join(str(err).split())[:300]}") from None


def tokenizer_info(tokenizer, path: Path) -> dict[str, Any]:
    template = tokenizer.chat_template
    template = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return {"path": str(Path(path).resolve()), "name_or_path": tokenizer.name_or_path,
            "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest(),
            "eos_token": tokenizer.eos_token, "eos_token_id": tokenizer.eos_token_id}


def export_trajectories(paths: list[Path], tokenizer, tokenizer_path: Path, out: Path,
                        min_reward: float | None = None, one_call_per_reply: bool = False) -> Summary:
    """Write the trajectories of the sessions at paths to out (JSONL): replaced whole, or left as it was."""
    info = tokenizer_info(tokenizer, tokenizer_path)
    template, summary = Template(tokenizer, agent_tools(), info, one_call_per_reply), Summary()
    check_template(tokenizer, template.tools, str(tokenizer_path))
    workdirs = Workdirs(summary)
    with replaced_whole(out) as file:
        for path in paths:
            for line in _session_lines(path, workdirs, template, min_reward, summary):
                file.write(json.dumps(line, ensure_ascii=False) + "\n")
        if not summary.lines:
            raise BadInput(f"no trajectory to write: {summary.read} session(s) read, all skipped"
                           + (f" ({summary.skipped[0][1]}{'; ...' if len(summary.skipped) > 1 else ''})"
                              if summary.skipped else ""))
    return summary


def _session_lines(path: Path, workdirs: "Workdirs", template: Template, min_reward: float | None,
                   summary: Summary) -> list[dict]:
    summary.read += 1
    events, workdir = readable_events(path), workdir_of(path)
    reason = skip_reason(events, path, workdir) or workdirs.problem(workdir)
    source = None if reason else workdirs.source(path, workdir)
    final = None if source is None else final_reward(best_kernel(session_kernels(source.kernels, path.parent.name)))
    if not reason and min_reward is not None and final < min_reward:
        reason = f"final reward {final:g} is below --min-reward {min_reward:g}"
    lines = [] if reason else session_trajectories(source, events, template)
    if not reason and not lines:
        reason = "the policy wrote nothing in it"
    if reason:
        summary.skipped.append((path.parent.name, reason))
    summary.exported += bool(lines)
    summary.lines += len(lines)
    summary.tokens += sum(line["stats"]["tokens"] for line in lines)
    summary.policy_tokens += sum(line["stats"]["policy_tokens"] for line in lines)
    return lines


class Workdirs:
    """Each workdir's ledger and task, read once."""

    def __init__(self, summary: Summary):
        self.summary, self.kernels, self.problems = summary, {}, {}

    def problem(self, workdir: Path) -> str:
        """Why the workdir's sessions cannot be vouched for ("" when they can)."""
        if workdir not in self.kernels and workdir not in self.problems:
            self._read(workdir)
        return self.problems.get(workdir, "")

    def source(self, path: Path, workdir: Path) -> Source:
        return Source(path, workdir, task_of(workdir), self.kernels[workdir])

    def _read(self, workdir: Path) -> None:
        try:
            self.kernels[workdir], notes = vouched_kernels(workdir)
        except BadInput as err:
            self.problems[workdir] = f"its workdir's ledger cannot be read: {err.message}"
            return
        self.summary.notes += [f"{workdir}: {note}" for note in notes]


@contextlib.contextmanager
def replaced_whole(out: Path) -> Iterator[IO[str]]:
    """A file written aside and moved onto out when the block ends well; removed when it fails."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, aside = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            yield file
        os.replace(aside, out)
    finally:
        Path(aside).unlink(missing_ok=True)
