"""The CPU generator's window and scan ops against torch: direct convolutions (grouped, dilated,
strided, 1-d, 3-d, transposed), max/average pooling, cumsum (along rows and along a middle
dim), a convolution whose bias runs in the softmax after it, a Python float input, training-mode
normalisations, a ShuffleNet unit, numbers made in forward with torch.tensor and a concatenation,
each built from a real module's captured graph, every launch variant compared, and each
model_new.py checked to be valid Python. Some of them again at bf16 and fp16 (HALF_CASES)."""

import copy
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernelsmith.compiler import cpu  # noqa: E402
from kernelsmith.compiler.pipeline import build_plan  # noqa: E402
from kernelsmith.compiler.ir import Group  # noqa: E402
from kernelsmith.harness import build  # noqa: E402
from kernelsmith.harness.compare import tolerance_for  # noqa: E402
from kernelsmith.harness.loading import DTYPES  # noqa: E402

CASES = {  # module, input shape
    "grouped": ("nn.Conv2d(4, 6, (3, 2), stride=(1, 2), padding=(2, 1), dilation=2, groups=2)", (2, 4, 9, 11)),
    "conv1d": ("nn.Conv1d(3, 5, 4, stride=2, padding=1, bias=False)", (2, 3, 17)),
    "conv3d": ("nn.Conv3d(3, 4, (2, 3, 2), stride=(1, 2, 1), padding=(1, 0, 1), dilation=(2, 1, 1))", (2, 3, 5, 6, 5)),
    "conv1x1": ("nn.Conv2d(5, 7, 1)", (2, 5, 6, 7)),  # BLAS reads x as its own columns
    "transposed": ("nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), output_padding=(1, 0), groups=2, "
                   "dilation=(1, 2))", (2, 4, 5, 6)),
    "transposed3d": ("nn.ConvTranspose3d(2, 3, 3, stride=2, padding=1)", (1, 2, 3, 4, 3)),
    "maxpool": ("nn.MaxPool2d(3, stride=2, padding=1, dilation=2, ceil_mode=True)", (2, 3, 11, 10)),
    "avgpool": ("nn.AvgPool2d((3, 2), stride=2, padding=1, count_include_pad=False, ceil_mode=True)", (2, 3, 9, 8)),
    "avgpool3d": ("nn.AvgPool3d(2, padding=1, divisor_override=3)", (1, 2, 5, 4, 3)),
    "maxpool3d": ("nn.MaxPool3d((2, 3, 2), stride=1, padding=1)", (1, 2, 4, 5, 3)),
    "cumsum_rows": ("Cumsum(1)", (3, 700)),
    "cumsum_middle": ("Cumsum(1)", (2, 50, 7)),
    "masked_cumsum": ("MaskedCumsum((3, 70))", (3, 70)),  # a bool buffer read as 0 or 1
    "conv_softmax": ("ConvSoftmax()", (2, 3, 7, 6)),  # two kernels: the conv's bias moves into the softmax
    "float_input": ("Scaled()", (4, 33), 0.75),  # forward(x, s) with s a Python float, passed by value
    # normalisations in training mode, with intermediates recomputed instead of stored (remat.py)
    "group_norm": ("nn.GroupNorm(3, 6)", (2, 6, 5, 4)),
    "batch_norm": ("nn.BatchNorm2d(4)", (3, 4, 5, 6)),
    "instance_norm": ("nn.InstanceNorm2d(4)", (2, 4, 7, 5)),
    # its affine weight and bias repeated per sample (aten.repeat, decomposed to an expand and a copy)
    "instance_norm_affine": ("RandomInstanceNorm(4)", (2, 4, 7, 5)),
    # two batch norms whose `x - mean` an earlier kernel also makes: the later one is dropped, not
    # emitted as a kernel with no outputs (ShuffleNet's unit; nn.Sequential children reached by getattr)
    "shuffle_unit": ("ShuffleUnit()", (2, 6, 5, 5)),
    # level2/93's torch.min(x, torch.tensor(0.0)): the constant inlined as a number
    "literal_min": ("LiteralMin()", (3, 40)),
    # torch.cat of a conv, a pooled and an activated branch and the input again (an inception module)
    "cat": ("Inception()", (2, 3, 6, 5)),
    # pointwise runs (cpu/elementwise.py): a row bias read contiguously along the run, a per-channel scale
    # broadcast over the run, a permuted input read through its stride, a run of several dims
    "row_bias_gelu": ("RowBiasGelu(33)", (70, 33)),
    "channel_scale": ("ChannelScale(3)", (2, 3, 5, 7)),
    "permuted": ("Permuted()", (3, 40, 6)),
    "dense_3d": ("nn.GELU()", (4, 16, 32)),
    # LayerNorm (compiler/decompositions.py): over the last dim, and over two trailing dims with no affine
    "layer_norm": ("RandomLayerNorm(7)", (3, 5, 7)),
    "layer_norm_2d": ("nn.LayerNorm((5, 4), elementwise_affine=False)", (2, 6, 5, 4)),
    # bools made in forward, computed as 0.0/1.0 inside one kernel: a negated mask into masked_fill and a
    # softmax (the masked_row_softmax example), comparisons into where and into a product
    "masked_softmax": ("MaskedSoftmax((3, 40))", (3, 40)),
    # a float32 row softmax (vectorised passes; its exponentials kept in the output between them) with a scale
    # before it and tanh after it, over rows longer than a vector and not a multiple of one
    "softmax_rows": ("TemperatureSoftmax(0.7)", (6, 301)),
    "compare": ("Compare()", (4, 50)),
    # scaled_dot_product_attention with a bool mask made in forward that hides every key from about a quarter
    # of the query rows (their output is 0: _safe_softmax, kept whole) and hides the first keys of others
    # (an online softmax must not compute exp(-inf - -inf))
    "attention": ("Attention()", (2, 3, 8, 8)),
    # GEMM operands that are views (a transposed activation, MultiheadAttention's head split): read in place
    # through their matrix layouts (tests/test_builtin_gemm_layouts.py; once copied dense, once refused)
    "transposed_bmm": ("TransposedBmm()", (3, 6, 5)),
    "multihead": ("MultiHead(8, 2)", (5, 2, 8)),
    # pooling that computes its operand where it reads it (the pool's prologue): a convolution's bias and
    # activation (average pooling whose padding counts zeros of the activated value), a pointwise chain with a
    # per-channel weight (3-d), a transposed view read through its strides; and the two that must not move: an
    # activation something else also reads, and windows that overlap nine times; and a prologue's per-channel
    # weight that an op after the pool reads too: that op may not join the pool as its epilogue (an input read
    # at in_shape is not also read at out_shape) and runs in a kernel of its own
    "conv_avgpool": ("ConvAvgPool()", (2, 3, 9, 10)),
    "channel_pool3d": ("ChannelPool3d(3)", (2, 3, 5, 6, 4)),
    "permuted_pool": ("PermutedPool()", (2, 3, 7, 8)),
    "shared_pool": ("SharedPool()", (2, 3, 6, 6)),
    "overlapping_pool": ("OverlappingPool()", (2, 3, 6, 5)),
    "pool_weight_after": ("PoolWeightAfter()", (2, 3, 6, 6)),
}

