"""One local policy per checkpoint and device, shared by every hf session of the process, which generates the
requests of sessions running at once as one left-padded batch.

`bench --backend hf --workers N` and PPO's rollouts run N sessions on N threads. Each loaded a copy of the policy
and called `generate` itself; generating a small model is bound by the host (a 135M model wrote 38 tokens a
second on an H100, one launch after another), and N threads calling it share one interpreter lock, so N
sessions wrote about as many tokens a second as one. Here one thread generates for all of them: a request
waits at most GATHER_S for others to join its batch, and requests with the same sampling settings go in one
`generate` call (left padding; the attention mask gives each row its own positions)."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith.errors import BadInput

GATHER_S = 0.02  # how long the first request of a batch waits for others (a turn's generation takes seconds)
MAX_BATCH = 16


@dataclass(eq=False)  # a request is itself, whatever its ids
class _Request:
    ids: list[int]
    sampling: tuple  # sorted (name, value) pairs of generate's keyword arguments
    reply: Future = field(default_factory=Future)


class SharedPolicy:
    """A checkpoint's tokenizer and model, loaded once, and the thread that generates for every session."""

    def __init__(self, tokenizer, model, seed: int):
        import torch

        self.tokenizer, self.model = tokenizer, model
        torch.manual_seed(seed)
        self.batches: list[int] = []  # the size of each generate call, for tests and reports
        self._queue: list[_Request] = []
        self._wake = threading.Condition()
        self._serving, self._retired = False, False

    def generate(self, ids: list[int], sampling: dict) -> list[int]:
        """The new token ids for one prompt, up to and including its end-of-sequence token."""
        request = _Request(list(ids), tuple(sorted(sampling.items())))
        with self._wake:
            self._queue.append(request)
            if not self._serving:
                self._serving = True
                threading.Thread(target=self._serve, daemon=True, name="hf-policy").start()
            self._wake.notify()
        return request.reply.result()

    def retire(self) -> None:
        """A newer copy of the checkpoint replaced this one: its thread ends once no request waits, and the
        model is freed with the last session that holds it (a thread serving forever kept every PPO step's)."""
        with self._wake:
            self._retired = True
            self._wake.notify()

    def _serve(self) -> None:
        while True:
            batch = self._next_batch()
            if not batch:
                return
            try:
                outputs = self._generate(batch)
            except BaseException as err:  # noqa: BLE001  each session gets the error as its own backend's
                for request in batch:
                    request.reply.set_exception(err)
                continue
            for request, new in zip(batch, outputs):
                request.reply.set_result(new)

    def _next_batch(self) -> list[_Request]:
        """The oldest request and those with its sampling settings that arrive within GATHER_S of it."""
        with self._wake:
            self._wake.wait_for(lambda: self._queue or self._retired)
            if not self._queue:
                self._serving = False
                return []
            deadline = time.monotonic() + GATHER_S  # each arrival notifies: wait out the window, not the first
            while len(self._queue) < MAX_BATCH and (left := deadline - time.monotonic()) > 0:
                self._wake.wait(left)
            first = self._queue[0].sampling
            batch = [r for r in self._queue if r.sampling == first][:MAX_BATCH]
            self._queue = [r for r in self._queue if r not in batch]
        return batch

    def _generate(self, batch: list[_Request]) -> list[list[int]]:
        import torch

        sampling = dict(batch[0].sampling)
        width = max(len(r.ids) for r in batch)
        pad = sampling["pad_token_id"]
        ids = torch.tensor([[pad] * (width - len(r.ids)) + r.ids for r in batch], device=self.model.device)
        mask = torch.tensor([[0] * (width - len(r.ids)) + [1] * len(r.ids) for r in batch], device=self.model.device)
        self.batches.append(len(batch))
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=mask, **sampling)
        return [_until_end(row[width:].tolist(), sampling.get("eos_token_id")) for row in out]


def _until_end(new: list[int], eos) -> list[int]:
    """A row's tokens up to and including its first end-of-sequence token: after it a batch pads the row."""
    ends = eos if isinstance(eos, (list, tuple)) else [eos]
    for i, token in enumerate(new):
        if token in ends:
            return new[:i + 1]
    return new


_POLICIES: dict[tuple[str, str, str], tuple[tuple, object]] = {}  # a SharedPolicy or a ContinuousPolicy
_LOADING = threading.Lock()  # transformers' lazy imports race when sessions load at once (ImportError)


def shared_policy(path: Path, device: str | None, seed: int) -> SharedPolicy:
    """The process's policy for this checkpoint and device, loaded by the first session that asks, and again
    once the folder's files change (PPO writes each step's policy over the last one's)."""
    with _LOADING:
        import torch

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        key, files = (str(Path(path).resolve()), device, engine_setting()), _fingerprint(Path(path))
        if key not in _POLICIES or _POLICIES[key][0] != files:
            if key in _POLICIES:
                _POLICIES.pop(key)[1].retire()
            _POLICIES[key] = (files, _load(Path(path), device, seed))
        return _POLICIES[key][1]


ENGINES = ("auto", "continuous", "batched")


def check_settings() -> None:
    """Refuse bad KERNELSMITH_HF_* values when the backend is made, before any session starts."""
    engine_setting(), kv_tokens_setting()


def engine_setting() -> str:
    chosen = os.environ.get("KERNELSMITH_HF_ENGINE", "auto")
    if chosen not in ENGINES:
        raise BadInput(f"KERNELSMITH_HF_ENGINE={chosen!r} is not one of {', '.join(ENGINES)}")
    return chosen


def kv_tokens_setting() -> int | None:
    value = os.environ.get("KERNELSMITH_HF_KV_TOKENS")
    if value is not None and (not value.isdigit() or int(value) < 1):
        raise BadInput(f"KERNELSMITH_HF_KV_TOKENS={value!r} is not a positive number of tokens")
    return int(value) if value else None


def engine(device: str, model) -> str:
    """KERNELSMITH_HF_ENGINE, or by default continuous batching on the GPU where transformers has it, and the
    batched `generate` on the CPU (where a step costs the model's arithmetic, not its launches)."""
    chosen = engine_setting()
    if chosen == "auto":
        return "continuous" if device.startswith("cuda") and hasattr(model, "init_continuous_batching") else "batched"
    return chosen


def kv_tokens(model) -> int:
    """KERNELSMITH_HF_KV_TOKENS, or room for MAX_BATCH requests at the model's context (8192 at most each)."""
    context = min(getattr(model.config, "max_position_embeddings", None) or 8192, 8192)
    return kv_tokens_setting() or MAX_BATCH * context


def _load(path: Path, device: str, seed: int):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kernelsmith.backends.hf_continuous import ContinuousPolicy

    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True).to(device).eval()
    if engine(device, model) == "continuous":
        return ContinuousPolicy(tokenizer, model, seed, kv_tokens(model))
    return SharedPolicy(tokenizer, model, seed)


def _fingerprint(folder: Path) -> tuple:
    return tuple(sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir() if p.is_file()))
