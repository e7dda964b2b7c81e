"""verl's agent loop for kernelsmith: each sample is one KernelEnv session (docs/train-verl.md).

verl (0.9.1) calls `run(sampling_params, **row)` once per sample, in an AgentLoopWorker (a Ray actor on the
cluster's CPUs). The loop:

1. lays out a workdir from the row's task (`extra_info.task_source`, written by `data.py`) under
   `workdir_root`, and opens a KernelEnv session in it, evaluating on the process's shared sandbox (the
   local pool of this node, or kernelsmith's Ray pool of evaluation actors on the cluster's GPUs);
2. renders the session's prompt as the hf backend and `train trajectories` render it (the env's system and
   task prompts, its tools as `tools=`, the tokenizer's chat template) and asks verl's server manager to
   generate;
3. appends the generated ids as they are (mask 1), decodes them and reads the tool calls back as the hf
   backend does (`backends.hf.parse_tool_calls`), runs them through `env.model_turn` and `env.step_all`,
   and appends the env's new messages (tool results, the nudge after a reply without a call) rendered with
   the chat template by verl's Continuous Token builder (mask 0);
4. stops where KernelEnv's optimize loop stops (finish, or a spent budget: `max_turns`, cost, timeout), or
   when the next tool output would not fit in `response_length`. Nothing is appended after the policy's
   last turn, so the reward verl puts on the last response token lands on a policy token;
5. closes the session and returns, as the sample's `reward_score`, the final reward from kernelsmith's
   signed ledger: the milestone reward of the best kernel the session committed, -1 when none verified
   (what `train trajectories` and `train ppo` use).

Env calls block (builds, jailed tools, evaluations), so they run on a thread pool, never on verl's event
loop. A rollout that raises (the env, the sandbox, the server) becomes a failed sample: reward 0 and a
response mask of zeros, so the policy is neither rewarded nor punished for an infrastructure failure; the
trainer goes on."""

from __future__ import annotations

import asyncio
import atexit
import functools
import hashlib
import logging
import re
import shutil
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from kernelsmith.backends.base import Reply, Usage
from kernelsmith.backends.hf import parse_tool_calls
from kernelsmith.train import trajectories
from kernelsmith.train.verl import AGENT_NAME
from kernelsmith.train.verl.reward import FIELD, reward_info

logger = logging.getLogger(__name__)


@dataclass
class LoopOptions:
    """The agent loop's own settings: the keys of its entry in the agent-loop YAML (config.py writes it)."""

    workdir_root: str = "/tmp/kernelsmith-verl"  # on a multi-node Ray sandbox: a filesystem every node mounts
    device: str = "cuda"
    precision: str = "fp32"
    max_turns: int = 150
    max_tokens_per_turn: int = 8192
    timeout_min: float | None = None
    sandbox: str = "local"  # local: this node's GPUs; ray: kernelsmith's evaluation actors on the Ray cluster
    sandbox_gpus: int | None = None  # ray: evaluation actors this agent-loop worker starts (None: every GPU)
    build_workers: int | None = None  # ray: build actors this agent-loop worker starts (None: every CPU)
    env_threads: int = 64  # env calls in flight per agent-loop worker
    warm_baselines: bool = True
    keep_workdirs: bool = False  # keep each session's workdir (its record and git) after the sample

    @classmethod
    def take(cls, kwargs: dict[str, Any]) -> "LoopOptions":
        """The options among an instantiation's keyword arguments, removed from them."""
        return cls(**{f.name: kwargs.pop(f.name) for f in fields(cls) if f.name in kwargs})


# -- what one agent-loop worker process shares between its samples --------------------------------

_LOCK = threading.Lock()
_SANDBOXES: dict[tuple, Any] = {}
_EXECUTORS: dict[int, ThreadPoolExecutor] = {}


def shared_sandbox(options: LoopOptions):
    """This process's sandbox for these options, started by the first sample that needs it."""
    key = (options.sandbox, options.device, options.sandbox_gpus, options.build_workers)
    with _LOCK:
        if key not in _SANDBOXES:
            _SANDBOXES[key] = _make_sandbox(options)
        return _SANDBOXES[key]