MODULES = """
class ConvAvgPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.nn.functional.avg_pool2d(torch.sigmoid(self.conv(x)), 3, stride=2, padding=1)


class ChannelPool3d(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w = nn.Parameter(torch.randn(c, 1, 1, 1))

    def forward(self, x):
        return torch.max_pool3d(torch.relu(x * self.w + 0.1), 2, padding=1)


class PermutedPool(nn.Module):
    def forward(self, x):
        return torch.max_pool2d(x.transpose(2, 3), (2, 3), stride=2)


class SharedPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return torch.max_pool2d(y, 2) + y.mean()


class OverlappingPool(nn.Module):
    def forward(self, x):
        return torch.max_pool2d(torch.relu(x) * 2.0, 3, stride=1, padding=1)


class PoolWeightAfter(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 1, 1))

    def forward(self, x):
        return torch.max_pool2d(x * self.w, 2) + self.w


class Cumsum(nn.Module):
    # cumsum(x / 2) along dim: the scan gets a prologue here, and tanh and * 2 after it
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x * 0.5, self.dim)


class ShuffleUnit(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(6, 12, 1, groups=3, bias=False)
        self.bn1 = nn.BatchNorm2d(12)
        self.conv3 = nn.Conv2d(12, 12, 1, groups=3, bias=False)
        self.bn3 = nn.BatchNorm2d(12)
        self.shortcut = nn.Sequential(nn.Conv2d(6, 12, 1, bias=False), nn.BatchNorm2d(12))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn3(self.conv3(out)))
        return out + self.shortcut(x)


class MaskedCumsum(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.register_buffer("mask", torch.rand(shape) > 0.5)

    def forward(self, x):
        return torch.cumsum(x * self.mask, 1)


class ConvSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.softmax(self.conv(x), dim=1)


class Inception(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=1, padding=1)

    def forward(self, x):
        return torch.cat([self.conv(x), self.pool(x), torch.relu(x) * 2.0, x], dim=-3)


class LiteralMin(nn.Module):
    def forward(self, x):
        x = torch.min(x + 0.5, torch.tensor(0.25, device=x.device))
        return torch.nn.functional.gelu(x) * torch.tensor(2.0, device=x.device)


class RowBiasGelu(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return torch.nn.functional.gelu(x + self.bias) * 1.7


class ChannelScale(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.register_buffer("scale", torch.randn(c, 1, 1))

    def forward(self, x):
        return torch.nn.functional.gelu(x * self.scale - 0.5)


class Permuted(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x.permute(0, 2, 1) * 3.0)


class RandomLayerNorm(nn.LayerNorm):
    # weight and bias drawn, not ones and zeros: the affine step must show in the output
    def __init__(self, n):
        super().__init__(n)
        nn.init.normal_(self.weight)
        nn.init.normal_(self.bias)


class RandomInstanceNorm(nn.InstanceNorm2d):
    def __init__(self, n):
        super().__init__(n, affine=True)
        nn.init.normal_(self.weight)
        nn.init.normal_(self.bias)


class MaskedSoftmax(nn.Module):
    def __init__(self, shape):
        super().__init__()
        mask = torch.rand(shape) > 0.3
        mask[:, 0] = True
        self.register_buffer("mask", mask)

    def forward(self, x):
        return torch.softmax((x / 0.5).masked_fill(~self.mask, float("-inf")), dim=-1)


class TemperatureSoftmax(nn.Module):
    def __init__(self, t):
        super().__init__()
        self.t = t

    def forward(self, x):
        return torch.softmax(x / self.t, dim=-1)


class Compare(nn.Module):
    # one chain, so every bool stays in its kernel (two independent chains would need a bool stored between
    # kernels, which the partitioner refuses with its reason)
    def forward(self, x):
        y = x * 0.5
        return torch.where(y > 0.15, y, y * 0.25) * (y <= 0.5) + (y != 0.0)


class LinearSoftmax(nn.Module):
    # a GEMM with its bias and an epilogue, into a softmax
    def __init__(self, k, n):
        super().__init__()
        self.lin = nn.Linear(k, n)
    def forward(self, x):
        return torch.softmax(torch.nn.functional.gelu(self.lin(x)) * 2.0, dim=-1)

class ConvPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
    def forward(self, x):
        return torch.max_pool2d(torch.relu(self.conv(x)), 2).sum(dim=(2, 3), keepdim=True) * x.mean()

class Scaled(nn.Module):
    def forward(self, x, s):
        return torch.relu(x * s) + s

class TransposedBmm(nn.Module):
    def forward(self, x):
        return torch.bmm(x.transpose(1, 2), torch.relu(x))

class MultiHead(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads)
    def forward(self, x):
        return self.attn(x, x, x)[0]

class Attention(nn.Module):
    def forward(self, x):
        return torch.nn.functional.scaled_dot_product_attention(x, torch.tanh(x), x * x, attn_mask=x > 1.0)
"""
# Captured at bf16 or fp16 (Model and its inputs cast, as the harness runs them): every value stored at that
# dtype, computed in float; held to the precision's tolerance against fp32 torch on the same rounded weights and
# inputs. A GEMM, a convolution, pooling, reductions, a scan, a concatenation, normalisations and a bool mask.
HALF_CASES = {  # module, input shape, precision
    "linear_softmax_bf16": ("LinearSoftmax(33, 20)", (7, 33), "bf16"),
    "conv_pool_bf16": ("ConvPool()", (2, 3, 8, 8), "bf16"),
    "cumsum_bf16": ("Cumsum(1)", (3, 70), "bf16"),
    "batch_norm_bf16": ("nn.BatchNorm2d(4)", (3, 4, 5, 6), "bf16"),
    "masked_softmax_bf16": ("MaskedSoftmax((3, 40))", (3, 40), "bf16"),
    "layer_norm_fp16": ("RandomLayerNorm(7)", (3, 5, 7), "fp16"),
    "cat_fp16": ("Inception()", (2, 3, 6, 5), "fp16"),
}
NAMESPACE = {"torch": torch, "nn": torch.nn}
exec(MODULES, NAMESPACE)  # the same classes the task files define, for the reference


