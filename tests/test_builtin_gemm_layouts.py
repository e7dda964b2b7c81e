"""GEMM operands read where they lie (ir.MatrixLayout, layout.matrix_layout): a transposed view, rows a
leading dimension apart, a batch stride (0 for an expanded weight) go to cuBLAS and to the CPU's loops
as they are, with no copy kernel; only a view no layout describes is still copied dense.

Each case is a real module captured into a plan: on the CPU target every launch variant matches torch,
and the plan has fewer kernels and moves fewer bytes than the same plan with every strided operand
copied dense. The CUDA files of the same plans compile with nvcc (the cuBLAS ones where cublas_v2.h is:
$CUBLAS_INCLUDE_DIR); tests/gpu/test_builtin_cuda_gpu.py runs them (CASES, MODULES) against torch."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernelsmith.compiler import cpu, layout  # noqa: E402
from kernelsmith.compiler.ir import ConvGroup, GemmGroup, MatrixLayout, Plan, PointwiseGroup  # noqa: E402
from kernelsmith.compiler.pipeline import build_plan  # noqa: E402
from kernelsmith.harness import build  # noqa: E402

import plan_runner  # noqa: E402

MODULES = """
class Scores(nn.Module):
    # q @ k^T of two kernels' outputs, batched over two dims: k's transpose is read column-major
    def forward(self, x):
        return torch.tanh(x) @ torch.sigmoid(x).transpose(-1, -2)

class InputScores(nn.Module):
    # x @ x^T of forward's input: the transposed view is taken before the kernels
    def forward(self, x):
        return torch.bmm(x, x.transpose(1, 2))

class ExpandedWeight(nn.Module):
    # weight.expand(B, ...): batch stride 0, and one GEMM of B * m rows instead of B small ones
    def __init__(self, k, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(k, n) / k ** 0.5)
    def forward(self, x):
        return torch.bmm(x, self.w.expand(x.shape[0], -1, -1))

class PermutedLinear(nn.Module):
    # level3/31's in-projection: a linear of a permuted 3-d input is a bmm with W^T expanded over the
    # batch (read in place) and the permuted input (no layout: neither of its matrix dims is unit stride)
    def __init__(self, k, n):
        super().__init__()
        self.lin = nn.Linear(k, n)
    def forward(self, x):
        return self.lin(x.permute(2, 0, 1))

class AddmmTransposed(nn.Module):
    # addmm(bias, x^T, W^T): a transposed activation (column-major a) and a transposed weight
    def __init__(self, k, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, k) / k ** 0.5)
        self.b = nn.Parameter(torch.randn(n))
    def forward(self, x):
        return torch.addmm(self.b, torch.relu(x).t(), self.w.t())

class Attention(nn.Module):
    # scaled_dot_product_attention scales q and k^T by 1 / sqrt(sqrt(d)) each: both scales become the
    # first GEMM's alpha (passes/gemm_scale.py), which then reads q and k^T where they lie
    def forward(self, x):
        return torch.nn.functional.scaled_dot_product_attention(x, torch.tanh(x), x * x)

class MaskedAttention(nn.Module):
    # the same with a bool mask made in forward, fused into the softmax kernel
    def forward(self, x):
        return torch.nn.functional.scaled_dot_product_attention(x, torch.tanh(x), x * x, attn_mask=x > -0.5)

class DividedOperand(nn.Module):
    # (x / 4) @ x^T: the division is the GEMM's alpha, 0.25
    def forward(self, x):
        return torch.bmm(x / 4.0, x.transpose(1, 2))

class SharedScale(nn.Module):
    # x * 0.5 feeds the GEMM and a sum: it stays a kernel, and the GEMM's alpha 1
    def forward(self, x):
        y = x * 0.5
        return torch.bmm(y, x.transpose(1, 2)) + y.sum()

class GemmSum(nn.Module):
    # level2/14's pattern: the sum over the features of (x W^T + b) / 2, scaled, is a GEMM against the summed
    # weight and bias (passes/gemm_reduce.py): [M, K] @ [K, 1]
    def __init__(self, k, n):
        super().__init__()
        self.lin = nn.Linear(k, n)
    def forward(self, x):
        return torch.sum(self.lin(x) / 2.0, dim=1, keepdim=True) * 1.5

