"""`<name>_binding.cpp`: a light binding (ATen's Tensor and c10's CUDA stream only, registered
with REGISTER_KERNEL) that checks its inputs with one-line errors, allocates its outputs and
launches on the current stream: no torch compute."""

from __future__ import annotations

from kernelsmith.compiler.cuda.common import Param, braced, includes, signature, template
from kernelsmith.compiler.dtypes import ATEN_DTYPES
from kernelsmith.compiler.ir import Generated, Group, Value



def generated(group: Group, files: dict[str, str], params: list[Param], dense: set[str],
              variants: list[str], workspace: bool = False, strides: dict[str, tuple[int, ...]] | None = None,
              scratch: int = 0) -> Generated:
    """A kernel family's files, plus the binding; `dense`: the inputs it reads dense (checked contiguous);
    `strides`: those it reads in place through strides baked into its code (checked equal); `scratch`: the
    floats of working memory it takes as `scratch` (a recurrent layer's sequences)."""
    files = dict(files)
    files[f"{group.name}_binding.cpp"] = _binding(group, params, dense, len(variants), workspace, strides or {},
                                                  scratch)
    return Generated(files, group.name, variants)


def _binding(group: Group, params: list[Param], dense: set[str], variants: int, workspace: bool = False,
             strides: dict[str, tuple[int, ...]] | None = None, scratch: int = 0) -> str:
    tensors = [v for v in group.inputs if not v.scalar]
    if not tensors:
        raise ValueError(f"{group.name}: a kernel with no tensor input is unsupported")
    name, first = group.name, f"in_{tensors[0].name}"
    lines = [line for v in tensors for line in _input_checks(name, v, v.name in dense, first)
             + _stride_check(name, v, (strides or {}).get(v.name))]
    lines += [f'  TORCH_CHECK(config >= 0 && config < {variants}, "{name}: config must be in [0, {variants}), got ", '
              "config);",
              f"  const c10::cuda::CUDAGuard device_guard({first}.device());"]
    lines += _workspace_lines(name, first) if workspace else []
    lines += [f"  auto scratch = at::empty({{{scratch}LL}}, {first}.options().dtype(at::kFloat));"] if scratch else []
    lines += [_allocation(out, first) for out in group.outputs]
    lines += [f"  const int status = {name}_launch({', '.join(p.arg for p in params)}, (int)config, "
              "c10::cuda::getCurrentCUDAStream());",
              f'  TORCH_CHECK(status == 0, "{name}: launch failed: ", ks_status(status));',
              _return(group)]
    args = ", ".join(f"{'double' if v.scalar else 'at::Tensor'} in_{v.name}" for v in group.inputs)
    head = template("binding_head.h").substitute(name=name, signature=signature(params),
                                                 includes=includes(signature(params)))
    if workspace:
        head = head.replace("\nnamespace {", f"\n{_workspace_decl(name)}\nnamespace {{", 1)
    return (head + f"{_return_type(group)} {name}({args}, int64_t config) {{\n" + "\n".join(lines)
            + f"\n}}\n\nREGISTER_KERNEL({name}, {name});\n")


def _workspace_decl(name: str) -> str:
    return f'extern "C" int {name}_conv_workspace(int config, size_t* bytes);  // in {name}_conv.cu\n'


def _workspace_lines(name: str, first: str) -> list[str]:
    """The scratch memory the chosen cuDNN algorithm needs, from torch's caching allocator
    (an allocation, not compute; stream-ordered like the outputs)."""
    return ["  size_t workspace_bytes = 0;",
            f"  const int workspace_status = {name}_conv_workspace((int)config, &workspace_bytes);",
            f'  TORCH_CHECK(workspace_status == 0, "{name}: cuDNN setup failed: ", ks_status(workspace_status));',
            f"  auto workspace = at::empty({{(int64_t)workspace_bytes + 1}}, {first}.options().dtype(at::kByte));"]


def _input_checks(kernel: str, value: Value, dense: bool, first: str) -> list[str]:
    t, what = f"in_{value.name}", f"{kernel}: input {value.name}"
    same_device = "" if t == first else f" && {t}.device() == {first}.device()"
    lines = [f'  TORCH_CHECK({t}.is_cuda(){same_device}, "{what} must be a CUDA tensor'
             f'{"" if t == first else " on the device of the first input"}");',
             f'  TORCH_CHECK({t}.scalar_type() == {ATEN_DTYPES[value.dtype]}, "{what} must be {value.dtype}");',
             f'  TORCH_CHECK(({t}.sizes().vec() == std::vector<int64_t>{braced(value.shape)}), '  # (): commas
             f'"{what} must have shape {list(value.shape)}, got ", {t}.sizes());']
    if dense:
        lines.append(f'  TORCH_CHECK({t}.is_contiguous(), "{what} must be contiguous");')
    return lines


def _stride_check(kernel: str, value: Value, strides: tuple[int, ...] | None) -> list[str]:
    """An input read in place through baked-in strides (a GEMM operand that is a transposed or expanded view)."""
    if strides is None:
        return []
    t, want = f"in_{value.name}", list(strides)
    return [f'  TORCH_CHECK(({t}.strides().vec() == std::vector<int64_t>{braced(strides)}), '
            f'"{kernel}: input {value.name} must have strides {want}, got ", {t}.strides());']


def _allocation(out: Value, first: str) -> str:
    dtype = ATEN_DTYPES[out.dtype]
    return (f"  auto out_{out.name} = at::empty(std::vector<int64_t>{braced(out.shape)}, "
            f"{first}.options().dtype({dtype}));")


def _return_type(group: Group) -> str:
    if len(group.outputs) == 1:
        return "at::Tensor"
    return "std::tuple<" + ", ".join("at::Tensor" for _ in group.outputs) + ">"


def _return(group: Group) -> str:
    outs = ", ".join(f"out_{o.name}" for o in group.outputs)
    return f"  return {outs};" if len(group.outputs) == 1 else f"  return std::make_tuple({outs});"
