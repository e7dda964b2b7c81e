"""Recurrent groups (nn.LSTM, nn.GRU): text/recurrent.cuh runs the layer stack on the caller's stream (per
layer and direction, the input projection of all steps as one SGEMM; per step, the recurrent SGEMM and one
cell kernel). `<name>_gemm.cu` holds the cuBLAS call (text/gemm_cublas.cuh, true fp32); the launcher
generated here names the sizes, the weights in layer order and where each result goes. The binding
allocates the stack's working memory (its sequences and products) as `scratch`."""

from __future__ import annotations

from kernelsmith.compiler.cuda.binding import generated
from kernelsmith.compiler.cuda.common import (Param, cu_file, fixed, input_params, launcher, output_params, table,
                                              template)
from kernelsmith.compiler.cuda.gemm import FP32_MATH
from kernelsmith.compiler.ir import Generated
from kernelsmith.compiler.recurrent import ROLES, RecurrentGroup, tensors

THREADS = (256, 128)
GEMM_PARAMS = "int m, int n, int k, const float* a, int lda, const float* w, float* c"
# row-major c[m, n] = a[m, k] @ w[n, k]^T is column-major c^T[n, m] = op_T(w) @ a:
# w (ld k) read transposed, a (ld lda) as it lies
SGEMM = "status = cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, k, a, lda, &beta, c, n);"


def recurrent(group: RecurrentGroup) -> Generated:
    _check(group)
    params = input_params(group) + output_params(group) + [Param("float*", "p_scratch", "scratch.data_ptr<float>()")]
    what = (f"{group.layers}-layer {'bidirectional ' if group.directions == 2 else ''}{group.cell.upper()} over "
            f"{group.seq} steps of a batch of {group.batch}, hidden {group.hidden}")
    files = {f"{group.name}.cu": cu_file(group, what, [fixed("recurrent.cuh")], _launcher(group, params)),
             f"{group.name}_gemm.cu": _cublas(group)}
    variants = [f"cuBLAS sgemm per step, cell kernel {t} threads/block" for t in THREADS]
    return generated(group, files, params, set(tensors(group)), variants, scratch=_scratch(group))


def _check(group: RecurrentGroup) -> None:
    wrong = [v for v in group.inputs + group.outputs if v.dtype != "float32"]
    if wrong:
        raise ValueError(f"{group.name}: {wrong[0].name} is {wrong[0].dtype}; recurrent layers are generated in "
                         "float32 only")
    if max(group.seq * group.batch, group.gates * group.hidden, group.layer_input(1)) > 2**31 - 1:
        raise ValueError(f"{group.name}: sizes beyond cuBLAS's int are unsupported")


def _scratch(group: RecurrentGroup) -> int:
    """The floats ks_rnn_run lays out: two layer sequences, the input projection, the recurrent product, two states."""
    rows, gh = group.seq * group.batch, group.gates * group.hidden
    return 2 * rows * group.directions * group.hidden + rows * gh + group.batch * gh + 2 * group.batch * group.hidden


def _launcher(group: RecurrentGroup, params: list[Param]) -> str:
    declared = (f'extern "C" int {group.name}_gemm({GEMM_PARAMS}, float beta, cudaStream_t stream);'
                f"  // in {group.name}_gemm.cu\n\n")
    weights = ", ".join(f"p_{w}" for layer in group.weights for w in layer)
    body = [table("int", "kThreads", THREADS), f"  {_sizes(group)}", f"  const float* weights[] = {{{weights}}};",
            f"  const int status = ks_rnn_run(s, {group.name}_gemm, {', '.join(_pointers(group))}, p_scratch, stream);",
            "  if (status != 0) return status;"]
    return declared + launcher(group.name, params, len(THREADS), body)


def _sizes(group: RecurrentGroup) -> str:
    flags = [group.batch_first, group.cell == "lstm", len(group.weights[0]) == 4]
    sizes = [group.seq, group.batch, group.input_size, group.hidden, group.layers, group.directions, group.gates]
    return (f"const KsRnn s{{{', '.join(f'{n}LL' for n in sizes)}, "
            f"{', '.join('true' if f else 'false' for f in flags)}, kThreads[config]}};")


def _pointers(group: RecurrentGroup) -> list[str]:
    """x, h0, c0, the weights table, then output, h_n, c_n: nullptr for a state not given or a result not written."""
    states = [f"p_{n}" if n else "nullptr" for n in (group.x, group.h0, group.c0)]
    return states + ["weights"] + [f"p_{group.stored(r)}" if group.stored(r) else "nullptr" for r in ROLES]


def _cublas(group: RecurrentGroup) -> str:
    """`<name>_gemm.cu`: the one SGEMM shape both GEMMs of the stack take, x @ W^T."""
    return template("gemm_cublas.cuh").substitute(name=group.name, alpha="1.0f", call=SGEMM, math=FP32_MATH,
                                                  params=GEMM_PARAMS, includes="")
