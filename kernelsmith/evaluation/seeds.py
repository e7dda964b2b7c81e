"""Trial seeds and how trials are described (torch-free, so the parent can draw them).

A trial is {"weights": seed, "inputs": seed, "stress": None | stress}. The first n trials are
the normal ones (get_inputs() under the seed, as asked with --trials); after them come the
stressed trials, one per entry of STRESSES: the same kind of seeded inputs, every floating
input then scaled or shifted (integer and bool inputs are left alone). Why these stresses and
how they are judged: docs/tolerances.md.
"""

from __future__ import annotations

import hashlib
import os
import random

# "scale": every floating input times this power of two (exact, signs kept). 64 takes
# randn-sized inputs (|x| up to ~5) and the logits of a GEMM on them past 88.7, where fp32
# exp() overflows: a softmax or logsumexp without the max subtraction returns Inf/NaN.
# "shift": every floating input plus this many times its RMS (rounded to a power of two, so
# that both workers add the same number): +128 rms puts a mean far above the spread (what a
# cancelling formula meets) and also overflows an exp() without the max subtraction.
STRESSES = (
    {"name": "scaled x64", "scale": 64.0, "shift_rms": 0.0},
    {"name": "shifted +128 rms", "scale": 1.0, "shift_rms": 128.0},
)


def trial_seeds(n: int, base: int | None = None, stresses=STRESSES) -> list[dict]:
    """Distinct, unpredictable seeds for the weights and the inputs of n normal trials, then
    one stressed trial per stress (none when n is 0)."""
    rng = random.Random(base if base is not None else int.from_bytes(os.urandom(8), "little"))

    def draw(stress) -> dict:
        return {"weights": rng.randrange(1, 2**62), "inputs": rng.randrange(1, 2**62),
                "stress": dict(stress) if stress else None}

    normal = [draw(None) for _ in range(n)]
    return normal + ([draw(s) for s in stresses] if n else [])


def construct_seed(trials: list[dict]) -> int:
    """The seed ModelNew is constructed under: a hash of all the trials' seeds, so it is unlike
    any trial's weights seed and does not reveal one (torch.initial_seed() is readable)."""
    taken = {t["weights"] for t in trials}
    text = ",".join(f"{t['weights']}:{t['inputs']}" for t in trials)
    seed = int.from_bytes(hashlib.blake2b(("construct/" + text).encode(), digest_size=8).digest(), "little") >> 2
    while seed in taken or seed == 0:
        seed += 1
    return seed
