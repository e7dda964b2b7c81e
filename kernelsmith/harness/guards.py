"""Run-time defences against faked results. Runs inside the worker process.

Each guard answers one known hack (../shared/HARNESS-NOTES.md):
- OpRecorder: torch compute in ModelNew.forward or its C++ binding (the dispatcher
  sees Python and C++ at:: calls alike); only allocation and view ops pass.
- IdentitySnapshot: monkey-patched torch, checker or clocks.
- Observers: profile, trace and monitoring hooks that let the candidate watch the harness's loop
  (which run is drawn, when the cache is flushed) without patching anything.
- backend_flags: precision lowered through global flags (TF32 and friends).
- output_problems / aliases_any / mutated_inputs: lazy subclasses, returning or
  writing into the inputs.
- deferred_work: work left running on side streams or threads after forward.
- state_fingerprint: caches kept on the module across calls.
- poison: uninitialised memory that happens to hold a right answer.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelsmith.evaluation.loads import FOREIGN_LIBRARIES

# Ops that allocate memory or only change metadata/views. Everything else that
# reaches the dispatcher during ModelNew.forward is torch compute.
ALLOWED_OPS = frozenset({
    # allocation and plain initialisation
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones",
    "full", "full_like", "new_full", "zero_", "fill_", "scalar_tensor", "lift_fresh", "empty_permuted",
    # views and metadata
    "view", "_unsafe_view", "_reshape_alias", "as_strided", "alias", "detach", "expand",
    "permute", "transpose", "t", "squeeze", "unsqueeze", "slice", "select", "narrow",
    "split", "split_with_sizes", "chunk", "unbind", "unfold", "diagonal", "view_as_real",
    "view_as_complex", "movedim", "unflatten", "resize_", "_local_scalar_dense",
    "is_same_size", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "dim",
    "is_contiguous", "record_stream", "set_",
})


def op_base_name(func) -> str:
    """aten.add.Tensor -> 'add'."""
    name = getattr(func, "__name__", str(func))  # 'add.Tensor'
    return name.split(".")[0]


class OpRecorder(TorchDispatchMode):
    """Records every dispatcher op outside ALLOWED_OPS while active."""

    def __init__(self):
        super().__init__()
        self.forbidden: dict[str, int] = {}
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        base = op_base_name(func)
        if base not in ALLOWED_OPS:
            key = str(func.overloadpacket) if hasattr(func, "overloadpacket") else base
            self.forbidden[key] = self.forbidden.get(key, 0) + 1
        return func(*args, **(kwargs or {}))

    def violation(self) -> str | None:
        if not self.forbidden:
            return None
        ops = ", ".join(f"{name} x{n}" for name, n in sorted(self.forbidden.items())[:12])
        return f"torch compute in ModelNew.forward or its binding (only allocation and view ops are allowed): {ops}"


# Composite ops that the C++-level profiler also reports; each one that copies or computes
# shows up as its own primitive (clone, _to_copy, copy_, ...), which is not allowed.
PROFILER_ALLOWED = ALLOWED_OPS | frozenset({
    "reshape", "contiguous", "to", "flatten", "view_as", "expand_as", "reshape_as", "item",
    "size", "stride", "numel", "resolve_conj", "resolve_neg", "type_as", "data", "requires_grad_",
})


def forbidden_profiled_op(name: str) -> bool:
    """An op name as RecordFunction reports it ('aten::add_', 'mkldnn::_linear_pointwise') that
    computes: any operator namespace counts, not only aten."""
    namespace, sep, op = name.partition("::")
    return bool(sep) and namespace not in ("profiler",) and op.split(".")[0] not in PROFILER_ALLOWED


class ProfiledOps:
    """Second, C++-level recorder: torch's profiler (RecordFunction) sees every dispatcher op,
    also those run after the Python dispatch mode was popped or disabled."""

    def __init__(self):
        from torch.profiler import ProfilerActivity, profile

        self.profiler = profile(activities=[ProfilerActivity.CPU])
        self.forbidden: dict[str, int] = {}
        self.broken = ""

    def __enter__(self):
        self.profiler.__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self.profiler.__exit__(None, None, None)
            events = self.profiler.events()
        except Exception as err:  # the candidate stopped or broke the profiler
            self.broken = f"the harness's op profiler was stopped or broken during forward ({type(err).__name__})"
            return False
        for event in events:
            if forbidden_profiled_op(event.name):
                self.forbidden[event.name] = self.forbidden.get(event.name, 0) + 1
        return False

    def violation(self) -> str | None:
        if self.broken:
            return self.broken
        if not self.forbidden:
            return None
        ops = ", ".join(f"{name} x{n}" for name, n in sorted(self.forbidden.items())[:12])
        return f"torch compute in ModelNew.forward or its binding (seen by the profiler): {ops}"


def recorder_still_active(recorder: OpRecorder) -> bool:
    """True when the recorder is still on the dispatch mode stack (not popped by the candidate)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return any(mode is recorder for mode in _get_current_dispatch_mode_stack())


