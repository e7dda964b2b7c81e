"""Building kernels/ into a torch extension: error summaries, nvcc checks, and one real CPU build.

The real build is expensive (about a minute per translation unit), so the whole file builds
one extension (the `built` fixture) and derives every other build assertion from cheap
follow-ups: a cache hit, a one-file rebuild, a failing build. Rebuilds run in real worker
processes, as `kernelsmith verify` runs them; builds land in a temporary KERNELSMITH_BUILD_DIR.
"""

from __future__ import annotations

import json
import os
import signal
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelsmith.evaluation import build_plan, evaluate, runner
from kernelsmith.harness import build
from kernelsmith.harness.build import MAX_ERRORS, nvcc_compile_only, summarize_errors

ADD_ONE = r'''// a second translation unit: y = x + 1
#include <torch/extension.h>

#include "binding_registry.h"

torch::Tensor add_one(torch::Tensor x) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "add_one: x must be float32");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const float* src = xc.data_ptr<float>();
  float* dst = y.data_ptr<float>();
  for (int64_t i = 0; i < xc.numel(); ++i) dst[i] = src[i] + 1.0f;
  return y;
}

REGISTER_BINDING(add_one, add_one);
'''

# add_one.cpp with a typo on line 12 (`srcc` is not declared)
ADD_ONE_BROKEN = ADD_ONE.replace("dst[i] = src[i] + 1.0f;", "dst[i] = srcc[i] + 1.0f;")
BROKEN_LINE = 12

# the fix, plus a new function: proves the rebuilt object is the one that gets linked
ADD_ONE_FIXED = ADD_ONE + r'''
torch::Tensor add_two(torch::Tensor x) { return add_one(add_one(x)); }

REGISTER_BINDING(add_two, add_two);
'''


def _lines(text: str) -> list[str]:
    return text.splitlines()


# --- summarize_errors ----------------------------------------------------------------------------


@pytest.fixture
def source_file(tmp_path: Path) -> Path:
    """A 20-line source file whose line N reads `int v<N> = N;`."""
    path = tmp_path / "foo.cpp"
    path.write_text("".join(f"int v{n} = {n};\n" for n in range(1, 21)))
    return path


def test_gcc_error_names_file_line_and_message(tmp_path):
    log = "path/foo.cpp:12:5: error: 'x' was not declared in this scope\n"
    summary = summarize_errors(log)
    assert "foo.cpp:12" in summary
    assert "'x' was not declared in this scope" in summary
    assert len(_lines(summary)) == 1  # the file does not exist here: no context to show


def test_nvcc_error_names_file_line_and_message():
    log = 'kernels/foo.cu(12): error: identifier "y" is undefined\n'
    summary = summarize_errors(log)
    assert "foo.cu:12" in summary
    assert 'identifier "y" is undefined' in summary


def test_gcc_error_shows_source_context_when_file_exists(source_file):
    log = f"{source_file}:12:5: error: 'x' was not declared in this scope\n"
    summary = summarize_errors(log)
    lines = _lines(summary)
    assert "foo.cpp:12" in lines[0] and "'x' was not declared" in lines[0]
    context = lines[1:]
    for n in (11, 12, 13):
        assert any(f"int v{n} = {n};" in line for line in context), f"line {n} missing from context:\n{summary}"
    marked = [line for line in context if line.lstrip().startswith(">")]
    assert len(marked) == 1 and "int v12 = 12;" in marked[0], summary
    assert not any("int v5 = 5;" in line or "int v19 = 19;" in line for line in context), summary


def test_nvcc_error_shows_source_context_when_file_exists(tmp_path):
    cu = tmp_path / "foo.cu"
    cu.write_text("".join(f"float w{n} = {n};\n" for n in range(1, 21)))
    summary = summarize_errors(f'{cu}(7): error: identifier "y" is undefined\n')
    assert "foo.cu:7" in summary and 'identifier "y" is undefined' in summary
    marked = [line for line in _lines(summary) if line.lstrip().startswith(">")]
    assert len(marked) == 1 and "float w7 = 7;" in marked[0], summary


def test_duplicate_errors_are_merged(source_file):
    err = f"{source_file}:12:5: error: 'x' was not declared in this scope"
    other = f"{source_file}:3:1: error: expected ';' before '}}' token"
    summary = summarize_errors("\n".join([err, "compilation terminated.", err, other, err]) + "\n")
    assert summary.count("'x' was not declared") == 1, summary
    assert summary.count("expected ';'") == 1, summary
    headers = [line for line in _lines(summary) if "error:" in line]
    assert len(headers) == 2, summary


