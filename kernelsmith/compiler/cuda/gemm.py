"""GEMMs: cuBLAS (`<name>_gemm.cu`, text/gemm_cublas.cuh), then the bias and the pointwise epilogue
in one elementwise kernel over the product, in place. With the bias through cuBLAS's beta, a
kernel first fills the product buffer with the bias rows.

At fp32, SGEMM in true fp32, or, where CUTLASS's headers are installed (the `cutlass` extra), also
3xTF32 on tensor cores (`<name>_gemm_tf32x3.cu`, text/gemm_tf32x3.cuh): float32 operands split into
two TF32 parts each, three products accumulated in float32, float32's accuracy at tensor-core speed.
Its tile shapes are launch variants beside SGEMM, first for large compute-bound GEMMs (LARGE_GEMM,
COMPUTE_BOUND), and it falls back to SGEMM at run time where it cannot run (before sm_80, misaligned
operands). Its errors come back as 20000 + CUTLASS's status, which the binding prints as a cuDNN status.
At tf32, bf16 and fp16, cublasGemmEx on tensor cores (TF32 for float32 operands, float accumulation
for 16-bit ones); the product is written at the first output's dtype, which the epilogue reads back."""

from __future__ import annotations

from math import prod

from kernelsmith.compiler.cstyle import ops
from kernelsmith.compiler.cuda.binding import generated
from kernelsmith.compiler.cuda.common import (HALF_TYPES, INT_MAX, Param, Read, call, ctype, cu_file, dense, includes,
                                              input_params, launcher, output_params, read, signature, store,
                                              stride_params, table, template, used)
from kernelsmith.compiler.cuda.elementwise import Elementwise, in_place_epilogue
from kernelsmith.compiler.ir import GemmGroup, Generated, Value

EPILOGUE_THREADS = (256, 512, 128)
# 3xTF32 tiles (block M, N, K, warp M, N, pipeline stages), from CUTLASS's own list for this math
# (cutlass_library/generator.py, GenerateSM80_TensorOp_1688_fast_fp32_math)
TF32X3_TILES = ((128, 128, 16, 32, 64, 4), (256, 64, 16, 64, 32, 3), (128, 64, 32, 64, 32, 3), (64, 64, 32, 32, 32, 3))
# The tiles come first for a GEMM of LARGE_GEMM multiply-adds or more (a 1024^3 one) whose FLOPs per byte of its
# operands and result reach COMPUTE_BOUND. Below it the GEMM is bound by memory, where the tensor cores give
# nothing: on an H100, level1/9's [32768, 32] @ [32, 32768] (16 FLOPs a byte) ran 0.88x SGEMM in 3xTF32, and
# 1024 x 8192 x 8192 (410 FLOPs a byte) 1.40x (docs/builtin.md, "3xTF32").
LARGE_GEMM = 1 << 30
COMPUTE_BOUND = 64
CUDA_TYPES = {"float32": "CUDA_R_32F", **{dtype: half.cuda_type for dtype, half in HALF_TYPES.items()}}


def gemm(group: GemmGroup, values: dict[str, Value], precision: str = "fp32") -> Generated:
    _check(group, values)
    ex = _uses_gemm_ex(group, values, precision)
    tensor_cores = not ex and _tf32x3_available(group)
    bias = group.bias if group.bias is not None and group.beta != 0.0 else None
    reads = _reads(group, values, bias)
    params = input_params(group) + stride_params(reads) + output_params(group)
    epilogue = _epilogue(group, reads, params, bias)
    variants = _variants(group, bias, tensor_cores)
    kernels = ([epilogue.source()] if bias or _needs_epilogue(group) else []) + \
        ([_bias_rows_kernel(group, params, reads[0])] if bias else [])
    launch = (_declarations(group, values, tensor_cores)
              + launcher(group.name, params, len(variants), _launch(group, params, epilogue, variants, bias)))
    what = f"GEMM group {group.name} ({group.batch} x [{group.m}, {group.k}] @ [{group.k}, {group.n}]), its epilogue"
    files = {f"{group.name}.cu": cu_file(group, what, kernels, launch),
             f"{group.name}_gemm.cu": _cublas(group, values, precision if ex else None)}
    if tensor_cores:
        files[f"{group.name}_gemm_tf32x3.cu"] = _tf32x3(group, values)
    name = f"GemmEx ({_ex_math(values[group.a].dtype, precision)})" if ex else "sgemm"
    return generated(group, files, params, _contiguous_operands(group) | dense(reads),
                     [_describe(v, name) for v in variants], strides=group.operand_strides())


