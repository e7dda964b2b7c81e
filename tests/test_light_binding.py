"""Light bindings (templates/binding_light.h, REGISTER_KERNEL): a binding that includes ATen's Tensor
and no pybind11 compiles in seconds, and the extension's entry turns it into a Python function with
the argument and result types a pybind11 binding had, and readable errors for the wrong ones.

One real CPU extension per test module (the entry is the shared object compiled once beside the
precompiled header; a light file is a few seconds of g++), built and called in worker processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelsmith.evaluation import evaluate, runner
from kernelsmith.harness import build

KINDS = r'''// every parameter and result kind a light binding may use
#include "binding_light.h"

#include <optional>
#include <tuple>
#include <vector>

at::Tensor scaled(const at::Tensor& x, double alpha, int64_t offset, bool negate) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous(), "scaled: x must be contiguous float32");
  auto y = at::empty_like(x);
  const float* src = x.data_ptr<float>();
  float* dst = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = (negate ? -1.0f : 1.0f) * (float)alpha * src[i] + (float)offset;
  return y;
}

std::tuple<at::Tensor, at::Tensor> shaped(at::Tensor like, std::vector<int64_t> shape, std::optional<at::Tensor> fill) {
  auto a = at::empty(shape, like.options());
  auto b = at::empty({(int64_t)shape.size()}, like.options().dtype(at::kLong));
  float* pa = a.data_ptr<float>();
  for (int64_t i = 0; i < a.numel(); ++i) pa[i] = fill ? fill->data_ptr<float>()[0] : -1.0f;
  for (size_t d = 0; d < shape.size(); ++d) b.data_ptr<int64_t>()[d] = shape[d];
  return {a, b};
}

std::vector<at::Tensor> pieces(at::Tensor x, int parts) {
  std::vector<at::Tensor> out;
  for (int i = 0; i < parts; ++i) out.push_back(at::empty({1}, x.options()).fill_(i));
  return out;
}

void nothing(at::Tensor x) { (void)x; }

REGISTER_KERNEL(scaled, scaled);
REGISTER_KERNEL(shaped, shaped);
REGISTER_KERNEL(pieces, pieces);
REGISTER_KERNEL(nothing, nothing);
'''


def worker_build(kernels: Path) -> dict:
    return runner.run_job({"kind": "build", "kernels_dir": str(kernels), "device": "cpu"}, 900)


def run_with(result: dict, body: str) -> dict:
    """Import the built extension in a fresh process and run body, which fills `out`."""
    script = textwrap.dedent(f"""
        import json, torch
        from kernelsmith.harness import build
        ext = build.import_extension({result["so_path"]!r}, {result["name"]!r})
        out = {{}}
        def error(call):
            try:
                call()
            except Exception as err:
                return [type(err).__name__, str(err).splitlines()[0]]
            return None
    """) + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    root = tmp_path_factory.mktemp("light")
    kernels = root / "kernels"
    kernels.mkdir()
    (kernels / "kinds.cpp").write_text(KINDS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELSMITH_BUILD_DIR", str(root / "builds"))
        result = worker_build(kernels)
    assert result["ok"], result["summary"]
    return result


@pytest.mark.slow_build
def test_parameters_and_results_cross_as_pybind11_would_pass_them(kinds):
    out = run_with(kinds, """
        x = torch.arange(4, dtype=torch.float32)
        out["scaled"] = ext.scaled(x, 2.0, 1, False).tolist()
        out["int_as_float"] = ext.scaled(x, 2, 0, True).tolist()   # a Python int where a double is taken
        a, b = ext.shaped(x, [2, 3], None)
        out["shaped"] = [list(a.shape), b.tolist(), a.unique().tolist()]
        a, b = ext.shaped(x, torch.Size([1, 2]), torch.tensor([7.0]))
        out["size_and_fill"] = [list(a.shape), a.tolist()]
        out["tuple"] = type(ext.shaped(x, (1,), None)).__name__
        listed = ext.pieces(x, 3)
        out["list"] = [type(listed).__name__, [t.item() for t in listed]]
        out["none"] = ext.nothing(x)
        out["doc"] = ext.shaped.__doc__
    """)
    assert out["scaled"] == [1.0, 3.0, 5.0, 7.0]
    assert out["int_as_float"] == [-0.0, -2.0, -4.0, -6.0]
    assert out["shaped"] == [[2, 3], [2, 3], [-1.0]]
    assert out["size_and_fill"] == [[1, 2], [[7.0, 7.0]]]
    assert out["tuple"] == "tuple" and out["list"] == ["list", [0.0, 1.0, 2.0]] and out["none"] is None
    assert "shaped(Tensor, list[int], Tensor | None) -> tuple[Tensor, ...]" in out["doc"]


@pytest.mark.slow_build
def test_wrong_arguments_are_type_errors_that_name_the_argument(kinds):
    out = run_with(kinds, """
        x = torch.arange(4, dtype=torch.float32)
        out["arity"] = error(lambda: ext.scaled(x, 2.0, 1))
        out["tensor"] = error(lambda: ext.scaled(3, 2.0, 1, False))
        out["string"] = error(lambda: ext.scaled(x, "2", 1, False))
        out["float_for_int"] = error(lambda: ext.scaled(x, 2.0, 1.5, False))
        out["int_for_bool"] = error(lambda: ext.scaled(x, 2.0, 1, 1))
        out["ints"] = error(lambda: ext.shaped(x, [2, 3.0], None))
        out["range"] = error(lambda: ext.pieces(x, 2**40))
        out["keyword"] = error(lambda: ext.scaled(x, 2.0, 1, negate=False))
        out["check"] = error(lambda: ext.scaled(x.double(), 2.0, 1, False))
    """)
    assert out["arity"] == ["TypeError", "scaled() takes 4 arguments (3 given)"]
    assert out["tensor"] == ["TypeError", "scaled(): argument 0 must be Tensor, got int"]
    assert out["string"] == ["TypeError", "scaled(): argument 1 has an unsupported type: str"]
    assert out["float_for_int"] == ["TypeError", "scaled(): argument 2 must be int, got float"]
    assert out["int_for_bool"] == ["TypeError", "scaled(): argument 3 must be bool, got int"]
    assert out["ints"] == ["TypeError", "shaped(): argument 1 must be a list of ints"]
    assert out["range"] == ["TypeError", f"pieces(): argument 1 is out of range: {2**40}"]
    assert out["keyword"][0] == "TypeError"
    assert out["check"][0] == "RuntimeError" and "scaled: x must be contiguous float32" in out["check"][1]


@pytest.mark.slow_build
def test_two_kernels_of_one_name_fail_the_import_by_name(tmp_path, monkeypatch):
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    for n in (1, 2):
        (kernels / f"twin{n}.cpp").write_text(
            '#include "binding_light.h"\n'
            f"static at::Tensor twin{n}(at::Tensor x) {{ return at::empty_like(x); }}\n"
            f"REGISTER_KERNEL(twin, twin{n});\n")
    monkeypatch.setenv("KERNELSMITH_BUILD_DIR", str(tmp_path / "builds"))
    result = evaluate.run_build(kernels, "cpu", False)  # as `kernelsmith compile` builds: the import fails it
    assert not result["ok"] and "two bindings are named twin" in result["summary"], result["summary"]


def test_a_light_binding_includes_neither_torch_extension_nor_pybind11(tmp_path):
    """What makes it light: GCC's include tree (-H) of a light file holds ATen's Tensor and nothing of
    torch's Python glue, so the precompiled header is never needed for it."""
    from torch.utils import cpp_extension

    source = tmp_path / "kinds.cpp"
    source.write_text(KINDS)
    includes = [a for d in cpp_extension.include_paths() for a in ("-isystem", d)]
    proc = subprocess.run(["c++", "-std=c++17", "-fsyntax-only", "-H", *includes, f"-I{build.TEMPLATES}", str(source)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    headers = [line.lstrip(". ").strip() for line in proc.stderr.splitlines() if line.startswith(".")]
    assert any(h.endswith("ATen/core/TensorBody.h") for h in headers)
    assert not [h for h in headers if "pybind11" in h or h.endswith("torch/extension.h") or h.endswith("Python.h")]
