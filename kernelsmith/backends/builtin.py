"""The built-in backend: a small kernel compiler with search, driving the same tools an LLM
uses. Each call to `complete` reads the structured part of the last tool results (KernelEnv's
observations: the build, the EvalResult, the budget; never their text) and returns the next turn:

1. plan: capture the graph, partition it, generate a kernel per group, write the files, compile;
2. profile the first version (verify, then time it against eager and torch.compile);
3. search: for each kernel with several launch variants, try each one (model_new.py changes,
   kernels/ does not) and keep the fastest; every new best is committed by the loop;
4. write back the best configuration and finish.
What it cannot generate is reported as unsupported, never replaced by torch ops. With
`one_call_per_reply` (a teacher for a student whose window is small) a turn's calls go out one reply
each, so the loop can compact between them; the phase that reads their results runs after the last.
With a reply cap too (`max_reply_tokens`: the student's longest reply) a file whose reply would be longer is
written in parts at line ends, the first by write_file and the rest appended (`write_file(append=true)`).

The compiler it drives is kernelsmith.compiler (it imports torch, so it is imported only when a
session plans); this module is the search.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernelsmith.backends.base import BackendBase, Reply, ToolCall, ToolSpec, Usage

TURNS_TO_FINISH = 1  # the turn that writes the best configuration back and finishes
REPLY_MARGIN = 32  # tokens of a reply around its call's JSON: the <tool_call> tags and the end of turn
CHARS_PER_TOKEN = 1.5  # the estimate where no tokenizer counts: SmolLM2 spends 1.9-2.6 on the calls' JSON


@dataclass
class Candidate:
    configs: list[int]
    label: str
    change: tuple[int, int] = (0, 0)  # (kernel, variant) it changes from the best so far


@dataclass
class SearchState:
    plan: object = None
    variants: list[list[str]] = field(default_factory=list)
    best: list[int] = field(default_factory=list)
    best_speedup: float | None = None
    verified: bool = False  # whether `best` has verified (the defaults may not)
    queue: list[tuple[int, int]] = field(default_factory=list)
    retry: list[tuple[int, int]] = field(default_factory=list)  # failed while no configuration had verified
    trying: Candidate | None = None
    phase: str = "plan"


class BuiltinBackend(BackendBase):
    name = "builtin"

    def __init__(self, model: str = "builtin", one_call_per_reply: bool = False, max_reply_tokens: int | None = None,
                 text_tokens: Callable[[str], int] | None = None, **_ignored):
        self.model = model
        self.workdir: Path | None = None
        self.device, self.precision = "cpu", "fp32"
        self.state = SearchState()
        self.calls = 0
        self.one_call_per_reply = one_call_per_reply
        self.queued: list[tuple[str, dict]] = []  # a turn's calls not yet sent (one_call_per_reply)
        self.max_reply_tokens = max_reply_tokens if one_call_per_reply else None
        self.text_tokens = text_tokens or (lambda text: int(len(text) / CHARS_PER_TOKEN) + 1)

    def bind(self, workdir: Path, device: str, precision: str) -> None:
        """The workdir the session runs in: the policy reads model.py from it."""
        self.workdir, self.device, self.precision = Path(workdir), device, precision

    def complete(self, system: str, messages: list[dict], tools: list[ToolSpec], on_text=None) -> Reply:
        self.calls += 1
        text, calls = self._turn(messages)
        if on_text and text:
            on_text(text)
        tool_calls = [ToolCall(f"b{self.calls}_{i}", name, args) for i, (name, args) in enumerate(calls)]
        return Reply(text, tool_calls, Usage(), stop_reason="builtin", model=self.model)

    def _turn(self, messages: list[dict]) -> tuple[str, list[tuple[str, dict]]]:
        """The next queued call, or the phase's next turn (its first call only, the rest queued, when one call
        goes out per reply)."""
        if self.queued:
            return "", [self.queued.pop(0)]
        results = _last_observations(messages)
        text, calls = getattr(self, f"_{self.state.phase}")(results, _turns_left(results, self.one_call_per_reply))
        if self.one_call_per_reply:
            calls = self._in_parts(text, calls) if self.max_reply_tokens else calls
            calls, self.queued = calls[:1], calls[1:]
        return text, calls

    def _in_parts(self, text: str, calls: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
        """Each write_file whose reply would pass the cap as parts that fit (the first reply also holds `text`)."""
        out: list[tuple[str, dict]] = []
        cap = self.max_reply_tokens - REPLY_MARGIN
        for name, args in calls:
            room = max(cap - (self.text_tokens(text) if not out and text else 0), cap // 2)  # texts are a line or two
            if name != "write_file" or self._reply_tokens(name, args) <= room:
                out.append((name, args))
                continue
            counted = lambda part: self._reply_tokens(name, {**args, "content": part, "append": True})  # noqa: E731
            parts = _parts(args["content"], counted, room)
            out += [(name, {**args, "content": part, **({"append": True} if i else {})})
                    for i, part in enumerate(parts)]
        return out

    def _reply_tokens(self, name: str, args: dict) -> int:
        """A call's tokens as a chat template writes it (transformers' tojson is json.dumps, not HTML-escaped)."""
        return self.text_tokens(json.dumps({"name": name, "arguments": args}, ensure_ascii=False))

    # --- phases: each returns (text, [(tool, arguments), ...]) ------------------------------------

    def _reference(self):
        """The sealed reference of a workdir (not its model.py view); a plain folder's model.py."""
        from kernelsmith import workdir as wd

        if not (self.workdir / wd.STATE_DIR / "config.json").is_file():
            return self.workdir / "model.py"
        return wd.sealed_reference(self.workdir, wd.WorkdirConfig.load(self.workdir))

    def _plan(self, results, turns_left):
        from kernelsmith.compiler import pipeline

        built = pipeline.build_plan(self._reference(), self.device, self.precision)
        if built.unsupported:
            return self._give_up("This task is outside what the built-in policy generates yet: "
                                 + "; ".join(built.unsupported))
        self.state.plan, self.state.variants = built.plan, built.variants
        self.state.best = [0] * len(built.variants)
        self.state.phase = "compiled"
        writes = [("write_file", {"path": f"kernels/{name}", "content": text}) for name, text in built.files.items()]
        writes.append(("write_file", {"path": "model_new.py", "content": built.model_new(self.state.best)}))
        clear = ("bash", {"command": "rm -f kernels/example_scale*"})
        return f"Plan: {built.summary} Writing the kernels and compiling.", [clear, *writes, ("compile", {})]

    def _compiled(self, results, turns_left):
        build = (results.get("compile") or {}).get("build") or {}
        if not build.get("ok"):
            return self._give_up("The generated kernels did not compile (a bug in the built-in policy):\n"
                                 + str(build.get("summary") or "no build result")[:1500])
        self.state.phase = "profiled"
        return "Built. Profiling the first version (verify, then time against eager and torch.compile).", \
            [("profile", {})]

    def _profiled(self, results, turns_left):
        result = (results.get("profile") or {}).get("eval") or {}
        if not result.get("clean"):
            if self.state.trying is not None:
                return self._next(False, None, turns_left, f"{self.state.trying.label} failed; skipping it.")
            why = ("The generated kernels did not verify (a bug in the built-in policy):\n"
                   + str(result.get("error") or "no evaluation result")[:1500])
            if not _candidates(self.state.variants):
                return self._give_up(why)
            return self._next(False, None, turns_left, why + "\nThe other launch variants may still verify.")
        return self._next(True, result.get("speedup_vs_eager"), turns_left)

    def _next(self, verified: bool, speedup: float | None, turns_left: int | None, note: str = ""):
        """Record the candidate just profiled, then try the next variant or finish."""
        st = self.state
        if st.trying is None:
            st.best_speedup, st.verified = speedup, verified
            st.queue = _candidates(st.variants)
        elif verified and (not st.verified or _faster(speedup, st.best_speedup)):
            if not st.verified:  # what failed beside a broken kernel may pass beside this one
                st.queue, st.retry = st.retry + st.queue, []
            st.best, st.best_speedup, st.verified = list(st.trying.configs), speedup, True
            note = f"{st.trying.label}: {_times(speedup)} vs eager, the best so far."
        elif verified:
            note = f"{st.trying.label}: {_times(speedup)} vs eager, not faster than {_times(st.best_speedup)}."
        elif not st.verified:
            st.retry.append(st.trying.change)
        st.queue = [(g, v) for g, v in st.queue if st.best[g] != v]
        if not st.queue or (turns_left is not None and turns_left <= TURNS_TO_FINISH):
            return self._finish(note)
        g, v = st.queue.pop(0)  # applied to the best so far, so improvements add up
        configs = list(st.best)
        configs[g] = v
        st.trying = Candidate(configs, f"{st.plan.groups()[g].name} variant {v} ({st.variants[g][v]})", (g, v))
        return (f"{note} Trying {st.trying.label}.".strip(),
                [("write_file", {"path": "model_new.py", "content": self._source(st.trying.configs)}),
                 ("profile", {})])

    def _finish(self, note: str):
        st = self.state
        speed = (f"{_times(st.best_speedup)} vs eager" if st.verified else "no variant verified")
        summary = (f"Built-in policy: {len(st.variants)} generated kernel(s), launch variants {st.best}, "
                   f"best {speed} (the committed kernel holds the verified numbers).")
        return (f"{note} Writing back the best configuration and finishing.".strip(),
                [("write_file", {"path": "model_new.py", "content": self._source(st.best)}),
                 ("finish", {"summary": summary})])

    def _give_up(self, why: str):
        self.state.phase = "done"
        return why, [("finish", {"summary": why.splitlines()[0]})]

    def _done(self, results, turns_left):
        return "The session is over.", [("finish", {"summary": "nothing more to do"})]

    def _source(self, configs: list[int]) -> str:
        from kernelsmith.compiler.emit import model_new_source

        return model_new_source(self.state.plan, configs, self.state.variants)