# --- identities --------------------------------------------------------------

def _watched_namespaces() -> dict[str, object]:
    import torch.nn.functional as F
    import torch.testing

    spaces = {
        "torch": torch, "torch.nn.functional": F, "torch.Tensor": torch.Tensor,
        "torch.nn.Module": torch.nn.Module, "torch.testing": torch.testing,
        "torch.cuda": torch.cuda, "time": time, "torch.backends.cuda": torch.backends.cuda,
        "torch.backends.cudnn": torch.backends.cudnn, "threading": threading,
        # below torch's Python API: what torch.cuda.synchronize and the events call; the pipe to the parent
        "torch._C": torch._C, "os": os, "random": random,
    }
    if hasattr(torch.cuda, "Event"):
        spaces["torch.cuda.Event"] = torch.cuda.Event
    for name, module in list(sys.modules.items()):
        if name.startswith(HARNESS_MODULES) and isinstance(module, types.ModuleType):
            spaces[name] = module
            spaces.update(_own_classes(name, module))
    return spaces


# The worker's own code: its modules and the classes they define (a method replaced on a class, such as
# the input pool's draw, moves work out of the timed window as surely as a replaced module function).
HARNESS_MODULES = ("kernelsmith.harness.", "kernelsmith.evaluation.")


def _own_classes(name: str, module) -> dict[str, type]:
    return {f"{name}.{attr}": cls for attr, cls in _members(module).items()
            if isinstance(cls, type) and getattr(cls, "__module__", None) == name}


def _members(space) -> dict[str, object]:
    """A module's own attributes; for a class, everything it resolves through its MRO, so that
    patching an inherited method (torch.Tensor.__sub__ lives on TensorBase) is seen too."""
    if isinstance(space, type):
        import inspect

        found = {}
        for name in dir(space):
            try:
                found[name] = inspect.getattr_static(space, name)
            except AttributeError:
                continue
        return found
    try:
        return dict(vars(space))
    except TypeError:
        return {}


_DYNAMO_WRAPPER_CODE = torch._disable_dynamo(lambda: None).__code__


def _same_function(before, after) -> bool:
    """Identity, or torch's own lazy rebinding: importing torch._dynamo wraps torch.manual_seed
    and friends in torch._disable_dynamo, a wrapper that calls exactly the original."""
    if after is before:
        return True
    return getattr(after, "__code__", None) is _DYNAMO_WRAPPER_CODE and getattr(after, "__wrapped__", None) is before


def _insides(obj) -> tuple:
    """What a Python function runs, beyond its identity: its code, defaults and closure cells (each
    writable in place, so the same function object can run other code). Methods wrapped as static,
    class or property are unwrapped; anything else has no insides to compare."""
    obj = getattr(obj, "__func__", None) or getattr(obj, "fget", None) or obj
    if not isinstance(obj, types.FunctionType):
        return ()
    cells = tuple(_cell(c) for c in obj.__closure__ or ())
    return (obj.__code__, obj.__defaults__, obj.__kwdefaults__) + cells


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _same_insides(before: tuple, after: tuple) -> bool:
    return len(before) == len(after) and all(a is b for a, b in zip(before, after))


