"""One-pass normalisation statistics (a welford reduction: docs/builtin.md, "One-pass statistics") on the CPU
target, on rows far from zero, where the textbook one-pass formula E[x^2] - E[x]^2 cancels catastrophically.

The kernels are built from a real nn.LayerNorm's captured graph and run against torch with the harness's own
fp32 comparison (harness/compare.py), every launch variant. The same data, through the naive formula in fp32,
fails that comparison: the test would catch a welford that degrades to it. (The CUDA kernel gets the same check
on the device: tests/gpu/test_builtin_cuda_gpu.py.)"""

import textwrap

import pytest

torch = pytest.importorskip("torch")

from kernelsmith.compiler import cpu  # noqa: E402
from kernelsmith.compiler.pipeline import build_plan  # noqa: E402
from kernelsmith.harness import build  # noqa: E402
from kernelsmith.harness.compare import compare  # noqa: E402

import plan_runner  # noqa: E402 (tests/: the kernels of a plan run as model_new.py runs them)

ROWS, N, EPS = 64, 1024, 1e-5

TASK = f"""
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm({N}, eps={EPS})

    def forward(self, x):
        return self.ln(x)

def get_inputs():
    return [torch.randn({ROWS}, {N})]

def get_init_inputs():
    return []
"""


@pytest.fixture(scope="module")
def layer_norm(tmp_path_factory):
    """(the extension, the plan, a LayerNorm with drawn weight and bias) for the task above."""
    root = tmp_path_factory.mktemp("welford")
    (root / "model.py").write_text(textwrap.dedent(TASK))
    built = build_plan(root / "model.py", "cpu", "fp32")
    assert not built.unsupported, built.unsupported
    (root / "kernels").mkdir()
    for group in built.plan.groups():
        for name, text in cpu.generate(group, built.plan.values).files.items():
            (root / "kernels" / name).write_text(text)
    result = build.build(root / "kernels", "cpu", build_dir=root / "build")
    assert result.ok, result.summary
    torch.manual_seed(0)
    model = torch.nn.LayerNorm(N, eps=EPS)
    torch.nn.init.normal_(model.weight)
    torch.nn.init.normal_(model.bias)
    return build.import_extension(result.so_path, result.name), built, model


def _run(ext, built, model, x: torch.Tensor, config: int) -> torch.Tensor:
    """The plan's views and kernels in order, each kernel at `config` (plan_runner.run_plan)."""
    task_model = torch.nn.ModuleDict({"ln": model})  # the task's Model: its parameters are self.ln.*
    plan = built.plan
    args = {plan.inputs[0].name: x} | {p.name: eval(p.source, {"self": task_model}) for p in plan.params}
    return plan_runner.run_plan(ext, plan, args, config, [len(v) for v in built.variants])[0]


def naive_layer_norm(x: torch.Tensor, model) -> torch.Tensor:
    """LayerNorm with the variance as E[x^2] - E[x]^2, in fp32: one pass, and wrong far from zero."""
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean
    return (x - mean) * torch.rsqrt(var + EPS) * model.weight + model.bias


def _rows(shift: float) -> torch.Tensor:
    return shift + torch.randn(ROWS, N, generator=torch.Generator().manual_seed(1))


def test_layer_norm_is_one_welford_kernel(layer_norm):
    _ext, built, _model = layer_norm
    (group,) = built.plan.groups()
    assert group.reduce == "welford" and group.variance
    source = "".join(cpu.generate(group, built.plan.values).files.values())
    # along a contiguous row: the mean's pass and the centred squares' (simd reductions), then the output's,
    # per schedule
    assert source.count("for (int64_t r = 0;") == 3 * 3
    assert source.count("#pragma omp simd reduction(+:m2)") == 3


def test_rows_far_from_zero_match_torch_where_the_naive_formula_fails(layer_norm):
    """x = 1e3 + randn: every variant within the harness's fp32 tolerance of torch; E[x^2] - E[x]^2 is not."""
    ext, built, model = layer_norm
    x = _rows(1e3)
    with torch.no_grad():
        expected = model(x)
        for config in range(len(built.variants[0])):
            verdict = compare(_run(ext, built, model, x, config), expected, "fp32")
            assert verdict["ok"], f"variant {config}: {verdict['reason']}"
        assert not compare(naive_layer_norm(x, model), expected, "fp32")["ok"]


def test_rows_very_far_from_zero_are_as_close_to_the_exact_answer_as_torch(layer_norm):
    """x = 1e4 + randn: in fp32 the mean itself is rounded to 1e-3 (an ulp of 1e4), so no fp32 kernel is within
    the fp32 tolerance of torch (torch is 1.5e-3 from the exact answer too). The welford kernel is as close to
    the exact (float64) answer as torch is; the naive formula is nowhere near it (negative variances: NaN)."""
    ext, built, model = layer_norm
    x = _rows(1e4)
    with torch.no_grad():
        exact = model.double()(x.double())
        model.float()

        def error(y: torch.Tensor) -> float:
            return float((y.double() - exact).norm() / exact.norm())
        torch_error = error(model(x))
        for config in range(len(built.variants[0])):
            ours = error(_run(ext, built, model, x, config))
            assert ours <= 1.5 * torch_error, f"variant {config}: {ours:.3g} from exact, torch {torch_error:.3g}"
        assert not error(naive_layer_norm(x, model)) <= 1.0  # NaN or a relative error over 100%