def _parts(content: str, tokens: Callable[[str], int], room: int) -> list[str]:
    """`content` cut at line ends into pieces whose call counts at most `room` tokens (a longer line is cut inside);
    joined they are `content`. Lines are counted one by one first, then each piece as a whole."""
    overhead = tokens("")
    pieces, piece, used = [], "", 0
    for line in content.splitlines(keepends=True):
        cost = tokens(line) - overhead
        if piece and used + cost > room - overhead:
            pieces.append(piece)
            piece, used = "", 0
        piece, used = piece + line, used + cost
    pieces.append(piece)
    return [small for piece in pieces for small in _fit(piece, tokens, room)]


def _fit(piece: str, tokens: Callable[[str], int], room: int) -> list[str]:
    """`piece` as it is where it fits, else halved (at a line end where it has several lines) until each half fits."""
    if tokens(piece) <= room or len(piece) < 2:
        return [piece]
    lines = piece.splitlines(keepends=True)
    cut = len("".join(lines[:len(lines) // 2])) if len(lines) > 1 else len(piece) // 2
    return _fit(piece[:cut], tokens, room) + _fit(piece[cut:], tokens, room)


def _faster(speedup: float | None, than: float | None) -> bool:
    return speedup is not None and (than is None or speedup > than)


def _times(speedup: float | None) -> str:
    return f"{speedup:.3f}x" if speedup is not None else "untimed"


def _candidates(variants: list[list[str]]) -> list[tuple[int, int]]:
    """(kernel, variant) pairs other than each kernel's default: a coordinate search."""
    return [(g, v) for g, names in enumerate(variants) for v in range(1, len(names))]


def _last_observations(messages: list[dict]) -> dict[str, dict]:
    """The structured part of each tool result after the last assistant message, by tool name."""
    found: dict[str, dict] = {}
    for message in reversed(messages):
        if message.get("role") == "assistant":
            break
        if message.get("role") == "tool":
            found.setdefault(message.get("name", ""), message.get("observation") or {})
    return found


def _turns_left(observations: dict[str, dict], one_call_per_reply: bool = False) -> int | None:
    """Turns left, in the phases' unit: a turn of up to two calls (a write and a profile, or a write and finish),
    which takes two replies when one call goes out per reply."""
    for obs in observations.values():
        if (obs.get("budget") or {}).get("turns_left") is not None:
            left = int(obs["budget"]["turns_left"])
            return left // 2 if one_call_per_reply else left
    return None