class IdentitySnapshot:
    """Identities of the functions the harness relies on, taken before candidate import."""

    def __init__(self):
        self.spaces: dict[str, dict] = {}
        self.insides: dict[tuple[str, str], tuple] = {}
        self.objects: dict[str, tuple[object, dict, tuple]] = {}  # each object, its state and its insides
        self.extra: dict[str, object] = {}  # namespaces watched later (watch), by their snapshot's name
        self._watch_namespaces(_watched_namespaces())

    def _watch_namespaces(self, spaces: dict) -> None:
        for name, space in spaces.items():
            self.spaces[name] = members = _members(space)
            self.insides.update({(name, attr): _insides(obj) for attr, obj in members.items() if _is_code(obj)})

    def watch(self, **objects) -> None:
        """The harness's own objects in this process (its clocks, input pool, flusher, checksums, the
        wrapped eager): a method set on one of them shadows its class's, and a function's insides can
        change without its identity."""
        for name, obj in objects.items():
            if isinstance(obj, types.ModuleType):  # the reference's module: trusted code the harness calls
                spaces = {name: obj, **_own_classes(obj.__name__, obj)}
                self.extra.update(spaces)
                self._watch_namespaces(spaces)
            elif obj is not None:
                self.objects[name] = (obj, _instance_state(obj), _insides(obj))

    def changed(self) -> list[str]:
        current = {**_watched_namespaces(), **self.extra}
        problems = []
        for name, before in self.spaces.items():
            after = _members(current.get(name))
            for attr, obj in before.items():
                if not _is_code(obj):
                    continue  # data (flags, constants) is not a function the harness calls
                if attr in after and not _same_function(obj, after[attr]):
                    problems.append(f"{name}.{attr}")
                elif attr not in after:
                    problems.append(f"{name}.{attr} (deleted)")
                elif after[attr] is obj and not _same_insides(self.insides[(name, attr)], _insides(obj)):
                    problems.append(f"{name}.{attr} (its code or closure)")
        return problems + self._objects_changed()

    def _objects_changed(self) -> list[str]:
        problems = []
        for name, (obj, before, insides) in self.objects.items():
            after = _instance_state(obj)
            problems += [f"{name}.{attr} (set on the object)" for attr in before.keys() | after.keys()
                         if attr not in before or attr not in after or after[attr] is not before[attr]]
            if not _same_insides(insides, _insides(obj)):
                problems.append(f"{name} (its code or closure)")
        return problems


def _is_code(obj) -> bool:
    return callable(obj) or isinstance(obj, (type, staticmethod, classmethod, property))


def _instance_state(obj) -> dict[str, object]:
    """What an object holds in its own __dict__, by identity, but the attributes its class says it changes
    as it works (MUTABLE: a counter, the latest draw). A method set on it lands here, and so does anything
    it works with swapped for another (the flusher's buffer for a tiny one, its handle on the CUDA runtime)."""
    try:
        own = dict(vars(obj))
    except TypeError:
        return {}
    mutable = getattr(type(obj), "MUTABLE", frozenset())
    return {attr: value for attr, value in own.items() if attr not in mutable}


def _monitoring_tools() -> tuple:
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+
    return tuple(monitoring.get_tool(i) for i in range(6)) if monitoring else ()


_OBSERVERS = (("sys.setprofile", sys.getprofile), ("sys.settrace", sys.gettrace),
              ("threading.setprofile", getattr(threading, "getprofile", lambda: None)),
              ("threading.settrace", getattr(threading, "gettrace", lambda: None)),
              ("sys.monitoring", _monitoring_tools))


class Observers:
    """The interpreter's hooks that see every call and return on this thread (or any): with one, candidate
    code can tell when the harness draws a run's inputs or flushes the cache, and start work then, out of the
    timed window, having patched nothing. Taken before the candidate is imported (the getters too, so a
    replaced `sys.getprofile` does not blind it) and checked before every timed run's draw."""

    def __init__(self):
        self.getters = _OBSERVERS
        self.before = self._now()
        self.found: str | None = None

    def _now(self) -> list:
        return [getter() for _, getter in self.getters]

    def check(self) -> None:
        if self.found is None:
            changed = [name for (name, _), a, b in zip(self.getters, self.before, self._now()) if a != b]
            if changed:
                self.found = ("candidate installed a hook that watches the harness's own code (" + ", ".join(changed)
                              + "): it can start work when a run's inputs are drawn, out of the timed window")


