"""Decontamination: a task's normalised operator graph, compared with every evaluation task's.

A task is captured by running it once on meta tensors under a dispatch mode that records each aten
op and which earlier op produced each of its tensor arguments. Names, sizes and the text play no
part: views, copies, casts and factories are dropped (a view on one size is no view on another),
and op families that sizes pick between (mm, bmm, addmm...) share one label. The graph becomes a set
of features: each op, each producer->consumer edge and each two-edge path; two tasks are as similar
as the Jaccard index of their feature sets. A renamed or resized copy of a task has the same set,
so its similarity is 1.0; see docs/synth.md for how the threshold was chosen.
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

DEFAULT_THRESHOLD = 0.75

# Ops that move, reinterpret or copy data without computing on it, or make constants.
DROPPED = {
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "contiguous", "clone", "detach",
    "alias", "unsqueeze", "squeeze", "flatten", "slice", "select", "split", "split_with_sizes", "chunk",
    "unbind", "_to_copy", "to", "copy", "copy_", "lift_fresh", "lift_fresh_copy", "empty", "empty_like",
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "arange", "new_empty", "new_zeros",
    "new_ones", "new_full", "fill", "scalar_tensor", "as_strided", "expand_as", "view_as", "reshape_as",
    "_reshape_alias", "unfold", "narrow", "rand", "randn", "randint", "rand_like", "randn_like",
    "normal", "uniform", "bernoulli", "empty_strided", "_local_scalar_dense", "item", "set_", "resize_",
    "diagonal", "movedim", "index_select", "cat", "stack", "pad", "constant_pad_nd", "repeat", "tril", "triu",
}
RENAMED = {
    "mm": "matmul", "bmm": "matmul", "matmul": "matmul", "dot": "matmul", "mv": "matmul", "linear": "matmul",
    "_softmax": "softmax", "_log_softmax": "log_softmax", "native_layer_norm": "layer_norm",
    "native_batch_norm": "batch_norm", "_native_batch_norm_legit": "batch_norm",
    "_native_batch_norm_legit_functional": "batch_norm", "_native_batch_norm_legit_no_training": "batch_norm",
    "native_group_norm": "group_norm", "rsub": "sub", "true_divide": "div", "_scaled_dot_product_flash_attention":
    "sdpa", "_scaled_dot_product_efficient_attention": "sdpa", "scaled_dot_product_attention": "sdpa",
    "_scaled_dot_product_flash_attention_for_cpu": "sdpa", "max_pool2d_with_indices": "max_pool2d",
    "max_pool3d_with_indices": "max_pool3d", "max_pool1d_with_indices": "max_pool1d",
}
# Fused ops that sizes choose over their parts: one label sequence for both spellings.
EXPANDED = {"addmm": ("matmul", "add"), "baddbmm": ("matmul", "add"), "addbmm": ("matmul", "add"),
            "addmv": ("matmul", "add")}


def op_labels(func, args) -> tuple[str, ...]:
    """The normalised labels of one aten call ('' dropped): in-place and out variants fold in."""
    name = func.overloadpacket.__name__.rstrip("_")
    if name in DROPPED:
        return ()
    if name == "convolution":
        return ("conv_transpose" if len(args) > 6 and args[6] else "conv",)
    return EXPANDED.get(name, (RENAMED.get(name, name),))


class GraphRecorder(TorchDispatchMode):
    """Records the op DAG: nodes are labels; a tensor made by a dropped op keeps its source's producer."""

    def __init__(self):
        super().__init__()
        self.labels: list[str] = []
        self.edges: set[tuple[int, int]] = set()
        self._producer: dict[int, int] = {}
        self._alive: list = []  # keeps tensors alive, so that their ids stay unique

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        sources = {self._producer[id(a)] for a in _tensors(args, kwargs) if id(a) in self._producer}
        labels = op_labels(func, args)
        node = None
        for label in labels:  # an expanded op is a little chain of its own
            self.labels.append(label)
            current = len(self.labels) - 1
            self.edges.update((s, current) for s in sources)
            sources, node = {current}, current
        for tensor in _tensors(out, None):
            if node is not None:
                self._producer[id(tensor)] = node
            elif len(sources) == 1:
                self._producer[id(tensor)] = next(iter(sources))
            self._alive.append(tensor)
        return out


def _tensors(args, kwargs) -> list:
    flat = list(args) if isinstance(args, (list, tuple)) else [args]
    flat += list((kwargs or {}).values())
    found = []
    for item in flat:
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            found += _tensors(item, None)
    return found


@dataclass
class OpGraph:
    """A task's normalised operator graph: op labels in order of execution, and edges between them."""

    labels: list[str]
    edges: list[tuple[int, int]]

    def features(self) -> frozenset[str]:
        """Each op, each edge a>b and each two-edge path a>b>c, as labels."""
        found = set(self.labels)
        into: dict[int, list[int]] = {}
        for a, b in self.edges:
            found.add(f"{self.labels[a]}>{self.labels[b]}")
            into.setdefault(b, []).append(a)
        for a, b in self.edges:
            found.update(f"{self.labels[p]}>{self.labels[a]}>{self.labels[b]}" for p in into.get(a, ()))
        return frozenset(found)

    def to_dict(self) -> dict:
        return {"labels": self.labels, "edges": [list(e) for e in self.edges]}

    @classmethod
    def from_dict(cls, data: dict) -> "OpGraph":
        return cls(list(data["labels"]), [tuple(e) for e in data["edges"]])


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard index of two feature sets (1.0: the same graph as far as the features see)."""
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def load_source(source: str, name: str = "ks_synth_task") -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)  # noqa: S102  (trusted, or inside a worker)
    return module


def capture_source(source: str) -> OpGraph:
    """Run the task's Model once on meta tensors and record its operator graph."""
    module = load_source(source)
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
        recorder = GraphRecorder()
        with torch.no_grad(), recorder:
            model(*inputs)
    return OpGraph(recorder.labels, sorted(recorder.edges))


def capture_folder(folder: str) -> dict:
    """{relative path: graph dict, or {"error": ...}} for every task file under folder (worker side)."""
    root, graphs = Path(folder), {}
    for path in sorted(root.rglob("*.py")):
        if path.name.startswith("_"):
            continue
        try:
            graphs[str(path.relative_to(root))] = capture_source(path.read_text()).to_dict()
        except Exception as err:  # noqa: BLE001  (a task meta tensors cannot run is reported, not fatal)
            graphs[str(path.relative_to(root))] = {"error": f"{type(err).__name__}: {err}"[:300]}
    return graphs


class EvalSet:
    """The evaluation tasks' feature sets, and the nearest of them to a task."""

    def __init__(self, graphs: dict[str, OpGraph]):
        self.features = {name: graph.features() for name, graph in graphs.items()}

    def nearest(self, graph: OpGraph) -> tuple[str | None, float]:
        mine = graph.features()
        best = max(self.features.items(), key=lambda item: similarity(mine, item[1]), default=None)
        return (best[0], round(similarity(mine, best[1]), 4)) if best else (None, 0.0)


def graphs_from_json(text: str) -> dict[str, OpGraph]:
    return {k: OpGraph.from_dict(v) for k, v in json.loads(text).items() if "error" not in v}
