"""Pointwise groups as rows of the index space's innermost run: the run is a vectorised (`omp simd`) loop
over contiguous memory, the rows are shared among threads. A flat loop that divides the index by each
dimension per element (the broadcast of a bias) cannot be vectorised, and ran at half eager's speed.

The inner run is the longest suffix of dimensions along which every input is read either contiguously
(dense, or contiguous with the same trailing shape) or not at all (broadcast: the same element for the
whole run). An input that fits neither is read with its runtime stride along the last dimension only."""

from __future__ import annotations

from math import prod

from kernelsmith.compiler.cpu.common import (as_float, base_line, body_lines, call_arguments, dispatched, params,
                                             run_read, store)
from kernelsmith.compiler.cstyle.access import access_for
from kernelsmith.compiler.ir import PointwiseGroup, Value

# (name the search shows, how the rows are shared): torch's own thread pool, an OpenMP loop, one thread
SCHEDULES = [("rows over torch's threads (at::parallel_for), inner run vectorised", "torch"),
             ("rows over OpenMP threads (static), inner run vectorised", "omp"),
             ("one thread, inner run vectorised", "serial")]
GRAIN_ELEMENTS = 32768  # a thread's smallest share: below it, waking threads costs more than it saves
MIN_RUN = 1024  # elements in a vectorised run, where the shape allows: longer runs amortise the row's set-up


def pointwise(group: PointwiseGroup) -> tuple[str, list[str]]:
    """The kernel's C++ and its variants' names."""
    shape = tuple(group.shape) or (1,)
    split = inner_dims(group, shape)
    rows, inner = prod(shape[:-split]), prod(shape[-split:])
    body = _row_function(group, shape, split, inner)
    return body + _variants(group, rows, inner), [name for name, _ in SCHEDULES]


def inner_dims(group: PointwiseGroup, shape: tuple[int, ...]) -> int:
    """How many trailing dimensions the vectorised run covers: the fewest that make a run of MIN_RUN elements,
    so that rows remain to share among threads, within the most the inputs allow (at least the last one).
    A suffix the inputs allow stays allowed when shortened, so the choice is any length up to that most."""
    most = next((s for s in range(len(shape), 1, -1)
                 if all(run_read(v, shape, s) != "strided" for v in group.inputs)), 1)
    return next((s for s in range(1, most + 1) if prod(shape[-s:]) >= MIN_RUN), most)


def _row_function(group: PointwiseGroup, shape: tuple[int, ...], split: int, inner: int) -> str:
    """`<name>_rows(r0, r1, ...)`: rows r0..r1 of the index space, each one vectorised run."""
    names: dict[str, str] = {}
    bases = [base_line(i, v, shape, split, "r") for i, v in enumerate(group.inputs)]
    loads = [_load_line(i, v, shape, split, inner) for i, v in enumerate(group.inputs)]
    for i, value in enumerate(group.inputs):
        names[value.name] = f"a{i}"
    lines = loads + body_lines(group.body, names, "      ")
    lines += ["      " + store(o, f"out{j}[r * {inner}LL + c]", names[o.name]) for j, o in enumerate(group.outputs)]
    return (f"static inline void {group.name}_rows(int64_t r0, int64_t r1, {params(group)}) {{\n"
            f"  for (int64_t r = r0; r < r1; ++r) {{\n" + "".join(b for b in bases if b) +
            f"    #pragma omp simd\n    for (int64_t c = 0; c < {inner}LL; ++c) {{\n" + "\n".join(lines) +
            "\n    }\n  }\n}\n\n")


def _load_line(i: int, value: Value, shape: tuple[int, ...], split: int, inner: int) -> str:
    access = access_for(value.shape, value.contiguous, shape)
    where = {"dense": f"r * {inner}LL + c", "scalar": "0"}.get(access.mode)
    if where is None:
        read = run_read(value, shape, split)
        where = {"broadcast": f"b{i}", "contiguous": f"b{i} + c"}.get(read, f"b{i} + c * st{i}.s[{len(shape) - 1}]")
    return f"      const float a{i} = {as_float(value, f'in{i}[{where}]')};"


def _variants(group: PointwiseGroup, rows: int, inner: int) -> str:
    """One function per schedule and a dispatcher on config (the search tries each)."""
    name, args = group.name, call_arguments(group)
    grain = max(1, GRAIN_ELEMENTS // inner)
    share = {
        "torch": f"  at::parallel_for(0, {rows}LL, {grain}, [&](int64_t r0, int64_t r1) {{ {name}_rows(r0, r1, {args}); }});",
        "omp": f"  #pragma omp parallel for schedule(static)\n  for (int64_t r = 0; r < {rows}LL; ++r) {name}_rows(r, r + 1, {args});",
        "serial": f"  {name}_rows(0, {rows}LL, {args});"}
    return dispatched(group, [share[kind] for _, kind in SCHEDULES])
