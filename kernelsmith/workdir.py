"""Layout and naming of a workdir (pure: no torch).

    model.py            the reference, read-only
    model_new.py        the candidate (ModelNew)
    kernels/            the agent's sources; one worked example to start from
    binding.cpp, binding_registry.h, build.py, verify.py, profile.py
                        fixed infrastructure (hashes kept; edits are violations)
    SKILL.md            rendered from skills/<device>/SKILL.md
    .kernelsmith/       config, build cache, baseline cache, session records (git-ignored)

The workdir is a git repository with an initial commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from kernelsmith import HARNESS_VERSION
from kernelsmith.errors import BadInput
from kernelsmith.task import TaskSource

TEMPLATES = Path(__file__).resolve().parent / "templates"
FIXED_FILES = ("binding.cpp", "binding_registry.h", "binding_light.h", "build.py", "verify.py", "profile.py")
WRITABLE = ("model_new.py", "kernels/", "notes.md")
DEVICES = ("cuda", "cpu")
STATE_DIR = ".kernelsmith"


@dataclass
class WorkdirConfig:
    task: str
    origin: str
    device: str
    precision: str
    harness_version: str = HARNESS_VERSION
    fixed: dict | None = None
    reference_sha256: str | None = None  # the sealed copy: .kernelsmith/sealed/<sha256>.py

    @classmethod
    def load(cls, workdir: Path) -> "WorkdirConfig":
        path = Path(workdir) / STATE_DIR / "config.json"
        if not path.is_file():
            raise BadInput(f"{workdir} is not a kernelsmith workdir (no {STATE_DIR}/config.json)",
                           "create one with: kernelsmith init TASK --workdir DIR")
        return cls(**json.loads(path.read_text()))


def packaged_text(folder: str, *parts: str) -> str:
    """A text file of skills/ or prompts/: packaged as kernelsmith.<folder>, or beside the
    package in a checkout."""
    try:
        return resources.files(f"kernelsmith.{folder}").joinpath(*parts).read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        return Path(__file__).resolve().parent.parent.joinpath(folder, *parts).read_text()


def skill_text(device: str) -> str:
    return packaged_text("skills", device, "SKILL.md")


def render_skill(device: str, task_name: str, precision: str, name: str = "SKILL.md") -> str:
    """The guide for a task (name BRIEF.md: its short form, for a model whose window cannot hold the guide)."""
    text = packaged_text("skills", device, name)
    return text.replace("{task_name}", task_name).replace("{device}", device).replace("{precision}", precision)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_target(workdir: Path) -> None:
    if workdir.exists() and not workdir.is_dir():
        raise BadInput(f"{workdir} exists and is not a folder")
    if workdir.is_dir() and any(workdir.iterdir()):
        raise BadInput(f"workdir {workdir} is not empty", "pick a new folder; kernelsmith never overwrites files")


def create(task: TaskSource, workdir: Path, device: str, precision: str = "fp32") -> WorkdirConfig:
    """Lay out a new workdir for task and commit it; refuses a non-empty folder."""
    if device not in DEVICES:
        raise BadInput(f"unknown device {device!r}", "use --device cuda or --device cpu")
    workdir = Path(workdir)
    _check_target(workdir)
    (workdir / "kernels").mkdir(parents=True, exist_ok=True)
    (workdir / STATE_DIR).mkdir()
    _write_files(task, workdir, device, precision)
    config = WorkdirConfig(task=task.name, origin=task.origin, device=device, precision=precision,
                           fixed={name: _sha256(workdir / name) for name in FIXED_FILES + ("model.py",)},
                           reference_sha256=_seal(workdir, task.source.encode()))
    (workdir / STATE_DIR / "config.json").write_text(json.dumps(asdict(config), indent=2) + "\n")
    _initial_commit(workdir, task.name)
    return config


def _seal(workdir: Path, source: bytes) -> str:
    """A content-addressed, read-only copy of the reference in .kernelsmith/sealed/, which neither the
    agent's tools nor the jailed candidate can write. Evaluations load the reference from it;
    the workdir's model.py is only a view, and a difference is a violation."""
    digest = hashlib.sha256(source).hexdigest()
    path = Path(workdir) / STATE_DIR / "sealed" / f"{digest}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or _sha256(path) != digest:
        path.unlink(missing_ok=True)
        path.write_bytes(source)
        path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    return digest


