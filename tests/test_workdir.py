"""`kernelsmith init`: the workdir layout, its git history, and the rules on fixed files."""

from __future__ import annotations

import json
import os
import stat

import git
import pytest

from conftest import TASK
from kernelsmith import workdir as wd
from kernelsmith.errors import BadInput
from kernelsmith.task import TaskSource


@pytest.fixture
def source():
    return TaskSource(name="axpb", source=TASK, origin="/somewhere/axpb.py")


@pytest.mark.parametrize("device,kernel_files", [
    ("cpu", ["example_scale.cpp"]),
    ("cuda", ["example_scale.cu", "example_scale_binding.cpp"]),
])
def test_layout(tmp_path, source, device, kernel_files):
    root = tmp_path / "wd"
    config = wd.create(source, root, device)
    for name in ("model.py", "model_new.py", "SKILL.md", "binding.cpp", "binding_registry.h",
                 "build.py", "verify.py", "profile.py", ".gitignore"):
        assert (root / name).is_file(), name
    assert sorted(p.name for p in (root / "kernels").iterdir()) == sorted(kernel_files)
    assert (root / "model.py").read_text() == TASK
    assert not os.access(root / "model.py", os.W_OK) or os.geteuid() == 0
    assert not (root / "model.py").stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    saved = json.loads((root / ".kernelsmith" / "config.json").read_text())
    assert saved["device"] == device and saved["task"] == "axpb" and config.precision == "fp32"
    skill = (root / "SKILL.md").read_text()
    assert "axpb" in skill and "{task_name}" not in skill and "{device}" not in skill


def test_cuda_kernels_include_no_torch_headers(tmp_path, source):
    root = tmp_path / "wd"
    wd.create(source, root, "cuda")
    cu = (root / "kernels" / "example_scale.cu").read_text()
    includes = [line for line in cu.splitlines() if line.startswith("#include")]
    assert includes and not any(h in line for line in includes for h in ("torch", "ATen", "c10"))


def test_initial_commit(tmp_path, source):
    root = tmp_path / "wd"
    wd.create(source, root, "cpu")
    repo = git.Repo(root)
    commits = list(repo.iter_commits())
    assert len(commits) == 1 and "axpb" in commits[0].message
    tracked = {item.path for item in commits[0].tree.traverse()}
    assert {"model.py", "model_new.py", "kernels/example_scale.cpp", "SKILL.md"} <= tracked
    assert not any(path.startswith(".kernelsmith") for path in tracked)
    assert not repo.is_dirty(untracked_files=True)


def test_refuses_a_non_empty_folder(tmp_path, source):
    root = tmp_path / "wd"
    root.mkdir()
    (root / "precious.txt").write_text("keep me")
    with pytest.raises(BadInput, match="not empty"):
        wd.create(source, root, "cpu")
    assert (root / "precious.txt").read_text() == "keep me"


def test_fixed_files_and_reference_are_guarded(tmp_path, source):
    root = tmp_path / "wd"
    config = wd.create(source, root, "cpu")
    assert wd.fixed_file_changes(root, config) == []
    (root / "binding.cpp").write_text("// replaced\n")
    os.chmod(root / "model.py", 0o644)
    (root / "model.py").write_text(TASK.replace("2.0", "0.0"))
    changes = wd.fixed_file_changes(root, config)
    assert any("binding.cpp" in c for c in changes)
    assert any("reference model.py" in c for c in changes)


@pytest.mark.parametrize("path,allowed", [
    ("model_new.py", True), ("kernels/foo.cu", True), ("kernels/sub/x.cpp", True), ("notes.md", True),
    ("model.py", False), ("binding.cpp", False), ("verify.py", False), ("../evil.py", False),
    ("/etc/passwd", False), ("kernels/../model.py", False), (".kernelsmith/config.json", False),
])
def test_writable_paths(path, allowed):
    assert wd.is_writable(path) is allowed


def test_the_reference_is_sealed_at_init(tmp_path, source):
    root = tmp_path / "wd"
    config = wd.create(source, root, "cpu")
    sealed = wd.sealed_reference(root, config)
    assert sealed.parent == root / ".kernelsmith" / "sealed" and sealed.read_text() == TASK
    assert not os.access(sealed, os.W_OK) or os.geteuid() == 0  # read-only (root ignores the mode)
    assert sealed.name == f"{config.reference_sha256}.py"


def test_an_edited_view_and_config_still_evaluate_against_the_sealed_reference(tmp_path, source):
    """An unjailed bash rewrites model.py and the hashes recorded for it: the sealed copy stays the
    reference, and the edit is a violation."""
    root = tmp_path / "wd"
    wd.create(source, root, "cpu")
    os.chmod(root / "model.py", 0o644)
    tampered = TASK.replace("2.0", "0.0")
    (root / "model.py").write_text(tampered)
    path = root / ".kernelsmith" / "config.json"
    data = json.loads(path.read_text())
    data["fixed"]["model.py"] = wd._sha256(root / "model.py")
    path.write_text(json.dumps(data))
    config = wd.WorkdirConfig.load(root)
    assert wd.sealed_reference(root, config).read_text() == TASK
    assert any("reference model.py was modified" in c for c in wd.fixed_file_changes(root, config))


def test_an_altered_sealed_copy_is_refused(tmp_path, source):
    root = tmp_path / "wd"
    config = wd.create(source, root, "cpu")
    sealed = wd.sealed_reference(root, config)
    os.chmod(sealed, 0o644)
    sealed.write_text(TASK.replace("2.0", "0.0"))
    with pytest.raises(BadInput, match="sealed reference"):
        wd.sealed_reference(root, config)


def test_a_workdir_from_before_sealing_is_sealed_from_its_recorded_hash(tmp_path, source):
    root = tmp_path / "wd"
    wd.create(source, root, "cpu")
    path = root / ".kernelsmith" / "config.json"
    data = json.loads(path.read_text())
    del data["reference_sha256"]
    path.write_text(json.dumps(data))
    for sealed in (root / ".kernelsmith" / "sealed").iterdir():
        os.chmod(sealed, 0o644)
        sealed.unlink()
    assert wd.sealed_reference(root, wd.WorkdirConfig.load(root)).read_text() == TASK


def test_kernelsmiths_first_commit_runs_no_hook_of_the_user(tmp_path, source, monkeypatch):
    hooks, marker = tmp_path / "hooks", tmp_path / "HOOK_RAN"
    hooks.mkdir()
    for name in ("pre-commit", "post-commit", "commit-msg"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / name).chmod(0o755)
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\thooksPath = {hooks}\n[user]\n\tname = u\n\temail = u@x\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    wd.create(source, tmp_path / "wd", "cpu")
    assert git.Repo(tmp_path / "wd").head.commit.message.startswith("kernelsmith: new workdir")
    assert not marker.exists()
