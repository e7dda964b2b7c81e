"""Running a compiler Plan's kernels directly, as model_new.py would, for the tests that check every launch
variant of many small modules in one extension (test_builtin_gemm_layouts.py, test_builtin_recurrent.py and
their GPU cases)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Callable, Iterable

from kernelsmith.compiler import cpu, cuda
from kernelsmith.compiler.ir import Group, Plan


def load_module(path: Path, name: str):
    """A test file's module by path, registered under `name` (dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def generated_apart(cases: Iterable[str], built_for: Callable[[str], object], device: str,
                    prefix: str) -> tuple[dict[str, str], dict[str, tuple[Plan, list[int]]]]:
    """Every case's plan with its kernels renamed apart (<prefix><case>_<kernel>_<kind>), their files for
    `device`, and each plan with its kernels' numbers of launch variants. built_for(case) is build_plan's."""
    generate = cuda.generate if device == "cuda" else cpu.generate
    files, plans = {}, {}
    for i, name in enumerate(cases):
        built = built_for(name)
        assert not built.unsupported, built.unsupported
        compile(built.model_new([0] * len(built.variants)), f"{name}/model_new.py", "exec")
        for j, group in enumerate(built.plan.groups()):
            group.name = f"{prefix}{i}_{j}_{group.kind}"
            files.update(generate(group, built.plan.values, "fp32").files)
        plans[name] = (built.plan, [len(v) for v in built.variants])
    return files, plans


def run_plan(ext, plan: Plan, args: dict, config: int, variants: list[int]) -> list:
    """The plan's views and kernels in order, as model_new.py runs them, each kernel at `config` (or its last
    variant, where it has fewer); forward's outputs."""
    values, kernels = dict(args), iter(variants)
    for step in plan.prelude + plan.steps:
        if not isinstance(step, Group):
            values[step.out.name] = step.view.apply(values[step.source])
            continue
        chosen = min(config, next(kernels) - 1)
        got = getattr(ext, step.name)(*[values[v.name] for v in step.inputs], chosen)
        values.update(zip([o.name for o in step.outputs], [got] if len(step.outputs) == 1 else got))
    return [values[name] for name in plan.outputs]
