"""Tasks: a KernelBench-format file, or a user's own module as FILE:CLASS with input specs.

Parent side and torch-free: a task is turned into the text of a self-contained
KernelBench-format `model.py`; running and checking it happens in a worker
(harness/lint.py) because the reference is user code too.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith.errors import BadInput
from kernelsmith.evaluation import runner

SPEC_DTYPES = {
    "float32": "torch.float32", "float": "torch.float32", "fp32": "torch.float32",
    "float16": "torch.float16", "half": "torch.float16", "fp16": "torch.float16",
    "bfloat16": "torch.bfloat16", "bf16": "torch.bfloat16", "float64": "torch.float64",
    "int64": "torch.int64", "long": "torch.int64", "int32": "torch.int32", "int": "torch.int32",
    "int8": "torch.int8", "uint8": "torch.uint8", "bool": "torch.bool",
}
_SPEC_RE = re.compile(r"^\s*(?P<dtype>[a-z0-9]+)\s*\[(?P<shape>[\d\s,]*)\]\s*(?:\{(?P<range>[^}]*)\})?\s*$")
REQUIRED = ("Model", "get_inputs", "get_init_inputs")


@dataclass
class InputSpec:
    dtype: str
    shape: tuple[int, ...]
    low: float | None = None
    high: float | None = None

    def expression(self) -> str:
        """Python source that draws one such tensor."""
        torch_dtype = SPEC_DTYPES[self.dtype]
        shape = "(" + "".join(f"{d}, " for d in self.shape) + ")"
        if self.dtype == "bool":
            return f"torch.rand({shape}) > 0.5"
        if torch_dtype.startswith("torch.int") or torch_dtype == "torch.uint8":
            low, high = int(self.low or 0), int(self.high if self.high is not None else 16)
            return f"torch.randint({low}, {high}, {shape}, dtype={torch_dtype})"
        if self.low is not None:
            return f"(torch.rand({shape}) * {self.high - self.low!r} + {self.low!r}).to({torch_dtype})"
        return f"torch.randn({shape}, dtype={torch_dtype})"


def parse_input_spec(text: str) -> InputSpec:
    """'float32[8,1024]', 'int64[32]{0,100}' (range low,high) or 'float32[4]{0,1}'."""
    match = _SPEC_RE.match(text)
    if not match or match["dtype"] not in SPEC_DTYPES:
        raise BadInput(f"bad input spec {text!r}",
                       "write DTYPE[D0,D1,...] such as float32[8,1024], optionally {LOW,HIGH}; "
                       f"dtypes: {', '.join(sorted(SPEC_DTYPES))}")
    dims = tuple(int(d) for d in match["shape"].replace(" ", "").split(",") if d)
    if any(d <= 0 for d in dims):
        raise BadInput(f"bad input spec {text!r}: every dimension must be positive")
    low = high = None
    if match["range"]:
        try:
            low, high = (float(v) for v in match["range"].split(","))
        except ValueError:
            raise BadInput(f"bad range in input spec {text!r}", "write {LOW,HIGH}, e.g. int64[32]{0,100}") from None
        if high <= low:
            raise BadInput(f"bad range in input spec {text!r}: HIGH must be above LOW")
    return InputSpec(match["dtype"], dims, low, high)


@dataclass
class TaskSource:
    """A task as the text of a KernelBench-format model.py."""

    name: str
    source: str
    origin: str
    lint: dict = field(default_factory=dict)


def _defined_names(source: str, origin: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise BadInput(f"{origin} is not valid Python: line {err.lineno}: {err.msg}") from None
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def load_task(spec: str, inputs: list[str] | None = None, init_args: str | None = None) -> TaskSource:
    """Resolve TASK (a KernelBench file, or FILE:CLASS with --input specs) to model.py text."""
    path_text, _, class_name = spec.partition(":")
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise BadInput(f"task file not found: {path}", "give a KernelBench-format .py file or FILE:CLASS")
    source = path.read_text()
    names = _defined_names(source, str(path))
    if class_name:
        return _from_user_class(path, source, names, class_name, inputs or [], init_args)
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        raise BadInput(f"{path} is not a KernelBench-format task: it does not define {', '.join(missing)}",
                       "or name your module as FILE:CLASS with --input specs, e.g. model.py:MyNet --input 'float32[8,1024]'")
    if inputs:
        raise BadInput("--input is only for FILE:CLASS tasks", f"{path} defines its own get_inputs()")
    return TaskSource(name=path.stem, source=source, origin=str(path.resolve()))


def _from_user_class(path: Path, source: str, names: set[str], class_name: str, inputs: list[str],
                     init_args: str | None) -> TaskSource:
    if class_name not in names:
        raise BadInput(f"{path} does not define class {class_name}")
    if not inputs:
        raise BadInput(f"FILE:CLASS tasks need input specs", "add --input 'float32[8,1024]' once per forward argument")
    specs = [parse_input_spec(text) for text in inputs]
    args = _parse_init_args(init_args)
    shim = [
        "", "", "# --- added by kernelsmith: the KernelBench-format task interface ---",
        "import torch as _ks_torch  # noqa: E402", "torch = _ks_torch",
    ]
    if class_name != "Model":
        shim.append(f"Model = {class_name}")
    shim += ["", "", "def get_inputs():", f"    return [{', '.join(s.expression() for s in specs)}]",
             "", "", "def get_init_inputs():", f"    return {args!r}", ""]
    return TaskSource(name=f"{path.stem}_{class_name}", source=source.rstrip() + "\n" + "\n".join(shim),
                      origin=f"{path.resolve()}:{class_name}")


def _parse_init_args(text: str | None) -> list:
    if not text:
        return []
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise BadInput(f"--init-args {text!r} is not a Python literal", "e.g. --init-args '[1024, 0.5]'") from None
    return list(value) if isinstance(value, (list, tuple)) else [value]


def check_task(model_py: Path, device: str, precision: str = "fp32", timeout_s: float = 300.0) -> dict:
    """Run the reference in a worker: it must run; degenerate behaviour comes back as warnings."""
    job = {"kind": "lint", "reference": str(Path(model_py).resolve()), "device": device, "precision": precision,
           "cwd": str(Path(model_py).resolve().parent)}
    try:
        return runner.run_job(job, timeout_s)
    except runner.JobFailed as err:
        raise BadInput(f"the reference does not run: {err.reason.splitlines()[0]}",
                       "fix model.py so that Model(*get_init_inputs())(*get_inputs()) runs") from None
