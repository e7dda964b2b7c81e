"""Partition a graph into kernels: pointwise chains, reductions with the pointwise work around
them, and GEMMs, convolutions and pooling with their epilogues. Views run in Python between
kernels. The graph arrives rewritten (passes.before_partition): one node, one thing to place.

One pass in graph order. A pointwise node joins the most recent group when every value of
that group it reads is inside the group and its shape fits the group (the index space of a
chain or a GEMM's output; the reduced shape, or the operand's shape for the normalisation
pattern, in a reduction). A reduction takes over the chain just before it as its prologue.
Anything else starts a new group. Afterwards, a value becomes a kernel output when something
outside its group (or forward's return) reads it.
"""

from __future__ import annotations

import os
from math import prod
from dataclasses import dataclass, field, replace

from kernelsmith.compiler import layout, lowering, passes, recurrent, remat
from kernelsmith.compiler.cstyle.access import broadcastable
from kernelsmith.compiler.dtypes import FLOATS
from kernelsmith.compiler.graph import Graph, Node
from kernelsmith.compiler.ir import (FULL_SHAPE_REDUCTIONS, CatGroup, ConvGroup, GemmGroup, Group, MatrixLayout, Op,
                                     Plan, PointwiseGroup, PoolGroup, ReductionGroup, Value, ViewStep)
from kernelsmith.compiler.lowering import Unsupported

UNSTORED = "only float32, bfloat16 and float16 kernels are generated yet"
ALIAS_VIEWS = ("view", "_unsafe_view", "reshape", "unsqueeze", "squeeze")
MAX_POOL_OVERLAP = 4.0  # windows per input element up to which a pool recomputes its operand's prologue


def plan(graph: Graph) -> Plan:
    """KERNELSMITH_REMAT=0 keeps every intermediate in memory (to measure what recomputing gains)."""
    empty = Plan(graph.inputs, [], graph.outputs, graph.returns_tuple, params=graph.params, values=graph.values(),
                 init=graph.init)
    try:
        graph = passes.before_partition(graph)
    except Unsupported as err:
        empty.unsupported.append(str(err))
        return empty
    return Partitioner(graph, remat=os.environ.get("KERNELSMITH_REMAT", "1") != "0").run()


def fold_shared_batch(group: GemmGroup, values: dict[str, Value]) -> None:
    """A bmm of one shared b (an expanded weight) whose a's rows follow each other in memory across
    the batch is one GEMM of batch * m rows, not batch small ones (the output is the same memory)."""
    a, b = group.layout("a", values), group.layout("b", values)
    if group.batch == 1 or b.batch_stride != 0 or a.transposed or a.batch_stride != group.m * a.ld:
        return
    group.m, group.batch = group.batch * group.m, 1
    group.a_layout = None if group.a_layout is None else replace(a, batch_stride=0)


