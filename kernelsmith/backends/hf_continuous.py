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
import time
from concurrent.futures import Future

PER_REQUEST = ("max_new_tokens", "eos_token_id")  # what a request carries itself; the rest picks its manager
BLOCK_TOKENS = 256  # the paged cache's block: transformers' default
POLL_S = 0.5
IDLE_S = 30.0  # a manager with nothing to do this long stops and frees its cache (PPO's update wants the GPU)
ASKS = 3  # a request that meets a stream just as it stops asks a new one, this many times at most


class _Stopped(Exception):
    """The stream stopped before the request could join it: ask a new one."""


class ContinuousPolicy:
    """A checkpoint's tokenizer and model, and a continuous-batching manager per sampling setting."""

    def __init__(self, tokenizer, model, seed: int, kv_tokens: int):
        import torch

        self.tokenizer, self.model, self.kv_tokens = tokenizer, model, kv_tokens
        _paged_once(model)
        torch.manual_seed(seed)
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
        for _ in range(ASKS):
            try:
                return _until_end(self._stream(sampling).ask(list(ids), asked), sampling.get("eos_token_id"))
            except _Stopped:
                continue
        raise RuntimeError("generation failed: the policy's continuous batching kept stopping")

    def retire(self) -> None:
        """A newer copy of the checkpoint replaced this one: its managers stop once their requests are done,
        and a session still holding it is served by a manager that does the same."""
        with self._lock:
            self._retired = True
            streams = list(self._streams.values())
        for stream in streams:
            stream.close()

    def _stream(self, sampling: dict) -> "_Stream":
        key = tuple(sorted((k, v) for k, v in sampling.items() if k not in PER_REQUEST))
        with self._lock:
            stream = self._streams.get(key)
            if stream is None or stream.stopped:
                stream = self._streams[key] = _Stream(self.model, dict(key), self.kv_tokens)
                if self._retired:
                    stream.close()
            return stream


def _paged_once(model) -> None:
    """Paged attention for the model's whole life. A manager switches a model to it when it starts and back
    when it stops: under transformers 5.17 one manager's stop so broke the others' running requests (shapes
    of the dense attention's mask), and a model already paged is neither switched nor switched back. It also
    keeps 5.17, which has no auto_switch_to_flash, from switching to a flash attention it finds installed."""
    impl = getattr(model.config, "_attn_implementation", None) or "sdpa"
    if not impl.startswith("paged|") and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(f"paged|{impl}")


class _Stream:
    """One running manager and the thread that routes its finished results to the requests' futures."""

    def __init__(self, model, sampling: dict, kv_tokens: int):
        from transformers import GenerationConfig

        config = GenerationConfig(**sampling)
        self.manager = model.init_continuous_batching(generation_config=config,
                                                      continuous_batching_config=batching_config(kv_tokens))
        _start_as_daemon(self.manager)
        self._waiting: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._closing = self.stopped = False
        threading.Thread(target=self._route, daemon=True, name="hf-continuous").start()

    def ask(self, ids: list[int], asked: dict) -> list[int]:
        reply: Future = Future()
        with self._lock:  # the router decides to stop under this lock too: a request joins, or is told to go
            if self.stopped:
                raise _Stopped
            request_id = self.manager.add_request(ids, **asked)
            if request_id is None:
                raise RuntimeError("generation failed: the policy's continuous batching refused the request")
            self._waiting[request_id] = reply
        return reply.result()

    def close(self) -> None:
        with self._lock:
            self._closing = True

    def _route(self) -> None:
        try:
            self._serve()
        except BaseException as err:  # noqa: BLE001  no session may wait for ever on a router that died
            self._stop(RuntimeError(f"generation failed: the policy's result router broke: {err!r}"))

    def _serve(self) -> None:
        idle_since = time.monotonic()
        while True:
            result = self.manager.get_result(timeout=POLL_S)
            if result is not None:
                self._deliver(result)
                idle_since = time.monotonic()
            elif not self.manager.is_running():
                return self._stop(_fatal(self.manager))
            elif self._stop_if_idle(time.monotonic() - idle_since):
                return

    def _stop_if_idle(self, idle_s: float) -> bool:
        """Stop when closing or long idle and no request waits (decided under the lock ask() takes)."""
        with self._lock:
            if self._waiting or not (self._closing or idle_s >= IDLE_S):
                return False
            self.stopped = True
        self.manager.stop(block=False)
        return True

    def _deliver(self, result) -> None:
        if not result.is_finished():
            return  # a streamed partial result (not asked for): the finished one follows
        with self._lock:
            reply = self._waiting.pop(result.request_id, None)
        if reply is None:
            return
        if getattr(result, "error", None):
            reply.set_exception(RuntimeError(f"generation failed: {result.error}"))
        else:
            reply.set_result(list(result.generated_tokens))

    def _stop(self, err: Exception) -> None:
        """Fail every waiting request with err; no request joins after."""
        with self._lock:
            self.stopped = True
            waiting, self._waiting = self._waiting, {}
        for reply in waiting.values():
            reply.set_exception(err)
        if self.manager.is_running():
            self.manager.stop(block=False)


def _start_as_daemon(manager) -> None:
    """Start the manager from a daemon thread: transformers' generation thread inherits that, so a process
    that used the policy can exit (its own thread is not a daemon, and nothing else stops a live policy's)."""
    starter = threading.Thread(target=manager.start, daemon=True, name="hf-continuous-start")
    starter.start()
    starter.join()


def _fatal(manager) -> Exception:
    status = getattr(manager, "background_thread_status", None)
    cause = getattr(status, "fatal_error", None)
    return RuntimeError(f"generation failed: the policy's generation loop stopped: {cause or 'no reason given'}")


def batching_config(kv_tokens: int):
    """The cache holds `kv_tokens` tokens of all running requests together (one request longer than that fails
    alone); left to itself, transformers sizes it to 60% of the device's free memory, which on the GPU is the
    sandboxes' and the trainer's, and on the CPU took 37 s to set up for a tiny model."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    wanted = {"num_blocks": math.ceil(kv_tokens / BLOCK_TOKENS), "max_batch_tokens": min(kv_tokens, 2048),
              "auto_switch_to_flash": False}  # flash attention would be fetched from the hub: nothing is
    known = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    return ContinuousBatchingConfig(**{k: v for k, v in wanted.items() if k in known})
