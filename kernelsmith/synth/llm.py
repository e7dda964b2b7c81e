"""The LLM composer: asks a backend (Anthropic or OpenAI, as `optimize` builds them) for one
KernelBench-format file that fuses a few seed operators. Its answer is untrusted code: it is only
ever run in jailed workers (graph capture, rubric), like every other task."""

from __future__ import annotations

import ast
import random
import re

from kernelsmith.synth import compose, seeds

SYSTEM = ("You write PyTorch tasks for a GPU kernel benchmark, in KernelBench format: one self-contained "
          "Python file that imports torch, defines `class Model(nn.Module)` with `forward`, module-level "
          "size constants, `get_inputs()` (a list of input tensors made with torch.randn or torch.randint) "
          "and `get_init_inputs()` (a list of constructor arguments). The task fuses the operators given, "
          "in an order that makes sense, with no randomness in forward. Answer with the file only, "
          "in one ```python code block.")
SIZES = {"cuda": "eager PyTorch should take 1 to 100 ms on an NVIDIA H200 GPU",
         "cpu": "eager PyTorch should take 0.05 to 50 ms on one CPU core"}
FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)
REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def prompt(ops: list[str], device: str) -> str:
    return (f"Write one task that fuses these operators: {', '.join(ops)}. "
            f"Choose sizes so that {SIZES[device]}. Use float32.")


def parse_task(text: str) -> tuple[str | None, str]:
    """(the file's source, "") or (None, why not) for a model's answer."""
    blocks = FENCE.findall(text)
    source = (blocks[0] if blocks else text).strip() + "\n"
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return None, f"the answer is not valid Python: line {err.lineno}: {err.msg}"
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        return None, f"the answer does not define {', '.join(missing)}"
    return source, ""


class LLMComposer:
    def __init__(self, backend, seed: int, max_ops: int, device: str):
        self.backend, self.seed, self.max_ops, self.device = backend, seed, max_ops, device
        self.name = backend.name

    def candidates(self, skip=frozenset()):
        """One candidate per model call; the operators asked for are a deterministic stream, the
        answers are not. Indices in skip (done in an earlier run) cost no call."""
        rng = random.Random(self.seed)
        pool = [s.name for s in seeds.SEEDS if not s.terminal]
        for index in range(10**9):
            ops = rng.sample(pool, compose.draw_op_count(rng, self.max_ops))
            if index in skip:
                continue
            reply = self.backend.complete(SYSTEM, [{"role": "user", "content": prompt(ops, self.device)}], [])
            source, why_not = parse_task(reply.text)
            info = {"ops": ops, "op_count": len(ops), "model": getattr(self.backend, "model", ""),
                    **({"parse_error": why_not} if why_not else {})}
            yield compose.Candidate(index, compose.task_name(index, ops), source or reply.text, info)
