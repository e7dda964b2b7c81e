"""The built-in policy's turns, driven with synthetic tool results (no build, no harness):
the plan it writes, the coordinate search over launch variants, and honest give-ups. The results
are KernelEnv observations whose text says nothing: the policy reads only their structured part."""

import json
import shutil
from pathlib import Path

from kernelsmith.agent.env import Observation
from kernelsmith.backends.builtin import BuiltinBackend

DATA = Path(__file__).parent / "data" / "builtin"


def backend_for(tmp_path: Path, task: str = "pointwise.py") -> BuiltinBackend:
    shutil.copy(DATA / task, tmp_path / "model.py")
    backend = BuiltinBackend()
    backend.bind(tmp_path, "cpu", "fp32")
    return backend


def turn(backend, messages, **results):
    """Append tool results for the previous turn, then take the policy's next turn."""
    for name, obs in results.items():
        if isinstance(obs, str):
            obs = Observation(obs)
        obs.tool, obs.tool_call_id, obs.text = name, name, "(the policy must not read this text)"
        messages.append(obs.message())
    reply = backend.complete("system", messages, [])
    messages.append(reply.as_message())
    return reply


def budget(turn_no: int, max_turns: int) -> dict:
    return {"turn": turn_no, "max_turns": max_turns, "turns_left": max_turns - turn_no}


def built(ok: bool = True, summary: str = "") -> Observation:
    return Observation("", build={"ok": ok, "cached": False, "seconds": 3.0, "summary": summary},
                       budget=budget(1, 50))


def rejected(error: str = "mismatch", turn_no: int = 2, max_turns: int = 50) -> Observation:
    return Observation("", ok=False, eval={"correct": False, "error": error, "reward": -1.0},
                       budget=budget(turn_no, max_turns))


def profile_result(speedup: float, turn_no: int, max_turns: int = 50) -> Observation:
    return Observation("", eval={"correct": True, "violations": [], "reward": 1.0, "speedup_vs_eager": speedup},
                       budget=budget(turn_no, max_turns))


def configs_of(reply) -> list[int]:
    source = next(c.arguments["content"] for c in reply.tool_calls if c.name == "write_file"
                  and c.arguments["path"] == "model_new.py")
    return json.loads(source.split("CONFIG = ")[1].split("  #")[0])


def test_the_search_keeps_the_fastest_variant_and_writes_it_back(tmp_path):
    backend, messages = backend_for(tmp_path), []
    first = turn(backend, messages)
    names = [c.name for c in first.tool_calls]
    assert names[0] == "bash" and names[-1] == "compile" and "write_file" in names
    assert "k0_pointwise" in first.text and configs_of(first) == [0]
    assert [c.name for c in turn(backend, messages, compile=built()).tool_calls] == ["profile"]
    second = turn(backend, messages, profile=profile_result(1.10, 2))
    assert configs_of(second) == [1]
    third = turn(backend, messages, write_file="wrote", profile=profile_result(1.30, 3))
    assert configs_of(third) == [2]
    last = turn(backend, messages, write_file="wrote", profile=profile_result(1.20, 4))
    assert [c.name for c in last.tool_calls] == ["write_file", "finish"]
    assert configs_of(last) == [1]  # variant 1 was the fastest (1.30x)
    assert "1.300x" in last.tool_calls[-1].arguments["summary"]


def test_the_search_stops_when_the_turn_budget_is_nearly_spent(tmp_path):
    backend, messages = backend_for(tmp_path), []
    turn(backend, messages)
    turn(backend, messages, compile=built())
    reply = turn(backend, messages, profile=profile_result(1.05, 2, max_turns=3))
    assert [c.name for c in reply.tool_calls] == ["write_file", "finish"]


