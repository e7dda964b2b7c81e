"""What the session keeps across turns: attempt snapshots, evaluations, the best kernel, and
the git commits of each new best.

The first kernel that verifies is committed whatever its speed. After that a profiled kernel
is committed only when its speed-up over eager beats the best so far by more than the noise:
the larger of a fixed floor and half the relative p10-p90 spread of its own timings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelsmith import HARNESS_VERSION
from kernelsmith.agent.tools import Outcome
from kernelsmith.backends.base import ToolCall
from kernelsmith.errors import BadInput
from kernelsmith.gitops import TRAILER_SESSION, KernelRepo
from kernelsmith.session.recorder import Recorder

EVAL_TOOLS = ("compile", "verify", "profile")


@dataclass
class Best:
    sha: str
    turn: int
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    reward: float


class Progress:
    def __init__(self, repo: KernelRepo, recorder: Recorder, noise: float, best: Best | None = None,
                 attempts: int = 0):
        self.repo, self.recorder, self.noise = repo, recorder, noise
        self.best, self.attempts = best, attempts

    @property
    def session_id(self) -> str:
        return self.recorder.session_id

    def after_tool(self, call: ToolCall, outcome: Outcome, turn: int) -> Outcome:
        """Snapshot and record an evaluation; commit a new best. Returns the outcome, annotated."""
        if call.name not in EVAL_TOOLS or outcome.eval is None:
            return outcome
        self.attempts += 1
        try:
            snap = self.repo.snapshot_attempt(self.session_id, self.attempts, f"{call.name} at turn {turn}")
            self.recorder.emit("attempt", turn=turn, attempt=self.attempts, ref=self._ref(), sha=snap)
        except BadInput as err:  # a git lock in the way: the attempt goes unrecorded, the session goes on
            outcome.content += f"\nattempt not recorded: {err}"
        self.recorder.emit("eval_result", turn=turn, tool=call.name, attempt=self.attempts, result=outcome.eval)
        if call.name != "compile" and outcome.ok and self._is_new_best(call.name, outcome.eval):
            try:
                self._commit(outcome.eval, turn)
            except BadInput as err:  # e.g. a file over the size cap: the agent reads why and can fix it
                outcome.content += f"\nnot committed: {err}"
            if self.repo.index_note:
                outcome.content += f"\n{self.repo.index_note}"
        outcome.content += "\n" + self.best_line()
        return outcome

    def _ref(self) -> str:
        return f"refs/kernelsmith/attempts/{self.session_id}/{self.attempts:04d}"

    def _is_new_best(self, tool: str, result: dict[str, Any]) -> bool:
        if self.best is None:
            return True  # the session's first working version
        new = result.get("speedup_vs_eager")
        if tool != "profile" or new is None or result.get("contended"):
            return False  # a busy machine's numbers commit no "faster" kernel
        if self.best.speedup_vs_eager is None:
            return True  # the first kernel with a measured speed
        return new > self.best.speedup_vs_eager * (1 + self.margin(result))

    def margin(self, result: dict[str, Any]) -> float:
        spread = (result.get("spread_ms") or {}).get("candidate")
        median = (result.get("timings_ms") or {}).get("candidate")
        measured = (spread[1] - spread[0]) / median / 2 if spread and median else 0.0
        return max(self.noise, measured)

    def _commit(self, result: dict[str, Any], turn: int) -> None:
        eager, comp = result.get("speedup_vs_eager"), result.get("speedup_vs_compile")
        summary = (f"kernelsmith: {_x(eager)} vs eager, {_x(comp)} vs torch.compile (turn {turn})"
                   if eager is not None else f"kernelsmith: first verified kernel (turn {turn})")
        trailers = {TRAILER_SESSION: self.session_id, "Speedup-Vs-Eager": _x(eager),
                    "Speedup-Vs-Compile": _x(comp), "Reward": f"{result.get('reward', -1):g}",
                    "Turn": str(turn), "Attempt": str(self.attempts), "GPU": result.get("gpu") or result.get("device", ""),
                    "Precision": result.get("precision", ""), "Harness-Version": HARNESS_VERSION,
                    "Jail": result.get("jail") or "unknown"}
        # The kernel may be the one committed when it first verified: the commit then only
        # records its first measured speed, so the log and the review UI show it.
        unchanged = not self.repo.has_kernel_changes()
        sha = self.repo.commit_kernel(summary, _body(result) + ("\nThe code is unchanged from the previous commit; "
                                      "this commit records its measured speed." if unchanged else ""),
                                      trailers, allow_empty=unchanged)
        self.best = Best(sha, turn, eager, comp, float(result.get("reward", -1)))
        self.recorder.emit("commit", turn=turn, sha=sha, summary=summary, speedup_vs_eager=eager,
                           speedup_vs_compile=comp, reward=self.best.reward, attempt=self.attempts)

    def best_line(self) -> str:
        if self.best is None:
            return "best so far: none (nothing has verified yet)"
        b = self.best
        speed = (f"{_x(b.speedup_vs_eager)} vs eager, {_x(b.speedup_vs_compile)} vs compile"
                 if b.speedup_vs_eager is not None else "verified, not yet profiled")
        return f"best so far: {speed} (commit {b.sha[:8]}, turn {b.turn})"


def _x(value) -> str:
    return "n/a" if value is None else f"{value:.3f}x"


def _body(result: dict[str, Any]) -> str:
    t = result.get("timings_ms") or {}
    lines = [f"Verified on {result.get('device')} at {result.get('precision')} over "
             f"{len(result.get('trials') or [])} trials with fresh inputs and weights."]
    if t:
        lines.append(f"Median times: candidate {t.get('candidate')} ms, eager {t.get('eager')} ms, "
                     f"torch.compile {t.get('compile')} ms.")
    return "\n".join(lines)
