"""The native op watch in-process: what it reports, and how it steps aside when it cannot run."""

import json

import pytest

torch = pytest.importorskip("torch")

from kernelsmith.harness import op_watch  # noqa: E402


def test_an_unwritable_cache_leaves_the_python_mode_in_charge(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    watch, why = op_watch.open_watch()
    assert watch is None and "unavailable" in why and "Error" in why


def test_the_python_mode_can_be_forced(monkeypatch):
    monkeypatch.setenv("KERNELSMITH_OP_WATCH", "python")
    assert op_watch.open_watch() == (None, "KERNELSMITH_OP_WATCH=python")


def test_the_watch_sees_compute_from_any_namespace_and_not_allocations():
    watch, why = op_watch.open_watch()
    assert watch is not None, why
    x = torch.randn(16, 16)
    with watch:
        torch.empty(4, 4)
        x.t()
        x.view(-1)
    assert watch.violation() is None, watch.violation()
    with watch:
        torch.mm(x, x)
    assert "aten::mm" in (watch.violation() or "")


def test_a_second_arm_from_elsewhere_is_tampering():
    watch, why = op_watch.open_watch()
    assert watch is not None, why
    ext_arm = watch._arm
    with watch:
        ext_arm()  # someone else arms it again inside the window
    assert "re-armed by someone else" in (watch.violation() or "")


def test_eagers_runs_inside_the_unjudged_watch_are_not_charged_but_tampering_still_counts():
    watch, why = op_watch.open_watch()
    assert watch is not None, why
    x = torch.randn(16, 16)
    with watch.unjudged():
        torch.mm(x, x)  # eager is torch compute: the same watch, no verdict on its ops
    assert watch.violation() is None, watch.violation()
    with watch.unjudged():
        watch._arm()  # armed again from inside eager's window: the bookkeeping is the judged watch's own
    assert "re-armed by someone else" in (watch.violation() or "")


def test_another_compilers_build_is_not_taken_for_this_ones_and_is_never_rebuilt_in_the_reader(
        tmp_path, monkeypatch):
    """A stamp whose key is not this process's (another $CXX wrote it) must send the parent to a trusted
    build, and the jailed reader must fail with a reason, never try to build in a read-only cache."""
    from kernelsmith.evaluation import build_plan

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", "g++")
    g_folder = build_plan.op_watch_folder()
    monkeypatch.delenv("CXX")
    assert build_plan.op_watch_folder() != g_folder  # one folder per compiler: neither rewrites the other's
    folder = build_plan.op_watch_folder() / "build"
    folder.mkdir(parents=True)
    so = folder / "ks_other_cpu.so"
    so.write_bytes(b"\x7fELF")
    (folder / "kernelsmith-stamp.json").write_text(json.dumps({"key": "another build's", "so_path": str(so)}))
    assert not build_plan.op_watch_built()
    before = sorted(p.name for p in folder.parent.rglob("*"))
    with pytest.raises(ImportError, match="not this process's"):
        op_watch._import_built(folder.parent)
    assert sorted(p.name for p in folder.parent.rglob("*")) == before
