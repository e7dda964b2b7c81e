"""GEMMs. Where both operands are float32, variant 0 multiplies with the BLAS sgemm torch's own CPU build
carries (MKL's on x86; the CPU's cuBLAS), then applies the bias and the epilogue in one threaded pass; a
torch without it falls back to the loop. The other variants, and every 16-bit GEMM: a dot product per
output element, the bias and the epilogue applied before the store. Each operand is read where its layout
puts it (a transposed or expanded view in place, as cuBLAS does)."""

from __future__ import annotations

from kernelsmith.compiler.cpu.common import SCHEDULES, as_float, body_lines, dispatched, loads, store
from kernelsmith.compiler.cstyle import ops
from kernelsmith.compiler.ir import GemmGroup, Value

# Weak: a torch build without it loads as well, and the variant then runs the loop (sgemm_ is null).
SGEMM_DECLARATION = ('extern "C" void sgemm_(const char*, const char*, const int*, const int*, const int*, '
                     'const float*, const float*, const int*, const float*, const int*, const float*, float*, '
                     'const int*) __attribute__((weak));\n')
BLAS_VARIANT = "BLAS sgemm, then the epilogue across threads (omp static)"
INT_MAX = 2**31 - 1  # the LP64 interface's ints


def gemm(group: GemmGroup) -> tuple[str, list[str]]:
    """The kernel's C++ and its variants' names."""
    value = {v.name: v for v in group.inputs}
    loops = [_loop(group, _dot_lines(group, value), pragma) for _, pragma in SCHEDULES]
    names = [name for name, _ in SCHEDULES]
    if not _blas_fits(group, value):
        return dispatched(group, loops), names
    blas = _blas_body(group, value, fallback=loops[0])
    return SGEMM_DECLARATION + dispatched(group, [blas] + loops), [BLAS_VARIANT] + names


def _flat(group: GemmGroup) -> str:
    return f"((bt * {group.m}LL + row) * {group.n}LL + j)"


def _acc_lines(group: GemmGroup, value: dict[str, Value], product: str) -> list[str]:
    """acc (alpha x the product plus beta x the bias), the epilogue and the stores, for output element j."""
    index = {v.name: i for i, v in enumerate(group.inputs)}
    bias = f" + {ops.literal(group.beta)} * {as_float(value[group.bias], f'in{index[group.bias]}[j]')}" \
        if group.bias else ""
    names = {group.result: "acc"}
    others = [v.name for v in group.inputs if v.name not in (group.a, group.b, group.bias)]
    epilogue = loads(group, group.out_shape, _flat(group), names, only=others) + body_lines(group.epilogue, names)
    stores = ["    " + store(o, f"out{j}[{_flat(group)}]", names[o.name]) for j, o in enumerate(group.outputs)]
    return [f"    const float acc = {product}{bias};"] + epilogue + stores


def _dot_lines(group: GemmGroup, value: dict[str, Value]) -> list[str]:
    index = {v.name: i for i, v in enumerate(group.inputs)}
    a_at = as_float(value[group.a], f"in{index[group.a]}[{_element(group, value, 'a', 'row', 'kk')}]")
    b_at = as_float(value[group.b], f"in{index[group.b]}[{_element(group, value, 'b', 'kk', 'j')}]")
    return ["    float dot = 0.0f;", f"    for (int64_t kk = 0; kk < {group.k}LL; ++kk) dot += {a_at} * {b_at};"] \
        + _acc_lines(group, value, f"{ops.literal(group.alpha)} * dot")


def _loop(group: GemmGroup, lines: list[str], pragma: str) -> str:
    """Every output row of every batch shared among threads as the pragma says, its columns in turn."""
    body = [f"  for (int64_t j = 0; j < {group.n}LL; ++j) {{"] + lines + ["  }"]
    return (f"  {pragma}\n  for (int64_t task = 0; task < {group.batch * group.m}LL; ++task) {{\n"
            f"    const int64_t bt = task / {group.m}LL, row = task % {group.m}LL; (void)bt;\n"
            + "\n".join("  " + ln for ln in body) + "\n  }")


def _blas_fits(group: GemmGroup, value: dict[str, Value]) -> bool:
    dims = (group.m, group.n, group.k, group.layout("a", value).ld, group.layout("b", value).ld)
    return all(value[o].dtype == "float32" for o in (group.a, group.b)) and max(dims) <= INT_MAX


def _blas_body(group: GemmGroup, value: dict[str, Value], fallback: str) -> str:
    """C = alpha A B by sgemm into a scratch buffer, per batch, then acc = C + bias and the epilogue.
    BLAS is column-major: row-major C (m x n) is C^T = B^T A^T there, so B goes first, each operand
    transposed ('T') exactly when its layout is, with its own leading dimension."""
    index = {v.name: i for i, v in enumerate(group.inputs)}
    a, b = group.layout("a", value), group.layout("b", value)
    m, n, k = group.m, group.n, group.k

    def at(operand: str, layout) -> str:
        step = f" + bt * {layout.batch_stride}LL" if group.batch > 1 and layout.batch_stride else ""
        return f"in{index[getattr(group, operand)]}{step}"

    call = [f"  const char ks_ta = '{'T' if a.transposed else 'N'}', ks_tb = '{'T' if b.transposed else 'N'}';",
            f"  const int ks_m = {n}, ks_n = {m}, ks_k = {k}, ks_lda = {b.ld}, ks_ldb = {a.ld}, ks_ldc = {n};",
            f"  const float ks_alpha = {ops.literal(group.alpha)}, ks_zero = 0.0f;",
            f"  std::vector<float> ks_c((size_t){group.batch * m * n}LL);",
            f"  for (int64_t bt = 0; bt < {group.batch}LL; ++bt)",
            f"    sgemm_(&ks_tb, &ks_ta, &ks_m, &ks_n, &ks_k, &ks_alpha, {at('b', b)}, &ks_lda, {at('a', a)}, "
            f"&ks_ldb, &ks_zero, ks_c.data() + bt * {m * n}LL, &ks_ldc);"]
    pass_ = _loop(group, _acc_lines(group, value, f"ks_c[{_flat(group)}]"), SCHEDULES[0][1])
    return (f"  if (sgemm_ == nullptr) {{  // this torch has no BLAS sgemm: the first loop variant\n{fallback}\n"
            "    return;\n  }\n" + "\n".join(call) + "\n" + pass_)


def _element(group: GemmGroup, values: dict[str, Value], operand: str, row: str, col: str) -> str:
    """The offset of operand element (row, col) of batch bt: row-major, or column-major when transposed."""
    layout = group.layout(operand, values)
    batch = f"bt * {layout.batch_stride}LL + " if group.batch > 1 and layout.batch_stride else ""
    inside = f"{col} * {layout.ld}LL + {row}" if layout.transposed else f"{row} * {layout.ld}LL + {col}"
    return batch + inside
