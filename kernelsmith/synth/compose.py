"""The combinatorial composer: chains and small DAGs of seed operators, sized for a device.

A task draws its operator count from a target mix (mostly two operators, as in CUDA-Agent-Ops-6K),
a first input shape from the device's size profile, then one seed at a time among those that accept
the current value. An operator that needs a second operand takes an earlier value of the same shape
(a skip connection: the task becomes a DAG) or a new input. Every declared shape is checked by
running the rendered task on meta tensors. One random.Random(seed) drives it all: the same seed
gives the same stream of candidates.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from kernelsmith.synth import render, seeds
from kernelsmith.synth.seeds import Op, Operand, Shape

# Share of tasks by operator count; counts above 5 share what is left over.
MIX = {1: 0.02, 2: 0.84, 3: 0.08, 4: 0.04, 5: 0.02}
LONG_TAIL = 0.01


@dataclass(frozen=True)
class SizeProfile:
    """Dimensions to draw first inputs from, per rank: for cuda, workloads whose eager time on an H200
    lands in 1-100 ms; for cpu, ones a laptop core runs in milliseconds."""

    dims: dict[int, tuple[tuple[int, ...], ...]]


PROFILES = {
    "cuda": SizeProfile({  # a task that starts with a compute-bound operator (HEAVY)
        2: ((4096, 8192, 16384), (1024, 2048, 4096, 8192)),
        3: ((8, 16, 32), (512, 1024, 2048), (512, 1024, 2048)),
        4: ((16, 32, 64), (16, 32, 64), (64, 128, 256), (64, 128, 256)),
    }),
    # one that starts with a memory-bound one: 8x the elements. On an H100 the sizes above put 111 of 181
    # candidates below the 1 ms floor, the memory-bound ones at 0.03-0.3 ms (2026-12-05)
    "cuda-light": SizeProfile({
        2: ((32768, 65536, 131072), (4096, 8192, 16384)),
        3: ((64, 128, 256), (1024, 2048, 4096), (1024, 2048)),
        4: ((32, 64, 128), (32, 64, 128), (256, 512), (256, 512)),
    }),
    "cpu": SizeProfile({
        2: ((64, 128, 256), (64, 128, 256, 512)),
        3: ((2, 4, 8), (32, 64, 128), (32, 64, 128)),
        4: ((2, 4, 8), (4, 8, 16), (16, 32), (16, 32)),
    }),
}


@dataclass(frozen=True)
class Input:
    name: str
    shape: Shape
    dtype: str = "float32"
    high: int | None = None


@dataclass(frozen=True)
class Node:
    op: Op
    operands: tuple[str, ...]
    value: str  # the name of what it computes: y1, y2...

    @property
    def attr(self) -> str:
        return f"{self.op.seed}{self.value[1:]}"


@dataclass
class TaskGraph:
    inputs: list[Input] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    shapes: dict[str, Shape] = field(default_factory=dict)

    def elements(self) -> int:
        """Elements of every input and every operator's result: what one forward holds at most."""
        return sum(math.prod(shape) for shape in self.shapes.values())

    def scratch(self) -> int:
        """Elements the largest operator holds inside itself while it runs (one runs at a time)."""
        return max((n.op.scratch for n in self.nodes), default=0)

    def describe(self) -> dict:
        """What the manifest says about the task."""
        return {"ops": [n.op.seed for n in self.nodes], "op_count": len(self.nodes),
                "op_args": [n.op.args for n in self.nodes],
                "edges": [[n.value, list(n.operands)] for n in self.nodes],
                "inputs": [{"shape": list(i.shape), "dtype": i.dtype} for i in self.inputs],
                "output_shape": list(self.nodes[-1].op.out_shape),
                "dtypes": sorted({i.dtype for i in self.inputs})}


def op_count_weights(max_ops: int) -> dict[int, float]:
    weights = {k: MIX.get(k, LONG_TAIL) for k in range(1, max_ops + 1)}
    total = sum(weights.values())
    return {k: w / total for k, w in weights.items()}


