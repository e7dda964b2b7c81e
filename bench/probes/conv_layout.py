"""Is cuDNN's convolution faster channels-last? Each convolution of the given tasks, in the layout the built-in
policy gives cuDNN (NCHW, contiguous) against channels-last (NHWC), at fp32 with TF32 off (device probe for
issue 20: Inductor turns convolutions channels-last; does that explain its lead on level2/21 and 85?).

    python3 bench/probes/conv_layout.py TASK.py... [--runs 30]

For each convolution module a task's Model calls (found with forward hooks, at the task's own input sizes):
  - nchw: F.conv*d of contiguous x and w, as cuDNN runs it for the policy now;
  - nhwc: the same with x and w already channels-last (cuDNN's NHWC kernels);
  - to_nhwc / to_nchw: the copies that would move x into channels-last and the result back.
Each timed by the harness's clock, L2 flushed before each call, median of --runs. Prints a markdown table.
"""
from __future__ import annotations

import argparse
import statistics
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")
from kernelsmith.harness.loading import load_module  # noqa: E402
from kernelsmith.harness.timing import Clocks, L2Flusher  # noqa: E402

CONVS = (torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)


def captured_convs(path: Path) -> list[tuple[torch.nn.Module, torch.Tensor]]:
    """(module, its input) for each convolution the task's forward calls, on the GPU."""
    module = load_module(path, f"task_{path.stem}")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).cuda().eval()
    found = []
    hooks = [m.register_forward_hook(lambda m, args, out: found.append((m, args[0])))
             for m in model.modules() if isinstance(m, CONVS)]
    with torch.no_grad():
        model(*[x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()])
    for hook in hooks:
        hook.remove()
    return found


def median_ms(fn, runs: int, clocks: Clocks, flusher: L2Flusher) -> float:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(runs):
        flusher.flush()
        samples.append(clocks.time_call(lambda _: fn(), [None])[0])
    return statistics.median(samples)


def layouts(conv: torch.nn.Module, x: torch.Tensor, runs: int, clocks: Clocks, flusher: L2Flusher) -> dict:
    last = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
    x_last = x.contiguous(memory_format=last)
    w_last = conv.weight.detach().contiguous(memory_format=last)
    with torch.no_grad():
        nchw_out = conv(x)
        saved = conv.weight.data
        conv.weight.data = w_last
        nhwc = median_ms(lambda: conv(x_last), runs, clocks, flusher)
        nhwc_out = conv(x_last)
        conv.weight.data = saved
        nchw = median_ms(lambda: conv(x), runs, clocks, flusher)
    return {"conv": f"{type(conv).__name__} x {list(x.shape)} w {list(conv.weight.shape)}", "nchw": nchw,
            "nhwc": nhwc, "nhwc_out_channels_last": nhwc_out.is_contiguous(memory_format=last),
            "to_nhwc": median_ms(lambda: x.contiguous(memory_format=last), runs, clocks, flusher),
            "to_nchw": median_ms(lambda: nhwc_out.contiguous(), runs, clocks, flusher),
            "max_abs_diff": (nhwc_out - nchw_out).abs().max().item()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tasks", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    clocks, flusher = Clocks("cuda"), L2Flusher("cuda")
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"fp32 (TF32 off), benchmark mode off; the harness's clock, L2 flushed, median of {args.runs}\n")
    print("| task | convolution | nchw ms | nhwc ms | nchw/nhwc | to_nhwc ms | to_nchw ms | out is NHWC | max diff |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for task in args.tasks:
        try:
            for conv, x in captured_convs(task):
                r = layouts(conv, x, args.runs, clocks, flusher)
                print(f"| {task.stem[:28]} | {r['conv']} | {r['nchw']:.3f} | {r['nhwc']:.3f} | "
                      f"{r['nchw'] / r['nhwc']:.2f} | {r['to_nhwc']:.3f} | {r['to_nchw']:.3f} | "
                      f"{r['nhwc_out_channels_last']} | {r['max_abs_diff']:.1e} |", flush=True)
        except Exception as err:  # one task's failure is a row
            print(f"| {task.stem[:28]} | failed: {type(err).__name__}: {str(err)[:200]} | | | | | | | |", flush=True)


if __name__ == "__main__":
    main()
