"""The extension compiler check: a $CXX whose extensions carry their own libstdc++ is caught, and
builds switch to the system c++, so a candidate's failing TORCH_CHECK stays a readable error.

The bad compiler is real: a wrapper that adds -static-libstdc++ to g++. Its extensions lose the
shape in a TORCH_CHECK message here and crash with SIGSEGV on the H200 machine (toolchain.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelsmith.evaluation import toolchain


def _static_libstdcxx_available() -> bool:
    if not shutil.which("g++"):
        return False
    out = subprocess.run(["g++", "-print-file-name=libstdc++.a"], capture_output=True, text=True).stdout.strip()
    return os.path.isabs(out)


pytestmark = pytest.mark.skipif(not _static_libstdcxx_available(), reason="needs g++ and a static libstdc++")


@pytest.fixture
def bad_cxx(tmp_path) -> str:
    wrapper = tmp_path / "bin" / "g++-static"
    wrapper.parent.mkdir()
    wrapper.write_text('#!/bin/sh\nexec g++ "$@" -static-libstdc++\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture(autouse=True)
def check_on(monkeypatch):
    monkeypatch.delenv("KERNELSMITH_CXX_CHECK", raising=False)


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """Verdicts in a cache of the test's own (the end-to-end build keeps the user cache: its PCH)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_the_system_compiler_is_fit():
    fit, why = toolchain.probe("g++")
    assert fit, why


def test_a_compiler_that_links_its_own_libstdcxx_is_not_fit(bad_cxx):
    fit, why = toolchain.probe(bad_cxx)
    assert not fit
    assert bad_cxx in why and ("formats numbers wrongly" in why or "crashes" in why)


def test_a_compiler_that_is_not_there_is_undecided_and_left_alone(own_cache, tmp_path, monkeypatch):
    fit, why = toolchain.verdict(str(tmp_path / "no-such-g++"))
    assert fit is None and "not found" in why
    monkeypatch.setenv("CXX", "no-such-ccache g++")  # a command with arguments, as torch's ninja file takes it
    notes: list[str] = []
    toolchain.choose_compiler(notes)
    assert os.environ["CXX"] == "no-such-ccache g++" and "was not checked" in notes[0]


def test_a_compiler_with_arguments_is_probed_as_a_command(own_cache, bad_cxx):
    assert toolchain.verdict("env g++")[0] is True
    assert toolchain.verdict(f"env {bad_cxx}")[0] is False


def test_the_probe_ignores_modules_in_the_working_directory(own_cache, tmp_path, monkeypatch):
    (tmp_path / "numpy.py").write_text("raise SystemExit(3)\n")  # torch imports numpy: a workdir could shadow it
    monkeypatch.chdir(tmp_path)
    assert toolchain.probe("g++")[0] is True


def test_a_probe_that_cannot_run_is_not_cached(own_cache, bad_cxx, monkeypatch):
    def cannot(compiler):
        raise toolchain.Unsettled("TimeoutExpired")
    monkeypatch.setattr(toolchain, "probe", cannot)
    fit, why = toolchain.verdict(bad_cxx)
    assert fit is None and "could not run" in why
    monkeypatch.undo()
    assert toolchain.verdict(bad_cxx)[0] is False  # decided now, not stuck on the first answer