class MatmulMean(nn.Module):
    # the mean over the last dim of x W^T, the dim dropped
    def __init__(self, k, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, k) / k ** 0.5)
    def forward(self, x):
        return (x @ self.w.t()).mean(-1)

class GemmSumShared(nn.Module):
    # the product is read by the sum and by the add: it stays a GEMM of every output feature
    def __init__(self, k, n):
        super().__init__()
        self.lin = nn.Linear(k, n)
    def forward(self, x):
        y = self.lin(x)
        return y + y.sum(1, keepdim=True)

class GemmNotFolded(nn.Module):
    # what the rewrite must leave alone, each on a product of its own: a sum over the batch (dim 0), a scaled
    # product read twice, and 2 / y (exported as reciprocal(y) * 2: a scaling of something that is not the product)
    def __init__(self, k, n):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(k, n), nn.Linear(k, n), nn.Linear(k, n)
    def forward(self, x):
        s = self.b(x) * 0.5
        return self.a(x).sum(0) + (s.sum(1, keepdim=True) + s) + (2.0 / self.c(x)).sum(1, keepdim=True)

class ColumnNorm(nn.Module):
    # the root mean square down each of 100 columns, plus 1: a reduction with a prologue down many columns,
    # blocks of 64 of them accumulated together on the CPU (the last block 36 wide)
    def forward(self, x):
        return torch.sqrt((x * x).mean(0)) + 1.0

class ConvTMeanDepth(nn.Module):
    # level2/13's pattern: the mean over depth of a padded stride-1 ConvTranspose3d and its bias is a
    # ConvTranspose2d over 3 times the input channels (passes/conv_reduce.py)
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose3d(3, 5, 3, padding=1)
    def forward(self, x):
        return self.conv(x).mean(dim=2, keepdim=True)

class ConvSumWidth(nn.Module):
    # a sum over the width (not the first spatial dim: the weight's taps are permuted next to its channels) of
    # a padded, dilated Conv2d with no bias, scaled on the way: a Conv1d over the height
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=(1, 2), dilation=(1, 2), bias=False)
    def forward(self, x):
        return (self.conv(x) * 0.5).sum(-1)

class ConvTMeanHeight(nn.Module):
    # stride 2 along the width, 1 along the height it averages, padding 2; then a number added on the way
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(3, 4, 3, stride=(1, 2), padding=(2, 0))
    def forward(self, x):
        return (self.conv(x) + 1.0).mean(2)

class Conv3dMeanHeight(nn.Module):
    # a dilated Conv3d (padding 2, dilation 2) averaged over its height: a Conv2d over depth and width
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(2, 3, 3, padding=2, dilation=2)
    def forward(self, x):
        return self.conv(x).mean(3)

class ConvNotFolded(nn.Module):
    # left alone, each a convolution of its own: stride 2 along the dim, a ReLU between, the output read twice,
    # groups, and the bias under a sum (it would count 5 times)
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 4, 3, stride=2, padding=1)
        self.b, self.c = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.d, self.e = nn.Conv2d(4, 4, 3, padding=1, groups=2), nn.Conv2d(4, 4, 3, padding=1)
    def forward(self, x):
        c = self.c(x)
        return (self.a(x).mean(2).mean(-1, keepdim=True) + torch.relu(self.b(x)).mean(2) + (c.mean(2) + c.sum(2))
                + self.d(x).mean(2) + self.e(x).sum(2))

class GroupNormScaled(nn.Module):
    # level2/85's pattern: GroupNorm computes in [N, G, C/G, H*W] and views its result back; the per-channel scale
    # and shift and the ReLU after the view move before it, into the GroupNorm kernel (passes/view_sink.py)
    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(4, 8)
        self.scale, self.shift = nn.Parameter(torch.randn(8, 1, 1)), nn.Parameter(torch.randn(1, 8, 1, 1))
    def forward(self, x):
        return torch.relu(self.norm(x) * self.scale + self.shift)

class GroupNormNotSunk(nn.Module):
    # left after the view: an add of a whole tensor (x itself) and a mul by a row varying along the width only
    # (the width is half of a source dim's group, H*W)
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.GroupNorm(4, 8), nn.GroupNorm(4, 8)
        self.row = nn.Parameter(torch.randn(5))
    def forward(self, x):
        return (self.a(x) + x) + self.b(x) * self.row

