"""The partitioner on representative graphs, captured from small modules with torch.export."""

import re
import textwrap
from pathlib import Path

import pytest

from kernelsmith.compiler.capture import capture
from kernelsmith.compiler.ir import (CatGroup, ConvGroup, GemmGroup, PointwiseGroup, PoolGroup, ReductionGroup, View,
                                     ViewStep)
from kernelsmith.compiler.partition import plan


def plan_of(tmp_path: Path, init: str, forward: str, inputs: str, init_inputs: str = "[]"):
    def body(code: str) -> str:
        return textwrap.indent(code or "pass", " " * 8)

    source = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
              "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
              f"{body(init)}\n\n    def forward(self, x, *rest):\n{body(forward)}\n\n"
              f"def get_inputs():\n    return {inputs}\n\ndef get_init_inputs():\n    return {init_inputs}\n")
    path = tmp_path / "task.py"
    path.write_text(source)
    return plan(capture(path))


def names(ops):
    return [op.name for op in ops]


def test_a_pointwise_chain_with_a_broadcast_bias_is_one_kernel(tmp_path):
    p = plan_of(tmp_path, "self.bias = nn.Parameter(torch.randn(8, 1, 1))",
                "return F.gelu(x + self.bias) * 0.5", "[torch.randn(2, 8, 4, 4)]")
    (group,) = p.groups()
    assert isinstance(group, PointwiseGroup) and group.shape == (2, 8, 4, 4)
    assert names(group.body) == ["add", "gelu", "mul"]
    assert [v.source for v in group.inputs] == ["x0", "self.bias"]
    assert [o.name for o in group.outputs] == p.outputs


def test_rmsnorm_fuses_prologue_reduction_and_normalisation(tmp_path):
    p = plan_of(tmp_path, "self.w = nn.Parameter(torch.rand(64))",
                "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w",
                "[torch.randn(16, 64)]")
    (group,) = p.groups()
    assert isinstance(group, ReductionGroup) and group.reduce == "mean"
    assert (group.outer, group.size, group.inner) == (16, 64, 1)
    assert names(group.prologue) == ["square"]
    assert names(group.epilogue) == ["add", "rsqrt"]
    assert names(group.broadcast_epilogue) == ["mul", "mul"]


def test_linear_becomes_a_transposed_gemm_with_its_epilogue(tmp_path):
    p = plan_of(tmp_path, "self.lin = nn.Linear(32, 16)", "y = self.lin(x)\nreturn y * torch.sigmoid(y)",
                "[torch.randn(8, 32)]")
    (gemm,) = p.groups()
    assert isinstance(gemm, GemmGroup) and gemm.trans_b and (gemm.m, gemm.n, gemm.k) == (8, 16, 32)
    assert [v.source for v in gemm.inputs] == ["x0", "self.lin.weight", "self.lin.bias"]
    assert names(gemm.epilogue) == ["sigmoid", "mul"]  # the raw product feeds both, inside the kernel
    assert [o.name for o in gemm.outputs] == p.outputs


def test_a_value_read_by_two_kernels_is_recomputed_not_stored(tmp_path):
    p = plan_of(tmp_path, "", "y = torch.exp(x)\nreturn torch.softmax(y, dim=1), y.sum(dim=0)",
                "[torch.randn(8, 32)]")
    softmax, column_sum = p.groups()
    assert softmax.reduce == "softmax" and names(softmax.prologue) == ["exp"]
    assert [o.name for o in softmax.outputs] == ["_softmax"]  # exp is not written out...
    assert column_sum.reduce == "sum" and names(column_sum.prologue) == ["exp"]  # ...the second kernel makes it
    assert [v.source for v in column_sum.inputs] == ["x0"]
    assert (column_sum.outer, column_sum.size, column_sum.inner) == (1, 8, 32)


