"""SVG snapshots (pytest-textual-snapshot) of the review app's main screens at 80x24, built from
the recorded session in tests/data/sessions/triple. Update after an intended change with
`pytest tests/test_tui_snapshots.py --snapshot-update` and look at the SVGs."""

from __future__ import annotations

import pytest

from data.sessions.workdirs import restore_workdir
from kernelsmith.tui import create_app

SIZE = (80, 24)


@pytest.fixture
def app(tmp_path):
    return create_app(restore_workdir("triple", tmp_path / "triple"))


def test_timeline(app, snap_compare):
    assert snap_compare(app, terminal_size=SIZE)


def test_commits(app, snap_compare):
    assert snap_compare(app, terminal_size=SIZE, press=["3"])


def test_attempts(app, snap_compare):
    assert snap_compare(app, terminal_size=SIZE, press=["4", "down"])


def test_chart(app, snap_compare):
    assert snap_compare(app, terminal_size=SIZE, press=["5"])


def test_sessions(app, snap_compare):
    assert snap_compare(app, terminal_size=SIZE, press=["1"])


def test_diff_of_a_commit_against_its_parent(app, snap_compare):
    assert snap_compare(app, terminal_size=SIZE, press=["3", "down", "d"])


def test_confirm_revert(app, snap_compare):
    assert snap_compare(app, terminal_size=SIZE, press=["3", "down", "r"])


def test_help(app, snap_compare):
    assert snap_compare(app, terminal_size=SIZE, press=["question_mark"])


def test_wide_terminal(app, snap_compare):
    assert snap_compare(app, terminal_size=(120, 36))
