"""A local transformers checkpoint as the policy (`--backend hf --model CKPT`): the student `kernelsmith train`
makes, run in this process on the GPU or the CPU. For serving at scale, the openai backend against a vLLM
server runs the same checkpoint.

The chat is rendered exactly as `kernelsmith train trajectories` renders what a model is trained on (the
checkpoint's own chat template, the tools as `tools=`), so a trained model sees at run time what it saw in
training. Tool calls are read back from the generated text in the form those templates write them:
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. A call that does not parse stays in the text,
and the session nudges the model as it does any reply without a call."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kernelsmith.backends.base import BackendBase, Reply, ToolCall, ToolSpec, Usage
from kernelsmith.errors import BadInput

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
DEFAULT_MAX_NEW_TOKENS = 2048


def parse_tool_calls(text: str, turn: int = 0) -> tuple[str, list[ToolCall]]:
    """The text without its well-formed tool-call blocks, and those calls (a malformed block stays in the text)."""
    calls: list[ToolCall] = []

    def take(match: re.Match) -> str:
        call = _call(match.group(1), f"h{turn}_{len(calls)}")
        if call is None:
            return match.group(0)
        calls.append(call)
        return ""

    return TOOL_CALL.sub(take, text).strip(), calls


def _call(body: str, call_id: str) -> ToolCall | None:
    try:
        value = json.loads(body)
        arguments = value.get("arguments", {}) if isinstance(value, dict) else None
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not isinstance(arguments, dict):
        return None
    return ToolCall(call_id, value["name"], arguments)


def prompt_text(tokenizer, system: str, messages: list[dict], tools: list[ToolSpec]) -> str:
    """A request rendered by `tokenizer`'s chat template as `train trajectories` renders it, ready for a reply."""
    from kernelsmith.train import trajectories

    chat = trajectories.chat_of(system, messages, [None] * len(messages))
    return tokenizer.apply_chat_template(chat.messages, tools=trajectories.hf_tools(tools),
                                         add_generation_prompt=True, tokenize=False)


class PromptTokens:
    """A request's length in a checkpoint's own tokens: the context a session keeps under that model's window,
    counted exactly rather than at 4 characters a token (SmolLM2 spends about 2.8 on kernel code)."""

    def __init__(self, folder: str | Path):
        from kernelsmith.train.trajectories import load_tokenizer

        self.tokenizer = load_tokenizer(Path(folder))

    def __call__(self, system: str, messages: list[dict], tools: list[ToolSpec]) -> int:
        return self.text(prompt_text(self.tokenizer, system, messages, tools))

    def text(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


class HFBackend(BackendBase):
    name = "hf"

    def __init__(self, model: str | None, max_tokens: int | None = None, device: str | None = None,
                 temperature: float = 0.7, seed: int = 0):
        if not model or not (Path(model) / "config.json").is_file():
            raise BadInput(f"--backend hf needs --model, a local checkpoint folder (got {model!r})",
                           "the folder `kernelsmith train rft` or `train ppo` wrote, or any local causal LM")
        self.model, self.path = str(model), Path(model)
        self.max_new_tokens, self.temperature, self.seed = max_tokens or DEFAULT_MAX_NEW_TOKENS, temperature, seed
        self.device, self.turn = device, 0
        from kernelsmith.backends.hf_batching import check_settings

        check_settings()
        self._tokenizer = self._policy = None

    def _load(self):
        from kernelsmith.backends.hf_batching import shared_policy

        if self._policy is None:
            self._policy = shared_policy(self.path, self.device, self.seed)
            self._tokenizer = self._policy.tokenizer
        return self._tokenizer, self._policy

    def prompt(self, system: str, messages: list[dict], tools: list[ToolSpec]) -> str:
        """The chat so far as the model is trained on it, ending in the template's generation prompt."""
        return prompt_text(self._load()[0], system, messages, tools)

    def complete(self, system: str, messages: list[dict], tools: list[ToolSpec], on_text=None) -> Reply:
        tokenizer, policy = self._load()
        ids = tokenizer(self.prompt(system, messages, tools), add_special_tokens=False)["input_ids"]
        new = policy.generate(ids, self._sampling(tokenizer))
        self.turn += 1
        text, calls = parse_tool_calls(tokenizer.decode(new, skip_special_tokens=True), self.turn)
        if on_text and text:
            on_text(text)
        stop = "stop" if tokenizer.eos_token_id is not None and tokenizer.eos_token_id in new else "length"
        return Reply(text, calls, Usage(input_tokens=len(ids), output_tokens=len(new)), stop_reason=stop,
                     model=self.model)

    def _sampling(self, tokenizer) -> dict[str, Any]:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        sample = {"do_sample": True, "temperature": self.temperature} if self.temperature > 0 else {"do_sample": False}
        return {"max_new_tokens": self.max_new_tokens, "pad_token_id": pad, "eos_token_id": tokenizer.eos_token_id,
                **sample}
