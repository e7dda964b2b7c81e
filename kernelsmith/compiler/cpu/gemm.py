"""GEMMs: a dot product per output element, the bias and the epilogue applied before the store."""

from __future__ import annotations

from kernelsmith.compiler.cpu.common import as_float, body_lines, loads, store, variants
from kernelsmith.compiler.cstyle import ops
from kernelsmith.compiler.ir import GemmGroup


def gemm(group: GemmGroup) -> str:
    m, n, k = group.m, group.n, group.k
    index, value = {v.name: i for i, v in enumerate(group.inputs)}, {v.name: v for v in group.inputs}
    a, b = f"in{index[group.a]}", f"in{index[group.b]}"
    b_at = f"{b}[j * {k}LL + kk]" if group.trans_b else f"{b}[kk * {n}LL + j]"
    bias = f" + {ops.literal(group.beta)} * {as_float(value[group.bias], f'in{index[group.bias]}[j]')}" \
        if group.bias else ""
    names = {group.result: "acc"}
    others = [v.name for v in group.inputs if v.name not in (group.a, group.b, group.bias)]
    flat = f"((bt * {m}LL + row) * {n}LL + j)"
    epilogue = loads(group, group.out_shape, flat, names, only=others) + body_lines(group.epilogue, names)
    stores = ["    " + store(o, f"out{j}[{flat}]", names[o.name]) for j, o in enumerate(group.outputs)]
    batch_a = f"bt * {m * k}LL + " if group.batch > 1 else ""
    batch_b = f"bt * {k * n}LL + " if group.batch > 1 else ""
    a_at = as_float(value[group.a], f"{a}[{batch_a}row * {k}LL + kk]")
    b_at = as_float(value[group.b], b_at.replace("[", f"[{batch_b}", 1))
    body = [f"  for (int64_t j = 0; j < {n}LL; ++j) {{", "    float dot = 0.0f;",
            f"    for (int64_t kk = 0; kk < {k}LL; ++kk) dot += {a_at} * {b_at};",
            f"    const float acc = {ops.literal(group.alpha)} * dot{bias};"]
    body += epilogue + stores + ["  }"]

    def loop(pragma):
        return (f"  {pragma}\n  for (int64_t task = 0; task < {group.batch * m}LL; ++task) {{\n"
                f"    const int64_t bt = task / {m}LL, row = task % {m}LL; (void)bt;\n"
                + "\n".join("  " + ln for ln in body) + "\n  }")
    return variants(group, loop)