def test_without_remat_a_value_read_by_two_kernels_is_written_out_once(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSMITH_REMAT", "0")
    p = plan_of(tmp_path, "", "y = torch.exp(x)\nreturn torch.softmax(y, dim=1), y.sum(dim=0)",
                "[torch.randn(8, 32)]")
    softmax, column_sum = p.groups()
    assert [o.name for o in softmax.outputs] == ["exp", "_softmax"]  # exp leaves for the other reader
    assert column_sum.reduce == "sum" and column_sum.inputs[0].name == "exp" and not column_sum.prologue


def test_max_over_a_dim_becomes_amax_and_argmax(tmp_path):
    p = plan_of(tmp_path, "", "return torch.max(x, dim=1)[0] * 2, torch.max(x, dim=2)[1]",
                "[torch.randn(4, 16, 8)]")
    amax, argmax = p.groups()
    assert amax.reduce == "amax" and names(amax.epilogue) == ["mul"] and amax.dims == (1,)
    assert argmax.reduce == "argmax" and argmax.outputs[0].dtype == "int64" and argmax.dims == (2,)


def test_views_between_kernels_run_in_python(tmp_path):
    p = plan_of(tmp_path, "", "y = torch.relu(x)\nreturn y.view(4, 64).sum(dim=1), y", "[torch.randn(4, 8, 8)]")
    relu, view, total = p.steps
    assert isinstance(relu, PointwiseGroup) and isinstance(view, ViewStep) and view.view == View("view", (4, 64))
    assert isinstance(total, ReductionGroup) and total.inputs[0].name == view.out.name


def test_pointwise_ops_before_a_reshape_into_a_reduction_run_in_the_reduction(tmp_path):
    """(view_hoist.py) relu(x).view(...).sum(): x is viewed in Python and the relu is the sum's prologue, so
    nothing is written between them; a bias broadcast across the merged dims cannot follow the view, and stays."""
    p = plan_of(tmp_path, "", "return torch.relu(x).view(4, 64).sum(dim=1)", "[torch.randn(4, 8, 8)]")
    (total,) = p.groups()
    assert isinstance(total, ReductionGroup) and names(total.prologue) == ["relu"]
    assert [v.shape for v in total.inputs] == [(4, 64)]
    p = plan_of(tmp_path, "self.b = nn.Parameter(torch.randn(8, 1))", "return (x + self.b).view(4, 64).sum(dim=1)",
                "[torch.randn(4, 8, 8)]")
    assert [type(s).__name__ for s in p.steps] == ["PointwiseGroup", "ViewStep", "ReductionGroup"]


@pytest.mark.parametrize("init, forward, inputs, why", [
    ("", "return torch.cumprod(x, dim=1)", "[torch.randn(4, 8)]", "cumprod"),
    # a bool made in forward that a second kernel would read (one chain keeps it inside: test_builtin_cpu_windows)
    ("", "return torch.where(x > 0.3, x, x * 0.5) * (x <= 1.0) + (x == x)", "[torch.randn(4, 8)]",
     "a bool made in forward, is needed outside its kernel"),
    ("self.pool = nn.MaxPool2d(2, return_indices=True)", "return self.pool(x)[1] * 1.0", "[torch.randn(1, 3, 8, 8)]",
     "indices"),
    ("", "return x.sum(dim=(0, 2))", "[torch.randn(4, 5, 6)]", "non-adjacent dims"),
    ("", "return x.double() * 2", "[torch.randn(4, 5)]", "_to_copy.default on float64"),
])
def test_what_cannot_be_generated_is_reported(tmp_path, init, forward, inputs, why):
    p = plan_of(tmp_path, init, forward, inputs)
    assert p.unsupported and why in p.unsupported[0]


def test_inference_batch_norm_fuses_with_channel_views_taken_first(tmp_path):
    init = ("self.w = nn.Parameter(torch.rand(8))\nself.b = nn.Parameter(torch.rand(8))\n"
            "self.register_buffer('rm', torch.rand(8))\nself.register_buffer('rv', torch.rand(8) + 1)")
    p = plan_of(tmp_path, init, "y = torch.relu(x)\nreturn F.batch_norm(y, self.rm, self.rv, self.w, self.b, False, 0.1, 1e-5)",
                "[torch.randn(2, 8, 4, 4)]")
    (group,) = p.groups()  # relu and the whole normalisation in one kernel
    assert names(group.body) == ["relu", "sub", "bn_scale", "mul", "add"]
    assert [v.view for v in p.prelude] == [View("view", (8, 1, 1))] * 4
    assert [o.name for o in group.outputs] == p.outputs


def test_ops_the_generators_know_are_not_decomposed(tmp_path):
    p = plan_of(tmp_path, "", "return F.softplus(x) + torch.logsumexp(x, dim=1, keepdim=True)",
                "[torch.randn(4, 16)]")
    assert not p.unsupported
    assert "softplus" in [op.name for g in p.groups() for op in g.ops()]
    assert "logsumexp" in [getattr(g, "reduce", "") for g in p.groups()]


def test_an_int_or_list_input_is_a_clear_capture_error(tmp_path):
    from kernelsmith.compiler.graph import CaptureError

    for extra in ("3", "[1, 2]"):
        with pytest.raises(CaptureError, match="inputs other than tensors and floats"):
            plan_of(tmp_path, "", "return x * 2", f"[torch.randn(4), {extra}]")


def test_a_number_tensor_made_in_forward_is_inlined_as_a_scalar(tmp_path):
    """level2/93's `torch.min(x, torch.tensor(0.0, device=x.device))`: captured on meta tensors, the
    constant's value is read from the torch.tensor call, not lost."""
    p = plan_of(tmp_path, "", "y = torch.min(x + 0.5, torch.tensor(-0.25, device=x.device))\n"
                "return y * torch.tensor(3, device=x.device)", "[torch.randn(4, 5)]")
    (group,) = p.groups()
    assert [(op.name, op.args[1]) for op in group.body] == [("add", 0.5), ("minimum", -0.25), ("mul", 3)]
    assert [v.source for v in p.inputs] == ["x0"]


def test_each_number_keeps_its_own_value_whatever_python_does_with_others(tmp_path):
    """A torch.tensor used only in Python (.item()) is no constant of the graph; new_tensor and
    as_tensor make constants too; one made on the CPU (no device) and sqrt of one fold to numbers."""
    p = plan_of(tmp_path, "", "eps = torch.tensor(0.001).item()\n"
                "y = torch.min(x * x.new_tensor(3.0), torch.as_tensor(0.5, device=x.device))\n"
                "return y / torch.sqrt(torch.tensor(4.0)) + eps", "[torch.randn(4, 5)]")
    (group,) = p.groups()
    assert [(op.name, op.args[1]) for op in group.body] == [
        ("mul", 3.0), ("minimum", 0.5), ("div", 2.0), ("add", pytest.approx(0.001))]


def test_a_tensor_attribute_has_no_value_on_meta_tensors_and_says_so(tmp_path):
    from kernelsmith.compiler.graph import CaptureError

    with pytest.raises(CaptureError, match="'scale' has no value .*make it a buffer"):
        plan_of(tmp_path, "self.scale = torch.tensor(2.0)", "return x * self.scale", "[torch.randn(4, 5)]")


@pytest.mark.parametrize("forward, why", [
    ("return x * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], device=x.device)", "shape [5]"),
    ("return x * torch.tensor(2.0, dtype=torch.float64, device=x.device)", "float64"),
    ("return torch.tensor(1.5, device=x.device)", "returns a constant"),
])
def test_other_tensors_made_in_forward_are_a_clear_capture_error(tmp_path, forward, why):
    from kernelsmith.compiler.graph import CaptureError

    with pytest.raises(CaptureError, match=re.escape(why)):
        plan_of(tmp_path, "", forward, "[torch.randn(4, 5)]")


def test_a_float_input_stays_a_value_of_the_graph(tmp_path):
    """Traced as a 0-dim tensor, not baked in: the kernel takes it as an argument."""
    p = plan_of(tmp_path, "", "return x * rest[0] + 1.0", "[torch.randn(4, 5), 3.0]")
    (group,) = p.groups()
    assert [(v.source, v.shape, v.scalar) for v in group.inputs] == [("x0", (4, 5), False), ("x1", (), True)]
    assert group.body[0].name == "mul" and group.body[0].args == [v.name for v in group.inputs]


def test_a_convolution_takes_its_bias_and_the_pointwise_work_after_it(tmp_path):
    p = plan_of(tmp_path, "self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1, groups=1)",
                "return torch.relu(self.conv(x)) * 0.5", "[torch.randn(2, 3, 16, 16)]")
    (conv,) = p.groups()
    assert isinstance(conv, ConvGroup) and not conv.transposed
    assert (conv.stride, conv.padding, conv.dilation, conv.groups) == ((2, 2), (1, 1), (1, 1), 1)
    assert conv.out_shape == (2, 8, 8, 8) and conv.w_shape == (8, 3, 3, 3)
    assert names(conv.epilogue) == ["add", "relu", "mul"]  # the bias first, as a [8, 1, 1] view
    assert [v.source for v in conv.inputs][:2] == ["x0", "self.conv.weight"]
    assert [v.view for v in p.prelude] == [View("view", (8, 1, 1))]
    assert [o.name for o in conv.outputs] == p.outputs


def test_after_the_rewrites_the_graph_says_who_reads_each_value(tmp_path):
    """The partitioner fuses by who reads a value; the rewrites rename results (min.dim's) and split nodes
    (a convolution and its bias), and their own updates of the map had left stale readers behind."""
    from kernelsmith.compiler.graph import consumers_of
    from kernelsmith.compiler.passes import before_partition

    source = tmp_path / "task.py"
    source.write_text("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                      "    def __init__(self):\n        super().__init__()\n        self.conv = nn.Conv2d(3, 8, 3)\n"
                      "    def forward(self, x):\n        return torch.tanh(torch.min(self.conv(x), dim=1)[0])\n\n"
                      "def get_inputs():\n    return [torch.randn(2, 3, 16, 16)]\n\n"
                      "def get_init_inputs():\n    return []\n")
    graph = before_partition(capture(source))
    assert graph.consumers == consumers_of(graph)
    assert graph.consumers["x"] == ["convolution_nobias"]


def test_a_transposed_convolution_feeding_a_reduction_is_two_kernels(tmp_path):
    p = plan_of(tmp_path, "self.up = nn.ConvTranspose1d(4, 6, 3, stride=2, output_padding=1, bias=False)",
                "return torch.softmax(self.up(x), dim=1)", "[torch.randn(2, 4, 9)]")
    conv, softmax = p.groups()
    assert isinstance(conv, ConvGroup) and conv.transposed and conv.output_padding == (1,)
    assert conv.out_shape == (2, 6, 20) and not conv.epilogue
    assert isinstance(softmax, ReductionGroup) and softmax.inputs[0].name == conv.outputs[0].name


def test_batch_norm_running_statistics_are_not_outputs(tmp_path):
    """In training mode export also returns the running-statistic updates; forward does not."""
    from kernelsmith.compiler.capture import capture

    path = tmp_path / "bn.py"
    path.write_text("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                    "    def __init__(self):\n        super().__init__()\n        self.bn = nn.BatchNorm1d(8)\n\n"
                    "    def forward(self, x):\n        return self.bn(x) * 2\n\n"
                    "def get_inputs():\n    return [torch.randn(4, 8)]\n\ndef get_init_inputs():\n    return []\n")
    graph = capture(path)
    assert len(graph.outputs) == 1 and not graph.returns_tuple
    assert all(node.dtype != "int64" for node in graph.nodes)  # num_batches_tracked += 1 is gone


@pytest.mark.parametrize("module, shape", [
    ("nn.BatchNorm2d(8)", (4, 8, 6, 5)), ("nn.BatchNorm1d(16)", (32, 16)), ("nn.GroupNorm(4, 8)", (2, 8, 5, 6)),
    ("nn.InstanceNorm2d(8)", (2, 8, 7, 6)),
])
def test_training_mode_normalisations_decompose_exactly_into_means(module, shape):
    """Batch, group and instance norm become means the partitioner plans (the batch statistics
    in two steps, spatial then batch); the decomposed program computes what the module does."""
    import torch
    from torch import nn

    from kernelsmith.compiler.decompositions import decompositions

    model = eval(module, {"nn": nn})
    x = torch.randn(*shape) * 3 + 1
    program = torch.export.export(model, (x,)).run_decompositions(decompositions())
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert not any("norm" in t for t in targets), targets
    torch.testing.assert_close(program.module()(x), model(x), rtol=1e-5, atol=1e-5)


def test_batch_norm_in_training_is_planned_as_reductions_and_a_pointwise_kernel(tmp_path):
    p = plan_of(tmp_path, "self.bn = nn.BatchNorm2d(8)", "return self.bn(x) * 2", "[torch.randn(4, 8, 6, 5)]")
    assert not p.unsupported
    kinds = [g.kind for g in p.groups()]
    # one welford over the spatial dims (mean and variance in one read of x), then over the batch: a welford of
    # the means and a mean of the variances; then the normalisation, x's second and last read
    assert [getattr(g, "reduce", g.kind) for g in p.groups()] == ["welford", "welford", "mean", "pointwise"], kinds
    full = (4, 8, 6, 5)
    assert [o.name for g in p.groups() for o in g.outputs if o.shape == full] == p.outputs
    assert sum(v.shape == full for g in p.groups() for v in g.inputs) == 2
    assert all(v.shape != full or v.source == "x0" for g in p.groups() for v in g.inputs)


@pytest.mark.parametrize("module, shape", [
    ("nn.GroupNorm(4, 8)", (2, 8, 5, 6)), ("nn.LayerNorm(30)", (4, 30)), ("nn.LayerNorm((5, 6))", (2, 8, 5, 6)),
    ("nn.InstanceNorm2d(8)", (2, 8, 7, 6)), ("nn.BatchNorm1d(16)", (32, 16)),
])
def test_a_normalisation_over_one_range_is_one_welford_kernel(tmp_path, module, shape):
    """Mean and variance in one pass (welford), rstd as its reduced epilogue, and the normalisation with its
    affine as the second pass over x: x is read twice and the result written once, by one kernel."""
    p = plan_of(tmp_path, f"self.norm = {module}", "return self.norm(x)", f"[torch.randn{shape}]")
    assert not p.unsupported
    (group,) = p.groups()
    assert group.reduce == "welford" and group.variance and group.attrs == {"correction": 0.0}
    assert names(group.epilogue) == ["add", "rsqrt"] and names(group.broadcast_epilogue)[:2] == ["sub", "mul"]
    (out,) = group.outputs  # the result only, at the input's size
    assert out.numel == group.inputs[0].numel


def test_var_mean_is_one_welford_with_torchs_correction(tmp_path):
    p = plan_of(tmp_path, "", "v, m = torch.var_mean(x, dim=-1, keepdim=True)\nreturn (x - m) / v, v",
                "[torch.randn(4, 30)]")
    assert not p.unsupported
    (group,) = p.groups()
    assert group.reduce == "welford" and group.attrs == {"correction": 1.0}  # torch's default: unbiased
    assert group.variance in {o.name for o in group.outputs} and group.result not in {o.name for o in group.outputs}


def test_captures_on_several_threads_at_once_all_succeed(tmp_path):
    """The bench runs sessions on threads; torch.export's tracing state is process-wide."""
    from concurrent.futures import ThreadPoolExecutor

    from kernelsmith.compiler.capture import capture

    paths = []
    for i in range(4):
        path = tmp_path / f"task{i}.py"
        path.write_text("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                        f"    def forward(self, x):\n        return torch.relu(x) * {i + 2}.0\n\n"
                        "def get_inputs():\n    return [torch.randn(8, 16)]\n\ndef get_init_inputs():\n    return []\n")
        paths.append(path)
    with ThreadPoolExecutor(4) as pool:
        graphs = list(pool.map(capture, paths))
    assert [g.nodes[-1].args[1] for g in graphs] == [2.0, 3.0, 4.0, 5.0]


def test_pooling_takes_the_pointwise_work_after_it(tmp_path):
    p = plan_of(tmp_path, "self.pool = nn.MaxPool2d(3, stride=2, padding=1)", "return torch.clamp(self.pool(x), 0, 1)",
                "[torch.randn(2, 4, 9, 9)]")
    (pool,) = p.groups()
    assert isinstance(pool, PoolGroup) and pool.mode == "max"
    assert (pool.kernel, pool.stride, pool.padding, pool.dilation) == ((3, 3), (2, 2), (1, 1), (1, 1))
    assert pool.out_shape == (2, 4, 5, 5) and names(pool.epilogue) == ["clamp"]


def test_average_pooling_keeps_torchs_divisor_options(tmp_path):
    p = plan_of(tmp_path, "self.pool = nn.AvgPool3d(2, padding=1, count_include_pad=False)", "return self.pool(x)",
                "[torch.randn(1, 2, 4, 4, 4)]")
    (pool,) = p.groups()
    assert pool.mode == "avg" and not pool.count_include_pad and pool.divisor_override is None
    assert pool.kernel == pool.stride == (2, 2, 2) and pool.padding == (1, 1, 1)


def test_a_view_of_a_reduced_value_after_the_normalisation_runs_in_python(tmp_path):
    """(ShuffleNet's batch norms) the reduction's epilogue phase is over: the view cannot join it."""
    p = plan_of(tmp_path, "", "m = x.mean(-1, keepdim=True)\nreturn x - m, m.view(-1)", "[torch.randn(4, 8)]")
    assert not p.unsupported
    (group,) = p.groups()
    assert names(group.broadcast_epilogue) == ["sub"]
    assert [s.kind for s in p.steps if isinstance(s, ViewStep)] == ["view"]


def test_cumsum_is_a_scan_with_the_pointwise_work_on_both_sides(tmp_path):
    p = plan_of(tmp_path, "", "return torch.relu(torch.cumsum(x * rest[0], dim=1)) + 1.0",
                "[torch.randn(4, 9, 5), torch.randn(4, 9, 5)]")
    (group,) = p.groups()
    assert isinstance(group, ReductionGroup) and group.reduce == "cumsum" and group.dims == (1,)
    assert group.result_shape == group.in_shape == (4, 9, 5)
    assert (group.outer, group.size, group.inner) == (4, 9, 5)
    assert names(group.prologue) == ["mul"] and names(group.epilogue) == ["relu", "add"]


def test_a_reduction_of_a_cumsum_is_a_second_kernel(tmp_path):
    p = plan_of(tmp_path, "", "return torch.cumsum(x, dim=-1).sum(-1)", "[torch.randn(6, 40)]")
    scan, total = p.groups()
    assert (scan.reduce, total.reduce) == ("cumsum", "sum") and scan.dims == total.dims == (1,)
    assert [o.name for o in scan.outputs] == [total.operand]


def test_a_bool_input_joins_the_float_math_as_zero_or_one(tmp_path):
    p = plan_of(tmp_path, "", "return torch.cumsum(x * rest[0], dim=1)",
                "[torch.randn(4, 9), torch.rand(4, 9) > 0.5]")
    (group,) = p.groups()
    assert group.reduce == "cumsum" and names(group.prologue) == ["mul"]
    assert [(v.source, v.dtype) for v in group.inputs] == [("x0", "float32"), ("x1", "bool")]


def test_a_convolutions_epilogue_that_only_feeds_a_softmax_runs_inside_it(tmp_path):
    """The conv's bias moves into the softmax's prologue: cuDNN's output is read once."""
    p = plan_of(tmp_path, "self.conv = nn.Conv2d(3, 4, 3)", "return torch.softmax(self.conv(x) * 2.0, dim=1)",
                "[torch.randn(2, 3, 8, 8)]")
    conv, softmax = p.groups()
    assert isinstance(conv, ConvGroup) and not conv.epilogue
    assert [v.source for v in conv.inputs] == ["x0", "self.conv.weight"]
    assert [o.name for o in conv.outputs] == [conv.result]
    assert softmax.reduce == "softmax" and names(softmax.prologue) == ["add", "mul"]
    assert softmax.inputs[0].name == conv.result and softmax.operand == softmax.prologue[-1].out


def test_an_epilogue_read_by_something_else_stays_with_the_gemm(tmp_path):
    p = plan_of(tmp_path, "self.lin = nn.Linear(16, 8)",
                "y = torch.sigmoid(self.lin(x))\nreturn y.sum(1), y * 3.0", "[torch.randn(4, 16)]")
    gemm = p.groups()[0]
    assert isinstance(gemm, GemmGroup) and names(gemm.epilogue) == ["sigmoid"]


def test_a_reduction_of_an_input_gets_a_prologue_for_what_its_epilogue_recomputes(tmp_path):
    """The sum's operand stays a plain input while the broadcast epilogue's other operand, made
    by an earlier kernel, is recomputed in the prologue (the CPU generator once read a prologue
    variable that did not exist for the operand)."""
    p = plan_of(tmp_path, "", "w = rest[0] * 2.0\ns = x.sum(-1, keepdim=True)\nreturn w - s",
                "[torch.randn(4, 6), torch.randn(4, 6)]")
    (group,) = p.groups()
    assert group.reduce == "sum" and names(group.prologue) == ["mul"]
    assert group.operand not in {op.out for op in group.prologue}
    from kernelsmith.compiler import cpu, cuda

    made = cpu.generate(group, p.values)
    assert f"acc += v_{group.operand};" not in "".join(made.files.values())
    cuda.generate(group, p.values)


def test_a_value_the_reduced_epilogue_reads_is_not_moved_into_the_prologue(tmp_path):
    """With the reduced dim of size 1 the result has the operand's shape, and the epilogue may read
    a full-size value; the epilogue sees no prologue values, so that one stays an input."""
    p = plan_of(tmp_path, "", "w = rest[0] * 2.0\nreturn x.sum(1, keepdim=True) * w",
                "[torch.randn(6, 1), torch.randn(6, 1)]")
    assert not p.unsupported
    from kernelsmith.compiler import cpu, cuda

    for group in p.groups():
        cpu.generate(group, p.values)
        cuda.generate(group, p.values)


def test_parameters_inside_sequential_children_are_reached_from_model_new(tmp_path):
    """nn.Sequential names its children "0", "1", ...: `self.net.0.weight` is not Python (every
    level-3 task failed on it), so model_new.py reaches them with getattr."""
    import torch

    from kernelsmith.compiler.pipeline import build_plan

    source = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
              "        super().__init__()\n        self.net = nn.Sequential(nn.GroupNorm(2, 4), nn.ReLU())\n"
              "        self.post = nn.ModuleList([nn.GroupNorm(1, 4)])\n\n    def forward(self, x):\n"
              "        return self.post[0](self.net(x))\n\n"
              "def get_inputs():\n    return [torch.randn(2, 4, 3, 3)]\n\ndef get_init_inputs():\n    return []\n")
    (tmp_path / "model.py").write_text(source)
    built = build_plan(tmp_path / "model.py", "cpu", "fp32")
    assert not built.unsupported
    model_new = built.model_new([0] * len(built.variants))
    compile(model_new, "model_new.py", "exec")  # a SyntaxError here is what the H200 saw
    namespace: dict = {}
    exec(source, namespace)
    model = namespace["Model"]()
    sources = {p.source for p in built.plan.params}
    assert "getattr(self.net, '0').weight" in sources and "getattr(self.post, '0').bias" in sources
    for param in built.plan.params:
        reached = eval(param.source, {"self": model})
        assert isinstance(reached, torch.Tensor) and tuple(reached.shape) == param.shape
    assert "getattr(self.net, '0').weight" in model_new