def draw_op_count(rng: random.Random, max_ops: int) -> int:
    weights = op_count_weights(max_ops)
    return rng.choices(list(weights), list(weights.values()))[0]


def _first_shape(rng: random.Random, seed: seeds.Seed, profile: SizeProfile) -> Shape | None:
    ranks = [r for r in seed.ranks if r in profile.dims]
    if not ranks:
        return None
    return tuple(rng.choice(choices) for choices in profile.dims[rng.choice(ranks)])


def _operand(graph: TaskGraph, need: Operand, main: str, rng: random.Random) -> str:
    """An earlier value of the needed shape (half the time, when there is one), else a new input."""
    same = [v for v, s in graph.shapes.items() if s == need.shape and v != main and need.high is None]
    if same and rng.random() < 0.5:
        return rng.choice(same)
    name = f"x{len(graph.inputs)}"
    graph.inputs.append(Input(name, need.shape, need.dtype, need.high))
    graph.shapes[name] = need.shape
    return name


def _add_node(graph: TaskGraph, op: Op, main: str, rng: random.Random) -> str:
    operands = (main,) + tuple(_operand(graph, need, main, rng) for need in op.needs)
    value = f"y{len(graph.nodes) + 1}"
    graph.nodes.append(Node(op, operands, value))
    graph.shapes[value] = op.out_shape
    return value


def _next_op(rng: random.Random, shape: Shape, last: bool, pool: tuple[seeds.Seed, ...]) -> Op | None:
    fits = [s for s in pool if s.accepts(shape) and (last or not s.terminal)]
    for _ in range(6 if fits else 0):
        op = _weighted(rng, fits).rule(rng, shape)
        if op is not None:
            return op
    return None


def _weighted(rng: random.Random, pool: list[seeds.Seed]) -> seeds.Seed:
    return rng.choices(pool, [s.weight for s in pool])[0]


def compose_graph(rng: random.Random, n_ops: int, device: str, pool: tuple[seeds.Seed, ...] = seeds.SEEDS):
    """One task of n_ops operators, or None when this draw led nowhere (the caller draws again)."""
    first = _weighted(rng, [s for s in pool if not s.terminal or n_ops == 1])
    shape = _first_shape(rng, first, profile_for(first, device))
    if shape is None:
        return None
    graph = TaskGraph(inputs=[Input("x0", shape)], shapes={"x0": shape})
    current, op = "x0", first.rule(rng, shape)
    for i in range(n_ops):
        op = op if i == 0 else _next_op(rng, graph.shapes[current], i == n_ops - 1, pool)
        if op is None or not _sane_size(op.out_shape, device):
            return None
        current = _add_node(graph, op, current, rng)
    return graph


# Operators whose time grows with more than the bytes they move: a first input sized for a memory-bound
# chain would take seconds through these.
HEAVY = frozenset({"matmul", "linear", "attention", "causal_attention", "geglu_mlp", "swiglu_mlp"})


def profile_for(first: seeds.Seed, device: str) -> SizeProfile:
    light = f"{device}-light"
    return PROFILES[light] if first.name not in HEAVY and light in PROFILES else PROFILES[device]


# Operators whose time is set by their arithmetic, not by the bytes they move.
COMPUTE_BOUND = HEAVY | {"conv1d", "conv2d", "conv_transpose2d"}

# The fastest any chain of memory-bound operators can run on the GPU the cuda sizes are for, in ms per GB
# moved: the H200's measured copy bandwidth, 4.20 TB/s (docs/results.md). On an H100 eager ran such chains
# at 0.34-3.8 ms per GB; 46 of the 70 candidates below the 1 ms floor there were memory-bound chains that
# moved 0.13-2.7 GB (bench/results/h100-2026-12-05d). No devices here: the CPU's sizes are its profile's.
FASTEST_MS_PER_GB = {"cuda": 0.238}


