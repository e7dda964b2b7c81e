"""CUDA kernels for the built-in policy: one kernel (and one binding) per group.

Each group becomes `<name>.cu` (CUDA headers only), `<name>_binding.cpp` (a light binding of ATen's
Tensor: input checks, output allocation, the current stream, REGISTER_KERNEL) and, for a GEMM, `<name>_gemm.cu` with
the cuBLAS call, or for a convolution, `<name>_conv.cu` with the cuDNN call. The launcher `<name>_launch(..., int config, cudaStream_t stream)` picks a
launch variant at run time: `Generated.variants[config]` describes it. Sizes are baked in as
constants, since a task's shapes are static; the binding checks them.

C names: `p_<value>` pointers, `s_<value>` / `t_<value>` strides of a strided read at the
kernel's index space / at a reduction's reduced shape, `x_<value>` / `xr_<value>` loaded
elements, `v_<value>` op results (ops.body_lines). Helpers start with `ks_`.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from string import Template

from kernelsmith.builtin import ops, window
from kernelsmith.builtin.access import Access, access_for
from kernelsmith.builtin.ir import (FULL_SHAPE_REDUCTIONS, SCANS, CatGroup, ConvGroup, GemmGroup, Generated, Group,
                                    PointwiseGroup, PoolGroup, ReductionGroup, Value)

MAX_BLOCKS = 1 << 20  # grid-stride loops cover the rest
TORCH_DTYPES = {"float32": "at::kFloat", "int64": "at::kLong", "bool": "at::kBool"}
ARG_REDUCTIONS = ("argmax", "argmin")
INT_MAX = 2**31 - 1


def generate(group: Group, values: dict[str, Value]) -> Generated:
    """The CUDA sources of one group; ValueError when something is out of scope."""
    if not group.inputs:
        raise ValueError(f"{group.name}: a group without inputs is unsupported")
    _check_dtypes(group, values)
    if isinstance(group, PointwiseGroup):
        return _pointwise(group)
    if isinstance(group, ReductionGroup):
        return _scan(group) if group.reduce in SCANS else _reduction(group)
    if isinstance(group, GemmGroup):
        return _gemm(group, values)
    if isinstance(group, ConvGroup):
        return _conv(group, values)
    if isinstance(group, PoolGroup):
        return _pool(group, values)
    if isinstance(group, CatGroup):
        return _cat(group)
    raise ValueError(f"{group.name}: {group.kind} groups are unsupported by the CUDA generator")


def _check_dtypes(group: Group, values: dict[str, Value]) -> None:
    """float32 everywhere, except the int64 result of argmax/argmin and bool inputs of pointwise ops."""
    index_result = group.result if isinstance(group, ReductionGroup) and group.reduce in ARG_REDUCTIONS else None
    computed = [values[op.out] for op in group.ops()] + [values[r] for r in [getattr(group, "result", None)] if r]
    bool_inputs = {v.name for v in group.inputs if v.dtype == "bool"} & _used(group.ops())
    for value in [*group.inputs, *group.outputs, *computed]:
        wanted = "int64" if value.name == index_result else "float32"
        if value.name in bool_inputs:
            continue
        if value.dtype != wanted:
            raise ValueError(f"{group.name}: {value.name} is {value.dtype}, unsupported (wanted {wanted})")


# --- C building blocks ---------------------------------------------------------------------

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
        return f"(float){loaded}" if self.is_bool else loaded  # a bool joins float math as 0 or 1


def _read(value: Value, space: tuple[int, ...], var_prefix: str = "x_", strides_prefix: str = "s_") -> Read:
    access = access_for(value.shape, value.contiguous, space)
    strides = f"{strides_prefix}{value.name}" if access.mode == "strided" else ""
    return Read(value, access, f"{var_prefix}{value.name}", f"p_{value.name}", strides)


def _ctype(value: Value) -> str:
    return "int64_t" if value.dtype == "int64" else "float"


def _braced(shape) -> str:
    return "{" + ", ".join(str(int(s)) for s in shape) + "}"


def _input_params(group: Group) -> list[Param]:
    return [_input_param(v) for v in group.inputs]


def _input_param(v: Value) -> Param:
    if v.scalar:
        return Param("float", f"p_{v.name}", f"(float)in_{v.name}")
    if v.dtype == "bool":
        return Param("const unsigned char*", f"p_{v.name}", f"(const unsigned char*)in_{v.name}.data_ptr<bool>()")
    return Param("const float*", f"p_{v.name}", f"in_{v.name}.data_ptr<float>()")


def _stride_params(reads: list[Read]) -> list[Param]:
    return [Param("KsStrides", r.strides, f"ks_strides(in_{r.value.name}, {_braced(r.access.shape)})")
            for r in reads if r.strides]


def _output_params(group: Group) -> list[Param]:
    return [Param(f"{_ctype(v)}*", f"p_{v.name}", f"out_{v.name}.data_ptr<{_ctype(v)}>()") for v in group.outputs]


def _signature(params: list[Param], restrict: bool = False) -> str:
    return ", ".join(p.declare(restrict) for p in params)


def _call(params: list[Param]) -> str:
    return ", ".join(p.name for p in params)


def _used(op_list) -> set[str]:
    return {a for op in op_list for a in op.tensor_args()}


def _indent(lines: list[str], spaces: int = 2) -> list[str]:
    return [" " * spaces + line for line in lines]


def _dense(reads: list[Read]) -> set[str]:
    return {r.value.name for r in reads if r.access.mode == "dense"}


CU_HEADER = Template("""// Generated by kernelsmith's built-in policy (CUDA): $what.
// CUDA headers only; torch stays in ${name}_binding.cpp.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

struct KsStrides { int64_t s[8]; };  // a strided input's strides, expanded to the index space

namespace {

""")

HELPERS = {
    "ks_blocks": f"""inline unsigned ks_blocks(int64_t work, int64_t per_block) {{
  const int64_t blocks = (work + per_block - 1) / per_block;
  return (unsigned)(blocks < 1 ? 1 : (blocks > {MAX_BLOCKS}LL ? {MAX_BLOCKS}LL : blocks));
}}
""",
    "ks_aligned": "inline bool ks_aligned(const void* p) { return ((uintptr_t)p & 15) == 0; }\n",
}


def _cu_file(group: Group, what: str, kernels: list[str], launcher: str) -> str:
    """A .cu: header, the helpers the code calls, the kernels (file-local), the launcher."""
    code = "\n".join(kernels) + "\n}  // namespace\n\n" + launcher
    helpers = [text for name, text in HELPERS.items() if f"{name}(" in code]
    return CU_HEADER.substitute(what=what, name=group.name) + "\n".join(helpers + [code])


def _launcher(name: str, params: list[Param], variants: int, body: list[str]) -> str:
    return (f'extern "C" int {name}_launch({_signature(params)}, int config, cudaStream_t stream) {{\n'
            f"  if (config < 0 || config >= {variants}) config = 0;\n"
            + "\n".join(body) + "\n  return (int)cudaGetLastError();\n}\n")


def _table(ctype: str, name: str, items) -> str:
    return f"  static const {ctype} {name}[] = {{{', '.join(str(i) for i in items)}}};"


# --- elementwise kernels (pointwise groups, GEMM epilogues) --------------------------------

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
    outputs: list[str]  # output pointers, in the same order
    params: list[Param]
    template: str = ""  # a template parameter of the kernels, e.g. "bool ADD_BIAS"

    def source(self) -> str:
        return "\n".join([self._element(), self._vec4_kernel(), self._scalar_kernel()])

    def launch(self, threads: str, vectorize: str, template_arg: str = "") -> list[str]:
        """Statements that launch the kernels for the launcher's `threads` and `vectorize`."""
        targ = f"<{template_arg}>" if template_arg else ""
        aligned = " && ".join(f"ks_aligned({p})" for p in dict.fromkeys(self._vector_pointers()))
        call, n = _call(self.params), f"{self.numel}LL"
        return [f"  {{",
                f"    const int64_t n_vec = ({vectorize} && {aligned}) ? {n} / 4 : 0;",
                f"    if (n_vec > 0) {self.name}_vec4{targ}<<<ks_blocks(n_vec, {threads}), {threads}, 0, stream>>>"
                f"({call}, n_vec);",
                f"    if (n_vec * 4 < {n}) {self.name}_scalar{targ}<<<ks_blocks({n} - n_vec * 4, {threads}), "
                f"{threads}, 0, stream>>>({call}, n_vec * 4);",
                "  }"]

    def _vector_pointers(self) -> list[str]:
        return [r.pointer for r in self.reads if r.access.mode == "dense"] + self.outputs

    def _template_head(self) -> str:
        return f"template <{self.template}>\n" if self.template else ""

    def _element_call(self, args: list[str]) -> str:
        targ = f"<{self.template.split()[-1]}>" if self.template else ""
        return f"{self.name}_element{targ}({', '.join(args)});"