def test_duplicates_do_not_count_as_more_errors():
    # nvcc prints each device-code error once per target architecture
    err = 'kernels/foo.cu(12): error: identifier "y" is undefined'
    summary = summarize_errors("\n".join([err, err, err]) + "\n")
    assert "more" not in summary, summary


def test_errors_are_capped_with_a_count_of_the_rest():
    log = "\n".join(f"src/k.cpp:{n}:1: error: problem number {n}" for n in range(1, MAX_ERRORS + 4)) + "\n"
    summary = summarize_errors(log)
    for n in range(1, MAX_ERRORS + 1):
        assert f"problem number {n}\n" in summary + "\n", summary
    assert f"problem number {MAX_ERRORS + 1}" not in summary
    assert _lines(summary)[-1].startswith("... and 3 more"), summary


def test_link_error_is_one_line():
    log = ("Traceback (most recent call last):\n"
           "  File \"x.py\", line 3, in <module>\n"
           "ImportError: /tmp/build/ks_ab_cpu.so: undefined symbol: foo\n")
    summary = summarize_errors(log)
    assert len(_lines(summary)) == 1, summary
    assert summary.startswith("link error")
    assert "undefined symbol: foo" in summary


def test_ld_undefined_reference_is_a_link_error():
    log = ("[3/3] c++ binding.o add_one.o -shared -o ks_ab_cpu.so\n"
           "FAILED: ks_ab_cpu.so\n"
           "/usr/bin/ld: add_one.o: in function `add_one(at::Tensor)':\n"
           "add_one.cpp:(.text+0x1d): undefined reference to `helper(float)'\n"
           "collect2: error: ld returned 1 exit status\n"
           "ninja: build stopped: subcommand failed.\n")
    summary = summarize_errors(log)
    assert len(_lines(summary)) == 1, summary
    assert summary.startswith("link error") and "helper(float)" in summary


def test_long_template_log_summarises_to_a_few_lines(source_file):
    noise = [
        "In file included from /opt/torch/include/torch/extension.h:5,",
        "                 from /work/kernels/foo.cpp:2:",
        "/opt/torch/include/pybind11/cast.h:1234:12: note: candidate: 'template<class T> T cast(handle)'",
        "/opt/torch/include/pybind11/cast.h:1234:12: note:   template argument deduction/substitution failed:",
        "/opt/torch/include/pybind11/pybind11.h:88:5:   required from 'void pybind11::module_::def(Func&&)'",
        " 1234 |     return caster.template cast<T>(h);",
        "      |            ^~~~~~",
        "/opt/torch/include/c10/util/Exception.h:42:5: warning: unused variable 'x' [-Wunused-variable]",
    ]
    log_lines = [noise[i % len(noise)] for i in range(400)]
    log_lines[100] = f"{source_file}:12:5: error: 'x' was not declared in this scope"
    log_lines[300] = f"{source_file}:17:9: error: no matching function for call to 'cast<float>(int&)'"
    summary = summarize_errors("\n".join(log_lines) + "\n")
    lines = _lines(summary)
    assert len(lines) < 20, summary
    assert "foo.cpp:12" in summary and "'x' was not declared" in summary
    assert "foo.cpp:17" in summary and "no matching function" in summary
    assert not any("note:" in line or "warning:" in line or "required from" in line for line in lines), summary


# --- nvcc compile-only ---------------------------------------------------------------------------

CU_OK = r'''
__global__ void scale(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}
'''


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_nvcc_compile_only_reports_a_typo_with_file_and_line(tmp_path):
    good = tmp_path / "good.cu"
    good.write_text(CU_OK)
    ok, log = nvcc_compile_only(good, arch="sm_90", out_dir=tmp_path)
    assert ok, log
    assert (tmp_path / "good.o").is_file()

    bad = tmp_path / "bad_kernel.cu"
    bad.write_text(CU_OK.replace("a * x[i]", "a * xx[i]"))  # line 4
    ok, summary = nvcc_compile_only(bad, arch="sm_90", out_dir=tmp_path)
    assert not ok
    assert "bad_kernel.cu:4" in summary, summary
    assert "xx" in summary and "undefined" in summary, summary
    assert len(_lines(summary)) < 15, summary


# --- kernel_sources ------------------------------------------------------------------------------


def test_a_source_that_includes_cutlass_gets_its_headers_on_the_nvcc_line(tmp_path, monkeypatch):
    include = tmp_path / "cutlass-include"
    (include / "cutlass").mkdir(parents=True)
    (include / "cutlass" / "cutlass.h").write_text("#pragma once\n")
    monkeypatch.setenv(build_plan.CUTLASS_ENV, str(include))
    uses, plain = tmp_path / "g.cu", tmp_path / "p.cu"
    uses.write_text('#include "cutlass/cutlass.h"\n')
    plain.write_text("// no library\n")
    assert build_plan.libraries_used([uses])["cutlass"] and not build_plan.libraries_used([plain])["cutlass"]
    flags = build_plan.compile_flags("cuda", False, **build_plan.libraries_used([uses, plain]))
    assert f"-I{include.resolve()}" in flags["cuda_flags"]
    assert not any(f.startswith("-I") for f in build_plan.compile_flags("cuda", False)["cuda_flags"])


