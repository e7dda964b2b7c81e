"""The kernel IR: values, pointwise ops, the six kinds of group, views, and the plan.

A group becomes one kernel with one binding, `ext.<name>(*inputs, config)`, which returns its
outputs (one tensor, or a tuple in `outputs` order). `config` picks a launch variant at run
time (an index into the codegen's variant list), so the search changes model_new.py only and
never rebuilds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

Scalar = float


@dataclass
class Value:
    """A tensor of the graph: a forward input, a parameter or buffer, or an op's result."""

    name: str  # C-safe and unique
    shape: tuple[int, ...]
    dtype: str = "float32"
    source: str = ""  # how ModelNew.forward reaches an external value: "x", "self.lin.weight"
    contiguous: bool = True  # False for views such as permute, expand or a strided slice
    scalar: bool = False  # a Python float forward takes: passed to the kernels by value

    @property
    def numel(self) -> int:
        return prod(self.shape)


@dataclass
class Op:
    """One pointwise op: `out = name(*args)` elementwise, with broadcasting over tensor args."""

    name: str  # a key of ops.POINTWISE
    args: list[str | Scalar]  # value names or scalars
    out: str
    attrs: dict = field(default_factory=dict)  # e.g. {"approximate": "tanh"}, {"min": 0.0}

    def tensor_args(self) -> list[str]:
        return [a for a in self.args if isinstance(a, str)]


@dataclass
class Group:
    name: str
    inputs: list[Value]  # external tensors the kernel reads, in binding-argument order
    outputs: list[Value]  # values the kernel writes, in return order

    kind = "group"

    def ops(self) -> list[Op]:
        return []

    def elements_read(self) -> int:
        """The elements the kernel reads from memory, each tensor input once."""
        return sum(v.numel for v in self.inputs if not v.scalar)


@dataclass
class PointwiseGroup(Group):
    """Ops over one index space `shape`; every input broadcasts to it (read through strides)."""

    shape: tuple[int, ...] = ()
    body: list[Op] = field(default_factory=list)

    kind = "pointwise"

    def ops(self) -> list[Op]:
        return self.body


REDUCTIONS = ("sum", "mean", "amax", "amin", "argmax", "argmin", "logsumexp", "norm2",
              "softmax", "safe_softmax", "log_softmax", "cumsum", "welford")
# welford: the mean and the variance (attrs["correction"]) in one pass, as torch.var_mean: `result` is the mean,
# `variance` the second result (normalisations' statistics, decompositions.py)
# their result has the operand's shape (safe_softmax: softmax, but 0 on a row that is all -inf, as attention's)
FULL_SHAPE_REDUCTIONS = ("softmax", "safe_softmax", "log_softmax", "cumsum")  # their result has the operand's shape
SCANS = ("cumsum",)  # full-shape, and each element's result needs only the range before it


@dataclass
class ReductionGroup(Group):
    """A reduction over one contiguous range of dims, with the pointwise work around it.

    The operand of shape `in_shape` is viewed as [outer, size, inner]; `size` is reduced.
    prologue: ops at in_shape that produce the operand from the inputs.
    epilogue: ops at the result's shape (the reduced shape; in_shape for softmax).
    broadcast_epilogue: ops at in_shape that read in_shape values and reduced values broadcast
    back along the reduced dims (the normalisation pattern: x * rsqrt(mean(x^2) + eps)).
    A welford reduction has a second reduced value, `variance`, beside `result` (the mean).
    """

    in_shape: tuple[int, ...] = ()
    dims: tuple[int, ...] = ()
    keepdim: bool = False
    reduce: str = "sum"
    operand: str = ""
    result: str = ""
    result_shape: tuple[int, ...] = ()
    prologue: list[Op] = field(default_factory=list)
    epilogue: list[Op] = field(default_factory=list)
    broadcast_epilogue: list[Op] = field(default_factory=list)
    attrs: dict = field(default_factory=dict)  # welford: {"correction": 0 or 1}
    variance: str = ""  # welford's second result, when something reads it

    kind = "reduction"

    def results(self) -> list[str]:
        """The values the accumulator gives: the result, and a welford's variance."""
        return [self.result] + ([self.variance] if self.variance else [])

    @property
    def variance_divisor(self) -> float:
        """What a welford divides its sum of squared deviations by: size - correction, at least 0 (torch's)."""
        return max(0.0, self.size - self.attrs.get("correction", 1.0))

    @property
    def outer(self) -> int:
        return prod(self.in_shape[: self.dims[0]])

    @property
    def size(self) -> int:
        return prod(self.in_shape[self.dims[0]: self.dims[-1] + 1])

    @property
    def inner(self) -> int:
        return prod(self.in_shape[self.dims[-1] + 1:])

    def ops(self) -> list[Op]:
        return self.prologue + self.epilogue + self.broadcast_epilogue


