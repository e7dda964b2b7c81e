"""Tasks: input specs, loading KernelBench files and FILE:CLASS modules, and checking the reference
in a real worker (degenerate tasks are flagged, a broken one is refused)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import torch

from kernelsmith.errors import BadInput
from kernelsmith.task import InputSpec, check_task, load_task, parse_input_spec

# --- parse_input_spec ----------------------------------------------------------------------------


@pytest.mark.parametrize("text, dtype, shape, low, high", [
    ("float32[8,1024]", "float32", (8, 1024), None, None),
    ("bf16[4]", "bf16", (4,), None, None),
    ("int64[32]{0,100}", "int64", (32,), 0, 100),
    ("bool[2,3]", "bool", (2, 3), None, None),
    ("  float32 [ 8 , 1024 ]  ", "float32", (8, 1024), None, None),
    ("int64[32]{ 0 , 100 }", "int64", (32,), 0, 100),
    ("float32[4]{-1,1}", "float32", (4,), -1, 1),
])
def test_parse_good_specs(text, dtype, shape, low, high):
    spec = parse_input_spec(text)
    assert (spec.dtype, spec.shape, spec.low, spec.high) == (dtype, shape, low, high)


@pytest.mark.parametrize("text", [
    "float33[8]",        # unknown dtype
    "float32[0]",        # empty dimension
    "float32[8,0,2]",
    "float32[8",         # unclosed bracket
    "int64[4]{5,1}",     # HIGH below LOW
    "int64[4]{3,3}",
    "int64[4]{a,b}",     # not numbers
    "int64[4]{1}",       # one bound only
    "[8,1024]",          # no dtype
])
def test_bad_specs_raise_bad_input_naming_the_spec(text):
    with pytest.raises(BadInput) as info:
        parse_input_spec(text)
    assert text in info.value.message


def _draw(spec: str) -> torch.Tensor:
    value = eval(parse_input_spec(spec).expression(), {"torch": torch})  # noqa: S307 (our own generated code)
    assert isinstance(value, torch.Tensor)
    return value


@pytest.mark.parametrize("text, dtype, shape", [
    ("float32[8,1024]", torch.float32, (8, 1024)),
    ("fp16[3,5]", torch.float16, (3, 5)),
    ("bf16[4]", torch.bfloat16, (4,)),
    ("float64[2,2,2]", torch.float64, (2, 2, 2)),
    ("int64[32]{0,100}", torch.int64, (32,)),
    ("int32[7]", torch.int32, (7,)),
    ("uint8[9]", torch.uint8, (9,)),
    ("bool[2,3]", torch.bool, (2, 3)),
    ("bf16[16]{0,1}", torch.bfloat16, (16,)),
])
def test_expression_draws_the_right_dtype_and_shape(text, dtype, shape):
    value = _draw(text)
    assert value.dtype == dtype
    assert tuple(value.shape) == shape


def test_int_range_is_respected():
    value = _draw("int64[4096]{5,9}")
    assert int(value.min()) >= 5 and int(value.max()) <= 9
    assert {5, 6, 7, 8} <= set(value.tolist())  # the whole range is used, not one value

    negative = _draw("int32[4096]{-3,3}")
    assert int(negative.min()) >= -3 and int(negative.max()) <= 3
    assert int(negative.min()) < 0


def test_float_range_is_respected():
    value = _draw("float32[4096]{-2,3}")
    assert float(value.min()) >= -2.0 and float(value.max()) <= 3.0
    assert float(value.min()) < -1.5 and float(value.max()) > 2.5


def test_bool_draws_both_values():
    assert set(_draw("bool[1000]").tolist()) == {True, False}


def test_input_spec_expression_is_self_contained():
    spec = InputSpec("float32", (2, 3))
    assert "torch." in spec.expression() and "float32" in spec.expression()


# --- load_task -----------------------------------------------------------------------------------

KERNELBENCH = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.lin(x))


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8]
'''

USER_MODULE = '''
import torch.nn as nn


class MyNet(nn.Module):
    """A user's own module: no get_inputs, and no `import torch` of its own."""

    def __init__(self, n, scale):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.scale = scale

    def forward(self, x, idx):
        return self.lin(x) * self.scale + idx.float().sum()


class Other(nn.Module):
    def forward(self, x):
        return x
