"""The parent reads what a built extension imports, without loading it."""

import subprocess

from kernelsmith.evaluation import linkage

SOURCE = r"""
namespace at {
class Tensor;
namespace native { Tensor& add_out(const Tensor& a, const Tensor& b, Tensor& out); }
namespace cuda { void* getCurrentCUDABlasHandle(); }
namespace _ops { struct mm { static Tensor& redispatch(unsigned long keys, const Tensor& a, const Tensor& b); }; }
}
extern "C" void* honest() { return at::cuda::getCurrentCUDABlasHandle(); }
%s
"""
BELOW = r"""extern "C" void below(const at::Tensor* a, at::Tensor* out) { at::native::add_out(*a, *a, *out); }"""


def _library(tmp_path, extra: str):
    src, so = tmp_path / "k.cpp", tmp_path / "k.so"
    src.write_text(SOURCE % extra)
    subprocess.run(["g++", "-shared", "-fPIC", str(src), "-o", str(so)], check=True)
    return so


def test_aten_below_the_dispatcher_is_a_violation(tmp_path):
    so = _library(tmp_path, BELOW)
    assert linkage.forbidden_imports(so) == ["at::native::add_out"]
    assert "below the dispatcher" in linkage.violation(so)


def test_helpers_of_the_same_namespaces_are_not(tmp_path):
    so = _library(tmp_path, "")
    assert "at::cuda::getCurrentCUDABlasHandle()" in linkage.imported_symbols(so)
    assert linkage.violation(so) is None


def test_a_redispatch_below_the_watched_keys_is_a_violation(tmp_path):
    so = _library(tmp_path, r"""extern "C" void r(const at::Tensor* a) { at::_ops::mm::redispatch(1, *a, *a); }""")
    assert linkage.forbidden_imports(so) == ["at::_ops::mm::redispatch"]
