"""Convolutions through cuDNN (`<name>_conv.cu`, text/conv_cudnn.cuh, the only file that includes
cudnn.h), then the pointwise epilogue in one elementwise pass over cuDNN's result, in place.
The launch variants are the first algorithms of cuDNN's heuristic that run in the precision's
math: FMA math at fp32 (true fp32), TF32 tensor ops allowed at tf32, and at bf16 and fp16
16-bit data on tensor ops with float compute."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from kernelsmith.compiler.cstyle import ops
from kernelsmith.compiler.cuda.binding import generated
from kernelsmith.compiler.cuda.common import (HALF_TYPES, INT_MAX, Param, Read, braced, ctype, cu_file, dense,
                                              includes, input_params, launcher, output_params, read, stride_params,
                                              template, used)
from kernelsmith.compiler.cuda.elementwise import Elementwise, in_place_epilogue
from kernelsmith.compiler.ir import ConvGroup, Generated, Value

VARIANTS = 4  # the first algorithms of cuDNN's heuristic that run in the precision's math here
EPILOGUE_THREADS = 256

FORWARD = {
    "algo_type": "cudnnConvolutionFwdAlgo_t", "perf_type": "cudnnConvolutionFwdAlgoPerf_t",
    "heuristic": "cudnnGetConvolutionForwardAlgorithm_v7(handle, c.x, c.w, c.conv, c.y, 16, &returned, found)",
    "workspace_query": "cudnnGetConvolutionForwardWorkspaceSize(handle, c.x, c.w, c.conv, c.y, found[i].algo, &bytes)",
    "call": "cudnnConvolutionForward(handle, &alpha, c->x, x, c->w, w, c->conv, c->algos[pick], workspace, bytes, "
            "&beta, c->y, y)",
}
# ConvTranspose is the backward-data pass of the convolution that maps y back to x: x is cuDNN's
# dy, the output is its dx, and PyTorch's [c_in, c_out / groups, ...] weight is that filter as is.
TRANSPOSED = {
    "algo_type": "cudnnConvolutionBwdDataAlgo_t", "perf_type": "cudnnConvolutionBwdDataAlgoPerf_t",
    "heuristic": "cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, c.w, c.x, c.conv, c.y, 16, &returned, found)",
    "workspace_query": "cudnnGetConvolutionBackwardDataWorkspaceSize(handle, c.w, c.x, c.conv, c.y, found[i].algo, "
                       "&bytes)",
    "call": "cudnnConvolutionBackwardData(handle, &alpha, c->w, w, c->x, x, c->conv, c->algos[pick], workspace, "
            "bytes, &beta, c->y, y)",
}


@dataclass(frozen=True)
class Math:
    """cuDNN's settings at one precision: data type, math type, and how the file and variants say it."""

    data_type: str
    math_type: str
    name: str  # the variants' word for it
    note: str  # the file's
    word: str  # the file's short word


FP32 = Math("CUDNN_DATA_FLOAT", "CUDNN_FMA_MATH", "fp32 FMA math",
            "CUDNN_FMA_MATH: true fp32, no TF32 tensor cores, like the fp32 baselines", "FMA math")
TF32 = Math("CUDNN_DATA_FLOAT", "CUDNN_DEFAULT_MATH", "TF32 tensor ops allowed",
            "CUDNN_DEFAULT_MATH: float32 data, TF32 tensor cores allowed, like the tf32 baselines", "default math")


def math_for(dtype: str, precision: str) -> Math:
    """16-bit data on tensor ops, computed in float (cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configurations)."""
    if dtype in HALF_TYPES:
        return Math(HALF_TYPES[dtype].cudnn_type, "CUDNN_TENSOR_OP_MATH", f"{dtype} tensor ops, float compute",
                    f"CUDNN_TENSOR_OP_MATH: {dtype} data on tensor cores, computed in float, like the {precision} "
                    "baselines", "tensor-op math")
    return TF32 if precision == "tf32" else FP32


