"""C building blocks every CUDA kernel family uses: launcher parameters, how a kernel reads an
input, the .cu file around the kernels, and the launcher's `switch (config)`."""

from __future__ import annotations

from dataclasses import dataclass

from kernelsmith.compiler import text
from kernelsmith.compiler.cstyle.access import Access, access_for
from kernelsmith.compiler.ir import Group, ReductionGroup, Value

MAX_BLOCKS = 1 << 20  # grid-stride loops cover the rest
INT_MAX = 2**31 - 1
ARG_REDUCTIONS = ("argmax", "argmin")
HELPERS = ("ks_blocks", "ks_aligned", "ks_bf16x4", "ks_half4")  # pasted into a .cu that calls them, in this order


@dataclass(frozen=True)
class Half:
    """A 16-bit float as CUDA stores it. torch builds with __CUDA_NO_HALF_CONVERSIONS__ and
    __CUDA_NO_BFLOAT16_CONVERSIONS__, so every conversion is a named call: into float math when
    loaded, rounded to nearest when stored. `vector` converts four at once (text/<vector>.cuh)."""

    ctype: str
    to_float: str
    from_float: str
    aten: str  # ATen's C++ type, for data_ptr<>
    header: str
    vector: str
    cuda_type: str  # cudaDataType_t, for cuBLAS
    cudnn_type: str


HALF_TYPES = {"bfloat16": Half("__nv_bfloat16", "__bfloat162float", "__float2bfloat16_rn", "at::BFloat16",
                               "cuda_bf16.h", "ks_bf16x4", "CUDA_R_16BF", "CUDNN_DATA_BFLOAT16"),
              "float16": Half("__half", "__half2float", "__float2half_rn", "at::Half", "cuda_fp16.h", "ks_half4",
                              "CUDA_R_16F", "CUDNN_DATA_HALF")}


def as_float(value: Value, expr: str) -> str:
    """A loaded element of `value` as a float expression (a float32 one as it is)."""
    return f"{HALF_TYPES[value.dtype].to_float}({expr})" if value.dtype in HALF_TYPES else expr


def store(value: Value, target: str, expr: str) -> str:
    """The statement storing float `expr` into `target`, an element of `value`: rounded to its dtype."""
    stored = f"{HALF_TYPES[value.dtype].from_float}({expr})" if value.dtype in HALF_TYPES else expr
    return f"{target} = {stored};"


def includes(code: str) -> str:
    """The headers of the 16-bit types `code` names, one `#include` line each after a newline ("" for none)."""
    return "".join(f"\n#include <{h.header}>" for h in HALF_TYPES.values() if h.ctype in code or f"{h.vector}(" in code)


def template(name: str):
    return text.template(__package__, name)


def fixed(name: str) -> str:
    return text.fixed(__package__, name)


@dataclass
class Param:
    """An argument of the launcher and of its kernels: C type, C name, the binding's expression."""

    ctype: str
    name: str
    arg: str

    def declare(self, restrict: bool = False) -> str:
        qualifier = " __restrict__" if restrict and self.ctype.endswith("*") else ""
        return f"{self.ctype}{qualifier} {self.name}"


@dataclass
class Read:
    """An input as a kernel reads it in one index space (access.py): pointer, mode, strides."""

    value: Value
    access: Access
    var: str  # the C variable holding one loaded element
    pointer: str
    strides: str = ""  # its KsStrides parameter (strided reads only)
    cached: bool = True  # read-only while the kernel runs: loaded through __ldg

    @property
    def is_bool(self) -> bool:
        return self.value.dtype == "bool"

    def load(self, flat: str) -> str:
        if self.value.scalar:
            return self.pointer  # a float argument of the kernel, not a pointer
        element = f"{self.pointer}[{self.access.offset_expr(flat, self.strides + '.s')}]"
        loaded = f"__ldg(&{element})" if self.cached else element
        return f"(float){loaded}" if self.is_bool else as_float(self.value, loaded)  # a bool: 0 or 1


def read(value: Value, space: tuple[int, ...], var_prefix: str = "x_", strides_prefix: str = "s_") -> Read:
    access = access_for(value.shape, value.contiguous, space)
    strides = f"{strides_prefix}{value.name}" if access.mode == "strided" else ""
    return Read(value, access, f"{var_prefix}{value.name}", f"p_{value.name}", strides)


def vec4_load(read: Read, var: str, index: str) -> str:
    """`const float4 <var> = ...;`: the four elements at vector index `index` of a dense read, as floats (16-bit
    ones: 8 bytes, widened; bools: 4 bytes, an uchar4 whose lanes the caller casts)."""
    half = HALF_TYPES.get(read.value.dtype)
    kind = "uchar4" if read.is_bool else "uint2" if half else "float4"
    vector = f"reinterpret_cast<const {kind}*>({read.pointer})"
    load = f"__ldg({vector} + {index})" if read.cached else f"{vector}[{index}]"
    if half:
        return f"const float4 {var} = {half.vector}({load});"
    return f"const {kind} {var} = {load};"


def vec4_store(out: Value, index: str, result: str) -> str:
    """The statement storing float4 `result` at vector index `index` of a dense output, rounded to its dtype."""
    half = HALF_TYPES.get(out.dtype)
    if half:
        return f"reinterpret_cast<uint2*>(p_{out.name})[{index}] = {half.vector}({result});"
    return f"reinterpret_cast<float4*>(p_{out.name})[{index}] = {result};"


