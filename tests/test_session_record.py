"""The session record: the recorder's lines, the reader's tolerance of a kill -9, the fold that
resume and the console rely on, and finding a session by id prefix (docs/session-format.md)."""

from __future__ import annotations

import json
import re

import pytest

from kernelsmith.errors import BadInput
from kernelsmith.session import reader
from kernelsmith.session.events import KINDS, VERSION, EventError, make_event
from kernelsmith.session.recorder import Recorder, new_session_id, sessions_dir

USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_tokens": 5, "cache_write_tokens": 0, "cost_usd": 0.01}


def fields_for(kind: str) -> dict:
    """Some value for every required field of a kind."""
    return {name: f"{kind}-{name}" for name in KINDS[kind]}


def lines(path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return text[:-1].split("\n")


def event(kind: str, t: float, **fields) -> dict:
    """An event as the recorder makes it, at a chosen time."""
    return {**make_event(kind, **fields), "t": t}


def assistant(text: str, *calls: tuple[str, str]) -> dict:
    return {"role": "assistant", "content": text,
            "tool_calls": [{"id": cid, "name": name, "arguments": {}} for cid, name in calls]}


# --- the recorder -------------------------------------------------------------------------


def test_recorder_writes_one_complete_event_per_line(tmp_path):
    recorder = Recorder(tmp_path, "20260101-000000-abcdef")
    assert recorder.path == sessions_dir(tmp_path) / "20260101-000000-abcdef" / "events.jsonl"
    assert recorder.path == tmp_path / ".kernelsmith" / "sessions" / "20260101-000000-abcdef" / "events.jsonl"
    for kind in KINDS:
        recorder.emit(kind, **fields_for(kind))
    recorder.emit("model_turn", turn=1, message=assistant("multi\nline ×"), usage=USAGE, stop_reason="tool_use",
                  model="m")
    recorder.close()

    written = [json.loads(line) for line in lines(recorder.path)]
    assert [e["kind"] for e in written] == [*KINDS, "model_turn"]
    for e in written[:-1]:
        assert e["v"] == VERSION and isinstance(e["t"], float)
        assert set(e) == {"v", "t", "kind", *KINDS[e["kind"]]}
        assert all(e[name] == f"{e['kind']}-{name}" for name in KINDS[e["kind"]])
    assert written[-1]["stop_reason"] == "tool_use" and written[-1]["model"] == "m"  # optional fields kept
    assert written[-1]["message"]["content"] == "multi\nline ×"
    assert [e["t"] for e in written] == sorted(e["t"] for e in written)


def test_recorder_refuses_unknown_kinds_and_missing_fields(tmp_path):
    recorder = Recorder(tmp_path, "s")
    with pytest.raises(EventError, match="unknown event kind 'thought'"):
        recorder.emit("thought", turn=1)
    with pytest.raises(EventError, match="tool_result event lacks ok, content"):
        recorder.emit("tool_result", turn=1, tool_call_id="c1", name="bash")
    recorder.close()
    assert recorder.path.read_text() == ""  # nothing half-written for a refused event
    assert issubclass(EventError, ValueError)


def test_listeners_get_each_event_after_it_is_on_disk(tmp_path):
    seen = []
    path = sessions_dir(tmp_path) / "s" / "events.jsonl"
    first = lambda e: seen.append(("first", e["kind"], len(lines(path))))  # noqa: E731
    second = lambda e: seen.append(("second", e["kind"], len(lines(path))))  # noqa: E731
    recorder = Recorder(tmp_path, "s", [first, second])
    returned = recorder.emit("error", turn=0, message="boom")
    recorder.emit("user_message", turn=0, content="hi")
    recorder.close()
    assert seen == [("first", "error", 1), ("second", "error", 1), ("first", "user_message", 2),
                    ("second", "user_message", 2)]
    assert json.loads(lines(path)[0]) == returned


def test_session_ids_sort_by_start_time_and_differ():
    ids = {new_session_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", i) for i in ids)


# --- kill -9: torn lines ------------------------------------------------------------------


def test_reader_skips_a_torn_last_line(tmp_path):
    recorder = Recorder(tmp_path, "s")
    recorder.emit("user_message", turn=0, content="kept")
    recorder.close()
    whole = json.dumps(make_event("user_message", turn=0, content="lost"), ensure_ascii=False)
    with open(recorder.path, "a", encoding="utf-8") as f:
        f.write(whole[: len(whole) // 2])  # killed mid-write: no closing brace, no newline
    events = reader.read_events(recorder.path)
    assert [e["content"] for e in events] == ["kept"]


def test_reader_survives_a_line_torn_inside_a_multibyte_character(tmp_path):
    recorder = Recorder(tmp_path, "s")
    recorder.emit("user_message", turn=0, content="kept")
    recorder.close()
    torn = json.dumps(make_event("user_message", turn=0, content="3×"), ensure_ascii=False).encode()
    torn = torn[: torn.index("×".encode()) + 1]  # first byte of a two-byte character
    with open(recorder.path, "ab") as f:
        f.write(torn)
    assert [e["content"] for e in reader.read_events(recorder.path)] == ["kept"]


def test_reader_does_not_split_events_on_unicode_line_separators(tmp_path):
    recorder = Recorder(tmp_path, "s")
    texts = ["a\u2028b", "c\u2029d", "e\x85f", "g\x0bh\x0ci\x1cj"]
    for text in texts:
        recorder.emit("user_message", turn=0, content=text)
    recorder.close()
    assert [e["content"] for e in reader.read_events(recorder.path)] == texts


def test_a_resumed_recorder_starts_on_a_fresh_line_so_no_event_is_lost(tmp_path):
    recorder = Recorder(tmp_path, "s")
    recorder.emit("model_turn", turn=1, message=assistant("", ("c1", "bash")), usage=USAGE)
    recorder.close()
    with open(recorder.path, "a", encoding="utf-8") as f:
        f.write('{"v": 1, "t": 5.0, "kind": "tool_res')  # torn

    resumed = Recorder(tmp_path, "s")
    resumed.emit("resume", from_turn=1, pending_tool_calls=[{"id": "c1", "name": "bash", "arguments": {}}])
    resumed.emit("tool_result", turn=1, tool_call_id="c1", name="bash", ok=True, content="done")
    resumed.close()

    assert [e["kind"] for e in reader.read_events(recorder.path)] == ["model_turn", "resume", "tool_result"]
    state = reader.load_session(recorder.path)
    assert state.pending_tool_calls() == []
    assert state.messages[-1] == {"role": "tool", "tool_call_id": "c1", "name": "bash", "content": "done"}


def test_a_resumed_recorder_adds_no_blank_line_after_a_whole_record(tmp_path):
    recorder = Recorder(tmp_path, "s")
    recorder.emit("error", turn=0, message="a")
    recorder.close()
    resumed = Recorder(tmp_path, "s")
    resumed.emit("error", turn=0, message="b")
    resumed.close()
    assert [json.loads(line)["message"] for line in lines(recorder.path)] == ["a", "b"]


# --- the fold -----------------------------------------------------------------------------


def start_event(t: float = 100.0, **extra) -> dict:
    return event("session_start", t, session_id="s1", config={"model": "m", "max_turns": 5}, system="SYS",
                 task="axpb", workdir="/w", messages=[{"role": "user", "content": "task"}], **extra)


def test_fold_rebuilds_the_conversation_with_user_messages_and_compaction():
    compacted = [{"role": "user", "content": "task"}, {"role": "user", "content": "[compaction note] ..."}]
    events = [
        start_event(user_changes_commit=None, head="abc"),
        event("model_turn", 101, turn=1, message=assistant("thinking"), usage=USAGE, stop_reason="end_turn"),
        event("user_message", 101, turn=1, content="Use a tool"),
        event("model_turn", 102, turn=2, message=assistant("", ("c1", "bash")), usage=USAGE),
        event("tool_result", 103, turn=2, tool_call_id="c1", name="bash", ok=True, content="out"),
        event("compaction", 104, turn=2, before_tokens=900, after_tokens=300, messages=compacted,
              stats={"dropped_turns": 2}),
        event("model_turn", 105, turn=3, message=assistant("", ("c2", "verify")), usage=USAGE),
        event("tool_result", 106, turn=3, tool_call_id="c2", name="verify", ok=False, content="wrong"),
    ]
    state = reader.fold(events)
    assert (state.session_id, state.system, state.task, state.config["model"]) == ("s1", "SYS", "axpb", "m")
    assert state.turn == 3 and state.compactions == 1
    assert state.messages == [*compacted, assistant("", ("c2", "verify")),
                              {"role": "tool", "tool_call_id": "c2", "name": "verify", "content": "wrong"}]

    before = reader.fold(events[:5])
    assert before.messages == [{"role": "user", "content": "task"}, assistant("thinking"),
                               {"role": "user", "content": "Use a tool"}, assistant("", ("c1", "bash")),
                               {"role": "tool", "tool_call_id": "c1", "name": "bash", "content": "out"}]
    assert events[0]["messages"] == [{"role": "user", "content": "task"}]  # the fold copies, never mutates
    assert events[5]["messages"] == compacted


def test_fold_sums_usage_and_tracks_attempts_best_commit_and_end():
    verified = {"correct": True, "speedup_vs_eager": None, "reward": 0.1}
    faster = {"correct": True, "speedup_vs_eager": 2.0, "speedup_vs_compile": 1.5, "reward": 1.2}
    events = [
        start_event(),
        event("model_turn", 101, turn=1, message=assistant("", ("c1", "verify")), usage=USAGE),
        event("attempt", 102, turn=1, attempt=1, ref="refs/kernelsmith/attempts/s1/0001", sha="a1"),
        event("eval_result", 102, turn=1, tool="verify", attempt=1, result=verified),
        event("commit", 102, turn=1, sha="k1", summary="first", speedup_vs_eager=None, speedup_vs_compile=None,
              reward=0.1, attempt=1),
        event("model_turn", 103, turn=2, message=assistant("", ("c2", "profile")),
              usage={**USAGE, "cost_usd": 0.5, "input_tokens": 1}),
        event("attempt", 104, turn=2, attempt=2, ref="refs/kernelsmith/attempts/s1/0002", sha="a2"),
        event("eval_result", 104, turn=2, tool="profile", attempt=2, result=faster),
        event("commit", 104, turn=2, sha="k2", summary="2x", speedup_vs_eager=2.0, speedup_vs_compile=1.5,
              reward=1.2, attempt=2),
        event("model_turn", 105, turn=3, message=assistant("", ("c3", "compile")), usage=USAGE),
        event("eval_result", 106, turn=3, tool="compile", attempt=3, result={"build": {"ok": False}}),
        event("session_end", 107, turn=3, reason="max_turns", summary={"turns": 3}),
    ]
    state = reader.fold(events)
    assert state.usage == {"input_tokens": 201, "output_tokens": 60, "cache_read_tokens": 15,
                           "cache_write_tokens": 0, "cost_usd": pytest.approx(0.52)}
    assert state.cost_usd == pytest.approx(0.52)
    assert state.best["sha"] == "k2" and state.best["speedup_vs_eager"] == 2.0
    assert [c["sha"] for c in state.commits] == ["k1", "k2"]
    assert state.attempts == 3 and [e["tool"] for e in state.evals] == ["verify", "profile", "compile"]
    assert state.end["reason"] == "max_turns"
    assert reader.fold([*events, event("resume", 200, from_turn=3, pending_tool_calls=[])]).end is None


def test_elapsed_time_leaves_out_the_gap_before_each_resume():
    events = [
        start_event(t=100.0),
        event("model_turn", 110.0, turn=1, message=assistant("", ("c1", "bash")), usage=USAGE),
        event("tool_result", 130.0, turn=1, tool_call_id="c1", name="bash", ok=True, content=""),
        # killed at about 131; resumed an hour later
        event("resume", 3700.0, from_turn=1, pending_tool_calls=[]),
        event("model_turn", 3705.0, turn=2, message=assistant(""), usage=USAGE),
        event("session_end", 3720.0, turn=2, reason="interrupted", summary={}),
        # resumed again the next day with a larger budget
        event("resume", 90000.0, from_turn=2, pending_tool_calls=[]),
        event("model_turn", 90004.5, turn=3, message=assistant(""), usage=USAGE),
    ]
    assert reader.fold(events).elapsed_s == pytest.approx(30 + 20 + 4.5)
    assert reader.fold(events[:3]).elapsed_s == pytest.approx(30)
    assert reader.fold(events[:4]).elapsed_s == pytest.approx(30)  # a resume on its own adds nothing
    assert reader.fold([]).elapsed_s == 0.0


def test_fold_ignores_unknown_kinds_and_fields():
    events = [start_event(), {"v": 1, "t": 101.0, "kind": "future_kind", "turn": 1, "whatever": [1]},
              {**event("user_message", 102.0, turn=1, content="hi"), "future_field": {"x": 1}}]
    state = reader.fold(events)
    assert state.messages[-1] == {"role": "user", "content": "hi"}
    assert state.elapsed_s == pytest.approx(2.0)


# --- resume: pending tool calls -----------------------------------------------------------


def test_pending_tool_calls_of_a_turn_killed_after_one_of_two_results():
    two_calls = assistant("", ("c1", "write_file"), ("c2", "verify"))
    events = [
        start_event(),
        event("model_turn", 101, turn=1, message=assistant("", ("c0", "bash")), usage=USAGE),
        event("tool_result", 102, turn=1, tool_call_id="c0", name="bash", ok=True, content=""),
        event("model_turn", 103, turn=2, message=two_calls, usage=USAGE),
        event("tool_result", 104, turn=2, tool_call_id="c1", name="write_file", ok=True, content="written"),
    ]
    state = reader.fold(events)
    assert state.pending_tool_calls() == [{"id": "c2", "name": "verify", "arguments": {}}]
    assert reader.fold(events[:4]).pending_tool_calls() == two_calls["tool_calls"]
    both = [*events, event("tool_result", 105, turn=2, tool_call_id="c2", name="verify", ok=True, content="ok")]
    assert reader.fold(both).pending_tool_calls() == []
    assert reader.fold(events[:1]).pending_tool_calls() == []  # no assistant message yet


def test_pending_tool_calls_round_trip_through_the_file(tmp_path):
    recorder = Recorder(tmp_path, "s")
    for e in [start_event(), event("model_turn", 101, turn=1, message=assistant("", ("a", "bash"), ("b", "bash")),
                                   usage=USAGE),
              event("tool_result", 102, turn=1, tool_call_id="a", name="bash", ok=True, content="")]:
        recorder.emit(e["kind"], **{k: v for k, v in e.items() if k not in ("v", "t", "kind")})
    recorder.close()
    state = reader.load_session(recorder.path)
    assert [c["id"] for c in state.pending_tool_calls()] == ["b"]
    assert state.turn == 1 and state.session_id == "s1"


# --- finding a session --------------------------------------------------------------------


@pytest.fixture
def three_sessions(tmp_path):
    for sid in ["20260101-120000-aaaaaa", "20260101-120000-aaabbb", "20260102-090000-cccccc"]:
        recorder = Recorder(tmp_path, sid)
        recorder.emit("error", turn=0, message=sid)
        recorder.close()
    return tmp_path


def test_find_session_by_a_unique_prefix_or_a_path(three_sessions):
    found = reader.find_session(three_sessions, "20260102")
    assert found == sessions_dir(three_sessions) / "20260102-090000-cccccc" / "events.jsonl"
    assert reader.find_session(three_sessions, "20260101-120000-aaab").parent.name == "20260101-120000-aaabbb"
    assert reader.find_session(three_sessions, "20260101-120000-aaaaaa").parent.name == "20260101-120000-aaaaaa"
    assert reader.find_session(three_sessions, str(found)) == found
    assert [p.parent.name for p in reader.session_paths(three_sessions)] == [
        "20260101-120000-aaaaaa", "20260101-120000-aaabbb", "20260102-090000-cccccc"]


@pytest.mark.parametrize("prefix, says", [("20260101", "2 sessions matching '20260101'"),
                                          ("2027", "no session matching '2027'")])
def test_find_session_ambiguous_or_missing_is_bad_input_on_one_line(three_sessions, prefix, says):
    with pytest.raises(BadInput) as caught:
        reader.find_session(three_sessions, prefix)
    message = str(caught.value)
    assert says in message and str(sessions_dir(three_sessions)) in message
    assert "\n" not in message and caught.value.hint


def test_find_session_in_a_workdir_without_sessions(tmp_path):
    with pytest.raises(BadInput, match="no session matching"):
        reader.find_session(tmp_path, "2026")
    assert list(reader.session_paths(tmp_path)) == []
