"""Scan kernels (cumsum): a prefix sum along one dim in one pass, its prologue and epilogue
fused. Rows (the dim is innermost) are scanned by a team in tiles (text/block_scan.cuh,
text/scan_rows.cuh); otherwise one thread walks each line in order, so neighbouring threads
read neighbouring addresses (text/scan_columns.cuh)."""

from __future__ import annotations

from kernelsmith.compiler.cstyle import ops
from kernelsmith.compiler.cuda.binding import generated
from kernelsmith.compiler.cuda.common import (Param, cu_file, dense, fixed, indent, input_params, launcher,
                                              line_constants, output_params, signature, slot_launch, stride_params,
                                              switch, template, used)
from kernelsmith.compiler.cuda.reduce import ReductionParts, loads, reduction_parts, stores
from kernelsmith.compiler.ir import Generated, ReductionGroup

# (TEAM, SLOTS, ROWS): ROWS teams scan one row together in tiles; otherwise one thread per line
ROW_VARIANTS = [(1024, 1, True), (512, 1, True), (256, 1, True), (32, 8, True), (1, 256, False)]
COLUMN_VARIANTS = [(1, 256, False), (1, 128, False), (1, 64, False)]


def scan(group: ReductionGroup) -> Generated:
    """A prefix sum along one dim, with its prologue and epilogue fused, in one pass."""
    parts = reduction_parts(group)
    params = input_params(group) + stride_params(parts.reads_in) + output_params(group)
    variants = _variants(group)
    element, finish = _element(parts)
    fields = dict(name=group.name, params=signature(params, True), outer=group.outer, size=group.size,
                  inner=group.inner, element="\n".join(indent(element, 6)), finish="\n".join(indent(finish, 8)))
    kernels = [line_constants(group), template("scan_columns.cuh").substitute(fields)]
    if group.inner == 1:
        kernels += [fixed("block_scan.cuh"), template("scan_rows.cuh").substitute(fields)]
    launch = _launch(group.name, params, variants)
    source = cu_file(group, f"{group.reduce} of {list(group.in_shape)} along dim {group.dims[0]}", kernels,
                     launcher(group.name, params, len(variants), launch))
    return generated(group, {f"{group.name}.cu": source}, params, dense(parts.reads_in),
                     [_describe(v) for v in variants])


def _element(parts: ReductionParts) -> tuple[list[str], list[str]]:
    """Lines that load one element and run the prologue into ks_x; lines that, given ks_prefix,
    run the epilogue and store every output of the element."""
    group, names = parts.group, {}
    after = group.epilogue
    body = loads(parts.reads_in, "flat", names, used(group.prologue + after) | {group.operand})
    body += ops.body_lines(group.prologue, names, "")
    body.append(f"const float ks_x = {names[group.operand]};")
    finish = [f"const float v_{group.result} = ks_prefix;"]
    names[group.result] = f"v_{group.result}"
    finish += ops.body_lines(after, names, "")
    return body, finish + stores(group, names, "flat", parts.first | parts.second)


def _variants(group: ReductionGroup) -> list[tuple[int, int, bool]]:
    """Rows (inner == 1): a warp per row first when rows are short; columns otherwise."""
    if group.inner > 1:
        return COLUMN_VARIANTS
    if group.size <= 1024:
        return [ROW_VARIANTS[3]] + ROW_VARIANTS[:3] + ROW_VARIANTS[4:]
    return ROW_VARIANTS


def _describe(variant: tuple[int, int, bool]) -> str:
    team, slots, rows = variant
    if not rows:
        return f"a thread per line, {slots} lines per block"
    return f"{team} threads per row, in tiles of {team}" if slots == 1 else f"a warp per row, {slots} rows per block"


def _launch(name: str, params: list[Param], variants: list[tuple[int, int, bool]]) -> list[str]:
    """`switch (config)`: variant i launches its kernel with (team, slots) lines of team threads per block."""
    kernels = [f"{name}_scan_rows<{team}, {slots}>" if rows else f"{name}_scan_columns<{slots}>"
               for team, slots, rows in variants]
    return switch([[slot_launch(kernel, params, team, slots)] for kernel, (team, slots, _) in zip(kernels, variants)])
