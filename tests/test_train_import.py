"""`kernelsmith train import`: a starting checkpoint for the trainer. A chat model whose template ignores
tools (SmolLM2's kind) gets ChatML with tools, which the trajectory exporter then accepts; a template that
already shows tools is kept; the weights are copied unchanged; bad input is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from kernelsmith.train import trajectories  # noqa: E402
from tinymodels import CHATML, CORPUS, NO_TOOLS, build_tokenizer, tiny_llama  # noqa: E402


def kernelsmith(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return subprocess.run([sys.executable, "-m", "kernelsmith.cli", "train", "import", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def model(folder: Path, template: str) -> Path:
    return tiny_llama(build_tokenizer(folder, template, CORPUS + ["<tool_response> </tool_response> # Tools"]))


def weights(folder: Path) -> torch.Tensor:
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    return torch.nn.utils.parameters_to_vector(loaded.parameters()).detach()


def test_a_model_whose_template_ignores_tools_gets_chatml_with_tools_and_its_weights(tmp_path):
    source = model(tmp_path / "smol", NO_TOOLS)
    with pytest.raises(Exception, match="ignores tools"):  # what the exporter says of the model as it ships
        trajectories.check_template(trajectories.load_tokenizer(source), trajectories.agent_tools(), "smol")
    proc = kernelsmith(str(source), "--out", str(tmp_path / "ready"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installed ChatML with tools" in proc.stdout
    tokenizer = trajectories.load_tokenizer(tmp_path / "ready")
    trajectories.check_template(tokenizer, trajectories.agent_tools(), "ready")  # the exporter accepts it now
    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
            {"role": "assistant", "content": "", "tool_calls": [trajectories.hf_tool_call({"id": "1", "name": "verify"})]},
            {"role": "tool", "content": "CORRECT"}]
    text = tokenizer.apply_chat_template(chat, tools=trajectories.agent_tools(), tokenize=False)
    assert '"name": "compile"' in text and '<tool_call>\n{"name": "verify", "arguments": {}}\n</tool_call>' in text
    assert "<tool_response>\nCORRECT\n</tool_response>" in text
    assert torch.equal(weights(source), weights(tmp_path / "ready"))
    provenance = json.loads((tmp_path / "ready" / "kernelsmith-import.json").read_text())
    assert provenance["source"] == str(source) and provenance["parameters"] == weights(source).numel()


def test_a_chatml_model_whose_eos_is_not_the_turn_end_gets_im_end(tmp_path):
    """A GGUF read by transformers 5.17 gave SmolLM2's tokenizer <|im_start|> as its end of sequence: replies would
    run past <|im_end|>. The imported checkpoint ends a sequence with <|im_end|>, in its tokenizer and its config."""
    source = model(tmp_path / "smol", NO_TOOLS)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(source))
    tokenizer.eos_token = "<|im_start|>"
    tokenizer.save_pretrained(str(source))
    proc = kernelsmith(str(source), "--out", str(tmp_path / "ready"))
    assert proc.returncode == 0 and "end of sequence: <|im_end|> (was <|im_start|>)" in proc.stdout, proc.stdout + proc.stderr
    ready = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "ready"))
    im_end = ready.convert_tokens_to_ids("<|im_end|>")
    assert ready.eos_token == "<|im_end|>" and ready.eos_token_id == im_end
    config = json.loads((tmp_path / "ready" / "config.json").read_text())
    generation = json.loads((tmp_path / "ready" / "generation_config.json").read_text())
    assert config["eos_token_id"] == generation["eos_token_id"] == im_end
    assert "end_of_turn" in json.loads((tmp_path / "ready" / "kernelsmith-import.json").read_text())


def test_a_template_that_shows_tools_is_kept(tmp_path):
    source = model(tmp_path / "qwenish", CHATML)
    proc = kernelsmith(str(source), "--out", str(tmp_path / "ready"))
    assert proc.returncode == 0 and "kept the model's chat template" in proc.stdout, proc.stdout + proc.stderr
    assert trajectories.load_tokenizer(tmp_path / "ready").chat_template == CHATML


@pytest.mark.parametrize("case", ["keep-a-template-without-tools", "not-empty-out", "no-model", "bad-mode"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case):
    source = model(tmp_path / "smol", NO_TOOLS) if case != "no-model" else tmp_path / "missing.gguf"
    out = tmp_path / "ready"
    extra = {"keep-a-template-without-tools": ["--chat-template", "keep"], "bad-mode": ["--chat-template", "qwen"]}
    if case == "not-empty-out":
        out.mkdir()
        (out / "mine.txt").write_text("keep me")
    proc = kernelsmith(str(source), "--out", str(out), *extra.get(case, []))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if case == "not-empty-out":
        assert (out / "mine.txt").read_text() == "keep me"
    else:
        assert not out.exists()