'''


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def _import(path: Path):
    name = f"ks_test_task_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def test_kernelbench_file_is_returned_unchanged(tmp_path):
    path = _write(tmp_path, "matmul_relu.py", KERNELBENCH)
    task = load_task(str(path))
    assert task.source == path.read_text()
    assert task.name == "matmul_relu"
    assert Path(task.origin) == path.resolve()


def test_kernelbench_file_missing_get_inputs_names_it(tmp_path):
    path = _write(tmp_path, "model.py", KERNELBENCH.replace("def get_inputs", "def make_inputs"))
    with pytest.raises(BadInput) as info:
        load_task(str(path))
    message = info.value.message
    assert "does not define get_inputs" in message
    assert "get_init_inputs" not in message and "Model" not in message.split("does not define")[1]


def test_missing_file_is_bad_input(tmp_path):
    with pytest.raises(BadInput) as info:
        load_task(str(tmp_path / "nope.py"))
    assert "nope.py" in info.value.message


def test_syntax_error_is_bad_input_with_the_line(tmp_path):
    path = _write(tmp_path, "model.py", KERNELBENCH.replace("def forward(self, x):", "def forward(self, x)"))
    with pytest.raises(BadInput) as info:
        load_task(str(path))
    line = KERNELBENCH.splitlines().index("    def forward(self, x):") + 1
    assert "not valid Python" in info.value.message and f"line {line}" in info.value.message


def test_file_class_with_inputs_makes_a_runnable_kernelbench_task(tmp_path):
    user = _write(tmp_path, "mynet.py", USER_MODULE)
    task = load_task(f"{user}:MyNet", inputs=["float32[4,16]", "int64[4]{0,10}"], init_args="[16, 0.5]")
    assert task.name == "mynet_MyNet"
    assert task.origin.endswith("mynet.py:MyNet")
    assert user.read_text() == textwrap.dedent(USER_MODULE)  # the user's file is not touched

    (tmp_path / "out").mkdir()
    model_py = _write(tmp_path / "out", "model.py", task.source)
    module = _import(model_py)
    assert module.Model is module.MyNet
    inputs = module.get_inputs()
    assert [(tuple(x.shape), x.dtype) for x in inputs] == [((4, 16), torch.float32), ((4,), torch.int64)]
    assert int(inputs[1].min()) >= 0 and int(inputs[1].max()) <= 10
    assert module.get_init_inputs() == [16, 0.5]
    model = module.Model(*module.get_init_inputs())
    assert model.scale == 0.5
    assert tuple(model(*inputs).shape) == (4, 16)


def test_file_class_named_model_and_a_scalar_init_arg(tmp_path):
    user = _write(tmp_path, "net.py", '''
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.n = n

            def forward(self, x):
                return x * self.n
    ''')
    task = load_task(f"{user}:Model", inputs=["float32[3]"], init_args="7")
    model_py = tmp_path / "model_gen.py"
    model_py.write_text(task.source)
    module = _import(model_py)
    assert module.get_init_inputs() == [7]
    (x,) = module.get_inputs()
    assert torch.equal(module.Model(*module.get_init_inputs())(x), x * 7)


def test_file_class_needs_inputs(tmp_path):
    user = _write(tmp_path, "mynet.py", USER_MODULE)
    with pytest.raises(BadInput) as info:
        load_task(f"{user}:MyNet")
    assert "input" in str(info.value)


def test_file_class_unknown_class(tmp_path):
    user = _write(tmp_path, "mynet.py", USER_MODULE)
    with pytest.raises(BadInput) as info:
        load_task(f"{user}:YourNet", inputs=["float32[4,16]"])
    assert "YourNet" in info.value.message


def test_file_class_bad_input_spec_names_it(tmp_path):
    user = _write(tmp_path, "mynet.py", USER_MODULE)
    with pytest.raises(BadInput) as info:
        load_task(f"{user}:MyNet", inputs=["float32[4,16]", "int65[4]"])
    assert "int65[4]" in info.value.message


def test_file_class_init_args_must_be_a_literal(tmp_path):
    user = _write(tmp_path, "mynet.py", USER_MODULE)
    with pytest.raises(BadInput) as info:
        load_task(f"{user}:MyNet", inputs=["float32[4,16]"], init_args="[16, os.getcwd()]")
    assert "init-args" in info.value.message


def test_inputs_on_a_kernelbench_file_are_refused(tmp_path):
    path = _write(tmp_path, "model.py", KERNELBENCH)
    with pytest.raises(BadInput) as info:
        load_task(str(path), inputs=["float32[4,8]"])
    assert "--input" in info.value.message


# --- check_task: the reference runs in a real worker ---------------------------------------------

TASK_TEMPLATE = '''
import torch
import torch.nn as nn

