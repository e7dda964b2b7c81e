"""A composed task as a readable, self-contained KernelBench-format file."""

from __future__ import annotations

from kernelsmith.synth.seeds import BLOCKS

DIM_NAMES = {0: (), 1: ("SIZE",), 2: ("BATCH", "FEATURES"), 3: ("BATCH", "SEQ", "DIM"),
             4: ("BATCH", "CHANNELS", "HEIGHT", "WIDTH")}
TORCH_DTYPES = {"float32": "torch.float32", "float16": "torch.float16", "bfloat16": "torch.bfloat16",
                "int64": "torch.int64"}


def size_constants(graph) -> dict[str, int]:
    """Module-level names for the first input's dimensions: BATCH, FEATURES..."""
    return dict(zip(DIM_NAMES[len(graph.inputs[0].shape)], graph.inputs[0].shape))


def _shape_source(shape: tuple[int, ...], constants: dict[str, int]) -> str:
    by_value = {}
    for name, value in constants.items():
        by_value.setdefault(value, name)
    return ", ".join(by_value.get(d, str(d)) for d in shape)


def _input_source(spec, constants: dict[str, int], first: bool) -> str:
    shape = ", ".join(constants) if first else _shape_source(spec.shape, constants)
    if spec.high is not None:
        return f"torch.randint(0, {spec.high}, ({shape},))"
    dtype = "" if spec.dtype == "float32" else f", dtype={TORCH_DTYPES[spec.dtype]}"
    return f"torch.randn({shape}{dtype})"


def _forward_lines(graph, probe: bool) -> list[str]:
    lines = []
    for node in graph.nodes:
        expr = node.op.expr.format(*node.operands, m=node.attr)
        lines.append(f"        {node.value} = {expr}")
    returned = ", ".join(n.value for n in graph.nodes) + "," if probe else graph.nodes[-1].value
    return lines + [f"        return {returned}"]


def _init_lines(graph) -> list[str]:
    lines = [f"        self.{n.attr} = {n.op.module}" for n in graph.nodes if n.op.module]
    return ["        super().__init__()"] + lines


def render(graph, title: str, probe: bool = False) -> str:
    """The task file's text. probe=True returns every intermediate value (for the meta-tensor check)."""
    constants = size_constants(graph)
    blocks = sorted({b for n in graph.nodes for b in n.op.blocks})
    chain = " -> ".join(n.op.seed for n in graph.nodes)
    head = [f'"""{title}', "", f"Operators: {chain}", '"""', "",
            *(["import math", ""] if "SelfAttention" in blocks else []),
            "import torch", "import torch.nn as nn", "import torch.nn.functional as F", ""]
    head += [f"{name} = {value}" for name, value in constants.items()] + [""]
    body = [BLOCKS[b].strip("\n") + "\n\n" for b in blocks]
    args = ", ".join(spec.name for spec in graph.inputs)
    model = ["class Model(nn.Module):", f'    """{chain}"""', "", "    def __init__(self):", *_init_lines(graph),
             "", f"    def forward(self, {args}):", *_forward_lines(graph, probe)]
    inputs = ", ".join(_input_source(spec, constants, i == 0) for i, spec in enumerate(graph.inputs))
    tail = ["", "", "def get_inputs():", f"    return [{inputs}]", "", "", "def get_init_inputs():", "    return []", ""]
    return "\n".join(head) + "\n\n" + "\n".join(body) + "\n".join(model) + "\n" + "\n".join(tail)
