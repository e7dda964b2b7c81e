"""Reductions and scans: one loop over the lines of the operand viewed as [outer, size, inner],
the reduced range walked in order inside, the pointwise work around it fused in."""

from __future__ import annotations

from math import prod

from kernelsmith.compiler.cpu.common import (as_float, base_line, body_lines, broadcasts, loads, row_loop, run_read,
                                             store, variants)
from kernelsmith.compiler.cstyle import ops
from kernelsmith.compiler.cstyle.access import access_for
from kernelsmith.compiler.ir import FULL_SHAPE_REDUCTIONS, ReductionGroup

INIT = {"sum": "0.0f", "mean": "0.0f", "norm2": "0.0f", "amax": "-INFINITY", "amin": "INFINITY",
        "argmax": "-INFINITY", "argmin": "INFINITY"}
RESULT = {"sum": "acc", "mean": "acc / {size}.0f", "norm2": "sqrtf(acc)", "amax": "acc", "amin": "acc",
          "argmax": "best", "argmin": "best", "logsumexp": "(m + logf(s))", "welford": "(k + mean)"}
WELFORD_VARIANCE = "(m2 / {divisor})"  # a welford's second reduced value
# Welford's update of the mean and M2 of x - k, k the line's first element (x - k stays small where x is far from
# 0, so they keep their digits); 1 / (r + 1) does not depend on the running values, so it is off their chain
WELFORD_STEP = ("{{ const float x = {x}; if (r == 0) k = x; const float z = x - k, d = z - mean; "
                "mean += d * (1.0f / (float)(r + 1)); m2 += d * (z - mean); }}")


# Along a contiguous row (inner == 1) the accumulation runs as `#pragma omp simd` reductions, one vector lane
# per partial: a scalar chain of dependent adds does one element every few cycles, far below what the memory
# gives. Softmax's online update and Welford's are chains by nature, so such rows take two passes instead
# (the max, then the sum of exponentials; the mean, then the centred squares), while the row is in cache.
SIMD_REDUCTIONS = {"sum": "+", "mean": "+", "norm2": "+", "amax": "max", "amin": "min"}
SOFTMAX_LIKE = ("logsumexp", "softmax", "safe_softmax", "log_softmax")
TWO_PASS_MAX_ROW = 16384  # elements: a row of floats up to 64 KB stays in L2 for its second pass


# Down columns (inner > 1) a line's loads are `inner` elements apart, each on a cache line of its own: summing
# a [2048, 2048] weight over its rows so took 13.5 ms on the 2-core CI machine, where torch took 0.34 ms. So a
# block of COLUMN_BLOCK adjacent columns is accumulated together, row by row, its inner loop contiguous (simd).
COLUMN_BLOCK = 64
MIN_BLOCKED_COLUMNS = 16


def reduction(group: ReductionGroup) -> str:
    element = _element(group)
    if _column_blocked(group):
        return variants(group, _column_block_loop(group, element))
    first = _row_prologue(group, element)
    lines = _line_bases(group) + [f"    {line}" for line in _init(group.reduce)] + _accumulation(group, first)
    finished, reduced_names = _finish_reduced(group)
    lines += finished + _second_pass(group, element, reduced_names)
    return variants(group, row_loop(group, lines))


def _accumulation(group: ReductionGroup, first: tuple[list[str], str]) -> list[str]:
    """The loop(s) over a line that leave the accumulator's variables holding the reduced value."""
    body, x = first
    if _simd_row(group):
        if group.reduce in SIMD_REDUCTIONS:
            clause = f"reduction({SIMD_REDUCTIONS[group.reduce]}:acc)"
            return _line_loop(group, body + [f"    {_accumulate(group.reduce, x)}"], clause)
        if group.reduce in SOFTMAX_LIKE:
            return (_line_loop(group, body + [f"    m = fmaxf(m, {x});"], "reduction(max:m)")
                    + _line_loop(group, body + [_exp_sum(group, x)], "reduction(+:s)")
                    + [f"    if (m == -INFINITY) s = {group.size}.0f;"])  # every x == m: exp(0) each, not NaN
        if group.reduce == "welford" and group.size <= TWO_PASS_MAX_ROW:
            return _two_pass_moments(group, body, x)
    return _line_loop(group, body + [f"    {_accumulate(group.reduce, x)}"])


