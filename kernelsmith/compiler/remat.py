"""Recompute instead of store: a full-size value that a later kernel reads is recomputed there.

The partitioner fuses in graph order, so a normalisation becomes a chain of reductions in which
each kernel writes its full-size intermediates for the next one: GroupNorm's first kernel writes
x - mean and (x - mean)^2, the second reads both back. Every such value is a pointwise function
of tensors that are in memory anyway (the first kernel's inputs) and of small reduced results.
So the later kernel recomputes it from those, the earlier kernel stops writing it, and the
earlier kernel's ops that fed only it are dropped (for a reduction, that can be a whole second
pass over its operand). It is done when it adds no more full-size reads to the later kernel
than it removes.
"""

from __future__ import annotations

from copy import deepcopy
from math import prod

from kernelsmith.compiler.ir import FULL_SHAPE_REDUCTIONS, Group, Op, Plan, PointwiseGroup, ReductionGroup

MAX_CHAIN = 32  # ops recomputed into one kernel; pointwise ops are cheap next to a full-size read
ARG_REDUCTIONS = ("argmax", "argmin")


def rematerialize(plan: Plan) -> None:
    """plan: its steps complete and its `owner` and `reduced` filled in, its outputs not marked yet."""
    for step in plan.steps:
        if isinstance(step, (PointwiseGroup, ReductionGroup)):
            _absorb(plan, step)
    while _drop_dead_ops(plan):
        pass


def drop_empty(steps: list) -> None:
    """Kernels left with nothing to do, once everything they made is recomputed where it is
    read (after the outputs are marked: that goes by step index). A kernel whose values an
    earlier kernel now also makes keeps its ops (their values are still read) but has no
    outputs: ShuffleNet's `x - mean` once emitted ` = ext.k25_pointwise(...)`."""
    steps[:] = [s for s in steps if not (isinstance(s, PointwiseGroup) and not s.body)
                and not (isinstance(s, (PointwiseGroup, ReductionGroup)) and not s.outputs)]


def _space(group: Group) -> tuple[int, ...]:
    return group.shape if isinstance(group, PointwiseGroup) else group.in_shape


def _absorb(plan: Plan, group: Group) -> None:
    """Recompute in `group` the full-size inputs that an earlier kernel made, when that pays."""
    space, reduced_reads = _space(group), _read_at_reduced_shape(group)
    chains = {}
    for value in group.inputs:
        if value.name in reduced_reads:
            continue  # (possible when the reduced dims have size 1) the epilogue has no prologue values
        chain = _chain(plan, value.name, space)
        if chain is not None:
            chains[value.name] = chain
    if not chains:
        return
    ops = _ordered({id(op): op for chain in chains.values() for op in chain[0]}.values())
    made = {op.out for op in ops}
    needs = [n for chain in chains.values() for n in chain[1] if n not in made]
    have = {v.name for v in group.inputs}
    new_full = {n for n in needs if n not in have and _full(plan, n, space)}
    if len(new_full) > len(chains) or len(ops) > MAX_CHAIN:
        return
    front = [deepcopy(op) for op in ops]
    if isinstance(group, PointwiseGroup):
        group.body[:0] = front
    else:
        group.prologue[:0] = front
    group.inputs[:] = [v for v in group.inputs if v.name not in made]
    plan.add_inputs(group, list(dict.fromkeys(needs)))


def _read_at_reduced_shape(group: Group) -> set[str]:
    if isinstance(group, ReductionGroup) and group.reduce not in FULL_SHAPE_REDUCTIONS:
        return {a for op in group.epilogue for a in op.tensor_args()}
    return set()


def _chain(plan: Plan, name: str, space: tuple) -> tuple[list[Op], list[str]] | None:
    """(the ops that make `name` in its kernel, the values they read from memory), or None when
    `name` is not a recomputable full-size value of an earlier pointwise or reduction kernel."""
    owner = plan.owner.get(name)
    if owner is None or tuple(plan.values[name].shape) != tuple(space):
        return None
    group = plan.steps[owner]
    if not isinstance(group, (PointwiseGroup, ReductionGroup)) or _space(group) != tuple(space):
        return None
    ops, needs = [], []
    return (ops, needs) if _collect(plan, owner, group, name, ops, needs, set()) else None


def _recomputable_ops(group: Group) -> list[Op]:
    if isinstance(group, PointwiseGroup):
        return group.body
    if group.reduce in ARG_REDUCTIONS:
        return []
    return group.prologue + ([] if group.reduce in FULL_SHAPE_REDUCTIONS else group.broadcast_epilogue)


def _small_results(plan: Plan, owner: int, group: Group) -> set[str]:
    """The reduced-shape values of a reduction kernel, which it can write at little cost."""
    if isinstance(group, ReductionGroup) and group.reduce not in FULL_SHAPE_REDUCTIONS + ARG_REDUCTIONS:
        return plan.reduced.get(owner, set())
    return set()


def _collect(plan: Plan, owner: int, group: Group, name: str, ops: list, needs: list, seen: set) -> bool:
    if name in seen:
        return True
    seen.add(name)
    if plan.owner.get(name) != owner or name in _small_results(plan, owner, group):
        needs.append(name)  # in memory before this kernel, or a reduced result it writes
        return True
    op = next((o for o in _recomputable_ops(group) if o.out == name), None)
    if op is None or len(ops) >= MAX_CHAIN:
        return False
    for arg in op.tensor_args():
        if not _collect(plan, owner, group, arg, ops, needs, seen):
            return False
    ops.append(op)
    return True


def _ordered(ops) -> list[Op]:
    """Ops of (possibly) several chains in an order where each op follows what it reads."""
    pending, done, ordered = list(ops), set(), []
    while pending:
        ready = [op for op in pending if all(a in done or a not in {o.out for o in pending} for a in op.tensor_args())]
        for op in ready:
            ordered.append(op)
            done.add(op.out)
            pending.remove(op)
        if not ready:  # a cycle cannot happen in a graph; keep what is left in its order
            ordered += pending
            break
    return ordered


def _full(plan: Plan, name: str, space: tuple) -> bool:
    value = plan.values[name]
    return not value.scalar and prod(value.shape) == prod(space)


# --- dead ops ------------------------------------------------------------------------------------

def _drop_dead_ops(plan: Plan) -> bool:
    """Ops whose result nothing reads any more, and inputs no op reads; True when any went."""
    read, changed = plan.read_across_steps(), False
    for step in plan.steps:
        if isinstance(step, (PointwiseGroup, ReductionGroup)):
            own = {v.name for v in step.inputs}  # read by this kernel itself: live only if its live ops read them
            changed |= _drop_dead(step, read - own)
    return changed


def _drop_dead(group: Group, read: set[str]) -> bool:
    """read: the values something other than this kernel reads."""
    live = set(read)
    if isinstance(group, ReductionGroup):
        live |= {group.operand, group.result}
    phases = [group.body] if isinstance(group, PointwiseGroup) else \
        [group.prologue, group.epilogue, group.broadcast_epilogue]
    kept_total = 0
    before = sum(len(ph) for ph in phases)
    for phase in reversed(phases):
        kept = []
        for op in reversed(phase):
            if op.out in live:
                kept.append(op)
                live |= set(op.tensor_args())
        phase[:] = reversed(kept)
        kept_total += len(kept)
    inputs = [v for v in group.inputs if v.name in live]
    changed = kept_total != before or len(inputs) != len(group.inputs)
    group.inputs[:] = inputs
    return changed
