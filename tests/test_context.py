"""Context compaction keeps a 200-turn session inside a small window, and keeps it valid.

Sessions here are synthetic but shaped like the loop's: a 4 KB kernel written, compiled,
verified (multi-line verdicts) and profiled, over and over.
"""

from __future__ import annotations

import copy
import itertools
import json

import pytest

from kernelsmith.agent.context import (NOTE_PREFIX, TokenCounter, compact, conversation_problems,
                                       estimate_tokens, should_compact)

SYSTEM = "You write CUDA kernels. " * 40
TASK = {"role": "user", "content": "Task: make Model.forward fast.\nRules: no torch in the kernel.\n" * 20}


def kernel(version: int, chars: int = 4096) -> str:
    line = f"__global__ void k{version}(float* x) {{ x[threadIdx.x] *= {version}.0f; }}\n"
    return (line * (chars // len(line) + 1))[:chars]


VERIFY = "PASS: outputs match (max abs err 3e-6)\nspeedup vs eager 1.42x\nspeedup vs compile 1.08x\n" + \
    "".join(f"trial {i}: ok 0.{i}31 ms\n" for i in range(40))
PROFILE = "kernel k: 61% of DRAM peak\nbound: memory\noccupancy 0.75\n" + \
    "".join(f"metric_{i} = {i * 17.5}\n" for i in range(60))
COMPILE = "ok: built in 3.1 s\n" + "warning: unused variable 'tmp'\n" * 8


def call(cid: str, name: str, **arguments) -> dict:
    return {"id": cid, "name": name, "arguments": arguments}


def result(cid: str, name: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "name": name, "content": content}


def step(turn: int) -> list[dict]:
    """One assistant turn of the write/compile/verify/profile cycle, with its result."""
    cid = f"c{turn}"
    name = ["write_file", "compile", "verify", "profile"][turn % 4]
    args = {"path": "kernels/a.cu", "content": kernel(turn)} if name == "write_file" else {}
    text = {"write_file": "wrote", "compile": COMPILE, "verify": VERIFY, "profile": PROFILE}[name]
    return [{"role": "assistant", "content": f"turn {turn}", "tool_calls": [call(cid, name, **args)]},
            result(cid, name, text)]


def multi_step(turn: int) -> list[dict]:
    """One assistant turn that writes two files, compiles and verifies at once."""
    ids = [f"m{turn}-{i}" for i in range(4)]
    calls = [call(ids[0], "write_file", path="kernels/a.cu", content=kernel(turn)),
             call(ids[1], "write_file", path=f"kernels/b{turn % 3}.cu", content=kernel(-turn)),
             call(ids[2], "compile"), call(ids[3], "verify")]
    results = [result(ids[0], "write_file", "wrote"), result(ids[1], "write_file", "wrote"),
               result(ids[2], "compile", COMPILE), result(ids[3], "verify", VERIFY)]
    return [{"role": "assistant", "content": "", "tool_calls": calls}] + results


def chatty_step(turn: int) -> list[dict]:
    """Turns without tool calls, user nudges, and edit_file between the usual cycle."""
    if turn % 5 == 1:
        return [{"role": "assistant", "content": "Thinking about tiling. " * 30}]
    if turn % 5 == 2:
        return [{"role": "user", "content": f"{200 - turn} turns left."}]
    if turn % 5 == 3:
        cid = f"e{turn}"
        return [{"role": "assistant", "content": "", "tool_calls": [
            call(cid, "edit_file", path="kernels/a.cu", old="x" * 600, new="y" * 700)]},
            result(cid, "edit_file", "edited")]
    return step(turn)


def session(turns: int, shape=step) -> list[dict]:
    return [TASK] + [m for t in range(turns) for m in shape(t)]


def note_messages(messages: list[dict]) -> list[dict]:
    return [m for m in messages if m["role"] == "user" and m["content"].startswith(NOTE_PREFIX)]


def recent_tail(messages: list[dict], keep_recent: int) -> list[dict]:
    starts = [i for i, m in enumerate(messages) if i > 0 and m["role"] == "assistant"]
    if keep_recent == 0:
        return []
    return messages[starts[-keep_recent]:] if len(starts) >= keep_recent else messages[1:]


def writes(messages: list[dict]) -> list[dict]:
    return [c for m in messages for c in m.get("tool_calls") or [] if c["name"] == "write_file"]


# --- the long session ---------------------------------------------------------------------

@pytest.mark.parametrize("reported_ratio", [None, 1.3])
def test_200_turns_stay_under_an_8k_window(reported_ratio):
    window, budget = 8000, 5000
    counter = TokenCounter()
    messages, peak, compactions, note = [TASK], 0, 0, ""
    for turn in range(201):  # turn 200 is the model call after the last result
        if should_compact(counter.count(SYSTEM, messages), window):
            note = f"best: kernels/a.cu v{turn - 1}, 1.42x eager; turns used {turn}/200"
            messages, stats = compact(messages, budget, note, system=SYSTEM, counter=counter)
            assert stats["after_tokens"] <= budget
            compactions += 1
        tokens = counter.count(SYSTEM, messages)
        peak = max(peak, tokens)
        if reported_ratio:  # the API reports more than the estimate: the counter learns it
            counter.observe(estimate_tokens(SYSTEM, messages), int(tokens * reported_ratio / counter.factor))
        if turn < 200:
            messages = messages + step(turn)
    assert peak < window
    assert estimate_tokens(SYSTEM, session(200)) > 10 * window  # compaction was needed
    assert compactions >= 10
    assert messages[0] == TASK
    assert note_messages(messages) == [messages[1]] and messages[1]["content"].endswith(note)
    assert writes(messages)[-1]["arguments"]["content"] == kernel(196)
    assert conversation_problems(messages) == []


# --- validity ------------------------------------------------------------------------------

SHAPES = {"single": step, "multi": multi_step, "chatty": chatty_step}


@pytest.mark.parametrize("shape,budget,keep_recent",
                         itertools.product(SHAPES, [0, 1500, 6000, 10**9], [0, 1, 3, 6]))
def test_compacted_conversation_is_valid(shape, budget, keep_recent):
    messages = session(40, SHAPES[shape])
    out, stats = compact(messages, budget, "best: v3", keep_recent=keep_recent, system=SYSTEM)
    assert conversation_problems(out) == []
    assert out[0] == TASK and out[1]["content"].startswith(NOTE_PREFIX)
    tail = recent_tail(messages, keep_recent)
    assert out[len(out) - len(tail):] == tail  # the recent turns, verbatim
    assert stats["after_tokens"] == estimate_tokens(SYSTEM, out)
    assert stats["before_tokens"] == estimate_tokens(SYSTEM, messages)
    if budget == 0:  # nothing older survives an impossible budget
        assert out == [TASK, out[1]] + tail
    if budget == 10**9:
        assert stats["dropped_turns"] == stats["elided_tool_results"] == 0


def test_dropping_takes_a_turn_with_all_its_results():
    messages = session(30, multi_step)
    out, stats = compact(messages, 6000, "note", keep_recent=2)
    assert stats["dropped_turns"] > 0
    calls = {c["id"] for m in out for c in m.get("tool_calls") or []}
    answered = {m["tool_call_id"] for m in out if m["role"] == "tool"}
    assert calls == answered
    assert conversation_problems(out) == []


@pytest.mark.parametrize("broken,words", [
    ([TASK, result("x", "verify", "orphan")], "no open call"),
    ([TASK, {"role": "assistant", "content": "", "tool_calls": [call("a", "compile")]}], "never answered"),
    ([TASK, *step(0), result("c0", "write_file", "again")], "no open call"),
    ([TASK, step(1)[0], {"role": "user", "content": "hi"}, step(1)[1]], "never answered"),
    ([step(1)[0], step(1)[1]], "does not start"),
])
def test_the_validity_check_catches_broken_conversations(broken, words):
    assert any(words in p for p in conversation_problems(broken))


def test_input_is_not_mutated():
    messages = session(60, multi_step)
    frozen = copy.deepcopy(messages)
    out, stats = compact(messages, 2000, "note", keep_recent=2)
    assert stats["elided_tool_results"] and stats["elided_file_contents"] and stats["dropped_turns"]
    assert messages == frozen
    for m in out:  # the result shares nothing the caller could change by accident
        m["content"] = "changed"
        for c in m.get("tool_calls") or []:
            c["arguments"]["path"] = "changed"
    assert messages == frozen


# --- what goes first -----------------------------------------------------------------------

def write_turn(cid: str, path: str, content: str) -> list[dict]:
    calls = [call(cid, "write_file", path=path, content=content)]
    return [{"role": "assistant", "content": "", "tool_calls": calls},
            result(cid, "write_file", "wrote")]


def rewrite_session() -> list[dict]:
    """Older: b.cu (never rewritten), then a.cu v1 (rewritten later); recent: a.cu v3."""
    older = write_turn("w2", "kernels/b.cu", kernel(2)) + write_turn("w1", "kernels/a.cu", kernel(1))
    recent = write_turn("w3", "./kernels/a.cu", kernel(3)) + step(1) + step(2)
    return [TASK] + older + recent


def test_superseded_writes_are_elided_before_live_ones():
    messages = rewrite_session()
    full, _ = compact(messages, 10**9, "note", keep_recent=3)
    before = estimate_tokens("", full)
    out, stats = compact(messages, before - 500, "note", keep_recent=3)
    b, a1, a3 = (c["arguments"]["content"] for c in writes(out))
    assert a1 == "[4096 chars elided: kernels/a.cu was rewritten at a later turn]"
    assert b == kernel(2) and a3 == kernel(3)
    assert stats["elided_file_contents"] == 1 and stats["dropped_turns"] == 0

    out, stats = compact(messages, before - 1500, "note", keep_recent=3)
    b, a1, a3 = (c["arguments"]["content"] for c in writes(out))
    assert a1.startswith("[4096 chars elided")
    assert b == "[4096 chars elided: kernels/b.cu was not rewritten later; read_file it for the current text]"
    assert a3 == kernel(3)
    assert stats["elided_file_contents"] == 2 and stats["dropped_turns"] == 0


def test_an_appended_part_does_not_supersede_the_parts_before_it():
    """A file written in parts (write_file, then append=true): its first part is still the file's text, so it is
    not elided as rewritten (before other files' live text); a later whole rewrite supersedes both parts."""
    appended = write_turn("w2", "kernels/a.cu", kernel(2))
    appended[0]["tool_calls"][0]["arguments"]["append"] = True
    messages = [TASK] + write_turn("w1", "kernels/a.cu", kernel(1)) + appended + step(1) + step(2)
    full = estimate_tokens("", compact(messages, 10**9, "note")[0])
    out, _ = compact(messages, full - 500, "note", keep_recent=2)
    first = writes(out)[0]["arguments"]["content"]
    assert first.startswith("[4096 chars elided: kernels/a.cu was not rewritten later")
    rewritten = messages + write_turn("w3", "kernels/a.cu", kernel(3))
    out, _ = compact(rewritten, full - 500, "note", keep_recent=1)
    assert [w["arguments"]["content"].endswith("was rewritten at a later turn]") for w in writes(out)] == [True, True, False]


def test_edit_file_arguments_are_elided_too():
    calls = [call("e1", "edit_file", path="kernels/a.cu", old="o" * 900, new="n" * 1100)]
    edit = [{"role": "assistant", "content": "", "tool_calls": calls}, result("e1", "edit_file", "ok")]
    messages = ([TASK] + write_turn("w0", "kernels/a.cu", kernel(0)) + edit
                + write_turn("w2", "kernels/a.cu", kernel(2)))
    full = estimate_tokens("", compact(messages, 10**9, "note")[0])
    out, stats = compact(messages, full - 1200, "note", keep_recent=1)
    assert stats["dropped_turns"] == 0
    assert out[2]["tool_calls"][0]["arguments"]["content"].startswith("[4096 chars elided")
    args = out[4]["tool_calls"][0]["arguments"]
    assert args["old"] == "[900 chars elided: kernels/a.cu was rewritten at a later turn]"
    assert args["new"].startswith("[1100 chars elided")
    assert stats["elided_file_contents"] == 2


def test_tool_results_are_stubbed_before_file_contents():
    messages = session(24)  # older verify/profile/compile results are ~7 KB per cycle
    full = estimate_tokens("", compact(messages, 10**9, "note")[0])
    out, stats = compact(messages, full - 1000, "note")
    assert stats["elided_tool_results"] > 0
    assert stats["elided_file_contents"] == stats["dropped_turns"] == 0


def test_stubs_keep_the_first_line_and_the_verdict_lines():
    messages = session(12)
    full = estimate_tokens("", compact(messages, 10**9, "note")[0])
    out, stats = compact(messages, full - 400, "note", keep_recent=4)
    assert stats["elided_tool_results"] == 3 and stats["dropped_turns"] == 0  # c1, c2, c3
    by_id = {m["tool_call_id"]: m["content"] for m in out if m["role"] == "tool"}
    verify = by_id["c2"].splitlines()
    assert verify[:3] == VERIFY.splitlines()[:3]
    kept = "\n".join(VERIFY.splitlines()[:3])
    assert verify[3] == f"[... {len(VERIFY) - len(kept)} chars elided by compaction]"
    assert by_id["c1"].splitlines() == ["ok: built in 3.1 s",
                                        f"[... {len(COMPILE) - 18} chars elided by compaction]"]
    assert by_id["c4"] == "wrote"  # short results stay as they are
    assert by_id["c5"] == COMPILE  # older, but the budget was met before reaching it
    assert by_id["c11"] == PROFILE  # recent


def test_compacting_twice_keeps_one_note_and_does_not_restub():
    first, _ = compact(session(40), 3000, "note one", system=SYSTEM)
    grown = first + step(40) + step(41)
    second, stats = compact(grown, 3000, "note two", system=SYSTEM)
    notes = note_messages(second)
    assert notes == [second[1]] and notes[0]["content"].endswith("note two")
    assert "note one" not in json.dumps(second)
    again, stats = compact(second, 3000, "note two", system=SYSTEM)
    assert again == second
    assert stats["elided_tool_results"] == stats["elided_file_contents"] == stats["dropped_turns"] == 0


def test_stubs_are_not_stubbed_again():
    first, _ = compact(session(40), 4000, "note", system=SYSTEM)
    second, stats = compact(first, 3700, "note", system=SYSTEM)
    before = {m["tool_call_id"]: m["content"] for m in first if m["role"] == "tool"}
    changed = [m for m in second if m["role"] == "tool" and m["content"] != before[m["tool_call_id"]]]
    stubbed_before = [m for m in second
                      if m["role"] == "tool" and "chars elided" in before[m["tool_call_id"]]]
    assert stubbed_before and stats["dropped_turns"] > 0
    assert all(m["content"] == before[m["tool_call_id"]] for m in stubbed_before)
    assert stats["elided_tool_results"] == len(changed)


def test_note_is_prefixed_once():
    out, _ = compact(session(2), 10**9, f"{NOTE_PREFIX} best v1")
    assert out[1] == {"role": "user", "content": f"{NOTE_PREFIX} best v1"}
    out, _ = compact(session(2), 10**9, "best v1")
    assert out[1]["content"].startswith(NOTE_PREFIX) and out[1]["content"].endswith("\nbest v1")


# --- counting --------------------------------------------------------------------------------

def test_estimate_counts_text_and_tool_arguments():
    base = estimate_tokens("", [TASK])
    assert estimate_tokens("s" * 400, [TASK]) == base + 100
    assert estimate_tokens("", [TASK], tools_json="t" * 800) == base + 200
    empty = estimate_tokens("", write_turn("w", "a.cu", ""))
    assert estimate_tokens("", write_turn("w", "a.cu", "x" * 4096)) == empty + 4096 // 4
    # Arguments count as serialised JSON: a newline is two characters there.
    assert estimate_tokens("", write_turn("w", "a.cu", "\n" * 4096)) == empty + 2 * 4096 // 4


def test_calibration_moves_toward_reported_counts():
    counter = TokenCounter()
    messages = session(8)
    est = estimate_tokens(SYSTEM, messages)
    assert counter.count(SYSTEM, messages) == est
    counter.observe(est, int(est * 1.3))
    assert counter.count(SYSTEM, messages) == pytest.approx(est * 1.3, rel=0.01)
    for _ in range(20):
        counter.observe(est, int(est * 1.1))
    assert counter.count(SYSTEM, messages) == pytest.approx(est * 1.1, rel=0.01)


def test_calibration_ignores_nonsense_and_stays_clamped():
    counter = TokenCounter()
    counter.observe(0, 500)
    counter.observe(500, 0)
    assert counter.factor == 1.0
    counter.observe(100, 10**6)
    assert counter.factor == counter.hi
    for _ in range(50):
        counter.observe(10**6, 1)
    assert counter.factor == pytest.approx(counter.lo)


def test_should_compact():
    assert not should_compact(5999, 8000)
    assert should_compact(6000, 8000)
    assert should_compact(4000, 8000, threshold=0.5)
    assert not should_compact(10, 0)


def test_the_last_resort_elides_the_recent_files_but_not_their_results():
    """A window that cannot hold even the last turn (a small student's): that turn's file text goes, since the file
    is on disk, but its results stay whole: the model has not read them yet."""
    messages = session(7, multi_step)  # the last turn writes two files, compiles and verifies
    last_results = [m for m in messages[-4:] if m["role"] == "tool"]
    plain, _ = compact(messages, 50, "note", keep_recent=1, system=SYSTEM)
    squeezed, stats = compact(messages, 50, "note", keep_recent=1, system=SYSTEM, elide_recent_writes=True)
    assert [c["arguments"]["content"] for c in writes(plain)[-2:]] == [kernel(6), kernel(-6)]
    assert all("chars elided" in c["arguments"]["content"] for c in writes(squeezed)[-2:])
    assert [m for m in squeezed if m["role"] == "tool"][-4:] == last_results
    assert estimate_tokens(SYSTEM, squeezed) < estimate_tokens(SYSTEM, plain) - 2000
    assert conversation_problems(squeezed) == []
