"""Partition a captured graph into kernels: pointwise chains, reductions with the pointwise
work around them, and GEMMs and convolutions with their epilogues. Views run in Python
between kernels.

One pass in graph order. A pointwise node joins the most recent group when every value of
that group it reads is inside the group and its shape fits the group (the index space of a
chain or a GEMM's output; the reduced shape, or the operand's shape for the normalisation
pattern, in a reduction). A reduction takes over the chain just before it as its prologue.
Anything else starts a new group. Afterwards, a value becomes a kernel output when something
outside its group (or forward's return) reads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from kernelsmith.compiler import lowering, remat
from kernelsmith.compiler.cstyle.access import broadcastable
from kernelsmith.compiler.graph import Graph, Node
from kernelsmith.compiler.ir import (FULL_SHAPE_REDUCTIONS, CatGroup, ConvGroup, GemmGroup, Group, Op, Plan,
                                    PointwiseGroup, PoolGroup, ReductionGroup, Value, ViewStep)
from kernelsmith.compiler.lowering import Unsupported

FLOAT = "float32"
BATCH_NORM = "_native_batch_norm_legit_no_training.default"
MAX_POOLS = ("max_pool1d_with_indices.default", "max_pool2d_with_indices.default", "max_pool3d_with_indices.default")
ALIAS_VIEWS = ("view", "_unsafe_view", "reshape", "unsqueeze", "squeeze")


@dataclass
class Partitioner:
    graph: Graph
    values: dict[str, Value] = field(default_factory=dict)
    steps: list = field(default_factory=list)
    owner: dict[str, int] = field(default_factory=dict)  # value -> index of the step that makes it
    reduced: dict[int, set] = field(default_factory=dict)  # reduction step -> values at the reduced shape
    prelude: list = field(default_factory=list)  # views of external values, taken first in forward
    views: dict[str, ViewStep] = field(default_factory=dict)
    remat: bool = True  # recompute full-size values in the kernels that read them (remat.py)

    def __post_init__(self):
        self.values = self.graph.values()

    def run(self) -> Plan:
        plan = Plan(self.graph.inputs, self.steps, self.graph.outputs, self.graph.returns_tuple,
                    prelude=self.prelude, params=self.graph.params, values=self.values)
        try:
            for node in _fold_multi_output(self.graph.nodes):
                self.add(node)
            if self.remat:
                remat.rematerialize(self)
            self.mark_outputs()
            remat.drop_empty(self.steps)
        except Unsupported as err:
            plan.unsupported.append(str(err))
        return plan

    def add(self, node: Node) -> None:
        kind = "batch_norm" if node.target == BATCH_NORM else lowering.kind_of(node)
        if kind == "unsupported":
            raise Unsupported(f"{node.target} is not supported yet")
        getattr(self, f"add_{kind}")(node)

    # --- pointwise -----------------------------------------------------------------------

    def add_pointwise(self, node: Node) -> None:
        self.add_op(node, lowering.pointwise_op(node))

    def add_op(self, node: Node, op: Op) -> None:
        self.require_float(node, [a for a in op.tensor_args() if not self.bool_input(a, node)])
        last = len(self.steps) - 1
        internal = [a for a in op.tensor_args() if self.owner.get(a) == last]
        others = [a for a in op.tensor_args() if a not in internal]
        if internal and self.joins(self.steps[last], node, internal, others):
            return self.join(last, node, op, others)
        group = PointwiseGroup(self.new_name("pointwise"), [], [], shape=node.shape, body=[op])
        self.add_inputs(group, op.tensor_args())
        self.push(group, node.name)

    def joins(self, group: Group, node: Node, internal: list[str], others: list[str]) -> bool:
        if any(not broadcastable(self.values[a].shape, node.shape) for a in others):
            return False
        if isinstance(group, PointwiseGroup):
            return node.shape == group.shape
        if isinstance(group, (GemmGroup, ConvGroup, PoolGroup)):
            return node.shape == group.out_shape
        if isinstance(group, ReductionGroup):
            return self.reduction_phase(group, node, internal) is not None
        return False

    def reduction_phase(self, group: ReductionGroup, node: Node, internal: list[str]) -> str | None:
        """Where a pointwise node goes in a reduction group: epilogue, broadcast_epilogue or none."""
        if group.reduce in ("argmax", "argmin"):
            return None
        if group.reduce in FULL_SHAPE_REDUCTIONS:
            return "epilogue" if node.shape == group.in_shape and not group.broadcast_epilogue else None
        reduced = self.reduced[self.owner[group.result]]
        if node.shape == group.result_shape and set(internal) <= reduced and not group.broadcast_epilogue:
            return "epilogue"
        if node.shape == group.in_shape and all(self.broadcasts_back(group, a) for a in internal if a in reduced):
            return "broadcast_epilogue"
        return None

    def broadcasts_back(self, group: ReductionGroup, name: str) -> bool:
        """A reduced value lines up with the operand under torch broadcasting (keepdim layout)."""
        shape, rank = self.values[name].shape, len(group.in_shape)
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        keep = tuple(1 if d in group.dims else s for d, s in enumerate(group.in_shape))
        return len(shape) <= rank and padded == keep

    def join(self, index: int, node: Node, op: Op, others: list[str]) -> None:
        group = self.steps[index]
        if isinstance(group, ReductionGroup):
            phase = self.reduction_phase(group, node, [a for a in op.tensor_args() if a not in others])
            getattr(group, phase).append(op)
            if phase == "epilogue" and group.reduce not in FULL_SHAPE_REDUCTIONS:
                self.reduced[index].add(node.name)
        else:
            group.ops().append(op)
        self.add_inputs(group, others)
        self.own(node.name, index)

    # --- reductions ----------------------------------------------------------------------

    def add_reduction(self, node: Node) -> None:
        operand = node.args[0]
        in_shape = self.values[operand].shape
        spec = lowering.reduction_spec(node, len(in_shape))
        self.require_float(node, [operand], result_may_be_index=spec.reduce in ("argmax", "argmin"))
        last = len(self.steps) - 1
        group = ReductionGroup(self.new_name("reduction"), [], [], in_shape=in_shape, dims=spec.dims,
                               keepdim=spec.keepdim, reduce=spec.reduce, operand=operand, result=node.name,
                               result_shape=node.shape)
        chain = self.steps[last] if self.owner.get(operand) == last and last >= 0 else None
        if isinstance(chain, PointwiseGroup) and chain.shape == in_shape:
            group.name = chain.name.replace("_pointwise", "_reduction")
            group.inputs, group.prologue = chain.inputs, chain.body
            self.steps[last] = group  # the chain becomes the prologue, in place
            self.own(node.name, last)
        elif self.epilogue_moves(chain, node):
            self.move_epilogue(chain, group, node)
        else:
            self.add_inputs(group, [operand])
            self.push(group, node.name)
        self.reduced[self.owner[node.name]] = {node.name}

    def epilogue_moves(self, library: Group | None, node: Node) -> bool:
        """A GEMM's, convolution's or pooling's epilogue that only feeds this reduction: run it as
        the reduction's prologue instead, so the library's result is read once, not read,
        written and read again."""
        if not isinstance(library, (GemmGroup, ConvGroup, PoolGroup)) or not library.epilogue:
            return False
        moved = {op.out for op in library.epilogue}
        readers = [r for v in moved for r in self.graph.consumers.get(v, [])]
        return library.out_shape == self.values[node.args[0]].shape and all(r in moved or r == node.name
                                                                           for r in readers)

    def move_epilogue(self, library: Group, group: ReductionGroup, node: Node) -> None:
        group.prologue, library.epilogue = library.epilogue, []
        moved = {op.out for op in group.prologue}
        core = {getattr(library, f, None) for f in ("a", "b", "bias", "x", "w")}
        reads = [library.result] + [a for op in group.prologue for a in op.tensor_args() if a not in moved]
        library.inputs = [v for v in library.inputs if v.name in core]
        self.add_inputs(group, reads)
        self.push(group, node.name)
        for name in moved:
            self.own(name, len(self.steps) - 1)

    # --- GEMMs -----------------------------------------------------------------------------

    def add_gemm(self, node: Node) -> None:
        name, args = lowering.base(node.target), list(node.args)
        bias, a, b = (args[0], args[1], args[2]) if name == "addmm" else (None, args[0], args[1])
        self.require_float(node, [x for x in (bias, a, b) if x])
        b_source, trans_b = self.weight_of(b)
        a_value = self.values[a]
        if not a_value.contiguous:
            raise Unsupported(f"{node.target} on a non-contiguous left operand")
        if not trans_b and not self.values[b_source].contiguous:
            raise Unsupported(f"{node.target} on a non-contiguous right operand")
        group = self.gemm_group(node, name, a, b_source, trans_b, bias)
        self.add_inputs(group, [x for x in (a, b_source, bias) if x])
        self.push(group, node.name)

    def weight_of(self, b: str) -> tuple[str, bool]:
        """b itself, or (W, True) when b is W.permute(1, 0) / W.t() of a contiguous 2-D W."""
        step = self.views.get(b)
        if isinstance(step, ViewStep) and step.kind in ("permute", "t", "transpose") and \
                len(self.values[b].shape) == 2 and self.values[step.source].contiguous:
            return step.source, True
        return b, False

    def gemm_group(self, node: Node, name: str, a: str, b: str, trans_b: bool, bias: str | None) -> GemmGroup:
        a_shape, out = self.values[a].shape, node.shape
        if bias is not None and self.values[bias].shape not in ((out[-1],), (1, out[-1])):
            raise Unsupported(f"addmm with a bias of shape {list(self.values[bias].shape)}")
        scale = {k: float(node.kwargs.get(k, 1.0)) for k in ("alpha", "beta")}
        return GemmGroup(self.new_name("gemm"), [], [], a=a, b=b, bias=bias, trans_b=trans_b,
                         batch=out[0] if name == "bmm" else 1, m=out[-2], n=out[-1], k=a_shape[-1],
                         result=node.name, out_shape=out, **scale)

    # --- convolutions ------------------------------------------------------------------------

    def add_conv(self, node: Node) -> None:
        x, w, bias, stride, padding, dilation, transposed, output_padding, groups = node.args
        self.require_float(node, [a for a in (x, w, bias) if a])
        if not (self.values[x].contiguous and self.values[w].contiguous):
            raise Unsupported("a convolution of a non-contiguous input or weight")
        if not 1 <= len(node.shape) - 2 <= 3:
            raise Unsupported(f"a convolution over {len(node.shape) - 2} spatial dims")
        result = f"{node.name}_nobias" if bias else node.name
        self.values[result] = Value(result, node.shape)
        group = ConvGroup(self.new_name("conv"), [], [], x=x, w=w, stride=tuple(stride), padding=tuple(padding),
                          dilation=tuple(dilation), output_padding=tuple(output_padding), transposed=bool(transposed),
                          groups=int(groups), result=result, in_shape=self.values[x].shape,
                          w_shape=self.values[w].shape, out_shape=node.shape)
        self.add_inputs(group, [x, w])
        self.push(group, result)
        if bias:  # the bias as the first epilogue op, so that both generators fuse it
            channels = self.channel_view(bias, len(node.shape))
            self.graph.consumers[result] = [node.name]
            self.join(len(self.steps) - 1, node, Op("add", [result, channels], node.name, {"alpha": 1.0}), [channels])

    # --- pooling ------------------------------------------------------------------------------

    def add_pool(self, node: Node) -> None:
        x, args = node.args[0], list(node.args) + [None] * 7
        self.require_float(node, [x])
        if not self.values[x].contiguous:
            raise Unsupported(f"{node.target} of a non-contiguous input")
        spatial = len(node.shape) - 2

        def per_dim(value, default):
            value = default if value in (None, []) else value
            return tuple(value) * (spatial if len(value) == 1 else 1) if isinstance(value, list) else (value,) * spatial
        kernel = per_dim(args[1], None)
        common = dict(kernel=kernel, stride=per_dim(args[2], list(kernel)), padding=per_dim(args[3], 0))
        if node.target == "max_pool":
            group = PoolGroup(self.new_name("pool"), [], [], x=x, mode="max", dilation=per_dim(args[4], 1), **common)
        else:
            count = True if args[5] is None else bool(args[5])
            group = PoolGroup(self.new_name("pool"), [], [], x=x, mode="avg", dilation=(1,) * spatial,
                              count_include_pad=count, divisor_override=args[6], **common)
        group.result, group.in_shape, group.out_shape = node.name, self.values[x].shape, node.shape
        self.add_inputs(group, [x])
        self.push(group, node.name)

    # --- concatenation -------------------------------------------------------------------------

    def add_cat(self, node: Node) -> None:
        parts, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
        self.require_float(node, parts)
        dim %= len(node.shape)
        if any(not self.values[p].contiguous for p in parts):
            raise Unsupported("cat of a non-contiguous tensor")
        sizes = tuple(self.values[p].shape[dim] if len(self.values[p].shape) == len(node.shape) else 0 for p in parts)
        if 0 in sizes:
            raise Unsupported("cat with an empty part")
        group = CatGroup(self.new_name("cat"), [], [], parts=list(parts), dim=dim, sizes=sizes, result=node.name,
                         out_shape=node.shape)
        self.add_inputs(group, parts)
        self.push(group, node.name)

    # --- views -----------------------------------------------------------------------------

    def add_view(self, node: Node) -> None:
        source = node.args[0]
        last = len(self.steps) - 1
        group = self.steps[last] if self.owner.get(source) == last and last >= 0 else None
        if isinstance(group, ReductionGroup) and lowering.base(node.target) in ALIAS_VIEWS \
                and source in self.reduced[last] and node.contiguous \
                and self.reduction_phase(group, node, [source]) is not None:
            return self.join(last, node, Op("copy", [source], node.name), [])
        view = ViewStep(self.values[node.name], lowering.view_expr(node), source, lowering.base(node.target))
        self.values[node.name].source = ""
        self.views[node.name] = view
        if source not in self.owner:  # (views between kernels are owned, through push)
            self.prelude.append(view)  # a view of an input or parameter: hoisted, so kernels keep fusing
        else:
            self.push(view, node.name)

    # --- batch norm in inference: pointwise with per-channel parameters ----------------------

    def add_batch_norm(self, node: Node) -> None:
        x, weight, bias, mean, var, _momentum, eps = node.args
        shape = self.values[x].shape
        replaced = node.kwargs["replaces"]  # x's reader is now the first op below
        self.graph.consumers[x] = [f"{node.name}_0" if c == replaced else c for c in self.graph.consumers.get(x, [])]
        params = [self.channel_view(p, len(shape)) for p in (mean, var, weight, bias)]
        steps = [("sub", [x, params[0]], {}), ("bn_scale", [None, params[1]], {"eps": float(eps)})]
        steps += [("mul", [None, params[2]], {})] if weight else []
        steps += [("add", [None, params[3]], {"alpha": 1.0})] if bias else []
        previous = None
        for i, (op_name, args, attrs) in enumerate(steps):
            name = node.name if i == len(steps) - 1 else f"{node.name}_{i}"
            args = [previous if a is None else a for a in args]
            self.values[name] = Value(name, shape)
            if i < len(steps) - 1:
                self.graph.consumers[name] = [f"{node.name}_{i + 1}" if i + 1 < len(steps) - 1 else node.name]
            self.add_op(Node(name, op_name, args, {}, shape, FLOAT), Op(op_name, args, name, attrs))
            previous = name

    def channel_view(self, param: str | None, rank: int) -> str | None:
        """A [C] parameter as [C, 1, ...] so that it broadcasts along dim 1 of the input."""
        if param is None or rank <= 2:
            return param
        value = self.values[param]
        name = f"{param}_as_channels"
        shape = (value.shape[0],) + (1,) * (rank - 2)
        self.values[name] = Value(name, shape)
        self.prelude.append(ViewStep(self.values[name], f"{{x}}.view({', '.join(map(str, shape))})", param, "view"))
        return name

    # --- bookkeeping -----------------------------------------------------------------------

    def push(self, step, produced: str) -> None:
        self.steps.append(step)
        self.own(produced, len(self.steps) - 1)

    def own(self, name: str, index: int) -> None:
        """`name` is made by step `index`. Its layout is the generated code's, not eager's: a kernel
        writes its outputs dense, and a view of one is as contiguous as that view of a dense tensor
        (eager's `(x.t() * 2).t()` is contiguous, ours is not)."""
        self.owner[name] = index
        if isinstance(self.steps[index], Group):
            self.values[name].contiguous = True
        else:
            self.values[name].contiguous = self.contiguous_view(name)

    def contiguous_view(self, name: str) -> bool:
        try:
            return self.layout(name).is_contiguous()
        except Exception:  # noqa: BLE001  (a view meta tensors cannot replay: read it through strides)
            return False

    def layout(self, name: str) -> torch.Tensor:
        """A meta tensor laid out as the generated forward lays out the value `name` (owned)."""
        step = self.steps[self.owner[name]]
        if isinstance(step, ViewStep):
            return eval(step.expr.format(x="source"), {"source": self.layout(step.source), "torch": torch})
        return torch.empty(self.values[name].shape, device="meta")

    def new_name(self, kind: str) -> str:
        return f"k{sum(isinstance(s, Group) for s in self.steps)}_{kind}"

    def add_inputs(self, group: Group, names: list[str]) -> None:
        for name in names:
            if all(v.name != name for v in group.inputs):
                group.inputs.append(self.values[name])

    def bool_input(self, name: str, node: Node) -> bool:
        """A bool tensor from outside (an input, a buffer) read by a float op: torch promotes it
        to 0.0 or 1.0, and the generators load it that way. Bool values made inside forward
        (comparisons) are not supported yet."""
        return self.values[name].dtype == "bool" and name not in self.owner and node.dtype == FLOAT

    def require_float(self, node: Node, args: list[str], result_may_be_index: bool = False) -> None:
        wrong = [a for a in args if self.values[a].dtype != FLOAT]
        if wrong or (node.dtype != FLOAT and not (result_may_be_index and node.dtype == "int64")):
            dtype = self.values[wrong[0]].dtype if wrong else node.dtype
            raise Unsupported(f"{node.target} on {dtype} (only float32 kernels are generated yet)")

    def mark_outputs(self) -> None:
        """A value leaves its kernel when another kernel takes it as an input, a view between
        kernels reads it, or forward returns it."""
        read = {v.name for s in self.steps if isinstance(s, Group) for v in s.inputs}
        read |= {s.source for s in self.steps if isinstance(s, ViewStep)} | set(self.graph.outputs)
        for name, index in self.owner.items():
            step = self.steps[index]
            if isinstance(step, Group) and name in read:
                step.outputs.append(self.values[name])
        for name in self.graph.outputs:
            if name not in self.owner:
                raise Unsupported("forward returns one of its inputs or parameters unchanged")


def _fold_multi_output(nodes: list[Node]) -> list[Node]:
    """max.dim / min.dim and their getitems -> amax/argmax (amin/argmin) nodes."""
    multi = {n.name: n for n in nodes if n.target in ("max.dim", "min.dim", BATCH_NORM) + MAX_POOLS}
    folded = []
    for node in nodes:
        if node.name in multi:
            continue
        if node.target == "getitem" and node.args[0] in multi and multi[node.args[0]].target == BATCH_NORM:
            if node.args[1] != 0:
                raise Unsupported("batch norm statistics as outputs")
            source = multi[node.args[0]]
            folded.append(Node(node.name, BATCH_NORM, source.args, {"replaces": source.name}, node.shape, node.dtype))
            continue
        if node.target == "getitem" and node.args[0] in multi and multi[node.args[0]].target in MAX_POOLS:
            if node.args[1] != 0:
                raise Unsupported("max pooling's indices as values")
            folded.append(Node(node.name, "max_pool", multi[node.args[0]].args, {}, node.shape, node.dtype))
            continue
        if node.target == "getitem" and node.args[0] in multi:
            source = multi[node.args[0]]
            which = ("amax" if source.target == "max.dim" else "amin") if node.args[1] == 0 else \
                ("argmax" if source.target == "max.dim" else "argmin")
            dim, keep = source.args[1], source.args[2] if len(source.args) > 2 else False
            args = [source.args[0], [dim], keep] if which in ("amax", "amin") else [source.args[0], dim, keep]
            node = Node(node.name, f"{which}.default", args, {}, node.shape,
                        "int64" if which.startswith("arg") else node.dtype, node.contiguous)
        folded.append(node)
    return folded


def plan(graph: Graph) -> Plan:
    """KERNELSMITH_REMAT=0 keeps every intermediate in memory (to measure what recomputing gains)."""
    return Partitioner(graph, remat=os.environ.get("KERNELSMITH_REMAT", "1") != "0").run()
