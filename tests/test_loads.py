"""The parent reads what a profile worker mapped (evaluation/loads.py): real processes map real shared
objects, and jailed candidates that blind the in-process load check are still rejected."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import HONEST
from kernelsmith.evaluation import linkage, loads

BELOW = r"""
namespace at { class Tensor; namespace native { Tensor& add_out(const Tensor& a, const Tensor& b, Tensor& out); } }
extern "C" void below(const at::Tensor* a, at::Tensor* out) { at::native::add_out(*a, *a, *out); }
"""
CLEAN = r"""extern "C" int honest(int x) { return 2 * x; }"""


def _shared_object(folder: Path, name: str, source: str) -> Path:
    """A tiny shared object built with plain g++: an undefined `at::native::` symbol stays an import."""
    src, so = folder / (name + ".cpp"), folder / name
    src.write_text(source)
    subprocess.run(["g++", "-shared", "-fPIC", str(src), "-o", str(so)], check=True)
    return so


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("objects")
    return {"below": _shared_object(folder, "libbelow.so", BELOW), "clean": _shared_object(folder, "libclean.so", CLEAN),
            "triton": _shared_object(folder, "libtriton_stub.so", CLEAN)}


class Child:
    """A python process that runs `code`, says so, and waits (its maps are read meanwhile); more code runs
    in it each time `step` is called."""

    def __init__(self, code: str = ""):
        loop = "import sys\nfor line in sys.stdin:\n    exec(line.replace('\\\\n', '\\n'))\n    print('ok', flush=True)\n"
        self.proc = subprocess.Popen([sys.executable, "-c", loop], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.step(code or "pass")

    def step(self, code: str) -> None:
        self.proc.stdin.write(code.replace("\n", "\\n") + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == "ok\n"

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def child():
    started = []

    def start(code: str = "") -> Child:
        started.append(Child(code))
        return started[-1]

    yield start
    for proc in started:
        proc.close()


def _load(path: Path) -> str:
    return f"import ctypes, os; ctypes.CDLL({str(path)!r}, mode=os.RTLD_LAZY)"


def _census(*pids: int, baseline: bool = False) -> loads.LoadCensus:
    census = loads.LoadCensus()
    if baseline:
        census.baseline(list(pids))
    return census


# --- unit: real processes, real shared objects ------------------------------------------------------------

def test_a_library_importing_aten_below_the_dispatcher_is_flagged(child, objects):
    proc = child(_load(objects["below"]))
    census = _census()
    census.look([proc.proc.pid])
    assert "at::native::add_out" in census.violation() and str(objects["below"]) in census.violation()


def test_a_clean_library_from_a_temp_folder_is_not(child, objects):
    proc = child(_load(objects["clean"]))
    census = _census()
    census.look([proc.proc.pid])
    assert census.violation() is None
    assert census._read >= 1  # it was read and judged, not skipped


def test_a_library_loaded_from_a_memfd_is_flagged_by_itself(child, objects):
    code = textwrap.dedent(f"""
        import ctypes, os
        fd = os.memfd_create("kernel")
        os.write(fd, open({str(objects['clean'])!r}, "rb").read())
        ctypes.CDLL(f"/proc/self/fd/{{fd}}", mode=os.RTLD_LAZY)
    """)
    proc = child(code)
    census = _census()
    census.look([proc.proc.pid])
    assert "/memfd:kernel" in census.violation() and "memfd or a deleted file" in census.violation()


def test_a_deleted_library_is_flagged_by_itself(child, objects, tmp_path):
    copy = tmp_path / "libgone.so"
    copy.write_bytes(objects["clean"].read_bytes())
    proc = child(_load(copy))
    copy.unlink()
    census = _census()
    census.look([proc.proc.pid])
    assert f"{copy} (deleted)" in census.violation()


def test_torchs_own_libraries_are_not_flagged(child):
    """libtorch_cpu and its peers import `at::native::` symbols from each other: they are the installation's."""
    proc = child("import torch; torch.nn.functional.conv2d(torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3))")
    census = _census(proc.proc.pid, baseline=True)
    proc.step("import numpy; numpy.ones(3) @ numpy.ones(3)")
    census.look([proc.proc.pid])
    assert census.violation() is None
    mapped = {m.path for m in loads.executable_mappings(loads.read_proc(proc.proc.pid, "maps"))}
    assert any("libtorch_cpu" in path and loads.installed(path, census.reachable) for path in mapped)


def test_a_compute_library_new_since_the_workers_imports_is_flagged_by_name(child, objects, monkeypatch):
    """Installed files are not read, but one of torch's compilers or another compute library, mapped after the
    worker's own imports, is named (the folder of the stub stands in for site-packages here)."""
    monkeypatch.setattr(loads, "installation_roots", lambda: (str(objects["triton"].parent),))
    proc = child()
    census = loads.LoadCensus()
    census.reachable = ()
    census.baseline([proc.proc.pid])
    proc.step(_load(objects["clean"]))
    census.look([proc.proc.pid])
    assert census.violation() is None
    proc.step(_load(objects["triton"]))
    census.look([proc.proc.pid])
    assert "libtriton_stub.so: a native compute library" in census.violation()


