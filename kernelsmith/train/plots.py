"""A training run's curves as a PNG next to its metrics.jsonl: one panel per metric over steps. Written after
every step, so the picture of a long run is never older than its last step. Uses the Agg canvas, not pyplot
(no display, no global state shared with the caller)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def read_metrics(path: Path) -> list[dict]:
    """The rows of a metrics JSONL; a line cut short by a crash mid-write is skipped, not fatal."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def write(metrics: Path, png: Path, panels: tuple[tuple[str, str], ...]) -> Path:
    """`png` with one panel per (metric key, title) of `panels`, x = the rows' "step"."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = read_metrics(metrics)
    fig = Figure(figsize=(5.0 * len(panels), 3.6), dpi=100)
    FigureCanvasAgg(fig)
    for index, (key, title) in enumerate(panels, 1):
        _panel(fig.add_subplot(1, len(panels), index), rows, key, title)
    fig.tight_layout()
    tmp = png.with_name(png.name + ".tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, png)  # a viewer refreshing the file never reads half an image
    return png


def _panel(ax, rows: list[dict], key: str, title: str) -> None:
    points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and "step" in r]
    if points:
        ax.plot(*zip(*points), marker="o", markersize=3)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
