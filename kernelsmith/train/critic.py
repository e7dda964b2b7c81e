"""The token-level critic of `kernelsmith train value` and `train ppo`: a causal LM's transformer body with a
linear value head on every token's last hidden state. TRL no longer ships value heads, so this is ours.

Saved as a folder: the body (`save_pretrained`, loadable by transformers alone), `value_head.pt` and
`critic.json` (format, the base checkpoint it started from, the hidden size)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor, nn

FORMAT = 1
HEAD_FILE, META_FILE = "value_head.pt", "critic.json"


class Critic(nn.Module):
    def __init__(self, body: nn.Module, hidden_size: int):
        super().__init__()
        self.body = body
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)  # V = 0 everywhere at first: no random bias in the first targets
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Per token, the value of the state before it: [batch, seq] (position 0, which has no state
        before it, gets the value after it; it is never a policy token). verl's dp_critic shifts the same way."""
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        with torch.autocast(hidden.device.type, enabled=False):  # bfloat16 would round a value of 2 by 0.008
            after = self.head(hidden.float()).squeeze(-1)
        return torch.cat([after[:, :1], after[:, :-1]], dim=1)

    def save(self, folder: Path, base: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.body.save_pretrained(folder)
        torch.save(self.head.state_dict(), folder / HEAD_FILE)
        meta = {"format": FORMAT, "base": base, "hidden_size": self.head.in_features}
        (folder / META_FILE).write_text(json.dumps(meta, indent=1) + "\n")


def from_causal_lm(path: Path, dtype: torch.dtype = torch.float32) -> Critic:
    """A fresh critic on a local causal LM checkpoint (its LM head is left out), value head at zero."""
    from transformers import AutoModel

    body = AutoModel.from_pretrained(str(path), local_files_only=True, dtype=dtype)
    return Critic(body, body.config.hidden_size)


def load(folder: Path, dtype: torch.dtype = torch.float32) -> Critic:
    """A critic saved by Critic.save."""
    meta = json.loads((folder / META_FILE).read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{folder}: critic format {meta.get('format')!r}, this kernelsmith reads {FORMAT}")
    critic = from_causal_lm(folder, dtype)
    critic.head.load_state_dict(torch.load(folder / HEAD_FILE, weights_only=True))
    return critic


def for_training(model: nn.Module) -> nn.Module:
    """Train mode with gradient checkpointing where the model has it (a critic's body, a causal LM). An agentic
    trajectory runs to tens of thousands of tokens, and a backward that keeps every layer's activations does
    not fit: the built-in teacher's 11.5k-token sessions filled 23 GB for a 135M critic. Recomputing them costs
    about a third more time (verl enables it by default too). Dropout modules stay in eval mode, so the
    log-probabilities PPO compares are not noised; an attention dropout set in the model's config would not be
    (Llama's, SmolLM2's and Qwen's are 0)."""
    target = model.body if isinstance(model, Critic) else model
    if hasattr(target, "gradient_checkpointing_enable"):
        target.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.eval()
    return model


def is_critic(folder: Path) -> bool:
    return (folder / META_FILE).is_file() and (folder / HEAD_FILE).is_file()
