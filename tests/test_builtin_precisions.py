"""The built-in policy at tf32, bf16 and fp16 (docs/builtin.md, "Precisions"): what the generated CUDA says.

bf16 and fp16 store every float value at that dtype and compute in float: a 16-bit value is loaded through
an explicit conversion into float math and stored back rounded to nearest (torch builds with
__CUDA_NO_BFLOAT16_CONVERSIONS__ and __CUDA_NO_HALF_CONVERSIONS__); the bindings check and allocate that
dtype. GEMMs go through cublasGemmEx on tensor cores, convolutions through cuDNN's tensor ops. tf32 keeps
float32 storage and changes only cuBLAS's and cuDNN's math. That these files compile is
tests/test_builtin_cuda_gen.py's test (its PRECISION_CASES); that they compute the right thing,
tests/gpu/test_builtin_cuda_gpu.py's and, for the CPU target, tests/test_builtin_cpu_windows.py's.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from kernelsmith.compiler import cuda  # noqa: E402
from kernelsmith.compiler.pipeline import PRECISIONS, build_plan  # noqa: E402


def _load_cases():
    """The CUDA generator's hand-built groups (tests/test_builtin_cuda_gen.py), at every precision."""
    spec = importlib.util.spec_from_file_location("builtin_cuda_cases", Path(__file__).with_name(
        "test_builtin_cuda_gen.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


cases = _load_cases()


def _files(name: str) -> dict[str, str]:
    case = cases.CASES[name]()
    return cuda.generate(case.group, case.values, case.precision).files


def test_16_bit_values_are_loaded_into_float_and_stored_rounded():
    files = _files("pointwise_bf16")
    kernel, binding = files["k0_pointwise_bf16.cu"], files["k0_pointwise_bf16_binding.cpp"]
    assert "#include <cuda_bf16.h>" in kernel and "cuda_fp16.h" not in kernel
    assert "__bfloat162float(__ldg(&p_bias[" in kernel  # a strided read, converted explicitly
    assert "const float4 q0 = ks_bf16x4(__ldg(reinterpret_cast<const uint2*>(p_x) + v));" in kernel  # 4 at once
    assert "reinterpret_cast<uint2*>(p_t5)[v] = ks_bf16x4(r0);" in kernel
    assert "p_t5[flat] = __float2bfloat16_rn(r0);" in kernel
    assert "float4*>(p_" not in kernel  # no 16-byte float vectors over 16-bit storage
    assert "at::kBFloat16" in binding and "k0_pointwise_bf16: input x must be bfloat16" in binding
    assert "reinterpret_cast<const __nv_bfloat16*>(in_x.data_ptr<at::BFloat16>())" in binding
    assert "#include <cuda_bf16.h>" in binding  # the launcher's declaration names __nv_bfloat16
    assert "dtype(at::kBFloat16)" in binding  # outputs allocated at their dtype


def test_float16_uses_the_half_conversions():
    kernel = _files("softmax_fp16")["k1_softmax_fp16.cu"]
    assert "#include <cuda_fp16.h>" in kernel and "bfloat16" not in kernel
    assert "__half2float(" in kernel and "__float2half_rn(" in kernel


def test_reductions_accumulate_in_float_and_round_once_when_stored():
    kernel = _files("rmsnorm_bf16")["k2_rmsnorm_bf16.cu"]
    assert "struct Acc {\n  float a;" in kernel
    assert "const float x_x = __bfloat162float(__ldg(&p_x[flat]));" in kernel
    assert "p_y[flat] = __float2bfloat16_rn(v_y);" in kernel
    arg = _files("argmax_bf16")
    assert "int64_t* p_idx" in arg["k4_argmax_bf16.cu"] and "at::kLong" in arg["k4_argmax_bf16_binding.cpp"]


def test_16_bit_gemms_run_cublas_gemm_ex_on_tensor_cores_accumulating_in_float():
    cublas = _files("gemm_bf16")["k5_gemm_bf16_gemm.cu"]
    assert ("cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, 24, 48, 40, &alpha, b, CUDA_R_16BF, 40, a, CUDA_R_16BF, "
            "40, &beta, c, CUDA_R_16BF, 24, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)") in cublas
    assert "cublasSgemm" not in cublas and "#include <cuda_bf16.h>" in cublas
    assert "const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c" in cublas
    assert "cublasGemmStridedBatchedEx(" in _files("bmm_bf16")["k11_bmm_bf16_gemm.cu"]
    assert "CUDA_R_16F, 50, CUBLAS_COMPUTE_32F" in _files("linear_fp16")["k12_linear_fp16_gemm.cu"]
    case = cases.CASES["gemm_bf16"]()
    assert cuda.generate(case.group, case.values, "bf16").variants[0] == (
        "cuBLAS GemmEx (bfloat16 on tensor cores, float accumulation), bias in the epilogue, epilogue 256 threads/block")


def test_tf32_changes_only_the_library_math(monkeypatch):
    monkeypatch.setenv("KERNELSMITH_CUTLASS", "0")  # fp32's SGEMM alone, without its 3xTF32 tiles
    fp32, tf32 = _files("gemm"), _files("gemm_tf32")
    assert "CUBLAS_COMPUTE_32F_FAST_TF32" in tf32["k5_gemm_tf32_gemm.cu"] and "CUDA_R_32F" in tf32["k5_gemm_tf32_gemm.cu"]
    assert "cublasSgemm(" in fp32["k5_gemm_gemm.cu"] and "Ex(" not in fp32["k5_gemm_gemm.cu"]
    assert tf32["k5_gemm_tf32.cu"] == fp32["k5_gemm.cu"].replace("k5_gemm", "k5_gemm_tf32")  # the epilogue: same
    cudnn = _files("conv2d_tf32")["k14_conv2d_tf32_conv.cu"]
    assert "cudnnSetConvolutionMathType(c.conv, CUDNN_DEFAULT_MATH)" in cudnn and "FMA" not in cudnn
    assert "CUDNN_DATA_FLOAT" in cudnn


def test_16_bit_convolutions_use_cudnns_tensor_ops_with_float_compute():
    cudnn = _files("conv2d_bf16")["k14_conv2d_bf16_conv.cu"]
    assert cudnn.count("CUDNN_DATA_BFLOAT16") == 3  # x, y and the filter
    assert "pads, strides, dilations, CUDNN_CROSS_CORRELATION,\n                                              " \
           "CUDNN_DATA_FLOAT)" in cudnn  # the compute type
    assert "cudnnSetConvolutionMathType(c.conv, CUDNN_TENSOR_OP_MATH)" in cudnn and "FMA" not in cudnn
    assert "#include <cuda_bf16.h>" in cudnn
    assert "CUDNN_DATA_HALF" in _files("conv_transpose1d_fp16")["k15_convt1d_fp16_conv.cu"]


TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 8)
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x, y):
        return torch.relu(self.lin(x)), {conv}