def _task(folder: Path, module: str, shape, *floats) -> Path:
    path = folder / "model.py"
    path.write_text("import torch\nimport torch.nn as nn\n" + MODULES + textwrap.dedent(f"""

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.m = {module}

            def forward(self, x, *rest):
                return torch.tanh(self.m(x, *rest)) * 2.0

        def get_inputs():
            return [torch.randn{tuple(shape)}, *{list(floats)}]

        def get_init_inputs():
            return []
    """))
    return path


GENERATED: dict[str, str] = {}  # each case's generated C++, for the checks of which loops it took


def _build_all(root: Path):
    """Every case's kernels (renamed apart) in one source file of one CPU extension: the torch
    headers are parsed once, which is most of the build time."""
    (root / "kernels").mkdir()
    plans, sources = {}, []
    for i, (name, module, shape, floats, precision) in enumerate(_all_cases()):
        (root / name).mkdir()
        plan = build_plan(_task(root / name, module, shape, *floats), "cpu", precision)
        assert not plan.unsupported, plan.unsupported
        assert all(group.outputs for group in plan.plan.groups()), f"{name}: a kernel with no outputs"
        compile(plan.model_new([0] * len(plan.variants)), f"{name}/model_new.py", "exec")  # what the session runs
        for j, group in enumerate(plan.plan.groups()):
            group.name = f"c{i}_{j}_{group.kind}"
            made = cpu.generate(group, plan.plan.values)
            sources += made.files.values()
            GENERATED[name] = GENERATED.get(name, "") + "\n".join(made.files.values())
        plans[name] = (plan.plan, max(len(v) for v in plan.variants))
    (root / "kernels" / "convs.cpp").write_text("\n".join(sources))
    result = build.build(root / "kernels", "cpu", build_dir=root / "build")
    assert result.ok, result.summary
    return build.import_extension(result.so_path, result.name), plans