def sealed_reference(workdir: Path, config: WorkdirConfig) -> Path:
    """The sealed reference of a workdir. A workdir made before sealing is sealed now from the
    model.py its initial hash names; a sealed copy whose content no longer has its name is refused."""
    digest = config.reference_sha256 or (config.fixed or {}).get("model.py")
    if digest is None:
        raise BadInput(f"{workdir} records no reference hash", "re-create it with kernelsmith init")
    path = Path(workdir) / STATE_DIR / "sealed" / f"{digest}.py"
    if not path.is_file():
        model = Path(workdir) / "model.py"
        if not model.is_file() or _sha256(model) != digest:
            raise BadInput(f"{workdir}: the reference model.py no longer matches the hash recorded at init",
                           "the reference must not be edited; re-create the workdir from the original task")
        _seal(workdir, model.read_bytes())
    if _sha256(path) != digest:
        raise BadInput(f"{workdir}: the sealed reference {path.name} was altered", "re-create the workdir")
    return path


def _write_files(task: TaskSource, workdir: Path, device: str, precision: str) -> None:
    model = workdir / "model.py"
    model.write_text(task.source)
    model.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)  # the reference is read-only
    for name in ("binding.cpp", "binding_registry.h", "binding_light.h"):
        (workdir / name).write_text((TEMPLATES / name).read_text())
    for name in ("build.py", "verify.py", "profile.py", "model_new.py"):
        (workdir / name).write_text((TEMPLATES / "workdir" / name).read_text())
    for name in ("build.py", "verify.py", "profile.py"):
        (workdir / name).chmod(0o755)
    (workdir / ".gitignore").write_text((TEMPLATES / "workdir" / "gitignore").read_text())
    for example in sorted((TEMPLATES / device).iterdir()):
        (workdir / "kernels" / example.name).write_text(example.read_text())
    (workdir / "SKILL.md").write_text(render_skill(device, task.name, precision))


def _initial_commit(workdir: Path, task_name: str) -> None:
    import git

    repo = git.Repo.init(workdir)
    with repo.config_writer() as cfg:
        if not _has_identity(repo):
            cfg.set_value("user", "name", "kernelsmith")
            cfg.set_value("user", "email", "kernelsmith@localhost")
    # git plumbing with an explicit cwd, not repo.index.add: GitPython's index methods chdir the
    # whole process, which breaks other threads (the bench creates workdirs in parallel)
    from kernelsmith.gitops import SafeGit

    git_safe = SafeGit(workdir)  # no hooks, fsmonitor or signing of the user's run on kernelsmith's commit
    git_safe.add("--", *workdir_files(workdir))
    git_safe.commit("-q", "--no-verify", "-m", f"kernelsmith: new workdir for {task_name}\n\n"
                    f"Kernelsmith-Harness: {HARNESS_VERSION}")


def _has_identity(repo) -> bool:
    try:
        reader = repo.config_reader()
        return bool(reader.get_value("user", "name", "")) and bool(reader.get_value("user", "email", ""))
    except Exception:
        return False


def workdir_files(workdir: Path) -> list[str]:
    """The workdir's own files, relative: not .git, .kernelsmith or caches."""
    files = []
    for root, dirs, names in os.walk(workdir):
        dirs[:] = [d for d in dirs if d not in (".git", STATE_DIR, "__pycache__")]
        files += [os.path.relpath(os.path.join(root, n), workdir) for n in names]
    return sorted(files)


def fixed_file_changes(workdir: Path, config: WorkdirConfig) -> list[str]:
    """Violations for fixed infrastructure or the reference that no longer match the initial commit; the
    reference's view is compared with the sealed copy's hash."""
    changed = []
    expected = {**(config.fixed or {}), **({"model.py": config.reference_sha256} if config.reference_sha256 else {})}
    for name, digest in expected.items():
        path = Path(workdir) / name
        if not path.is_file() or _sha256(path) != digest:
            what = "the reference model.py" if name == "model.py" else f"fixed infrastructure file {name}"
            changed.append(f"{what} was modified (it must not be edited)")
    return changed


def is_writable(relpath: str) -> bool:
    """Whether the agent may write this workdir-relative path."""
    norm = os.path.normpath(relpath)
    if norm.startswith("..") or os.path.isabs(norm):
        return False
    return norm in ("model_new.py", "notes.md") or norm.startswith("kernels" + os.sep)
