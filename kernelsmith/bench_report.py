"""The report of `kernelsmith bench`: numbers per level in the shape of the CUDA Agent paper's Table 1.

The bench gives one row per (task, run). `summarize` groups the rows by level (level1, level2, ...,
"" for tasks outside a level folder) and over all of them ("overall"), and for each group computes:

- ``n``: the rows that count, those whose status is "done" (a verified kernel) or "failed" (the
  session ran and ended without one). Rows with status "error" (an infrastructure error: the
  sandbox, the API, ...) are counted in ``errors``; "pending" and any other status in ``not_run``.
  Neither is part of ``n`` nor of any rate below, so check both are 0 before comparing with a paper.
- ``correct``: the counted rows whose ``correct`` is true; ``pass_rate`` = correct / n.
- ``faster_than_eager_rate`` = (rows that are correct AND have ``speedup_vs_eager`` > 1.0) / n, and
  ``faster_than_compile_rate`` the same with ``speedup_vs_compile``. A speed-up strictly above 1.0
  counts as faster, with no noise margin (unlike the training reward, which asks for more than 5%).
  The denominator is n, so failed tasks count as not faster, as in the paper. ``faster_than_eager``
  and ``faster_than_compile`` are the counts behind the rates.
- ``geomean_speedup_vs_eager`` / ``geomean_speedup_vs_compile``: the geometric mean,
  exp(mean(log s)), of the speed-ups of the correct rows only (as in the CUDA Agent paper), over
  those that have that speed-up as a finite number > 0; None when there is none. Failed rows are
  left out, not counted as 0 or 1, so this number reads together with the pass rate.
- ``tasks``: distinct tasks among the counted rows. With several runs per task every run is its own
  row: the rates are means over runs, not best-of-runs.
- ``median_wall_s``: the median of ``wall_s`` over the counted rows (None when n = 0).
- ``total_cost_usd``: the sum of ``cost_usd`` over all rows of the group, errors included (money spent).
- ``flagged``: counted rows whose task has lint flags (``lint_flags`` not empty: degenerate or
  launch-bound tasks whose speed-ups mean little); the flags are listed in the per-task table.

Rates are fractions 0..1, None when n = 0. `markdown` renders them as percentages.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from pathlib import Path
from typing import Any, Iterable

COUNTED = ("done", "failed")
OVERALL = "overall"
SPEEDUPS = (("eager", "speedup_vs_eager"), ("compile", "speedup_vs_compile"))
METHOD_KEYS = (("backend", "backend"), ("model", "model"), ("device", "device"), ("gpu", "GPU"),
               ("torch", "torch"), ("max_turns", "max turns"), ("runs", "runs per task"), ("date", "date"))
ESSENTIAL = ("backend", "model", "device", "torch", "max_turns", "runs", "date")


# --- numbers ---------------------------------------------------------------------------

def natural_key(text: str) -> list:
    """Sort key that puts level2 before level10 and 2_Foo before 10_Bar."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(text))]


