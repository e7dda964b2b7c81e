"""The review app driven with Textual's pilot over a real recorded workdir: keys change the
state and the git history as they say, refusals are shown not raised, live mode follows a
growing record; and the TUI never imports the agent or the backends."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import git
import pytest

from data.sessions.workdirs import SESSION_ID, restore_workdir
from kernelsmith.gitops import ACCEPTED_REF
from kernelsmith.tui import create_app
from kernelsmith.tui.screens import ConfirmScreen, ExportScreen, HelpScreen, TextScreen

SIZE = (80, 24)
pytestmark = pytest.mark.anyio  # anyio's pytest plugin runs the async tests (no pytest-asyncio needed)


@pytest.fixture
def anyio_backend():
    return "asyncio"
BEST, FIRST = "95363ab983e309af3c4104af145af575678a0ea7", "cbd6f9fced94c8efa01dc629cde3cff57dfdbec8"


@pytest.fixture
def workdir(tmp_path):
    return restore_workdir("triple", tmp_path / "triple")


def head(workdir: Path) -> str:
    return git.Repo(workdir).head.commit.hexsha


async def test_opens_on_the_newest_session_with_its_timeline_commits_and_attempts(workdir):
    app = create_app(workdir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.session.session_id == SESSION_ID["triple"] and app.active_tab == "timeline"
        assert app.table("timeline").row_count == len(app.session.entries) > 20
        assert [c["sha"] for c in app.commits] == [BEST, FIRST]
        assert app.table("attempts").row_count == 5
        assert "ended: finish" in str(app.query_one("#status").render())
        assert app.follow is False  # an ended session is not followed


async def test_enter_opens_a_turn_and_l_an_evaluation_log(workdir):
    app = create_app(workdir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down", "down", "enter")
        assert isinstance(app.screen, TextScreen) and "read_file" in app.screen.title_text
        assert "Worked example" in app.screen.text  # the whole tool result the model saw
        await pilot.press("escape", "4", "l")
        assert isinstance(app.screen, TextScreen) and "alpah" in app.screen.text  # the first build's log
        await pilot.press("escape")
        assert not isinstance(app.screen, TextScreen)


async def test_diffs_against_parent_best_and_a_marked_attempt(workdir):
    app = create_app(workdir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "down", "d")  # the first verified kernel against its parent
        assert app.screen.is_diff and "+++ b/kernels/triple.cpp" in app.screen.text
        await pilot.press("escape", "4", "m", "down", "down", "c")  # attempt 3 against attempt 1
        assert app.mark[0] == "attempt 1" and "model_new.py" in app.screen.text
        await pilot.press("escape", "b")  # attempt 3 (the torch shortcut) against the best
        assert "torch compute" in app.screen.text and "against the best (95363ab9)" in app.screen.title_text


async def test_accept_asks_then_tags_and_offers_export(workdir):
    app = create_app(workdir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "a")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert app.repo.accepted() is None
        await pilot.press("a", "y")
        assert git.Repo(workdir).git.rev_parse(ACCEPTED_REF) == BEST
        assert "kernelsmith-accepted-95363ab9" in [t.name for t in git.Repo(workdir).tags]
        assert isinstance(app.screen, ExportScreen)
        await pilot.press("escape")
        assert app.accepted == BEST and not isinstance(app.screen, ExportScreen)


async def test_revert_refused_with_the_reason_then_done_after_confirming(workdir):
    app = create_app(workdir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "r", "y")  # the newest commit only records a speed: refused
        await pilot.pause()
        assert head(workdir) == BEST
        assert any("changes no files" in n.message for n in app._notifications)
        await pilot.press("down", "r")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.click("#yes")  # the mouse works as well as y
        await pilot.pause()
        new = git.Repo(workdir).head.commit
        assert new.parents[0].hexsha == BEST and new.message.startswith("kernelsmith: revert cbd6f9fc")
        assert not (workdir / "kernels" / "triple.cpp").exists()
        assert app.commits[0]["reverts"] == FIRST


async def test_restore_an_attempt_into_the_working_files(workdir):
    app = create_app(workdir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4", "down", "down", "o")  # attempt 3: the torch shortcut
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await pilot.pause()
        assert "torch compute" in (workdir / "model_new.py").read_text()
        assert head(workdir) == BEST and git.Repo(workdir).git.diff("--cached") == ""


async def test_verify_runs_the_real_command_on_the_working_files(workdir):
    for source in (workdir / "kernels").iterdir():
        source.unlink()  # nothing to build: verify fails fast, for real
    app = create_app(workdir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("v")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, TextScreen) and "no kernel sources" in app.verify_output


async def test_help_lists_every_action_key(workdir):
    app = create_app(workdir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        helped = {key for key, _ in app.HELP}
        for binding in app.BINDINGS:
            if not binding.key.isdigit():
                assert any(binding.key.replace("question_mark", "?") in k.split() or binding.key in k for k in helped), binding.key


async def test_live_mode_follows_a_growing_record(workdir, tmp_path):
    record = workdir / ".kernelsmith" / "sessions" / SESSION_ID["triple"] / "events.jsonl"
    lines = record.read_text().splitlines(keepends=True)
    record.write_text("".join(lines[:10]))  # the session as it was early on: still running
    app = create_app(workdir, poll_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.follow and app.session.state.end is None
        before = app.table("timeline").row_count
        with record.open("a") as f:
            f.write("".join(lines[10:]))
        await pilot.pause(0.3)
        assert app.table("timeline").row_count > before and app.session.state.end is not None
        assert app.table("timeline").cursor_row == app.table("timeline").row_count - 1


def test_create_app_takes_a_session_path_and_rejects_others(workdir, tmp_path):
    record = workdir / ".kernelsmith" / "sessions" / SESSION_ID["triple"] / "events.jsonl"
    app = create_app(record)
    assert app.workdir == workdir and app._wanted == SESSION_ID["triple"]
    from kernelsmith.errors import BadInput

    with pytest.raises(BadInput):
        create_app(tmp_path / "nowhere")


def test_the_tui_never_imports_the_agent_or_the_backends():
    """DESIGN.md: the TUI reads session records and calls gitops; the agent and backends are off limits
    (also through the modules it imports from kernelsmith)."""
    package = Path(__file__).resolve().parent.parent / "kernelsmith"
    seen, todo = set(), ["kernelsmith.tui." + p.stem for p in (package / "tui").glob("*.py")]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = package.parent / (name.replace(".", "/") + ".py")
        if not path.exists():
            path = package.parent / name.replace(".", "/") / "__init__.py"
        if path.exists():
            todo += [m for m in _imports(path) if m.startswith("kernelsmith")]
    assert not [m for m in seen if m.startswith(("kernelsmith.agent", "kernelsmith.backends"))], sorted(seen)


def _imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return found