class ConvSigmoidGroupNorm(nn.Module):
    # level2/21's pattern: a convolution, its bias, an add, a scale and a sigmoid, then GroupNorm, which reads in
    # [N, G, C/G, H*W]: the ops move after that view, into the GroupNorm kernel (passes/view_hoist.py)
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bias, self.scale = nn.Parameter(torch.randn(8, 1, 1)), nn.Parameter(torch.randn(8, 1, 1))
        self.norm = nn.GroupNorm(4, 8)
    def forward(self, x):
        return self.norm(torch.sigmoid((self.conv(x) + self.bias) * self.scale))

class LinearSwishGroupNorm(nn.Module):
    # level2/37's: a GEMM's swish and a bias before GroupNorm of [N, C] rows
    def __init__(self, k, n):
        super().__init__()
        self.lin, self.bias, self.norm = nn.Linear(k, n), nn.Parameter(torch.randn(n)), nn.GroupNorm(3, n)
    def forward(self, x):
        y = self.lin(x)
        return self.norm(torch.sigmoid(y) * y + self.bias)

class Heads(nn.Module):
    # nn.MultiheadAttention: the head split's q, k^T and v are strided batches read in place
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads)
    def forward(self, x):
        return self.attn(x, x, x)[0]
"""

CASES = {  # module, input shape, dense copies left for GEMM operands
    "scores": ("Scores()", (2, 3, 6, 5), 0),
    "input_scores": ("InputScores()", (3, 6, 5), 0),
    "expanded_weight": ("ExpandedWeight(5, 7)", (4, 6, 5), 0),
    "permuted_linear": ("PermutedLinear(6, 9)", (2, 6, 5), 1),
    "addmm_transposed": ("AddmmTransposed(6, 9)", (6, 5), 0),
    "multihead": ("Heads(8, 2)", (5, 2, 8), 0),
    "attention": ("Attention()", (2, 3, 8, 8), 0),
    "masked_attention": ("MaskedAttention()", (2, 3, 8, 8), 0),
    "divided_operand": ("DividedOperand()", (3, 6, 5), 0),
    "shared_scale": ("SharedScale()", (3, 6, 5), 0),
    "gemm_sum": ("GemmSum(6, 9)", (5, 6), 0),
    "matmul_mean": ("MatmulMean(6, 9)", (5, 6), 0),
    "gemm_sum_shared": ("GemmSumShared(6, 9)", (5, 6), 0),
    "wide_matmul_mean": ("MatmulMean(70, 9)", (5, 70), 0),
    "gemm_not_folded": ("GemmNotFolded(6, 9)", (5, 6), 0),
    "column_norm": ("ColumnNorm()", (33, 100), 0),
    "convt_mean_depth": ("ConvTMeanDepth()", (2, 3, 6, 5, 4), 0),
    "conv_sum_width": ("ConvSumWidth()", (2, 3, 7, 9), 0),
    "convt_mean_height": ("ConvTMeanHeight()", (2, 3, 6, 5), 0),
    "conv3d_mean_height": ("Conv3dMeanHeight()", (2, 2, 5, 6, 4), 0),
    "conv_not_folded": ("ConvNotFolded()", (2, 4, 5, 6), 0),
    "group_norm_scaled": ("GroupNormScaled()", (2, 8, 3, 5), 0),
    "group_norm_not_sunk": ("GroupNormNotSunk()", (2, 8, 3, 5), 0),
    "conv_group_norm_hoisted": ("ConvSigmoidGroupNorm()", (2, 3, 7, 6), 0),
    "linear_group_norm_hoisted": ("LinearSwishGroupNorm(9, 12)", (5, 9), 0),
}
CONV_REDUCED = ("convt_mean_depth", "conv_sum_width", "convt_mean_height", "conv3d_mean_height")
# their GEMMs read a dense operand and the summed weight, or nn.Linear's weight through trans_b: no copy to save
NOT_STRIDED = ("gemm_sum", "matmul_mean", "gemm_sum_shared", "wide_matmul_mean", "gemm_not_folded", "column_norm",
               *CONV_REDUCED, "conv_not_folded", "group_norm_scaled", "group_norm_not_sunk",
               "conv_group_norm_hoisted", "linear_group_norm_hoisted")
NAMESPACE = {"torch": torch, "nn": torch.nn}
exec(MODULES, NAMESPACE)  # the same classes the task files define, for the reference


def task_file(folder: Path, module: str, shape) -> Path:
    """A task file whose Model runs `module` and an epilogue after it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.py"
    path.write_text("import torch\nimport torch.nn as nn\n" + MODULES + textwrap.dedent(f"""

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.m = {module}

            def forward(self, x):
                return torch.tanh(self.m(x)) * 2.0

        def get_inputs():
            return [torch.randn{tuple(shape)}]

        def get_init_inputs():
            return []
    """))
    return path