def _all_cases():
    """(name, module, input shape, float inputs, precision): CASES at fp32, then HALF_CASES."""
    for name, (module, shape, *floats) in CASES.items():
        yield name, module, shape, floats, "fp32"
    for name, (module, shape, precision) in HALF_CASES.items():
        yield name, module, shape, [], precision


def _inputs(module, plan, forward_args) -> dict:
    """What the plan reads, by value name: forward's arguments, parameters (a bias also as
    [C, 1, ...]), buffers."""
    args = {value.name: arg for value, arg in zip(plan.inputs, forward_args)}
    x = forward_args[0]
    for name, param in module.named_parameters():
        key = "p_m_" + name.replace(".", "_")
        args[key] = param
        args[key + "_as_channels"] = param.view(-1, *[1] * (x.dim() - 2))
    args.update({"b_m_" + name.replace(".", "_"): buffer for name, buffer in module.named_buffers()})
    return args


def _run(ext, plan, args: dict, config: int) -> torch.Tensor:
    """The plan's views and kernels in order, each kernel at `config` (every CPU kernel has the
    same schedules)."""
    values = dict(args)
    for step in plan.prelude + plan.steps:
        if not isinstance(step, Group):  # a view, as model_new.py takes it
            values[step.out.name] = step.view.apply(values[step.source])
            continue
        got = getattr(ext, step.name)(*[values[v.name] for v in step.inputs], config)
        values.update(zip([o.name for o in step.outputs], [got] if len(step.outputs) == 1 else got))
    return values[plan.outputs[0]]


