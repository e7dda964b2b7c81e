"""The native op watch in-process: what it reports, and how it steps aside when it cannot run."""

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
