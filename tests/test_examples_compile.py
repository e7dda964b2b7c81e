"""The example tasks in examples/: layout checks, and every CUDA kernel compiles.

The compile test needs nvcc only (no GPU, no CUDA torch): each .cu is compiled
to an object with nvcc_compile_only, the same check CI runs on kernels.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from kernelsmith.harness.build import nvcc_compile_only

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TASK_DIRS = sorted(p for p in EXAMPLES.iterdir() if p.is_dir() and (p / "model.py").exists()) \
    if EXAMPLES.is_dir() else []
CU_FILES = sorted(EXAMPLES.glob("*/cuda/kernels/*.cu"))

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
_TORCH_HEADER_RE = re.compile(r"^(torch|ATen|c10)/|^(torch|ATen|c10)\b")


def _rel(path: Path) -> str:
    return str(path.relative_to(EXAMPLES))


def test_examples_exist():
    assert TASK_DIRS, f"no example tasks under {EXAMPLES}"
    assert CU_FILES, f"no .cu files under {EXAMPLES}/*/cuda/kernels"


@pytest.mark.parametrize("task", TASK_DIRS, ids=[p.name for p in TASK_DIRS])
def test_example_layout(task: Path):
    for rel in ("model.py", "cuda/model_new.py", "cpu/model_new.py"):
        assert (task / rel).is_file(), f"{task.name}: missing {rel}"
    cus = sorted((task / "cuda" / "kernels").glob("*.cu"))
    assert cus, f"{task.name}: no .cu file in cuda/kernels"
    for cu in cus:
        binding = cu.with_name(cu.stem + "_binding.cpp")
        assert binding.is_file(), f"{_rel(cu)}: no paired {binding.name}"
    cpu_sources = sorted((task / "cpu" / "kernels").glob("*.cpp"))
    assert cpu_sources, f"{task.name}: no .cpp file in cpu/kernels"


@pytest.mark.parametrize("cu", CU_FILES, ids=[_rel(p) for p in CU_FILES])
def test_cu_includes_no_torch(cu: Path):
    includes = _INCLUDE_RE.findall(cu.read_text())
    bad = [h for h in includes if _TORCH_HEADER_RE.match(h)]
    assert not bad, f"{_rel(cu)} includes torch headers {bad}; keep torch in the _binding.cpp"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("cu", CU_FILES, ids=[_rel(p) for p in CU_FILES])
def test_cu_compiles(cu: Path, tmp_path: Path):
    ok, summary = nvcc_compile_only(cu, arch="sm_90", out_dir=tmp_path)
    if not ok:
        print(summary)
    assert ok, f"nvcc failed on {_rel(cu)}:\n{summary}"