SCANS = {"cumsum_rows": 1, "cumsum_middle": 1, "masked_cumsum": 1}  # case: the dim it scans
U = 2.0 ** -24  # fp32's unit roundoff


def scan_atol(terms: torch.Tensor, dim: int, lam: float = 4.0) -> torch.Tensor:
    """What an fp32 scan of `terms` along `dim`, in any order, may be off by: each of the n
    additions rounds a partial sum (of a block, or of the whole prefix) with a relative error
    within u, so the error at the end is a sum of n terms each within u * max|partial sum|;
    with random signs, lam * u * sqrt(n) * 2 max|S| (blocked partial sums are within twice the
    prefix sums; lam = 4 is 7 standard deviations of the sum of n uniform errors). The bound
    grows with the summation length; a fixed atol does not, and a 700-term scan of this test
    once was 2.5e-5 off against 1e-5 allowed (rtol did not help: the error sits where tanh
    crosses zero)."""
    n = terms.shape[dim]
    partial = torch.cumsum(terms.double(), dim).abs().amax(dim, keepdim=True)
    return lam * U * n ** 0.5 * 2.0 * partial


def test_every_variant_of_every_window_and_scan_op_matches_torch(tmp_path, monkeypatch):
    """One test, not one per case: under pytest-xdist each worker would build the extension. The BLAS
    convolutions' column tiles are shrunk to a few output lines, so that these small cases take several tiles
    and a short last one, as a real image does."""
    from kernelsmith.compiler.cpu import spatial

    monkeypatch.setattr(spatial, "COLUMN_TILE_BYTES", 1200)
    torch.manual_seed(0)  # the modules' weights and the inputs: a failure can be rerun
    ext, plans = _build_all(tmp_path)
    assert [len(plans[name][0].groups()) for name in ("grouped", "conv_softmax")] == [1, 2]
    # the fast paths these cases exist for were taken: the softmax's exponentials kept in its output between
    # passes, and the LayerNorm's weight read at the row's base plus r (no division per element)
    assert "s += e;" in GENERATED["softmax_rows"] and "s += e;" not in GENERATED["masked_softmax"]
    assert "[b1 + r]" in GENERATED["layer_norm"]
    # float32 convolutions multiply with BLAS in their first variant (a 1x1 one reads x as its columns); a
    # transposed one gathers
    assert all("sgemm_(" in GENERATED[name] and "ks_col[" not in GENERATED[name] for name in ("grouped", "conv1x1"))
    assert "ks_col.data()" in GENERATED["grouped"] and "ks_col.data()" not in GENERATED["conv1x1"]
    assert "l0 += 4LL" in GENERATED["grouped"]  # 9 output lines of 288 bytes of columns: tiles of 4, 4 and 1
    assert "sgemm_(" not in GENERATED["transposed"]
    # pooling's first variant walks output lines, each window tap a simd loop whose range leaves out the padding
    assert all("acc[o2 - t0] = (x > acc[o2 - t0]" in GENERATED[name] for name in ("maxpool", "maxpool3d"))
    assert all("acc[o2 - t0] += x;" in GENERATED[name] for name in ("avgpool", "avgpool3d", "conv_avgpool"))
    # which pools compute their operand where they read it (a prologue), and in how many kernels
    pools = {name: next(g for g in plans[name][0].groups() if g.kind == "pool") for name in CASES if "pool" in name}
    moved = {name for name, group in pools.items() if group.prologue}
    assert moved == {"conv_avgpool", "channel_pool3d", "permuted_pool", "pool_weight_after"}, moved
    assert [len(plans[name][0].groups()) for name in ("conv_avgpool", "channel_pool3d", "permuted_pool")] == [2, 1, 1]
    assert not pools["pool_weight_after"].epilogue and len(plans["pool_weight_after"][0].groups()) == 2
    for name, (module_source, shape, *floats) in CASES.items():
        module = eval(module_source, NAMESPACE)
        forward_args = [torch.randn(*shape), *floats]
        expected = torch.tanh(module(*forward_args)) * 2.0
        plan, variants = plans[name]
        assert [v.scalar for v in plan.inputs] == [False] + [True] * len(floats)
        with torch.no_grad():
            for config in range(variants):
                got = _run(ext, plan, _inputs(module, plan, forward_args), config)
                if name in SCANS:
                    _assert_scan_close(name, config, module, forward_args[0], got)
                else:
                    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5,
                                               msg=lambda m: f"{name} variant {config}: {m}")
    for name in HALF_CASES:
        _assert_half_case_close(ext, name, *plans[name])


