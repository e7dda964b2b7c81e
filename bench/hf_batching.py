"""Tokens a second that N sessions' policies write at once: each thread with its own copy of the model calling
`generate` (how the hf backend ran before), against one shared policy that batches the turns that come together
(kernelsmith/backends/hf_batching.py), and against transformers' continuous batching (hf_continuous.py, the
GPU's default). Greedy, the same prompts in each, each thread K turns of the same length: the batched engine's
best case (its batch runs to its longest row; here no row is shorter).

    python bench/hf_batching.py CHECKPOINT --sessions 4 --turns 3 --tokens 64 [--device cuda]

CHECKPOINT: any local causal LM folder (the tests' tiny Llama: python bench/hf_batching.py --tiny DIR builds one)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path


def prompts(tokenizer, sessions: int) -> list[list[int]]:
    chats = [[{"role": "user", "content": "Write a fused CUDA kernel for this task. " * (2 + 3 * i)}]
             for i in range(sessions)]
    return [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
            for c in chats]


def sampling(tokenizer, tokens: int) -> dict:
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    # min_new_tokens: every turn writes the same number of tokens, whatever the weights make of the prompt
    return {"max_new_tokens": tokens, "min_new_tokens": tokens, "do_sample": False, "pad_token_id": pad,
            "eos_token_id": tokenizer.eos_token_id}


def load_copies(path: Path, device: str, count: int) -> list:
    from transformers import AutoModelForCausalLM

    return [AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True).to(device).eval()
            for _ in range(count)]


def separate(models: list, device: str, asks: list[list[int]], turns: int, how: dict) -> int:
    import torch

    written = [0] * len(asks)

    def session(i: int) -> None:
        for _ in range(turns):
            ids = torch.tensor([asks[i]], device=device)
            with torch.no_grad():
                out = models[i].generate(input_ids=ids, attention_mask=torch.ones_like(ids), **how)
            written[i] += out.shape[1] - ids.shape[1]

    return _threads(session, len(asks), written)


def shared(policy, device: str, asks: list[list[int]], turns: int, how: dict) -> int:
    written = [0] * len(asks)

    def session(i: int) -> None:
        for _ in range(turns):
            written[i] += len(policy.generate(asks[i], how))

    return _threads(session, len(asks), written)


def _threads(session, count: int, written: list[int]) -> int:
    threads = [threading.Thread(target=session, args=(i,)) for i in range(count)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return sum(written)


def _with_engine(engine: str, shared_policy, path: Path, device: str):
    """The shared policy on one engine (hf_batching.engine reads KERNELSMITH_HF_ENGINE when it loads)."""
    os.environ["KERNELSMITH_HF_ENGINE"] = engine
    return shared_policy(path, device, 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path, nargs="?")
    parser.add_argument("--tiny", type=Path, help="build the tests' tiny random Llama here and use it")
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3, help="each way this many times, alternating")
    parser.add_argument("--threads", type=int, help="torch's intra-op threads (default: torch's)")
    parser.add_argument("--ways", default="separate,batched,continuous",
                        help="which of: separate (a model per session), batched, continuous")
    args = parser.parse_args()
    path = args.checkpoint or tiny(args.tiny)
    import torch
    from transformers import AutoTokenizer

    from kernelsmith.backends.hf_batching import shared_policy

    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    asks, how = prompts(tokenizer, args.sessions), sampling(tokenizer, args.tokens)
    ways = {"separate": ("a model per session", separate, lambda: load_copies(path, args.device, args.sessions)),
            "batched": ("one shared policy, batched", shared,
                        lambda: _with_engine("batched", shared_policy, path, args.device)),
            "continuous": ("continuous batching", shared,
                           lambda: _with_engine("continuous", shared_policy, path, args.device))}
    ways = {name: (way, load()) for key, (name, way, load) in ways.items() if key in args.ways.split(",")}
    print(f"{args.sessions} sessions x {args.turns} turns x {args.tokens} tokens, greedy, {args.device}, "
          f"{torch.get_num_threads()} torch threads; models loaded before timing; wall and process CPU seconds")
    print("| way | round | tokens | wall s | CPU s | tokens per wall second |\n| --- | --- | --- | --- | --- | --- |")
    for way, model in ways.values():
        way(model, args.device, asks[:1], 1, how)  # warm: the model's first call, the allocator
    for round_ in range(args.rounds):
        for name, (way, model) in ways.items():
            start, cpu = time.perf_counter(), time.process_time()
            written = way(model, args.device, asks, args.turns, how)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            print(f"| {name} | {round_ + 1} | {written} | {wall:.2f} | {cpu:.2f} | {written / wall:.1f} |")
    return 0


def tiny(folder: Path | None) -> Path:
    if folder is None:
        sys.exit("give a CHECKPOINT folder, or --tiny DIR to build the tests' tiny Llama there")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tinymodels import CHATML, CORPUS, build_tokenizer, tiny_llama

    if (folder / "config.json").is_file():
        return folder
    return tiny_llama(build_tokenizer(folder, CHATML, CORPUS, vocab_size=3000), vocab_size=3000)


if __name__ == "__main__":
    raise SystemExit(main())