class ProcessGuard:
    """Taken before the candidate is imported; afterwards says what it patched or switched."""

    def __init__(self):
        self.identities = IdentitySnapshot()
        self.watch = self.identities.watch
        self.flags = backend_flags()
        self.loads = LoadGuard()
        self.observers = Observers()

    def violations(self) -> list[str]:
        found = self.loads.violations()
        self.observers.check()
        if self.observers.found:
            found.append(self.observers.found)
        patched = self.identities.changed()
        if patched:
            found.append("candidate replaced functions the harness relies on: " + ", ".join(patched[:8]))
        changed = flag_changes(self.flags, backend_flags())
        if changed:
            found.append("candidate changed global numeric flags: " + "; ".join(changed))
        return found


def backend_flags() -> dict[str, object]:
    """Global switches that change numerics; the candidate must leave them alone."""
    flags = {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "default_dtype": str(torch.get_default_dtype()),
        "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn.enabled": torch.backends.cudnn.enabled,
        "cuda.matmul.allow_fp16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "cuda.matmul.allow_bf16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }
    return flags


def flag_changes(before: dict, after: dict) -> list[str]:
    return [f"{k}: {before[k]!r} -> {after.get(k)!r}" for k in before if after.get(k) != before[k]]


def set_precision_flags(precision: str) -> None:
    """fp32 means real fp32: TF32 off for matmul and cuDNN (cuDNN defaults to TF32)."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


# --- outputs and inputs --------------------------------------------------------

def flatten_outputs(out) -> list:
    """Exactly a tuple or list (a subclass could compute when iterated: it stays one output and
    fails output_problems), or one output."""
    if type(out) in (tuple, list):
        return list(out)
    return [out]


def output_problems(outputs: list, device: str) -> list[str]:
    """Each output must be a plain, real torch.Tensor on the target device."""
    problems = []
    for i, out in enumerate(outputs):
        if type(out) is not torch.Tensor:
            problems.append(f"output {i} is {type(out).__module__}.{type(out).__qualname__}, not a plain torch.Tensor")
            continue
        if out.is_meta or out.device.type != device:
            problems.append(f"output {i} is on {out.device}, expected {device}")
            continue
        try:
            storage = out.untyped_storage()
        except (RuntimeError, NotImplementedError):
            problems.append(f"output {i} has no real storage")
            continue
        if out.numel() and not storage.resizable():  # from_blob, frombuffer, numpy, a mapped file
            problems.append(f"output {i} is not in torch's own resizable memory (from_blob, frombuffer, a numpy "
                            "array or a numpy view written through, or a mapped file)")
    return problems


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def aliases_any(outputs: list, inputs: list) -> bool:
    """True when an output shares memory with an input."""
    spans = [_storage_span(t) for t in inputs if isinstance(t, torch.Tensor) and t.numel()]
    for out in outputs:
        if not isinstance(out, torch.Tensor) or out.numel() == 0:
            continue
        lo, hi = _storage_span(out)
        if any(lo < b and a < hi for a, b in spans):
            return True
    return False


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN-safe) of two tensors of the same shape and dtype."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    a, b = a.contiguous(), b.contiguous()
    return bool(torch.equal(a.view(torch.uint8) if a.dtype != torch.bool else a,
                            b.view(torch.uint8) if b.dtype != torch.bool else b))


def mutated_inputs(inputs: list, pristine: list) -> list[int]:
    return [i for i, (x, p) in enumerate(zip(inputs, pristine))
            if isinstance(x, torch.Tensor) and not same_bits(x, p)]


def python_threads() -> set[int]:
    return set(sys._current_frames())


def deferred_work(outputs: list, sync, pause_s: float = 0.05) -> bool:
    """True when an output changes after forward returned and the device synced."""
    sync()
    first = [o.detach().clone() for o in outputs]
    time.sleep(pause_s)
    sync()
    return any(not same_bits(o, f) for o, f in zip(outputs, first))


# --- module state ----------------------------------------------------------------

def _fingerprint(value, depth: int = 0):
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype), value.data_ptr() if value.numel() else 0)
    if depth > 3:
        return ("deep", type(value).__name__)
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), _fingerprint(v, depth + 1)) for k, v in value.items())))
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(map(repr, value)) if isinstance(value, (set, frozenset)) else value
        return (type(value).__name__, tuple(_fingerprint(v, depth + 1) for v in items))
    if isinstance(value, (int, float, str, bool, bytes, type(None))):
        return value
    return ("object", type(value).__qualname__, id(value))


def state_fingerprint(model: torch.nn.Module):
    """Plain attributes of every submodule (not parameters/buffers, which are checked by value)."""
    skip = {"_parameters", "_buffers", "_modules", "training", "_forward_hooks", "_forward_pre_hooks",
            "_backward_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks"}
    state = {}
    for name, module in model.named_modules():
        attrs = {k: v for k, v in vars(module).items() if k not in skip}
        state[name] = _fingerprint(attrs)
    return state


def parameter_values(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def changed_parameters(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> list[str]:
    now = dict(model.named_parameters())
    return [k for k, v in before.items() if k not in now or not same_bits(now[k].detach(), v)]


# --- memory poisoning ------------------------------------------------------------

def poison(nbytes: int, device: str) -> None:
    """Fill a freed block with NaN so that unwritten output elements read NaN.

    The CUDA caching allocator hands the block to the next allocation of a
    similar size, which is the candidate's output.
    """
    if nbytes <= 0:
        return
    n = (nbytes + 3) // 4
    block = torch.empty(n, dtype=torch.float32, device=device)
    block.fill_(float("nan"))
    del block


# --- what the candidate's process loads ------------------------------------------------------

# Python packages that compute or compile outside the candidate's kernels: the parts of torch's
# compilers that only compiling or loading compiled code imports (importing torch._dynamo, the
# profiler or the flop counter, as the harness itself does, loads torch._inductor's config and
# utilities but none of these), other array libraries, other kernel compilers.
FOREIGN_MODULES = ("torch._inductor.codecache", "torch._inductor.compile_fx", "torch._inductor.graph",
                   "torch._inductor.scheduler", "torch._inductor.async_compile", "torch._inductor.package",
                   "torch._inductor.codegen", "torch._export.serde", "numba", "cupy", "jax", "jaxlib", "scipy",
                   "tensorflow", "triton", "tvm", "onnxruntime", "tensorrt", "torch_tensorrt", "sklearn", "numexpr")
# Native libraries that do the same below Python (matched against mapped file names) come from the parent's
# census of the same mappings (evaluation/loads.py), which this process cannot blind.


def mapped_libraries() -> set[str]:
    """Shared objects mapped into this process (/proc/self/maps)."""
    try:
        lines = open("/proc/self/maps").read().splitlines()
    except OSError:
        return set()
    return {line.split(None, 5)[5] for line in lines if len(line.split(None, 5)) == 6 and ".so" in line}


class LoadGuard:
    """What the process had loaded before the candidate's import; afterwards, what it added that
    computes outside the candidate's own kernels (cuBLAS and cuDNN stay allowed)."""

    def __init__(self):
        self.modules = set(sys.modules)
        self.libraries = mapped_libraries()

    def violations(self) -> list[str]:
        found = []
        modules = sorted(m for m in set(sys.modules) - self.modules
                         if any(m == f or m.startswith(f + ".") for f in FOREIGN_MODULES))
        if modules:
            found.append("candidate loaded compute outside its kernels (torch's compilers or another "
                         "library): " + ", ".join(modules[:6]))
        libraries = sorted(lib for lib in mapped_libraries() - self.libraries
                           if any(f in lib.lower() for f in FOREIGN_LIBRARIES))
        if libraries:
            found.append("candidate mapped native compute libraries: " + ", ".join(libraries[:4]))
        return found
