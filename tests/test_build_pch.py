"""The precompiled <torch/extension.h> (kernelsmith/harness/pch.py) with the real compiler.

The mechanics (made once and reused, one build under two processes, a truncated .gch rebuilt,
pruning, a failed PCH) run on a small header in temporary folders: a second or so each. The real
PCH (about 70 s and 760 MB) is the one the rest of the suite builds with, in the usual cache
(~/.cache/kernelsmith/pch, or $KERNELSMITH_PCH_DIR): whichever test needs it first makes it once
and every later build, in this file or another, reuses it. The two real builds here compile one
torch translation unit each way (with the PCH, then without it) and share the rest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelsmith.evaluation import build_plan, runner
from kernelsmith.harness import build, pch

CXX = os.environ.get("CXX", "c++")
pytestmark = pytest.mark.skipif(not pch.is_gcc(CXX), reason=f"{CXX} is not GCC")

SMALL = "#include <vector>\n#include <string>\n"
SLOW = "#include <bits/stdc++.h>\n"  # a few seconds: long enough for a second process to arrive
FLAGS = ["-O2", "-std=c++17", "-fPIC"]
USE = 'int main() { std::vector<std::string> v{"a"}; return (int)v.size() - 1; }\n'


def make(root: Path, text: str = SMALL, flags=FLAGS, **kw) -> Path | None:
    return pch.ensure_pch(CXX, list(flags), [], header_text=text, root=root, **kw)


def built_lines(root: Path) -> list[str]:
    log = root / pch.LOG_NAME
    return log.read_text().splitlines() if log.is_file() else []


def compiles_with(header: Path, folder: Path, flags=FLAGS) -> str:
    """Compile a file whose first include is <torch/extension.h>, with the PCH's include flags and -H;
    return GCC's stderr (-H marks a PCH it used with '!', one it rejected with 'x')."""
    src = folder / "use.cpp"
    src.write_text("#include <torch/extension.h>\n" + USE)
    proc = subprocess.run([CXX, *flags, *pch.include_flags(header), "-H", "-c", str(src),
                           "-o", str(folder / "use.o")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


# --- the mechanics, on a small header ------------------------------------------------------------


def test_made_once_then_reused_and_used_by_gcc(tmp_path):
    notes: list[str] = []
    first = make(tmp_path, notes=notes)
    assert first is not None and notes == [], notes
    assert first == pch.folder_of(first) / pch.HEADER_NAME and first.read_text() == SMALL
    gch = first.with_name(first.name + ".gch")
    assert gch.stat().st_size > 0
    start = time.perf_counter()
    again = make(tmp_path)
    assert again == first and time.perf_counter() - start < 0.5
    assert len(built_lines(tmp_path)) == 1
    assert f"! {gch}" in compiles_with(first, tmp_path)


def test_the_signature_follows_the_flags(tmp_path):
    a, b = make(tmp_path), make(tmp_path, flags=FLAGS + ["-DKS_OTHER=1"])
    assert a is not None and b is not None and pch.folder_of(a) != pch.folder_of(b)
    assert pch.header_path(CXX, FLAGS, [], header_text=SMALL, root=tmp_path) == a


def test_cpp_extension_flags_drop_the_extension_name_and_split_the_includes():
    flags, includes = build.cpp_compile_flags(["-O3", "-std=c++17"], with_cuda=False)
    assert not any("TORCH_EXTENSION_NAME" in f for f in flags)
    assert "-DTORCH_API_INCLUDE_EXTENSION_H" in flags and "-fPIC" in flags
    assert flags[-2:] == ["-O3", "-std=c++17"]  # ours come last, so our -std wins over torch's
    assert any(Path(d, "torch", "extension.h").is_file() for d in includes)


def test_two_processes_build_it_once(tmp_path):
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from kernelsmith.harness import pch
        start = time.perf_counter()
        path = pch.ensure_pch({CXX!r}, {FLAGS!r}, [], header_text={SLOW!r}, root=Path({str(tmp_path)!r}))
        print(path, time.perf_counter() - start)
    """)
    run = lambda: subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)  # noqa: E731
    first = run()
    deadline = time.monotonic() + 60
    while not list(tmp_path.rglob("*.tmp-*")) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.rglob("*.tmp-*")), "the first process was not building when the second started"
    second = run()
    (path_a, _), (path_b, _) = (p.communicate(timeout=300)[0].split() for p in (first, second))
    assert path_a == path_b != "None"
    # one build: the second waited on the lock, or (its start-up outran the first build on a busy
    # machine) found the PCH finished; a second line means the lock let two builds run
    assert len(built_lines(tmp_path)) == 1, built_lines(tmp_path)


def test_a_truncated_gch_is_rebuilt(tmp_path):
    header = make(tmp_path)
    gch = header.with_name(header.name + ".gch")
    with open(gch, "r+b") as f:
        f.truncate(gch.stat().st_size // 2)  # GCC dies on this one ("cannot read PCH file")
    assert make(tmp_path) == header
    assert len(built_lines(tmp_path)) == 2
    assert f"! {gch}" in compiles_with(header, tmp_path)


def test_only_the_two_most_recent_survive_unless_in_use(tmp_path):
    made = []
    for n in range(3):
        if n == 2:
            with pch.in_use(made[0]) as usable:  # a build is compiling with the oldest one
                assert usable
                made.append(make(tmp_path, flags=FLAGS + [f"-DKS_V={n}"]))
        else:
            made.append(make(tmp_path, flags=FLAGS + [f"-DKS_V={n}"]))
        time.sleep(0.05)
    assert all(p.is_file() for p in made)  # three: the oldest was in use
    made.append(make(tmp_path, flags=FLAGS + ["-DKS_V=3"]))
    assert [p.is_file() for p in made] == [False, False, True, True]
    assert not (tmp_path / f"{pch.folder_of(made[0]).name}.lock").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == sorted(pch.folder_of(p).name for p in made[2:])


def test_a_pch_that_cannot_be_built_is_a_note_said_once(tmp_path):
    notes: list[str] = []
    assert make(tmp_path, text="#include <no_such_header_for_kernelsmith.h>\n", notes=notes) is None
    assert len(notes) == 1 and "not built" in notes[0] and "no_such_header" in notes[0]
    again: list[str] = []
    assert make(tmp_path, text="#include <no_such_header_for_kernelsmith.h>\n", notes=again) is None
    assert again == [] and len(built_lines(tmp_path)) == 1  # not retried at once


def test_kernelsmith_pch_0_turns_it_off(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSMITH_PCH_DIR", str(tmp_path / "pch"))
    monkeypatch.setenv("KERNELSMITH_PCH", "0")
    assert not pch.enabled()
    assert build.precompiled_header(["-O3"], "cpu", []) is None
    assert not (tmp_path / "pch").exists()
    monkeypatch.setenv("KERNELSMITH_PCH", "1")
    assert pch.enabled() and pch.cache_root() == tmp_path / "pch"


# --- real builds with the real PCH ---------------------------------------------------------------

CPU_CFLAGS = build_plan.compile_flags("cpu", fast_math=False)["cflags"]
PLAIN = "// no torch in this file: the build's one torch compile is binding.cpp\nint ks_pch_answer() { return %d; }\n"


def cflags_line(build_dir: Path) -> str:
    return next(l for l in (build_dir / "build.ninja").read_text().splitlines() if l.startswith("cflags = "))


def worker_build(kernels: Path) -> dict:
    """Build in a fresh worker process, as `kernelsmith compile` does (a new process per build)."""
    return runner.run_job({"kind": "build", "kernels_dir": str(kernels), "device": "cpu"}, 900)


def imports(so_path: str, name: str) -> list[str]:
    script = (f"from kernelsmith.harness import build; ext = build.import_extension({so_path!r}, {name!r}); "
              "print(sorted(n for n in dir(ext) if not n.startswith('_')))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return eval(proc.stdout.strip().splitlines()[-1])  # noqa: S307  (a list of names we printed)


@pytest.fixture(scope="module")
def torch_pch():
    """The real PCH for the CPU build flags, in the usual cache (made here if no build made it yet)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("KERNELSMITH_PCH", raising=False)
        request = build.pch_request(CPU_CFLAGS, "cpu")
        assert request is not None
        compiler, flags, includes, identity = request
        notes: list[str] = []
        header = pch.ensure_pch(compiler, flags, includes, extra_identity=identity, notes=notes)
        assert header is not None, notes
        start = time.perf_counter()
        assert pch.ensure_pch(compiler, flags, includes, extra_identity=identity) == header
        assert time.perf_counter() - start < 1.0
        yield header


@pytest.mark.slow_build
def test_a_cpu_build_compiles_with_the_pch_and_works(torch_pch, tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELSMITH_PCH", raising=False)
    kernels = tmp_path / "work" / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "example_scale.cpp").write_text((build.TEMPLATES / "cpu" / "example_scale.cpp").read_text())
    result = build.build(kernels, "cpu", build_dir=tmp_path / "build")
    assert result.ok, result.summary
    assert result.flags[-2:] == pch.include_flags(torch_pch) and result.notes == []
    assert " ".join(pch.include_flags(torch_pch)) in cflags_line(tmp_path / "build")
    import torch

    ext = build.import_extension(result.so_path, result.name)
    assert ext.example_scale(torch.arange(4, dtype=torch.float32), 2.5, 0).tolist() == [0.0, 2.5, 5.0, 7.5]
    again = build.build(kernels, "cpu", build_dir=tmp_path / "build")
    assert again.cached and again.flags == result.flags  # a cache hit reports the flags it was built with


@pytest.mark.slow_build
def test_off_or_damaged_the_build_goes_on_without_it(torch_pch, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSMITH_BUILD_DIR", str(tmp_path / "builds"))  # workers inherit these
    monkeypatch.setenv("KERNELSMITH_PCH_DIR", str(tmp_path / "pch"))
    kernels = tmp_path / "work" / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "plain.cpp").write_text(PLAIN % 42)

    monkeypatch.setenv("KERNELSMITH_PCH", "0")
    off = worker_build(kernels)
    assert off["ok"], off["summary"]
    build_dir = Path(off["so_path"]).parent
    assert "-Winvalid-pch" not in off["flags"] and "-Winvalid-pch" not in cflags_line(build_dir)
    assert not (tmp_path / "pch").exists()
    binding_o = (build_dir / "binding.o").stat().st_mtime_ns

    # a .gch of the recorded size that GCC cannot read (damage our size check cannot see)
    monkeypatch.delenv("KERNELSMITH_PCH")
    compiler, flags, includes, identity = build.pch_request(CPU_CFLAGS, "cpu")
    header = pch.header_path(compiler, flags, includes, identity, root=tmp_path / "pch")
    header.parent.mkdir(parents=True)
    header.write_text(pch.HEADER_TEXT)
    with open(torch_pch.with_name(torch_pch.name + ".gch"), "rb") as real:
        header.with_name(header.name + ".gch").write_bytes(real.read(64 << 20))
    (pch.folder_of(header) / pch.META_NAME).write_text(json.dumps({"format": pch.FORMAT, "gch_size": 64 << 20}))
    (kernels / "plain.cpp").write_text(PLAIN % 43)  # an edit, so the build is not a cache hit

    damaged = worker_build(kernels)
    assert damaged["ok"], damaged["summary"]
    assert any("could not be used" in n and "PCH" in n for n in damaged["notes"]), damaged["notes"]
    assert "-Winvalid-pch" not in damaged["flags"] and "-Winvalid-pch" not in cflags_line(build_dir)
    assert not (pch.folder_of(header) / pch.META_NAME).exists()  # discarded: the next build makes it again
    # the retry kept the extension's name, so ninja reused the object built without the PCH above
    assert (build_dir / "binding.o").stat().st_mtime_ns == binding_o
    assert Path(damaged["so_path"]) == Path(off["so_path"])
    imports(damaged["so_path"], damaged["name"])


# --- the module's entry, compiled once beside the PCH ---------------------------------------------


def linked_entry(build_dir: Path) -> Path | None:
    """The shared module object a build linked (named in its ninja file's ldflags), or None."""
    line = next(l for l in (build_dir / "build.ninja").read_text().splitlines() if l.startswith("ldflags = "))
    return next((Path(w) for w in line.split() if "binding_module-" in w and w.endswith(".o")), None)


@pytest.mark.slow_build
def test_extensions_of_different_names_link_one_entry_compiled_once(torch_pch, tmp_path, monkeypatch):
    """binding.cpp names its module, so each extension compiled it again (20 s and more here): the entry
    that names none is compiled once per PCH, and a build whose kernels include no torch compiles no torch."""
    monkeypatch.delenv("KERNELSMITH_PCH", raising=False)
    results = []
    for i in range(2):
        kernels = tmp_path / f"work{i}" / "kernels"
        kernels.mkdir(parents=True)
        (kernels / "plain.cpp").write_text(PLAIN % i)
        results.append(worker_build(kernels))
    assert all(r["ok"] for r in results), [r["summary"] for r in results]
    first, second = (Path(r["so_path"]).parent for r in results)
    assert results[0]["name"] != results[1]["name"]
    entry = linked_entry(first)
    folder = pch.folder_of(torch_pch)
    assert entry is not None and entry.parent == folder and linked_entry(second) == entry
    assert not (first / "binding.o").exists() and not (second / "binding.o").exists()
    log = (folder.parent / pch.LOG_NAME).read_text()
    assert log.count(f"{folder.name} {entry.name} ") <= 1  # compiled once, by whichever build came first
    for r in results:  # PyInit_<name> is the entry's: each imports under its own name
        assert imports(r["so_path"], r["name"]) == []


@pytest.mark.slow_build
def test_a_damaged_shared_entry_is_dropped_and_the_build_uses_binding_cpp(torch_pch, tmp_path, monkeypatch):
    """An object that cannot be linked (truncated, or not an object at all) costs one rebuild, never the build."""
    monkeypatch.delenv("KERNELSMITH_PCH", raising=False)
    root = tmp_path / "pch"
    monkeypatch.setenv("KERNELSMITH_PCH_DIR", str(root))  # a folder of our own beside the real PCH's files
    real = pch.folder_of(torch_pch)
    (root / real.name / pch.HEADER_NAME).parent.mkdir(parents=True)
    for name in (pch.HEADER_NAME, pch.HEADER_NAME + ".gch", pch.META_NAME):  # linked, not copied (0.8 GB)
        _hard_link_or_copy(real / name, root / real.name / name)
    garbage = pch.object_path(root / real.name / pch.HEADER_NAME, build.ENTRY_INPUTS[0],
                              list(build.ENTRY_INPUTS))
    garbage.write_bytes(b"not an object\n")
    kernels = tmp_path / "work" / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "plain.cpp").write_text(PLAIN % 7)
    result = worker_build(kernels)
    assert result["ok"], result["summary"]
    assert any("could not be linked" in n for n in result["notes"]), result["notes"]
    build_dir = Path(result["so_path"]).parent
    assert (build_dir / "binding.o").exists() and linked_entry(build_dir) is None
    assert not garbage.exists()  # the next build compiles it again
    assert imports(result["so_path"], result["name"]) == []


def _hard_link_or_copy(source: Path, target: Path) -> None:
    """A hard link where both lie on one file system (a symlink would point outside the build's jail)."""
    import shutil

    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
