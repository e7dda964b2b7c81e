"""Why the judge's fixed fp32 bound passes TF32 on all-positive inputs, and what a zero-mean trial would see (CPU; the
evidence behind eval-methodology.md's "What it does not catch"). A 2048^3 GEMM of torch.rand operands (level1/1's
distribution) and of the same operands centered; TF32 emulated by rounding the operands' mantissas to 10 bits; an
honest kernel stood in for by the fp64 product rounded to fp32; each judged by harness/compare.py at fp32, beside
how far a 2^-20 relative jitter of the inputs moves the reference (the stressed trials' sensitivity widening, x64).

    python3 bench/probes/tf32_common_mode.py
"""
import torch
from kernelsmith.harness.compare import compare
torch.manual_seed(0)
def tf32(x):
    i = x.contiguous().view(torch.int32) + 0x1000
    return (i & ~0x1FFF).view(torch.float32)
N = 2048
for name, make in [("rand (level1/1)", lambda: torch.rand(N, N)), ("centered", lambda: torch.rand(N, N) - 0.5)]:
    a, b = make(), make()
    ref = a @ b
    exact = (a.double() @ b.double())
    t = tf32(a) @ tf32(b)
    honest = exact.float()
    j = lambda x: x * (1 + 2**-20 * torch.sign(torch.randn_like(x)))
    moved = (j(a) @ j(b) - ref).norm() / ref.norm()
    for what, c in [("TF32", t), ("honest fp64-rounded", honest)]:
        v = compare(c, ref, "fp32")
        print(f"{name:16s} {what:20s} ok={v['ok']} relL2={v['rel_l2_err']:.2e} max_tol_ratio={v['max_tol_ratio']:.2f}  jitter moves ref by {moved:.2e} (x64 = {64*moved:.2e})")