def _exp_sum(group: ReductionGroup, x: str) -> str:
    """The sum pass of a softmax-like row; a softmax's exponentials also go to its scratch output, so that the
    output's pass reads them instead of computing each one again (the exponential was a fifth of the row's
    time on the CPU, bench/cpu_kernels.py)."""
    scratch = _softmax_scratch(group)
    if scratch is None:
        return f"    s += ks_expf({x} - m);"
    return f"    {{ const float e = ks_expf({x} - m); s += e; {scratch} = e; }}"


def _softmax_scratch(group: ReductionGroup) -> str | None:
    """The element of a float32 output of a softmax row that holds its exponentials between the sum pass and
    the output's pass (which reads each before it stores there); None where there is none."""
    if group.reduce not in ("softmax", "safe_softmax") or not _simd_row(group):
        return None
    j = next((j for j, o in enumerate(group.outputs) if o.dtype == "float32"), None)
    return None if j is None else f"out{j}[{_element(group)}]"


def _two_pass_moments(group: ReductionGroup, body: list[str], x: str) -> list[str]:
    """Welford's results (k + mean, m2) in two simd passes over x - k, k the line's first element as in
    WELFORD_STEP (x - k stays small where x is far from 0): the mean, then the squares about it."""
    first = ["    { const int64_t r = 0;"] + [f"  {ln}" for ln in body] + [f"      k = {x};", "    }"]
    return (first + _line_loop(group, body + [f"    mean += {x} - k;"], "reduction(+:mean)")
            + [f"    mean /= {group.size}.0f;"]
            + _line_loop(group, body + [f"    {{ const float d = ({x} - k) - mean; m2 += d * d; }}"],
                         "reduction(+:m2)"))


def _simd_row(group: ReductionGroup) -> bool:
    """A contiguous row of float32 inputs only. A bool input (a mask) made the simd loops of a masked row
    softmax 2.2x slower than the scalar online one on this machine (bench/cpu_kernels.py): ks_expf of each
    masked -inf went through a denormal. Without it (text/header.h) they are even with the scalar loop, not
    faster, so masked rows keep it; 16-bit loads convert element by element and keep it too."""
    return group.inner == 1 and all(v.dtype == "float32" for v in group.inputs)


def _line_loop(group: ReductionGroup, body: list[str], simd: str | None = None) -> list[str]:
    """One loop over the line's elements around `body` (lines at the row's indentation); a `#pragma omp simd`
    loop when `simd` is given ("" for none of its clauses)."""
    pragma = [f"    #pragma omp simd {simd}".rstrip()] if simd is not None else []
    return pragma + [f"    for (int64_t r = 0; r < {group.size}LL; ++r) {{"] + [f"  {ln}" for ln in body] + ["    }"]


def scan(group: ReductionGroup) -> str:
    """A prefix sum per line, in order, with the prologue and the epilogue fused: one pass."""
    element = _element(group)
    names: dict[str, str] = {}
    first, x = _row_prologue(group, element, names)
    names[group.result] = f"v_{group.result}"
    after = body_lines(group.epilogue, names)
    stores = ["    " + store(o, f"out{j}[{element}]", names[o.name]) for j, o in enumerate(group.outputs)]
    body = first + [f"    acc += {x};", f"    const float v_{group.result} = acc;"] + after + stores
    return variants(group, row_loop(group, _line_bases(group) + ["    float acc = 0.0f;"] + _line_loop(group, body)))


def _element(group: ReductionGroup) -> str:
    """The flat index of element r of line (o, i)."""
    return f"((o * {group.size}LL + r) * {group.inner}LL + i)"


def _row_prologue(group: ReductionGroup, element: str, names: dict[str, str] | None = None) -> tuple[list[str], str]:
    """Loads of the in_shape inputs and the prologue ops at one element; returns (lines, operand expr).
    `names` receives the C variable of each loaded input and prologue value."""
    names = {} if names is None else names
    lines = _line_loads(group, element, names) + body_lines(group.prologue, names)
    return lines, names.get(group.operand, group.operand)


def _row_dims(group: ReductionGroup) -> int:
    """How many trailing dims of the operand one line covers where lines are contiguous rows (inner == 1);
    0 where they are not."""
    shape = tuple(group.in_shape)
    if group.inner != 1 or not shape:
        return 0
    return next((k for k in range(1, len(shape) + 1) if prod(shape[-k:]) == group.size), 0)


