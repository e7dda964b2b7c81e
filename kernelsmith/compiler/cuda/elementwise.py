"""Elementwise kernels: pointwise groups, and the epilogue that runs in place after a library
call (cuBLAS, cuDNN) wrote its result into the first output."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from kernelsmith.compiler.cstyle import ops
from kernelsmith.compiler.cstyle.access import Access
from kernelsmith.compiler.cuda.binding import generated
from kernelsmith.compiler.cuda.common import (Param, Read, call, cu_file, dense, indent, input_params, launcher,
                                              output_params, read, require_outputs, signature, store, stride_params,
                                              table, vec4_load, vec4_store)
from kernelsmith.compiler.ir import Generated, Group, PointwiseGroup, Value


@dataclass
class Elementwise:
    """Grid-stride kernels over `numel` elements of one index space, in two flavours: float4
    loads and stores of the dense operands (the others loaded per lane), and one element per
    step (the tail, misaligned pointers, or the scalar variants)."""

    name: str
    numel: int
    reads: list[Read]
    body: list[str]  # computes the results from the reads' variables
    results: list[str]  # the C variable stored to each output
    outputs: list[Value]  # the outputs, in the same order (pointer p_<name>)
    params: list[Param]
    template: str = ""  # a template parameter of the kernels, e.g. "bool ADD_BIAS"

    def source(self) -> str:
        return "\n".join([self._element(), self._vec4_kernel(), self._scalar_kernel()])

    def launch(self, threads: str, vectorize: str, template_arg: str = "") -> list[str]:
        """Statements that launch the kernels for the launcher's `threads` and `vectorize`."""
        targ = f"<{template_arg}>" if template_arg else ""
        aligned = " && ".join(f"ks_aligned({p})" for p in dict.fromkeys(self._vector_pointers()))
        args, n = call(self.params), f"{self.numel}LL"
        return [f"  {{",
                f"    const int64_t n_vec = ({vectorize} && {aligned}) ? {n} / 4 : 0;",
                f"    if (n_vec > 0) {self.name}_vec4{targ}<<<ks_blocks(n_vec, {threads}), {threads}, 0, stream>>>"
                f"({args}, n_vec);",
                f"    if (n_vec * 4 < {n}) {self.name}_scalar{targ}<<<ks_blocks({n} - n_vec * 4, {threads}), "
                f"{threads}, 0, stream>>>({args}, n_vec * 4);",
                "  }"]

    def _vector_pointers(self) -> list[str]:
        return [r.pointer for r in self.reads if r.access.mode == "dense"] + [f"p_{o.name}" for o in self.outputs]

    def _template_head(self) -> str:
        return f"template <{self.template}>\n" if self.template else ""

    def _element_call(self, args: list[str]) -> str:
        targ = f"<{self.template.split()[-1]}>" if self.template else ""
        return f"{self.name}_element{targ}({', '.join(args)});"

    def _element(self) -> str:
        args = [f"float {r.var}" for r in self.reads] + [f"float& y_{j}" for j in range(len(self.results))]
        sets = [f"  y_{j} = {var};" for j, var in enumerate(self.results)]
        return (f"{self._template_head()}__device__ __forceinline__ void {self.name}_element({', '.join(args)}) {{\n"
                + "\n".join(indent(self.body) + sets) + "\n}\n")

    def _lane_arg(self, index: int, read: Read, lane: int) -> str:
        if read.access.mode == "dense":
            return f"{'(float)' if read.is_bool else ''}q{index}.{'xyzw'[lane]}"
        if read.access.mode == "scalar":
            return read.var
        return read.load(f"(4 * v + {lane})")

    def _vec4_kernel(self) -> str:
        results = [f"r{j}" for j in range(len(self.results))]
        hoisted = [f"  const float {r.var} = {r.load('0')};" for r in self.reads if r.access.mode == "scalar"]
        loads = ["    " + vec4_load(r, f"q{i}", "v") for i, r in enumerate(self.reads) if r.access.mode == "dense"]
        calls = [self._element_call([self._lane_arg(i, r, lane) for i, r in enumerate(self.reads)]
                                    + [f"{res}.{'xyzw'[lane]}" for res in results]) for lane in range(4)]
        stores = ["    " + vec4_store(out, "v", res) for out, res in zip(self.outputs, results)]
        return (f"{self._template_head()}__global__ void __launch_bounds__(512) "
                f"{self.name}_vec4({signature(self.params, True)}, int64_t n_vec) {{\n"
                + "\n".join(hoisted) + ("\n" if hoisted else "")
                + "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
                "  for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < n_vec; v += step) {\n"
                + "\n".join(loads + [f"    float4 {', '.join(results)};"] + indent(calls, 4) + stores)
                + "\n  }\n}\n")

    def _scalar_kernel(self) -> str:
        results = [f"r{j}" for j in range(len(self.results))]
        element = self._element_call([r.load("flat") for r in self.reads] + results)
        stores = ["    " + store(out, f"p_{out.name}[flat]", res) for out, res in zip(self.outputs, results)]
        return (f"{self._template_head()}__global__ void __launch_bounds__(512) "
                f"{self.name}_scalar({signature(self.params, True)}, int64_t start) {{\n"
                "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
                f"  for (int64_t flat = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; "
                f"flat < {self.numel}LL; flat += step) {{\n"
                + "\n".join([f"    float {', '.join(results)};", f"    {element}"] + stores) + "\n  }\n}\n")


VARIANTS = [(256, True), (512, True), (128, True), (256, False), (512, False), (128, False)]


def _describe(threads: int, vectorize: bool) -> str:
    return f"{threads} threads/block, {'float4 loads/stores' if vectorize else 'one element per thread step'}"


def pointwise(group: PointwiseGroup) -> Generated:
    numel = prod(group.shape)
    reads = [read(v, group.shape) for v in group.inputs]
    names = {r.value.name: r.var for r in reads}
    body = ops.body_lines(group.body, names, "")
    require_outputs(group, names, numel)
    params = input_params(group) + stride_params(reads) + output_params(group)
    kernel = Elementwise(group.name, numel, reads, body, [names[o.name] for o in group.outputs], group.outputs, params)
    launch = [table("int", "kThreads", [t for t, _ in VARIANTS]),
              table("bool", "kVector", ["true" if v else "false" for _, v in VARIANTS]),
              "  const int threads = kThreads[config];"] + kernel.launch("threads", "kVector[config]")
    source = cu_file(group, f"pointwise group {group.name} over {list(group.shape)}", [kernel.source()],
                     launcher(group.name, params, len(VARIANTS), launch))
    return generated(group, {f"{group.name}.cu": source}, params, dense(reads),
                     [_describe(t, v) for t, v in VARIANTS])


def in_place_epilogue(group: Group, reads: list[Read], params: list[Param], product: str, names: dict[str, str],
                      body: list[str], kept: bool, template: str = "") -> Elementwise:
    """The epilogue kernel after a library call (cuBLAS, cuDNN) that wrote its result into the
    first output: read there as `product` and overwritten in place (each element by the thread
    that read it); `kept`: the first output is that result itself, so it is not stored again."""
    first = Read(Value("ks_product", group.out_shape, group.outputs[0].dtype), Access("dense", group.out_shape),
                 product, f"p_{group.outputs[0].name}", cached=False)
    require_outputs(group, names, prod(group.out_shape))
    stored = group.outputs[int(kept):]
    return Elementwise(f"{group.name}_epilogue", prod(group.out_shape), [first] + reads, body,
                       [names[o.name] for o in stored], stored, params, template)
