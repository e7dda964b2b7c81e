"""Loading task and candidate modules, and seeded weights and inputs (worker side).

Weights and inputs are a pure function of a seed, so the candidate worker and
the reference worker build identical ones without sharing memory.
"""

from __future__ import annotations

from pathlib import Path

import torch

from kernelsmith.evaluation import sources

DTYPES = {"fp32": None, "tf32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def load_module(path: str | Path, name: str):
    """Import a task or candidate file from its source (never a bytecode cache), its folder last on sys.path."""
    return sources.load_source(path, name)


require = sources.require


def cast_floating(t, precision: str):
    dtype = DTYPES.get(precision)
    if dtype is not None and isinstance(t, torch.Tensor) and t.is_floating_point():
        return t.to(dtype)
    return t


def seeded_inputs(task, seed: int, device: str, precision: str) -> list:
    """get_inputs() under a seed, moved to the device and cast to the precision."""
    torch.manual_seed(seed)
    with torch.device(device):  # factory calls in get_inputs() allocate on the device directly
        raw = task.get_inputs()
    return [cast_floating(x.to(device), precision) if isinstance(x, torch.Tensor) else x for x in raw]


def init_inputs(task) -> list:
    """get_init_inputs() under seed 0 (the same arguments in every process), without touching
    the caller's random state: the seed a model is then constructed under is the caller's
    (verify builds ModelNew under evaluation.seeds.construct_seed, never under 0)."""
    cuda = torch.cuda.is_initialized()
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if cuda else []):
        torch.random.default_generator.manual_seed(0)
        if cuda:  # (torch.manual_seed would also queue a seed for a CUDA not initialised yet)
            torch.cuda.manual_seed_all(0)
        return list(task.get_init_inputs())


def seeded_reference(task, seed: int, device: str, precision: str) -> torch.nn.Module:
    """A fresh reference Model whose weights come from the seed."""
    args = init_inputs(task)
    torch.manual_seed(seed)
    with torch.device(device):
        model = task.Model(*args)
    model = model.to(device)
    perturb_weights(model, seed, device)
    dtype = DTYPES.get(precision)
    return model.to(dtype) if dtype is not None else model


@torch.no_grad()
def perturb_weights(model: torch.nn.Module, seed: int, device: str) -> None:
    """Make every trial's weights really differ: modules such as BatchNorm and LayerNorm
    initialise to constants (ones, zeros) whatever the seed, so a candidate that ignores the
    loaded weights would pass. Parameters get a multiplicative jitter (x0.75..1.25) plus a
    little noise; floating buffers (running statistics) only the jitter, which keeps them
    positive where they must be."""
    gen = torch.Generator(device=device).manual_seed(seed)
    for param in model.parameters():
        if param.is_floating_point() and param.numel():
            scale = float(param.abs().mean()) or 1.0
            param.mul_(torch.rand(param.shape, generator=gen, device=device, dtype=param.dtype) * 0.5 + 0.75)
            param.add_(torch.randn(param.shape, generator=gen, device=device, dtype=param.dtype) * (0.05 * scale))
    for buf in model.buffers():
        if buf.is_floating_point() and buf.numel():
            buf.mul_(torch.rand(buf.shape, generator=gen, device=device, dtype=buf.dtype) * 0.5 + 0.75)


def load_weights(candidate: torch.nn.Module, reference: torch.nn.Module) -> None:
    """Copy the reference's state into the candidate; names and shapes must match."""
    state = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    result = candidate.load_state_dict(state, strict=False)
    problems = []
    # load_state_dict's view: "unexpected" keys are Model's that ModelNew lacks, "missing" the reverse
    if result.unexpected_keys:
        problems.append(f"missing in ModelNew: {', '.join(result.unexpected_keys[:8])}")
    if result.missing_keys:
        problems.append(f"not in Model: {', '.join(result.missing_keys[:8])}")
    if problems:
        raise ValueError("ModelNew's parameters do not match Model's (" + "; ".join(problems) + ")")


def nbytes(values) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def clone_all(values: list) -> list:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
