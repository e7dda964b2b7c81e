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

# (TEAM, SLOTS, ROWS, ITEMS): ROWS teams scan one row together in tiles of TEAM * ITEMS, ITEMS consecutive
# elements a thread; otherwise one thread per line
ROW_VARIANTS = [(1024, 1, True, 1), (512, 1, True, 1), (256, 1, True, 1), (32, 8, True, 1), (1, 256, False, 1)]
COLUMN_VARIANTS = [(1, 256, False, 1), (1, 128, False, 1), (1, 64, False, 1)]
# for rows longer than a tile: a barrier and a block-wide scan each TEAM * ITEMS elements instead of each TEAM.
# After the others, so that the default stays the measured one until these are timed on a GPU.
ITEMS_VARIANTS = [(256, 1, True, 8), (512, 1, True, 4), (128, 1, True, 16)]


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
    if any(items > 1 for *_, items in variants):
        kernels.append(template("scan_rows_items.cuh").substitute(fields))
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


def _variants(group: ReductionGroup) -> list[tuple[int, int, bool, int]]:
    """Rows (inner == 1): a warp per row first when rows are short, several items a thread as well when they
    are longer than a tile; columns otherwise."""
    if group.inner > 1:
        return COLUMN_VARIANTS
    if group.size <= 1024:
        return [ROW_VARIANTS[3]] + ROW_VARIANTS[:3] + ROW_VARIANTS[4:]
    return ROW_VARIANTS + ITEMS_VARIANTS


def _describe(variant: tuple[int, int, bool, int]) -> str:
    team, slots, rows, items = variant
    if not rows:
        return f"a thread per line, {slots} lines per block"
    if items > 1:
        return f"{team} threads per row, {items} consecutive elements a thread, in tiles of {team * items}"
    return f"{team} threads per row, in tiles of {team}" if slots == 1 else f"a warp per row, {slots} rows per block"


def _launch(name: str, params: list[Param], variants: list[tuple[int, int, bool, int]]) -> list[str]:
    """`switch (config)`: variant i launches its kernel with (team, slots) lines of team threads per block."""
    return switch([[slot_launch(_kernel(name, variant), params, variant[0], variant[1])] for variant in variants])


def _kernel(name: str, variant: tuple[int, int, bool, int]) -> str:
    team, slots, rows, items = variant
    if not rows:
        return f"{name}_scan_columns<{slots}>"
    return f"{name}_scan_rows_items<{team}, {items}>" if items > 1 else f"{name}_scan_rows<{team}, {slots}>"
