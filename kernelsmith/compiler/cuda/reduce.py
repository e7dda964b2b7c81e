"""Reduction kernels: a team of threads per reduced value (warp shuffles and shared memory), the
pointwise work around the reduction fused in, and few long rows split across blocks.

The operand is viewed as [outer, size, inner] and `size` is reduced. Each reduction is an
accumulator struct `Acc` (text/acc_*.cuh) that the team combines (text/team_reduce.cuh).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernelsmith.compiler.cstyle import ops
from kernelsmith.compiler.cuda.binding import generated
from kernelsmith.compiler.cuda.common import (ARG_REDUCTIONS, Param, Read, call, cu_file, dense, fixed, indent,
                                              input_params, launcher, line_constants, output_params, read,
                                              signature, slot_launch, store, stride_params, switch, template, used,
                                              vec4_load, vec4_store)
from kernelsmith.compiler.ir import FULL_SHAPE_REDUCTIONS, SCANS, Generated, Group, ReductionGroup

ACCUMULATORS = {
    "sum": template("acc_sum.cuh").substitute(term="x"), "mean": template("acc_sum.cuh").substitute(term="x"),
    "norm2": template("acc_sum.cuh").substitute(term="x * x"),
    "amax": template("acc_extremum.cuh").substitute(init="-INFINITY", cmp=">"),
    "amin": template("acc_extremum.cuh").substitute(init="INFINITY", cmp="<"),
    "argmax": template("acc_arg.cuh").substitute(cmp=">"), "argmin": template("acc_arg.cuh").substitute(cmp="<"),
    "logsumexp": fixed("acc_logsumexp.cuh"), "softmax": fixed("acc_logsumexp.cuh"),
    "log_softmax": fixed("acc_logsumexp.cuh"), "safe_softmax": fixed("acc_logsumexp.cuh"),
    "welford": fixed("acc_welford.cuh"),
}

# the reduced value from the team's accumulator (non-full reductions)
FINAL = {"sum": "acc.a", "mean": "(acc.a / {size})", "norm2": "sqrtf(acc.a)", "amax": "acc.a", "amin": "acc.a",
         "argmax": "acc.k", "argmin": "acc.k", "logsumexp": "(acc.m + logf(acc.s))",
         "welford": "(acc.k + acc.mean)"}  # its mean: the shift plus the mean of x - shift
WELFORD_VARIANCE = "(acc.m2 / {divisor})"  # a welford's second reduced value
# the full-shape result at one element x
ELEMENT = {"softmax": "(expf({x} - acc.m) / acc.s)", "log_softmax": "({x} - acc.m - ks_log_sum)",
           "safe_softmax": "(acc.m == -INFINITY ? 0.0f : expf({x} - acc.m) / acc.s)"}


@dataclass(frozen=True)
class Split:
    """A launch variant for few long lines, in two kernels (text/split_kernels.cuh): TEAM threads per
    line's chunk, SLOTS lines a block; rows (consecutive threads) or columns (teams SLOTS apart)."""

    team: int
    slots: int = 1
    rows: bool = True


SPLIT_VARIANTS = [Split(256), Split(512)]
SPLIT_MAX_LINES = 64  # rows of at most this many ...
SPLIT_MIN_SIZE = 65536  # ... and at least this long are split
SPLIT_BLOCKS = 2048  # blocks per pass: many per SM, so loads overlap
SPLIT_MIN_CHUNK = 4096
# Few long columns (BatchNorm's statistics over a [16384, 4096] GEMM output: 4,096 columns of 16,384): one
# block per 32 columns is 128 blocks of 256 threads, 8 warps on each of an H200's 132 SMs, too few loads in
# flight to read at its bandwidth. Split, the same columns' chunks go to SPLIT_BLOCKS blocks.
COLUMN_SPLIT_VARIANTS = [Split(8, 32, False), Split(16, 32, False)]
COLUMN_SPLIT_MAX_LINES = 8192  # columns of at most this many ...
COLUMN_SPLIT_MIN_SIZE = 4096  # ... and at least this long are split
COLUMN_SPLIT_MIN_CHUNK = 256