def plan_of(folder: Path, name: str, device: str = "cpu"):
    module, shape, _ = CASES[name]
    built = build_plan(task_file(folder / name, module, shape), device, "fp32")
    assert not built.unsupported, built.unsupported
    return built


def dense_copies(plan: Plan) -> list[PointwiseGroup]:
    """The pointwise kernels that only copy a GEMM operand dense (Partitioner.dense)."""
    operands = {name for g in plan.groups() if isinstance(g, GemmGroup) for name in (g.a, g.b)}
    return [g for g in plan.groups() if isinstance(g, PointwiseGroup) and [op.name for op in g.body] == ["copy"]
            and g.outputs[0].name in operands]


def elements_moved(plan: Plan) -> int:
    return sum(g.elements_read() + sum(o.numel for o in g.outputs) for g in plan.groups())


def test_matrix_layouts_of_transposed_strided_and_expanded_views():
    assert layout.matrix_layout((4, 6), (6, 1)) == MatrixLayout(False, 6, 0, (6, 1))
    assert layout.matrix_layout((4, 6), (1, 4)) == MatrixLayout(True, 4, 0, (1, 4))
    assert layout.matrix_layout((8, 4, 6), (0, 6, 1)) == MatrixLayout(False, 6, 0, (0, 6, 1))  # expanded
    assert layout.matrix_layout((8, 32, 100), (4800, 1, 48)) == MatrixLayout(True, 48, 4800, (4800, 1, 48))
    assert layout.matrix_layout((8, 6, 1), (6, 1, 7)) == MatrixLayout(False, 1, 6, (6, 1, 7))  # a column: any stride
    assert layout.matrix_layout((16, 2, 128), (1, 2097152, 16384)) is None  # no unit stride: copied dense
    assert layout.matrix_layout((4, 6), (2, 1)) is None  # rows that overlap
    assert layout.matrix_layout((2, 3, 4, 6), (72, 24, 6, 1)) is None  # a batch over two dims


def test_strided_operands_feed_the_gemm_with_no_copy_kernel(tmp_path, monkeypatch):
    """Fewer kernels and fewer bytes than the same plans with every strided operand copied dense."""
    cases = {name: case for name, case in CASES.items() if name not in NOT_STRIDED}
    plans = {name: plan_of(tmp_path, name).plan for name in cases}
    monkeypatch.setattr(layout, "matrix_layout", lambda shape, strides: None)
    copied = {name: plan_of(tmp_path / "copied", name).plan for name in cases}
    for name, (_, _, copies_left) in cases.items():
        plan, before = plans[name], copied[name]
        assert len(dense_copies(plan)) == copies_left, name
        assert len(plan.groups()) == len(before.groups()) - len(dense_copies(before)) + copies_left, name
        assert len(plan.groups()) < len(before.groups()) and elements_moved(plan) < elements_moved(before), name


def test_an_expanded_weight_makes_one_gemm_of_batch_times_m_rows(tmp_path):
    (gemm,) = [g for g in plan_of(tmp_path, "expanded_weight").plan.groups() if isinstance(g, GemmGroup)]
    assert (gemm.batch, gemm.m, gemm.n, gemm.k) == (1, 24, 7, 5) and gemm.a_layout is None
    assert gemm.b_layout == MatrixLayout(False, 7, 0, (0, 7, 1))
    assert gemm.elements_read() == 24 * 5 + 5 * 7  # the weight once, not once per batch