def _declarations(group: GemmGroup, values: dict[str, Value], tensor_cores: bool) -> str:
    """The launcher's extern declarations of the GEMM calls in the other files."""
    head = f"{_gemm_params(group, values)}, float beta"
    lines = f'extern "C" int {group.name}_gemm({head}, cudaStream_t stream);  // in {group.name}_gemm.cu\n'
    if tensor_cores:
        lines += (f'extern "C" int {group.name}_gemm_tf32x3({head}, int tile, cudaStream_t stream);'
                  f"  // in {group.name}_gemm_tf32x3.cu\n")
    return lines + "\n"


def _tf32x3_available(group: GemmGroup) -> bool:
    """Whether 3xTF32 is offered: float32 in and out (the caller's SGEMM case), int-sized, CUTLASS installed."""
    from kernelsmith.evaluation.build_plan import cutlass_include

    return max(group.m, group.n, group.k, group.batch) <= INT_MAX and cutlass_include() is not None


def _contiguous_operands(group: GemmGroup) -> set[str]:
    """The operands read contiguous (those with a layout are checked stride by stride)."""
    return {group.a, group.b} - set(group.operand_strides())


def _epilogue(group: GemmGroup, reads: list[Read], params: list[Param], bias: str | None) -> Elementwise:
    """Bias and epilogue ops per element of the product cuBLAS wrote into the first output."""
    names = {r.value.name: r.var for r in reads}
    body = _result(group, names, bias) + ops.body_lines(group.epilogue, names, "")
    return in_place_epilogue(group, reads, params, "gemm_product", names, body, _product_kept(group, bias),
                             "bool ADD_BIAS" if bias else "")


def _check(group: GemmGroup, values: dict[str, Value]) -> None:
    if min(group.m, group.n, group.k, group.batch) <= 0 or max(group.m, group.n, group.k) > INT_MAX:
        raise ValueError(f"{group.name}: GEMM sizes m={group.m} n={group.n} k={group.k} are unsupported")
    _check_shapes(group, values)
    _check_layouts(group, values)
    a, b = values[group.a], values[group.b]
    product = group.outputs[0].dtype
    if a.dtype != b.dtype or product not in (a.dtype, "float32"):
        raise ValueError(f"{group.name}: a GEMM of {a.dtype} @ {b.dtype} into a {product} buffer is unsupported "
                         "(cuBLAS takes operands of one dtype, written at that dtype or float32)")


def _check_shapes(group: GemmGroup, values: dict[str, Value]) -> None:
    """a holds batch * m rows of k; b is [k, n] ([n, k] when trans_b), one matrix or one per batch (or one
    shared through a layout of batch stride 0, an expanded operand)."""
    a, b = values[group.a], values[group.b]
    b_tail = (group.n, group.k) if group.trans_b else (group.k, group.n)
    if a.shape[-1] != group.k or prod(a.shape[:-1]) not in (group.m, group.batch * group.m) or \
            tuple(b.shape[-2:]) != b_tail:
        raise ValueError(f"{group.name}: operand shapes {list(a.shape)} and {list(b.shape)} (trans_b={group.trans_b}) "
                         "are unsupported")
    shared = group.layout("b", values).batch_stride == 0
    if b.numel not in (group.n * group.k, group.batch * group.n * group.k) and not shared:
        raise ValueError(f"{group.name}: batched operands of shapes {list(a.shape)}, {list(b.shape)} are unsupported")


def _check_layouts(group: GemmGroup, values: dict[str, Value]) -> None:
    """Each operand is contiguous or has a layout, with a leading dimension cuBLAS takes (an int)."""
    for operand, layout in (("a", group.a_layout), ("b", group.b_layout)):
        value = values[getattr(group, operand)]
        if layout is None and not value.contiguous:
            raise ValueError(f"{group.name}: GEMM operand {value.name} is neither contiguous nor a matrix layout")
        if layout is not None and not 0 < layout.ld <= INT_MAX:
            raise ValueError(f"{group.name}: GEMM operand {value.name}'s leading dimension {layout.ld} is unsupported")