def test_cutlass_is_looked_for_where_the_user_points_and_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv(build_plan.CUTLASS_ENV, str(tmp_path / "nothing-here"))
    monkeypatch.delenv("CUTLASS_PATH", raising=False)
    assert build_plan.cutlass_include() != tmp_path / "nothing-here"  # a folder without cutlass/cutlass.h is skipped
    (tmp_path / "checkout" / "include" / "cutlass").mkdir(parents=True)
    (tmp_path / "checkout" / "include" / "cutlass" / "cutlass.h").write_text("")
    monkeypatch.setenv("CUTLASS_PATH", str(tmp_path / "checkout"))  # a CUTLASS checkout, as CMake users set it
    assert build_plan.cutlass_include() == (tmp_path / "checkout" / "include").resolve()
    monkeypatch.setenv(build_plan.CUTLASS_ENV, "0")
    assert build_plan.cutlass_include() is None


def test_cu_files_only_build_for_cuda(tmp_path):
    for name in ("a.cpp", "b.cu", "c.cc", "notes.txt", "d.cuh"):
        (tmp_path / name).write_text("// x\n")
    (tmp_path / "sub.cpp").mkdir()  # a folder is not a source
    assert [p.name for p in build_plan.kernel_sources(tmp_path, "cuda")] == ["a.cpp", "b.cu", "c.cc"]
    with pytest.raises(build_plan.BuildError, match="CUDA sources"):  # a CUDA folder built for the CPU
        build_plan.kernel_sources(tmp_path, "cpu")
    (tmp_path / "b.cu").unlink()
    assert [p.name for p in build_plan.kernel_sources(tmp_path, "cpu")] == ["a.cpp", "c.cc"]


def test_empty_kernels_dir_fails_readably(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSMITH_BUILD_DIR", str(tmp_path / "builds"))
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    result = build.build(kernels, "cpu")
    assert not result.ok and not result.cached
    assert "no kernel sources" in result.summary and str(kernels) in result.summary
    assert ".cpp" in result.summary


def test_cu_only_kernels_dir_fails_readably_on_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSMITH_BUILD_DIR", str(tmp_path / "builds"))
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "k.cu").write_text(CU_OK)
    result = build.build(kernels, "cpu")
    assert not result.ok
    assert "CUDA sources" in result.summary and "--device cuda" in result.summary


# --- one real CPU build --------------------------------------------------------------------------


def worker_build(kernels: Path) -> dict:
    """Build in a fresh worker process, the way `kernelsmith verify` does."""
    return runner.run_job({"kind": "build", "kernels_dir": str(kernels), "device": "cpu"}, 900)


def call_extension(so_path: str, name: str, body: str) -> dict:
    """Import the extension with build.import_extension in a fresh process; run body, which sets `out`.

    A fresh process, because a rebuild relinks the shared object in place and an extension
    cannot be re-imported in the process that already loaded it.
    """
    script = textwrap.dedent(f"""
        import json, torch
        from kernelsmith.harness import build
        ext = build.import_extension({so_path!r}, {name!r})
        out = {{}}
    """) + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def object_mtimes(build_dir: Path) -> dict[str, int]:
    """Each object the extension links, by name; the module's entry (binding.cpp's object, or the one
    compiled once beside the precompiled header) as "entry"."""
    found = {p.name: p.stat().st_mtime_ns for p in build_dir.glob("*.o")}
    linked = re.search(r"^ldflags = .*?(\S*binding_module-\w+\.o)", (build_dir / "build.ninja").read_text(), re.M)
    entry = Path(linked.group(1)) if linked else build_dir / "binding.o"
    return {**found, "entry": entry.stat().st_mtime_ns}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """kernels/ with two .cpp files (the template example and add_one), built once in a worker."""
    root = tmp_path_factory.mktemp("build")
    kernels = root / "work" / "kernels"
    kernels.mkdir(parents=True)
    shutil.copy(build.TEMPLATES / "cpu" / "example_scale.cpp", kernels / "example_scale.cpp")
    (kernels / "add_one.cpp").write_text(ADD_ONE)
    build_root = root / "builds"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELSMITH_BUILD_DIR", str(build_root))  # workers inherit it
        result = worker_build(kernels)
        yield {"kernels": kernels, "build_root": build_root, "first": result}