def _assert_half_case_close(ext, name: str, plan, variants: int) -> None:
    """Every variant within the precision's tolerance of fp32 torch on the same rounded weights and input,
    stored at the precision's dtype; a float32 input is refused by the binding's dtype check."""
    module_source, shape, precision = HALF_CASES[name]
    dtype = DTYPES[precision]
    module = eval(module_source, NAMESPACE).to(dtype)
    x = torch.randn(*shape).to(dtype)
    tol = tolerance_for(dtype, precision)
    with torch.no_grad():
        expected = torch.tanh(copy.deepcopy(module).float()(x.float())) * 2.0
        for config in range(variants):
            got = _run(ext, plan, _inputs(module, plan, [x]), config)
            assert got.dtype == dtype, f"{name} variant {config}: {got.dtype}"
            torch.testing.assert_close(got.float(), expected, rtol=tol.rtol, atol=tol.atol,
                                       msg=lambda m: f"{name} variant {config}: {m}")
        _assert_refuses_float32(ext, plan, _inputs(module, plan, [x]), str(dtype).removeprefix("torch."))


def _assert_refuses_float32(ext, plan, args: dict, dtype: str) -> None:
    """The first kernel, given its first `dtype` input as float32, raises the binding's one-line error."""
    values = dict(args)
    for view in plan.prelude:
        values[view.out.name] = view.view.apply(values[view.source])
    group = plan.groups()[0]
    i = next(i for i, v in enumerate(group.inputs) if v.dtype == dtype)
    wrong = [values[v.name].float() if j == i else values[v.name] for j, v in enumerate(group.inputs)]
    with pytest.raises(RuntimeError, match=f"input {i} \\({group.inputs[i].name}\\) must be {dtype}"):
        getattr(ext, group.name)(*wrong, 0)


def _assert_scan_close(name: str, config: int, module, x: torch.Tensor, got: torch.Tensor) -> None:
    """Against the exact (float64) answer, within the fp32 error a scan of this length may have:
    tanh(S) * 2 moves by at most 2 |dS|; rtol covers tanh's and the prologue's own rounding."""
    dim = SCANS[name]
    terms = x * module.mask if hasattr(module, "mask") else x * 0.5  # what the module scans
    exact = torch.tanh(module.double()(x.double())) * 2.0
    module.float()
    allowed = 2.0 * scan_atol(terms, dim) + 1e-6 * exact.abs()
    err = (got.double() - exact).abs()
    worst = float((err / allowed).max())
    assert worst <= 1.0, (f"{name} variant {config}: {int((err > allowed).sum())} of {err.numel()} elements "
                          f"beyond the scan's fp32 error bound (worst at {worst:.3g} of it, max err "
                          f"{float(err.max()):.3g})")
    # the bound is not vacuous: torch's own scan is within it, and a scan that counts one term
    # twice is far outside it
    assert float(((torch.tanh(module(x)) * 2.0).double() - exact).abs().div(allowed).max()) <= 1.0
    off_by_a_term = torch.tanh(torch.cumsum(terms.double(), dim) + terms.double().abs().max()) * 2.0
    assert float((off_by_a_term - exact).abs().div(allowed).max()) > 100