def test_cat_is_a_kernel_of_its_own_between_the_kernels_of_its_parts(tmp_path):
    init = "self.conv = nn.Conv2d(3, 4, 1)"
    p = plan_of(tmp_path, init, "a = torch.relu(x)\nreturn torch.sigmoid(torch.cat([self.conv(x), a, a], dim=-3))",
                "[torch.randn(2, 3, 5, 5)]")
    relu, conv, cat, sigmoid = p.groups()
    assert isinstance(cat, CatGroup) and cat.dim == 1 and cat.sizes == (4, 3, 3) and cat.out_shape == (2, 10, 5, 5)
    assert cat.parts == [conv.outputs[0].name, relu.outputs[0].name, relu.outputs[0].name]
    assert [v.name for v in cat.inputs] == [conv.outputs[0].name, relu.outputs[0].name]  # a repeated part read once
    assert names(sigmoid.body) == ["sigmoid"] and [v.name for v in sigmoid.inputs] == [cat.result]


def test_layouts_are_the_generated_codes_not_eagers(tmp_path):
    """A kernel writes its output dense whatever layout eager gives the value: `x.t() * 2` is a
    contiguous cat part here, read as it is, and `(x.t() * 2).t()` is not (eager says the opposite of
    both), so a pointwise kernel copies it dense first (partition.dense), instead of a binding that
    would refuse it on every call."""
    p = plan_of(tmp_path, "", "return torch.cat([x.t() * 2, rest[0]], 0)", "[torch.randn(4, 3), torch.randn(2, 4)]")
    assert not p.unsupported and [type(g) for g in p.groups()] == [PointwiseGroup, CatGroup]
    p = plan_of(tmp_path, "", "return torch.cat([(x.t() * 2).t(), rest[0]], 0)",
                "[torch.randn(3, 4), torch.randn(2, 4)]")
    assert not p.unsupported
    mul, copy, cat = p.groups()
    assert names(copy.body) == ["copy"] and not copy.inputs[0].contiguous  # it reads the transposed view
    assert cat.parts[0] == copy.outputs[0].name and copy.outputs[0].contiguous