def _row_read(group: ReductionGroup, i: int, split: int) -> str | None:
    """How input i is read along a row: "contiguous" or "broadcast" from its row's base b<i> (a weight of the
    row's length, a per-row scale), or None where the flat element's offset must be computed."""
    value = group.inputs[i]
    if not split or access_for(value.shape, value.contiguous, tuple(group.in_shape)).mode != "strided":
        return None
    read = run_read(value, tuple(group.in_shape), split)
    return read if read in ("contiguous", "broadcast") else None


def _line_bases(group: ReductionGroup) -> list[str]:
    """The row's base offset into each input read from one (_row_read), once per line: a flat index's offset
    into a broadcast input is a division and a modulo per element, which no loop vectorises."""
    split, shape = _row_dims(group), tuple(group.in_shape)
    return [base_line(i, v, shape, split, "o").rstrip("\n") for i, v in enumerate(group.inputs)
            if broadcasts(v, shape) and _row_read(group, i, split)]


def _line_loads(group: ReductionGroup, element: str, names: dict[str, str]) -> list[str]:
    """Loads of the in_shape inputs at element r of the line: from the row's base where _line_bases gave one."""
    split, shape = _row_dims(group), tuple(group.in_shape)
    lines = []
    for i, value in enumerate(group.inputs):
        if not broadcasts(value, shape):
            continue
        read = _row_read(group, i, split)
        if read is None:
            lines += loads(group, shape, element, names, only=[value.name])
            continue
        where = f"b{i} + r" if read == "contiguous" else f"b{i}"
        lines.append(f"    const float a{i} = {as_float(value, f'in{i}[{where}]')};")
        names[value.name] = f"a{i}"
    return lines


def _init(reduce: str) -> list[str]:
    if reduce in ("logsumexp", "softmax", "safe_softmax", "log_softmax"):
        return ["float m = -INFINITY, s = 0.0f;"]
    if reduce == "welford":
        return ["float k = 0.0f, mean = 0.0f, m2 = 0.0f;"]
    lines = [f"float acc = {INIT[reduce]};"]
    return lines + ["int64_t best = 0;"] if reduce in ("argmax", "argmin") else lines


def _accumulate(reduce: str, x: str) -> str:
    if reduce in ("sum", "mean"):
        return f"acc += {x};"
    if reduce == "norm2":
        return f"acc += {x} * {x};"
    if reduce in ("amax", "amin"):
        return f"acc = {'fmaxf' if reduce == 'amax' else 'fminf'}(acc, {x});"
    if reduce == "welford":
        return WELFORD_STEP.format(x=x)
    if reduce in ("argmax", "argmin"):
        return f"{{ const float x = {x}; if (x {'>' if reduce == 'argmax' else '<'} acc) {{ acc = x; best = r; }} }}"
    # x == m counts exp(0) without computing exp(-inf - -inf) = NaN on a row that starts with -inf (attention's
    # masked scores); the first finite x then scales that count by exp(-inf) = 0 (the CUDA Acc::join's rule)
    return (f"{{ const float x = {x}; if (x > m) {{ s = s * expf(m - x) + 1.0f; m = x; }} "
            f"else {{ s += x == m ? 1.0f : expf(x - m); }} }}")


def _finish_reduced(group: ReductionGroup) -> tuple[list[str], dict[str, str]]:
    """The reduced value, its epilogue, and the stores of reduced outputs at flat index row;
    also the C variables of the reduced values, which the second pass reads."""
    if group.reduce in FULL_SHAPE_REDUCTIONS:
        return [], {}
    names = {name: f"v_{name}" for name in group.results()}
    lines = [f"    const {ctype} v_{name} = {result};" for name, ctype, result in _finals(group)]
    used = {a for op in group.epilogue for a in op.tensor_args()}
    reduced_inputs = [v.name for v in group.inputs if v.name in used and broadcasts(v, group.result_shape)]
    lines += loads(group, group.result_shape, "row", names, only=reduced_inputs)
    lines += body_lines(group.epilogue, names)
    group_reduced = _reduced_values(group)
    lines += ["    " + store(o, f"out{j}[row]", names[o.name]) for j, o in enumerate(group.outputs)
              if o.name in group_reduced]
    return lines, {k: v for k, v in names.items() if k in group_reduced}


