"""`kernelsmith export`: the accepted kernel of a real recorded workdir as a Python package,
imported in a fresh process (no kernelsmith on the path there): numerics against the
reference, torch.compile through the custom op's fake implementation, and clear errors for
inputs the kernel was not verified for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from data.sessions.workdirs import restore_workdir
from kernelsmith.errors import BadInput
from kernelsmith.export import rewrite_imports

CLI = [sys.executable, "-m", "kernelsmith.cli"]

CHECK = textwrap.dedent('''
    import importlib.util, json, sys
    import torch
    sys.path[:] = [p for p in sys.path if "site-packages" in p or "lib/python" in p]  # no checkout, no cwd
    sys.path.insert(0, sys.argv[1])
    import triple_kernel as k
    assert "kernelsmith" not in sys.modules, "the export must not need kernelsmith"
    spec = importlib.util.spec_from_file_location("ref", sys.argv[2])
    ref = importlib.util.module_from_spec(spec); spec.loader.exec_module(ref)
    reference = ref.Model(*ref.get_init_inputs())
    model = k.Model()
    model.load_state_dict(reference.state_dict())
    x = ref.get_inputs()[0]
    res = {"max_err": (model(x) - reference(x)).abs().max().item()}
    # aot_eager traces with fake tensors (the fake implementation) without inductor's C++ build
    f = torch.compile(lambda x: model(x).relu() + 1, backend="aot_eager", fullgraph=True)
    res["compiled_err"] = (f(x) - (reference(x).relu() + 1)).abs().max().item()
    res["op"] = str(torch.ops.__getattr__(k.MANIFEST["op"].split("::")[0]).forward)
    for name, bad in (("dtype", x.double()), ("shape", x[:5].contiguous()), ("layout", x.t()),
                      ("count", None)):
        try:
            model(bad) if bad is not None else model(x, x)
            res[name] = "no error"
        except k.KernelInputError as err:
            res[name] = str(err)
    try:
        k.Model(7)
    except k.KernelInputError as err:
        res["init"] = str(err)
    print(json.dumps(res))
''')


def ks(*args, cwd=None):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=300)


def one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture
def workdir(tmp_path):
    return restore_workdir("triple", tmp_path / "triple")


@pytest.mark.slow_build
def test_exported_kernel_imports_fresh_matches_the_reference_and_compiles(workdir, tmp_path):
    assert ks("accept", "HEAD", "--workdir", workdir).returncode == 0
    proc = ks("export", workdir, "--out", tmp_path / "out", "--json")
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout)
    package = tmp_path / "out" / "triple_kernel"
    assert done["path"] == str(package) and done["inputs"] == [{"shape": [33, 129], "dtype": "float32"}]
    readme = (package / "README.md").read_text()
    assert "0.04x" in readme and done["commit"] in readme and "float32[33, 129]" in readme
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    env = {**os.environ, "KERNELSMITH_EXPORT_BUILD_DIR": str(tmp_path / "build"), "PYTHONPATH": ""}
    # an earlier import killed inside cpp_extension left its lock file: this import must not wait on it for ever
    stale = tmp_path / "build" / json.loads((package / "export.json").read_text())["extension"] / "lock"
    stale.parent.mkdir(parents=True)
    stale.touch()
    proc = subprocess.run([sys.executable, script, tmp_path / "out", workdir / "model.py"], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["max_err"] < 1e-5 and res["compiled_err"] < 1e-5
    assert "ks_triple_" in res["op"]
    assert res["dtype"] == "triple: input 0 has dtype float64; the kernel was verified for float32"
    assert res["shape"] == "triple: input 0 has shape [5, 129]; the kernel was verified for shape [33, 129] only"
    assert "transposed" in res["layout"] or "shape" in res["layout"]
    assert res["count"] == "triple: expected 1 input(s), got 2"
    assert "constructor arguments [] only" in res["init"]


def test_export_needs_an_accepted_kernel_and_a_new_folder(workdir, tmp_path):
    assert "no accepted kernel" in one_line_error(ks("export", workdir, "--out", tmp_path / "out"))
    (tmp_path / "out" / "triple_kernel").mkdir(parents=True)
    assert "already exists" in one_line_error(ks("export", workdir, "--out", tmp_path / "out", "--rev", "HEAD"))
    assert "is not a commit" in one_line_error(ks("export", workdir, "--out", tmp_path / "o2", "--rev", "nope"))
    assert "not a Python identifier" in one_line_error(ks("export", workdir, "--out", tmp_path / "o3",
                                                          "--rev", "HEAD", "--name", "my-kernel"))


def test_export_by_rev_writes_the_commit_files_not_the_working_ones(workdir, tmp_path):
    (workdir / "kernels" / "triple.cpp").write_text("// an uncommitted edit\n")
    proc = ks("export", workdir, "--out", tmp_path / "out", "--rev", "HEAD~1", "--name", "first")
    assert proc.returncode == 0, proc.stderr
    package = tmp_path / "out" / "first"
    assert "3.0f" in (package / "kernels" / "triple.cpp").read_text()
    assert "from ._runtime import load_kernels" in (package / "model_new.py").read_text()
    assert json.loads((package / "export.json").read_text())["turn"] == 5


def test_rewrite_imports_refuses_what_it_cannot_rewrite():
    assert rewrite_imports("from kernelsmith.ext import load_kernels\nfrom model import Model\n", "abc") == \
        "from ._runtime import load_kernels\nfrom .reference import Model\n"
    with pytest.raises(BadInput, match="imports kernelsmith"):
        rewrite_imports("import kernelsmith.ext as e\n", "abc")