def test_a_failing_build_or_verify_is_reported_not_hidden(tmp_path):
    backend, messages = backend_for(tmp_path), []
    turn(backend, messages)
    reply = turn(backend, messages, compile=built(False, "k0_pointwise.cpp:3: error: boom"))
    assert [c.name for c in reply.tool_calls] == ["finish"] and "did not compile" in reply.text
    backend, messages = backend_for(tmp_path), []
    turn(backend, messages)
    turn(backend, messages, compile=built())
    reply = turn(backend, messages, profile=rejected())
    # the default variant failed: said so, and the other variants still get their turn
    assert "did not verify" in reply.text and "mismatch" in reply.text
    assert [c.name for c in reply.tool_calls] == ["write_file", "profile"] and configs_of(reply) == [1]
    reply = turn(backend, messages, write_file="wrote", profile=profile_result(1.10, 3))
    assert configs_of(reply) == [2]  # variant 1 verified and is the best so far
    last = turn(backend, messages, write_file="wrote", profile=rejected())
    assert [c.name for c in last.tool_calls] == ["write_file", "finish"] and configs_of(last) == [1]
    assert "1.100x" in last.tool_calls[-1].arguments["summary"]


def test_a_task_whose_every_variant_fails_finishes_saying_so(tmp_path):
    backend, messages = backend_for(tmp_path), []
    turn(backend, messages)
    turn(backend, messages, compile=built())
    reply = turn(backend, messages, profile=rejected())
    while reply.tool_calls[-1].name != "finish":
        reply = turn(backend, messages, write_file="wrote", profile=rejected())
    assert "no variant verified" in reply.tool_calls[-1].arguments["summary"]


def test_an_unsupported_task_finishes_at_once_with_the_reason(tmp_path):
    (tmp_path / "model.py").write_text(
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.cumprod(x, dim=1)\n\n"
        "def get_inputs():\n    return [torch.randn(4, 8)]\n\ndef get_init_inputs():\n    return []\n")
    backend = BuiltinBackend()
    backend.bind(tmp_path, "cpu", "fp32")
    reply = backend.complete("system", [], [])
    assert [c.name for c in reply.tool_calls] == ["finish"]
    assert "cumprod" in reply.text and "not supported" in reply.text


def test_defaults_chosen_for_the_user_are_announced_in_one_line_each(capsys):
    from kernelsmith.cli import _notice_defaults

    _notice_defaults("builtin", "cpu", device_chosen=False)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "built-in offline policy" in lines[0] and "CPU target" in lines[1]
    _notice_defaults("openai", "cpu", device_chosen=True)  # by --device, or by an existing workdir: no notice
    assert capsys.readouterr().err == ""


def test_variants_that_failed_beside_a_broken_default_are_tried_again_once_it_is_replaced(tmp_path):
    """Kernel 1's default is broken: kernel 0's variants fail beside it, so once kernel 1's
    variant 1 verifies they get their turn again instead of being written off."""
    backend, messages = backend_for(tmp_path, "two_reductions.py"), []
    turn(backend, messages)
    turn(backend, messages, compile=built())
    tried = [configs_of(turn(backend, messages, profile=rejected()))]  # the defaults [0, 0] fail
    while tried[-1] != [0, 1]:  # kernel 0's variants fail too (kernel 1 is still broken)
        tried.append(configs_of(turn(backend, messages, write_file="wrote", profile=rejected())))
    assert tried == [[1, 0], [2, 0], [0, 1]]
    reply = turn(backend, messages, write_file="wrote", profile=profile_result(1.05, 6))  # [0, 1] verifies
    assert configs_of(reply) in ([1, 1], [0, 2])
    seen = [configs_of(reply)]
    while reply.tool_calls[-1].name != "finish":
        reply = turn(backend, messages, write_file="wrote", profile=profile_result(1.01, 7))
        seen.append(configs_of(reply))
    assert [1, 1] in seen and [2, 1] in seen  # kernel 0's variants, retried beside the working kernel 1
    assert configs_of(reply) == [0, 1] and "1.050x" in reply.tool_calls[-1].arguments["summary"]