VECTOR_DTYPES = ("float32", "bfloat16", "float16", "bool")  # what vec4_load reads and vec4_store writes
# (TEAM, SLOTS, ROWS): threads per reduced value, reduced values per block, team layout
ROW_VARIANTS = [(256, 1, True), (128, 1, True), (512, 1, True), (32, 8, True), (1, 256, False)]
# Long rows get a block of 1,024 threads each first: level2/21's 1,024 GroupNorm rows of 258,064 took 1.486 ms at
# 256 threads a row and 1.167 at 1,024 on an H100, against 1.156 for a copy of the same traffic (float4 loads).
LONG_ROW, LONG_ROW_VARIANT = 16384, (1024, 1, True)
COLUMN_VARIANTS = [(1, 256, False), (1, 128, False), (8, 32, False), (4, 64, False), (16, 16, False)]


@dataclass
class ReductionParts:
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


def reduction(group: ReductionGroup) -> Generated:
    parts = reduction_parts(group)
    params = (input_params(group) + stride_params(parts.reads_in) + stride_params(parts.reads_red)
              + output_params(group))
    variants = _variants(group)
    vec = _vectorizes(parts)
    kernel = template("reduce_kernel.cuh").substitute(
        name=group.name, params=signature(params, True), outer=group.outer, size=group.size, inner=group.inner,
        body="\n".join(indent(_body(parts), 4)), vec=", int VEC" if vec else "")
    kernels = [line_constants(group), ACCUMULATORS[group.reduce], fixed("team_reduce.cuh"), kernel]
    splits = [v for v in variants if isinstance(v, Split)]
    if splits:  # one file's split variants share their chunks: sized for the lines a block of theirs takes
        kernels.append(_split_kernels(parts, params, splits[0].slots))
    launch = _launch(group.name, params, variants, _aligned(parts) if vec else "")
    source = cu_file(group, f"{group.reduce} of {list(group.in_shape)} over dims {list(group.dims)}", kernels,
                     launcher(group.name, params, len(variants), launch))
    return generated(group, {f"{group.name}.cu": source}, params, dense(parts.reads_in) | dense(parts.reads_red),
                     [_describe(v) for v in variants])


def reduction_parts(group: ReductionGroup) -> ReductionParts:
    _check(group)
    full = group.reduce in FULL_SHAPE_REDUCTIONS
    at_in = used(group.prologue + group.broadcast_epilogue + (group.epilogue if full else [])) | {group.operand}
    at_reduced = set() if full else used(group.epilogue)
    reads_in = [read(v, group.in_shape) for v in group.inputs if v.name in at_in]
    reads_red = [read(v, group.result_shape, "xr_", "t_") for v in group.inputs if v.name in at_reduced]
    tail = set(group.results()) | {op.out for op in group.epilogue}
    parts = ReductionParts(group, reads_in, reads_red, first={op.out for op in group.prologue},
                           reduced=set() if full else tail,
                           second={op.out for op in group.broadcast_epilogue} | (tail if full else set()))
    for out in group.outputs:
        if out.name not in parts.first | parts.reduced | parts.second:
            raise ValueError(f"{group.name}: output {out.name} is not computed by the group (unsupported)")
    return parts


def _check(group: ReductionGroup) -> None:
    if group.reduce not in ACCUMULATORS and group.reduce not in SCANS:
        raise ValueError(f"{group.name}: reduction {group.reduce} is unsupported")
    if group.size == 0:
        raise ValueError(f"{group.name}: a reduction over an empty range is unsupported")
    if group.reduce in ARG_REDUCTIONS and (group.epilogue or group.broadcast_epilogue):
        raise ValueError(f"{group.name}: ops after {group.reduce} are unsupported")


def _body(parts: ReductionParts) -> list[str]:
    """Accumulate over the team's share of the range, combine the team, then the reduced
    values, their epilogue and stores, and the second pass when one is needed."""
    finish, reduced_names = _finish(parts)
    return (["Acc acc;", "acc.init();", "if (active) {"] + indent(_first_pass(parts)) + ["}",
            "acc = ks_team_reduce<TEAM, SLOTS, ROWS>(acc, lane, slot);", "if (active) {"]
            + indent(finish + _second_pass(parts, reduced_names)) + ["}"])