def row_sort_key(row: dict) -> tuple:
    return natural_key(row.get("level", "")), natural_key(row.get("task", "")), row.get("run", 0)


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the finite positive values; None when there is none."""
    logs = [math.log(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    return math.exp(math.fsum(logs) / len(logs)) if logs else None


def _faster(row: dict, key: str) -> bool:
    value = row.get(key)
    return bool(row.get("correct")) and value is not None and value > 1.0


def _rate(count: int, n: int) -> float | None:
    return count / n if n else None


def summarize_group(rows: list[dict]) -> dict[str, Any]:
    """The numbers of one level (or of all rows), as defined in the module docstring."""
    counted = [r for r in rows if r.get("status") in COUNTED]
    correct = [r for r in counted if r.get("correct")]
    n = len(counted)
    out: dict[str, Any] = {"n": n, "tasks": len({r.get("task") for r in counted}), "correct": len(correct),
                           "pass_rate": _rate(len(correct), n)}
    for name, key in SPEEDUPS:
        faster = sum(_faster(r, key) for r in counted)
        out[f"faster_than_{name}"] = faster
        out[f"faster_than_{name}_rate"] = _rate(faster, n)
    for name, key in SPEEDUPS:
        out[f"geomean_speedup_vs_{name}"] = geomean(r.get(key) for r in correct)
    walls = [float(r.get("wall_s") or 0.0) for r in counted]
    out.update({"errors": sum(r.get("status") == "error" for r in rows),
                "not_run": sum(r.get("status") not in COUNTED + ("error",) for r in rows),
                "median_wall_s": statistics.median(walls) if walls else None,
                "total_cost_usd": math.fsum(float(r.get("cost_usd") or 0.0) for r in rows),
                "flagged": sum(bool(r.get("lint_flags")) for r in counted),
                "harness_versions": sorted({str(r.get("harness_version", "1")) for r in counted})})
    return out


def summarize(rows: list[dict]) -> dict[str, dict[str, Any]]:
    """{level: numbers} for each level (naturally sorted), then {"overall": numbers}."""
    levels = sorted({r.get("level", "") for r in rows}, key=natural_key)
    summary = {lvl: summarize_group([r for r in rows if r.get("level", "") == lvl]) for lvl in levels}
    summary[OVERALL] = summarize_group(list(rows))
    return summary


# --- markdown --------------------------------------------------------------------------

def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _level_name(level: str) -> str:
    return level or "(no level)"


def _table(header: list[str], align: list[str], body: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def summary_table(summary: dict[str, dict]) -> str:
    """Table 1: one line per level and overall."""
    header = ["level", "tasks", "pass rate", "faster than eager", "faster than compile",
              "geomean vs eager", "geomean vs compile"]
    body = []
    for level, s in summary.items():
        tasks = str(s["tasks"]) if s["n"] == s["tasks"] else f"{s['tasks']} ({s['n']} runs)"
        name = "**overall**" if level == OVERALL else _level_name(level)
        body.append([name, tasks, _pct(s["pass_rate"]), _pct(s["faster_than_eager_rate"]),
                     _pct(s["faster_than_compile_rate"]), _times(s["geomean_speedup_vs_eager"]),
                     _times(s["geomean_speedup_vs_compile"])])
    return _table(header, [":--"] + ["--:"] * 6, body)


def notes_line(overall: dict) -> str:
    """Exclusions, flags, time and cost, under the table."""
    wall = "–" if overall["median_wall_s"] is None else f"{overall['median_wall_s']:.0f} s"
    versions = overall.get("harness_versions") or []
    mixed = (f" Rows from harness versions {', '.join(versions)}: timings of different versions are not "
             "measured the same way." if len(versions) > 1 else "")
    return (f"Left out of the rates: {overall['errors']} infrastructure error(s), {overall['not_run']} not run. "
            f"Lint-flagged rows: {overall['flagged']}. Median wall time per row {wall}, "
            f"total cost ${overall['total_cost_usd']:.2f}.{mixed}")


def method_line(meta: dict) -> str:
    """How the numbers were made: backend, model, device, torch, turns, runs, date, command."""
    parts = [f"{label} {meta[key]}" if meta.get(key) not in (None, "") else f"{label} not recorded"
             for key, label in METHOD_KEYS if key in ESSENTIAL or meta.get(key) not in (None, "")]
    known = {k for k, _ in METHOD_KEYS} | {"command"}
    parts += [f"{k} {v}" for k, v in meta.items() if k not in known and v not in (None, "")]
    command = f" Command: `{meta['command']}`." if meta.get("command") else ""
    return "**Method.** " + ", ".join(parts) + "." + command


DEFINITIONS = ("Pass rate: correct / tasks run (errors and pending left out). Faster: correct and speed-up > 1.0, "
               "no noise margin, over all tasks run. Geomean: over correct tasks only, as in the CUDA Agent paper.")


def task_table(rows: list[dict]) -> str:
    header = ["level", "task", "run", "status", "correct", "vs eager", "vs compile", "reward", "turns",
              "cost", "wall", "flags"]
    body = [[_level_name(r.get("level", "")), r.get("task", ""), r.get("run", 0), r.get("status", ""),
             "yes" if r.get("correct") else "no", _times(r.get("speedup_vs_eager")),
             _times(r.get("speedup_vs_compile")), f"{float(r.get('reward') or 0):g}", r.get("turns", 0),
             f"${float(r.get('cost_usd') or 0):.2f}", f"{float(r.get('wall_s') or 0):.0f} s",
             ", ".join(r.get("lint_flags") or [])]
            for r in sorted(rows, key=row_sort_key)]
    return _table(header, [":--"] * 4 + [":-:"] + ["--:"] * 6 + [":--"], body)


def markdown(summary: dict[str, dict], meta: dict, rows: list[dict] | None = None) -> str:
    """The report: Table 1 first (its own paragraph, so `.split("\n\n")[0]` is the table), notes,
    the method line, the definitions, then the per-task table when `rows` are given."""
    blocks = [summary_table(summary), notes_line(summary[OVERALL]), method_line(meta or {}), DEFINITIONS]
    if rows:
        blocks += ["## Per task", task_table(rows)]
    return "\n\n".join(blocks) + "\n"


# --- plot ------------------------------------------------------------------------------

def _speedups_by_level(rows: list[dict]) -> dict[str, dict[str, list[float]]]:
    """{level: {"eager": [...], "compile": [...]}} of correct rows, finite positive values only."""
    out: dict[str, dict[str, list[float]]] = {}
    for row in sorted(rows, key=row_sort_key):
        if row.get("status") not in COUNTED or not row.get("correct"):
            continue
        for name, key in SPEEDUPS:
            value = row.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                out.setdefault(_level_name(row.get("level", "")), {"eager": [], "compile": []})[name].append(value)
    return out


def _draw(ax, data: dict[str, dict[str, list[float]]]) -> None:
    import numpy as np

    rng = np.random.default_rng(0)  # the same jitter on every render
    colors = {"eager": "tab:blue", "compile": "tab:orange"}
    labelled: set[str] = set()
    for i, level in enumerate(data):
        for offset, name in ((-0.18, "eager"), (0.18, "compile")):
            values = data[level][name]
            if not values:
                continue
            x = i + offset
            ax.boxplot([values], positions=[x], widths=0.28, showfliers=False, manage_ticks=False,
                       patch_artist=True, boxprops={"facecolor": colors[name], "alpha": 0.25},
                       medianprops={"color": "black"})
            label = None if name in labelled else f"vs {name}"
            labelled.add(name)
            ax.scatter(x + rng.uniform(-0.08, 0.08, len(values)), values, s=14, alpha=0.7, color=colors[name],
                       label=label)
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    _log_axis(ax, [v for series in data.values() for values in series.values() for v in values])
    ax.set_xticks(range(len(data)), [f"{lvl}\n{len(v['eager'])} eager · {len(v['compile'])} compile"
                                     for lvl, v in data.items()])
    ax.set_ylabel("speed-up (log scale; above 1× is faster)")
    ax.set_title("Speed-ups of correct kernels per level")
    ax.legend(loc="best")


def _log_axis(ax, values: list[float]) -> None:
    """A log y axis labelled 0.5×, 1×, 2× rather than 10^x; 1.0 always in view."""
    from matplotlib.ticker import FuncFormatter

    low, high = min(values + [1.0]), max(values + [1.0])
    ax.set_yscale("log")
    ax.set_ylim(low / 1.3, high * 1.3)
    few_decades = math.log10(high / low) <= 2
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.yaxis.set_minor_formatter(FuncFormatter(
        lambda v, _: f"{v:g}×" if few_decades and round(v / 10 ** math.floor(math.log10(v) + 1e-9)) in (2, 5) else ""))


def plot(rows: list[dict], path: str | os.PathLike) -> Path:
    """speedups.png: speed-ups vs eager and vs torch.compile per level (correct rows, log scale, line
    at 1.0); an image that says so when no row is correct. Uses the Agg canvas, not pyplot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    data = _speedups_by_level(rows)
    fig = Figure(figsize=(max(5.0, 1.6 * len(data) + 2), 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if data:
        _draw(ax, data)
    else:
        ax.set_axis_off()
        ax.text(0.5, 0.5, f"No correct kernels ({len(rows)} rows):\nno speed-ups to plot", ha="center",
                va="center", fontsize=14)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png")
    return path


# --- files -----------------------------------------------------------------------------

def write_atomic(path: Path, text: str) -> None:
    """Write through a temp file and rename it: a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_report(out_dir: str | os.PathLike, rows: list[dict], meta: dict) -> dict:
    """Writes results.json ({"meta", "summary", "rows"}), results.md and speedups.png; returns the summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = sorted(rows, key=row_sort_key)
    summary = summarize(rows)
    write_atomic(out / "results.json", json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1))
    write_atomic(out / "results.md", "# kernelsmith bench\n\n" + markdown(summary, meta, rows))
    plot(rows, out / "speedups.png")
    return summary


def latest_rows(lines: Iterable[str]) -> list[dict]:
    """Rows from JSON lines, the last one per (level, task, run) winning; torn lines are skipped."""
    rows: dict[tuple, dict] = {}
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "task" in row:
            rows[(row.get("level", ""), row["task"], row.get("run", 0))] = row
    return sorted(rows.values(), key=row_sort_key)


def load_rows(out_dir: str | os.PathLike) -> list[dict]:
    """The rows of a bench folder: from rows.jsonl when present (latest per key), else results.json; [] if none."""
    out = Path(out_dir)
    if (out / "rows.jsonl").is_file():
        return latest_rows((out / "rows.jsonl").read_text().splitlines())
    if (out / "results.json").is_file():
        return sorted(json.loads((out / "results.json").read_text()).get("rows", []), key=row_sort_key)
    return []