def ctype(value: Value) -> str:
    if value.dtype in HALF_TYPES:
        return HALF_TYPES[value.dtype].ctype
    return "int64_t" if value.dtype == "int64" else "float"


def braced(shape) -> str:
    return "{" + ", ".join(str(int(s)) for s in shape) + "}"


def input_params(group: Group) -> list[Param]:
    return [_input_param(v) for v in group.inputs]


def _input_param(v: Value) -> Param:
    if v.scalar:
        return Param("float", f"p_{v.name}", f"(float)in_{v.name}")
    if v.dtype == "bool":
        return Param("const unsigned char*", f"p_{v.name}", f"(const unsigned char*)in_{v.name}.data_ptr<bool>()")
    if v.dtype in HALF_TYPES:
        return _half_param(v, f"in_{v.name}", "const ")
    return Param("const float*", f"p_{v.name}", f"in_{v.name}.data_ptr<float>()")


def _half_param(v: Value, tensor: str, const: str) -> Param:
    """ATen's at::BFloat16 / at::Half and CUDA's __nv_bfloat16 / __half are the same 16 bits."""
    half = HALF_TYPES[v.dtype]
    return Param(f"{const}{half.ctype}*", f"p_{v.name}",
                 f"reinterpret_cast<{const}{half.ctype}*>({tensor}.data_ptr<{half.aten}>())")


def stride_params(reads: list[Read]) -> list[Param]:
    return [Param("KsStrides", r.strides, f"ks_strides(in_{r.value.name}, {braced(r.access.shape)})")
            for r in reads if r.strides]


def output_params(group: Group) -> list[Param]:
    return [_half_param(v, f"out_{v.name}", "") if v.dtype in HALF_TYPES else
            Param(f"{ctype(v)}*", f"p_{v.name}", f"out_{v.name}.data_ptr<{ctype(v)}>()") for v in group.outputs]


def signature(params: list[Param], restrict: bool = False) -> str:
    return ", ".join(p.declare(restrict) for p in params)


def call(params: list[Param]) -> str:
    return ", ".join(p.name for p in params)


def used(op_list) -> set[str]:
    return {a for op in op_list for a in op.tensor_args()}


def indent(lines: list[str], spaces: int = 2) -> list[str]:
    return [" " * spaces + line for line in lines]


def dense(reads: list[Read]) -> set[str]:
    return {r.value.name for r in reads if r.access.mode == "dense"}


def require_outputs(group: Group, names: dict[str, str], numel: int) -> None:
    for out in group.outputs:
        if out.name not in names:
            raise ValueError(f"{group.name}: output {out.name} is not computed by the group (unsupported)")
        if out.numel != numel:
            raise ValueError(f"{group.name}: output {out.name} has {out.numel} elements, not {numel} (unsupported)")


# --- the .cu file and its launcher ---------------------------------------------------------

def cu_file(group: Group, what: str, kernels: list[str], launcher: str) -> str:
    """A .cu: header, the helpers the code calls, the kernels (file-local), the launcher."""
    code = "\n".join(kernels) + "\n}  // namespace\n\n" + launcher
    helpers = [_helper(name) for name in HELPERS if f"{name}(" in code]
    head = template("file_head.cuh").substitute(what=what, name=group.name, includes=includes(code))
    return head + "\n".join(helpers + [code])


def _helper(name: str) -> str:
    return template(f"{name}.cuh").substitute(max_blocks=MAX_BLOCKS)


def launcher(name: str, params: list[Param], variants: int, body: list[str]) -> str:
    return (f'extern "C" int {name}_launch({signature(params)}, int config, cudaStream_t stream) {{\n'
            f"  if (config < 0 || config >= {variants}) config = 0;\n"
            + "\n".join(body) + "\n  return (int)cudaGetLastError();\n}\n")


def table(c_type: str, name: str, items) -> str:
    return f"  static const {c_type} {name}[] = {{{', '.join(str(i) for i in items)}}};"


def switch(cases: list[list[str]]) -> list[str]:
    """`switch (config)`: case i runs the statements cases[i]; case 0 is also the default."""
    lines = ["  switch (config) {"]
    for index, statements in enumerate(cases):
        label = "default" if index == 0 else f"case {index}"
        if len(statements) == 1:
            lines.append(f"    {label}: {statements[0]} break;")
        else:
            lines += [f"    {label}:"] + [f"      {s}" for s in statements] + ["      break;"]
    return lines + ["  }"]


def slot_launch(kernel: str, params: list[Param], team: int, slots: int) -> str:
    """One launch of a kernel that gives each of kSlots lines a team: `slots` lines of `team` threads a block."""
    return f"{kernel}<<<ks_blocks(kSlots, {slots}), {team * slots}, 0, stream>>>({call(params)});"


def line_constants(group: ReductionGroup) -> str:
    """The operand viewed as [outer, size, inner]: kSlots = outer * inner lines of kSize elements."""
    return (f"constexpr int64_t kSlots = {group.outer * group.inner}LL, kSize = {group.size}LL, "
            f"kInner = {group.inner}LL;\n")
