"""The live terminal view of a session: tool lines, the status line and the session summary."""

from __future__ import annotations

import io

from rich.console import Console

from kernelsmith.console import SessionView

T0 = 1_800_000_000.0


def _view() -> tuple[SessionView, io.StringIO]:
    buffer = io.StringIO()
    return SessionView(Console(file=buffer, width=200, force_terminal=False, color_system=None)), buffer


def _start(t: float = T0) -> dict:
    return {"kind": "session_start", "t": t, "session_id": "s1", "task": "model", "workdir": "/w",
            "config": {"device": "cuda", "precision": "fp32", "backend": "builtin", "model": "builtin"}}


def _turn(t: float, *names: str) -> dict:
    return {"kind": "model_turn", "t": t, "turn": 1, "usage": {"input_tokens": 10, "output_tokens": 5},
            "message": {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"c{i}", "name": name, "arguments": {}} for i, name in enumerate(names)]}}


def _result(t: float, name: str, content: str = "ok") -> dict:
    return {"kind": "tool_result", "t": t, "name": name, "ok": True, "content": content}


def test_a_long_tool_call_shows_what_runs_and_for_how_long():
    view, _ = _view()
    with view:
        for event in (_start(), _turn(T0 + 5, "compile", "profile")):
            view(event)
        assert "compile running 2:05" in view.status_line(T0 + 130)
        view(_result(T0 + 130, "compile", "build ok in 125.0 s"))
        # the clock restarts for the next call of the same turn
        assert "profile running 7:00" in view.status_line(T0 + 550)
        view(_result(T0 + 560, "profile", "CORRECT (5 trials)"))
        line = view.status_line(T0 + 600)
    assert "running" not in line and "turn 1" in line and "15 tokens" in line and "10.0 min" in line


def test_the_status_line_follows_the_clock_between_events():
    view, _ = _view()
    with view:
        view(_start(T0))
        view(_turn(T0 + 1, "profile"))
        earlier, later = view.status_line(T0 + 60), view.status_line(T0 + 180)
    assert "1.0 min" in earlier and "profile running 0:59" in earlier
    assert "3.0 min" in later and "profile running 2:59" in later


def test_tool_lines_and_the_summary_go_to_the_view_console():
    view, buffer = _view()
    end = {"kind": "session_end", "t": T0 + 90, "reason": "finish",
           "summary": {"best": None, "turns": 1, "attempts": 1, "usage": {}, "elapsed_s": 90}}
    with view:
        for event in (_start(), _turn(T0 + 1, "profile"), _result(T0 + 80, "profile", "REJECTED at verify\nwhy"), end):
            view(event)
        assert view._live_line().plain == ""  # the status line goes with the session
    text = buffer.getvalue()
    assert "session s1 on model (cuda, fp32) with builtin:builtin" in text
    assert "-> profile()" in text and "profile: REJECTED at verify" in text and "why" not in text
    assert "session ended: finish" in text and "1.5 min" in text


def test_a_resumed_session_shows_its_pending_call_running():
    view, _ = _view()
    with view:
        view({"kind": "resume", "t": T0, "from_turn": 4,
              "pending_tool_calls": [{"id": "c1", "name": "profile", "arguments": {}}]})
        assert "profile running 5:00" in view.status_line(T0 + 300)


def test_brackets_in_tool_names_and_results_are_printed_not_parsed_as_markup():
    """Names come from the model and results from tools: `[/cyan]` must not raise or vanish."""
    view, buffer = _view()
    with view:
        view(_start())
        view(_turn(T0 + 1, "[/cyan]odd"))
        assert "[/cyan]odd running 0:09" in view.status_line(T0 + 10)
        view(_result(T0 + 20, "[/cyan]odd", "[exit code 1] see [/red] here"))
    text = buffer.getvalue()
    assert "-> [/cyan]odd()" in text and "[/cyan]odd: [exit code 1] see [/red] here" in text


def test_on_a_terminal_the_status_line_is_drawn_in_reverse_video_and_model_text_in_italics():
    """Model text printed while the live line is up must not lend it its print options: the line showed as
    literal "[reverse] ... [/]" in italics at every model line."""
    buffer = io.StringIO()
    view = SessionView(Console(file=buffer, width=200, force_terminal=True, color_system="standard"))
    with view:
        view(_start())
        view.on_text("I will read the task first.\nThen [b]write[/b] a kernel.\n")
        view(_turn(T0 + 1, "read_file"))
    text = buffer.getvalue()
    assert "[reverse]" not in text and "[/]" not in text
    assert "\x1b[7m turn 1 |" in text  # reverse video, not italic (\x1b[3m) nor italic reverse
    assert "\x1b[3mI will read the task first.\x1b[0m" in text and "Then [b]write[/b] a kernel." in text


def test_the_summary_says_plainly_when_no_kernel_beat_eager():
    best = {"sha": "a" * 40, "turn": 3, "speedup_vs_eager": 0.43, "speedup_vs_compile": 0.3, "reward": 1.0}
    for best_kernel, said in ((best, "no kernel beat eager; best 0.43x"),
                              ({**best, "speedup_vs_eager": 1.8}, "faster than eager: 1.80x"),
                              ({**best, "speedup_vs_eager": None}, "none was profiled: not shown faster than eager"),
                              (None, "no kernel verified")):
        view, buffer = _view()
        end = {"kind": "session_end", "t": T0 + 90, "reason": "finish",
               "summary": {"best": best_kernel, "turns": 3, "attempts": 2, "usage": {}, "elapsed_s": 90}}
        with view:
            view(_start())
            view(end)
        assert said in buffer.getvalue(), buffer.getvalue()