EDGE_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return {expr}

def get_inputs():
    return [torch.randn(4, 1024)]

def get_init_inputs():
    return []
"""
EDGES = [float("nan"), float("inf"), -float("inf"), 88.72, 88.73, 89.0, -87.3, -87.4, -100.0, 0.0, 1e-30, -1e-30,
         3.99, 4.01, -4.01, 20.0, -20.0, 0.6249, 0.625, 0.6251, -0.625, 1e-4, -1e-4, 9.0, -9.0]


def _edge_kernels(tmp_path, expr: str, uses: str):
    """The CPU kernels of `forward: return expr`, built; their source uses `uses`, and libm's name of it not."""
    task = tmp_path / "edges" / "model.py"
    task.parent.mkdir()
    task.write_text(EDGE_TASK.format(expr=expr))
    plan = build_plan(task, "cpu", "fp32")
    for group in plan.plan.groups():  # one process loads both tests' extensions: bindings named apart
        group.name = f"{uses.replace(' ', '_')}_{group.name}"
    source = "\n".join(text for g in plan.plan.groups() for text in cpu.generate(g, plan.plan.values).files.values())
    for name in uses.split():
        assert f"ks_{name}(" in source and f" {name}(" not in source and f"({name}(" not in source
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "edges.cpp").write_text(source)
    result = build.build(tmp_path / "kernels", "cpu", build_dir=tmp_path / "build")
    assert result.ok, result.summary
    torch.manual_seed(0)
    x = torch.cat([torch.tensor(EDGES), torch.linspace(-90, 90, 4096 - len(EDGES) - 1000), torch.randn(1000) * 3])
    return build.import_extension(result.so_path, result.name), plan, x.reshape(4, 1024)


def test_the_cpu_targets_own_exp_and_erf_match_libm_at_the_edges(tmp_path):
    """ks_expf and ks_erff (text/header.h) replace libm's calls so that loops vectorise: they must still give
    inf on overflow, 0 on underflow, keep NaN, and be within fp32 rounding of torch everywhere in between."""
    ext, plan, x = _edge_kernels(tmp_path, "torch.exp(x) + torch.sigmoid(x) + torch.erf(x) * 3.0", "expf erff")
    expected = torch.exp(x) + torch.sigmoid(x) + torch.erf(x) * 3.0
    for config in range(len(plan.variants[0])):
        got = _run(ext, plan.plan, {plan.plan.inputs[0].name: x}, config)
        torch.testing.assert_close(got, expected, rtol=2e-6, atol=2e-6, equal_nan=True,
                                   msg=lambda m: f"variant {config}: {m}")


def test_the_cpu_targets_own_tanh_matches_torch_on_both_sides_of_its_switch(tmp_path):
    """ks_tanhf: Cephes's polynomial below |x| = 0.625 and 1 - 2 / (exp(2|x|) + 1) above, within fp32
    rounding of torch's tanh (relative, down to 1e-30, where a cancelling formula would be far off); +-1 at
    +-inf and NaN kept."""
    ext, plan, x = _edge_kernels(tmp_path, "torch.tanh(x)", "tanhf")
    for config in range(len(plan.variants[0])):
        got = _run(ext, plan.plan, {plan.plan.inputs[0].name: x}, config)
        torch.testing.assert_close(got, torch.tanh(x), rtol=3e-7, atol=1e-38, equal_nan=True,
                                   msg=lambda m: f"variant {config}: {m}")