def conv(group: ConvGroup, values: dict[str, Value], precision: str = "fp32") -> Generated:
    _check(group, values)
    math, pointers = math_for(values[group.x].dtype, precision), _pointers(group, values)
    reads = [read(values[v.name], group.out_shape) for v in group.inputs
             if v.name in used(group.epilogue) and v.name not in (group.x, group.w)]
    params = input_params(group) + stride_params(reads) + output_params(group) + \
        [Param("void*", "p_workspace", "workspace.data_ptr()"), Param("size_t", "workspace_bytes", "workspace_bytes")]
    epilogue = _epilogue(group, reads, params)
    kernels = [epilogue.source()] if epilogue else []
    launch = [f"  const int status = {group.name}_conv(p_{group.x}, p_{group.w}, p_{group.outputs[0].name}, "
              "p_workspace, workspace_bytes, config, stream);", "  if (status != 0) return status;"]
    launch += epilogue.launch(str(EPILOGUE_THREADS), "true") if epilogue else []
    body = (f'extern "C" int {group.name}_conv({pointers}, void* workspace, '
            f"size_t bytes, int config, cudaStream_t stream);  // in {group.name}_conv.cu\n\n"
            + launcher(group.name, params, VARIANTS, launch))
    what = _describe(group)
    files = {f"{group.name}.cu": cu_file(group, f"{what}{', its epilogue' if epilogue else ''}", kernels, body),
             f"{group.name}_conv.cu": _cudnn(group, what, math, pointers)}
    after = f", epilogue {EPILOGUE_THREADS} threads/block" if epilogue else ""  # (none: cuDNN writes the result)
    variants = [f"cuDNN algorithm #{i + 1} of its heuristic ({math.name}){after}" for i in range(VARIANTS)]
    return generated(group, files, params, {group.x, group.w} | dense(reads), variants, workspace=True)


def _check(group: ConvGroup, values: dict[str, Value]) -> None:
    for name in (group.x, group.w):
        if not values[name].contiguous:
            raise ValueError(f"{group.name}: a non-contiguous convolution operand is unsupported")
    x, w, y = values[group.x].dtype, values[group.w].dtype, group.outputs[0].dtype
    if not x == w == y:
        raise ValueError(f"{group.name}: a convolution of {x} x with {w} w into a {y} buffer is unsupported "
                         "(cuDNN takes one data type)")
    largest = max(prod(group.in_shape), prod(group.out_shape), prod(group.w_shape))
    if largest > INT_MAX:  # cuDNN's legacy descriptors take int strides
        raise ValueError(f"{group.name}: a convolution tensor of {largest} elements (over 2^31) is unsupported")


def _epilogue(group: ConvGroup, reads: list[Read], params: list[Param]) -> Elementwise | None:
    """The epilogue per element of cuDNN's result, or None when there is nothing to do after it."""
    if not group.epilogue and [o.name for o in group.outputs] == [group.result]:
        return None
    names = {r.value.name: r.var for r in reads}
    names[group.result] = f"v_{group.result}"
    body = ops.body_lines(group.epilogue, names, "")
    return in_place_epilogue(group, reads, params, names[group.result], names, body,
                             group.outputs[0].name == group.result)


def _describe(group: ConvGroup) -> str:
    kind = f"{'transposed ' if group.transposed else ''}{group.spatial}-d convolution"
    return (f"{kind} of x {list(group.in_shape)} with w {list(group.w_shape)} -> {list(group.out_shape)}, stride "
            f"{list(group.stride)}, padding {list(group.padding)}, dilation {list(group.dilation)}, groups {group.groups}")


def _pointers(group: ConvGroup, values: dict[str, Value]) -> str:
    data = ctype(values[group.x])
    return f"const {data}* x, const {data}* w, {data}* y"


def _cudnn(group: ConvGroup, what: str, math: Math, pointers: str) -> str:
    """cuDNN wants at least 2 spatial dims: a 1-d convolution is a 2-d one over a height of 1."""
    lift = group.spatial == 1

    def spatial(values, fill):
        return ([fill] if lift else []) + [int(v) for v in values]
    x_dims = list(group.in_shape[:2]) + spatial(group.in_shape[2:], 1)
    y_dims = list(group.out_shape[:2]) + spatial(group.out_shape[2:], 1)
    w_dims = list(group.w_shape[:2]) + spatial(group.w_shape[2:], 1)
    table = FORWARD if not group.transposed else TRANSPOSED
    return template("conv_cudnn.cuh").substitute(
        name=group.name, what=what, what_short="convolution(x, w)" if not group.transposed else "conv_transpose(x, w)",
        variants=VARIANTS, rank=len(x_dims), spatial=len(x_dims) - 2, groups=group.groups, pointers=pointers,
        includes=includes(pointers), data_type=math.data_type, math_type=math.math_type, math_note=math.note,
        math_word=math.word,
        x_dims=braced(x_dims), y_dims=braced(y_dims), w_dims=braced(w_dims),
        x_strides=braced(_contiguous_strides(x_dims)), y_strides=braced(_contiguous_strides(y_dims)),
        pads=braced(spatial(group.padding, 0)), strides=braced(spatial(group.stride, 1)),
        dilations=braced(spatial(group.dilation, 1)), **table)


def _contiguous_strides(dims: list[int]) -> list[int]:
    return [prod(dims[d + 1:]) for d in range(len(dims))]