def _loop(body: list[str], ranged: bool = False, hoisted: list[str] = (), segment: int = 1) -> list[str]:
    """A loop over this lane's share of the reduced range (ranged: of [begin, end), a split
    variant's chunk), with `flat` the element's index. With a segment (_segment) and loads to hoist (a pass
    that reads none of the strided inputs keeps the flat loop), the range is walked a segment at a time, and the
    `hoisted` lines run once per segment, at its first element `seg_flat`."""
    if segment > 1:
        return _over_segments(segment, hoisted, [f"for (int64_t r = seg + lane; r < seg + {segment}LL; r += TEAM) {{",
                                                 "  const int64_t flat = (o * kSize + r) * kInner + i;"]
                              + indent(body) + ["}"])
    head = ("for (int64_t r = begin + lane; r < end; r += TEAM) {" if ranged
            else "for (int64_t r = lane; r < kSize; r += TEAM) {")
    return [head, "  const int64_t flat = (o * kSize + r) * kInner + i;"] + indent(body) + ["}"]


def _over_segments(segment: int, hoisted: list[str], inner: list[str]) -> list[str]:
    """The row a segment at a time: the `hoisted` loads at its first element `seg_flat`, then the `inner` loop."""
    return ([f"for (int64_t seg = 0; seg < kSize; seg += {segment}LL) {{",
             "  const int64_t seg_flat = (o * kSize + seg) * kInner + i;"] + indent(list(hoisted)) + indent(inner)
            + ["}"])


def _pass_loops(parts: ReductionParts, ranged: bool, hoisted: list[str], per_element: list[Read], segment: int,
                compute: list[str], which: set[str], names: dict[str, str]) -> list[str]:
    """A pass's loop over the row: per element, and where the group vectorizes (_vectorizes) also four elements a
    step with float4 loads and stores of its dense operands, the kernel's VEC picking one at compile time."""
    group = parts.group
    element_loads = loads(per_element, "flat", names, {r.value.name for r in per_element})
    scalar = _loop(element_loads + compute + stores(group, names, "flat", which), ranged, hoisted, segment)
    outs = {v.name for v in group.outputs if v.name in which}
    if ranged or not _vectorizes(parts) or not outs and all(r.access.mode != "dense" for r in per_element):
        return scalar
    vector = _vector_loop(parts, hoisted, per_element, segment, compute, which, names)
    return ["if constexpr (VEC == 4) {"] + indent(vector) + ["} else {"] + indent(scalar) + ["}"]


def _vectorizes(parts: ReductionParts) -> bool:
    """Rows (inner 1) of a length, and runs (_segment), that are multiples of 4, with a dense operand: each lane
    then loads 16 bytes at a time. The launcher still takes VEC 4 only where every dense pointer is aligned.
    Scalar loads left level2/21's GroupNorm at 1,346 GB/s on an H100, float4 ones at 2,134 (1,024 threads a row:
    2,718, a copy of the same traffic 2,744; bench/probes/groupnorm_variants.cu)."""
    group, segment = parts.group, _segment(parts)  # (1: no runs)
    dense_reads, stored = _vector_operands(parts)
    return (group.inner == 1 and group.size % 4 == 0 and (segment == 1 or segment % 4 == 0) and bool(dense_reads)
            and all(r.value.dtype in VECTOR_DTYPES for r in dense_reads)
            and all(v.dtype in VECTOR_DTYPES and v.dtype != "bool" for v in stored))


def _vector_operands(parts: ReductionParts) -> tuple[list[Read], list]:
    """(the dense reads, the outputs stored at the operand's shape): what a vector loop moves 16 bytes at a time."""
    dense_reads = [r for r in parts.reads_in if r.access.mode == "dense"]
    return dense_reads, [v for v in parts.group.outputs if v.name in parts.first | parts.second]