def test_a_compute_library_mapped_before_the_job_is_the_workers_own(child, objects, monkeypatch):
    monkeypatch.setattr(loads, "installation_roots", lambda: (str(objects["triton"].parent),))
    proc = child(_load(objects["triton"]))
    census = loads.LoadCensus()
    census.reachable = ()
    census.baseline([proc.proc.pid])
    census.look([proc.proc.pid])
    assert census.violation() is None


def test_a_library_file_swapped_after_loading_is_never_read_in_its_place(child, objects, tmp_path):
    """From outside, the mapped file itself is read (map_files) or the path only while it holds the mapped
    inode: a clean file written over the path after loading is never what is judged."""
    path = tmp_path / "libswap.so"
    path.write_bytes(objects["below"].read_bytes())
    proc = child(_load(path))
    path.unlink()
    path.write_bytes(objects["clean"].read_bytes())  # a new inode at the same path
    mapping = next(m for m in loads.executable_mappings(loads.read_proc(proc.proc.pid, "maps"))
                   if m.path.startswith(str(path)))
    assert loads.read_mapped(proc.proc.pid, mapping) in (None, objects["below"].read_bytes())
    elsewhere = objects["clean"].stat().st_ino  # a mapping of another file than the one now at the path
    stale = loads.Mapping(mapping.span, mapping.device, elsewhere, str(path))
    assert loads.read_mapped(os.getpid(), stale) is None  # neither the span nor the path's inode is this one


def test_a_worker_that_leaves_its_mount_namespace_is_flagged(child):
    probe = "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x00020000))"  # CLONE_NEWNS
    if subprocess.run([sys.executable, "-c", probe]).returncode != 0:
        pytest.skip("this machine lets no process make a mount namespace")
    proc = child()
    census = _census(proc.proc.pid, baseline=True)
    proc.step("import ctypes; assert ctypes.CDLL(None).unshare(0x00020000) == 0")
    census.look([proc.proc.pid])
    assert "left its jail's mount namespace" in census.violation()


def test_a_census_follows_the_candidates_first_run_and_any_run_that_mapped_code(child, objects):
    proc = child()
    census = loads.LoadCensus(every=10**9)  # a census at random practically never
    census.baseline([proc.proc.pid])
    census.after_run([proc.proc.pid], candidate=False)
    assert census.looks == 0  # nothing changed since the baseline
    census.after_run([proc.proc.pid], candidate=True)
    census.after_run([proc.proc.pid], candidate=True)
    assert census.looks == 1  # the candidate's first run only
    proc.step(_load(objects["below"]))  # the process's executable size grows
    census.after_run([proc.proc.pid], candidate=False)
    assert census.looks == 2 and "at::native::add_out" in census.violation()
    always = loads.LoadCensus(every=1)
    for candidate in (False, True, False):
        always.after_run([proc.proc.pid], candidate)
    assert always.looks == 3


# --- unit: which files a candidate could have written ------------------------------------------------------

def test_the_deepest_root_decides_whether_a_path_is_installed(monkeypatch):
    monkeypatch.setattr(loads, "installation_roots", lambda: ("/usr", "/opt", "/home/u/.cache/venv"))
    reachable = ("/tmp", "/home/u/.cache", "/opt/work")
    assert loads.installed("/usr/lib/libc.so.6", reachable)
    assert loads.installed("/home/u/.cache/venv/lib/torch/lib/libtorch.so", reachable)  # a venv in a cache
    assert not loads.installed("/opt/work/.kernelsmith/build/cpu/ks.so", reachable)  # a workdir under /opt
    assert not loads.installed("/home/u/.cache/kernelsmith/op_watch/x.so", reachable)
    assert not loads.installed("/tmp/x.so", reachable)
    assert not loads.installed("/srv/elsewhere/x.so", reachable)  # under no root: the candidate's
    assert not loads.installed("/usrx/lib.so", reachable)  # a prefix of the name is not a folder


def test_the_installation_holds_python_torch_and_the_system():
    roots = loads.installation_roots()
    torch_folder = loads._package_folder("torch")
    assert torch_folder and torch_folder in roots and sys.prefix in roots and "/usr" in roots
    assert "/" not in roots
    assert loads.installed(str(Path(torch_folder) / "lib" / "libtorch_cpu.so"), loads.candidate_roots())