def _uses_gemm_ex(group: GemmGroup, values: dict[str, Value], precision: str) -> bool:
    """cublasGemmEx for tensor cores, or for operands SGEMM cannot take; SGEMM for fp32 as ever."""
    return precision != "fp32" or values[group.a].dtype != "float32" or group.outputs[0].dtype != "float32"


def _gemm_params(group: GemmGroup, values: dict[str, Value]) -> str:
    """The operand pointers of `<name>_gemm`: A and B at their dtype, C (the first output) at its own."""
    operand = ctype(values[group.a])
    return f"const {operand}* a, const {operand}* b, {ctype(group.outputs[0])}* c"


def _reads(group: GemmGroup, values: dict[str, Value], bias: str | None) -> list[Read]:
    """The bias first (when added), then the inputs the epilogue ops read, at out_shape."""
    wanted = ([bias] if bias else []) + [v.name for v in group.inputs if v.name in used(group.epilogue)]
    return [read(values[name], group.out_shape) for name in dict.fromkeys(wanted)]


def _result(group: GemmGroup, names: dict[str, str], bias: str | None) -> list[str]:
    """The GEMM's result value from the product (alpha already applied by cuBLAS)."""
    value = "gemm_product"
    if bias:
        value = f"(ADD_BIAS ? gemm_product + {ops.literal(group.beta)} * {names[bias]} : gemm_product)"
    names[group.result] = f"v_{group.result}"
    return [f"const float v_{group.result} = {value};"]


def _variants(group: GemmGroup, bias: str | None, tensor_cores: bool) -> list[tuple[int | None, bool, int]]:
    """(3xTF32 tile, or None for SGEMM; bias added through the GEMM's beta; epilogue block size). The tiles
    run with the first epilogue choice, ahead of SGEMM for a compute-bound GEMM and after it otherwise."""
    epilogues = _epilogue_variants(group, bias)
    sgemm = [(None, by_beta, threads) for by_beta, threads in epilogues]
    if not tensor_cores:
        return sgemm
    tiles = [(tile, *epilogues[0]) for tile in range(len(TF32X3_TILES))]
    return tiles + sgemm if _compute_bound(group) else sgemm[:1] + tiles + sgemm[1:]


def _compute_bound(group: GemmGroup) -> bool:
    """Whether the GEMM is large and does COMPUTE_BOUND FLOPs or more per float32 byte it must move."""
    m, n, k, batch = group.m, group.n, group.k, group.batch
    flops, moved = 2 * batch * m * n * k, 4 * batch * (m * k + k * n + m * n)
    return batch * m * n * k >= LARGE_GEMM and flops >= COMPUTE_BOUND * moved


def _epilogue_variants(group: GemmGroup, bias: str | None) -> list[tuple[bool, int]]:
    """(bias added through the GEMM's beta, epilogue block size)."""
    if not bias and not _needs_epilogue(group):
        return [(False, EPILOGUE_THREADS[0])]
    modes = (False, True) if bias else (False,)
    return [(by_beta, threads) for by_beta in modes for threads in EPILOGUE_THREADS]


def _product_kept(group: GemmGroup, bias: str | None) -> bool:
    """Whether the first output is the plain product, which cuBLAS already wrote in place."""
    return group.outputs[0].name == group.result and not bias


def _needs_epilogue(group: GemmGroup) -> bool:
    """Whether a kernel must run after cuBLAS even when the bias went through beta."""
    return bool(group.epilogue) or [o.name for o in group.outputs] != [group.result]


def _describe(variant: tuple[int | None, bool, int], call_name: str) -> str:
    tile, by_beta, threads = variant
    engine = f"cuBLAS {call_name}" if tile is None else "CUTLASS 3xTF32 {}x{}x{} tile".format(*TF32X3_TILES[tile])
    return f"{engine}, bias {'through beta' if by_beta else 'in the epilogue'}, epilogue {threads} threads/block"