    def _element(self) -> str:
        args = [f"float {r.var}" for r in self.reads] + [f"float& y_{j}" for j in range(len(self.results))]
        sets = [f"  y_{j} = {var};" for j, var in enumerate(self.results)]
        return (f"{self._template_head()}__device__ __forceinline__ void {self.name}_element({', '.join(args)}) {{\n"
                + "\n".join(_indent(self.body) + sets) + "\n}\n")

    def _lane_arg(self, index: int, read: Read, lane: int) -> str:
        if read.access.mode == "dense":
            return f"{'(float)' if read.is_bool else ''}q{index}.{'xyzw'[lane]}"
        if read.access.mode == "scalar":
            return read.var
        return read.load(f"(4 * v + {lane})")

    def _vec4_load(self, index: int, read: Read) -> str:
        kind = "uchar4" if read.is_bool else "float4"  # four bools are four bytes
        vector = f"reinterpret_cast<const {kind}*>({read.pointer})"
        load = f"__ldg({vector} + v)" if read.cached else f"{vector}[v]"
        return f"    const {kind} q{index} = {load};"

    def _vec4_kernel(self) -> str:
        results = [f"r{j}" for j in range(len(self.results))]
        hoisted = [f"  const float {r.var} = {r.load('0')};" for r in self.reads if r.access.mode == "scalar"]
        loads = [self._vec4_load(i, r) for i, r in enumerate(self.reads) if r.access.mode == "dense"]
        calls = [self._element_call([self._lane_arg(i, r, lane) for i, r in enumerate(self.reads)]
                                    + [f"{res}.{'xyzw'[lane]}" for res in results]) for lane in range(4)]
        stores = [f"    reinterpret_cast<float4*>({ptr})[v] = {res};" for ptr, res in zip(self.outputs, results)]
        return (f"{self._template_head()}__global__ void __launch_bounds__(512) "
                f"{self.name}_vec4({_signature(self.params, True)}, int64_t n_vec) {{\n"
                + "\n".join(hoisted) + ("\n" if hoisted else "")
                + "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
                "  for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < n_vec; v += step) {\n"
                + "\n".join(loads + [f"    float4 {', '.join(results)};"] + _indent(calls, 4) + stores)
                + "\n  }\n}\n")

    def _scalar_kernel(self) -> str:
        results = [f"r{j}" for j in range(len(self.results))]
        call = self._element_call([r.load("flat") for r in self.reads] + results)
        stores = [f"    {ptr}[flat] = {res};" for ptr, res in zip(self.outputs, results)]
        return (f"{self._template_head()}__global__ void __launch_bounds__(512) "
                f"{self.name}_scalar({_signature(self.params, True)}, int64_t start) {{\n"
                "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
                f"  for (int64_t flat = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; "
                f"flat < {self.numel}LL; flat += step) {{\n"
                + "\n".join([f"    float {', '.join(results)};", f"    {call}"] + stores) + "\n  }\n}\n")


ELEMENTWISE_VARIANTS = [(256, True), (512, True), (128, True), (256, False), (512, False), (128, False)]


def _describe_elementwise(threads: int, vectorize: bool) -> str:
    return f"{threads} threads/block, {'float4 loads/stores' if vectorize else 'one element per thread step'}"


# --- pointwise -----------------------------------------------------------------------------

def _pointwise(group: PointwiseGroup) -> Generated:
    numel = prod(group.shape)
    reads = [_read(v, group.shape) for v in group.inputs]
    names = {r.value.name: r.var for r in reads}
    body = ops.body_lines(group.body, names, "")
    _require_outputs(group, names, numel)
    params = _input_params(group) + _stride_params(reads) + _output_params(group)
    kernel = Elementwise(group.name, numel, reads, body, [names[o.name] for o in group.outputs],
                         [f"p_{o.name}" for o in group.outputs], params)
    launch = [_table("int", "kThreads", [t for t, _ in ELEMENTWISE_VARIANTS]),
              _table("bool", "kVector", ["true" if v else "false" for _, v in ELEMENTWISE_VARIANTS]),
              "  const int threads = kThreads[config];"] + kernel.launch("threads", "kVector[config]")
    source = _cu_file(group, f"pointwise group {group.name} over {list(group.shape)}", [kernel.source()],
                      _launcher(group.name, params, len(ELEMENTWISE_VARIANTS), launch))
    return _generated(group, {f"{group.name}.cu": source}, params, _dense(reads),
                      [_describe_elementwise(t, v) for t, v in ELEMENTWISE_VARIANTS])


def _require_outputs(group: Group, names: dict[str, str], numel: int) -> None:
    for out in group.outputs:
        if out.name not in names:
            raise ValueError(f"{group.name}: output {out.name} is not computed by the group (unsupported)")
        if out.numel != numel:
            raise ValueError(f"{group.name}: output {out.name} has {out.numel} elements, not {numel} (unsupported)")


# --- reductions ----------------------------------------------------------------------------

ACC_SUM = Template("""struct Acc {
  float a;
  __device__ void init() { a = 0.0f; }
  __device__ void add(float x, int64_t) { a += $term; }
  __device__ void merge(const Acc& o) { a += o.a; }
  __device__ Acc shfl_xor(int mask) const { Acc o; o.a = __shfl_xor_sync(0xffffffffu, a, mask); return o; }
};
""")

ACC_EXTREMUM = Template("""struct Acc {
  float a;
  __device__ void init() { a = $init; }
  __device__ void take(float x) { if (x $cmp a || x != x) a = x; }  // NaN wins, as in torch
  __device__ void add(float x, int64_t) { take(x); }
  __device__ void merge(const Acc& o) { take(o.a); }
  __device__ Acc shfl_xor(int mask) const { Acc o; o.a = __shfl_xor_sync(0xffffffffu, a, mask); return o; }
};
""")

ACC_ARG = Template("""struct Acc {
  float a;
  int64_t k;  // index along the reduced range; -1 while nothing is seen
  __device__ void init() { a = 0.0f; k = -1; }
  // (x, xk) replaces (a, k) when better, or equal and earlier; the first NaN wins, as in torch
  __device__ void take(float x, int64_t xk) {
    if (xk < 0) return;
    bool better;
    if (k < 0) better = true;
    else if (x != x || a != a) better = (x != x) && (a == a || xk < k);
    else better = x $cmp a || (x == a && xk < k);
    if (better) { a = x; k = xk; }
  }
  __device__ void add(float x, int64_t r) { take(x, r); }
  __device__ void merge(const Acc& o) { take(o.a, o.k); }
  __device__ Acc shfl_xor(int mask) const {
    Acc o;
    o.a = __shfl_xor_sync(0xffffffffu, a, mask);
    o.k = (int64_t)__shfl_xor_sync(0xffffffffu, (long long)k, mask);
    return o;
  }
};
""")

ACC_LOGSUMEXP = Template("""struct Acc {
  float m, s;  // running max, and the sum of exp(x - m)
  __device__ void init() { m = -INFINITY; s = 0.0f; }
  __device__ void join(float om, float os) {  // exact at infinities: no exp(inf - inf)
    const float nm = fmaxf(m, om);
    s = (m == nm ? s : s * expf(m - nm)) + (om == nm ? os : os * expf(om - nm));
    m = nm;
  }
  __device__ void add(float x, int64_t) { join(x, 1.0f); }
  __device__ void merge(const Acc& o) { join(o.m, o.s); }
  __device__ Acc shfl_xor(int mask) const {
    Acc o;
    o.m = __shfl_xor_sync(0xffffffffu, m, mask);
    o.s = __shfl_xor_sync(0xffffffffu, s, mask);
    return o;
  }
};
""")

ACCUMULATORS = {
    "sum": ACC_SUM.substitute(term="x"), "mean": ACC_SUM.substitute(term="x"),
    "norm2": ACC_SUM.substitute(term="x * x"),
    "amax": ACC_EXTREMUM.substitute(init="-INFINITY", cmp=">"),
    "amin": ACC_EXTREMUM.substitute(init="INFINITY", cmp="<"),
    "argmax": ACC_ARG.substitute(cmp=">"), "argmin": ACC_ARG.substitute(cmp="<"),
    "logsumexp": ACC_LOGSUMEXP.substitute(), "softmax": ACC_LOGSUMEXP.substitute(),
    "log_softmax": ACC_LOGSUMEXP.substitute(),
}

# the reduced value from the team's accumulator (non-full reductions)
FINAL = {"sum": "acc.a", "mean": "(acc.a / {size})", "norm2": "sqrtf(acc.a)", "amax": "acc.a", "amin": "acc.a",
         "argmax": "acc.k", "argmin": "acc.k", "logsumexp": "(acc.m + logf(acc.s))"}
# the full-shape result at one element x
ELEMENT = {"softmax": "(expf({x} - acc.m) / acc.s)", "log_softmax": "({x} - acc.m - ks_log_sum)"}

TEAM_REDUCE = """// Combine the accumulators of one team (the threads sharing an (o, i) pair); all get the total.
// ROWS: a team is TEAM consecutive threads (warp shuffles, then shared memory across warps);
// else a team is TEAM threads SLOTS apart (shared memory).
template <int TEAM, int SLOTS, bool ROWS>
__device__ __forceinline__ Acc ks_team_reduce(Acc a, int lane, int slot) {
  if constexpr (TEAM == 1) {
    return a;
  } else if constexpr (ROWS) {
    constexpr int kWarpLanes = TEAM < 32 ? TEAM : 32;
    for (int mask = kWarpLanes / 2; mask > 0; mask >>= 1) a.merge(a.shfl_xor(mask));
    if constexpr (TEAM > 32) {
      __shared__ Acc part[SLOTS][TEAM / 32];
      __syncthreads();  // the previous round's readers are done
      if ((lane & 31) == 0) part[slot][lane >> 5] = a;
      __syncthreads();
      a = part[slot][0];
      for (int w = 1; w < TEAM / 32; ++w) a.merge(part[slot][w]);
    }
    return a;
  } else {
    __shared__ Acc part[TEAM][SLOTS];
    __syncthreads();
    part[lane][slot] = a;
    __syncthreads();
    a = part[0][slot];
    for (int w = 1; w < TEAM; ++w) a.merge(part[w][slot]);
    return a;
  }
}
"""

REDUCE_KERNEL = Template("""// A team of TEAM threads per (o, i) pair of the operand viewed as [$outer, $size, $inner].
template <int TEAM, int SLOTS, bool ROWS>
__global__ void __launch_bounds__(TEAM * SLOTS) ${name}_reduce($params) {
  const int lane = ROWS ? (int)threadIdx.x % TEAM : (int)threadIdx.x / SLOTS;
  const int slot = ROWS ? (int)threadIdx.x / TEAM : (int)threadIdx.x % SLOTS;
  for (int64_t base = (int64_t)blockIdx.x * SLOTS; base < kSlots; base += (int64_t)gridDim.x * SLOTS) {
    const int64_t red = base + slot;  // o * kInner + i, the flat index of the reduced value
    const bool active = red < kSlots;
    const int64_t o = red / kInner, i = red % kInner;
$body
  }
}
""")

SPLIT_KERNELS = Template("""// Few long lines: each of the kSlots lines of the operand viewed as [$outer, $size, $inner] is cut
// into kChunks chunks of kChunk elements, a block per chunk, so the whole GPU reads. Pass 1 folds
// each chunk into an accumulator in ${name}_partials; pass 2 merges a line's partials in each
// block that needs them, writes the reduced values (chunk 0) and runs the second pass over its
// own chunk. Every call rewrites all the partials before it reads them, so nothing carries over
// between calls; two calls on two streams at once would share them.
constexpr int64_t kChunks = ${chunks}LL, kChunk = ${chunk}LL, kFinishChunks = ${finish_chunks}LL;
__device__ Acc ${name}_partials[kSlots * kChunks];

template <int TEAM>
__global__ void __launch_bounds__(TEAM) ${name}_split_partial($params) {
  const int lane = (int)threadIdx.x, slot = 0;
  const int64_t red = (int64_t)blockIdx.x / kChunks, chunk = (int64_t)blockIdx.x % kChunks;
  const int64_t o = red / kInner, i = red % kInner;
  const int64_t begin = chunk * kChunk, end = begin + kChunk < kSize ? begin + kChunk : kSize;
  Acc acc;
  acc.init();
$first
  acc = ks_team_reduce<TEAM, 1, true>(acc, lane, slot);
  if (lane == 0) ${name}_partials[blockIdx.x] = acc;
}

template <int TEAM>
__global__ void __launch_bounds__(TEAM) ${name}_split_finish($params) {
  const int lane = (int)threadIdx.x, slot = 0;
  const int64_t red = (int64_t)blockIdx.x / kFinishChunks, chunk = (int64_t)blockIdx.x % kFinishChunks;
  // without a second pass only the reduced values are written: the range goes unused
  [[maybe_unused]] const int64_t o = red / kInner, i = red % kInner;
  [[maybe_unused]] const int64_t begin = chunk * kChunk, end = begin + kChunk < kSize ? begin + kChunk : kSize;
  Acc acc;
  acc.init();
  for (int64_t c = lane; c < kChunks; c += TEAM) acc.merge(${name}_partials[red * kChunks + c]);
  acc = ks_team_reduce<TEAM, 1, true>(acc, lane, slot);
$finish
}
""")


@dataclass(frozen=True)
class Split:
    """A launch variant for few long rows: TEAM threads per chunk, in two kernels (SPLIT_KERNELS)."""