def test_first_build_compiles(built):
    first = built["first"]
    assert first["ok"], first["summary"]
    assert not first["cached"]
    so = Path(first["so_path"])
    assert so.is_file()
    assert built["build_root"] in so.parents, f"{so} is outside KERNELSMITH_BUILD_DIR"
    assert {"entry", "example_scale.o", "add_one.o"} <= set(object_mtimes(so.parent))


def test_built_extension_exposes_every_registered_function(built):
    first = built["first"]
    out = call_extension(first["so_path"], first["name"], """
        x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        out["names"] = sorted(n for n in dir(ext) if not n.startswith("_"))
        out["scaled"] = ext.example_scale(x, 2.5, 0).tolist()
        out["plus_one"] = ext.add_one(x).tolist()
    """)
    assert {"example_scale", "add_one"} <= set(out["names"])
    assert out["scaled"] == [[0.0, 2.5, 5.0], [7.5, 10.0, 12.5]]
    assert out["plus_one"] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def test_unchanged_build_is_a_fast_cache_hit(built):
    first = built["first"]
    start = time.perf_counter()
    again = build.build(built["kernels"], "cpu")
    elapsed = time.perf_counter() - start
    assert again.ok and again.cached
    assert elapsed < 1.0 and again.seconds < 1.0
    assert again.so_path == first["so_path"] and again.name == first["name"]


def test_build_in_a_worker_reuses_the_cache(built):
    result = worker_build(built["kernels"])
    assert result["ok"] and result["cached"]
    assert result["so_path"] == built["first"]["so_path"]


def test_compile_error_then_fix_rebuilds_only_the_edited_file(built):
    kernels, first = built["kernels"], built["first"]
    build_dir = Path(first["so_path"]).parent
    before = object_mtimes(build_dir)

    (kernels / "add_one.cpp").write_text(ADD_ONE_BROKEN)
    failed = build.build(kernels, "cpu")  # must not raise
    assert not failed.ok and not failed.cached
    assert f"add_one.cpp:{BROKEN_LINE}" in failed.summary, failed.summary
    assert "srcc" in failed.summary
    assert len(_lines(failed.summary)) < 40, failed.summary
    assert failed.log  # the full log is kept for --verbose

    # a spare build worker (a session on a GPU starts one after each build) started before the fix is
    # written must build the file as it is when its job comes
    runner.SPARES.stock({"kind": "build", "kernels_dir": str(kernels), "device": "cpu", "fast_math": False}, 1800.0)
    (kernels / "add_one.cpp").write_text(ADD_ONE_FIXED)
    fixed = evaluate.run_build(kernels, "cpu", False)
    assert runner.SPARES.count() == 0  # the spare took the job
    assert fixed["ok"], fixed["summary"]
    assert not fixed["cached"]
    after = object_mtimes(build_dir)
    assert after["add_one.o"] > before["add_one.o"], "the edited file was not recompiled"
    assert after["example_scale.o"] == before["example_scale.o"], "the untouched file was recompiled"
    assert after["entry"] == before["entry"], "the module's entry was recompiled"

    out = call_extension(fixed["so_path"], fixed["name"], """
        x = torch.zeros(4)
        out["plus_two"] = ext.add_two(x).tolist()
        out["scaled"] = ext.example_scale(torch.ones(2), 3.0, 0).tolist()
    """)
    assert out["plus_two"] == [2.0, 2.0, 2.0, 2.0]
    assert out["scaled"] == [3.0, 3.0]

    assert build.build(kernels, "cpu").cached  # and the fixed state is what the cache now holds


def test_a_build_killed_midway_does_not_hang_the_next_one(built):
    """A build killed inside cpp_extension (a timeout, Ctrl-C, a pool ending its workers) leaves torch's lock
    file in the folder; torch's next build there waited on it for ever (a CPU `train rft` hung 10 minutes)."""
    kernels = built["kernels"]
    build_dir = Path(built["first"]["so_path"]).parent
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from kernelsmith.harness import build; "
                             "build.build(sys.argv[1], 'cpu')", str(kernels)], start_new_session=True)
    (kernels / "add_one.cpp").write_text(ADD_ONE_FIXED + f"// {time.time()}\n")  # something to compile
    deadline = time.time() + 120
    while not (build_dir / "lock").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # inside torch's build: its lock file stays behind
    proc.wait()
    (build_dir / "lock").touch()  # left behind, whether or not the kill came before torch made it
    result = runner.run_job({"kind": "build", "kernels_dir": str(kernels), "device": "cpu"}, 240)
    assert result.get("ok"), result
    out = call_extension(result["so_path"], result["name"], 'out["y"] = ext.add_two(torch.zeros(2)).tolist()')
    assert out["y"] == [2.0, 2.0]