@dataclass(frozen=True)
class MatrixLayout:
    """Where a GEMM operand's matrices lie in its value's memory, as cuBLAS reads them: row-major
    (element (r, c) at r * ld + c) or, `transposed`, column-major (at r + c * ld); a batch's matrices
    `batch_stride` elements apart (0: one matrix shared by the batch, an expanded operand).
    `strides`: the value's own strides, which the binding checks; () when it reads the value contiguous."""

    transposed: bool = False
    ld: int = 0
    batch_stride: int = 0
    strides: tuple[int, ...] = ()

    def elements(self, batch: int, rows: int, cols: int) -> int:
        """How many elements a GEMM reads through this layout (a shared matrix once)."""
        return (batch if self.batch_stride else 1) * rows * cols


@dataclass
class GemmGroup(Group):
    """out[b] = a[b] @ op(b_mat[b]) (+ bias), then pointwise `epilogue` ops at [batch.., m, n].

    a is [m, k] or [batch, m, k]. b names a [k, n] matrix, or, when trans_b, an [n, k] one (nn.Linear's
    weight) used transposed. Each is read contiguous, unless its layout (a_layout, b_layout: a transposed
    or strided view, an expanded batch) says where its matrices lie. A bmm whose b is one matrix shared by
    the batch and whose a's rows follow each other in memory is one GEMM of batch * m rows (batch 1, a
    of shape [batch, m, k]). bias, when present, has shape [n] (broadcast over rows) and is added before
    the epilogue, scaled by beta.
    """

    a: str = ""
    b: str = ""
    bias: str | None = None
    trans_b: bool = False
    a_layout: MatrixLayout | None = None  # None: contiguous
    b_layout: MatrixLayout | None = None
    batch: int = 1
    m: int = 0
    n: int = 0
    k: int = 0
    alpha: float = 1.0
    beta: float = 1.0
    result: str = ""
    out_shape: tuple[int, ...] = ()
    epilogue: list[Op] = field(default_factory=list)

    kind = "gemm"

    def ops(self) -> list[Op]:
        return self.epilogue

    def layout(self, operand: str, values: dict[str, Value]) -> MatrixLayout:
        """How the kernel reads operand "a" or "b": its layout, else contiguous as its value lies (b
        transposed when trans_b; one matrix for the whole batch when the value holds one)."""
        given = self.a_layout if operand == "a" else self.b_layout
        if given is not None:
            return given
        rows, cols = (self.m, self.k) if operand == "a" else (self.k, self.n)
        shared = values[getattr(self, operand)].numel <= rows * cols
        transposed = operand == "b" and self.trans_b
        return MatrixLayout(transposed, rows if transposed else cols, 0 if shared else rows * cols)

    def elements_read(self) -> int:
        """Each input once; an operand read through a layout, the elements of its matrices (a shared one once)."""
        laid_out = ((self.a, self.a_layout, self.m, self.k), (self.b, self.b_layout, self.k, self.n))
        through = {name: layout.elements(self.batch, rows, cols) for name, layout, rows, cols in laid_out if layout}
        return sum(through.get(v.name, v.numel) for v in self.inputs if not v.scalar)

    def operand_strides(self) -> dict[str, tuple[int, ...]]:
        """The operands read in place through a layout, with the strides the binding checks."""
        laid_out = ((self.a, self.a_layout), (self.b, self.b_layout))
        return {name: layout.strides for name, layout in laid_out if layout is not None}


@dataclass
class ConvGroup(Group):
    """out = convolution(x, w) over 1 to 3 spatial dims, then pointwise `epilogue` ops at out_shape.

    x is [N, C, *spatial] and w, both contiguous, is [K, C / groups, *kernel] or, when transposed
    (ConvTranspose), [C, K / groups, *kernel]. The bias, when the module has one, arrives as an
    epilogue op (an add of a [K, 1, ...] view), so the generators see a plain convolution.
    """

    x: str = ""
    w: str = ""
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    output_padding: tuple[int, ...] = ()
    transposed: bool = False
    groups: int = 1
    result: str = ""
    in_shape: tuple[int, ...] = ()
    w_shape: tuple[int, ...] = ()
    out_shape: tuple[int, ...] = ()
    epilogue: list[Op] = field(default_factory=list)

    kind = "conv"

    @property
    def spatial(self) -> int:
        return len(self.out_shape) - 2

    def ops(self) -> list[Op]:
        return self.epilogue