def _vector_loop(parts: ReductionParts, hoisted: list[str], per_element: list[Read], segment: int,
                 compute: list[str], which: set[str], names: dict[str, str]) -> list[str]:
    """The lane's elements four at a time: the dense reads' float4 loads, then the four elements (each with its
    `r` and `flat`, as the scalar loop has them), then the float4 stores."""
    group = parts.group
    dense_reads = [r for r in per_element if r.access.mode == "dense"]
    others = [r for r in per_element if r.access.mode != "dense"]
    outs = [v for v in group.outputs if v.name in which]
    step = ["const int64_t flat4 = o * kSize + r4;"] + [vec4_load(r, f"q_{r.value.name}", "(flat4 >> 2)")
                                                         for r in dense_reads]
    step += [f"float4 o4_{v.name};" for v in outs]
    for lane, part in enumerate("xyzw"):
        own = [f"const float {r.var} = {'(float)' if r.is_bool else ''}q_{r.value.name}.{part};" for r in dense_reads]
        body = own + loads(others, "flat", names, {r.value.name for r in others}) + compute
        body += [f"o4_{v.name}.{part} = {names[v.name]};" for v in outs]
        index = [f"const int64_t {var} = {base} + {lane};" for var, base in (("r", "r4"), ("flat", "flat4"))
                 if re.search(rf"\b{var}\b", "\n".join(body))]
        step += ["{"] + indent(index + body) + ["}"]
    step += [vec4_store(v, "(flat4 >> 2)", f"o4_{v.name}") for v in outs]
    if segment > 1:
        return _over_segments(segment, hoisted, [f"for (int64_t r4 = seg + 4 * lane; r4 < seg + {segment}LL; "
                                                 "r4 += 4 * TEAM) {"] + indent(step) + ["}"])
    return ["for (int64_t r4 = 4 * lane; r4 < kSize; r4 += 4 * TEAM) {"] + indent(step) + ["}"]


def _segment(parts: ReductionParts) -> int:
    """The length of the runs of a row's reduced range along which every strided read is constant (GroupNorm's
    per-channel bias and scale: one channel's H x W of its group's row), or 1. Their loads then run once per
    run instead of once per element, with the division of the flat index by each dim's size that each costs:
    instruction work that made level2/21's GroupNorm kernel take 2.7 ms for 3 GiB of traffic on an H100."""
    group, shape = parts.group, parts.group.in_shape
    strided = [r for r in parts.reads_in if r.access.mode == "strided"]
    if group.inner != 1 or not strided:
        return 1
    segment = 1
    for dim in reversed(range(len(shape))):
        if dim not in group.dims or any(r.access.value_shape[dim] != 1 for r in strided):
            break
        segment *= shape[dim]
    return segment


def _split_loads(parts: ReductionParts, ranged: bool, names: dict[str, str],
                 needed: set[str]) -> tuple[list[str], list[Read], int]:
    """(the loads of the reads constant along a segment, at seg_flat; the other reads the pass needs, loaded per
    element; the segment the pass's loop walks by: 1 for a split variant's chunk, or where the pass loads none of
    those reads). `names` learns every read's variable."""
    segment = 1 if ranged else _segment(parts)
    hoist = [r for r in parts.reads_in if segment > 1 and r.access.mode == "strided"]
    hoisted = loads(hoist, "seg_flat", names, needed)
    per_element = [r for r in parts.reads_in if r not in hoist and r.value.name in needed]
    names.update({r.value.name: r.var for r in per_element})
    return hoisted, per_element, segment if hoisted else 1


def loads(reads: list[Read], flat: str, names: dict[str, str], needed: set[str]) -> list[str]:
    """`const float x_<value> = ...;` for each read in `needed`, at `flat`; `names` learns their variables."""
    lines = []
    for r in reads:
        if r.value.name in needed:
            lines.append(f"const float {r.var} = {r.load(flat)};")
            names[r.value.name] = r.var
    return lines


def stores(group: Group, names: dict[str, str], flat: str, which: set[str]) -> list[str]:
    return [store(v, f"p_{v.name}[{flat}]", names[v.name]) for v in group.outputs if v.name in which]


def _first_pass(parts: ReductionParts, ranged: bool = False) -> list[str]:
    """Per element: the prologue as far as the accumulated operand and the values stored here need it (a
    prologue op only the second pass reads is computed there), then the accumulation."""
    group, names = parts.group, {}
    prologue = _needed(group.prologue, {group.operand} | ({o.name for o in group.outputs} & parts.first))
    hoisted, per_element, segment = _split_loads(parts, ranged, names, used(prologue) | {group.operand})
    compute = ops.body_lines(prologue, names, "") + [f"acc.add({names[group.operand]}, r);"]
    return _pass_loops(parts, ranged, hoisted, per_element, segment, compute, parts.first, names)