def test_attention_heads_are_read_as_strided_batches(tmp_path):
    gemms = [g for g in plan_of(tmp_path, "multihead").plan.groups() if isinstance(g, GemmGroup)]
    scores, context = [g for g in gemms if g.batch == 4]  # 2 sequences x 2 heads
    assert scores.b_layout.transposed and scores.b_layout.batch_stride == 4  # k^T: a column-major batch
    assert not context.b_layout.transposed and context.b_layout.ld == 16  # v: rows 16 apart, heads 4 apart


def test_attentions_scales_become_the_gemms_alpha(tmp_path):
    plan = plan_of(tmp_path, "attention").plan
    # tanh (k), x * x (v), q @ k^T, softmax, @ v: no kernel scales q or k, and the task's tanh(.) * 2 after the
    # output's reshape runs in the last GEMM's epilogue (passes/view_sink.py)
    assert [g.kind for g in plan.groups()] == ["pointwise", "pointwise", "gemm", "reduction", "gemm"]
    assert [op.name for op in plan.groups()[-1].epilogue] == ["tanh", "mul"]
    scores = plan.groups()[2]
    assert scores.a_layout is None and scores.b_layout.transposed and scores.alpha == pytest.approx(8 ** -0.5)
    assert plan.prelude[0].source == plan.inputs[0].name  # q is forward's input itself, viewed


def test_a_scale_moves_into_alpha_only_where_nothing_else_reads_it(tmp_path):
    (divided,) = plan_of(tmp_path, "divided_operand").plan.groups()  # the GEMM and its epilogue, nothing else
    assert divided.alpha == 0.25 and divided.b_layout.transposed
    shared = plan_of(tmp_path, "shared_scale").plan.groups()
    assert [g.kind for g in shared][:2] == ["pointwise", "gemm"] and shared[1].alpha == 1.0


def test_a_sum_over_a_gemms_features_is_a_gemm_against_the_summed_weight(tmp_path):
    """(x W^T + b).sum(1) = x (W^T 1) + b.sum(): the GEMM has one output column, the weight's and bias's sums
    are kernels of their own (run on every call, so new weights give new sums); not where another op reads the
    product. Every CPU variant is checked against torch in test_every_cpu_variant_matches_torch."""
    for name in ("gemm_sum", "matmul_mean"):
        groups = plan_of(tmp_path, name).plan.groups()
        (gemm,) = [g for g in groups if isinstance(g, GemmGroup)]
        assert (gemm.m, gemm.k, gemm.n) == (5, 6, 1), name
        assert sum(g.kind == "reduction" for g in groups) == (2 if name == "gemm_sum" else 1), name
    (shared,) = [g for g in plan_of(tmp_path, "gemm_sum_shared").plan.groups() if isinstance(g, GemmGroup)]
    assert shared.n == 9
    left = [g for g in plan_of(tmp_path, "gemm_not_folded").plan.groups() if isinstance(g, GemmGroup)]
    assert sorted(g.n for g in left) == [9, 9, 9]  # the batch sum, the shared scaling, 2 / y: none of one column


def test_a_mean_over_a_spatial_dim_of_a_stride_1_convolution_is_a_convolution_over_one_dim_fewer(tmp_path):
    """sum_o conv(x, W)[o] = sum_k W[k] * (x summed over tap k's range): one convolution over K times the input
    channels and one spatial dim fewer; not where the stride along the dim is 2, a ReLU comes between, the output
    is read twice, the convolution is grouped, or a bias would be summed. Every CPU variant matches torch
    (test_every_cpu_variant_matches_torch), and so every CUDA variant on the GPU."""
    for name in CONV_REDUCED:
        _, shape, _ = CASES[name]
        (conv,) = [g for g in plan_of(tmp_path, name).plan.groups() if isinstance(g, ConvGroup)]
        assert len(conv.out_shape) == len(shape) - 1, name
        assert conv.in_shape[1] == shape[1] * 3 and conv.groups == 1, (name, conv.in_shape)  # 3 taps each
    left = [g for g in plan_of(tmp_path, "conv_not_folded").plan.groups() if isinstance(g, ConvGroup)]
    assert len(left) == 5 and all(len(g.out_shape) == 4 and g.in_shape[1] == 4 for g in left)


