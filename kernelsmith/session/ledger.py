"""The ledger of the commits kernelsmith made: what makes a commit a kernel commit.

Trailers only say what a commit claims, and anything that can run git can write them (the agent's
`bash` tool did, claiming 97x). So kernelsmith appends one entry to .kernelsmith/ledger.jsonl for
every commit it makes (and every accept), and `log`, `review`, `accept`, `revert` and `export`
take a commit only when the ledger has it, with the summary, trailers and tree recorded there.

Each entry is signed with HMAC-SHA256 under a key in the user's config folder
($XDG_CONFIG_HOME/kernelsmith/ledger.key, else ~/.config/...), outside every workdir and hidden
from the jail. The jail already hides .kernelsmith/ from the agent; where no jail can be made,
the agent can delete or truncate entries, but it cannot add one without reading the key.

Each entry also names the task it was made for (the sealed reference's sha256): a genuine entry
copied into another workdir's ledger, with the commit fetched along, is not that workdir's kernel.
Entries of version 1 (before 2026-12-02) carry no task and are read as before.

A marker per workdir beside the key (ledgers/<hash of the workdir's path>) says that a ledger
was started there, so a deleted ledger reads as empty, never as a workdir from before ledgers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith.errors import BadInput

VERSION = 2
LEDGER_FILE = "ledger.jsonl"
KEY_FILE = "ledger.key"
TRUSTED_KEYS_DIR = "trusted-keys"  # keys of other machines whose workdirs this user reviews


def config_dir() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "kernelsmith"


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:16]


def own_key() -> bytes:
    """This user's signing key, made on first use (0600, in a 0700 folder)."""
    path = config_dir() / KEY_FILE
    if not path.exists():
        _create_key(path)
    return _read_key(path)


def _create_key(path: Path) -> None:
    try:
        _write_new_key(path)
    except OSError as err:
        raise BadInput(f"cannot make the ledger key {path}: {err.strerror}",
                       "kernelsmith signs its commits with it; set XDG_CONFIG_HOME to a folder you can write") from None


def _write_new_key(path: Path) -> None:
    """Written aside and linked into place, so a racing process reads a whole key or makes its own."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    aside = path.with_name(f".{KEY_FILE}.{os.getpid()}.{os.urandom(6).hex()}")  # per process and thread
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(os.urandom(32).hex() + "\n")
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(aside, path)
    except FileExistsError:
        pass  # another process made it first: use theirs
    finally:
        os.unlink(aside)


def _read_key(path: Path) -> bytes:
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        raise BadInput(f"the ledger key {path} is unreadable or damaged",
                       "restore it from a backup; without it no kernel commit of this user can be checked") from None


def trusted_keys() -> dict[str, bytes]:
    """key id -> key: this user's own, and those copied into trusted-keys/ from other machines."""
    keys = [own_key()]
    folder = config_dir() / TRUSTED_KEYS_DIR
    if folder.is_dir():
        keys += [_read_key(path) for path in sorted(folder.iterdir()) if path.is_file()]
    return {key_id(key): key for key in keys}


def _canonical(entry: dict) -> bytes:
    body = {k: v for k, v in entry.items() if k != "mac"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sign(entry: dict, key: bytes) -> dict:
    signed = {**entry, "key": key_id(key)}
    return {**signed, "mac": hmac.new(key, _canonical(signed), hashlib.sha256).hexdigest()}


def verified(entry: dict, keys: dict[str, bytes]) -> bool:
    key = keys.get(entry.get("key", ""))
    mac = entry.get("mac")
    return key is not None and isinstance(mac, str) and hmac.compare_digest(
        mac, hmac.new(key, _canonical(entry), hashlib.sha256).hexdigest())


@dataclass
class Reading:
    entries: list[dict] = field(default_factory=list)  # verified, in the order written
    foreign_keys: set[str] = field(default_factory=set)  # key ids of entries signed by an untrusted key
    forged: int = 0  # lines that are not a well-signed entry


class Ledger:
    def __init__(self, workdir: Path):
        self.root = Path(workdir)
        self.path = self.root / ".kernelsmith" / LEDGER_FILE
        self.marker = config_dir() / "ledgers" / hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:32]
        self.task = _task_identity(self.root)

    def is_legacy(self) -> bool:
        """A workdir that kernelsmith never kept a ledger for (made before ledgers existed)."""
        return not self.path.exists() and not self.marker.exists()

    def read(self) -> Reading:
        reading, keys = Reading(), trusted_keys()
        for line in self._lines():
            entry = _parsed(line)
            if entry is not None and verified(entry, keys) and self._ours(entry):
                reading.entries.append(entry)
            elif entry is not None and entry.get("key") not in keys and "mac" in entry:
                reading.foreign_keys.add(str(entry.get("key")))
            else:
                reading.forged += 1
        return reading

    def _ours(self, entry: dict) -> bool:
        """Made for this workdir's task (version 1 entries named none)."""
        return entry.get("v") == 1 or entry.get("task") == self.task

    def _lines(self) -> list[str]:
        try:
            return self.path.read_bytes().decode("utf-8", errors="replace").split("\n")
        except FileNotFoundError:
            return []
        except OSError as err:
            raise BadInput(f"cannot read the ledger {self.path}: {err.strerror}") from None

    def append(self, entries: list[dict]) -> None:
        """Sign and append entries (each one whole line, fsynced), and mark the workdir as kept."""
        key = own_key()
        lines = "".join(json.dumps(sign({"v": VERSION, "t": round(time.time(), 3), "task": self.task, **e}, key)) + "\n"
                        for e in entries)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, lines.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        self._mark()

    def _mark(self) -> None:
        if not self.marker.exists():
            self.marker.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.marker.write_text(str(self.root.resolve()) + "\n")


def _task_identity(root: Path) -> str:
    """The sealed reference's sha256 from the workdir's config ("" where there is none)."""
    try:
        return str(json.loads((root / ".kernelsmith" / "config.json").read_text()).get("reference_sha256") or "")
    except (OSError, ValueError, AttributeError):
        return ""


def _parsed(line: str) -> dict | None:
    if not line.strip():
        return None
    try:
        entry = json.loads(line)
    except json.JSONDecodeError:
        return {}  # a torn or hand-made line: counted as forged
    return entry if isinstance(entry, dict) else {}
