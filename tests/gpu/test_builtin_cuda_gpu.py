"""The built-in policy's CUDA kernels on a GPU. Run on the device.

Every case of tests/test_builtin_cuda_gen.py is generated into one kernels/ folder, built once
with the harness's build (as kernelsmith.ext does), and each launch variant is compared with
torch computing the same thing in fp32. The cases at bf16, fp16 and tf32 (its PRECISION_CASES)
take their inputs at their dtype and are held to that precision's tolerance
(harness/compare.py) against fp32 torch on the same (rounded) inputs. So are the plans of
tests/test_builtin_gemm_layouts.py's modules, whose GEMM operands (transposed, strided and expanded
views) cuBLAS reads in place.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device)")]

from kernelsmith.compiler import cuda  # noqa: E402
from kernelsmith.harness import build  # noqa: E402
from kernelsmith.harness.compare import tolerance_for  # noqa: E402

import plan_runner  # noqa: E402

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int64": torch.int64}

CASES_FILE = Path(__file__).resolve().parents[1] / "test_builtin_cuda_gen.py"
LAYOUTS_FILE = CASES_FILE.with_name("test_builtin_gemm_layouts.py")


def _load_cases():
    """The hand-built groups and their torch references, shared with the CI test."""
    return plan_runner.load_module(CASES_FILE, "builtin_cuda_cases")


cases = _load_cases()


def _load_layout_cases():
    """tests/test_builtin_gemm_layouts.py: modules whose GEMM operands are transposed, strided or expanded views."""
    return plan_runner.load_module(LAYOUTS_FILE, "builtin_gemm_layout_cases")


layouts = _load_layout_cases()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One extension holding every case's kernels (a single build: about a minute cold)."""
    root = tmp_path_factory.mktemp("builtin_cuda")
    kernels = root / "kernels"
    kernels.mkdir()
    for made in cases.generate_all().values():
        for file, text in made.files.items():
            (kernels / file).write_text(text)
    result = build.build(kernels, "cuda", build_dir=root / "build")
    assert result.ok, f"{result.summary}\n{result.log[-4000:]}"
    return result


@pytest.fixture(scope="module")
def ext(built):
    return build.import_extension(built.so_path, built.name)


def test_the_bindings_are_light_and_the_pch_holds_torchs_cuda_headers(built):
    """The generated bindings include ATen's Tensor and c10's CUDA stream, not <torch/extension.h> (about 5 s
    a compile instead of 20); the files that still include it (the module's entry, bindings written with
    pybind11) find a PCH that holds torch's CUDA context and guard headers too."""
    from kernelsmith.harness import pch

    folder = Path(next(f for f in built.flags if f.startswith("-I") and (Path(f[2:]) / pch.HEADER_NAME).is_file())[2:])
    header = folder / pch.HEADER_NAME
    assert "#include <ATen/cuda/CUDAContext.h>" in header.read_text()
    assert header.with_name(header.name + ".gch").stat().st_size > 0
    bindings = {name: text for made in cases.generate_all().values() for name, text in made.files.items()
                if name.endswith("_binding.cpp")}
    assert bindings and all("torch/extension.h" not in text and '#include "binding_light.h"' in text
                            for text in bindings.values())


