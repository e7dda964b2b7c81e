"""Trial seeds (torch-free, so the parent can draw them)."""

from __future__ import annotations

import os
import random


def trial_seeds(n: int, base: int | None = None) -> list[dict]:
    """Distinct, unpredictable seeds for the weights and the inputs of each trial."""
    rng = random.Random(base if base is not None else int.from_bytes(os.urandom(8), "little"))
    return [{"weights": rng.randrange(1, 2**62), "inputs": rng.randrange(1, 2**62)} for _ in range(n)]