def _finish(parts: ReductionParts, writer: str = "lane == 0") -> tuple[list[str], dict[str, str]]:
    """The reduced value(s) of this (o, i), written by the thread where `writer` holds; also
    the C variables of the reduced values, which the second pass reads."""
    group = parts.group
    if parts.full:
        return (["const float ks_log_sum = logf(acc.s);"] if group.reduce == "log_softmax" else []), {}
    names = {name: f"v_{name}" for name in group.results()}
    lines = [f"const {c_type} v_{name} = {final};" for name, c_type, final in _finals(group)]
    lines += loads(parts.reads_red, "red", names, used(group.epilogue))
    lines += ops.body_lines(group.epilogue, names, "")
    written = stores(group, names, "red", parts.reduced)
    lines += [f"if ({writer}) {{"] + indent(written) + ["}"] if written else []
    return lines, {k: v for k, v in names.items() if k in parts.reduced}


def _finals(group: ReductionGroup) -> list[tuple[str, str, str]]:
    """(value, C type, expression) of each reduced value the team's accumulator gives."""
    c_type = "int64_t" if group.reduce in ARG_REDUCTIONS else "float"
    finals = [(group.result, c_type, FINAL[group.reduce].format(size=ops.literal(float(group.size))))]
    if group.variance:
        divisor = ops.literal(group.variance_divisor)
        finals.append((group.variance, "float", WELFORD_VARIANCE.format(divisor=divisor)))
    return finals


def _second_pass(parts: ReductionParts, reduced_names: dict[str, str], ranged: bool = False) -> list[str]:
    """Per element again: softmax's normalisation, the broadcast epilogue, in_shape stores;
    the prologue is recomputed as far as these need it."""
    group = parts.group
    stored = [out.name for out in group.outputs if out.name in parts.second]
    if not stored:
        return []
    after = (group.epilogue if parts.full else []) + group.broadcast_epilogue
    operand = {group.operand} if parts.full else set()
    prologue = _needed(group.prologue, used(after) | set(stored) | operand)
    names = dict(reduced_names)
    hoisted, per_element, segment = _split_loads(parts, ranged, names, used(prologue + after) | operand)
    body = ops.body_lines(prologue, names, "")
    if parts.full:
        body.append(f"const float v_{group.result} = {ELEMENT[group.reduce].format(x=names[group.operand])};")
        names[group.result] = f"v_{group.result}"
        body += ops.body_lines(group.epilogue, names, "")
    body += ops.body_lines(group.broadcast_epilogue, names, "")
    return _pass_loops(parts, ranged, hoisted, per_element, segment, body, parts.second, names)


def _needed(op_list, wanted: set[str]) -> list:
    """The ops that compute `wanted` (and what those read), in their order."""
    wanted, kept = set(wanted), []
    for op in reversed(op_list):
        if op.out in wanted:
            kept.append(op)
            wanted |= set(op.tensor_args())
    return kept[::-1]


# --- few long lines, split across blocks ---------------------------------------------------