def _bias_rows_kernel(group: GemmGroup, params: list[Param], bias: Read) -> str:
    """Fills the product buffer with the bias rows, for cuBLAS to add with beta."""
    out = f"p_{group.outputs[0].name}"
    return (f"__global__ void __launch_bounds__(512) {group.name}_bias_rows({signature(params, True)}) {{\n"
            "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
            "  for (int64_t flat = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; "
            f"flat < {prod(group.out_shape)}LL; flat += step) {{\n"
            f"    {store(group.outputs[0], out + '[flat]', bias.load('flat'))}\n  }}\n}}\n")


def _launch(group: GemmGroup, params: list[Param], epilogue: Elementwise, variants, bias) -> list[str]:
    """cuBLAS, then the epilogue kernel; with the bias through beta, the bias rows first."""
    out, args, numel = f"p_{group.outputs[0].name}", call(params), f"{prod(group.out_shape)}LL"
    run_epilogue = _needs_epilogue(group)
    lines = []
    if bias or run_epilogue:
        lines += [table("int", "kThreads", [t for _, _, t in variants]), "  const int threads = kThreads[config];"]
    if bias:
        lines += [table("bool", "kBiasByBeta", ["true" if b else "false" for _, b, _ in variants]),
                  "  const bool by_beta = kBiasByBeta[config];",
                  f"  if (by_beta) {group.name}_bias_rows<<<ks_blocks({numel}, threads), threads, 0, stream>>>"
                  f"({args});"]
    beta = f"by_beta ? {ops.literal(group.beta)} : 0.0f" if bias else "0.0f"
    lines += _gemm_call(group, f"p_{group.a}, p_{group.b}, {out}, {beta}", variants)
    if not bias:
        return lines + (epilogue.launch("threads", "true") if run_epilogue else [])
    lines += ["  if (!by_beta)"] + epilogue.launch("threads", "true", "true")
    return lines + (["  else"] + epilogue.launch("threads", "true", "false") if run_epilogue else [])


def _gemm_call(group: GemmGroup, args: str, variants: list[tuple[int | None, bool, int]]) -> list[str]:
    """The GEMM: cuBLAS, or where variants have 3xTF32 tiles, the tile's CUTLASS kernel, with SGEMM where
    that one cannot run here (it says so before it launches anything)."""
    sgemm = f"{group.name}_gemm({args}, stream)"
    if all(tile is None for tile, _, _ in variants):
        return [f"  const int status = {sgemm};", "  if (status != 0) return status;"]
    return [table("int", "kTile", [-1 if tile is None else tile for tile, _, _ in variants]),
            f"  int status = kTile[config] < 0 ? -1 : {group.name}_gemm_tf32x3({args}, kTile[config], stream);",
            f"  if (status == -1) status = {sgemm};", "  if (status != 0) return status;"]


def _tf32x3(group: GemmGroup, values: dict[str, Value]) -> str:
    """`<name>_gemm_tf32x3.cu`: row-major C = A @ op(B) by CUTLASS's 3xTF32 GEMM, one case per tile."""
    (a_t, lda), (b_t, ldb) = _matrix(group, values, "a"), _matrix(group, values, "b")
    stride_a, stride_b = _strides(group, values)
    mode = "kBatched" if group.batch > 1 else "kGemm"
    cases = "\n".join(f"    case {i}: return ks_run<Tf32x3<{', '.join(map(str, tile))}>>(a, b, c, beta, stream);"
                      for i, tile in enumerate(TF32X3_TILES))
    return template("gemm_tf32x3.cuh").substitute(
        name=group.name, alpha=ops.literal(group.alpha), params=_gemm_params(group, values), layout_a=a_t,
        layout_b=b_t, mode=f"cutlass::gemm::GemmUniversalMode::{mode}", m=group.m, n=group.n, k=group.k,
        batch=group.batch, stride_a=stride_a, stride_b=stride_b, stride_c=group.m * group.n, lda=lda, ldb=ldb,
        cases=cases + "\n    default: return kFallBack;")


