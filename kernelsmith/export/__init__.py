"""`kernelsmith export`: package an accepted kernel commit as an importable Python package.

    OUT/<name>/__init__.py     Model, forward_op, check_inputs, KernelInputError, MANIFEST
               _runtime.py     builds kernels/ with torch.utils.cpp_extension, registers the
                               torch.library custom op and its fake implementation, checks inputs
               model_new.py    the commit's candidate, importing the package's loader
               reference.py    the commit's model.py (the fake implementation runs it on fake tensors)
               kernels/        the commit's kernel sources
               binding.cpp, binding_registry.h
               export.json     what was verified: task, commit, device, precision, input specs, flags
               README.md       measured speed-ups (from the commit's trailers) and how to use it

Files come from the commit, not the working tree, so the export is exactly what was measured.
Only a commit that kernelsmith made (one in the workdir's ledger) is exported, with the trailers
the ledger recorded, and every object read is checked against its hash.
The package needs torch and a compiler at import time, not kernelsmith.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from kernelsmith.errors import BadInput
from kernelsmith.gitops import KernelRepo, kernel_row

RUNTIME = Path(__file__).resolve().parent / "runtime.py"
INFRA = Path(__file__).resolve().parent.parent / "templates"
INIT = '''"""{task}: a kernel exported by kernelsmith from commit {short}. See README.md."""

from ._runtime import MANIFEST, KernelInputError, build_dir, check_inputs, forward_op, load_kernels, make_model_class

Model = make_model_class()

__all__ = ["MANIFEST", "KernelInputError", "Model", "build_dir", "check_inputs", "forward_op", "load_kernels"]
'''
_LOADER_IMPORT = re.compile(r"^from\s+kernelsmith\.ext\s+import\s+load_kernels\s*$", re.M)
_REFERENCE_IMPORT = re.compile(r"^from\s+model\s+import\s+", re.M)
_OTHER_IMPORT = re.compile(r"^\s*(?:from|import)\s+(kernelsmith\b|model\b)", re.M)


def export_kernel(workdir: Path, out: Path, rev: str | None = None, name: str | None = None) -> dict:
    """Write the package for rev (default: the accepted commit) under out; returns its manifest."""
    from kernelsmith.workdir import WorkdirConfig

    config = WorkdirConfig.load(workdir)
    repo = KernelRepo(workdir)
    commit = repo.trusted_commit(_chosen_rev(repo, rev), "export")
    row = kernel_row(commit)
    files = _commit_files(repo, commit)
    package = name or _package_name(config.task)
    target = _new_folder(Path(out), package)
    try:
        _write_sources(files, row["sha"], target)
        manifest = _manifest(config, row, target)
        (target / "export.json").write_text(json.dumps(manifest, indent=2) + "\n")
        (target / "README.md").write_text(readme(manifest, package, commit))
        (target / "__init__.py").write_text(INIT.format(task=config.task, short=row["sha"][:8]))
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)  # never leave half a package behind
        raise
    return {**manifest, "package": package, "path": str(target)}


def _chosen_rev(repo: KernelRepo, rev: str | None) -> str:
    if rev:
        return repo.resolve(rev)
    accepted = repo.accepted()
    if accepted is None:
        raise BadInput(f"no accepted kernel in {repo.root}",
                       "accept one first (kernelsmith accept REV), or pass --rev REV")
    return accepted


def _package_name(task: str) -> str:
    name = re.sub(r"\W", "_", task).strip("_").lower() or "kernel"
    return f"{name}_kernel" if name[0].isalpha() else f"k_{name}_kernel"


def _new_folder(out: Path, package: str) -> Path:
    if not package.isidentifier():
        raise BadInput(f"--name {package!r} is not a Python identifier", "use letters, digits and _")
    target = out / package
    if target.exists():
        raise BadInput(f"{target} already exists", "pick another --out or --name; export never overwrites")
    target.mkdir(parents=True)
    return target


def _commit_files(repo: KernelRepo, commit: dict) -> dict[str, bytes]:
    """model.py, model_new.py and kernels/* of the commit, each checked against its hash."""
    files = repo.verified_files(commit["tree"], ("model.py", "model_new.py", "kernels"))
    short = commit["sha"][:8]
    for needed in ("model.py", "model_new.py"):
        if needed not in files:
            raise BadInput(f"commit {short} has no {needed}", "export a kernel commit of a kernelsmith workdir")
    if not any(path.startswith("kernels/") for path in files):
        raise BadInput(f"commit {short} has no kernels", "export a kernel commit of a kernelsmith workdir")
    links = [path for path, (mode, _) in files.items() if mode == "120000"]
    if links:
        raise BadInput(f"commit {short} holds the symbolic link {links[0]}", "export takes regular files only")
    return {path: data for path, (_, data) in files.items()}


def _write_sources(files: dict[str, bytes], sha: str, target: Path) -> None:
    (target / "reference.py").write_bytes(files["model.py"])
    (target / "model_new.py").write_text(rewrite_imports(files["model_new.py"].decode(), sha))
    for path, data in files.items():
        if path.startswith("kernels/"):
            (target / path).parent.mkdir(parents=True, exist_ok=True)
            (target / path).write_bytes(data)
    for infra in ("binding.cpp", "binding_registry.h", "binding_light.h"):
        shutil.copyfile(INFRA / infra, target / infra)
    shutil.copyfile(RUNTIME, target / "_runtime.py")


def rewrite_imports(source: str, sha: str) -> str:
    """model_new.py with kernelsmith's loader and the reference module replaced by the package's."""
    source = _LOADER_IMPORT.sub("from ._runtime import load_kernels", source)
    source = _REFERENCE_IMPORT.sub("from .reference import ", source)
    left = _OTHER_IMPORT.search(source)
    if left:
        raise BadInput(f"model_new.py of {sha[:8]} imports {left.group(1)} in a way export cannot rewrite: "
                       f"{left.group(0).strip()!r}", "use `from kernelsmith.ext import load_kernels`")
    return source


def _manifest(config, row: dict, target: Path) -> dict:
    from kernelsmith.evaluation.build_plan import compile_flags, libraries_used
    from kernelsmith.task import check_task

    report = check_task(target / "reference.py", config.device, config.precision)
    if any("value" in spec for spec in report["inputs"]):
        raise BadInput("export takes tasks whose inputs are all tensors",
                       f"get_inputs() of {config.task} returns {[s.get('value') for s in report['inputs'] if 'value' in s]}")
    sources = [p for p in (target / "kernels").rglob("*") if p.is_file()]
    ident = re.sub(r"\W", "_", config.task).lower()
    return {"task": config.task, "commit": row["sha"], "session": row["session"], "turn": row["turn"],
            "device": config.device, "precision": config.precision, "inputs": report["inputs"],
            "single_output": len(report["outputs"]) == 1,
            "speedup_vs_eager": row["speedup_vs_eager"], "speedup_vs_compile": row["speedup_vs_compile"],
            "reward": row["reward"], "extension": f"ks_export_{ident}_{row['sha'][:8]}",
            "op": f"ks_{ident}_{row['sha'][:8]}::forward",
            "flags": compile_flags(config.device, fast_math=False, **libraries_used(sources))}


def _x(value) -> str:
    return "not measured" if value is None else f"{value:.2f}x"


def readme(manifest: dict, package: str, commit: dict) -> str:
    """The package's README: what was measured, how to use it, what it will refuse."""
    specs = ", ".join(f"{s['dtype']}{s['shape']}" for s in manifest["inputs"])
    body = commit.get("body", "").strip()
    return f"""# {package}: the kernelsmith kernel for `{manifest['task']}`

Exported by `kernelsmith export` from commit `{manifest['commit']}` (session `{manifest['session']}`,
turn {manifest['turn']}).

| measured on {manifest['device']} ({manifest['precision']}) | |
|---|---|
| speed-up vs eager PyTorch | {_x(manifest['speedup_vs_eager'])} |
| speed-up vs torch.compile | {_x(manifest['speedup_vs_compile'])} |
| reward | {manifest['reward']} |
{(chr(10) + body + chr(10)) if body else ''}
## Use

```python
import sys; sys.path.insert(0, "<the folder that holds {package}/>")
import {package}

model = {package}.Model()                      # the verified constructor arguments
model.load_state_dict(reference.state_dict())  # same parameter names as the reference Model
y = model(*inputs)                              # checks the inputs, then runs the custom op
```

The first import builds `kernels/` with `torch.utils.cpp_extension` into
`$KERNELSMITH_EXPORT_BUILD_DIR` (default `~/.cache/kernelsmith/export/`); later imports reuse it.
Needs torch and a C++ compiler{' and nvcc' if manifest['device'] == 'cuda' else ''}; kernelsmith itself is not needed.

The forward is the custom op `torch.ops.{manifest['op'].replace('::', '.')}` (also `{package}.forward_op`),
with a fake implementation that runs the reference on fake tensors, so `torch.compile` traces
through it.

## What it accepts

Verified for inputs {specs} on {manifest['device']}, and the reference's constructor arguments.
Any other device, dtype, shape or constructor argument raises `{package}.KernelInputError`
naming what was expected; non-contiguous inputs too. Inference only: the op has no backward.
"""
