"""What the review UI shows, read from session records and git (no Textual here, so it is easy
to test and to reuse): the sessions of a workdir, one session's timeline of turns, its
attempts and evaluations, the kernel commits, the best speed-up over turns, and diffs.

It reads kernelsmith.session and calls kernelsmith.gitops; it never imports the agent or the
backends (tests/test_tui_imports.py checks)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith.errors import BadInput
from kernelsmith.gitops import KERNEL_PATHS, NOTES_FILES, KernelRepo, kernel_row
from kernelsmith.session.reader import SessionState, fold, read_events, session_paths  # noqa: F401 (session_paths: for the app)
from kernelsmith.session.recorder import sessions_dir


@dataclass
class Entry:
    """One row of the timeline: a model reply, a tool call's result, an evaluation, a commit..."""

    turn: int
    kind: str
    status: str  # "ok", "fail", "" (neutral)
    title: str
    detail: str
    attempt: int | None = None


@dataclass
class Session:
    session_id: str
    path: Path
    state: SessionState
    entries: list[Entry] = field(default_factory=list)
    attempts: list[dict] = field(default_factory=list)
    size: int = 0

    @property
    def status(self) -> str:
        if self.state.end is None:
            return "running or killed"
        return f"ended: {self.state.end['reason']}"

    @property
    def best_text(self) -> str:
        best = self.state.best
        if best is None:
            return "none"
        eager = best.get("speedup_vs_eager")
        return f"{eager:.2f}x" if eager is not None else "verified"


def locate(target: Path | None) -> tuple[Path, str | None]:
    """(workdir, session id or None) from a workdir, a session folder or an events.jsonl path."""
    path = Path(target or Path.cwd()).resolve()
    if path.is_file() and path.name == "events.jsonl":
        path = path.parent
    if path.parent.name == "sessions" and path.parent.parent.name == ".kernelsmith":
        return path.parent.parent.parent, path.name
    if not path.is_dir():
        raise BadInput(f"{path} is neither a workdir nor a session record",
                       "give a workdir, a session folder or its events.jsonl")
    return path, None


def load_sessions(workdir: Path) -> list[Session]:
    """Every session of the workdir, oldest first."""
    return [load_session(path) for path in session_paths(workdir)]


def load_session(path: Path) -> Session:
    events = distrust_forged_commits(read_events(path), path)
    state = fold(events)
    session = Session(session_id=path.parent.name, path=path, state=state, size=path.stat().st_size)
    session.entries = timeline(events)
    session.attempts = attempts(events)
    return session


def distrust_forged_commits(events: list[dict], path: Path) -> list[dict]:
    """A commit event counts only when kernelsmith's ledger has its sha: without a jail the agent
    could have written the record too. Any other is shown as a claim, never as a best."""
    trusted = _kernel_shas(path)
    if trusted is None:
        return events
    return [e if e["kind"] != "commit" or e.get("sha") in trusted else {**e, "kind": "forged_commit"}
            for e in events]


def _kernel_shas(path: Path) -> set[str] | None:
    """The kernel commits of the workdir that holds the record <workdir>/.kernelsmith/sessions/<id>/events.jsonl."""
    state_dir = Path(path).resolve().parent.parent.parent
    if state_dir.name != ".kernelsmith":
        return None
    try:
        return KernelRepo(state_dir.parent).kernel_shas()
    except BadInput:  # not a git repository: there are no commits to show either
        return None


def find_session_id(workdir: Path, prefix: str) -> str:
    """The one session id starting with prefix (the CLI's rule for ids)."""
    ids = [p.parent.name for p in session_paths(workdir) if p.parent.name.startswith(prefix)]
    if len(ids) != 1:
        raise BadInput(f"{'no' if not ids else len(ids)} session(s) matching {prefix!r} in {sessions_dir(workdir)}")
    return ids[0]


# -- the timeline ----------------------------------------------------------------------------------

def timeline(events: list[dict]) -> list[Entry]:
    entries: list[Entry] = []
    for event in events:
        make = _ENTRY.get(event["kind"])
        if make:
            entries.extend(make(event))
    return entries


def _model_turn(e: dict) -> list[Entry]:
    message = e["message"]
    calls = message.get("tool_calls") or []
    names = ", ".join(call["name"] for call in calls)
    text = (message.get("content") or "").strip()
    title = (text.splitlines()[0] if text else "(no text)") + (f"  -> {names}" if names else "")
    detail = text + "".join(f"\n\n-> {call['name']}({_args(call.get('arguments') or {})})" for call in calls)
    return [Entry(e["turn"], "model", "", title, detail)]


def _args(args: dict) -> str:
    return ", ".join(f"{key}=" + (value if isinstance(value, str) and "\n" in value else repr(value))
                     for key, value in args.items())


def _tool_result(e: dict) -> list[Entry]:
    content = e["content"].strip()
    first = content.splitlines()[0] if content else ""
    return [Entry(e["turn"], e["name"], "ok" if e["ok"] else "fail", first, content)]


def _eval_result(e: dict) -> list[Entry]:
    result = e["result"]
    ok = _eval_ok(e["tool"], result)
    return [Entry(e["turn"], f"{e['tool']} result", "ok" if ok else "fail", eval_summary(e["tool"], result),
                  eval_log(e["tool"], result), attempt=e["attempt"])]


def _commit(e: dict) -> list[Entry]:
    return [Entry(e["turn"], "commit", "ok", f"{e['sha'][:8]} {e['summary']}", json.dumps(e, indent=2))]