def _matrix(group: GemmGroup, values: dict[str, Value], operand: str) -> tuple[str, int]:
    """An operand's CUTLASS layout (a transposed one is column-major as it lies) and leading dimension."""
    layout = group.layout(operand, values)
    return ("cutlass::layout::ColumnMajor" if layout.transposed else "cutlass::layout::RowMajor"), layout.ld


FP32_MATH = "in true fp32 (CUBLAS_DEFAULT_MATH: no TF32)"


def _cublas(group: GemmGroup, values: dict[str, Value], precision: str | None = None) -> str:
    """`<name>_gemm.cu`: row-major C = A @ op(B) as cuBLAS's column-major C^T = op(B)^T A^T; SGEMM
    without a precision, cublasGemmEx with one."""
    call, math = (_sgemm(group, values), FP32_MATH) if precision is None else _gemm_ex(group, values, precision)
    params = _gemm_params(group, values)
    return template("gemm_cublas.cuh").substitute(name=group.name, alpha=ops.literal(group.alpha), call=call,
                                                  math=math, params=params, includes=includes(params))


def _strides(group: GemmGroup, values: dict[str, Value]) -> tuple[int, int]:
    """The batch strides of A and B (0: one matrix shared by the batch)."""
    return group.layout("a", values).batch_stride, group.layout("b", values).batch_stride


def _op(group: GemmGroup, values: dict[str, Value], operand: str) -> tuple[str, int]:
    """An operand's cuBLAS operation and leading dimension: a transposed one is read as it lies."""
    layout = group.layout(operand, values)
    return ("CUBLAS_OP_T" if layout.transposed else "CUBLAS_OP_N"), layout.ld


def _sgemm(group: GemmGroup, values: dict[str, Value]) -> str:
    m, n, k = group.m, group.n, group.k
    (op_a, lda), (op_b, ldb) = _op(group, values, "a"), _op(group, values, "b")
    common = f"handle, {op_b}, {op_a}, {n}, {m}, {k}, &alpha, b, {ldb}"
    if group.batch == 1:
        return f"status = cublasSgemm({common}, a, {lda}, &beta, c, {n});"
    stride_a, stride_b = _strides(group, values)
    return (f"status = cublasSgemmStridedBatched({common}, {stride_b}LL, a, {lda}, {stride_a}LL, &beta, c, "
            f"{n}, {m * n}LL, {group.batch});")


def _compute_type(precision: str) -> str:
    """TF32 tensor cores for float32 operands at tf32; float accumulation otherwise (16-bit operands
    run on tensor cores with it)."""
    return "CUBLAS_COMPUTE_32F_FAST_TF32" if precision == "tf32" else "CUBLAS_COMPUTE_32F"


def _ex_math(operands: str, precision: str) -> str:
    """What cublasGemmEx does with operands of this dtype at this precision."""
    if operands != "float32":
        return f"{operands} on tensor cores, float accumulation"
    return "float32 on TF32 tensor cores" if precision == "tf32" else "float32 in true fp32"


def _gemm_ex(group: GemmGroup, values: dict[str, Value], precision: str) -> tuple[str, str]:
    """The cublasGemmEx (or StridedBatchedEx) call, and what its math is."""
    m, n, k = group.m, group.n, group.k
    ab, c, compute = CUDA_TYPES[values[group.a].dtype], CUDA_TYPES[group.outputs[0].dtype], _compute_type(precision)
    (op_a, lda), (op_b, ldb) = _op(group, values, "a"), _op(group, values, "b")
    common = f"handle, {op_b}, {op_a}, {n}, {m}, {k}, &alpha, b, {ab}, {ldb}"
    if group.batch == 1:
        call = f"status = cublasGemmEx({common}, a, {ab}, {lda}, &beta, c, {c}, {n}, {compute}, CUBLAS_GEMM_DEFAULT);"
    else:
        stride_a, stride_b = _strides(group, values)
        call = (f"status = cublasGemmStridedBatchedEx({common}, {stride_b}LL, a, {ab}, {lda}, {stride_a}LL, &beta, c, "
                f"{c}, {n}, {m * n}LL, {group.batch}, {compute}, CUBLAS_GEMM_DEFAULT);")
    return call, f"{_ex_math(values[group.a].dtype, precision)} ({compute}), C written as {c}"
