"""What a built extension links against, read from its dynamic symbol table (torch-free, no code run).

A binding may call ATen below the dispatcher (`at::native::add`, `at::cpu::mm`, `at::cuda::...`),
where neither op watch hears it, or torch's compiled-code runtimes (AOTInductor's `aoti_torch_*`,
`torch::inductor::`). Such calls are imports of the .so: `nm` lists them without loading it, in the
parent, where the candidate cannot interfere. cuBLAS, cuDNN and the dispatcher-level `at::` API
(which the op watches hear) stay allowed.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

# An ATen kernel entry point takes tensors; helpers of the same namespaces (at::cuda's stream and
# cuBLAS handle getters, which honest bindings use) take none.
BELOW_DISPATCHER = re.compile(r"^at::(native|cpu|cuda|meta|compositeexplicitautograd\w*|compositeimplicitautograd\w*)"
                              r"::[^(]+\(.*at::Tensor")
REDISPATCH = re.compile(r"^at::_ops::[^:]+::redispatch\(")  # below the Python and profiler dispatch keys
COMPILED_RUNTIME = re.compile(r"^(torch::inductor::|torch::aot_inductor::|aoti_torch_)")


def _forbidden(name: str) -> bool:
    return any(p.match(name) for p in (BELOW_DISPATCHER, REDISPATCH, COMPILED_RUNTIME))


def imported_symbols(source: Path | bytes) -> list[str]:
    """Demangled undefined dynamic symbols of a shared object, given by path or as its bytes ([] where nm
    is missing)."""
    if isinstance(source, bytes):
        with tempfile.TemporaryDirectory(prefix="ks-nm-") as folder:  # private (0700): nm reads a file
            copy = Path(folder) / "object.so"
            copy.write_bytes(source)
            return _undefined(copy)
    return _undefined(Path(source))


def _undefined(so_path: Path) -> list[str]:
    nm = shutil.which("nm")
    if not nm:
        return []
    proc = subprocess.run([nm, "-D", "-C", "--undefined-only", str(so_path)], capture_output=True, text=True,
                          timeout=60)
    return [line.split(None, 1)[-1].strip() for line in proc.stdout.splitlines() if line.strip()]


_VERDICTS: dict[str, list[str]] = {}  # sha256 of a shared object's bytes -> its forbidden imports
_VERDICTS_LOCK = threading.Lock()


def forbidden_imports(source: Path | bytes) -> list[str]:
    """The imports of a shared object (a path or its bytes) that compute below the dispatcher or run torch's
    compiled code. Judged once per content in this process: the build's check and the profile's census of
    what the worker mapped (evaluation/loads.py) read the same extension."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    with _VERDICTS_LOCK:
        known = _VERDICTS.get(digest)
    if known is not None:
        return list(known)
    found = sorted({name.split("(")[0] for name in imported_symbols(data) if _forbidden(name)})
    with _VERDICTS_LOCK:  # nm read the bytes hashed, not the file again (it could have changed since)
        _VERDICTS[digest] = found
    return list(found)


def violation(so_path: Path) -> str | None:
    found = forbidden_imports(so_path)
    if not found:
        return None
    return ("the kernels call ATen below the dispatcher or torch's compiled-code runtime "
            f"(no op watch hears these): {', '.join(found[:6])}")
