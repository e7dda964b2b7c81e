"""EvalResult: the plain-data verdict of one evaluation (no torch import here).

This is the JSON contract of DESIGN.md that `eval --json`, the agent's tools,
the session record, the bench and the trainer all read.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelsmith import HARNESS_VERSION

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


@dataclass
class EvalResult:
    correct: bool = False
    violations: list[str] = field(default_factory=list)
    timings_ms: dict[str, float | None] = field(default_factory=dict)
    spread_ms: dict[str, list[float]] = field(default_factory=dict)
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    compile_mode: str | None = None
    reward: float = -1.0
    device: str = ""
    gpu: str = ""
    torch_version: str = ""
    precision: str = "fp32"
    harness_version: str = HARNESS_VERSION
    jail: str = ""  # the jail untrusted code ran in ("none: why" is a reduced guarantee)
    contended: str = ""  # why the timings cannot be credited (a busy machine, eager disagreeing), or ""
    stage: str = ""  # where it stopped: build, load, verify, profile, done
    error: str = ""  # readable reason when not correct
    build: dict[str, Any] = field(default_factory=dict)
    trials: list[dict[str, Any]] = field(default_factory=list)
    roofline: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    clock: dict[str, float] = field(default_factory=dict)  # the parent's clock's readings (checks.clock_readings)

    @property
    def clean(self) -> bool:
        return self.correct and not self.violations

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvalResult":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def reject(self, reason: str, stage: str | None = None) -> "EvalResult":
        """Mark as failed with a readable reason (keeps the first reason)."""
        self.correct = False
        self.error = self.error or reason
        if stage:
            self.stage = stage
        return self