def test_pointwise_ops_after_a_reshape_of_a_kernels_result_join_its_epilogue(tmp_path):
    """GroupNorm's scale, shift and ReLU after its view back to [N, C, H, W] run in the GroupNorm kernel, the
    scale and shift viewed to [1, G, C/G, 1]; an add of a whole tensor and a row varying along half of the
    source's H*W stay after the view. The model's tanh(.) * 2 follows in each (the task file's epilogue)."""
    (norm,) = plan_of(tmp_path, "group_norm_scaled").plan.groups()
    assert norm.kind == "reduction"
    assert [op.name for op in norm.broadcast_epilogue][-5:] == ["mul", "add", "relu", "tanh", "mul"]
    left = plan_of(tmp_path, "group_norm_not_sunk").plan.groups()
    assert [g.kind for g in left] == ["reduction", "pointwise", "reduction", "pointwise"]
    assert [[op.name for op in g.broadcast_epilogue][-1] for g in left if g.kind == "reduction"] == ["add", "add"]


def test_pointwise_ops_before_group_norms_view_run_in_its_kernel(tmp_path):
    """A convolution's and a GEMM's pointwise ops before GroupNorm run as the normalisation's prologue, in its
    [N, G, C/G, H*W] view: the library's own output is read twice (statistics, then the result) and the
    activation between them is never written, one pass fewer than the library's epilogue writing it."""
    for name, library, ops in (("conv_group_norm_hoisted", "conv", ["add", "add", "mul", "sigmoid"]),
                               ("linear_group_norm_hoisted", "gemm", ["sigmoid", "mul", "add"])):
        plan = plan_of(tmp_path, name).plan
        first, norm = plan.groups()
        assert first.kind == library and first.epilogue == [], name
        assert norm.reduce == "welford" and [op.name for op in norm.prologue] == ops, name
        # read through one view (swish reads the product twice: x * sigmoid(x) shares it)
        assert [v.numel for v in norm.inputs].count(first.outputs[0].numel) == 1, name
        assert len(norm.inputs[0].shape) in (3, 4), name


def test_cuda_bindings_check_the_strides_cublas_reads(tmp_path):
    built = plan_of(tmp_path, "addmm_transposed", "cuda")
    (gemm,) = [g for g in built.plan.groups() if isinstance(g, GemmGroup)]
    cublas, binding = built.files[f"{gemm.name}_gemm.cu"], built.files[f"{gemm.name}_binding.cpp"]
    # column-major C^T = op(B)^T op(A)^T: both operands transposed, a's leading dimension its 5 rows
    assert "cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_T, 9, 5, 6, &alpha, b, 6, a, 5, &beta, c, 9)" in cublas
    assert f"{gemm.name}: input {gemm.a} must have strides [1, 5]" in binding
    assert f"input {gemm.a} must be contiguous" not in binding


def test_cuda_strided_batches_and_a_shared_weight_go_to_cublas_as_they_lie(tmp_path):
    heads = plan_of(tmp_path, "multihead", "cuda")
    text = "\n".join(t for f, t in heads.files.items() if f.endswith("_gemm.cu"))
    # q (scaled through alpha) and k^T: heads 4 apart, rows 16 apart; k^T column-major
    assert "cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, 5, 5, 4, &alpha, b, 16, 4LL, a, 16, 4LL" in text
    assert "cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 5, 5, &alpha, b, 16, 4LL, a, 5" in text
    shared = plan_of(tmp_path, "expanded_weight", "cuda")
    text = "\n".join(t for f, t in shared.files.items() if f.endswith("_gemm.cu"))
    assert "cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 7, 24, 5, &alpha, b, 7, a, 5, &beta, c, 7)" in text


def test_every_cpu_variant_matches_torch(tmp_path):
    torch.manual_seed(0)
    ext, plans = _build_cpu(tmp_path)
    for name, (module_source, shape, _) in CASES.items():
        module = eval(module_source, NAMESPACE)
        x = torch.randn(*shape)
        plan, variants = plans[name]
        with torch.no_grad():
            expected = torch.tanh(module(x)) * 2.0
            for config in range(max(variants)):
                got = run_plan(ext, plan, inputs_of(module, plan, x), config, variants)
                torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5,
                                           msg=lambda m: f"{name} variant {config}: {m}")


