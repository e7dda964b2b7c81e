"""A session keeps its context under a window counted in the tokens of the model whose window it is.

The estimate of 4 characters a token is far off for a small model's tokenizer on kernel code (SmolLM2 spends
about 2.8; the tests' byte-level BPE, trained on a few words, about 1 on text outside them), and the built-in
teacher reports no usage to calibrate it from. `train rft` runs its teacher with the student's tokenizer
(`window_tokenizer`): every request the teacher is sent, counted by that tokenizer through its chat template,
must fit the student's window, or the student is fine-tuned at positions it never sees at run time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parent))

from test_optimize import make_workdir  # noqa: E402
from tinymodels import CHATML, build_tokenizer  # noqa: E402

from kernelsmith.backends.scripted import ScriptedBackend  # noqa: E402

WINDOW = 48_000  # the system prompt alone is about 14,500 of these tokens


class Counted(ScriptedBackend):
    """A scripted backend that counts each request it is sent in a tokenizer's tokens."""

    def __init__(self, turns, tokenizer_folder: Path):
        from kernelsmith.backends.hf import PromptTokens

        super().__init__(turns)
        self.count, self.sizes = PromptTokens(tokenizer_folder), []

    def complete(self, system, messages, tools, on_text=None):
        self.sizes.append(self.count(system, messages, tools))
        return super().complete(system, messages, tools, on_text)


def long_session(tmp_path: Path, monkeypatch, words: int = 300, **settings) -> tuple[Counted, list[dict]]:
    """40 turns that each write a file of words the tokenizer never saw (2 KB by default), in a 48,000-token
    window."""
    from kernelsmith.agent import run as session
    from kernelsmith.config import Settings
    from kernelsmith.session.reader import read_events, session_paths

    folder = build_tokenizer(tmp_path / "tok", CHATML)
    text = " ".join(f"w{i:04d}z" for i in range(words))  # about 1 character a token here, 4 to the estimate
    turns = [{"text": f"variant {i}", "tool_calls": [
        {"name": "write_file", "arguments": {"path": f"kernels/k{i % 3}.cpp", "content": f"// v{i}\n{text}"}}]}
        for i in range(40)]
    backend = Counted(turns, folder)
    monkeypatch.setattr(session, "create_backend", lambda *_: backend)
    workdir = make_workdir(tmp_path)
    session.start(Settings(backend="scripted", script="-", max_turns=40, context_window=WINDOW,
                           **{k: str(folder) if v == "tokenizer" else v for k, v in settings.items()}),
                  workdir, [], None)
    events = read_events(next(session_paths(workdir)))
    return backend, [e for e in events if e["kind"] == "compaction"]


def test_the_context_fits_the_window_in_the_window_tokenizers_tokens(tmp_path, monkeypatch):
    backend, compactions = long_session(tmp_path, monkeypatch, window_tokenizer="tokenizer")
    assert len(backend.sizes) == 40 and 2 <= len(compactions) <= 10  # down to half the window, not every turn
    assert all(c["after_tokens"] <= WINDOW // 2 for c in compactions), [c["after_tokens"] for c in compactions]
    assert max(backend.sizes) < WINDOW, max(backend.sizes)


def test_without_it_the_estimate_lets_the_context_overflow(tmp_path, monkeypatch):
    """The control: the same session counted at 4 characters a token sends requests past the window."""
    backend, _ = long_session(tmp_path, monkeypatch)
    assert max(backend.sizes) > WINDOW, max(backend.sizes)


def test_a_last_turn_too_big_to_keep_has_its_file_text_elided(tmp_path, monkeypatch):
    """Each file here is about 14,000 tokens: the prefix (14,500) and the last turn alone are over half the
    window, so compaction elides even the last turn's file text (it is on disk: read_file gets it back)."""
    backend, compactions = long_session(tmp_path, monkeypatch, words=2000, window_tokenizer="tokenizer")
    assert len(backend.sizes) == 40 and compactions
    assert all(c["after_tokens"] <= WINDOW // 2 for c in compactions), [c["after_tokens"] for c in compactions]
    assert max(backend.sizes) < WINDOW, max(backend.sizes)
    last = compactions[-1]["messages"]
    assert "chars elided" in str(last[-2]["tool_calls"][0]["arguments"]["content"])


def test_each_request_leaves_room_for_the_longest_reply(tmp_path, monkeypatch):
    """A model may write max_tokens after its request, inside the same window: a request past the window less
    that compacts first (here at 48,000 - 16,000 tokens instead of three quarters of the window, 36,000: the
    requests grow by about 2,200 tokens a turn, so the plain session's longest is over 33,700)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    room = 16_000
    roomy, _ = long_session(tmp_path / "a", monkeypatch, window_tokenizer="tokenizer", max_tokens=room)
    plain, _ = long_session(tmp_path / "b", monkeypatch, window_tokenizer="tokenizer")  # 8,192: no effect here
    assert max(roomy.sizes) <= WINDOW - room < max(plain.sizes), (max(roomy.sizes), max(plain.sizes))
