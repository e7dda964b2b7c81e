"""`kernelsmith train import`: a starting checkpoint for the trainer from a local model, a folder or a GGUF file.

The trainer and the hf backend read plain transformers folders (config.json, weights, a tokenizer with a
chat template that renders tools). Small open chat models often ship otherwise: SmolLM2-135M-Instruct comes
as a quantised GGUF file, and its chat template ignores `tools=`, so a policy trained with it would never
see the tools' schemas (`train trajectories` refuses such a template). This writes the model as a folder
(a GGUF is dequantised to float32 by transformers) and, where the model's own template cannot show tools,
installs ChatML with tools (templates/chat/chatml_tools.jinja). Nothing is fetched from a model hub."""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path

from kernelsmith.errors import BadInput

TEMPLATES = ("auto", "chatml-tools", "keep")
PROVENANCE = "kernelsmith-import.json"


def chatml_tools() -> str:
    return resources.files("kernelsmith.templates").joinpath("chat/chatml_tools.jinja").read_text()


def _load_kwargs(source: Path) -> tuple[str, dict]:
    """from_pretrained's folder and arguments for a checkpoint folder or a .gguf file."""
    if source.is_file() and source.suffix == ".gguf":
        return str(source.parent), {"gguf_file": source.name}
    if (source / "config.json").is_file():
        return str(source), {}
    raise BadInput(f"no model at {source}", "give a checkpoint folder (with config.json) or a .gguf file")


def _transformers():
    try:
        import transformers
    except ImportError:
        raise BadInput("the trainer needs transformers", "pip install 'kernelsmith[train]'") from None
    transformers.utils.logging.disable_progress_bar()  # the command's output is its own summary
    return transformers


def _loaded(what: str, source: Path, load):
    try:
        return load()
    except (OSError, ValueError, ImportError, KeyError) as err:  # gguf missing, an architecture it can't read
        raise BadInput(f"transformers could not load the {what} of {source}: {str(err).strip().splitlines()[0]}",
                       "for a .gguf file: pip install gguf") from None


def load_tokenizer(source: Path):
    folder, extra = _load_kwargs(source)
    auto = _transformers().AutoTokenizer
    return _loaded("tokenizer", source, lambda: auto.from_pretrained(folder, local_files_only=True, **extra))


def load_model(source: Path):
    """The model in float32 on the CPU (a GGUF file's weights dequantised)."""
    import torch

    folder, extra = _load_kwargs(source)
    auto = _transformers().AutoModelForCausalLM
    model = _loaded("model", source, lambda: auto.from_pretrained(folder, local_files_only=True,
                                                                    dtype=torch.float32, **extra))
    return _plain(model) if extra else model


def _plain(model):
    """A GGUF model as an ordinary float32 one: transformers has dequantised the weights but still marks the
    model quantised, and refuses to save it; the same weights in a model built from the config save as any."""
    import torch
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    return plain


def template_fault(tokenizer) -> str | None:
    """Why the tokenizer's chat template cannot serve the agent's tools (None: it can)."""
    from kernelsmith.train import trajectories

    if not getattr(tokenizer, "chat_template", None):
        return "it has no chat template"
    try:
        trajectories.check_template(tokenizer, trajectories.agent_tools(), "the model")
    except BadInput as err:
        return err.message.removeprefix("the chat template of the model ")
    return None


def choose_template(tokenizer, mode: str) -> str:
    """Set the chat template `mode` asks for; what was done, for the report."""
    if mode not in TEMPLATES:
        raise BadInput(f"unknown --chat-template {mode!r}", f"one of {', '.join(TEMPLATES)}")
    fault = template_fault(tokenizer)
    if mode == "keep" and fault:
        raise BadInput(f"the model's chat template cannot serve the agent: {fault}",
                       "pass --chat-template chatml-tools (or auto) to install ChatML with tools")
    if mode == "keep" or (mode == "auto" and not fault):
        return "kept the model's chat template"
    tokenizer.chat_template = chatml_tools()
    return f"installed ChatML with tools ({fault})" if fault else "installed ChatML with tools"


def import_model(source: Path, out: Path, mode: str = "auto") -> dict:
    """Write `source` to `out` as a trainer-ready folder; a summary of what was written."""
    if out.exists() and any(out.iterdir()):
        raise BadInput(f"{out} is not empty", "give a new --out folder")
    tokenizer = load_tokenizer(source)
    done = choose_template(tokenizer, mode)  # before the weights load: a refusal costs no time
    _require_special_tokens(tokenizer)
    fault = template_fault(tokenizer)
    if fault:  # the installed template must pass the same check the exporter makes
        raise BadInput(f"the chat template still cannot serve the agent: {fault}")
    turn_end = _chatml_turn_end(tokenizer)
    model = load_model(source)
    if turn_end is not None:  # generation stops where a reply ends, and the config says so too
        model.config.eos_token_id = model.generation_config.eos_token_id = tokenizer.eos_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    summary = {"source": str(source), "sha256": _digest(source), "template": done,
               "parameters": sum(p.numel() for p in model.parameters()), "out": str(out)}
    summary.update({"end_of_turn": turn_end} if turn_end else {})
    (out / PROVENANCE).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _require_special_tokens(tokenizer) -> None:
    """ChatML's markers must be single tokens of the vocabulary, or the model sees them as ordinary text."""
    if "<|im_start|>" not in tokenizer.chat_template:
        return
    for marker in ("<|im_start|>", "<|im_end|>"):
        if len(tokenizer.encode(marker, add_special_tokens=False)) != 1:
            raise BadInput(f"the tokenizer has no single token for {marker}: ChatML would be plain text to it",
                           "use a ChatML model, or keep its own template with --chat-template keep")


def _chatml_turn_end(tokenizer) -> str | None:
    """Under ChatML a reply ends with <|im_end|>, so that must be the end-of-sequence token: generation stops
    there, and the exporter's loss mask ends there. A GGUF read by transformers 5.17 gave SmolLM2's tokenizer
    <|im_start|> (2026-12-06); it is set here, and what it was is said. None where nothing changed."""
    if "<|im_end|>" not in (tokenizer.chat_template or "") or tokenizer.eos_token == "<|im_end|>":
        return None
    was, tokenizer.eos_token = tokenizer.eos_token, "<|im_end|>"
    return f"<|im_end|> (was {was})"


def _digest(source: Path) -> str | None:
    """sha256 of a single-file source (a GGUF): which file a checkpoint came from."""
    if not source.is_file():
        return None
    h = hashlib.sha256()
    with open(source, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