def _make_sandbox(options: LoopOptions):
    if options.sandbox == "ray":
        from kernelsmith.sandbox.ray_pool import RaySandbox  # inside verl's Ray actor: joins its cluster

        return RaySandbox(options.device, gpus=options.sandbox_gpus, build_workers=options.build_workers)
    if options.sandbox != "local":
        raise ValueError(f"unknown sandbox {options.sandbox!r} (local or ray)")
    from kernelsmith.sandbox.local import LocalSandbox

    return LocalSandbox(options.device)


def _close_sandboxes() -> None:
    for sandbox in list(_SANDBOXES.values()):
        try:
            sandbox.close()
        except Exception:  # at exit: nothing left to report to
            pass


atexit.register(_close_sandboxes)


def env_executor(threads: int) -> ThreadPoolExecutor:
    """A thread pool for env calls, apart from the event loop's default one (verl tokenises there)."""
    with _LOCK:
        if threads not in _EXECUTORS:
            _EXECUTORS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="ks-verl-env")
        return _EXECUTORS[threads]


# -- pieces of a session --------------------------------------------------------------------------

def lay_out(extra_info: dict[str, Any], options: LoopOptions) -> Path:
    """A new workdir for the row's task under workdir_root (the task whole in the row: no tasks folder needed)."""
    from kernelsmith import workdir as wd
    from kernelsmith.task import TaskSource

    source, name = extra_info["task_source"], str(extra_info.get("task_name") or "task")
    digest = extra_info.get("task_sha256")
    if digest and hashlib.sha256(source.encode()).hexdigest() != digest:
        raise ValueError(f"task {name}: its source does not match its sha256 in the dataset row")
    folder = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]
    workdir = Path(options.workdir_root).expanduser().resolve() / "workdirs" / f"{folder}-{uuid.uuid4().hex[:12]}"
    workdir.parent.mkdir(parents=True, exist_ok=True)
    wd.create(TaskSource(name=name, source=source, origin=str(extra_info.get("task_path") or name)), workdir,
              options.device, options.precision)
    return workdir


def settings_of(options: LoopOptions):
    """The session's Settings; the torch.compile baselines are shared by every session under the same root."""
    from kernelsmith.config import Settings

    root = Path(options.workdir_root).expanduser().resolve()
    return Settings(device=options.device, precision=options.precision, max_turns=options.max_turns,
                    timeout_min=options.timeout_min, warm_baselines=options.warm_baselines,
                    baselines_cache=str(root / "baselines.json"))


def reply_of(tokenizer, token_ids: list[int], turn: int, prompt_tokens: int, model: str) -> Reply:
    """Generated ids as the env's Reply: decoded and parsed as the hf backend reads its own generations."""
    text, calls = parse_tool_calls(tokenizer.decode(token_ids, skip_special_tokens=True), turn)
    eos = tokenizer.eos_token_id
    return Reply(text, calls, Usage(input_tokens=prompt_tokens, output_tokens=len(token_ids)),
                 stop_reason="stop" if eos is not None and eos in token_ids else "length", model=model)


def ledger_reward(workdir: Path, session_id: str) -> tuple[float, dict | None]:
    """The session's final reward as the signed ledger records it, and its best kernel (None: none verified)."""
    kernels, _ = trajectories.vouched_kernels(workdir)
    best = trajectories.best_kernel(trajectories.session_kernels(kernels, session_id))
    return trajectories.final_reward(best), best


@dataclass
class Stream:
    """The sample's token stream: prompt then response, a mask and log-probs over the response."""

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def prompt(self) -> list[int]:
        return self.ids[:len(self.ids) - len(self.mask)]

    def response(self) -> list[int]:
        return self.ids[len(self.ids) - len(self.mask):]