def test_attribute_paths_that_are_not_plain_names_use_getattr():
    from kernelsmith.compiler.capture import attribute_source

    assert attribute_source("self", "lin.weight") == "self.lin.weight"
    assert attribute_source("self", "net.0.weight") == "getattr(self.net, '0').weight"
    assert attribute_source("self", "blocks.class.bias") == "getattr(self.blocks, 'class').bias"  # a keyword
    assert attribute_source("self", "m.__w") == "getattr(self.m, '__w')"  # would be name-mangled in ModelNew


def test_a_masked_fill_and_its_softmax_are_one_kernel_and_a_bool_is_never_stored(tmp_path):
    """masked_row_softmax: ~mask (bitwise_not of a bool), masked_fill's where with the fill value inlined from
    scalar_tensor, and the softmax fuse into one kernel, no bool stored; a comparison promoted in a product too."""
    p = plan_of(tmp_path, "", "m = rest[0]\nreturn torch.softmax((x / 0.5).masked_fill(~m, float('-inf')), dim=-1)",
                "[torch.randn(4, 32), torch.rand(4, 32) > 0.2]")
    (group,) = p.groups()
    assert isinstance(group, ReductionGroup) and group.reduce == "softmax"
    assert set(names(group.prologue)) >= {"div", "logical_not", "where"}
    assert all(v.dtype != "bool" for v in group.outputs)
    (relu,) = plan_of(tmp_path, "", "return x * (x > 0)", "[torch.randn(4, 8)]").groups()  # a bool promoted in a product
    assert names(relu.body) == ["gt", "mul"]