def play(backend, speedups: list[float], max_turns: int = 50) -> list:
    """A whole session against synthetic results (each profile gets the next speed-up); the replies."""
    messages, replies, turn_no = [], [], 0
    while not replies or replies[-1].tool_calls[-1].name != "finish":
        results = {}
        for call in replies[-1].tool_calls if replies else []:
            turn_no += 1
            results[call.name] = (built() if call.name == "compile" else
                                  profile_result(speedups.pop(0), turn_no, max_turns) if call.name == "profile"
                                  else Observation("", budget=budget(turn_no, max_turns)))
        replies.append(turn(backend, messages, **results))
    return replies


def calls_of(replies) -> list[tuple[str, dict]]:
    return [(c.name, c.arguments) for r in replies for c in r.tool_calls]


def test_one_call_per_reply_makes_the_same_calls_one_reply_each(tmp_path):
    """A teacher for a student with a small window: the loop can compact between any two of its calls."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    batched = play(backend_for(tmp_path / "a"), [1.10, 1.30, 1.20])
    single = backend_for(tmp_path / "b")
    single.one_call_per_reply = True
    one_each = play(single, [1.10, 1.30, 1.20])
    assert all(len(r.tool_calls) == 1 for r in one_each)
    assert calls_of(one_each) == calls_of(batched) and len(one_each) > len(batched)
    assert configs_of(one_each[-2]) == [1]  # the same search: variant 1 (1.30x) written back, then finish


def test_one_call_per_reply_still_finishes_inside_the_turn_budget(tmp_path):
    """Trying a variant takes two replies then (write, profile), and so does finishing (write, finish)."""
    backend = backend_for(tmp_path)
    backend.one_call_per_reply = True
    replies = play(backend, [1.05, 1.2, 1.3], max_turns=8)  # the plan and first profile take 5 of them
    assert [c[0] for c in calls_of(replies)][-2:] == ["write_file", "finish"]
    assert len(replies) <= 8


def joined_files(calls: list[tuple[str, dict]]) -> dict[str, str]:
    """The files as the tools leave them: a write replaces, an append adds to the end."""
    files: dict[str, str] = {}
    for name, args in calls:
        if name == "write_file":
            files[args["path"]] = files.get(args["path"], "") + args["content"] if args.get("append") else args["content"]
    return files


def test_a_file_longer_than_the_students_reply_is_written_in_parts_that_fit(tmp_path):
    """A teacher for a student whose replies are capped: each reply's call fits the cap in the counter's tokens
    (here one a character), and the parts, appended, are the files the batched teacher writes whole."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    speedups = [1.10, 1.30, 1.20, 1.25, 1.05, 1.40, 1.15, 1.35] * 4
    whole = calls_of(play(backend_for(tmp_path / "a", "two_reductions.py"), list(speedups)))
    cap = 1500
    capped = BuiltinBackend(one_call_per_reply=True, max_reply_tokens=cap, text_tokens=len)
    capped.bind(tmp_path / "b", "cpu", "fp32")
    shutil.copy(DATA / "two_reductions.py", tmp_path / "b" / "model.py")
    replies = play(capped, list(speedups), max_turns=200)
    parts = calls_of(replies)
    longest = max(len(r.text) + len(json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False))
                  for r in replies for c in r.tool_calls)
    assert longest <= cap and all(len(r.tool_calls) == 1 for r in replies)
    assert max(len(a["content"]) for n, a in whole if n == "write_file") > cap  # so some file did need parts
    assert any(a.get("append") for _, a in parts)
    assert joined_files(parts) == joined_files(whole)
    assert [c for c in parts if c[0] != "write_file"] == [c for c in whole if c[0] != "write_file"]


def test_a_line_longer_than_the_cap_is_cut_inside_it():
    from kernelsmith.backends.builtin import _parts

    content = "short\n" + "x" * 950 + "\nend\n"
    parts = _parts(content, len, 400)
    assert "".join(parts) == content and max(map(len, parts)) <= 400 and len(parts) >= 3