@dataclass
class PoolGroup(Group):
    """out = max or average pooling of x over windows of 1 to 3 spatial dims, then pointwise
    `epilogue` ops at out_shape. x is [N, C, *spatial]: a contiguous input, or, with a `prologue`,
    the value its ops make at in_shape from the inputs, computed at each window element it reads
    (an earlier kernel's epilogue moved here, so that its result is not written and read again).
    Average pooling follows torch: `count_include_pad` and `divisor_override` choose the divisor;
    max pooling pads with -inf and propagates NaN."""

    x: str = ""
    mode: str = "max"  # or "avg"
    kernel: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    count_include_pad: bool = True
    divisor_override: int | None = None
    result: str = ""
    in_shape: tuple[int, ...] = ()
    out_shape: tuple[int, ...] = ()
    epilogue: list[Op] = field(default_factory=list)
    prologue: list[Op] = field(default_factory=list)

    kind = "pool"

    def ops(self) -> list[Op]:
        return self.prologue + self.epilogue

    def prologue_inputs(self) -> set[str]:
        """The inputs read at in_shape: x itself, or what the prologue reads."""
        if not self.prologue:
            return {self.x}
        made = {op.out for op in self.prologue}
        return {a for op in self.prologue for a in op.tensor_args()} - made


@dataclass
class CatGroup(Group):
    """out = torch.cat(parts, dim): each part, contiguous, copied into its slice of the output.
    A part may appear more than once (`torch.cat([x, x])`); `sizes` are the parts' extents
    along dim. No epilogue: the pointwise work after a cat is the next kernel."""

    parts: list[str] = field(default_factory=list)
    dim: int = 0
    sizes: tuple[int, ...] = ()
    result: str = ""
    out_shape: tuple[int, ...] = ()

    kind = "cat"

    def ops(self) -> list[Op]:
        return []


@dataclass(frozen=True)
class View:
    """A view as data, `x.<method>(*args)`: written into ModelNew.forward as Python, and replayed
    on meta tensors to learn its layout (layout.py), from the same data."""

    method: str  # a torch.Tensor method: view, expand, permute, t, transpose, unsqueeze, select, narrow
    args: tuple = ()

    def python(self, x: str) -> str:
        return f"{x}.{self.method}({', '.join(str(a) for a in self.args)})"

    def apply(self, tensor):
        return getattr(tensor, self.method)(*self.args)


@dataclass
class ViewStep:
    """A view taken in Python between kernels (allowed in ModelNew.forward): `out = view(source)`."""

    out: Value
    view: View
    source: str = ""  # name of the viewed value
    kind: str = ""  # the ATen view op: view, permute, unsqueeze, ...


@dataclass
class Plan:
    """Everything forward does, in order: kernels (groups) and views. While the partitioner
    builds it, `owner` and `reduced` say where each value is made; remat.py reads them too."""

    inputs: list[Value]  # forward's arguments, in order
    steps: list[Group | ViewStep]
    outputs: list[str]  # value names returned by forward, in order
    returns_tuple: bool
    unsupported: list[str] = field(default_factory=list)  # why the plan cannot be generated
    prelude: list[ViewStep] = field(default_factory=list)  # views of inputs and parameters, taken first
    params: list[Value] = field(default_factory=list)  # parameters and buffers (source: self.<path>)
    values: dict[str, Value] = field(default_factory=dict)  # every value by name, the partitioner's own included
    owner: dict[str, int] = field(default_factory=dict)  # value -> index of the step that makes it
    reduced: dict[int, set[str]] = field(default_factory=dict)  # reduction step -> its values at the reduced shape
    init: list[str] = field(default_factory=list)  # Python lines of ModelNew's constructor: the constants it makes

    def groups(self) -> list[Group]:
        return [s for s in self.steps if isinstance(s, Group)]

    def add_inputs(self, group: Group, names: list[str]) -> None:
        """`group` reads these values from memory (each once, in first-read order)."""
        for name in names:
            if all(v.name != name for v in group.inputs):
                group.inputs.append(self.values[name])

    def read_across_steps(self) -> set[str]:
        """The values a kernel takes as an input, a view between kernels reads, or forward returns."""
        read = {v.name for s in self.steps if isinstance(s, Group) for v in s.inputs}
        read |= {s.source for s in self.steps if isinstance(s, ViewStep)}
        return read | set(self.outputs)


@dataclass
class Generated:
    """What a generator makes of one group (both generators return this)."""

    files: dict[str, str]  # file name (no folders) under kernels/ -> source text
    function: str  # == group.name: the binding registers ext.<group.name>
    variants: list[str]  # one description per launch variant; index = config, 0 the default
