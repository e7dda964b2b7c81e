"""C++ building blocks every CPU kernel uses: the kernel's parameters, input loads, and one
function per schedule with a dispatcher on `config`."""

from __future__ import annotations

from kernelsmith.compiler import text
from kernelsmith.compiler.cstyle import ops
from kernelsmith.compiler.cstyle.access import Access, access_for, broadcastable
from kernelsmith.compiler.ir import Group, ReductionGroup, Value

SCHEDULES = [("omp static", "#pragma omp parallel for schedule(static)"),
             ("omp dynamic, chunks of 16", "#pragma omp parallel for schedule(dynamic, 16)"),
             ("one thread", "")]


# libm's erff and expf are scalar calls that stop a loop from vectorising; text/header.h's ks_erff (a rational
# approximation, at most 4.2e-7 from erf) and ks_expf (Cephes's, 8.5e-8 relative) are branch-free and vectorise
# with the loop around them. sigmoid, silu, elu's and softplus's exp go through ks_expf.
MATH = {"erff": "ks_erff", "expf": "ks_expf", "tanhf": "ks_tanhf"}


def body_lines(body, names: dict[str, str], indent: str = "    ") -> list[str]:
    """cstyle's ops as C++ lines with the CPU target's own math functions."""
    return ops.body_lines(body, names, indent, MATH)


def header() -> str:
    """The includes and KsStrides every `<group>.cpp` starts with (text/header.h)."""
    return text.fixed(__package__, "header.h")


def params(group: Group) -> str:
    """Kernel parameters: each input (and its strides when strided), then each output."""
    parts = [f"const {in_ctype(v)}* __restrict__ in{i}, KsStrides st{i}" for i, v in enumerate(group.inputs)]
    parts += [f"{ctype(o)}* __restrict__ out{j}" for j, o in enumerate(group.outputs)]
    return ", ".join(parts)


# c10's 16-bit floats: converted to float when loaded and rounded to nearest when stored, explicitly
# (their implicit conversions would also let two of them multiply in 16 bits).
HALF_TYPES = {"bfloat16": "c10::BFloat16", "float16": "c10::Half"}


def ctype(value: Value) -> str:
    if value.dtype in HALF_TYPES:
        return HALF_TYPES[value.dtype]
    return "int64_t" if value.dtype == "int64" else "float"


def in_ctype(value: Value) -> str:
    return "bool" if value.dtype == "bool" else ctype(value)  # a bool input joins float math as 0 or 1


def as_float(value: Value, expr: str) -> str:
    """A loaded element of `value` as a float expression (a float32 one as it is)."""
    if value.dtype == "bool":
        return f"(float){expr}"
    return f"static_cast<float>({expr})" if value.dtype in HALF_TYPES else expr


def store(value: Value, target: str, expr: str) -> str:
    """The statement storing float `expr` into `target`, an element of `value`: rounded to its dtype."""
    return f"{target} = {HALF_TYPES[value.dtype]}({expr});" if value.dtype in HALF_TYPES else f"{target} = {expr};"


def broadcasts(value: Value, shape) -> bool:
    return broadcastable(value.shape, shape)


def loads(group: Group, space: tuple[int, ...], flat: str, names: dict[str, str], only=None) -> list[str]:
    """Load the inputs that broadcast to `space` at flat index `flat` into named floats."""
    lines = []
    for i, value in enumerate(group.inputs):
        if only is not None and value.name not in only:
            continue
        access = access_for(value.shape, value.contiguous, space)
        offset = access.offset_expr(flat, f"st{i}.s")
        lines.append(f"    const float a{i} = {as_float(value, f'in{i}[{offset}]')};")
        names[value.name] = f"a{i}"
    return lines


def run_read(value: Value, shape: tuple[int, ...], split: int) -> str:
    """How `value` is read along the last `split` dims: contiguous, broadcast (one element), or strided."""
    access = access_for(value.shape, value.contiguous, shape)
    if access.mode == "dense":
        return "contiguous"
    if access.mode == "scalar":
        return "broadcast"
    suffix, space = access.value_shape[-split:], shape[-split:]
    if all(s == 1 for s in suffix):
        return "broadcast"
    return "contiguous" if value.contiguous and tuple(suffix) == tuple(space) else "strided"


def base_line(i: int, value: Value, shape: tuple[int, ...], split: int, row: str) -> str:
    """The offset of row `row` (of the dims before the last `split`) into a broadcast or strided input, as
    `b<i>`; dense and scalar inputs need none."""
    access = access_for(value.shape, value.contiguous, shape)
    if access.mode != "strided":
        return ""
    prefix = Access("strided", shape[:-split], access.value_shape[:-split]).offset_expr(row, f"st{i}.s")
    return f"    const int64_t b{i} = {prefix if shape[:-split] else '0'};\n"


def variants(group: Group, loop_for) -> str:
    """One function per schedule, `loop_for(pragma)` its body, and a dispatcher on config."""
    return dispatched(group, [loop_for(pragma) for _, pragma in SCHEDULES])


def dispatched(group: Group, bodies: list[str]) -> str:
    """`<name>_v<i>` with each body, and `<name>_run(config, ...)` calling the one config names (0 otherwise)."""
    name, signature, call_args = group.name, params(group), call_arguments(group)
    out = [f"static void {name}_v{v}({signature}) {{\n{body}\n}}\n" for v, body in enumerate(bodies)]
    cases = "\n".join(f"    case {v}: {name}_v{v}({call_args}); break;" for v in range(len(bodies)))
    out.append(f"static void {name}_run(int config, {signature}) {{\n  switch (config) {{\n{cases}\n"
               f"    default: {name}_v0({call_args});\n  }}\n}}\n")
    return "\n".join(out)


def call_arguments(group: Group) -> str:
    return ", ".join([f"in{i}, st{i}" for i in range(len(group.inputs))] +
                     [f"out{j}" for j in range(len(group.outputs))])


def row_loop(group: ReductionGroup, lines: list[str]):
    """A loop_for over the lines (o, i) of a reduction's operand viewed as [outer, size, inner]."""
    def loop(pragma):
        inner = group.inner
        return (f"  {pragma}\n  for (int64_t row = 0; row < {group.outer * inner}LL; ++row) {{\n"
                f"    const int64_t o = row / {inner}LL, i = row % {inner}LL;\n" + "\n".join(lines) + "\n  }")
    return loop
