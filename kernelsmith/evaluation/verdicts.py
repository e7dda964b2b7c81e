"""Verify's passing verdicts, kept in the parent's memory and reused for an identical workdir.

An agent's turn is often compile, verify, then profile of the same files, and every profile verifies
first: the second verify of unchanged code repeats the first (5 trials, two workers) for nothing. A
verdict is reused only when nothing the candidate's process can read has changed: the key hashes the
content of every file of the candidate's folder (model_new.py, kernels/, anything it might open)
except .git/ and .kernelsmith/ (kernelsmith's own state, which neither the agent nor the jail can
write), with the sealed reference, the device, precision, trial count, fast-math flag and the build's
flags and architecture. The store is this process's memory: no file the agent or a candidate could
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
import threading
from collections import OrderedDict
from pathlib import Path

from kernelsmith import HARNESS_VERSION
from kernelsmith.evaluation.options import EvalOptions
from kernelsmith.evaluation.result import EvalResult
from kernelsmith.sandbox import jail

KEPT = 64
SKIPPED_DIRS = (".git", ".kernelsmith")
_kept: OrderedDict[str, list[dict]] = OrderedDict()
_lock = threading.Lock()


def key(reference: Path, candidate: Path, opts: EvalOptions, build: dict) -> str | None:
    """What a verdict is valid for, or None when nothing may be reused (no jail)."""
    if not jail.status().jailed:
        return None
    digest = hashlib.sha256(json.dumps([HARNESS_VERSION, str(candidate), opts.device, opts.precision, opts.trials,
                                        opts.fast_math, build.get("flags"), build.get("arch")], default=str).encode())
    digest.update(_file_hash(reference))
    for path in _folder_files(candidate.parent):
        digest.update(str(path.relative_to(candidate.parent)).encode() + b"\0")
        digest.update(os.readlink(path).encode() if path.is_symlink() else _file_hash(path))
    return digest.hexdigest()


def _folder_files(root: Path) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not (Path(folder) == root and d in SKIPPED_DIRS))
        found += [Path(folder) / name for name in sorted(files)]
        found += [Path(folder) / d for d in dirs if (Path(folder) / d).is_symlink()]  # not followed by walk
    return found


def _file_hash(path: Path) -> bytes:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as err:  # a socket, a FIFO, a file that vanished: its kind is what is hashed
        digest.update(f"unreadable: {type(err).__name__}".encode())
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
