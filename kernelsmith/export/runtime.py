"""Runtime of a kernel exported by `kernelsmith export` (copied into the package as _runtime.py).

It needs torch and a C++ compiler (nvcc too for CUDA), not kernelsmith. On first use it builds
kernels/ with torch.utils.cpp_extension, the way kernelsmith's harness does, into a cache
folder; it registers the model's forward as one torch.library custom op whose fake
implementation runs the reference model on fake tensors (so torch.compile can trace through
it without running the kernel), and it checks device, dtype and shape against what was
verified, with errors that say what was expected.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import torch
from torch import Tensor

HERE = Path(__file__).resolve().parent
MANIFEST = json.loads((HERE / "export.json").read_text())
_EXTENSION = []  # the built extension, once per process


class KernelInputError(ValueError):
    """An input the exported kernel was not built or verified for."""


def build_dir() -> Path:
    """KERNELSMITH_EXPORT_BUILD_DIR, else the user's cache; one folder per export."""
    root = os.environ.get("KERNELSMITH_EXPORT_BUILD_DIR")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kernelsmith" / "export"
    return Path(root) / MANIFEST["extension"]


def load_kernels(kernels_dir=None, device=None):
    """The built extension (same call as kernelsmith.ext.load_kernels; the arguments are fixed here)."""
    if not _EXTENSION:
        _EXTENSION.append(_build())
    return _EXTENSION[0]


def _build():
    from torch.utils import cpp_extension

    flags, cuda = MANIFEST["flags"], MANIFEST["device"] == "cuda"
    suffixes = (".cpp", ".cc", ".cu") if cuda else (".cpp", ".cc")
    sources = [HERE / "binding.cpp"] + sorted(p for p in (HERE / "kernels").iterdir() if p.suffix in suffixes)
    out = build_dir()
    out.mkdir(parents=True, exist_ok=True)
    with _build_lock(out):
        return cpp_extension.load(
            name=MANIFEST["extension"], sources=[str(p) for p in sources],
            extra_cflags=list(flags["cflags"]), extra_cuda_cflags=list(flags["cuda_flags"]),
            extra_ldflags=list(flags["ldflags"]), extra_include_paths=[str(HERE), str(HERE / "kernels")],
            build_directory=str(out), with_cuda=cuda, is_python_module=True, verbose=False)


@contextlib.contextmanager
def _build_lock(out: Path):
    """Our flock on the build folder, and under it no stale lock of cpp_extension's. Its lock is a plain file
    that a build killed midway (Ctrl-C, a timeout) leaves behind, and every later import then waits on it for
    ever; the kernel drops a flock with its holder, so a file lock found while we hold ours is stale."""
    try:
        import fcntl
    except ImportError:  # not POSIX: cpp_extension's own lock alone
        yield
        return
    with open(out / "ks-build.lock", "a") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX)
        except OSError:  # a file system without flock (some network mounts): cpp_extension's own lock alone
            yield
            return
        for name in ("lock", ".ninja_lock"):
            (out / name).unlink(missing_ok=True)
        yield


# -- the modules behind the op ---------------------------------------------------------------------

_MODULES: dict[str, torch.nn.Module] = {}


def init_args() -> list:
    """The constructor arguments the kernel was verified with (seeded as the harness seeds them)."""
    from . import reference

    torch.manual_seed(0)
    return list(reference.get_init_inputs())


def candidate() -> torch.nn.Module:
    """One ModelNew with the verified constructor arguments; the op swaps in the caller's weights."""
    if "candidate" not in _MODULES:
        from .model_new import ModelNew

        _MODULES["candidate"] = ModelNew(*init_args()).eval()
    return _MODULES["candidate"]


def reference_on_meta() -> torch.nn.Module:
    """The reference Model without storage: the fake implementation computes shapes with it."""
    if "reference" not in _MODULES:
        from . import reference

        with torch.device("meta"):
            _MODULES["reference"] = reference.Model(*init_args()).eval()
    return _MODULES["reference"]


def _as_list(out) -> list[Tensor]:
    return [out] if isinstance(out, Tensor) else list(out)


