"""Recorded sessions shipped as test data, and how to lay one out as a real workdir.

Each folder holds what a real `kernelsmith optimize` run left (made with the scripted backend
on the CPU; see README.md here): `repo.bundle` (`git bundle create --all`: the branch, the
kernel commits and the attempt refs), `config.json` (the workdir's .kernelsmith/config.json)
and `events.jsonl` (the session record, unchanged)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SESSION_ID = {"triple": "20261130-091528-c5d471"}


def restore_workdir(name: str, dest: Path) -> Path:
    """A workdir at dest rebuilt from the recorded data: the same commits, refs and record."""
    data = HERE / name
    subprocess.run(["git", "clone", "-q", str(data / "repo.bundle"), str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "fetch", "-q", str(data / "repo.bundle"),
                    "refs/kernelsmith/*:refs/kernelsmith/*"], check=True)
    subprocess.run(["git", "-C", str(dest), "remote", "remove", "origin"], check=True)
    state = dest / ".kernelsmith"
    (state / "sessions" / SESSION_ID[name]).mkdir(parents=True)
    shutil.copyfile(data / "config.json", state / "config.json")
    shutil.copyfile(data / "events.jsonl", state / "sessions" / SESSION_ID[name] / "events.jsonl")
    return dest
