"""GEMMs: a dot product per output element, the bias and the epilogue applied before the store. Each
operand is read where its layout puts it (a transposed or expanded view in place, as cuBLAS does)."""

from __future__ import annotations

from kernelsmith.compiler.cpu.common import as_float, body_lines, loads, store, variants
from kernelsmith.compiler.cstyle import ops
from kernelsmith.compiler.ir import GemmGroup, Value


def gemm(group: GemmGroup) -> str:
    m, n, k = group.m, group.n, group.k
    index, value = {v.name: i for i, v in enumerate(group.inputs)}, {v.name: v for v in group.inputs}
    bias = f" + {ops.literal(group.beta)} * {as_float(value[group.bias], f'in{index[group.bias]}[j]')}" \
        if group.bias else ""
    names = {group.result: "acc"}
    others = [v.name for v in group.inputs if v.name not in (group.a, group.b, group.bias)]
    flat = f"((bt * {m}LL + row) * {n}LL + j)"
    epilogue = loads(group, group.out_shape, flat, names, only=others) + body_lines(group.epilogue, names)
    stores = ["    " + store(o, f"out{j}[{flat}]", names[o.name]) for j, o in enumerate(group.outputs)]
    a_at = as_float(value[group.a], f"in{index[group.a]}[{_element(group, value, 'a', 'row', 'kk')}]")
    b_at = as_float(value[group.b], f"in{index[group.b]}[{_element(group, value, 'b', 'kk', 'j')}]")
    body = [f"  for (int64_t j = 0; j < {n}LL; ++j) {{", "    float dot = 0.0f;",
            f"    for (int64_t kk = 0; kk < {k}LL; ++kk) dot += {a_at} * {b_at};",
            f"    const float acc = {ops.literal(group.alpha)} * dot{bias};"]
    body += epilogue + stores + ["  }"]

    def loop(pragma):
        return (f"  {pragma}\n  for (int64_t task = 0; task < {group.batch * m}LL; ++task) {{\n"
                f"    const int64_t bt = task / {m}LL, row = task % {m}LL; (void)bt;\n"
                + "\n".join("  " + ln for ln in body) + "\n  }")
    return variants(group, loop)


def _element(group: GemmGroup, values: dict[str, Value], operand: str, row: str, col: str) -> str:
    """The offset of operand element (row, col) of batch bt: row-major, or column-major when transposed."""
    layout = group.layout(operand, values)
    batch = f"bt * {layout.batch_stride}LL + " if group.batch > 1 and layout.batch_stride else ""
    inside = f"{col} * {layout.ld}LL + {row}" if layout.transposed else f"{row} * {layout.ld}LL + {col}"
    return batch + inside
