"""Tokenizers and models for the trainer's tests, built on the spot (no model hub): a byte-level BPE trained on a
small corpus with a chat template (ChatML with tools, and templates that misbehave on purpose), and a tiny
Llama whose vocabulary covers it."""

from __future__ import annotations

from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# ChatML with tools in the system message and tool calls as <tool_call>JSON</tool_call>.
CHATML = (
    "{%- if tools %}{{ '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{ '# Tools\\n' }}{%- for tool in tools %}{{ tool | tojson }}{{ '\\n' }}{%- endfor %}{{ '<|im_end|>\\n' }}"
    "{%- elif messages and messages[0].role == 'system' %}"
    "{{ '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}{{ '<|im_start|>assistant\\n' + message.content }}"
    "{%- for call in message.tool_calls or [] %}{{ '<tool_call>' }}"
    "{{ {'name': call.function.name, 'arguments': call.function.arguments} | tojson }}{{ '</tool_call>' }}"
    "{%- endfor %}{{ '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}{{ '<|im_start|>tool\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role != 'system' %}"
    "{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}")

# Plain text whose generation prompt ends in a space: "Assistant: " + "Let" tokenises as " Let" in the
# whole text but as " " and "Let" message by message, the classic cause of misaligned masks.
SPACE_PROMPT = (
    "{%- if tools %}{{ 'Tools:' }}{%- for tool in tools %}{{ ' ' + tool.function.name }}{%- endfor %}"
    "{{ '\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}{{ 'Assistant: ' + message.content }}"
    "{%- for call in message.tool_calls or [] %}{{ '<tool_call>' + (call.function | tojson) + '</tool_call>' }}"
    "{%- endfor %}{{ '<|im_end|>\\n' }}"
    "{%- else %}{{ message.role + ': ' + message.content + '\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ 'Assistant: ' }}{%- endif %}")

# SmolLM2's kind of template: no tools, and an assistant message is its content alone.
NO_TOOLS = ("{%- for message in messages %}{{ '<|im_start|>' + message.role + '\\n' + message.content + "
            "'<|im_end|>\\n' }}{%- endfor %}"
            "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}")

CORPUS = ["system user assistant tool verify profile compile write_file read_file finish kernel triple",
          '<tool_call>{"name": "verify", "arguments": {}}</tool_call>', "Assistant: Let me read the task.",
          "Assistant: <tool_call>", "Assistant: Done."] * 20


def build_tokenizer(folder: Path, template: str, corpus: list[str] = CORPUS, vocab_size: int = 400) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    model = Tokenizer(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    model.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = template
    tokenizer.save_pretrained(str(folder))
    return folder



def tiny_llama(folder: Path, vocab_size: int = 400, seed: int = 0) -> Path:
    """A 2-layer Llama with random weights saved into folder (beside a tokenizer, it is a checkpoint)."""
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=32768, pad_token_id=0)
    torch.manual_seed(seed)
    transformers.LlamaForCausalLM(config).save_pretrained(str(folder))
    return folder
