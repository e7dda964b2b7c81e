"""Load a kernels/ folder as a Python extension, for use inside model_new.py.

    from kernelsmith.ext import load_kernels
    ext = load_kernels()          # kernels/ next to this file, built (or cached) and imported

The device comes from KERNELSMITH_DEVICE (the harness sets it), else CUDA when
available. A build failure raises ImportError with the summarised compiler errors.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path


def target_device() -> str:
    env = os.environ.get("KERNELSMITH_DEVICE")
    if env in ("cuda", "cpu"):
        return env
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_kernels(kernels_dir: str | os.PathLike | None = None, device: str | None = None):
    """Build kernels_dir (default: kernels/ beside the caller) and import the extension."""
    from kernelsmith.harness import build

    if kernels_dir is None:
        caller = Path(inspect.stack()[1].filename).resolve()
        kernels_dir = caller.parent / "kernels"
    device = device or target_device()
    fast_math = os.environ.get("KERNELSMITH_FAST_MATH") == "1"
    result = build.build(kernels_dir, device, fast_math=fast_math)
    if not result.ok:
        raise ImportError(f"building {kernels_dir} failed:\n{result.summary}")
    return build.import_extension(result.so_path, result.name)