@register(AGENT_NAME)
class KernelAgentLoop(AgentLoopBase):
    """verl's AgentLoopBase driving one KernelEnv session per sample (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        self.options = LoopOptions.take(kwargs)
        kwargs.pop("tools", None)  # verl's configured tools: the session brings kernelsmith's own
        kwargs.pop("name", None)  # the agent-loop YAML's entry name
        super().__init__(*args, **kwargs)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        session = Session(self, kwargs)
        try:
            await session.play(sampling_params)
        except Exception as err:  # the env, the sandbox or the server broke: a failed sample, not a failed step
            session.error = f"{type(err).__name__}: {' '.join(str(err).split())[:500]}"
            logger.warning("kernelsmith rollout of %s failed: %s", session.task, session.error)
        finally:
            await session.close()
        return await session.output()

    async def blocking(self, fn, *args):
        """fn(*args) on the env thread pool: env calls block for seconds to minutes."""
        pool = env_executor(self.options.env_threads)
        return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args))


class Session:
    """One sample: its KernelEnv session, its chat (append-only, as verl's token builder needs) and stream."""

    def __init__(self, loop: KernelAgentLoop, row: dict[str, Any]):
        self.loop, self.options, self.row = loop, loop.options, row
        self.extra = dict(row.get("extra_info") or {})
        self.task = self.extra.get("task_name") or self.extra.get("task_path") or "?"
        self.request_id = uuid.uuid4().hex
        self.env = self.workdir = None
        self.opened, self.reason, self.error = False, "", ""
        self.stream, self.chat, self.tools = Stream(), [], []
        self.turns = {"assistant": 0, "context": 0}
        self.scores: list[float] = []  # each evaluation's milestone reward, in order
        self.metrics = {"generate_sequences": 0.0, "tool_calls": 0.0}
        self.server_fields: dict[str, Any] = {}  # the server's extra fields (the weights' versions), as verl keeps them
        self.reward, self.best = 0.0, None

    @property
    def model(self) -> str:
        return str(self.loop.config.actor_rollout_ref.model.path)

    async def play(self, sampling_params: dict[str, Any]) -> None:
        await self.open()
        while not self.reason:
            self.reason = self.env.exhausted() or await self.turn(sampling_params)

    async def open(self) -> None:
        from kernelsmith.agent.env import KernelEnv

        self.workdir = await self.loop.blocking(lay_out, self.extra, self.options)
        sandbox = await self.loop.blocking(shared_sandbox, self.options)
        # the policy's context is verl's prompt plus response: a small one gets the guide without its playbook,
        # as `optimize --backend hf` gives a small checkpoint (kernelsmith.agent.env.system_prompt)
        window = int(self.loop.rollout_config.prompt_length) + self.loop.response_length
        self.env = KernelEnv(settings_of(self.options), sandbox, model={"backend": "verl", "model": self.model},
                             window=window)
        await self.loop.blocking(self.env.reset, self.workdir, None, "kernelsmith train verl")
        self.opened = True
        env = self.env
        self.chat = trajectories.chat_of(env.system, env.messages, [None] * len(env.messages)).messages
        self.tools = trajectories.hf_tools(env.specs)
        self.stream = Stream(await self.loop.ct_build_initial_tokens(self.chat, tools=self.tools))
        limit = int(self.loop.rollout_config.prompt_length)
        if len(self.stream.ids) >= limit:  # verl cut it from the left: the policy would lose its system prompt
            raise ValueError(f"the session's prompt fills rollout.prompt_length ({limit} tokens): raise "
                             "--prompt-length (data.max_prompt_length)")

    async def turn(self, sampling_params: dict[str, Any]) -> str:
        """One model turn and its tool calls; why the session ends here ("" when it goes on)."""
        room = self.loop.response_length - len(self.stream.mask)
        if room <= 0:
            return "response_length"
        output = await self.generate({**sampling_params, "max_tokens": min(room, self.options.max_tokens_per_turn)})
        env = self.env
        reply = reply_of(self.loop.tokenizer, list(output.token_ids), env.turn + 1, len(self.stream.ids), self.model)
        before = len(env.messages)
        began = time.perf_counter()
        await self.loop.blocking(env.model_turn, reply)
        observations = await self.loop.blocking(env.step_all, reply.tool_calls)
        self.metrics["tool_calls"] += time.perf_counter() - began
        self.scores += [o.reward for o in observations if o.eval is not None]
        added = [trajectories.hf_message(m) for m in env.messages[before:]]
        previous = self.chat + added[:1]  # the assistant message: its tokens are in the stream already
        self.chat = previous + added[1:]
        if env.done:
            return env.reason
        if spent := env.exhausted():
            return spent
        return "" if await self.append_context(previous) else "response_length"

    async def generate(self, sampling_params: dict[str, Any]):
        began = time.perf_counter()
        output = await self.loop.server_manager.generate(request_id=self.request_id, prompt_ids=self.stream.ids,
                                                         sampling_params=sampling_params)
        self.metrics["generate_sequences"] += time.perf_counter() - began
        self.keep_server_fields(dict(output.extra_fields or {}))
        logprobs = list(output.log_probs) if output.log_probs else None
        merged, mask, kept = await self.loop.ct_merge_assistant_token(
            self.stream.ids, list(output.token_ids), self.stream.mask,
            self.stream.logprobs if (self.stream.logprobs or logprobs) else None, assistant_logprobs=logprobs)
        self.stream = Stream(merged.token_ids, mask, kept or [])
        self.turns["assistant"] += 1
        return output

    def keep_server_fields(self, found: dict[str, Any]) -> None:
        """As verl's tool agent loop: the first turn's fields, then the latest max_global_steps (verl's v1 trainer
        reads min/max_global_steps to drop trajectories that span too many weight versions)."""
        if not self.server_fields:
            self.server_fields.update(found)
        elif found.get("max_global_steps"):
            self.server_fields["max_global_steps"] = found["max_global_steps"]

    async def append_context(self, previous: list[dict]) -> bool:
        """The env's new messages as template tokens (mask 0); False when they would not fit (then the
        stream stays as it was, ending on the policy's turn, as verl's tool agent loop does)."""
        merged, mask, kept = await self.loop.ct_merge_context_msg(
            previous, self.chat, self.stream.ids, self.stream.mask, self.stream.logprobs or None, tools=self.tools)
        if len(mask) >= self.loop.response_length:
            return False
        self.stream = Stream(merged.token_ids, mask, kept or [])
        self.turns["context"] += 1
        return True

    async def close(self) -> None:
        """End the session and read its reward from the ledger; never raises (a failure makes the sample failed)."""
        try:
            if self.opened:
                await self.loop.blocking(self.env.close, self.reason or ("error" if self.error else "interrupted"))
                if not self.error:
                    self.reward, self.best = await self.loop.blocking(ledger_reward, self.workdir, self.env.session_id)
        except Exception as err:
            self.error = self.error or f"closing the session: {type(err).__name__}: {err}"
        finally:
            if self.workdir is not None and not self.options.keep_workdirs:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def outcome(self) -> dict[str, Any]:
        """What the reward function and the logs read back (extra field FIELD)."""
        found = {"task": self.task, "reason": self.reason or "error", "turns": self.env.turn if self.opened else 0,
                 "session_id": self.env.session_id if self.opened else "", "workdir": str(self.workdir or ""),
                 "env_final_reward": self.env.final_reward() if self.opened else None, "best": self.best,
                 "error": self.error}
        if not self.error:
            found["reward"] = self.reward
        return found

    async def output(self) -> AgentLoopOutput:
        outcome = self.outcome()
        info = reward_info(outcome)
        prompt, response, mask, logprobs = await self.tokens()
        limit = self.loop.response_length
        return AgentLoopOutput(
            prompt_ids=prompt, response_ids=response[:limit], response_mask=mask[:limit],
            response_logprobs=logprobs[:limit] if logprobs else None, reward_score=info["score"],
            num_turns=self.turns["assistant"] + self.turns["context"] + 1, metrics=self.metrics,
            extra_fields={**self.server_fields, FIELD: outcome, "turn_scores": self.scores, "tool_rewards": [],
                          "reward_extra_info": {k: v for k, v in info.items() if k != "score"}})

    async def tokens(self) -> tuple[list[int], list[int], list[int], list[float]]:
        """Prompt, response, mask and log-probs to hand verl; a failed sample's mask is all 0, and a sample
        that never got a prompt or a response gets stand-ins (verl needs both non-empty)."""
        prompt, response = self.stream.prompt(), self.stream.response()
        mask, logprobs = list(self.stream.mask), list(self.stream.logprobs)
        if self.error:
            mask = [0] * len(mask)
        if not prompt:
            prompt = await self.stand_in_prompt()
        if not response:
            pad = self.loop.tokenizer.pad_token_id
            response, mask = [self.loop.tokenizer.eos_token_id if pad is None else pad], [0]
            logprobs = [0.0] if logprobs else []
        return prompt, response, mask, logprobs

    async def stand_in_prompt(self) -> list[int]:
        """The row's own prompt, for a sample whose session never rendered one."""
        try:
            return await self.loop.ct_build_initial_tokens(list(self.row.get("raw_prompt") or []))
        except Exception:
            return [self.loop.tokenizer.eos_token_id or 0]