def _simple(kind: str, status: str, title, detail=lambda e: json.dumps(e, indent=2, ensure_ascii=False)):
    return lambda e: [Entry(e.get("turn", e.get("from_turn", 0)), kind, status, title(e), detail(e))]


_ENTRY = {
    "session_start": _simple("start", "", lambda e: f"session {e['session_id']} on {e['task']} "
                             f"({e['config'].get('device')}, {e['config'].get('backend')})",
                             lambda e: json.dumps(e["config"], indent=2) + "\n\n" + e.get("system", "")),
    "model_turn": _model_turn,
    "tool_result": _tool_result,
    "eval_result": _eval_result,
    "commit": _commit,
    "forged_commit": _simple("commit?", "fail", lambda e: f"{str(e.get('sha'))[:8]} is not a commit kernelsmith "
                             f"made (not in its ledger): ignored"),
    "user_message": _simple("nudge", "", lambda e: e["content"].splitlines()[0] if e["content"] else "",
                            lambda e: e["content"]),
    "compaction": _simple("compaction", "", lambda e: f"context {e['before_tokens']:,} -> {e['after_tokens']:,} tokens"),
    "resume": _simple("resume", "", lambda e: f"resumed after turn {e['from_turn']}"),
    "error": _simple("error", "fail", lambda e: e["message"]),
    "session_end": _simple("end", "", lambda e: f"ended: {e['reason']}"),
}


def _eval_ok(tool: str, result: dict) -> bool:
    if tool == "compile":
        return bool((result.get("build") or {}).get("ok"))
    return bool(result.get("correct")) and not result.get("violations")


def eval_summary(tool: str, result: dict) -> str:
    """One line: build ok/failed, correct/rejected, speed-ups."""
    build = result.get("build") or {}
    if tool == "compile":
        return (f"built in {build.get('seconds', 0):.1f} s" if build.get("ok")
                else "build failed: " + (build.get("summary") or "").splitlines()[0] if build.get("summary") else "build failed")
    if not _eval_ok(tool, result):
        return (result.get("error") or "rejected").splitlines()[0]
    eager, comp = result.get("speedup_vs_eager"), result.get("speedup_vs_compile")
    speed = "" if eager is None else f", {eager:.2f}x vs eager" + ("" if comp is None else f", {comp:.2f}x vs compile")
    return f"correct, reward {result.get('reward', 0):g}{speed}"


def eval_log(tool: str, result: dict) -> str:
    """The full record of an evaluation: the summary, the build log and the result fields."""
    build = result.get("build") or {}
    parts = [eval_summary(tool, result)]
    if build.get("summary"):
        parts.append("build summary:\n" + build["summary"])
    if build.get("log"):
        parts.append("build log:\n" + build["log"])
    rest = {k: v for k, v in result.items() if k != "build"}
    if rest:
        parts.append("result:\n" + json.dumps(rest, indent=2, ensure_ascii=False, default=str))
    parts.append("build:\n" + json.dumps({k: v for k, v in build.items() if k != "log"}, indent=2, default=str))
    return "\n\n".join(parts)


# -- attempts, commits, the chart ------------------------------------------------------------------

def attempts(events: list[dict]) -> list[dict]:
    """Attempts in order: {"attempt", "turn", "tool", "ref", "sha", "ok", "summary", "log"}."""
    found: dict[int, dict] = {}
    for e in events:
        if e["kind"] == "attempt":
            found[e["attempt"]] = {"attempt": e["attempt"], "turn": e["turn"], "ref": e["ref"], "sha": e["sha"],
                                   "tool": "", "ok": None, "summary": "(no result recorded)", "log": ""}
        elif e["kind"] == "eval_result" and e["attempt"] in found:
            found[e["attempt"]].update(tool=e["tool"], ok=_eval_ok(e["tool"], e["result"]),
                                       summary=eval_summary(e["tool"], e["result"]),
                                       log=eval_log(e["tool"], e["result"]))
    return [found[n] for n in sorted(found)]


def commit_rows(repo: KernelRepo, session_id: str | None = None) -> list[dict]:
    """Kernel commits on the branch (newest first) as gitops.kernel_row dicts."""
    return [kernel_row(c) for c in repo.kernel_commits(session_id)]


def best_over_turns(session: Session) -> list[tuple[int, float | None]]:
    """(turn, best speed-up vs eager so far) for each turn 1..last; None until one is measured."""
    by_turn: dict[int, float] = {}
    for commit in session.state.commits:
        if commit.get("speedup_vs_eager") is not None:
            by_turn[commit["turn"]] = commit["speedup_vs_eager"]
    series, best = [], None
    for turn in range(1, session.state.turn + 1):
        best = by_turn.get(turn, best)
        series.append((turn, best))
    return series


def diff(repo: KernelRepo, base: str, head: str) -> str:
    """The kernel files (model_new.py, kernels/, notes) of head against base."""
    base, head = repo.resolve(base), repo.resolve(head)
    text = repo.git.diff(base, head, "--", *KERNEL_PATHS, *NOTES_FILES)
    return text or f"no differences in model_new.py, kernels/ or notes between {base[:8]} and {head[:8]}"


def sparkline(values: list[float | None], width: int = 70) -> str:
    """One block per value (the last `width`), scaled between the lowest and highest; · for None."""
    values = values[-width:]
    measured = [v for v in values if v is not None]
    if not measured:
        return "·" * len(values)
    low, high = min(measured), max(measured)
    blocks = "▁▂▃▄▅▆▇█"
    scale = (len(blocks) - 1) / (high - low) if high > low else 0
    return "".join("·" if v is None else blocks[round((v - low) * scale) if scale else -1] for v in values)
