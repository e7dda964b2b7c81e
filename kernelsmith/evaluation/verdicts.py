"""Verify's passing verdicts, kept in the parent's memory and reused for an identical workdir.

An agent's turn is often compile, verify, then profile of the same files, and every profile verifies
first: the second verify of unchanged code repeats the first (5 trials, two workers) for nothing. A
verdict is reused only when nothing the agent can change and the candidate's process can read has
changed: the key hashes the content of every file of the candidate's folder (model_new.py, kernels/,
the build output in .kernelsmith/build, anything it might open), except what its jail hides (.git/,
the session records: jail.SESSION_DIRS) and files only kernelsmith writes (the ledger, the lock, the
baselines cache), with the sealed reference, the device, precision, trial count, fast-math flag, the
build's flags and architecture, and the slot's GPU. The store is this process's memory: no file the agent or a candidate could
write holds it. Without a jail the candidate may read files anywhere, which the key cannot cover, so
nothing is reused. A reused verdict does not skip the profile's own checks of the timed outputs on
fresh inputs (checksums recomputed by a trusted worker, spot checks): correctness is checked again
every profile.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import stat
import threading
from collections import OrderedDict
from pathlib import Path

from kernelsmith import HARNESS_VERSION
from kernelsmith.evaluation import runner
from kernelsmith.evaluation.options import EvalOptions
from kernelsmith.evaluation.result import EvalResult
from kernelsmith.sandbox import jail

KEPT = 64
MAX_FILES, MAX_BYTES = 10_000, 1 << 30  # past these the folder is not hashed: nothing is reused
# never seen by a candidate (hidden by its jail: jail.SESSION_DIRS), or written only by kernelsmith itself
SKIPPED = set(jail.SESSION_DIRS) | {".kernelsmith/ledger.jsonl", ".kernelsmith/lock", ".kernelsmith/baselines.json"}
_kept: OrderedDict[str, list[dict]] = OrderedDict()
_lock = threading.Lock()


def key(reference: Path, candidate: Path, opts: EvalOptions, build: dict) -> str | None:
    """What a verdict is valid for, or None when nothing may be reused: no jail, or a folder holding
    something but regular files and symlinks (a FIFO would block the hash), or too much to hash."""
    if not jail.status().jailed:
        return None
    digest = hashlib.sha256(json.dumps([HARNESS_VERSION, str(candidate), opts.device, opts.precision, opts.trials,
                                        opts.fast_math, build.get("flags"), build.get("arch"),
                                        runner.extra_env_now()], default=str).encode())
    files = _folder_files(candidate.parent)
    if files is None or (ref := _file_hash(reference)) is None:
        return None
    digest.update(ref)
    budget = [MAX_BYTES]
    for path in files:
        digest.update(str(path.relative_to(candidate.parent)).encode() + b"\0")
        content = os.readlink(path).encode() if path.is_symlink() else _file_hash(path, budget)
        if content is None:
            return None
        digest.update(content)
    return digest.hexdigest()


def _folder_files(root: Path) -> list[Path] | None:
    found = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if str((here / d).relative_to(root)) not in SKIPPED)
        found += [here / name for name in sorted(files) if str((here / name).relative_to(root)) not in SKIPPED]
        found += [here / d for d in dirs if (here / d).is_symlink()]  # not followed by walk
        if len(found) > MAX_FILES:
            return None
    return found


def _file_hash(path: Path, budget: list[int] | None = None) -> bytes | None:
    """The content's sha256, opened without blocking or following links; None for anything but a regular
    file, or past the byte budget."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None
        if budget is not None:
            budget[0] -= info.st_size
            if budget[0] < 0:
                return None
        digest = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.digest()


def remember(verdict_key: str | None, result: EvalResult) -> None:
    """Keep a passing verify's trials under its key."""
    if verdict_key is None or not result.clean:
        return
    with _lock:
        _kept[verdict_key] = copy.deepcopy(result.trials)
        _kept.move_to_end(verdict_key)
        while len(_kept) > KEPT:
            _kept.popitem(last=False)


def recall(verdict_key: str | None, result: EvalResult) -> bool:
    """Fill result with a kept verdict for this key; False when there is none."""
    with _lock:
        trials = copy.deepcopy(_kept.get(verdict_key)) if verdict_key is not None else None
    if trials is None:
        return False
    result.trials, result.correct = trials, True
    result.seconds["verify"] = 0.0
    result.notes.append("verify: the verdict of the identical files verified earlier in this session was reused; "
                        "the profile still checks the timed outputs on fresh inputs")
    return True


def forget() -> None:
    with _lock:
        _kept.clear()