def generated_apart(root: Path, device: str) -> tuple[dict[str, str], dict[str, tuple[Plan, list[int]]]]:
    return plan_runner.generated_apart(CASES, lambda name: plan_of(root, name, device), device, "g")


def _build_cpu(root: Path):
    """Every case's kernels in one CPU extension's one source file (the torch headers parsed once)."""
    files, plans = generated_apart(root, "cpu")
    (root / "kernels").mkdir()
    (root / "kernels" / "gemms.cpp").write_text("\n".join(files.values()))
    result = build.build(root / "kernels", "cpu", build_dir=root / "build")
    assert result.ok, result.summary
    return build.import_extension(result.so_path, result.name), plans


def inputs_of(module, plan: Plan, x) -> dict:
    """What the plan reads by value name: forward's input and the module's parameters."""
    args = {plan.inputs[0].name: x}
    args.update({"p_m_" + name.replace(".", "_"): param for name, param in module.named_parameters()})
    return args


def run_plan(ext, plan: Plan, args: dict, config: int, variants: list[int]):
    """The plan's one output, each kernel at `config` (plan_runner.run_plan)."""
    return plan_runner.run_plan(ext, plan, args, config, variants)[0]


def _cuda_gen_tests():
    """tests/test_builtin_cuda_gen.py's nvcc helpers."""
    return plan_runner.load_module(Path(__file__).with_name("test_builtin_cuda_gen.py"), "builtin_cuda_gen_helpers")


@pytest.mark.slow_build
@pytest.mark.parametrize("half", [0, 1])
def test_the_cuda_files_compile_with_nvcc(tmp_path, half, monkeypatch):
    """In two halves (one per CI core under pytest -n 2); the library files with the first. Without the 3xTF32
    files: theirs differ from case to case only in numbers and in the two operands' layouts, which
    test_builtin_cuda_gen's library test compiles (30-40 s a file)."""
    monkeypatch.setenv("KERNELSMITH_CUTLASS", "0")
    helpers = _cuda_gen_tests()
    nvcc = helpers._nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    files, _ = generated_apart(tmp_path / "tasks", "cuda")
    by_library = {library: sorted(f for f, text in files.items() if f.endswith(".cu") and helpers.library_of(text) ==
                                  library) for library in helpers.LIBRARY_HEADERS}
    for file, text in files.items():
        (tmp_path / file).write_text(text)
    plain = sorted(f for f in files if f.endswith(".cu") and not any(f in fs for fs in by_library.values()))
    helpers._compile(nvcc, plain[half::2], tmp_path)
    missing = []
    for library, library_files in (by_library.items() if half == 0 else ()):
        include = helpers._library_include(nvcc, library)
        if include is None:
            missing += library_files
        elif library_files:
            helpers._compile(nvcc, library_files, tmp_path, ["-I", str(include)])
    if missing:
        pytest.skip(f"no library header here for {', '.join(missing)}: they compile in the GPU test")


def test_a_float32_gemm_on_the_cpu_multiplies_with_the_blas_torch_carries_first(tmp_path):
    """The CPU's cuBLAS: torch's own sgemm (MKL's on x86), variant 0 of every float32 GEMM, ahead of the
    dot-product loops (18x faster than them on a 1024^3 Linear on this machine); a 16-bit GEMM keeps the
    loops. Declared weak, so a torch without it still loads and runs the loop (every variant matches torch:
    test_every_cpu_variant_matches_torch)."""
    from dataclasses import replace

    from kernelsmith.compiler.cpu.gemm import BLAS_VARIANT

    built = plan_of(tmp_path, "addmm_transposed")
    group = next(g for g in built.plan.groups() if isinstance(g, GemmGroup))
    generated = cpu.generate(group, built.plan.values, "fp32")
    assert generated.variants[0] == BLAS_VARIANT and "sgemm_(&ks_tb, &ks_ta" in "".join(generated.files.values())
    group.inputs = [replace(v, dtype="bfloat16") if v.name in (group.a, group.b) else v for v in group.inputs]
    halves = cpu.generate(group, built.plan.values, "bf16")
    assert BLAS_VARIANT not in halves.variants and "sgemm_(" not in "".join(halves.files.values())
