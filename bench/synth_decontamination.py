"""Measure synth's decontamination threshold: every task of a KernelBench folder, renamed and resized,
against the originals (all must be caught), and composed tasks against them (how many are dropped).

    python bench/synth_decontamination.py ../shared/kernelbench [--composed 2000] [--device cuda]
"""

from __future__ import annotations

import argparse
import ast
import itertools
import re
from pathlib import Path

from kernelsmith.synth import decontaminate
from kernelsmith.synth.compose import CombinatorialComposer


def resized(source: str, factor: int = 2) -> str:
    """Every module-level integer constant above 1 (sizes, channels, kernel sizes) times factor."""
    tree = ast.parse(source)
    lines = source.splitlines()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and type(node.value.value) is int \
                and node.value.value > 1 and node.lineno == node.end_lineno:
            line = lines[node.lineno - 1]
            lines[node.lineno - 1] = line[:node.value.col_offset] + str(node.value.value * factor) + \
                line[node.value.end_col_offset:]
    return "\n".join(lines) + "\n"


def renamed(source: str) -> str:
    """Attribute names of the Model changed: self.conv -> self.renamed_conv."""
    return re.sub(r"self\.([a-z_][a-z0-9_]*)", r"self.renamed_\1", source)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--composed", type=int, default=2000)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    root = args.folder
    originals = {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.py"))}
    graphs = {name: decontaminate.capture_source(src) for name, src in originals.items()}
    eval_set = decontaminate.EvalSet(graphs)
    threshold = decontaminate.DEFAULT_THRESHOLD
    caught = missed = broken = 0
    lowest = 1.0
    for name, source in originals.items():
        for copy in (renamed(source), resized(source), resized(renamed(source), 3)):
            try:
                graph = decontaminate.capture_source(copy)
            except Exception:  # noqa: BLE001  (a resize that makes shapes disagree is no task)
                broken += 1
                continue
            score = eval_set.nearest(graph)[1]
            lowest = min(lowest, score)
            caught, missed = caught + (score >= threshold), missed + (score < threshold)
    print(f"evaluation tasks: {len(originals)}; copies caught {caught}, missed {missed}, "
          f"unrunnable resizes {broken}; lowest copy similarity {lowest:.3f}; threshold {threshold}")
    scores = []
    for candidate in itertools.islice(CombinatorialComposer(0, 5, args.device).candidates(), args.composed):
        scores.append((eval_set.nearest(decontaminate.capture_source(candidate.source))[1], candidate.name))
    dropped = [s for s in scores if s[0] >= threshold]
    exact = [s for s in dropped if s[0] == 1.0]
    print(f"composed tasks ({args.device}, seed 0): {len(scores)}; at or above the threshold {len(dropped)} "
          f"({len(exact)} with the same graph as an evaluation task)")
    for t in (0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 1.0):
        print(f"  similarity >= {t}: {sum(s >= t for s, _ in scores)}")
    for score, name in sorted(dropped, reverse=True)[:15]:
        print(f"  dropped: {name} {score:.3f} ({eval_set.nearest(decontaminate.capture_source(next(c.source for c in itertools.islice(CombinatorialComposer(0, 5, args.device).candidates(), int(name[:5]) + 1) if c.name == name)))[0]})")


if __name__ == "__main__":
    main()
