"""RaySandbox: the sandbox protocol on a Ray cluster (or a local Ray instance).

Workers are Ray actors, each processing one call at a time (max_concurrency=1):

* evaluation actors, one per GPU (num_gpus=1 by default, num_cpus=0 so they never starve the
  builds of CPUs). On a real cluster Ray sets CUDA_VISIBLE_DEVICES in each actor's process, and
  the worker processes it spawns (evaluation/runner.py copies the environment) see only that GPU:
  exactly one job per GPU at a time, so timings never share a GPU.
* build actors, one per CPU (num_cpus=1).

For device "cpu" an evaluation actor holds one "slot" of, in order of preference: the custom
resource ``kernelsmith_eval`` when the cluster declares it (``ray start --resources
'{"kernelsmith_eval": N}'``; a local instance started by this sandbox declares ``gpus or 1``),
else a logical GPU when the cluster has GPUs (``ray.init(num_gpus=2)`` on a machine without
one gives two slots: this is how the tests run), else one CPU.

The actors run evaluate.run_build / evaluate_workdir / evaluate in fresh worker processes,
exactly as the local sandbox does, and send back plain dicts (EvalResult.to_dict). Paths are
sent as strings and opened on the actor's node: on a multi-node cluster the workdirs, tasks
and caches must live on a filesystem that every node mounts at the same path, and kernelsmith
must be installed on every node. A build on a CPU actor is a cache hit for the evaluation
actor only if both compute the same target: on nodes without nvidia-smi, or with other GPUs
than the evaluation nodes, set TORCH_CUDA_ARCH_LIST (e.g. in the Ray runtime_env).

Failures. The driver hands each call an exclusive actor from a free-actor queue. A call that
does not answer within its deadline (a bound computed from the EvalOptions timeouts, plus
slack; the worker timeouts inside the actor normally fire long before) gets its actor killed.
An actor that dies (its process killed, its node lost) or is killed is replaced by a new one,
its leftover worker processes are killed on its node, and the job comes back as a failed
EvalResult with stage "sandbox" and the reason. Jobs are not retried: an actor can be killed
by the candidate it runs, and a retry would only lose a second actor; the caller (the agent,
the bench) decides whether to evaluate again. As in LocalSandbox, an exception inside the
harness also comes back as a rejected result (or a failed build dict), never as a raise; only
a call made after close() raises. Each result's notes name the actor that ran it:
"sandbox: ray gpu 0 (actor <id>, pid <pid>)".
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import ActorUnschedulableError, GetTimeoutError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kernelsmith.evaluation import evaluate
from kernelsmith.evaluation.options import EvalOptions
from kernelsmith.evaluation import runner
from kernelsmith.evaluation.result import EvalResult
from kernelsmith.sandbox.base import JobLedger, Submitting

EVAL_RESOURCE = "kernelsmith_eval"
ACTOR_ENV = "KERNELSMITH_RAY_ACTOR"  # tags an actor's worker processes, so they can be found after it dies
SLACK_S = 60.0  # on top of the worker timeouts: process start-up, scheduling, result transfer
START_TIMEOUT_S = 180.0  # for the first actors to come up (Ray starts a process per actor)
REAP_TIMEOUT_S = 30.0


@ray.remote(max_concurrency=1)
class _Worker:
    """One Ray actor: runs one build or evaluation at a time in fresh worker processes."""

    def info(self) -> dict[str, Any]:
        ctx = ray.get_runtime_context()
        return {"actor": ctx.get_actor_id(), "pid": os.getpid(), "node": ctx.get_node_id(),
                "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "")}

    def pid(self) -> int:
        return os.getpid()

    def build(self, kernels: str, device: str, fast_math: bool) -> dict[str, Any]:
        with self._tagged():
            return evaluate.run_build(Path(kernels), device, fast_math)

    def evaluate_workdir(self, workdir: str, opts: EvalOptions) -> dict[str, Any]:
        with self._tagged():
            return evaluate.evaluate_workdir(Path(workdir), opts).to_dict()

    def evaluate_files(self, reference: str, candidate: str, opts: EvalOptions) -> dict[str, Any]:
        with self._tagged():
            return evaluate.evaluate(Path(reference), Path(candidate), opts).to_dict()

    def warm_workdir(self, workdir: str, opts: EvalOptions) -> dict[str, Any]:
        with self._tagged():
            return evaluate.warm_workdir(Path(workdir), opts)

    def _tagged(self):
        return runner.extra_env({ACTOR_ENV: ray.get_runtime_context().get_actor_id()})


@ray.remote(num_cpus=0)
def _reap(actor_id: str, actor_pid: int) -> int:
    """On the dead actor's node: wait for the actor's process to be gone (so it starts no more
    workers), then kill the worker processes it left behind (they run in their own sessions,
    so the actor's death did not take them along). Returns how many were killed."""
    deadline = time.monotonic() + 10.0
    while _alive(actor_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = 0
    for _ in range(2):  # a second pass catches a process forked during the first
        for pid in filter(_alive, _tagged_pids(actor_id)):
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return killed


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _tagged_pids(actor_id: str) -> list[int]:
    tag = f"{ACTOR_ENV}={actor_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def eval_deadline(opts: EvalOptions) -> float:
    """How long the driver waits for one evaluation: the sum of the worker timeouts of
    evaluate.evaluate (build, candidate then judge, profile, compile baselines) plus slack."""
    bound = opts.build_timeout_s + 2 * opts.timeout_s
    if opts.profile:
        bound += 2 * opts.timeout_s + (max(opts.timeout_s, 1800.0) if opts.wants_compile() else 0.0)
    return bound + SLACK_S


def build_deadline() -> float:
    return 1800.0 + SLACK_S  # evaluate.run_build's default timeout


@dataclass(eq=False)
class _Slot:
    """A place in a pool ("gpu 0", "build 1"); its actor changes when the old one is replaced."""

    label: str
    actor: Any
    info_ref: Any  # the actor's info() call, made first, so it is answered before any job
    info: dict[str, Any] | None = None

    def describe(self) -> str:
        info = self.info or {}
        return f"sandbox: ray {self.label} (actor {info.get('actor', '?')}, pid {info.get('pid', '?')})"


@dataclass
class _Pool:
    """Actors of one kind of job ("build" or "evaluate") and their free-actor queue."""

    kind: str
    options: dict[str, Any]
    slots: list[_Slot] = field(default_factory=list)
    # Last in, first out: under light load jobs stay on the same GPU (comparable timings), and a
    # replacement actor takes the next job at once, so a broken one shows up early.
    free: queue.LifoQueue = field(default_factory=queue.LifoQueue)


class _Failed(Exception):
    """A call that gave no answer: the actor was lost (`lost`) or the harness raised."""

    def __init__(self, reason: str, lost: bool):
        super().__init__(reason)
        self.reason, self.lost, self.where = reason, lost, ""


class RaySandbox(Submitting):
    """The Sandbox protocol on Ray actors; see the module docstring. Like LocalSandbox, the
    caller never gets an exception from a job: failures come back as a rejected EvalResult
    (stage "sandbox") or a failed build dict."""

    kind = "ray"

    def __init__(self, device: str, address: str | None = None, gpus: int | None = None,
                 build_workers: int | None = None, num_gpus_per_worker: float = 1.0, **ray_init_kwargs):
        self.device = device
        self._owns_ray = not ray.is_initialized()
        if address is None and not os.environ.get("RAY_ADDRESS") and device == "cpu":
            # A local instance we start has no GPUs to count evaluation slots by: declare them.
            ray_init_kwargs.setdefault("resources", {EVAL_RESOURCE: gpus or 1})
        ray.init(address=address, ignore_reinit_error=True, **ray_init_kwargs)
        self._lock = threading.Lock()
        self._closed = False
        self._pools: dict[str, _Pool] = {}
        self._executors: dict[str, ThreadPoolExecutor] = {}
        try:
            total = ray.cluster_resources()
            options, n_eval = _eval_placement(device, gpus, num_gpus_per_worker, total)
            prefix = "gpu" if options.get("num_gpus") else "cpu"
            self._start(_Pool("evaluate", options), [f"{prefix} {i}" for i in range(n_eval)])
            n_build = build_workers or max(1, int(total.get("CPU", 1)))
            self._start(_Pool("build", {"num_cpus": 1}), [f"build {i}" for i in range(n_build)])
        except BaseException:
            self.close()
            raise
        self._ledger = JobLedger([slot.label for slot in self._pools["evaluate"].slots], extra=("replaced",))
        self._executors = {kind: ThreadPoolExecutor(len(pool.slots), thread_name_prefix=f"ks-ray-{kind}")
                           for kind, pool in self._pools.items()}

    # --- the Sandbox protocol ----------------------------------------------------------------

    def build(self, kernels: Path, device: str, fast_math: bool = False) -> dict[str, Any]:
        """Build kernels/ on a build actor; the dict of evaluate.run_build (ok False with a summary on failure)."""
        args = (str(Path(kernels).resolve()), device, fast_math)
        try:
            built, _ = self._call("build", "build", args, build_deadline(), lambda b: bool(b.get("ok")))
        except _Failed as failed:
            built = {"ok": False, "cached": False, "seconds": 0.0, "log": "", "summary": failed.reason}
        return built

    def evaluate_workdir(self, workdir: Path, opts: EvalOptions) -> EvalResult:
        """Build, verify and (when opts.profile) profile a workdir on one exclusive evaluation actor."""
        return self._evaluate("evaluate_workdir", (str(Path(workdir).resolve()), opts), opts)

    def evaluate_files(self, reference: Path, candidate: Path, opts: EvalOptions) -> EvalResult:
        """Score any ModelNew file against a reference on one exclusive evaluation actor."""
        args = (str(Path(reference).resolve()), str(Path(candidate).resolve()), opts)
        return self._evaluate("evaluate_files", args, opts)

    def _warm(self, workdir: Path, opts: EvalOptions) -> dict:
        try:
            value, _ = self._call("evaluate", "warm_workdir", (str(Path(workdir).resolve()), opts),
                                  eval_deadline(opts), lambda v: bool(v.get("ok")))
            return value
        except _Failed as failed:
            return {"ok": False, "error": failed.reason}

    def close(self) -> None:
        """Cancel queued submissions, kill the actors (and the workers of busy ones), and shut
        Ray down only if this sandbox started it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for threads in self._executors.values():
            threads.shutdown(wait=False, cancel_futures=True)
        idle = {id(s) for pool in self._pools.values() for s in list(pool.free.queue)}
        busy = [s for pool in self._pools.values() for s in pool.slots if id(s) not in idle]
        for pool in self._pools.values():
            for slot in pool.slots:
                ray.kill(slot.actor, no_restart=True)
        self._reap(busy)
        if self._owns_ray:
            ray.shutdown()

    # --- accounting ---------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """As LocalSandbox.stats: jobs done/failed/errors per kind ("errors": lost actors and
        harness exceptions, also counted as failed) plus "replaced" actors, busy seconds per
        slot ("build" sums the build actors), uptime and the latest busy intervals."""
        return {"kind": self.kind, "device": self.device, "slots": [s.label for s in self._pools["evaluate"].slots],
                "build_workers": len(self._pools["build"].slots), **self._ledger.snapshot()}

    def actors(self, kind: str = "evaluate") -> list[Any]:
        """The current actor handles of a pool ("evaluate" or "build"): each has pid() and info()."""
        return [slot.actor for slot in self._pools[kind].slots]

    # --- internals ----------------------------------------------------------------------------

    def _start(self, pool: _Pool, labels: list[str]) -> None:
        self._pools[pool.kind] = pool
        for label in labels:
            actor = _Worker.options(**pool.options).remote()
            pool.slots.append(_Slot(label, actor, actor.info.remote()))
        try:  # fail fast with a clear reason when the cluster cannot place them
            infos = ray.get([slot.info_ref for slot in pool.slots], timeout=START_TIMEOUT_S)
        except GetTimeoutError:
            raise RuntimeError(f"Ray could not start {len(labels)} {pool.kind} actors with {pool.options} within "
                               f"{START_TIMEOUT_S:.0f} s; cluster resources: {ray.cluster_resources()}") from None
        for slot, info in zip(pool.slots, infos):
            slot.info = info
            pool.free.put(slot)

    def _evaluate(self, method: str, args: tuple, opts: EvalOptions) -> EvalResult:
        try:
            value, where = self._call("evaluate", method, args, eval_deadline(opts),
                                      lambda v: bool(v.get("correct")) and not v.get("violations"))
            result = EvalResult.from_dict(value)
        except _Failed as failed:
            where = failed.where
            result = EvalResult(device=opts.device, precision=opts.precision).reject(failed.reason, stage="sandbox")
        result.notes.append(where)
        return result

    def _call(self, kind: str, method: str, args: tuple, deadline: float, ok) -> tuple[Any, str]:
        """Run one call on an exclusive actor of the pool; its value and where it ran, or _Failed
        (with .where) after replacing a lost actor."""
        pool = self._pools[kind]
        slot = self._acquire(pool)
        start, value, error = time.time(), None, None
        try:
            value = self._run(slot, method, args, deadline)
            return value, self._where(slot)
        except _Failed as failed:
            error = failed
            failed.where = self._where(slot)
            if failed.lost:
                self._replace(pool, slot)
            raise
        finally:  # also on KeyboardInterrupt: the slot goes back
            self._ledger.record(kind, slot.label if kind == "evaluate" else "build", start,
                                value is not None and ok(value), error is not None)
            pool.free.put(slot)

    def _run(self, slot: _Slot, method: str, args: tuple, deadline: float) -> Any:
        try:
            return ray.get(getattr(slot.actor, method).remote(*args), timeout=deadline)
        except GetTimeoutError:
            raise _Failed(f"sandbox error: the Ray worker gave no answer within {deadline:.0f} s; "
                          "it was killed and replaced", lost=True) from None
        except (RayActorError, ActorUnschedulableError) as err:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise _Failed(f"sandbox error: the Ray worker died during the job ({first}); it was replaced",
                          lost=True) from None
        except RayTaskError as err:  # the harness raised inside the actor; the actor itself is fine
            cause = err.cause if getattr(err, "cause", None) is not None else err
            raise _Failed(f"sandbox error: {type(cause).__name__}: {cause}", lost=False) from None
        except Exception as err:  # noqa: BLE001  (e.g. arguments Ray cannot send: never a raise to the caller)
            raise _Failed(f"sandbox error: {type(err).__name__}: {err}", lost=False) from None

    def _acquire(self, pool: _Pool) -> _Slot:
        """Block until an actor of the pool is free (one job per actor at a time)."""
        while True:
            if self._closed:
                raise RuntimeError("the RaySandbox is closed")
            try:
                return pool.free.get(timeout=0.5)
            except queue.Empty:
                continue

    def _where(self, slot: _Slot) -> str:
        if slot.info is None:  # a replacement: its info call ran before any job, so it is answered
            try:
                slot.info = ray.get(slot.info_ref, timeout=5.0)
            except Exception:  # noqa: BLE001  (only a label)
                pass
        return slot.describe()

    def _replace(self, pool: _Pool, slot: _Slot) -> None:
        """Kill the actor (it may be hung rather than dead), kill its leftover workers, start another.
        If Ray refuses (closing, cluster trouble), the dead actor stays in the slot: its next call
        fails at once and replaces it then."""
        try:
            ray.kill(slot.actor, no_restart=True)
            self._reap([slot])
            if self._closed:
                return
            slot.actor = _Worker.options(**pool.options).remote()
            slot.info_ref, slot.info = slot.actor.info.remote(), None
        except Exception:  # noqa: BLE001  (the job already failed with its reason)
            return
        self._ledger.count(pool.kind, "replaced")

    def _reap(self, slots: list[_Slot]) -> None:
        """Kill the worker processes the actors of `slots` left on their nodes (best effort)."""
        refs = []
        for slot in slots:
            if slot.info is None:
                continue  # the actor never answered, so it never started a worker
            strategy = NodeAffinitySchedulingStrategy(slot.info["node"], soft=False)
            refs.append(_reap.options(scheduling_strategy=strategy).remote(slot.info["actor"], slot.info["pid"]))
        for ref in refs:
            try:
                ray.get(ref, timeout=REAP_TIMEOUT_S)
            except Exception:  # noqa: BLE001  (the node itself may be gone)
                pass


def _eval_placement(device: str, gpus: int | None, per_worker: float,
                    total: dict[str, float]) -> tuple[dict[str, Any], int]:
    """Options and count of the evaluation actors (see the module docstring)."""
    if device == "cpu" and total.get(EVAL_RESOURCE):
        return {"num_cpus": 0, "resources": {EVAL_RESOURCE: 1}}, gpus or int(total[EVAL_RESOURCE])
    if device == "cpu" and not total.get("GPU"):
        return {"num_cpus": 1}, gpus or 1
    count = gpus or int(total.get("GPU", 0) // per_worker)
    if count < 1:
        raise RuntimeError(f"the Ray cluster has no GPUs for device {device!r}: {total}")
    return {"num_cpus": 0, "num_gpus": per_worker}, count
