"""`kernelsmith doctor`: what this machine has for the job, and the fix for each missing piece."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True  # a missing optional piece does not fail doctor


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def check_torch() -> list[Check]:
    if importlib.util.find_spec("torch") is None:
        return [Check("torch", False, "not installed", "pip install torch (CPU-only machines: the CPU wheel)")]
    import torch

    cuda_build = torch.version.cuda
    checks = [Check("torch", True, f"{torch.__version__} ({'CUDA ' + cuda_build if cuda_build else 'CPU-only build'})")]
    if not cuda_build:
        checks.append(Check("torch CUDA build", False, "this torch cannot run CUDA kernels",
                            "install a CUDA build of torch to target GPUs; the CPU target works as is", required=False))
    return checks


def check_gpu() -> list[Check]:
    import torch

    if not torch.cuda.is_available():
        fix = "no GPU visible: check the driver with nvidia-smi and CUDA_VISIBLE_DEVICES; use --device cpu meanwhile"
        return [Check("GPU", False, "none visible to torch", fix, required=False)]
    checks = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        checks.append(Check(f"GPU {i}", True, f"{props.name}, compute capability {props.major}.{props.minor} "
                            f"(sm_{props.major}{props.minor}), {props.total_memory / 2**30:.0f} GiB, "
                            f"{props.multi_processor_count} SMs, L2 {props.L2_cache_size / 2**20:.0f} MiB"))
    return checks


def check_nvcc() -> Check:
    nvcc = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                    if os.environ.get("CUDA_HOME") else None)
    if not nvcc or not os.path.exists(nvcc):
        return Check("nvcc (CUDA toolkit)", False, "not found",
                     "install the CUDA toolkit matching torch's CUDA version and put its bin/ on PATH (or set CUDA_HOME)",
                     required=False)
    match = re.search(r"release ([\d.]+)", _run([nvcc, "--version"]))
    return Check("nvcc (CUDA toolkit)", True, f"{match.group(1) if match else 'unknown version'} at {nvcc}")


def check_cuda_match() -> Check | None:
    import torch

    nvcc = shutil.which("nvcc")
    if not (torch.version.cuda and nvcc):
        return None
    match = re.search(r"release (\d+)\.", _run([nvcc, "--version"]))
    if match and match.group(1) != torch.version.cuda.split(".")[0]:
        return Check("CUDA versions", False, f"nvcc is CUDA {match.group(1)}, torch was built with {torch.version.cuda}",
                     "use a toolkit with the same major version as torch.version.cuda", required=False)
    return Check("CUDA versions", True, f"nvcc and torch agree on CUDA {torch.version.cuda.split('.')[0]}")


def check_tool(name: str, binary: str, fix: str, required: bool = True, version_flag: str = "--version") -> Check:
    path = shutil.which(binary)
    if not path:
        return Check(name, False, "not found", fix, required)
    first = (_run([path, version_flag]).strip().splitlines() or ["found"])[0]
    return Check(name, True, f"{first} ({path})")


def check_ninja() -> Check:
    try:
        from torch.utils.cpp_extension import is_ninja_available

        ok = is_ninja_available()
    except ImportError:
        ok = shutil.which("ninja") is not None
    if not ok:
        return Check("ninja", False, "not found", "pip install ninja")
    return Check("ninja", True, _run(["ninja", "--version"]).strip() or "available")


def check_extension_compiler() -> Check:
    """Whether extensions that $CXX (else c++) builds work inside the torch process (toolchain.py)."""
    from kernelsmith.evaluation import toolchain

    compiler = toolchain.requested_compiler()
    fit, why = toolchain.verdict(compiler)  # never raises: a probe that cannot run is (None, why)
    # builds replace only a $CXX the user set (toolchain.choose_compiler)
    replacement = toolchain.fallback_for(compiler) if fit is False and os.environ.get("CXX") and \
        toolchain.checking() else None
    fix = (f"set CXX to a compiler that links libstdc++ dynamically (e.g. CXX={shutil.which('c++') or 'c++'}); "
           "builds switch to c++ by themselves when it is fit")
    if replacement:
        return Check("C++ compiler for extensions", True, f"{why}; builds use {replacement} instead")
    return Check("C++ compiler for extensions", bool(fit), why, fix, required=fit is not None)


def check_package(module: str, pip_name: str, required: bool = True) -> Check:
    ok = importlib.util.find_spec(module) is not None
    return Check(pip_name, ok, "installed" if ok else "missing", f"pip install {pip_name}", required)


def check_cutlass() -> Check:
    """CUTLASS's headers: optional; with them the built-in policy's float32 GEMMs may run as 3xTF32 on tensor cores."""
    from kernelsmith.evaluation.build_plan import cutlass_include

    found = cutlass_include()
    if found:
        return Check("CUTLASS headers", True, f"{found}: float32 GEMMs may also run as 3xTF32 on tensor cores")
    return Check("CUTLASS headers", False, "none: float32 GEMMs run as cuBLAS SGEMM only",
                 "optional: pip install --no-deps nvidia-cutlass (or set KERNELSMITH_CUTLASS to an include folder)",
                 required=False)


def check_jail() -> Check:
    """Which jail untrusted code runs in; without one every result carries a reduced guarantee."""
    from kernelsmith.sandbox import jail

    found = jail.status()
    if found.jailed:
        return Check("jail", True, f"{found.describe()}: bash, builds and candidate workers run jailed")
    return Check("jail", False, f"NONE ({found.detail}): every result and commit carries a reduced guarantee",
                 "apt-get install bubblewrap (user namespaces must be allowed)")


def run_checks() -> list[Check]:
    checks = check_torch()
    if checks[0].ok:
        checks += check_gpu()
    checks.append(check_nvcc())
    if checks[0].ok:
        match = check_cuda_match()
        if match:
            checks.append(match)
    checks.append(check_ninja())
    checks.append(check_tool("C++ compiler", "g++", "install g++ (Debian/Ubuntu: apt install g++)"))
    if checks[0].ok:
        checks.append(check_extension_compiler())
    checks.append(check_tool("git", "git", "install git (apt install git)"))
    checks.append(check_jail())
    checks.append(check_tool("ncu (Nsight Compute)", "ncu", "optional: install Nsight Compute for kernel metrics",
                             required=False))
    if any(c.name.startswith("nvcc") and c.ok for c in checks):
        checks.append(check_cutlass())
    for module, pip_name in (("git", "gitpython"), ("textual", "textual"), ("anthropic", "anthropic"),
                             ("openai", "openai")):
        checks.append(check_package(module, pip_name))
    return checks


def render(checks: list[Check]) -> None:
    from rich.table import Table

    from kernelsmith.console import console

    table = Table(title="kernelsmith doctor", title_justify="left")
    for col in ("", "check", "found", "fix"):
        table.add_column(col)
    for c in checks:
        mark = "[green]ok[/]" if c.ok else ("[red]missing[/]" if c.required else "[yellow]optional[/]")
        table.add_row(mark, c.name, c.detail, "" if c.ok else c.fix)
    console.print(table)
    missing = [c for c in checks if not c.ok and c.required]
    console.print("[green]ready[/]" if not missing else f"[red]{len(missing)} required piece(s) missing[/]")