@pytest.fixture(autouse=True)
def true_fp32():
    """The references in true fp32, as the harness's baselines are: cuDNN (convolutions, LSTM/GRU) allows TF32
    by default, which put torch's own answer ~1e-4 off on an H100."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _random(value, generator) -> torch.Tensor:
    """A CUDA tensor for an input; a non-contiguous value gets a transposed layout."""
    shape = tuple(value.shape)
    if value.scalar:
        return 0.75  # a Python float, passed by value
    if value.dtype == "bool":
        return torch.randn(shape, device="cuda", generator=generator) > 0
    if value.contiguous:
        return torch.randn(shape, device="cuda", generator=generator).to(TORCH_DTYPES[value.dtype])
    base = torch.randn(shape[::-1], device="cuda", generator=generator).to(TORCH_DTYPES[value.dtype])
    return base.permute(*reversed(range(len(shape))))


def _run(ext, case, inputs: dict, config: int) -> list:
    got = getattr(ext, case.group.name)(*[inputs[v.name] for v in case.group.inputs], config)
    return [got] if len(case.group.outputs) == 1 else list(got)


def _inputs(case, seed: int = 0) -> dict:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return {v.name: _random(v, generator) for v in case.group.inputs}


def _as_float(inputs: dict) -> dict:
    """16-bit inputs as float32, for the fp32 reference (their rounding is part of the inputs)."""
    return {k: v.float() if isinstance(v, torch.Tensor) and v.dtype in (torch.bfloat16, torch.float16) else v
            for k, v in inputs.items()}


def _tolerance(case, out, expected: torch.Tensor) -> tuple[float, float]:
    """(rtol, atol): the case's own in fp32; the precision's (harness/compare.py) otherwise, its atol
    scaled to the result for the library calls, whose sums grow with their length."""
    if case.precision == "fp32":
        return case.rtol, 1e-3 * float(expected.abs().max()) if "gemm" in case.tags else case.atol
    tol = tolerance_for(TORCH_DTYPES[out.dtype], case.precision)
    scale = max(1.0, float(expected.abs().max())) if case.tags & {"gemm", "conv"} else 1.0
    return tol.rtol, tol.atol * scale


@pytest.mark.parametrize("name", list(cases.CASES))
def test_every_variant_matches_torch(ext, name):
    case = cases.CASES[name]()
    made = cuda.generate(case.group, case.values, case.precision)
    inputs = _inputs(case)
    kept = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}  # floats pass by value
    expected = case.reference(torch, _as_float(inputs))
    for config, variant in enumerate(made.variants):
        got = _run(ext, case, inputs, config)
        torch.cuda.synchronize()
        for out, g, e in zip(case.group.outputs, got, expected):
            where = f"{name} variant {config} ({variant}), output {out.name}"
            assert g.shape == e.shape and g.dtype == TORCH_DTYPES[out.dtype], where
            rtol, atol = _tolerance(case, out, e)
            torch.testing.assert_close(g.to(e.dtype), e, rtol=rtol, atol=atol, msg=lambda m: f"{where}: {m}")
    for key, value in kept.items():
        assert torch.equal(inputs[key], value), f"{name} modified its input {key}"


def _vectorized(name: str) -> bool:
    case = cases.CASES[name]()
    return case.group.kind == "reduction" and any(
        "VEC == 4" in text for text in cuda.generate(case.group, case.values, case.precision).files.values())


def _one_element_on(value: torch.Tensor) -> torch.Tensor:
    """The same values at a storage offset of one element: contiguous, but 4 (or 2) bytes past a 16-byte line."""
    flat = torch.empty(value.numel() + 1, dtype=value.dtype, device=value.device)
    shifted = flat[1:].view(value.shape)
    shifted.copy_(value)
    return shifted


@pytest.mark.parametrize("name", [n for n in cases.CASES if _vectorized(n)])
def test_a_vectorized_reduction_given_misaligned_inputs_takes_its_scalar_loops(ext, name):
    """The float4 loops need 16-byte aligned dense pointers; a view at an odd offset passes the binding's
    contiguity check, so the launcher must fall back to VEC 1, and the results must still match torch."""
    case = cases.CASES[name]()
    inputs = _inputs(case, seed=3)
    shifted = {k: _one_element_on(v) if isinstance(v, torch.Tensor) and v.is_contiguous() else v
               for k, v in inputs.items()}
    assert any(isinstance(v, torch.Tensor) and v.data_ptr() % 16 for v in shifted.values())
    expected = case.reference(torch, _as_float(inputs))
    for config in range(len(cuda.generate(case.group, case.values, case.precision).variants)):
        got = _run(ext, case, shifted, config)
        torch.cuda.synchronize()
        for out, g, e in zip(case.group.outputs, got, expected):
            rtol, atol = _tolerance(case, out, e)
            torch.testing.assert_close(g.to(e.dtype), e, rtol=rtol, atol=atol, msg=lambda m: f"{name} {config}: {m}")


@pytest.mark.parametrize("name", [n for n, make in cases.CASES.items()
                                  if "gemm" in make().tags and make().precision == "fp32"])
def test_gemm_is_true_fp32(ext, name):
    """Every variant, SGEMM's and the 3xTF32 tiles' alike: TF32 would be off by ~1e-4 of the scale; fp32 with
    another summation order by ~1e-7, and 3xTF32 (a dropped 2^-22 term per product) by about as little."""
    case = cases.CASES[name]()
    inputs = _inputs(case, seed=1)
    for config, variant in enumerate(cuda.generate(case.group, case.values, case.precision).variants):
        for g, e in zip(_run(ext, case, inputs, config), case.reference(torch, inputs)):
            error = float((g - e).abs().max())
            assert error <= 1e-5 * float(e.abs().max()), f"{name} {variant}: max error {error:.3g} looks like TF32"


TF32X3_CASES = [n for n, make in cases.CASES.items() if n.startswith("tf32x3")]


@pytest.mark.parametrize("name", TF32X3_CASES)
def test_every_3xtf32_tile_runs_here_and_is_float32_accurate(built, name):
    """Each tile called as the launcher calls it (ctypes on the built module): it must run, not hand back to
    SGEMM (-1), on aligned operands, and agree with torch's fp32 product as closely as SGEMM would; given an
    operand one float past a 16-byte line it must hand back to SGEMM before it launches anything."""
    import ctypes

    if not any(f.endswith("_tf32x3.cu") for f in cuda.generate(cases.CASES[name]().group,
                                                                   cases.CASES[name]().values).files):
        pytest.skip("CUTLASS is not installed here: no 3xTF32 tiles were generated")
    case = cases.CASES[name]()
    g = case.group
    library = ctypes.CDLL(built.so_path)
    gemm = getattr(library, f"{g.name}_gemm_tf32x3")
    gemm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_float, ctypes.c_int, ctypes.c_void_p]
    inputs = _inputs(case, seed=4)
    a, b = inputs[g.a], inputs[g.b]
    expected = g.alpha * (a @ (b.transpose(-1, -2) if g.trans_b else b))
    stream = torch.cuda.current_stream().cuda_stream
    for tile in range(4):
        c = torch.full(expected.shape, float("nan"), device="cuda")
        assert gemm(a.data_ptr(), b.data_ptr(), c.data_ptr(), 0.0, tile, stream) == 0, f"{name} tile {tile}"
        torch.cuda.synchronize()
        error = float((c - expected).abs().max())
        assert error <= 1e-5 * float(expected.abs().max()), f"{name} tile {tile}: max error {error:.3g}"
    shifted = _one_element_on(a)
    c = torch.zeros_like(expected)
    assert gemm(shifted.data_ptr(), b.data_ptr(), c.data_ptr(), 0.0, 0, stream) == -1
    assert not c.any()


def _layer_norm_inputs(shift: float) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """The welford_layer_norm case's inputs with x + shift far from zero, and the shifted rows and weight."""
    inputs = _inputs(cases.CASES["welford_layer_norm"](), seed=2)
    inputs["shift"] = shift
    return inputs, inputs["x"] + shift, inputs["w"]