def _reduced_values(group: ReductionGroup) -> set[str]:
    """The values a (non-full-shape) reduction computes at the reduced shape: its results and their epilogue's."""
    return set(group.results()) | {op.out for op in group.epilogue}


def _finals(group: ReductionGroup) -> list[tuple[str, str, str]]:
    """(value, C type, expression) of each reduced value the accumulator gives."""
    ctype = "int64_t" if group.reduce in ("argmax", "argmin") else "float"
    finals = [(group.result, ctype, RESULT[group.reduce].format(size=group.size))]
    if group.variance:
        divisor = ops.literal(group.variance_divisor)
        finals.append((group.variance, "float", WELFORD_VARIANCE.format(divisor=divisor)))
    return finals


def _second_pass(group: ReductionGroup, element: str, reduced_names: dict[str, str]) -> list[str]:
    """Per element again: softmax's normalisation, or the broadcast epilogue, and in_shape stores."""
    full_outputs = [(j, o) for j, o in enumerate(group.outputs) if o.name not in reduced_names]
    if not full_outputs:
        return []
    names = dict(reduced_names)
    lines = _line_loads(group, element, names) + body_lines(group.prologue, names)
    if group.reduce in FULL_SHAPE_REDUCTIONS:
        x = names.get(group.operand, group.operand)
        exp = "ks_expf" if _simd_row(group) else "expf"  # libm's in a scalar loop: measured faster there
        e = _softmax_scratch(group) or f"{exp}({x} - m)"
        value = {"softmax": f"({e} / s)", "safe_softmax": f"(m == -INFINITY ? 0.0f : {e} / s)",
                 "log_softmax": f"({x} - m - logf(s))"}[group.reduce]
        lines.append(f"    const float v_{group.result} = {value};")
        names[group.result] = f"v_{group.result}"
        lines += body_lines(group.epilogue, names)
    lines += body_lines(group.broadcast_epilogue, names)
    lines += ["    " + store(o, f"out{j}[{element}]", names[o.name]) for j, o in full_outputs]
    return _line_loop(group, lines, "" if _simd_row(group) else None)  # simd: contiguous stores, no chain


def _column_blocked(group: ReductionGroup) -> bool:
    """An elementwise-combined reduction of float32 inputs down many columns, every output at the reduced
    shape (no pass after it)."""
    if group.inner < MIN_BLOCKED_COLUMNS or group.reduce not in SIMD_REDUCTIONS:
        return False
    if not all(v.dtype == "float32" for v in group.inputs):
        return False
    return all(o.name in _reduced_values(group) for o in group.outputs)


def _column_block_loop(group: ReductionGroup, element: str):
    """A loop_for over blocks of COLUMN_BLOCK columns of one o: each row's slice of them accumulated at once
    (`accs[j]`, j the column in the block), then each column's finish as in the one-line loop."""
    body, x = _row_prologue(group, element)
    finished, _ = _finish_reduced(group)
    blocks, inner = -(-group.inner // COLUMN_BLOCK), group.inner
    accumulate = _accumulate(group.reduce, x)

    def loop(pragma):
        lines = [f"  {pragma}", f"  for (int64_t blk = 0; blk < {group.outer * blocks}LL; ++blk) {{",
                 f"    const int64_t o = blk / {blocks}LL, i0 = blk % {blocks}LL * {COLUMN_BLOCK}LL;",
                 f"    const int64_t width = {inner}LL - i0 < {COLUMN_BLOCK}LL ? {inner}LL - i0 : {COLUMN_BLOCK}LL;",
                 f"    float accs[{COLUMN_BLOCK}];",
                 f"    for (int64_t j = 0; j < {COLUMN_BLOCK}LL; ++j) accs[j] = {INIT[group.reduce]};",
                 f"    for (int64_t r = 0; r < {group.size}LL; ++r) {{", "      #pragma omp simd",
                 "      for (int64_t j = 0; j < width; ++j) {", "        const int64_t i = i0 + j;"]
        lines += [f"    {ln}" for ln in body]
        lines += [f"        float acc = accs[j]; {accumulate} accs[j] = acc;", "      }", "    }",
                  "    for (int64_t j = 0; j < width; ++j) {",
                  f"      const int64_t i = i0 + j, row = o * {inner}LL + i;", "      const float acc = accs[j];"]
        return "\n".join(lines + [f"  {ln}" for ln in finished] + ["    }", "  }"])
    return loop