def bytes_moved(graph: TaskGraph) -> int:
    """What eager moves through memory when nothing is fused: every operator reads its operands and writes
    its result once, four bytes an element."""
    return 4 * sum(sum(math.prod(graph.shapes[o]) for o in n.operands) + math.prod(n.op.out_shape)
                   for n in graph.nodes)


def below_floor(graph: TaskGraph, device: str, floor_ms: float) -> bool:
    """A chain of memory-bound operators too small to reach the window's floor even at the fastest rate
    (FASTEST_MS_PER_GB). A sizing rule, not a check: the rubric times every task that passes it, and a
    slow-per-byte operator (a cumsum, a rotary embedding) still comes, at the sizes that pass."""
    rate = FASTEST_MS_PER_GB.get(device)
    if rate is None or not floor_ms or any(n.op.seed in COMPUTE_BOUND for n in graph.nodes):
        return False
    return bytes_moved(graph) / 1e9 * rate < floor_ms


MAX_ELEMENTS = {"cuda": 1 << 30, "cpu": 1 << 22}  # an intermediate beyond this is not a task for the device


def _sane_size(shape: Shape, device: str) -> bool:
    count = 1
    for d in shape:
        count *= d
    return 0 < count <= MAX_ELEMENTS[device] and all(d >= 1 for d in shape)


def verify_on_meta(graph: TaskGraph) -> str | None:
    """Run the rendered task on meta tensors; what is wrong with the declared shapes, or None."""
    from kernelsmith.synth import decontaminate

    try:
        module = decontaminate.load_source(render.render(graph, "probe", probe=True))
        import torch

        with torch.device("meta"):
            values = module.Model(*module.get_init_inputs())(*module.get_inputs())
    except Exception as err:  # noqa: BLE001  (a rule that made a call torch refuses)
        return f"{type(err).__name__}: {err}"
    for node, value in zip(graph.nodes, values):
        if tuple(value.shape) != tuple(node.op.out_shape):
            return f"{node.op.seed} declared {tuple(node.op.out_shape)}, torch gives {tuple(value.shape)}"
    return None


@dataclass
class Candidate:
    """A composed task: its index in the stream, file name, source and what the manifest records."""

    index: int
    name: str
    source: str
    info: dict
    graph: TaskGraph | None = None  # None for LLM-written tasks


# The version of the rules that size a candidate: a run resumed under other rules would draw another
# stream (run.SynthPlan.settings). 2: memory-bound chains below the window's floor are drawn again.
SIZING = 2

MAX_DRAWS = 50  # draws per candidate before its operator count is given up on


def task_name(index: int, ops: list[str]) -> str:
    return f"{index:05d}_" + "_".join(ops)[:80]


class CombinatorialComposer:
    name = "combinatorial"

    def __init__(self, seed: int, max_ops: int, device: str, floor_ms: float = 0.0):
        self.seed, self.max_ops, self.device = seed, max_ops, device
        self.floor_ms = floor_ms  # the eager window's floor: memory-bound chains that cannot reach it are drawn again

    def candidates(self, skip=frozenset()):
        """The endless, deterministic stream of candidates for this seed (all drawn, those in skip
        not rendered: a resumed run sees the same stream)."""
        rng = random.Random(self.seed)
        index = 0
        while True:
            graph = self._draw(rng, draw_op_count(rng, self.max_ops))
            if graph is None:
                continue
            if index in skip:
                index += 1
                continue
            name = task_name(index, [n.op.seed for n in graph.nodes])
            title = f"{name}: synthesized by kernelsmith synth (combinatorial composer, seed {self.seed})."
            yield Candidate(index, name, render.render(graph, title), graph.describe(), graph)
            index += 1

    def _draw(self, rng: random.Random, n_ops: int) -> TaskGraph | None:
        for _ in range(MAX_DRAWS):
            graph = compose_graph(rng, n_ops, self.device)
            if graph is None or below_floor(graph, self.device, self.floor_ms):
                continue
            if verify_on_meta(graph) is None:
                return graph
        return None