    team: int


SPLIT_VARIANTS = [Split(256), Split(512)]
SPLIT_MAX_LINES = 64  # rows of at most this many ...
SPLIT_MIN_SIZE = 65536  # ... and at least this long are split
SPLIT_BLOCKS = 2048  # blocks per pass: many per SM, so loads overlap
SPLIT_MIN_CHUNK = 4096

# (TEAM, SLOTS, ROWS): threads per reduced value, reduced values per block, team layout
ROW_VARIANTS = [(256, 1, True), (128, 1, True), (512, 1, True), (32, 8, True), (1, 256, False)]
COLUMN_VARIANTS = [(1, 256, False), (1, 128, False), (8, 32, False), (4, 64, False), (16, 16, False)]


@dataclass
class _ReductionParts:
    """Which values a reduction group reads and writes in each phase."""

    group: ReductionGroup
    reads_in: list[Read]  # inputs read at in_shape
    reads_red: list[Read]  # inputs read at the reduced shape (non-full epilogue)
    first: set[str]  # outputs written in the accumulating pass (prologue values)
    reduced: set[str]  # outputs written once per (o, i)
    second: set[str]  # outputs written in the second pass (broadcast epilogue, softmax)

    @property
    def full(self) -> bool:
        return self.group.reduce in FULL_SHAPE_REDUCTIONS


def _reduction(group: ReductionGroup) -> Generated:
    parts = _reduction_parts(group)
    params = (_input_params(group) + _stride_params(parts.reads_in) + _stride_params(parts.reads_red)
              + _output_params(group))
    variants = _reduction_variants(group)
    constants = _line_constants(group)
    kernel = REDUCE_KERNEL.substitute(name=group.name, params=_signature(params, True), outer=group.outer,
                                      size=group.size, inner=group.inner,
                                      body="\n".join(_indent(_reduction_body(parts), 4)))
    kernels = [constants, ACCUMULATORS[group.reduce], TEAM_REDUCE, kernel]
    if any(isinstance(v, Split) for v in variants):
        kernels.append(_split_kernels(parts, params))
    launch = _reduction_launch(group.name, params, variants)
    source = _cu_file(group, f"{group.reduce} of {list(group.in_shape)} over dims {list(group.dims)}", kernels,
                      _launcher(group.name, params, len(variants), launch))
    dense = _dense(parts.reads_in) | _dense(parts.reads_red)
    return _generated(group, {f"{group.name}.cu": source}, params, dense,
                      [_describe_reduction(v) for v in variants])


def _reduction_parts(group: ReductionGroup) -> _ReductionParts:
    _check_reduction(group)
    full = group.reduce in FULL_SHAPE_REDUCTIONS
    at_in = _used(group.prologue + group.broadcast_epilogue + (group.epilogue if full else [])) | {group.operand}
    at_reduced = set() if full else _used(group.epilogue)
    reads_in = [_read(v, group.in_shape) for v in group.inputs if v.name in at_in]
    reads_red = [_read(v, group.result_shape, "xr_", "t_") for v in group.inputs if v.name in at_reduced]
    tail = {group.result} | {op.out for op in group.epilogue}
    parts = _ReductionParts(group, reads_in, reads_red, first={op.out for op in group.prologue},
                            reduced=set() if full else tail,
                            second={op.out for op in group.broadcast_epilogue} | (tail if full else set()))
    for out in group.outputs:
        if out.name not in parts.first | parts.reduced | parts.second:
            raise ValueError(f"{group.name}: output {out.name} is not computed by the group (unsupported)")
    return parts


def _check_reduction(group: ReductionGroup) -> None:
    if group.reduce not in ACCUMULATORS and group.reduce not in SCANS:
        raise ValueError(f"{group.name}: reduction {group.reduce} is unsupported")
    if group.size == 0:
        raise ValueError(f"{group.name}: a reduction over an empty range is unsupported")
    if group.reduce in ARG_REDUCTIONS and (group.epilogue or group.broadcast_epilogue):
        raise ValueError(f"{group.name}: ops after {group.reduce} are unsupported")


def _reduction_body(parts: _ReductionParts) -> list[str]:
    """Accumulate over the team's share of the range, combine the team, then the reduced
    values, their epilogue and stores, and the second pass when one is needed."""
    finish, reduced_names = _finish(parts)
    return (["Acc acc;", "acc.init();", "if (active) {"] + _indent(_first_pass(parts)) + ["}",
            "acc = ks_team_reduce<TEAM, SLOTS, ROWS>(acc, lane, slot);", "if (active) {"]
            + _indent(finish + _second_pass(parts, reduced_names)) + ["}"])


def _loop(body: list[str], ranged: bool = False) -> list[str]:
    """A loop over this lane's share of the reduced range (ranged: of [begin, end), a split
    variant's chunk), with `flat` the element's index."""
    head = ("for (int64_t r = begin + lane; r < end; r += TEAM) {" if ranged
            else "for (int64_t r = lane; r < kSize; r += TEAM) {")
    return [head, "  const int64_t flat = (o * kSize + r) * kInner + i;"] + _indent(body) + ["}"]


def _loads(reads: list[Read], flat: str, names: dict[str, str], needed: set[str]) -> list[str]:
    lines = []
    for read in reads:
        if read.value.name in needed:
            lines.append(f"const float {read.var} = {read.load(flat)};")
            names[read.value.name] = read.var
    return lines


def _stores(group: Group, names: dict[str, str], flat: str, which: set[str]) -> list[str]:
    return [f"p_{v.name}[{flat}] = {names[v.name]};" for v in group.outputs if v.name in which]


def _first_pass(parts: _ReductionParts, ranged: bool = False) -> list[str]:
    group, names = parts.group, {}
    body = _loads(parts.reads_in, "flat", names, _used(group.prologue) | {group.operand})
    body += ops.body_lines(group.prologue, names, "")
    body.append(f"acc.add({names[group.operand]}, r);")
    return _loop(body + _stores(group, names, "flat", parts.first), ranged)


def _finish(parts: _ReductionParts, writer: str = "lane == 0") -> tuple[list[str], dict[str, str]]:
    """The reduced value(s) of this (o, i), written by the thread where `writer` holds; also
    the C variables of the reduced values, which the second pass reads."""
    group = parts.group
    if parts.full:
        return (["const float ks_log_sum = logf(acc.s);"] if group.reduce == "log_softmax" else []), {}
    ctype = "int64_t" if group.reduce in ARG_REDUCTIONS else "float"
    names = {group.result: f"v_{group.result}"}
    final = FINAL[group.reduce].format(size=ops.literal(float(group.size)))
    lines = [f"const {ctype} v_{group.result} = {final};"]
    lines += _loads(parts.reads_red, "red", names, _used(group.epilogue))
    lines += ops.body_lines(group.epilogue, names, "")
    stores = _stores(group, names, "red", parts.reduced)
    lines += [f"if ({writer}) {{"] + _indent(stores) + ["}"] if stores else []
    return lines, {k: v for k, v in names.items() if k in parts.reduced}


def _second_pass(parts: _ReductionParts, reduced_names: dict[str, str], ranged: bool = False) -> list[str]:
    """Per element again: softmax's normalisation, the broadcast epilogue, in_shape stores;
    the prologue is recomputed as far as these need it."""
    group = parts.group
    stored = [out.name for out in group.outputs if out.name in parts.second]
    if not stored:
        return []
    after = (group.epilogue if parts.full else []) + group.broadcast_epilogue
    operand = {group.operand} if parts.full else set()
    prologue = _needed(group.prologue, _used(after) | set(stored) | operand)
    names = dict(reduced_names)
    body = _loads(parts.reads_in, "flat", names, _used(prologue + after) | operand)
    body += ops.body_lines(prologue, names, "")
    if parts.full:
        body.append(f"const float v_{group.result} = {ELEMENT[group.reduce].format(x=names[group.operand])};")
        names[group.result] = f"v_{group.result}"
        body += ops.body_lines(group.epilogue, names, "")
    body += ops.body_lines(group.broadcast_epilogue, names, "")
    return _loop(body + _stores(group, names, "flat", parts.second), ranged)


def _needed(op_list, wanted: set[str]) -> list:
    """The ops that compute `wanted` (and what those read), in their order."""
    wanted, kept = set(wanted), []
    for op in reversed(op_list):
        if op.out in wanted:
            kept.append(op)
            wanted |= set(op.tensor_args())
    return kept[::-1]


def _split_kernels(parts: _ReductionParts, params: list[Param]) -> str:
    """SPLIT_KERNELS for this group: pass 1 folds chunks, pass 2 merges, finishes, second pass."""
    group = parts.group
    chunks = _split_chunks(group)
    chunk = -(-group.size // chunks)
    finish, reduced_names = _finish(parts, writer="lane == 0 && chunk == 0")
    second = _second_pass(parts, reduced_names, ranged=True)
    return SPLIT_KERNELS.substitute(
        name=group.name, params=_signature(params, True), outer=group.outer, size=group.size, inner=group.inner,
        chunks=chunks, chunk=chunk, finish_chunks=chunks if second else 1,
        first="\n".join(_indent(_first_pass(parts, ranged=True))), finish="\n".join(_indent(finish + second)))


def _split_chunks(group: ReductionGroup) -> int:
    """Chunks per line: about SPLIT_BLOCKS blocks in all, none shorter than SPLIT_MIN_CHUNK."""
    lines = group.outer * group.inner
    return max(1, min(-(-SPLIT_BLOCKS // lines), group.size // SPLIT_MIN_CHUNK))


def _splits(group: ReductionGroup) -> bool:
    """Few long rows: one block per row would leave most of the GPU idle."""
    return group.inner == 1 and 1 <= group.outer <= SPLIT_MAX_LINES and group.size >= SPLIT_MIN_SIZE


def _reduction_variants(group: ReductionGroup) -> list:
    """Rows (inner == 1) or columns; the likely best first (warp per row for short rows,
    several threads per column when there are few columns). Few long rows are split across
    blocks, with one whole-row variant kept as the fallback."""
    if _splits(group):
        return SPLIT_VARIANTS + [ROW_VARIANTS[2]]
    if group.inner == 1:
        warp_first = group.size <= 1024
        return [ROW_VARIANTS[3]] + ROW_VARIANTS[:3] + ROW_VARIANTS[4:] if warp_first else ROW_VARIANTS
    few_columns = group.outer * group.inner < 16384
    return [COLUMN_VARIANTS[2]] + COLUMN_VARIANTS[:2] + COLUMN_VARIANTS[3:] if few_columns else COLUMN_VARIANTS


def _describe_reduction(variant) -> str:
    if isinstance(variant, Split):
        return f"rows split across blocks, {variant.team} threads per chunk"
    team, slots, rows = variant
    if rows:
        return f"{team} threads per row" if slots == 1 else f"a warp per row, {slots} rows per block"
    return f"{team} thread{'s' if team > 1 else ''} per reduced value, {slots} values per block"


def _reduction_launch(name: str, params: list[Param], variants: list) -> list[str]:
    call = _call(params)
    cases = []
    for v in variants:
        if isinstance(v, Split):  # two kernels, a block per chunk
            cases.append([f"{name}_split_partial<{v.team}><<<(unsigned)(kSlots * kChunks), {v.team}, 0, stream>>>"
                          f"({call});",
                          f"{name}_split_finish<{v.team}><<<(unsigned)(kSlots * kFinishChunks), {v.team}, 0, "
                          f"stream>>>({call});"])
        else:
            team, slots, rows = v
            cases.append([_slot_launch(f"{name}_reduce<{team}, {slots}, {'true' if rows else 'false'}>", params,
                                       team, slots)])
    return _switch(cases)


def _slot_switch(params: list[Param], kernels: list[str], variants: list[tuple[int, int, bool]]) -> list[str]:
    """`switch (config)` over kernels that give each of kSlots lines a team: variant i launches
    kernels[i] with (team, slots) = variants[i][:2], slots lines of team threads per block."""
    return _switch([[_slot_launch(kernel, params, team, slots)] for kernel, (team, slots, _) in zip(kernels, variants)])


def _slot_launch(kernel: str, params: list[Param], team: int, slots: int) -> str:
    return f"{kernel}<<<ks_blocks(kSlots, {slots}), {team * slots}, 0, stream>>>({_call(params)});"


def _switch(cases: list[list[str]]) -> list[str]:
    """`switch (config)`: case i runs the statements cases[i]; case 0 is also the default."""
    lines = ["  switch (config) {"]
    for index, statements in enumerate(cases):
        label = "default" if index == 0 else f"case {index}"
        if len(statements) == 1:
            lines.append(f"    {label}: {statements[0]} break;")
        else:
            lines += [f"    {label}:"] + [f"      {s}" for s in statements] + ["      break;"]
    return lines + ["  }"]


def _line_constants(group: ReductionGroup) -> str:
    """The operand viewed as [outer, size, inner]: kSlots = outer * inner lines of kSize elements."""
    return (f"constexpr int64_t kSlots = {group.outer * group.inner}LL, kSize = {group.size}LL, "
            f"kInner = {group.inner}LL;\n")


# --- scans (cumsum) ------------------------------------------------------------------------

BLOCK_SCAN = """// Inclusive prefix sum across a team of TEAM threads (a warp, or a whole block of TEAM threads);
// every thread also gets the team's total. A block-wide team must call it together.
template <int TEAM>
__device__ __forceinline__ float ks_team_scan(float v, int lane, float* total) {
  const int warp = lane >> 5, l = lane & 31;
  for (int d = 1; d < 32; d <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, v, d);
    if (l >= d) v += y;
  }
  if constexpr (TEAM == 32) {
    *total = __shfl_sync(0xffffffffu, v, 31);
    return v;
  } else {
    __shared__ float sums[TEAM / 32];
    if (l == 31) sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
      float s = l < TEAM / 32 ? sums[l] : 0.0f;
      for (int d = 1; d < 32; d <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, s, d);
        if (l >= d) s += y;
      }
      if (l < TEAM / 32) sums[l] = s;
    }
    __syncthreads();
    if (warp > 0) v += sums[warp - 1];
    *total = sums[TEAM / 32 - 1];
    __syncthreads();  // everyone has read sums before the next tile writes them
    return v;
  }
}
"""

SCAN_ROWS = Template("""// A team of TEAM threads per row of the operand viewed as [$outer, $size, 1], in tiles of TEAM
// elements: scan the tile, add the carry of the tiles before it.
template <int TEAM, int SLOTS>
__global__ void __launch_bounds__(TEAM * SLOTS) ${name}_scan_rows($params) {
  const int lane = (int)threadIdx.x % TEAM, slot = (int)threadIdx.x / TEAM;
  for (int64_t base = (int64_t)blockIdx.x * SLOTS; base < kSlots; base += (int64_t)gridDim.x * SLOTS) {
    const int64_t o = base + slot, i = 0;
    if (o >= kSlots) break;  // uniform across a team: SLOTS > 1 only for warp-sized teams
    float carry = 0.0f;
    for (int64_t tile = 0; tile < kSize; tile += TEAM) {
      const int64_t r = tile + lane;
      const bool in = r < kSize;
      const int64_t flat = (o * kSize + (in ? r : kSize - 1)) * kInner + i;  // past the end: a valid address
$element
      float total;
      const float scanned = ks_team_scan<TEAM>(in ? ks_x : 0.0f, lane, &total);
      if (in) {
        const float ks_prefix = carry + scanned;
$finish
      }
      carry += total;
    }
  }
}
""")

SCAN_COLUMNS = Template("""// One thread per (o, i) of the operand viewed as [$outer, $size, $inner], walking its range in
// order: neighbouring threads read neighbouring columns, so the loads coalesce.
template <int SLOTS>
__global__ void __launch_bounds__(SLOTS) ${name}_scan_columns($params) {
  for (int64_t red = (int64_t)blockIdx.x * SLOTS + threadIdx.x; red < kSlots; red += (int64_t)gridDim.x * SLOTS) {
    const int64_t o = red / kInner, i = red % kInner;
    float carry = 0.0f;
    for (int64_t r = 0; r < kSize; ++r) {
      const int64_t flat = (o * kSize + r) * kInner + i;
$element
      carry += ks_x;
      const float ks_prefix = carry;
$finish
    }
  }
}
""")

# (TEAM, SLOTS, ROWS): ROWS teams scan one row together in tiles; otherwise one thread per line
SCAN_ROW_VARIANTS = [(1024, 1, True), (512, 1, True), (256, 1, True), (32, 8, True), (1, 256, False)]
SCAN_COLUMN_VARIANTS = [(1, 256, False), (1, 128, False), (1, 64, False)]


def _scan(group: ReductionGroup) -> Generated:
    """A prefix sum along one dim, with its prologue and epilogue fused, in one pass."""
    parts = _reduction_parts(group)
    params = _input_params(group) + _stride_params(parts.reads_in) + _output_params(group)
    variants = _scan_variants(group)
    element, finish = _scan_element(parts)
    constants = _line_constants(group)
    fields = dict(name=group.name, params=_signature(params, True), outer=group.outer, size=group.size,
                  inner=group.inner, element="\n".join(_indent(element, 6)), finish="\n".join(_indent(finish, 8)))
    kernels = [constants, SCAN_COLUMNS.substitute(fields)]
    if group.inner == 1:
        kernels += [BLOCK_SCAN, SCAN_ROWS.substitute(fields)]
    launch = _scan_launch(group.name, params, variants)
    source = _cu_file(group, f"{group.reduce} of {list(group.in_shape)} along dim {group.dims[0]}", kernels,
                      _launcher(group.name, params, len(variants), launch))
    return _generated(group, {f"{group.name}.cu": source}, params, _dense(parts.reads_in),
                      [_describe_scan(v) for v in variants])


def _scan_element(parts: _ReductionParts) -> tuple[list[str], list[str]]:
    """Lines that load one element and run the prologue into ks_x; lines that, given ks_prefix,
    run the epilogue and store every output of the element."""
    group, names = parts.group, {}
    after = group.epilogue
    body = _loads(parts.reads_in, "flat", names, _used(group.prologue + after) | {group.operand})
    body += ops.body_lines(group.prologue, names, "")
    body.append(f"const float ks_x = {names[group.operand]};")
    finish = [f"const float v_{group.result} = ks_prefix;"]
    names[group.result] = f"v_{group.result}"
    finish += ops.body_lines(after, names, "")
    return body, finish + _stores(group, names, "flat", parts.first | parts.second)


def _scan_variants(group: ReductionGroup) -> list[tuple[int, int, bool]]:
    """Rows (inner == 1): a warp per row first when rows are short; columns otherwise."""
    if group.inner > 1:
        return SCAN_COLUMN_VARIANTS
    if group.size <= 1024:
        return [SCAN_ROW_VARIANTS[3]] + SCAN_ROW_VARIANTS[:3] + SCAN_ROW_VARIANTS[4:]
    return SCAN_ROW_VARIANTS


def _describe_scan(variant: tuple[int, int, bool]) -> str:
    team, slots, rows = variant
    if not rows:
        return f"a thread per line, {slots} lines per block"
    return f"{team} threads per row, in tiles of {team}" if slots == 1 else f"a warp per row, {slots} rows per block"


def _scan_launch(name: str, params: list[Param], variants: list[tuple[int, int, bool]]) -> list[str]:
    kernels = [f"{name}_scan_rows<{team}, {slots}>" if rows else f"{name}_scan_columns<{slots}>"
               for team, slots, rows in variants]
    return _slot_switch(params, kernels, variants)


# --- GEMM ----------------------------------------------------------------------------------

GEMM_CU = Template("""// Generated by kernelsmith's built-in policy (CUDA): the cuBLAS part of GEMM group $name.
// C = alpha * A @ op(B) + beta * C, row-major, in true fp32 (CUBLAS_DEFAULT_MATH: no TF32).
#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <mutex>

namespace {

constexpr int kMaxDevices = 64;

// One handle per device, created on first use and kept: creating one per call is slow.
cublasHandle_t ks_cublas_handle() {
  static std::mutex lock;
  static cublasHandle_t handles[kMaxDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return nullptr;
  std::lock_guard<std::mutex> guard(lock);
  if (handles[device] == nullptr) {
    cublasHandle_t handle = nullptr;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return nullptr;
    cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH);
    handles[device] = handle;
  }
  return handles[device];
}

}  // namespace

// Returns 0, or 10000 + the cuBLAS status.
extern "C" int ${name}_gemm(const float* a, const float* b, float* c, float beta, cudaStream_t stream) {
  cublasHandle_t handle = ks_cublas_handle();
  if (handle == nullptr) return 10000 + (int)CUBLAS_STATUS_NOT_INITIALIZED;
  cublasStatus_t status = cublasSetStream(handle, stream);
  if (status != CUBLAS_STATUS_SUCCESS) return 10000 + (int)status;
  const float alpha = $alpha;
  // row-major C[m, n] = A[m, k] @ B is column-major C^T = B^T A^T: swap the operands, m and n
  $call
  return status == CUBLAS_STATUS_SUCCESS ? 0 : 10000 + (int)status;
}
""")

GEMM_EPILOGUE_THREADS = (256, 512, 128)


def _gemm(group: GemmGroup, values: dict[str, Value]) -> Generated:
    _check_gemm(group, values)
    bias = group.bias if group.bias is not None and group.beta != 0.0 else None
    reads = _gemm_reads(group, values, bias)
    params = _input_params(group) + _stride_params(reads) + _output_params(group)
    epilogue = _gemm_epilogue(group, reads, params, bias)
    variants = _gemm_variants(group, bias)
    kernels = ([epilogue.source()] if bias or _needs_epilogue(group) else []) + \
        ([_bias_rows_kernel(group, params, reads[0])] if bias else [])
    launcher = (f'extern "C" int {group.name}_gemm(const float* a, const float* b, float* c, float beta, '
                f"cudaStream_t stream);  // in {group.name}_gemm.cu\n\n"
                + _launcher(group.name, params, len(variants), _gemm_launch(group, params, epilogue, variants, bias)))
    what = f"GEMM group {group.name} ({group.batch} x [{group.m}, {group.k}] @ [{group.k}, {group.n}]), its epilogue"
    files = {f"{group.name}.cu": _cu_file(group, what, kernels, launcher),
             f"{group.name}_gemm.cu": _gemm_cublas(group, values)}
    dense = {group.a, group.b} | _dense(reads)
    return _generated(group, files, params, dense, [_describe_gemm(v) for v in variants])


def _gemm_epilogue(group: GemmGroup, reads: list[Read], params: list[Param], bias: str | None) -> Elementwise:
    """Bias and epilogue ops per element of the product cuBLAS wrote into the first output."""
    names = {r.value.name: r.var for r in reads}
    body = _gemm_result(group, names, bias) + ops.body_lines(group.epilogue, names, "")
    return _in_place_epilogue(group, reads, params, "gemm_product", names, body, _product_kept(group, bias),
                              "bool ADD_BIAS" if bias else "")


def _in_place_epilogue(group: Group, reads: list[Read], params: list[Param], product: str, names: dict[str, str],
                       body: list[str], kept: bool, template: str = "") -> Elementwise:
    """The epilogue kernel after a library call (cuBLAS, cuDNN) that wrote its result into the
    first output: read there as `product` and overwritten in place (each element by the thread
    that read it); `kept`: the first output is that result itself, so it is not stored again."""
    first = Read(Value("ks_product", group.out_shape), Access("dense", group.out_shape), product,
                 f"p_{group.outputs[0].name}", cached=False)
    _require_outputs(group, names, prod(group.out_shape))
    stored = [o.name for o in group.outputs][int(kept):]
    return Elementwise(f"{group.name}_epilogue", prod(group.out_shape), [first] + reads, body,
                       [names[o] for o in stored], [f"p_{o}" for o in stored], params, template)


def _check_gemm(group: GemmGroup, values: dict[str, Value]) -> None:
    if min(group.m, group.n, group.k, group.batch) <= 0 or max(group.m, group.n, group.k) > INT_MAX:
        raise ValueError(f"{group.name}: GEMM sizes m={group.m} n={group.n} k={group.k} are unsupported")
    a, b = values[group.a], values[group.b]
    b_tail = (group.n, group.k) if group.trans_b else (group.k, group.n)
    if tuple(a.shape[-2:]) != (group.m, group.k) or tuple(b.shape[-2:]) != b_tail:
        raise ValueError(f"{group.name}: operand shapes {list(a.shape)} and {list(b.shape)} (trans_b={group.trans_b}) "
                         "are unsupported")
    if a.numel not in (group.m * group.k, group.batch * group.m * group.k) or \
            b.numel not in (group.n * group.k, group.batch * group.n * group.k):
        raise ValueError(f"{group.name}: batched operands of shapes {list(a.shape)}, {list(b.shape)} are unsupported")
    if not (a.contiguous and b.contiguous):
        raise ValueError(f"{group.name}: non-contiguous GEMM operands are unsupported")


def _gemm_reads(group: GemmGroup, values: dict[str, Value], bias: str | None) -> list[Read]:
    """The bias first (when added), then the inputs the epilogue ops read, at out_shape."""
    wanted = ([bias] if bias else []) + [v.name for v in group.inputs if v.name in _used(group.epilogue)]
    return [_read(values[name], group.out_shape) for name in dict.fromkeys(wanted)]


def _gemm_result(group: GemmGroup, names: dict[str, str], bias: str | None) -> list[str]:
    """The GEMM's result value from the product (alpha already applied by cuBLAS)."""
    value = "gemm_product"
    if bias:
        value = f"(ADD_BIAS ? gemm_product + {ops.literal(group.beta)} * {names[bias]} : gemm_product)"
    names[group.result] = f"v_{group.result}"
    return [f"const float v_{group.result} = {value};"]


def _gemm_variants(group: GemmGroup, bias: str | None) -> list[tuple[bool, int]]:
    """(bias added through cuBLAS's beta, epilogue block size)."""
    if not bias and not _needs_epilogue(group):
        return [(False, GEMM_EPILOGUE_THREADS[0])]
    modes = (False, True) if bias else (False,)
    return [(by_beta, threads) for by_beta in modes for threads in GEMM_EPILOGUE_THREADS]


def _product_kept(group: GemmGroup, bias: str | None) -> bool:
    """Whether the first output is the plain product, which cuBLAS already wrote in place."""
    return group.outputs[0].name == group.result and not bias


def _needs_epilogue(group: GemmGroup) -> bool:
    """Whether a kernel must run after cuBLAS even when the bias went through beta."""
    return bool(group.epilogue) or [o.name for o in group.outputs] != [group.result]


def _describe_gemm(variant: tuple[bool, int]) -> str:
    by_beta, threads = variant
    return f"cuBLAS sgemm, bias {'through beta' if by_beta else 'in the epilogue'}, epilogue {threads} threads/block"


def _bias_rows_kernel(group: GemmGroup, params: list[Param], bias: Read) -> str:
    """Fills the product buffer with the bias rows, for cuBLAS to add with beta."""
    out = f"p_{group.outputs[0].name}"
    return (f"__global__ void __launch_bounds__(512) {group.name}_bias_rows({_signature(params, True)}) {{\n"
            "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
            "  for (int64_t flat = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; "
            f"flat < {prod(group.out_shape)}LL; flat += step) {{\n"
            f"    {out}[flat] = {bias.load('flat')};\n  }}\n}}\n")


def _gemm_launch(group: GemmGroup, params: list[Param], epilogue: Elementwise, variants, bias) -> list[str]:
    """cuBLAS, then the epilogue kernel; with the bias through beta, the bias rows first."""
    out, call, numel = f"p_{group.outputs[0].name}", _call(params), f"{prod(group.out_shape)}LL"
    run_epilogue = _needs_epilogue(group)
    lines = []
    if bias or run_epilogue:
        lines += [_table("int", "kThreads", [t for _, t in variants]), "  const int threads = kThreads[config];"]
    if bias:
        lines += [_table("bool", "kBiasByBeta", ["true" if b else "false" for b, _ in variants]),
                  "  const bool by_beta = kBiasByBeta[config];",
                  f"  if (by_beta) {group.name}_bias_rows<<<ks_blocks({numel}, threads), threads, 0, stream>>>"
                  f"({call});"]
    beta = f"by_beta ? {ops.literal(group.beta)} : 0.0f" if bias else "0.0f"
    lines += [f"  const int status = {group.name}_gemm(p_{group.a}, p_{group.b}, {out}, {beta}, stream);",
              "  if (status != 0) return status;"]
    if not bias:
        return lines + (epilogue.launch("threads", "true") if run_epilogue else [])
    lines += ["  if (!by_beta)"] + epilogue.launch("threads", "true", "true")
    return lines + (["  else"] + epilogue.launch("threads", "true", "false") if run_epilogue else [])


def _gemm_cublas(group: GemmGroup, values: dict[str, Value]) -> str:
    m, n, k = group.m, group.n, group.k
    op_b, ldb = ("CUBLAS_OP_T", k) if group.trans_b else ("CUBLAS_OP_N", n)
    common = f"handle, {op_b}, CUBLAS_OP_N, {n}, {m}, {k}, &alpha, b, {ldb}"
    if group.batch == 1:
        call = f"status = cublasSgemm({common}, a, {k}, &beta, c, {n});"
    else:
        stride_a = m * k if values[group.a].numel > m * k else 0
        stride_b = n * k if values[group.b].numel > n * k else 0
        call = (f"status = cublasSgemmStridedBatched({common}, {stride_b}LL, a, {k}, {stride_a}LL, &beta, c, {n}, "
                f"{m * n}LL, {group.batch});")
    return GEMM_CU.substitute(name=group.name, alpha=ops.literal(group.alpha), call=call)


# --- convolutions (cuDNN) ------------------------------------------------------------------

CONV_VARIANTS = 4  # the first algorithms of cuDNN's heuristic that run in true fp32 here
CONV_EPILOGUE_THREADS = 256

CONV_CU = Template("""// Generated by kernelsmith's built-in policy (CUDA): the cuDNN call of $name.
// $what. Descriptors and the algorithm list are set up once per process (the shapes are
// static). Math is CUDNN_FMA_MATH: true fp32, no TF32 tensor cores, like the fp32 baselines.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <mutex>

namespace {

constexpr int kMaxDevices = 64;
constexpr int kMaxAlgos = $variants;

// One handle per device, created on first use and kept: creating one per call is slow.
cudnnHandle_t ks_cudnn_handle() {
  static std::mutex lock;
  static cudnnHandle_t handles[kMaxDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return nullptr;
  std::lock_guard<std::mutex> guard(lock);
  if (handles[device] == nullptr) {
    cudnnHandle_t handle = nullptr;
    if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) return nullptr;
    handles[device] = handle;
  }
  return handles[device];
}

struct KsConv {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  $algo_type algos[kMaxAlgos];
  size_t bytes[kMaxAlgos];
  int n_algos = 0;
  int status = 0;  // 0, or 20000 + the cuDNN status of the setup
};

int ks_fail(cudnnStatus_t status) { return status == CUDNN_STATUS_SUCCESS ? 0 : 20000 + (int)status; }

int ks_describe(KsConv& c) {
  static const int x_dims[] = $x_dims, y_dims[] = $y_dims, w_dims[] = $w_dims;
  static const int x_strides[] = $x_strides, y_strides[] = $y_strides;
  static const int pads[] = $pads, strides[] = $strides, dilations[] = $dilations;
  cudnnStatus_t s = cudnnCreateTensorDescriptor(&c.x);
  if (!s) s = cudnnCreateTensorDescriptor(&c.y);
  if (!s) s = cudnnCreateFilterDescriptor(&c.w);
  if (!s) s = cudnnCreateConvolutionDescriptor(&c.conv);
  if (!s) s = cudnnSetTensorNdDescriptor(c.x, CUDNN_DATA_FLOAT, $rank, x_dims, x_strides);
  if (!s) s = cudnnSetTensorNdDescriptor(c.y, CUDNN_DATA_FLOAT, $rank, y_dims, y_strides);
  if (!s) s = cudnnSetFilterNdDescriptor(c.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, $rank, w_dims);
  if (!s) s = cudnnSetConvolutionNdDescriptor(c.conv, $spatial, pads, strides, dilations, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT);
  if (!s) s = cudnnSetConvolutionGroupCount(c.conv, $groups);
  if (!s) s = cudnnSetConvolutionMathType(c.conv, CUDNN_FMA_MATH);
  return ks_fail(s);
}

// The heuristic's ranking, keeping the algorithms whose workspace query succeeds in FMA math.
int ks_choose(KsConv& c, cudnnHandle_t handle) {
  $perf_type found[16];
  int returned = 0;
  cudnnStatus_t s = $heuristic;
  if (s) return ks_fail(s);
  for (int i = 0; i < returned && c.n_algos < kMaxAlgos; ++i) {
    if (found[i].status != CUDNN_STATUS_SUCCESS) continue;
    bool seen = false;
    for (int j = 0; j < c.n_algos; ++j) seen = seen || c.algos[j] == found[i].algo;
    size_t bytes = 0;
    if (seen || $workspace_query != CUDNN_STATUS_SUCCESS) continue;
    c.algos[c.n_algos] = found[i].algo;
    c.bytes[c.n_algos++] = bytes;
  }
  return c.n_algos > 0 ? 0 : 20000 + (int)CUDNN_STATUS_NOT_SUPPORTED;
}

KsConv* ks_conv(int* status) {
  static KsConv conv;
  static std::once_flag once;
  std::call_once(once, [] {
    cudnnHandle_t handle = ks_cudnn_handle();
    conv.status = handle == nullptr ? 20000 + (int)CUDNN_STATUS_NOT_INITIALIZED : ks_describe(conv);
    if (conv.status == 0) conv.status = ks_choose(conv, handle);
  });
  *status = conv.status;
  return &conv;
}

int ks_pick(const KsConv& c, int config) { return config >= 0 && config < c.n_algos ? config : 0; }

}  // namespace

// Bytes of scratch memory the launch with this config needs; returns 0 or 20000 + a cuDNN status.
extern "C" int ${name}_conv_workspace(int config, size_t* bytes) {
  int status = 0;
  const KsConv* c = ks_conv(&status);
  *bytes = status == 0 ? c->bytes[ks_pick(*c, config)] : 0;
  return status;
}

// y = $what_short, written whole (beta = 0).
extern "C" int ${name}_conv(const float* x, const float* w, float* y, void* workspace, size_t bytes, int config,
                           cudaStream_t stream) {
  int status = 0;
  const KsConv* c = ks_conv(&status);
  if (status != 0) return status;
  cudnnHandle_t handle = ks_cudnn_handle();
  cudnnStatus_t s = cudnnSetStream(handle, stream);
  if (s) return ks_fail(s);
  const int pick = ks_pick(*c, config);
  if (bytes < c->bytes[pick]) return 20000 + (int)CUDNN_STATUS_BAD_PARAM;
  const float alpha = 1.0f, beta = 0.0f;
  return ks_fail($call);
}
""")

FORWARD = {
    "algo_type": "cudnnConvolutionFwdAlgo_t", "perf_type": "cudnnConvolutionFwdAlgoPerf_t",
    "heuristic": "cudnnGetConvolutionForwardAlgorithm_v7(handle, c.x, c.w, c.conv, c.y, 16, &returned, found)",
    "workspace_query": "cudnnGetConvolutionForwardWorkspaceSize(handle, c.x, c.w, c.conv, c.y, found[i].algo, &bytes)",
    "call": "cudnnConvolutionForward(handle, &alpha, c->x, x, c->w, w, c->conv, c->algos[pick], workspace, bytes, "
            "&beta, c->y, y)",
}
# ConvTranspose is the backward-data pass of the convolution that maps y back to x: x is cuDNN's
# dy, the output is its dx, and PyTorch's [c_in, c_out / groups, ...] weight is that filter as is.
TRANSPOSED = {
    "algo_type": "cudnnConvolutionBwdDataAlgo_t", "perf_type": "cudnnConvolutionBwdDataAlgoPerf_t",
    "heuristic": "cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, c.w, c.x, c.conv, c.y, 16, &returned, found)",
    "workspace_query": "cudnnGetConvolutionBackwardDataWorkspaceSize(handle, c.w, c.x, c.conv, c.y, found[i].algo, "
                       "&bytes)",
    "call": "cudnnConvolutionBackwardData(handle, &alpha, c->w, w, c->x, x, c->conv, c->algos[pick], workspace, "
            "bytes, &beta, c->y, y)",
}


def _conv(group: ConvGroup, values: dict[str, Value]) -> Generated:
    _check_conv(group, values)
    reads = [_read(values[v.name], group.out_shape) for v in group.inputs
             if v.name in _used(group.epilogue) and v.name not in (group.x, group.w)]
    params = _input_params(group) + _stride_params(reads) + _output_params(group) + \
        [Param("void*", "p_workspace", "workspace.data_ptr()"), Param("size_t", "workspace_bytes", "workspace_bytes")]
    epilogue = _conv_epilogue(group, reads, params)
    kernels = [epilogue.source()] if epilogue else []
    launch = [f"  const int status = {group.name}_conv(p_{group.x}, p_{group.w}, p_{group.outputs[0].name}, "
              "p_workspace, workspace_bytes, config, stream);", "  if (status != 0) return status;"]
    launch += epilogue.launch(str(CONV_EPILOGUE_THREADS), "true") if epilogue else []
    launcher = (f'extern "C" int {group.name}_conv(const float* x, const float* w, float* y, void* workspace, '
                f"size_t bytes, int config, cudaStream_t stream);  // in {group.name}_conv.cu\n\n"
                + _launcher(group.name, params, CONV_VARIANTS, launch))
    what = _describe_conv(group)
    files = {f"{group.name}.cu": _cu_file(group, f"{what}, its epilogue", kernels, launcher),
             f"{group.name}_conv.cu": _conv_cudnn(group, what)}
    variants = [f"cuDNN algorithm #{i + 1} of its heuristic (fp32 FMA math), epilogue {CONV_EPILOGUE_THREADS} "
                "threads/block" for i in range(CONV_VARIANTS)]
    return _generated(group, files, params, {group.x, group.w} | _dense(reads), variants, workspace=True)


def _check_conv(group: ConvGroup, values: dict[str, Value]) -> None:
    for name in (group.x, group.w):
        if not values[name].contiguous:
            raise ValueError(f"{group.name}: a non-contiguous convolution operand is unsupported")
    largest = max(prod(group.in_shape), prod(group.out_shape), prod(group.w_shape))
    if largest > INT_MAX:  # cuDNN's legacy descriptors take int strides
        raise ValueError(f"{group.name}: a convolution tensor of {largest} elements (over 2^31) is unsupported")


def _conv_epilogue(group: ConvGroup, reads: list[Read], params: list[Param]) -> Elementwise | None:
    """The epilogue per element of cuDNN's result, or None when there is nothing to do after it."""
    if not group.epilogue and [o.name for o in group.outputs] == [group.result]:
        return None
    names = {r.value.name: r.var for r in reads}
    names[group.result] = f"v_{group.result}"
    body = ops.body_lines(group.epilogue, names, "")
    return _in_place_epilogue(group, reads, params, names[group.result], names, body,
                              group.outputs[0].name == group.result)


def _describe_conv(group: ConvGroup) -> str:
    kind = f"{'transposed ' if group.transposed else ''}{group.spatial}-d convolution"
    return (f"{kind} of x {list(group.in_shape)} with w {list(group.w_shape)} -> {list(group.out_shape)}, stride "
            f"{list(group.stride)}, padding {list(group.padding)}, dilation {list(group.dilation)}, groups {group.groups}")


def _conv_cudnn(group: ConvGroup, what: str) -> str:
    """cuDNN wants at least 2 spatial dims: a 1-d convolution is a 2-d one over a height of 1."""
    lift = group.spatial == 1

    def spatial(values, fill):
        return ([fill] if lift else []) + [int(v) for v in values]
    x_dims = list(group.in_shape[:2]) + spatial(group.in_shape[2:], 1)
    y_dims = list(group.out_shape[:2]) + spatial(group.out_shape[2:], 1)
    w_dims = list(group.w_shape[:2]) + spatial(group.w_shape[2:], 1)
    table = FORWARD if not group.transposed else TRANSPOSED
    return CONV_CU.substitute(
        name=group.name, what=what, what_short="convolution(x, w)" if not group.transposed else "conv_transpose(x, w)",
        variants=CONV_VARIANTS, rank=len(x_dims), spatial=len(x_dims) - 2, groups=group.groups,
        x_dims=_braced(x_dims), y_dims=_braced(y_dims), w_dims=_braced(w_dims),
        x_strides=_braced(_contiguous_strides(x_dims)), y_strides=_braced(_contiguous_strides(y_dims)),
        pads=_braced(spatial(group.padding, 0)), strides=_braced(spatial(group.stride, 1)),
        dilations=_braced(spatial(group.dilation, 1)), **table)


def _contiguous_strides(dims: list[int]) -> list[int]:
    return [prod(dims[d + 1:]) for d in range(len(dims))]


# --- pooling -------------------------------------------------------------------------------

POOL_THREADS = (256, 128, 512)


def _pool(group: PoolGroup, values: dict[str, Value]) -> Generated:
    """A grid-stride kernel, one output element per thread step: the window's max or mean
    (window.py, shared with the CPU generator), then the epilogue, then the stores."""
    if not values[group.x].contiguous:
        raise ValueError(f"{group.name}: pooling a non-contiguous input is unsupported")
    reads = [_read(values[v.name], group.out_shape) for v in group.inputs if v.name != group.x]
    params = _input_params(group) + _stride_params(reads) + _output_params(group)
    names = {r.value.name: r.var for r in reads}
    names[group.result] = f"v_{group.result}"
    epilogue = ops.body_lines(group.epilogue, names, "")
    _require_outputs(group, names, prod(group.out_shape))
    lines = window.decode("flat", group.out_shape) + window.pool_lines(group, f"__ldg(&p_{group.x}[{{}}])")
    lines += [f"const float {r.var} = {r.load('flat')};" for r in reads] + epilogue
    lines += [f"p_{o.name}[flat] = {names[o.name]};" for o in group.outputs]
    what = (f"{group.mode} pooling of {list(group.in_shape)} -> {list(group.out_shape)}, window {list(group.kernel)}, "
            f"stride {list(group.stride)}, padding {list(group.padding)}, its epilogue")
    return _per_output(group, what, params, lines, {group.x} | _dense(reads))


def _per_output(group: PoolGroup | CatGroup, what: str, params: list[Param], lines: list[str],
                dense: set[str]) -> Generated:
    """A grid-stride kernel running `lines` once per output element `flat`, in POOL_THREADS variants."""
    numel = prod(group.out_shape)
    kernel = (f"__global__ void __launch_bounds__(512) {group.name}_kernel({_signature(params, True)}) {{\n"
              "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
              f"  for (int64_t flat = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; flat < {numel}LL; "
              "flat += step) {\n" + "\n".join(_indent(lines, 4)) + "\n  }\n}\n")
    launch = [_table("int", "kThreads", POOL_THREADS), "  const int threads = kThreads[config];",
              f"  {group.name}_kernel<<<ks_blocks({numel}LL, threads), threads, 0, stream>>>({_call(params)});"]
    source = _cu_file(group, what, [kernel], _launcher(group.name, params, len(POOL_THREADS), launch))
    return _generated(group, {f"{group.name}.cu": source}, params, dense,
                      [f"one output per thread step, {t} threads/block" for t in POOL_THREADS])


# --- concatenation ---------------------------------------------------------------------------

def _cat(group: CatGroup) -> Generated:
    """Each output element read from the part that holds it (window.cat_lines); parts dense."""
    params = _input_params(group) + _output_params(group)
    lines = window.cat_lines(group, lambda part, offset: f"__ldg(&p_{part}[{offset}])")
    lines += [f"p_{o.name}[flat] = v_{group.result};" for o in group.outputs]
    what = f"cat of {len(group.parts)} parts along dim {group.dim} -> {list(group.out_shape)}"
    return _per_output(group, what, params, lines, set(group.parts))


# --- binding -------------------------------------------------------------------------------

BINDING_HEAD = Template("""// Generated by kernelsmith's built-in policy (CUDA): binding of $name.
// Checks its inputs, allocates its outputs, and launches on the current stream: no torch compute.
// A light binding: ATen's Tensor and c10's CUDA stream only, registered with REGISTER_KERNEL.
#include "binding_light.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

struct KsStrides { int64_t s[8]; };

extern "C" int ${name}_launch($signature, int config, cudaStream_t stream);

namespace {

// The strides of t broadcast to the kernel's index space (0 along broadcast dims): a view.
KsStrides ks_strides(const at::Tensor& t, const std::vector<int64_t>& space) {
  KsStrides strides{};
  const auto expanded = t.expand(space);
  for (int64_t d = 0; d < expanded.dim(); ++d) strides.s[d] = expanded.stride(d);
  return strides;
}

std::string ks_status(int status) {
  if (status >= 20000) return "cuDNN status " + std::to_string(status - 20000);
  if (status >= 10000) return "cuBLAS status " + std::to_string(status - 10000);
  return cudaGetErrorString((cudaError_t)status);
}

}  // namespace

""")


def _generated(group: Group, files: dict[str, str], params: list[Param], dense: set[str],
               variants: list[str], workspace: bool = False) -> Generated:
    files = dict(files)
    files[f"{group.name}_binding.cpp"] = _binding(group, params, dense, len(variants), workspace)
    return Generated(files, group.name, variants)


def _binding(group: Group, params: list[Param], dense: set[str], variants: int, workspace: bool = False) -> str:
    tensors = [v for v in group.inputs if not v.scalar]
    if not tensors:
        raise ValueError(f"{group.name}: a kernel with no tensor input is unsupported")
    name, first = group.name, f"in_{tensors[0].name}"
    lines = [line for v in tensors for line in _input_checks(name, v, v.name in dense, first)]
    lines += [f'  TORCH_CHECK(config >= 0 && config < {variants}, "{name}: config must be in [0, {variants}), got ", '
              "config);",
              f"  const c10::cuda::CUDAGuard device_guard({first}.device());"]
    lines += _workspace_lines(name, first) if workspace else []
    lines += [_allocation(out, first) for out in group.outputs]
    lines += [f"  const int status = {name}_launch({', '.join(p.arg for p in params)}, (int)config, "
              "c10::cuda::getCurrentCUDAStream());",
              f'  TORCH_CHECK(status == 0, "{name}: launch failed: ", ks_status(status));',
              _return(group)]
    args = ", ".join(f"{'double' if v.scalar else 'at::Tensor'} in_{v.name}" for v in group.inputs)
    head = BINDING_HEAD.substitute(name=name, signature=_signature(params))
    if workspace:
        head = head.replace("\nnamespace {", f"\n{_workspace_decl(name)}\nnamespace {{", 1)
    return (head + f"{_return_type(group)} {name}({args}, int64_t config) {{\n" + "\n".join(lines)
            + f"\n}}\n\nREGISTER_KERNEL({name}, {name});\n")


def _workspace_decl(name: str) -> str:
    return f'extern "C" int {name}_conv_workspace(int config, size_t* bytes);  // in {name}_conv.cu\n'


def _workspace_lines(name: str, first: str) -> list[str]:
    """The scratch memory the chosen cuDNN algorithm needs, from torch's caching allocator
    (an allocation, not compute; stream-ordered like the outputs)."""
    return ["  size_t workspace_bytes = 0;",
            f"  const int workspace_status = {name}_conv_workspace((int)config, &workspace_bytes);",
            f'  TORCH_CHECK(workspace_status == 0, "{name}: cuDNN setup failed: ", ks_status(workspace_status));',
            f"  auto workspace = at::empty({{(int64_t)workspace_bytes + 1}}, {first}.options().dtype(at::kByte));"]


def _input_checks(kernel: str, value: Value, dense: bool, first: str) -> list[str]:
    t, what = f"in_{value.name}", f"{kernel}: input {value.name}"
    same_device = "" if t == first else f" && {t}.device() == {first}.device()"
    lines = [f'  TORCH_CHECK({t}.is_cuda(){same_device}, "{what} must be a CUDA tensor'
             f'{"" if t == first else " on the device of the first input"}");',
             f'  TORCH_CHECK({t}.scalar_type() == {TORCH_DTYPES[value.dtype]}, "{what} must be {value.dtype}");',
             f'  TORCH_CHECK(({t}.sizes().vec() == std::vector<int64_t>{_braced(value.shape)}), '  # (): commas
             f'"{what} must have shape {list(value.shape)}, got ", {t}.sizes());']
    if dense:
        lines.append(f'  TORCH_CHECK({t}.is_contiguous(), "{what} must be contiguous");')
    return lines


def _allocation(out: Value, first: str) -> str:
    dtype = "at::kLong" if out.dtype == "int64" else "at::kFloat"
    return (f"  auto out_{out.name} = at::empty(std::vector<int64_t>{_braced(out.shape)}, "
            f"{first}.options().dtype({dtype}));")


def _return_type(group: Group) -> str:
    if len(group.outputs) == 1:
        return "at::Tensor"
    return "std::tuple<" + ", ".join("at::Tensor" for _ in group.outputs) + ">"


def _return(group: Group) -> str:
    outs = ", ".join(f"out_{o.name}" for o in group.outputs)
    return f"  return {outs};" if len(group.outputs) == 1 else f"  return std::make_tuple({outs});"
