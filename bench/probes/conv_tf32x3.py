"""Would a 3xTF32 implicit-GEMM convolution beat cuDNN's fp32 one? Each 2-d convolution of the given tasks, as
cuDNN runs it for the built-in policy now (NCHW, fp32, TF32 off) against CUTLASS's implicit GEMM in 3xTF32
(bench/probes/conv_tf32x3.cu: float32 accuracy on tensor cores, NHWC activations, KRSC filters), before building
such a path into the compiler (device probe for issue 20: level 2's convolutions are most of its time).

    python3 bench/probes/conv_tf32x3.py TASK.py... [--runs 30]

Per convolution (found with forward hooks, at the task's own sizes; groups of 1 only; no bias, which the
policy adds in its epilogue):
  - cudnn_fp32: F.conv2d on NCHW, TF32 off: what the policy calls now;
  - cudnn_tf32: the same with TF32 on, for scale only (it is not fp32, and the judge fails it);
  - tile i: CUTLASS 3xTF32 on NHWC x and KRSC w (tiles 0-2 need channel counts that are multiples of 4, tile 3
    takes any), its result judged against cudnn_fp32's by harness/compare.py at fp32;
  - to_nhwc: the copy of x into NHWC that such a path would add (the result's copy back to NCHW could run in the
    epilogue kernel the policy runs anyway).
Each timed by the harness's clock, L2 flushed before each call, median of --runs. Prints a markdown table.
"""
from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conv_layout import captured_convs, median_ms  # noqa: E402

from kernelsmith.evaluation.build_plan import cutlass_include  # noqa: E402
from kernelsmith.harness.compare import compare  # noqa: E402
from kernelsmith.harness.timing import Clocks, L2Flusher  # noqa: E402

SOURCE = Path(__file__).with_suffix(".cu")
TILES = ("128x128x16", "128x64x16", "64x64x32", "128x64x16 align 1")


def library(out: Path):
    so = out / "conv_tf32x3.so"
    if not so.exists():
        cmd = ["nvcc", "-O3", "-std=c++17", "--expt-relaxed-constexpr", "-arch=sm_90", "-shared", "-Xcompiler",
               "-fPIC", f"-I{cutlass_include()}", str(SOURCE), "-o", str(so)]
        subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(str(so))
    lib.ks_conv_tf32x3.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 16 + [ctypes.c_void_p]
    return lib


def pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def probe(lib, conv, x: torch.Tensor, runs: int, clocks: Clocks, flusher: L2Flusher) -> dict:
    w = conv.weight.detach()
    stride, pad, dil = pair(conv.stride), pair(conv.padding), pair(conv.dilation)
    fp32 = lambda: F.conv2d(x, w, None, stride, pad, dil)  # noqa: E731
    ref = fp32()
    row = {"conv": f"x {list(x.shape)} w {list(w.shape)} s{stride[0]} p{pad[0]}", "cudnn_fp32": median_ms(fp32, runs, clocks, flusher)}
    torch.backends.cudnn.allow_tf32 = True
    row["cudnn_tf32"] = median_ms(fp32, runs, clocks, flusher)
    torch.backends.cudnn.allow_tf32 = False
    x_nhwc, w_krsc = x.permute(0, 2, 3, 1).contiguous(), w.permute(0, 2, 3, 1).contiguous()
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    p, q = ref.shape[2], ref.shape[3]
    y = torch.empty(n, p, q, k, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    sizes = [n, h, wd, c, k, r, s, p, q, pad[0], pad[1], stride[0], stride[1], dil[0], dil[1]]
    call = lambda tile: lib.ks_conv_tf32x3(x_nhwc.data_ptr(), w_krsc.data_ptr(), y.data_ptr(), *sizes, tile, stream)  # noqa: E731
    for tile, name in enumerate(TILES):
        status = call(tile)
        torch.cuda.synchronize()
        if status != 0:
            row[name] = f"status {status}"
            continue
        verdict = compare(y.permute(0, 3, 1, 2), ref, "fp32")
        row[name] = (median_ms(lambda: call(tile), runs, clocks, flusher),
                     ("pass" if verdict["ok"] else "FAIL") + f" {verdict.get('rel_l2_err', float('nan')):.1e}")
    row["to_nhwc"] = median_ms(lambda: x.permute(0, 2, 3, 1).contiguous(), runs, clocks, flusher)
    return row


def cell(value) -> str:
    return f"{value[0]:.3f} ({value[1]})" if isinstance(value, tuple) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tasks", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("/tmp/ks-conv-tf32x3"))
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    lib, clocks, flusher = library(args.out), Clocks("cuda"), L2Flusher("cuda")
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
          f"the harness's clock, L2 flushed, median of {args.runs}; ms, and each tile's fp32 verdict\n")
    print("| task | conv | cuDNN fp32 | cuDNN TF32 (not fp32) | " + " | ".join(TILES) + " | x to NHWC |")
    print("| --- | --- | --: | --: | " + " | ".join("--:" for _ in TILES) + " | --: |")
    for task in args.tasks:
        try:
            convs = [(m, x) for m, x in captured_convs(task) if isinstance(m, torch.nn.Conv2d) and m.groups == 1]
            for conv, x in convs:
                with torch.no_grad():
                    row = probe(lib, conv, x.contiguous(), args.runs, clocks, flusher)
                print(f"| {task.stem[:28]} | {row['conv']} | {row['cudnn_fp32']:.3f} | {row['cudnn_tf32']:.3f} | "
                      + " | ".join(cell(row[t]) for t in TILES) + f" | {row['to_nhwc']:.3f} |", flush=True)
        except Exception as err:  # one task's failure is a line, not the end of the probe
            print(f"| {task.stem[:28]} | failed: {type(err).__name__}: {str(err)[:200]} |", flush=True)


if __name__ == "__main__":
    main()
