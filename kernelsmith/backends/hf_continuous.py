"""The hf policy on transformers' continuous batching: a request joins the running batch at its next step and
leaves it at its end-of-sequence token, over a paged KV cache.

hf_batching's batched `generate` starts a batch only when the last one has finished, and each of its rows
runs to the batch's longest reply: on an H100, PPO's rollouts of SmolLM2-135M wrote 77-106 tokens a second
(2026-12-06). Here the sessions' turns are one stream of requests, which is how vLLM serves them, in this
process and on the same weights.

One manager per sampling setting (greedy and sampled turns do not share a batch); a thread of ours reads the
manager's finished results and hands each to the session that asked (transformers' own wait by request id
puts other sessions' results back and returns at once, so N waiting sessions would spin)."""

from __future__ import annotations

import dataclasses
import math
import threading
from concurrent.futures import Future

PER_REQUEST = ("max_new_tokens", "eos_token_id")  # what a request carries itself; the rest picks its manager
BLOCK_TOKENS = 256  # the paged cache's block: transformers' default
POLL_S = 0.5


class ContinuousPolicy:
    """A checkpoint's tokenizer and model, and a continuous-batching manager per sampling setting."""

    def __init__(self, tokenizer, model, seed: int, kv_tokens: int):
        import torch

        self.tokenizer, self.model, self.kv_tokens = tokenizer, model, kv_tokens
        torch.manual_seed(seed)
        self.batches: list[int] = []  # hf_batching's report of generate calls: a continuous batch has none
        self._streams: dict[tuple, _Stream] = {}
        self._lock = threading.Lock()
        self._retired = False

    def generate(self, ids: list[int], sampling: dict) -> list[int]:
        """The new token ids for one prompt, up to and including its end-of-sequence token."""
        from kernelsmith.backends.hf_batching import _until_end

        asked = {k: sampling[k] for k in PER_REQUEST if sampling.get(k) is not None}
        if len(ids) + asked.get("max_new_tokens", 0) > self.kv_tokens:
            # transformers fails every running request when one cannot be scheduled even alone: refuse it here
            raise RuntimeError(f"generation failed: a prompt of {len(ids)} tokens and {asked.get('max_new_tokens', 0)} "
                               f"new ones do not fit the policy's KV cache of {self.kv_tokens} tokens "
                               "(KERNELSMITH_HF_KV_TOKENS)")
        new = self._stream(sampling).ask(list(ids), asked)
        return _until_end(new, sampling.get("eos_token_id"))

    def retire(self) -> None:
        """A newer copy of the checkpoint replaced this one: its managers stop once their requests are done."""
        with self._lock:
            self._retired = True
            streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.close()

    def _stream(self, sampling: dict) -> "_Stream":
        key = tuple(sorted((k, v) for k, v in sampling.items() if k not in PER_REQUEST))
        with self._lock:
            stream = self._streams.get(key)
            if stream is None or not stream.alive():
                stream = _Stream(self.model, dict(key), self.kv_tokens, once=self._retired)
                if not self._retired:
                    self._streams[key] = stream
            return stream


class _Stream:
    """One running manager and the thread that routes its finished results to the requests' futures."""

    def __init__(self, model, sampling: dict, kv_tokens: int, once: bool = False):
        from transformers import GenerationConfig

        config = GenerationConfig(**sampling)
        self.manager = model.init_continuous_batching(generation_config=config,
                                                      continuous_batching_config=batching_config(kv_tokens))
        self.manager.start()
        self._waiting: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._closing, self._once = False, once  # once: a retired policy's, for the request it was made for
        threading.Thread(target=self._route, daemon=True, name="hf-continuous").start()

    def alive(self) -> bool:
        return self.manager.is_running() and not self._closing

    def ask(self, ids: list[int], asked: dict) -> list[int]:
        reply: Future = Future()
        with self._lock:
            request_id = self.manager.add_request(ids, **asked)
            if request_id is None:
                raise RuntimeError("the policy's continuous batching refused the request (it is stopping)")
            self._waiting[request_id] = reply
            self._closing = self._closing or self._once  # registered first: the router stops only after it
        return reply.result()

    def close(self) -> None:
        self._closing = True

    def _route(self) -> None:
        while True:
            result = self.manager.get_result(timeout=POLL_S)
            if result is not None:
                self._deliver(result)
            elif not self.manager.is_running():
                return self._fail_all(_fatal(self.manager))
            elif self._closing and not self._pending():
                return self.manager.stop(block=False)

    def _deliver(self, result) -> None:
        if not getattr(result, "is_finished", lambda: True)():
            return  # a streamed partial result (not asked for): the finished one follows
        with self._lock:
            reply = self._waiting.pop(result.request_id, None)
        if reply is None:
            return
        if getattr(result, "error", None):
            reply.set_exception(RuntimeError(f"generation failed: {result.error}"))
        else:
            reply.set_result(list(result.generated_tokens))

    def _pending(self) -> bool:
        with self._lock:
            return bool(self._waiting)

    def _fail_all(self, err: Exception) -> None:
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for reply in waiting.values():
            reply.set_exception(err)


def _fatal(manager) -> Exception:
    status = getattr(manager, "background_thread_status", None)
    cause = getattr(status, "fatal_error", None)
    return RuntimeError(f"the policy's generation loop stopped: {cause or 'no reason given'}")


def batching_config(kv_tokens: int):
    """The cache holds `kv_tokens` tokens of all running requests together (one request longer than that fails
    alone); left to itself, transformers sizes it to 60% of the device's free memory, which on the GPU is the
    sandboxes' and the trainer's, and on the CPU took 37 s to set up for a tiny model."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    wanted = {"num_blocks": math.ceil(kv_tokens / BLOCK_TOKENS), "max_batch_tokens": min(kv_tokens, 2048),
              "auto_switch_to_flash": False}  # flash attention would be fetched from the hub: nothing is
    known = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    return ContinuousBatchingConfig(**{k: v for k, v in wanted.items() if k in known})