@dataclass
class Partitioner:
    graph: Graph
    remat: bool = True  # recompute full-size values in the kernels that read them (remat.py)
    plan: Plan = field(init=False)
    views: dict[str, ViewStep] = field(default_factory=dict)

    def __post_init__(self):
        self.plan = Plan(self.graph.inputs, [], self.graph.outputs, self.graph.returns_tuple,
                         params=self.graph.params, values=self.graph.values(), init=self.graph.init)

    @property
    def values(self) -> dict[str, Value]:
        return self.plan.values

    @property
    def steps(self) -> list:
        return self.plan.steps

    @property
    def owner(self) -> dict[str, int]:
        return self.plan.owner

    def run(self) -> Plan:
        try:
            for node in self.graph.nodes:
                self.add(node)
            if self.remat:
                remat.rematerialize(self.plan)
            self.mark_outputs()
            remat.drop_empty(self.steps)
        except Unsupported as err:
            self.plan.unsupported.append(str(err))
        return self.plan

    def add(self, node: Node) -> None:
        kind = lowering.kind_of(node)
        if kind == "unsupported":
            raise Unsupported(f"{node.target} is not supported yet")
        getattr(self, f"add_{kind}")(node)

    # --- pointwise -----------------------------------------------------------------------

    def add_pointwise(self, node: Node) -> None:
        op = lowering.pointwise_op(node)
        if op.name in lowering.BOOL_RESULTS or op.name == "where":  # bools in and out, as 0.0/1.0 in the kernel
            self.require_float_or_bool(node, op.tensor_args(), bool_result=op.name in lowering.BOOL_RESULTS)
        else:
            self.require_float(node, [a for a in op.tensor_args() if not self.bool_input(a, node)])
        last = len(self.steps) - 1
        internal = [a for a in op.tensor_args() if self.owner.get(a) == last]
        others = [a for a in op.tensor_args() if a not in internal]
        if internal and self.joins(self.steps[last], node, internal, others):
            return self.join(last, node, op, others)
        group = PointwiseGroup(self.new_name("pointwise"), [], [], shape=node.shape, body=[op])
        self.plan.add_inputs(group, op.tensor_args())
        self.push(group, node.name)

    def joins(self, group: Group, node: Node, internal: list[str], others: list[str]) -> bool:
        if any(not broadcastable(self.values[a].shape, node.shape) for a in others):
            return False
        if isinstance(group, PointwiseGroup):
            return node.shape == group.shape
        if isinstance(group, PoolGroup):  # an input read at in_shape is not also read at out_shape
            return node.shape == group.out_shape and not set(others) & group.prologue_inputs()
        if isinstance(group, (GemmGroup, ConvGroup)):
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
        reduced = self.plan.reduced[self.owner[group.result]]
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
                self.plan.reduced[index].add(node.name)
        else:
            (group.epilogue if isinstance(group, PoolGroup) else group.ops()).append(op)
        self.plan.add_inputs(group, others)
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
                               result_shape=node.shape, attrs=spec.attrs)
        chain = self.steps[last] if self.owner.get(operand) == last and last >= 0 else None
        if isinstance(chain, PointwiseGroup) and chain.shape == in_shape:
            group.name = chain.name.replace("_pointwise", "_reduction")
            group.inputs, group.prologue = chain.inputs, chain.body
            self.steps[last] = group  # the chain becomes the prologue, in place
            self.own(node.name, last)
        elif self.epilogue_moves(chain, node):
            self.move_epilogue(chain, group, node)
        else:
            self.plan.add_inputs(group, [operand])
            self.push(group, node.name)
        self.plan.reduced[self.owner[node.name]] = {node.name}

    def add_variance(self, node: Node) -> None:
        """A welford's variance: the second reduced value of the reduction that made the mean just before."""
        index = self.owner[node.args[0]]
        self.steps[index].variance = node.name
        self.own(node.name, index)
        self.plan.reduced[index].add(node.name)

    def epilogue_moves(self, library: Group | None, node: Node) -> bool:
        """A GEMM's, convolution's or pooling's epilogue that only feeds this reduction: run it as
        the reduction's prologue instead, so the library's result is read once, not read,
        written and read again."""
        if not isinstance(library, (GemmGroup, ConvGroup, PoolGroup)) or not library.epilogue:
            return False
        return library.out_shape == self.values[node.args[0]].shape and self.only_read_by(library.epilogue, node)

    def only_read_by(self, ops: list[Op], node: Node) -> bool:
        """Nothing but these ops themselves and `node` reads what they make (forward's return counts)."""
        made = {op.out for op in ops}
        return all(r in made or r == node.name for v in made for r in self.graph.consumers.get(v, []))

    def move_epilogue(self, library: Group, group: ReductionGroup, node: Node) -> None:
        group.prologue, reads = library.epilogue, self.detach_epilogue(library)
        self.plan.add_inputs(group, reads)
        self.push(group, node.name)
        for op in group.prologue:
            self.own(op.out, len(self.steps) - 1)

    @staticmethod
    def detach_epilogue(library: Group) -> list[str]:
        """Empty a library call's epilogue, leaving it its core operands and its bare result; what the
        epilogue read (that result first), for the kernel that now runs it."""
        made = {op.out for op in library.epilogue}
        reads = [library.result] + [a for op in library.epilogue for a in op.tensor_args() if a not in made]
        core = {getattr(library, f, None) for f in ("a", "b", "bias", "x", "w")}
        core |= library.prologue_inputs() if isinstance(library, PoolGroup) else set()
        library.epilogue, library.inputs = [], [v for v in library.inputs if v.name in core]
        return reads

    # --- GEMMs -----------------------------------------------------------------------------

    def add_gemm(self, node: Node) -> None:
        name, args = lowering.base(node.target), list(node.args)
        bias, a, b = (args[0], args[1], args[2]) if name == "addmm" else (None, args[0], args[1])
        self.require_float(node, [x for x in (bias, a, b) if x])
        b_source, trans_b = self.weight_of(b)
        a, a_layout = self.gemm_operand(a)
        b_source, b_layout = (b_source, None) if trans_b else self.gemm_operand(b_source)
        group = self.gemm_group(node, name, a, b_source, trans_b, bias)
        group.a_layout, group.b_layout = a_layout, b_layout
        fold_shared_batch(group, self.values)
        self.plan.add_inputs(group, [x for x in (a, b_source, bias) if x])
        self.push(group, node.name)

    def weight_of(self, b: str) -> tuple[str, bool]:
        """b itself, or (W, True) when b is W.permute(1, 0) / W.t() of a contiguous 2-D W."""
        step = self.views.get(b)
        if isinstance(step, ViewStep) and step.kind in ("permute", "t", "transpose") and \
                len(self.values[b].shape) == 2 and self.values[step.source].contiguous:
            return step.source, True
        return b, False

    def gemm_operand(self, name: str) -> tuple[str, MatrixLayout | None]:
        """A GEMM operand as cuBLAS reads it: contiguous (no layout), a strided view read in place
        (transposed, a leading dimension, a batch stride), or else a dense copy."""
        if self.values[name].contiguous:
            return name, None
        strided = layout.matrix_layout(self.values[name].shape, layout.strides(self.plan, name))
        return (name, strided) if strided is not None else (self.dense(name), None)

    def gemm_group(self, node: Node, name: str, a: str, b: str, trans_b: bool, bias: str | None) -> GemmGroup:
        a_shape, out = self.values[a].shape, node.shape
        if bias is not None and self.values[bias].shape not in ((out[-1],), (1, out[-1])):
            raise Unsupported(f"addmm with a bias of shape {list(self.values[bias].shape)}")
        scale = {k: float(node.kwargs.get(k, 1.0)) for k in ("alpha", "beta")}
        return GemmGroup(self.new_name("gemm"), [], [], a=a, b=b, bias=bias, trans_b=trans_b,
                         batch=out[0] if name == "bmm" else 1, m=out[-2], n=out[-1], k=a_shape[-1],
                         result=node.name, out_shape=out, **scale)

    # --- convolutions (the bias arrives as an add after it: passes/conv_bias.py) -------------

    def add_conv(self, node: Node) -> None:
        x, w, bias, stride, padding, dilation, transposed, output_padding, groups = node.args
        self.require_float(node, [a for a in (x, w, bias) if a])
        x, w = self.dense(x), self.dense(w)
        if not 1 <= len(node.shape) - 2 <= 3:
            raise Unsupported(f"a convolution over {len(node.shape) - 2} spatial dims")
        group = ConvGroup(self.new_name("conv"), [], [], x=x, w=w, stride=tuple(stride), padding=tuple(padding),
                          dilation=tuple(dilation), output_padding=tuple(output_padding), transposed=bool(transposed),
                          groups=int(groups), result=node.name, in_shape=self.values[x].shape,
                          w_shape=self.values[w].shape, out_shape=node.shape)
        self.plan.add_inputs(group, [x, w])
        self.push(group, node.name)

    # --- pooling ------------------------------------------------------------------------------

    def add_pool(self, node: Node) -> None:
        x, args = node.args[0], list(node.args) + [None] * 7
        self.require_float(node, [x])
        x = self.dense(x)  # a strided view's copy, which the pool then takes as its prologue
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
        last = len(self.steps) - 1
        chain = self.steps[last] if self.owner.get(x) == last and last >= 0 else None
        if not self.joins_pool(chain, group, node):
            self.plan.add_inputs(group, [x])
            self.push(group, node.name)

    def joins_pool(self, chain: Group | None, group: PoolGroup, node: Node) -> bool:
        """The pointwise chain or library epilogue that makes the pooled value, moved into the pool as its
        prologue when nothing else reads what it makes and windows overlap little (each input element's
        prologue runs once per window that covers it). True when it moved."""
        overlap = prod(max(1.0, k / s) for k, s in zip(group.kernel, group.stride))
        ops = chain.body if isinstance(chain, PointwiseGroup) else getattr(chain, "epilogue", None)
        space = chain.shape if isinstance(chain, PointwiseGroup) else getattr(chain, "out_shape", None)
        if not ops or space != group.in_shape or overlap > MAX_POOL_OVERLAP or isinstance(chain, PoolGroup) \
                or not self.only_read_by(ops, node):
            return False
        group.prologue = list(ops)
        if isinstance(chain, PointwiseGroup):
            self.replace_chain(chain, group, node)
        else:
            self.plan.add_inputs(group, self.detach_epilogue(chain))
            self.push(group, node.name)
        for op in ops:
            self.own(op.out, self.owner[node.name])
        return True

    def replace_chain(self, chain: PointwiseGroup, group: PoolGroup, node: Node) -> None:
        """The chain, the last step, becomes the pool (its body the prologue), in place."""
        group.name, group.inputs = chain.name.replace("_pointwise", "_pool"), chain.inputs
        self.steps[-1] = group
        self.own(node.name, len(self.steps) - 1)

    # --- concatenation -------------------------------------------------------------------------

    def add_cat(self, node: Node) -> None:
        parts, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
        self.require_float(node, parts)
        dim %= len(node.shape)
        parts = [self.dense(p) for p in parts]
        sizes = tuple(self.values[p].shape[dim] if len(self.values[p].shape) == len(node.shape) else 0 for p in parts)
        if 0 in sizes:
            raise Unsupported("cat with an empty part")
        group = CatGroup(self.new_name("cat"), [], [], parts=list(parts), dim=dim, sizes=sizes, result=node.name,
                         out_shape=node.shape)
        self.plan.add_inputs(group, parts)
        self.push(group, node.name)

    # --- recurrent layers (recurrent.py): one group, its results picked by getitems ----------

    def add_recurrent(self, node: Node) -> None:
        group = recurrent.recurrent_group(node, self.values)
        self.require_float(node, recurrent.tensors(group))
        group.x, group.h0, group.c0 = (self.dense(n) if n else n for n in (group.x, group.h0, group.c0))
        group.name = self.new_name(group.cell)
        self.plan.add_inputs(group, recurrent.tensors(group))
        self.push(group, node.name)

    def add_getitem(self, node: Node) -> None:
        group = self.steps[self.owner[node.args[0]]] if node.args[0] in self.owner else None
        if not isinstance(group, recurrent.RecurrentGroup):
            raise Unsupported(f"{node.target} is not supported yet")
        recurrent.picked(group, node)
        self.own(node.name, self.owner[node.args[0]])

    # --- views -----------------------------------------------------------------------------

    def add_view(self, node: Node) -> None:
        source = node.args[0]
        last = len(self.steps) - 1
        group = self.steps[last] if self.owner.get(source) == last and last >= 0 else None
        if isinstance(group, ReductionGroup) and lowering.base(node.target) in ALIAS_VIEWS \
                and source in self.plan.reduced[last] and node.contiguous \
                and self.reduction_phase(group, node, [source]) is not None:
            return self.join(last, node, Op("copy", [source], node.name), [])
        view = ViewStep(self.values[node.name], lowering.view_of(node), source, lowering.base(node.target))
        self.values[node.name].source = ""
        self.views[node.name] = view
        if source not in self.owner:  # (views between kernels are owned, through push)
            self.plan.prelude.append(view)  # a view of an input or parameter: hoisted, so kernels keep fusing
        else:
            self.push(view, node.name)

    # --- bookkeeping -----------------------------------------------------------------------

    def push(self, step, produced: str) -> None:
        self.steps.append(step)
        self.own(produced, len(self.steps) - 1)

    def own(self, name: str, index: int) -> None:
        """`name` is made by step `index`, laid out as the generated code lays it out (layout.py)."""
        self.owner[name] = index
        self.values[name].contiguous = layout.contiguous(self.plan, name)

    def dense(self, name: str) -> str:
        """`name` itself when contiguous; else a dense copy made by a pointwise kernel, which reads the view
        through its strides (a permuted activation, attention's transposed keys). The library calls and the
        window kernels read their operands dense."""
        if self.values[name].contiguous:
            return name
        view = self.values[name]
        copy = f"{name}_dense"
        self.values[copy] = Value(copy, view.shape, view.dtype)
        group = PointwiseGroup(self.new_name("pointwise"), [], [], shape=view.shape, body=[Op("copy", [name], copy)])
        self.plan.add_inputs(group, [name])
        self.push(group, copy)
        return copy

    def new_name(self, kind: str) -> str:
        return f"k{sum(isinstance(s, Group) for s in self.steps)}_{kind}"

    def bool_input(self, name: str, node: Node) -> bool:
        """A bool tensor read by a float op: torch promotes it to 0.0 or 1.0, and the generators load it (an
        input, a buffer) or compute it (a comparison in the same kernel) that way."""
        return self.values[name].dtype == "bool" and node.dtype in FLOATS

    def require_storable(self, name: str) -> None:
        """Kernels compute bools as 0.0/1.0 floats and store only floats (and argmax's int64)."""
        if self.values[name].dtype == "bool":
            raise Unsupported(f"{name}, a bool made in forward, is needed outside its kernel (a bool result is "
                              "not stored yet)")

    def require_float_or_bool(self, node: Node, args: list[str], bool_result: bool) -> None:
        """A comparison, a logical not or a `where`: float or bool operands, a bool (or float) result. A bool made
        here stays inside its kernel (mark_outputs refuses to store one)."""
        wrong = [a for a in args if self.values[a].dtype not in (*FLOATS, "bool")]
        if wrong or (node.dtype == "bool") != bool_result or node.dtype not in (*FLOATS, "bool"):
            dtype = self.values[wrong[0]].dtype if wrong else node.dtype
            raise Unsupported(f"{node.target} on {dtype} ({UNSTORED})")

    def require_float(self, node: Node, args: list[str], result_may_be_index: bool = False) -> None:
        wrong = [a for a in args if self.values[a].dtype not in FLOATS]
        if wrong or (node.dtype not in FLOATS and not (result_may_be_index and node.dtype == "int64")):
            dtype = self.values[wrong[0]].dtype if wrong else node.dtype
            raise Unsupported(f"{node.target} on {dtype} ({UNSTORED})")

    def mark_outputs(self) -> None:
        """A value leaves its kernel when another kernel takes it as an input, a view between
        kernels reads it, or forward returns it."""
        read = self.plan.read_across_steps()
        for name, index in self.owner.items():
            step = self.steps[index]
            if isinstance(step, Group) and name in read:
                self.require_storable(name)
                step.outputs.append(self.values[name])
        for name in self.graph.outputs:
            if name not in self.owner:
                raise Unsupported("forward returns one of its inputs or parameters unchanged")
