"""Python files run from their source text, never from a bytecode cache (torch-free).

A `__pycache__/*.pyc` beside a file is believed by the import system whenever its recorded
size and mtime match the source, and both are easy to forge. Code that could write such a
cache (a candidate, the agent's bash) could then make the judge run a reference of its own
making. So task and candidate files are read, compiled and executed from their text here,
and workers run with bytecode writing off.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path


def load_source(path: str | Path, name: str, search_folder: bool = True) -> types.ModuleType:
    """Execute a Python file from its text as module `name` (registered in sys.modules).

    With search_folder, the file's folder goes last on sys.path (for `from model import Model`):
    a workdir holds profile.py and build.py, which must not shadow the standard library's
    `profile` (torch.profiler imports it) or packages.
    """
    path = Path(path).resolve()
    source = path.read_bytes()
    if search_folder and str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    module = types.ModuleType(name)
    module.__file__ = str(path)
    module.__loader__ = None
    sys.modules[name] = module
    try:
        exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def require(module, *names: str) -> None:
    missing = [n for n in names if not hasattr(module, n)]
    if missing:
        raise AttributeError(f"{Path(module.__file__).name} does not define {', '.join(missing)}")
