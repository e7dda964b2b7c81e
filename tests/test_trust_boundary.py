"""The trust boundary in the tree: kernelsmith/harness/ runs only inside jailed workers.

No module outside it imports it (the parent starts workers with `python -m
kernelsmith.harness.worker` and reads their JSON answers), and the parent side of an
evaluation (kernelsmith/evaluation/) imports no torch, so the CLI's fast paths never load it.
"""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kernelsmith"
# kernelsmith.ext is the helper that model_new.py imports to load its kernels: it runs inside the
# candidate's own (jailed) process, never in the parent.
WORKER_SIDE_OUTSIDE_HARNESS = {"ext.py"}


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_no_parent_module_imports_the_harness():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "harness" or str(rel) in WORKER_SIDE_OUTSIDE_HARNESS:
            continue
        if any(name == "kernelsmith.harness" or name.startswith("kernelsmith.harness.") for name in _imports(path)):
            offenders.append(str(rel))
    assert offenders == [], f"parent-side modules import the worker-side harness: {offenders}"


def test_the_parent_side_of_an_evaluation_imports_no_torch():
    modules = sorted(p.stem for p in (PACKAGE / "evaluation").glob("*.py") if p.stem != "__init__")
    code = ("import sys\n" + "".join(f"import kernelsmith.evaluation.{m}\n" for m in modules)
            + "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