def _naive_layer_norm(xs: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The variance as E[x^2] - E[x]^2 in fp32: one pass, and wrong far from zero."""
    mean = xs.mean(-1, keepdim=True)
    return (xs - mean) * torch.rsqrt((xs * xs).mean(-1, keepdim=True) - mean * mean + 1e-5) * w


def test_welford_rows_far_from_zero_match_torch_where_the_naive_formula_fails(ext):
    """x = 1e3 + randn: every variant within the harness's fp32 tolerance of torch; E[x^2] - E[x]^2 is not."""
    from kernelsmith.harness.compare import compare

    case = cases.CASES["welford_layer_norm"]()
    inputs, xs, w = _layer_norm_inputs(1e3)
    expected = torch.nn.functional.layer_norm(xs, (xs.shape[-1],), w, eps=1e-5)
    for config, variant in enumerate(cuda.generate(case.group, case.values).variants):
        verdict = compare(_run(ext, case, inputs, config)[0], expected, "fp32")
        assert verdict["ok"], f"variant {config} ({variant}): {verdict['reason']}"
    assert not compare(_naive_layer_norm(xs, w), expected, "fp32")["ok"]


def test_welford_rows_very_far_from_zero_are_as_close_to_the_exact_answer_as_torch(ext):
    """x = 1e4 + randn: an fp32 mean is rounded to 1e-3 there, so only closeness to the exact (float64) answer
    can be asked: as close as torch's own kernel; the naive formula is nowhere near (NaN)."""
    case = cases.CASES["welford_layer_norm"]()
    inputs, xs, w = _layer_norm_inputs(1e4)
    exact = torch.nn.functional.layer_norm(xs.double(), (xs.shape[-1],), w.double(), eps=1e-5)

    def error(y: torch.Tensor) -> float:
        return float((y.double() - exact).norm() / exact.norm())
    torch_error = error(torch.nn.functional.layer_norm(xs, (xs.shape[-1],), w, eps=1e-5))
    for config, variant in enumerate(cuda.generate(case.group, case.values).variants):
        ours = error(_run(ext, case, inputs, config)[0])
        assert ours <= 1.5 * torch_error, f"variant {config} ({variant}): {ours:.3g} off, torch {torch_error:.3g}"
    assert not error(_naive_layer_norm(xs, w)) <= 1.0


BAD_INPUTS = """
import sys, torch
from kernelsmith.harness import build
ext = build.import_extension(sys.argv[1], sys.argv[2])
x = torch.randn(8, 512, device="cuda")
w = torch.randn(512, device="cuda")
for label, call in [("shape", lambda: ext.k2_rmsnorm(x[:4], w, 0)),
                    ("contiguous", lambda: ext.k2_rmsnorm(x.t().contiguous().t(), w, 0)),
                    ("float32", lambda: ext.k2_rmsnorm(x, w.double(), 0)),
                    ("config", lambda: ext.k2_rmsnorm(x, w, 99)),
                    ("CUDA tensor", lambda: ext.k2_rmsnorm(x.cpu(), w, 0))]:
    try:
        call()
        print(label, "NO ERROR", flush=True)
    except RuntimeError as err:
        print(label, "|", str(err).splitlines()[0], flush=True)
"""


def test_bad_inputs_raise_readable_errors(ext):
    """In a child process: on the H200 a failing check once crashed the process (SIGSEGV)
    instead of raising, which would end this whole test run."""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", BAD_INPUTS, ext.__file__, ext.__name__], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"crashed on bad input (exit {proc.returncode}): {proc.stdout}{proc.stderr[-2000:]}"
    lines = dict(line.split(" | ", 1) for line in proc.stdout.splitlines() if " | " in line)
    assert "k2_rmsnorm: input x must have shape" in lines.get("shape", ""), proc.stdout
    assert "k2_rmsnorm: input x must be contiguous" in lines.get("contiguous", ""), proc.stdout
    assert "k2_rmsnorm: input w must be float32" in lines.get("float32", ""), proc.stdout
    assert "k2_rmsnorm: config must be in" in lines.get("config", ""), proc.stdout
    assert "k2_rmsnorm: input x must be a CUDA tensor" in lines.get("CUDA tensor", ""), proc.stdout


def test_runs_on_the_current_stream(ext):
    case = cases.CASES["softmax"]()
    inputs = _inputs(case)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = _run(ext, case, inputs, 0)[0]
    stream.synchronize()
    torch.testing.assert_close(got, torch.softmax(inputs["x"], dim=1), rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def layout_ext(tmp_path_factory):
    """The CUDA plans of test_builtin_gemm_layouts.py's modules, their kernels in one extension."""
    root = tmp_path_factory.mktemp("gemm_layouts")
    files, plans = layouts.generated_apart(root / "tasks", "cuda")
    (root / "kernels").mkdir()
    for file, text in files.items():
        (root / "kernels" / file).write_text(text)
    result = build.build(root / "kernels", "cuda", build_dir=root / "build")
    assert result.ok, f"{result.summary}\n{result.log[-4000:]}"
    return build.import_extension(result.so_path, result.name), plans


@pytest.mark.parametrize("name", list(layouts.CASES))
def test_gemm_operands_read_in_place_match_torch(layout_ext, name):
    """cuBLAS reads the transposed, strided and expanded operands where they lie: every variant against torch."""
    ext, plans = layout_ext
    module_source, shape, _ = layouts.CASES[name]
    torch.manual_seed(0)
    module = eval(module_source, layouts.NAMESPACE).cuda()
    x = torch.randn(*shape, device="cuda")
    plan, variants = plans[name]
    with torch.no_grad():
        expected = torch.tanh(module(x)) * 2.0
        for config in range(max(variants)):
            got = layouts.run_plan(ext, plan, layouts.inputs_of(module, plan, x), config, variants)
            torch.cuda.synchronize()
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=lambda m: f"{name} {config}: {m}")


# --- recurrent layers (compiler/recurrent.py): tests/test_builtin_recurrent.py's LSTM and GRU cases -------------

RECURRENT_FILE = CASES_FILE.with_name("test_builtin_recurrent.py")


def _load_recurrent_cases():
    return plan_runner.load_module(RECURRENT_FILE, "builtin_recurrent_cases")


recurrent = _load_recurrent_cases()


def _extension_of(root: Path, files: dict[str, str]):
    (root / "kernels").mkdir()
    for file, text in files.items():
        (root / "kernels" / file).write_text(text)
    result = build.build(root / "kernels", "cuda", build_dir=root / "build")
    assert result.ok, f"{result.summary}\n{result.log[-4000:]}"
    return build.import_extension(result.so_path, result.name)


@pytest.fixture(scope="module")
def recurrent_ext(tmp_path_factory):
    """The CUDA plans of the recurrent cases (cuBLAS SGEMMs and the cell kernels), in one extension."""
    root = tmp_path_factory.mktemp("recurrent")
    files, plans = recurrent.generated_apart(root / "tasks", "cuda")
    return _extension_of(root, files), plans, root / "tasks"


@pytest.mark.parametrize("name", list(recurrent.CASES))
def test_lstm_and_gru_match_torch(recurrent_ext, name):
    """Layers, directions, batch_first, no bias; output, h_n and c_n: every variant against cuDNN in fp32."""
    ext, plans, root = recurrent_ext
    plan, variants = plans[name]
    for config in range(max(variants)):
        torch.manual_seed(1)
        expected, got = recurrent.expected_and_got(root, name, ext, plan, variants, config, "cuda")
        torch.cuda.synchronize()
        assert len(got) == len(expected)
        for want, have in zip(expected, got):
            torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name} {config}: {m}")


@pytest.mark.parametrize("task", recurrent.kernelbench_recurrent_tasks(), ids=lambda p: p.stem)
def test_kernelbenchs_recurrent_tasks_match_torch(tmp_path, task):
    """level3/35-42 at their own sizes (6 layers, 512 steps): the plan's kernels against the task's Model."""
    from kernelsmith.compiler.pipeline import build_plan

    built = build_plan(task, "cuda", "fp32")
    assert not built.unsupported, built.unsupported
    files = {}
    for group in built.plan.groups():
        files.update(cuda.generate(group, built.plan.values, "fp32").files)
    ext = _extension_of(tmp_path, files)
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "model.py").write_text(task.read_text())
    torch.manual_seed(0)
    expected, got = recurrent.expected_and_got(tmp_path, "task", ext, built.plan, [len(v) for v in built.variants],
                                               0, "cuda")
    for want, have in zip(expected, got):
        torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-4)