def test_an_unwritable_cache_still_gives_a_verdict_and_never_fails_a_build(tmp_path, bad_cxx, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setenv("CXX", bad_cxx)
    notes: list[str] = []
    toolchain.choose_compiler(notes)
    assert os.environ["CXX"] == shutil.which("c++") and "is not fit" in notes[0]


def test_a_jailed_worker_reads_a_cached_verdict_without_probing(own_cache, tmp_path, bad_cxx, monkeypatch):
    """The jail shows the user cache read-only, so its lock cannot be taken there. The verdict the parent
    cached must still be read: probing again compiled a library and imported torch in a fresh process for
    every check, about 4 s per build (the op watch's, the candidate's kernels') in each H200 worker."""
    first = toolchain.verdict(bad_cxx)  # the parent's check, cached
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "kernelsmith" / "toolchain"
    monkeypatch.setattr(toolchain, "probe", lambda compiler: pytest.fail("probed in the jail"))
    from kernelsmith.evaluation import build_plan

    def no_lock(path):  # what a read-only cache does to the lock
        raise PermissionError(f"read-only: {path}")
    monkeypatch.setattr(build_plan, "cache_lock", no_lock)
    assert any(cache.glob("*.json")) and toolchain.verdict(bad_cxx) == first


def test_the_build_stamp_changes_with_the_compiler(tmp_path, monkeypatch):
    from kernelsmith.evaluation import build_plan

    source = tmp_path / "k_binding.cpp"
    source.write_text("// empty\n")
    monkeypatch.setenv("CXX", "g++")
    first = build_plan.fingerprint([source], {}, "", "ks_x_cpu")
    monkeypatch.setenv("CXX", "/usr/bin/c++")
    assert build_plan.fingerprint([source], {}, "", "ks_x_cpu") != first  # a .so from the unfit compiler is not reused


def test_verdicts_are_cached_per_compiler(own_cache, bad_cxx, monkeypatch):
    first = toolchain.verdict(bad_cxx)
    monkeypatch.setattr(toolchain, "probe", lambda compiler: pytest.fail("probed again"))
    assert toolchain.verdict(bad_cxx) == first
    # a changed compiler (new stamp) is probed afresh
    Path(bad_cxx).write_text('#!/bin/sh\nexec g++ "$@"\n')
    with pytest.raises(pytest.fail.Exception, match="probed again"):
        toolchain.verdict(bad_cxx)


def test_an_unfit_cxx_is_swapped_for_the_system_compiler(own_cache, bad_cxx, monkeypatch):
    monkeypatch.setenv("CXX", bad_cxx)
    notes: list[str] = []
    toolchain.choose_compiler(notes)
    assert os.environ["CXX"] == shutil.which("c++")
    assert len(notes) == 1 and f"CXX={bad_cxx} is not fit" in notes[0] and "KERNELSMITH_CXX_CHECK=0" in notes[0]


def test_a_fit_or_unset_cxx_is_left_alone(own_cache, monkeypatch):
    monkeypatch.setenv("CXX", "g++")
    notes: list[str] = []
    toolchain.choose_compiler(notes)
    assert os.environ["CXX"] == "g++" and notes == []
    monkeypatch.delenv("CXX")
    monkeypatch.setattr(toolchain, "verdict", lambda compiler: pytest.fail("probed with no CXX set"))
    toolchain.choose_compiler(notes)
    assert "CXX" not in os.environ and notes == []


def test_the_check_can_be_turned_off(own_cache, bad_cxx, monkeypatch):
    monkeypatch.setenv("CXX", bad_cxx)
    monkeypatch.setenv("KERNELSMITH_CXX_CHECK", "0")
    notes: list[str] = []
    toolchain.choose_compiler(notes)
    assert os.environ["CXX"] == bad_cxx and notes == []


CHECKED_BINDING = r"""#include <torch/extension.h>
#include "binding_registry.h"

torch::Tensor first_rows(torch::Tensor x) {
  TORCH_CHECK((x.sizes().vec() == std::vector<int64_t>{8, 512}), "first_rows: x must be [8, 512], got ", x.sizes());
  return x;
}

REGISTER_BINDING(first_rows, first_rows);
"""

CALL_WITH_A_BAD_SHAPE = textwrap.dedent("""
    import sys, torch
    from kernelsmith.harness import build
    result = build.build(sys.argv[1], "cpu", build_dir=sys.argv[2])
    print("NOTES", result.notes, flush=True)
    ext = build.import_extension(result.so_path, result.name)
    try:
        ext.first_rows(torch.zeros(4, 512))
    except RuntimeError as err:
        print("RAISED", str(err).splitlines()[0])
""")


def test_a_build_under_an_unfit_cxx_keeps_torch_check_messages_whole(bad_cxx, tmp_path):
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "first_rows_binding.cpp").write_text(CHECKED_BINDING)
    env = {**os.environ, "CXX": bad_cxx, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", CALL_WITH_A_BAD_SHAPE, str(kernels), str(tmp_path / "build")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "RAISED first_rows: x must be [8, 512], got [4, 512]" in done.stdout, done.stdout + done.stderr[-2000:]
    assert f"CXX={bad_cxx} is not fit" in done.stdout


BUILD_ONCE = textwrap.dedent("""
    import json, sys
    from kernelsmith.evaluation import runner
    from kernelsmith.evaluation.evaluate import run_build
    spawned = []
    real_run = runner.Prestarted.run  # every worker's job goes through it
    runner.Prestarted.run = lambda self, rest: spawned.append(1) or real_run(self, rest)
    built = run_build(__import__("pathlib").Path(sys.argv[1]), "cpu", False)
    print(json.dumps({"ok": built["ok"], "worker": bool(spawned)}))
""")


def test_a_second_build_under_an_unfit_cxx_is_a_cache_hit_in_a_new_process(bad_cxx, tmp_path):
    """The stamp names the compiler the worker built with (the system c++); the parent's check of the stamp
    must compare it with the same one, not with the $CXX the user set (the CLI's `compile` of unchanged
    kernels rebuilt every time on the H200, whose $CXX is unfit)."""
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "first_rows_binding.cpp").write_text(CHECKED_BINDING)
    env = {**os.environ, "CXX": bad_cxx, "PYTHONPATH": os.pathsep.join(sys.path),
           "KERNELSMITH_BUILD_DIR": str(tmp_path / "build")}
    runs = [subprocess.run([sys.executable, "-c", BUILD_ONCE, str(kernels)], capture_output=True, text=True,
                           env=env, timeout=600) for _ in range(2)]
    answers = [json.loads(run.stdout.strip().splitlines()[-1]) for run in runs]
    # the second finds the stamp here, in the parent, without starting a build worker
    assert answers == [{"ok": True, "worker": True}, {"ok": True, "worker": False}], [r.stderr[-1500:] for r in runs]