def test_parsing_keeps_file_backed_executable_mappings_only():
    raw = textwrap.dedent("""\
        55d0-55d1 r-xp 00001000 fe:00 26723                      /usr/bin/python3.11
        55d1-55d2 r--p 00000000 fe:00 26723                      /usr/bin/python3.11
        7f00-7f01 r-xp 00000000 00:01 1041                       /memfd:kernel (deleted)
        7f01-7f02 rwxp 00000000 00:00 0
        7f02-7f03 r-xp 00000000 00:00 0                          [vdso]
        7f03-7f04 r-xp 00000000 08:01 77                         /tmp/a b.so (deleted)
    """).encode()
    found = loads.executable_mappings(raw)
    assert [m.path for m in found] == ["/usr/bin/python3.11", "/memfd:kernel (deleted)", "/tmp/a b.so (deleted)"]
    assert [m.unlinked for m in found] == [False, True, True]
    assert (found[0].span, found[0].device, found[0].inode) == ("55d0-55d1", "fe:00", 26723)


def test_the_same_library_is_read_by_nm_once_per_content(objects, monkeypatch):
    calls = []
    real = linkage._undefined
    monkeypatch.setattr(linkage, "_undefined", lambda path: calls.append(path) or real(path))
    data = objects["below"].read_bytes() + b"\0" * 7  # content no other test judged
    assert linkage.forbidden_imports(data) == ["at::native::add_out"]
    assert linkage.forbidden_imports(data) == ["at::native::add_out"]
    assert len(calls) == 1


def test_the_in_process_guard_and_the_parent_name_the_same_libraries():
    from kernelsmith.harness import guards

    assert guards.FOREIGN_LIBRARIES is loads.FOREIGN_LIBRARIES


# --- adversarial: jailed candidates, the whole evaluation -------------------------------------------------

BLIND_THE_GUARD = '''
import sys, types
import kernelsmith.harness.guards as _guards

# The in-process load check then sees nothing new. The identity snapshot sees a function's code swapped in place,
# so it is blinded too (a candidate that has read our source replaces any checker in its process): what is
# tested is the layer it cannot reach, the parent's census of the worker's mappings.
_guards.IdentitySnapshot.changed = lambda self: []
sys.modules["_ks_before"] = types.SimpleNamespace(libs=_guards.mapped_libraries())

def _what_was_mapped_before():
    return set(sys.modules["_ks_before"].libs)

_guards.mapped_libraries.__code__ = _what_was_mapped_before.__code__
'''


def _rejected_by_the_parent(result, *words: str) -> None:
    assert not result.clean and result.reward == -1, (result.error, result.notes)
    found = [v for v in result.violations if "read by the parent" in v]
    assert found and all(w in found[0] for w in words), result.violations


def test_a_candidate_that_loads_a_library_it_wrote_to_its_private_tmp_is_rejected(candidate, run_eval, objects):
    """The candidate blinds the in-process load check, copies a library named like Triton's and importing ATen
    below the dispatcher into the jail's /tmp (no file the parent can see at that path), and loads it."""
    result = run_eval(candidate(BLIND_THE_GUARD + f'''
import os, shutil
_copy = "/tmp/libtriton_stub.so"
with open({str(objects["below"])!r}, "rb") as src, open(_copy, "wb") as dst:
    dst.write(src.read())
_hidden = ctypes.CDLL(_copy, mode=os.RTLD_LAZY)

class ModelNew(Base):
    def forward(self, x):
        return kernel("axpb", x, self.bias)
'''), profile=True, min_runs=10)
    _rejected_by_the_parent(result, "/tmp/libtriton_stub.so", "at::native::add_out", "compute library")
    assert not any("candidate mapped native compute libraries" in v for v in result.violations)  # blinded


def test_a_candidate_that_loads_a_prebuilt_library_beside_it_only_when_timed_is_rejected(candidate, run_eval,
                                                                                        objects):
    """Loaded after verification, from the candidate's own folder (like kernels/, readable in the jail)."""
    result = run_eval(candidate(BLIND_THE_GUARD + f'''
import os
_calls = [0]

class ModelNew(Base):
    def forward(self, x):
        _calls[0] += 1
        if _calls[0] == 12:
            self._lib = ctypes.CDLL({str(objects["below"])!r}, mode=os.RTLD_LAZY)
        return kernel("axpb", x, self.bias)
'''), profile=True, min_runs=30)
    _rejected_by_the_parent(result, str(objects["below"]), "at::native::add_out")


def test_a_candidate_that_loads_a_library_from_a_memfd_is_rejected(candidate, run_eval, objects):
    result = run_eval(candidate(BLIND_THE_GUARD + f'''
import os
_fd = os.memfd_create("kernels")
os.write(_fd, open({str(objects["clean"])!r}, "rb").read())
_lib2 = ctypes.CDLL(f"/proc/self/fd/{{_fd}}", mode=os.RTLD_LAZY)

class ModelNew(Base):
    def forward(self, x):
        return kernel("axpb", x, self.bias)
'''), profile=True, min_runs=10)
    _rejected_by_the_parent(result, "/memfd:kernels", "memfd or a deleted file")


def test_an_honest_candidate_and_its_library_pass_the_parents_census(candidate, run_eval):
    result = run_eval(candidate(HONEST), profile=True, min_runs=10)
    assert result.clean, (result.error, result.violations)
