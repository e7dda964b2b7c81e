"""What a built extension links against, read from its dynamic symbol table (torch-free, no code run).

A binding may call ATen below the dispatcher (`at::native::add`, `at::cpu::mm`, `at::cuda::...`),
where neither op watch hears it, or torch's compiled-code runtimes (AOTInductor's `aoti_torch_*`,
`torch::inductor::`). Such calls are imports of the .so: `nm` lists them without loading it, in the
parent, where the candidate cannot interfere. cuBLAS, cuDNN and the dispatcher-level `at::` API
(which the op watches hear) stay allowed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

# An ATen kernel entry point takes tensors; helpers of the same namespaces (at::cuda's stream and
# cuBLAS handle getters, which honest bindings use) take none.
BELOW_DISPATCHER = re.compile(r"^at::(native|cpu|cuda|meta|compositeexplicitautograd\w*|compositeimplicitautograd\w*)"
                              r"::[^(]+\(.*at::Tensor")
REDISPATCH = re.compile(r"^at::_ops::[^:]+::redispatch\(")  # below the Python and profiler dispatch keys
COMPILED_RUNTIME = re.compile(r"^(torch::inductor::|torch::aot_inductor::|aoti_torch_)")


def _forbidden(name: str) -> bool:
    return any(p.match(name) for p in (BELOW_DISPATCHER, REDISPATCH, COMPILED_RUNTIME))


def imported_symbols(so_path: Path) -> list[str]:
    """Demangled undefined dynamic symbols of a shared object ([] where nm is missing)."""
    nm = shutil.which("nm")
    if not nm:
        return []
    proc = subprocess.run([nm, "-D", "-C", "--undefined-only", str(so_path)], capture_output=True, text=True,
                          timeout=60)
    return [line.split(None, 1)[-1].strip() for line in proc.stdout.splitlines() if line.strip()]


def forbidden_imports(so_path: Path) -> list[str]:
    """The imports of so_path that compute below the dispatcher or run torch's compiled code."""
    return sorted({name.split("(")[0] for name in imported_symbols(so_path) if _forbidden(name)})


def violation(so_path: Path) -> str | None:
    found = forbidden_imports(so_path)
    if not found:
        return None
    return ("the kernels call ATen below the dispatcher or torch's compiled-code runtime "
            f"(no op watch hears these): {', '.join(found[:6])}")