@torch.library.custom_op(MANIFEST["op"], mutates_args=())
def forward_op(inputs: list[Tensor], weights: list[Tensor], names: str) -> list[Tensor]:
    """The exported model's forward: inputs as the reference takes them, the weights (parameters
    and buffers) and their state-dict names, one a line (a schema takes no list of strings).
    Returns the outputs as a list."""
    state = dict(zip(names.split("\n"), weights))
    with torch.no_grad():
        out = torch.func.functional_call(candidate(), state, tuple(inputs))
    # A custom op must not return its inputs or their views (aliasing breaks torch.compile).
    return [t.clone() if any(t.data_ptr() == x.data_ptr() for x in inputs + weights) else t for t in _as_list(out)]


@forward_op.register_fake
def _forward_fake(inputs: list[Tensor], weights: list[Tensor], names: str) -> list[Tensor]:
    known = set(dict(reference_on_meta().named_parameters())) | set(dict(reference_on_meta().named_buffers()))
    state = {name: w for name, w in zip(names.split("\n"), weights) if name in known}
    return [t.clone() for t in _as_list(torch.func.functional_call(reference_on_meta(), state, tuple(inputs)))]


# -- checks ----------------------------------------------------------------------------------------

def check_inputs(inputs: tuple, weights: dict[str, Tensor]) -> None:
    """Raise KernelInputError unless the inputs are what the kernel was verified for."""
    specs = MANIFEST["inputs"]
    if len(inputs) != len(specs):
        raise KernelInputError(f"{MANIFEST['task']}: expected {len(specs)} input(s), got {len(inputs)}")
    for i, (x, spec) in enumerate(zip(inputs, specs)):
        _check_tensor(f"input {i}", x, spec)
    for name, w in weights.items():
        if w.device.type != MANIFEST["device"]:
            raise KernelInputError(f"{MANIFEST['task']}: weight {name} is on {w.device.type}; the kernel runs on "
                                   f"{MANIFEST['device']} (move the model with .to({MANIFEST['device']!r}))")


def _check_tensor(what: str, x, spec: dict) -> None:
    task = MANIFEST["task"]
    if not isinstance(x, Tensor):
        raise KernelInputError(f"{task}: {what} must be a tensor, got {type(x).__name__}")
    if x.device.type != MANIFEST["device"]:
        raise KernelInputError(f"{task}: {what} is on {x.device.type}; the kernel was built for {MANIFEST['device']}")
    if x.dtype != getattr(torch, spec["dtype"]):
        raise KernelInputError(f"{task}: {what} has dtype {str(x.dtype).replace('torch.', '')}; "
                               f"the kernel was verified for {spec['dtype']}")
    if list(x.shape) != spec["shape"]:
        raise KernelInputError(f"{task}: {what} has shape {list(x.shape)}; the kernel was verified for "
                               f"shape {spec['shape']} only")
    if not x.is_contiguous():
        raise KernelInputError(f"{task}: {what} is not contiguous; pass x.contiguous()")


# -- the module users hold -------------------------------------------------------------------------

def make_model_class():
    """Model: ModelNew's constructor and weights (so a reference state dict loads), with a forward
    that checks its inputs and calls the custom op. Inference only: the op has no backward."""
    from .model_new import ModelNew

    class Model(ModelNew):
        def __init__(self, *args, **kwargs):
            if (args or kwargs) and (list(args) != init_args() or kwargs):
                raise KernelInputError(f"{MANIFEST['task']}: the kernel was verified for constructor arguments "
                                       f"{init_args()!r} only; got {list(args)!r}" + (f" {kwargs!r}" if kwargs else ""))
            super().__init__(*init_args())
            self.requires_grad_(False)  # the op has no backward

        def forward(self, *inputs):
            weights = {**dict(self.named_parameters()), **dict(self.named_buffers())}
            check_inputs(inputs, weights)
            out = forward_op(list(inputs), list(weights.values()), "\n".join(weights))
            return out[0] if MANIFEST["single_output"] else tuple(out)

    Model.__name__ = Model.__qualname__ = "Model"
    return Model