def _split_kernels(parts: ReductionParts, params: list[Param], slots: int) -> str:
    """text/split_kernels.cuh for this group: pass 1 folds chunks, pass 2 merges, finishes, second pass."""
    group = parts.group
    chunks = _split_chunks(group, slots)
    chunk = -(-group.size // chunks)
    finish, reduced_names = _finish(parts, writer="lane == 0 && chunk == 0")
    second = _second_pass(parts, reduced_names, ranged=True)
    return template("split_kernels.cuh").substitute(
        name=group.name, params=signature(params, True), outer=group.outer, size=group.size, inner=group.inner,
        chunks=chunks, chunk=chunk, finish_chunks=chunks if second else 1,
        first="\n".join(indent(_first_pass(parts, ranged=True), 4)), finish="\n".join(indent(finish + second, 4)))


def _split_chunks(group: ReductionGroup, slots: int) -> int:
    """Chunks per line: about SPLIT_BLOCKS blocks of `slots` lines in all, none shorter than the minimum chunk."""
    blocks_per_chunk = -(-group.outer * group.inner // slots)
    shortest = SPLIT_MIN_CHUNK if group.inner == 1 else COLUMN_SPLIT_MIN_CHUNK
    return max(1, min(-(-SPLIT_BLOCKS // blocks_per_chunk), group.size // shortest))


def _splits(group: ReductionGroup) -> bool:
    """Few long rows: one block per row would leave most of the GPU idle."""
    return group.inner == 1 and 1 <= group.outer <= SPLIT_MAX_LINES and group.size >= SPLIT_MIN_SIZE


def _splits_columns(group: ReductionGroup) -> bool:
    """Few long columns: a block per 32 of them would leave most of the GPU idle."""
    return (group.inner > 1 and group.outer * group.inner <= COLUMN_SPLIT_MAX_LINES
            and group.size >= COLUMN_SPLIT_MIN_SIZE)


# --- launch variants -----------------------------------------------------------------------

def _variants(group: ReductionGroup) -> list:
    """Rows (inner == 1) or columns; the likely best first (warp per row for short rows,
    several threads per column when there are few columns). Few long rows are split across
    blocks, with one whole-row variant kept as the fallback."""
    if _splits(group):
        return SPLIT_VARIANTS + [ROW_VARIANTS[2]]
    if group.inner == 1:
        if group.size >= LONG_ROW:
            return [LONG_ROW_VARIANT] + ROW_VARIANTS
        warp_first = group.size <= 1024
        return [ROW_VARIANTS[3]] + ROW_VARIANTS[:3] + ROW_VARIANTS[4:] if warp_first else ROW_VARIANTS
    few_columns = group.outer * group.inner < 16384
    columns = [COLUMN_VARIANTS[2]] + COLUMN_VARIANTS[:2] + COLUMN_VARIANTS[3:] if few_columns else COLUMN_VARIANTS
    return COLUMN_SPLIT_VARIANTS + columns if _splits_columns(group) else columns


def _describe(variant) -> str:
    if isinstance(variant, Split) and variant.rows:
        return f"rows split across blocks, {variant.team} threads per chunk"
    if isinstance(variant, Split):
        return (f"columns split across blocks, {variant.team} threads per column's chunk, "
                f"{variant.slots} columns per block")
    team, slots, rows = variant
    if rows:
        return f"{team} threads per row" if slots == 1 else f"a warp per row, {slots} rows per block"
    return f"{team} thread{'s' if team > 1 else ''} per reduced value, {slots} values per block"


def _aligned(parts: ReductionParts) -> str:
    """The launcher's test that every pointer the vector loops read or write 16 bytes at a time is aligned."""
    dense_reads, stored = _vector_operands(parts)
    pointers = [r.pointer for r in dense_reads] + [f"p_{v.name}" for v in stored]
    return " && ".join(f"ks_aligned({p})" for p in pointers)


def _launch(name: str, params: list[Param], variants: list, aligned: str = "") -> list[str]:
    """The switch over the variants; with `aligned` (a vectorizing group), each whole-row variant launches its
    VEC 4 kernel where the test holds and its VEC 1 kernel where it does not (a view with an odd offset)."""
    args = call(params)
    cases = []
    for v in variants:
        if isinstance(v, Split):  # two kernels, a block per chunk of SLOTS lines
            kernel = f"<{v.team}, {v.slots}, {'true' if v.rows else 'false'}>"
            lines = f"((kSlots + {v.slots - 1}) / {v.slots})"
            cases.append([f"{name}_split_partial{kernel}<<<(unsigned)({lines} * kChunks), {v.team * v.slots}, 0, "
                          f"stream>>>({args});",
                          f"{name}_split_finish{kernel}<<<(unsigned)({lines} * kFinishChunks), {v.team * v.slots}, "
                          f"0, stream>>>({args});"])
            continue
        team, slots, rows = v
        kernel = f"{name}_reduce<{team}, {slots}, {'true' if rows else 'false'}"
        if not aligned:
            cases.append([slot_launch(kernel + ">", params, team, slots)])
            continue
        cases.append([f"if ({aligned}) {slot_launch(kernel + ', 4>', params, team, slots)}",
                      f"else {slot_launch(kernel + ', 1>', params, team, slots)}"])
    return switch(cases)