_calls = [0]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, x):
{forward}


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def _task(tmp_path: Path, init: str, forward: str) -> Path:
    text = TASK_TEMPLATE.format(init=textwrap.indent(textwrap.dedent(init).strip() or "pass", " " * 8),
                                forward=textwrap.indent(textwrap.dedent(forward).strip(), " " * 8))
    return _write(tmp_path, "model.py", text)


def test_healthy_task_has_no_flags_and_reports_shapes(tmp_path):
    report = check_task(_task(tmp_path, "self.lin = nn.Linear(8, 16)", "return torch.relu(self.lin(x)) + x.sum()"),
                        "cpu")
    assert report["flags"] == [] and report["warnings"] == []
    assert report["inputs"] == [{"shape": [4, 8], "dtype": "float32"}]
    assert report["outputs"] == [{"shape": [4, 16], "dtype": "float32"}]
    assert report["params"] == 8 * 16 + 16


def test_zero_output_is_flagged_near_zero(tmp_path):
    report = check_task(_task(tmp_path, "", "return x * 0"), "cpu")
    assert "near_zero" in report["flags"]
    assert len(report["warnings"]) == len(report["flags"])


def test_output_that_ignores_the_input_is_flagged(tmp_path):
    report = check_task(_task(tmp_path, "self.w = nn.Parameter(torch.randn(4, 8))", "return self.w * 1.0"), "cpu")
    assert "ignores_inputs" in report["flags"]
    assert "ignores_weights" not in report["flags"]


def test_output_that_ignores_the_weights_is_flagged(tmp_path):
    report = check_task(_task(tmp_path, "self.lin = nn.Linear(8, 8)", "return x + 1"), "cpu")
    assert "ignores_weights" in report["flags"]
    assert "ignores_inputs" not in report["flags"]


def test_output_that_changes_between_runs_is_flagged(tmp_path):
    # module-level state: the second run on the same inputs and weights gives another answer
    report = check_task(_task(tmp_path, "", "_calls[0] += 1\nreturn x * _calls[0]"), "cpu")
    assert "non_deterministic" in report["flags"]


def test_dropout_in_training_mode_is_flagged(tmp_path):
    report = check_task(_task(tmp_path, "self.drop = nn.Dropout(0.5)", "return self.drop(x)"), "cpu")
    assert "non_deterministic" in report["flags"]


def test_reference_that_raises_is_bad_input(tmp_path):
    with pytest.raises(BadInput) as info:
        check_task(_task(tmp_path, "", "raise ValueError('boom in forward')"), "cpu")
    assert "does not run" in info.value.message
    assert "boom in forward" in info.value.message


def test_file_class_task_checks_clean(tmp_path):
    user = _write(tmp_path, "mynet.py", USER_MODULE)
    task = load_task(f"{user}:MyNet", inputs=["float32[4,16]", "int64[4]{0,10}"], init_args="[16, 0.5]")
    model_py = _write(tmp_path, "model.py", task.source)
    report = check_task(model_py, "cpu")
    assert report["flags"] == []
    assert report["inputs"] == [{"shape": [4, 16], "dtype": "float32"}, {"shape": [4], "dtype": "int64"}]
    assert report["outputs"] == [{"shape": [4, 16], "dtype": "float32"}]


def test_lint_compares_and_summarises_a_chunk_at_a_time_like_whole_tensors(monkeypatch):
    """Lint keeps outputs where they were computed and reads them in chunks (a multi-GB output in
    float64 on the host got lints killed): with tiny chunks it must still see what whole tensors show."""
    import torch

    from kernelsmith.harness import lint

    monkeypatch.setattr(lint, "CHUNK", 7)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(10, 5, generator=gen)
    y = x.clone()
    y[-1, -1] += 1e-3  # only the last chunk differs
    assert lint._close([x], [x.clone()]) and not lint._close([x], [y])
    z = x.clone()
    z[0, 0], z[3, 1] = float("nan"), float("inf")
    count, peak, mean_abs, std = lint._finite_stats(z)
    finite = z[torch.isfinite(z)].double()
    assert count == finite.numel() == 48
    assert peak == pytest.approx(float(finite.abs().max())) and mean_abs == pytest.approx(float(finite.abs().mean()))
    assert std == pytest.approx(float(finite.std()), rel=1e-9)
    report = {"flags": [], "warnings": []}
    lint._check_magnitude([torch.full((30,), 2.5), z], report)
    assert report["flags"] == ["near_constant"]