def get_inputs():
    return [torch.randn(4, 16), torch.randn(2, 3, 6, 6)]


def get_init_inputs():
    return []
"""


def _task(tmp_path: Path, conv: str = "self.conv(y) * 2.0") -> Path:
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(TASK.format(conv=conv)))
    return path


def test_a_plan_at_bf16_is_captured_at_bf16_and_its_model_new_casts_the_weights(tmp_path):
    task = _task(tmp_path)
    built = build_plan(task, "cuda", "bf16")
    assert not built.unsupported
    floats = {v.dtype for v in built.plan.values.values() if v.dtype != "bool"}
    assert floats == {"bfloat16"}  # every value at the dtype the harness runs Model at
    source = built.model_new([0] * len(built.variants))
    assert "self.to(torch.bfloat16)" in source  # the harness loads bf16 weights into ModelNew: they must stay so
    compile(source, "model_new.py", "exec")
    fp32 = build_plan(task, "cuda", "fp32")
    assert "__init__" not in fp32.model_new([0] * len(fp32.variants))


def test_what_a_precision_cannot_generate_is_one_line(tmp_path):
    assert PRECISIONS == ("fp32", "tf32", "bf16", "fp16")
    # cuDNN writes its result at its data type: a bfloat16 convolution read back as float32 has no buffer
    refused = build_plan(_task(tmp_path, "self.conv(y).float()"), "cuda", "bf16").unsupported
    assert len(refused) == 1 and "\n" not in refused[0]
    assert "bfloat16" in refused[0] and "float32" in refused[0] and "convolution" in refused[0]
    assert not build_plan(_task(tmp_path, "self.conv(y).float()"), "cpu", "bf16").unsupported  # the CPU's own loop
    (unknown,) = build_plan(_task(tmp_path), "cuda", "int8").unsupported
    assert unknown == "precision int8 (the built-in policy generates fp32, tf32, bf16, fp16)"


def test_the_compiler_captures_at_the_dtypes_the_harness_runs():
    """The compiler (parent side) cannot import the harness's loading (worker side); its own map must agree."""
    from kernelsmith.compiler.dtypes import AT_PRECISION
    from kernelsmith.harness.loading import DTYPES

    assert {p: d for p, d in DTYPES.items() if d is not None} == AT_PRECISION
