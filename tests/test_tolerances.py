"""Correctness that means fp32 (docs/tolerances.md): scale-aware per-element bounds, an
aggregate relative L2 bound per precision, stressed trials, and ModelNew built under a seed
of its own.

The first part runs real evaluations (candidate and judge workers) on a task of our own with
four outputs, so that one evaluation judges a softmax, a GEMM with small outputs, a long scan
and an exp at once; each cheat changes one of them. The second part checks compare.py's
bounds against errors whose size is derived, and the pieces the trials are made of.
"""

from __future__ import annotations

import json
import math
import subprocess
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from kernelsmith.evaluation.evaluate import evaluate
from kernelsmith.evaluation.options import EvalOptions
from kernelsmith.evaluation.seeds import STRESSES, construct_seed, trial_seeds
from kernelsmith.harness import compare as cmp
from kernelsmith.harness import loading, verify

U = 2.0 ** -24  # fp32's unit roundoff

# softmax rows of 4096 (mean probability 2.4e-4, a third under 1e-4); a GEMM whose outputs
# have an RMS of 4e-4 (all under 3e-3); a scan of 65536 terms; exp of 1.3 * rand, which stays
# finite at x64 (exp(83)) but not when shifted by 128: that stressed trial is skipped
TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, a, b, c, d):
        return torch.softmax(x, dim=-1), a @ b, torch.cumsum(c, dim=-1), torch.exp(d)


def get_inputs():
    return [torch.randn(8, 4096), torch.randn(64, 1024) * 0.0035, torch.randn(1024, 64) * 0.0035,
            torch.randn(4, 65536) * 0.5, torch.rand(16, 64) * 1.3]


def get_init_inputs():
    return []
'''

KERNELS_C = r'''
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* row softmax in fp32; without subtract_max it is exp(x) / sum exp(x); entries below
   drop_below are written as 0 */
void softmax_rows(const float* x, float* y, long rows, long n, int subtract_max, float drop_below) {
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    float m = 0.0f, s = 0.0f;
    if (subtract_max) { m = -INFINITY; for (long i = 0; i < n; ++i) m = xr[i] > m ? xr[i] : m; }
    for (long i = 0; i < n; ++i) { yr[i] = expf(xr[i] - m); s += yr[i]; }
    for (long i = 0; i < n; ++i) { float p = yr[i] / s; yr[i] = p < drop_below ? 0.0f : p; }
  }
}

/* c = a @ b with k accumulated in order in fp32; or, with int8, both operands quantised per
   tensor (symmetric, scale max|x| / 127), accumulated exactly in int32 and scaled back */
void gemm(const float* a, const float* b, float* c, long m, long k, long n, int int8) {
  if (!int8) {
    for (long i = 0; i < m; ++i)
      for (long j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (long p = 0; p < k; ++p) acc += a[i * k + p] * b[p * n + j];
        c[i * n + j] = acc;
      }
    return;
  }
  float ma = 0.0f, mb = 0.0f;
  for (long i = 0; i < m * k; ++i) ma = fabsf(a[i]) > ma ? fabsf(a[i]) : ma;
  for (long i = 0; i < k * n; ++i) mb = fabsf(b[i]) > mb ? fabsf(b[i]) : mb;
  float sa = ma / 127.0f, sb = mb / 127.0f;
  int8_t* qa = malloc((size_t)(m * k)); int8_t* qb = malloc((size_t)(k * n));
  for (long i = 0; i < m * k; ++i) qa[i] = (int8_t)lrintf(a[i] / sa);
  for (long i = 0; i < k * n; ++i) qb[i] = (int8_t)lrintf(b[i] / sb);
  for (long i = 0; i < m; ++i)
    for (long j = 0; j < n; ++j) {
      int32_t acc = 0;
      for (long p = 0; p < k; ++p) acc += (int32_t)qa[i * k + p] * qb[p * n + j];
      c[i * n + j] = (float)acc * sa * sb;
    }
  free(qa); free(qb);
}

/* a scan in another order than torch's: sequential fp32 within blocks of 256, each block then
   offset by the fp32 sum of the block totals before it (as a GPU scan is done) */
void cumsum_blocked(const float* x, float* y, long rows, long n) {
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    float carry = 0.0f;
    for (long lo = 0; lo < n; lo += 256) {
      long hi = lo + 256 < n ? lo + 256 : n;
      float s = 0.0f;
      for (long i = lo; i < hi; ++i) { s += xr[i]; yr[i] = s; }
      for (long i = lo; i < hi; ++i) yr[i] += carry;
      carry += s;
    }
  }
}

void exp_all(const float* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = expf(x[i]); }
'''

PRELUDE = '''
import ctypes
from pathlib import Path

import torch
import torch.nn as nn

_lib = ctypes.CDLL(str(Path(__file__).parent / "libtol.so"))
_L = ctypes.c_long


def _p(t):
    return ctypes.c_void_p(t.data_ptr())


def softmax(x, subtract_max=True, drop_below=0.0):
    y = torch.empty_like(x)
    _lib.softmax_rows(_p(x), _p(y), _L(x.shape[0]), _L(x.shape[1]), ctypes.c_int(int(subtract_max)),
                      ctypes.c_float(drop_below))
    return y


def gemm(a, b, int8=False):
    c = torch.empty(a.shape[0], b.shape[1])
    _lib.gemm(_p(a), _p(b), _p(c), _L(a.shape[0]), _L(a.shape[1]), _L(b.shape[1]), ctypes.c_int(int(int8)))
    return c


def cumsum(x):
    y = torch.empty_like(x)
    _lib.cumsum_blocked(_p(x), _p(y), _L(x.shape[0]), _L(x.shape[1]))
    return y


def exp(x):
    y = torch.empty_like(x)
    _lib.exp_all(_p(x), _p(y), _L(x.numel()))
    return y
'''


def body(softmax_args: str = "", gemm_args: str = "") -> str:
    return f'''
class ModelNew(nn.Module):
    def forward(self, x, a, b, c, d):
        return softmax(x{softmax_args}), gemm(a, b{gemm_args}), cumsum(c), exp(d)
'''


@pytest.fixture(scope="module")
def tol_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tolerances")
    (root / "model.py").write_text(TASK)
    (root / "kernels.c").write_text(KERNELS_C)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(root / "kernels.c"), "-o", str(root / "libtol.so"), "-lm"],
                   check=True)
    return root


def evaluate_body(root: Path, text: str, **options):
    path = root / f"cand_{uuid.uuid4().hex[:8]}.py"
    path.write_text(PRELUDE + textwrap.dedent(text))
    opts = EvalOptions(**{"device": "cpu", "profile": False, **options})
    return evaluate(root / "model.py", path, opts)


def normal(result) -> list[dict]:
    return [t for t in result.trials if t["stress"] is None]


def stressed(result) -> dict[str, dict]:
    return {t["stress"]: t for t in result.trials if t["stress"] is not None}


# --- real evaluations ---------------------------------------------------------------------------

def test_honest_kernels_pass_every_trial_and_the_stressed_ones(tol_dir):
    """Softmax with the max subtracted, a GEMM with k in order, a blocked scan of 65536, expf:
    other orders than torch's, all within the fp32 bounds; the stressed trial whose reference
    overflows is skipped, not failed."""
    result = evaluate_body(tol_dir, body(), seed=5)
    assert result.clean, result.error
    assert len(normal(result)) == 5 and all(t["ok"] is True for t in normal(result))
    extra = stressed(result)
    assert set(extra) == {s["name"] for s in STRESSES}
    assert extra["scaled x64"]["ok"] is True
    skipped = extra["shifted +128 rms"]
    assert skipped["ok"] is None and "not finite" in skipped["skipped"]
    for trial in normal(result):  # the statistics that later measurements read
        assert trial["rel_l2_err"] < cmp.TOLERANCES["fp32"].rel_l2 and 0 < trial["max_tol_ratio"] < 1
        assert [o["ref_rms"] > 0 for o in trial["outputs"]] == [True] * 4
        assert trial["outputs"][1]["ref_rms"] < 1e-3  # the GEMM's outputs are small...
        assert 0 < trial["outputs"][1]["rel_l2_err"] < 1e-5  # ...and the honest one is fp32-accurate


def test_softmax_that_zeroes_probabilities_under_1e_4_fails(tol_dir):
    result = evaluate_body(tol_dir, body(softmax_args=", drop_below=1e-4"), seed=5, trials=1)
    assert not result.correct and result.reward == -1
    assert "trial 1 of 1" in result.error and "output 0" in result.error and "outside atol=" in result.error
    assert result.trials[0]["max_abs_err"] < 1e-4  # v2's absolute atol of 1e-4 passed it


def test_int8_gemm_with_small_outputs_fails(tol_dir):
    result = evaluate_body(tol_dir, body(gemm_args=", int8=True"), seed=5, trials=1)
    assert not result.correct and result.reward == -1
    assert "output 1" in result.error and "outside atol=" in result.error
    first = result.trials[0]
    assert first["max_abs_err"] < 1e-4 and first["outputs"][1]["rel_l2_err"] > 3e-3  # v2 passed it


def test_softmax_without_max_subtraction_fails_on_stressed_inputs(tol_dir):
    """exp(x) / sum exp(x) is right on randn rows; at 64 x the exp overflows to Inf and the
    output is NaN. (One normal trial: the stressed ones come on top of what --trials asks.)"""
    result = evaluate_body(tol_dir, body(softmax_args=", subtract_max=False"), seed=5, trials=1)
    assert not result.correct and result.reward == -1
    assert all(t["ok"] is True for t in normal(result))  # the normal trials cannot tell
    assert result.error.startswith("wrong output on stressed inputs (scaled x64)"), result.error
    assert "NaN" in result.error
    assert stressed(result)["scaled x64"]["ok"] is False


def test_model_new_is_not_built_under_a_seed_it_can_predict(candidate, run_eval):
    """A ModelNew that behaves only when built under the fixed seed 0 (the seed v2 built it
    under, whatever CONSTRUCT_SEED_OFFSET said): it draws its weights at construction
    expecting a known stream. Built under a seed of its own, it fails."""
    result = run_eval(candidate('''
        class ModelNew(Base):
            def __init__(self, n):
                super().__init__(n)
                self.built_under = torch.initial_seed()

            def forward(self, x):
                if self.built_under == 0:
                    return kernel("axpb", x, self.bias)
                return kernel("axpb_half", x, self.bias)
    '''), trials=1)
    assert not result.correct and "wrong output in trial 1 of 1" in result.error, result.error


# --- compare.py's bounds, against errors of a derived size -----------------------------------

def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def verdict(cand, ref, precision="fp32", stressed=False) -> dict:
    return cmp.compare(cand, ref, precision, stressed=stressed)


def test_the_fp32_bounds_sit_between_derived_honest_and_lowered_precision_errors():
    """An honest fp32 dot product of length K, summed in any order, is off by about
    u * sqrt(K / 3) of its RMS (K roundings within +-u each, random signs); at K = 8192 that is
    3.1e-6, and its largest element over 4096 outputs is ~4 sigma. TF32 rounds both operands to
    10 mantissa bits: sqrt(2) * 2^-11 / sqrt(3) = 4e-4 relative. The bounds sit between them
    with a margin of at least 3 on either side."""
    fp32 = cmp.TOLERANCES["fp32"]
    honest_rel = U * math.sqrt(8192 / 3)
    tf32_rel = math.sqrt(2) * 2.0 ** -11 / math.sqrt(3)
    assert 3 * honest_rel < fp32.rel_l2 < tf32_rel / 3
    assert 3 * 4.5 * honest_rel < fp32.atol  # the largest element, against the RMS-relative atol
    # a batch norm after the GEMM (level2/41 of the dev tasks) amplifies both by ~5: the exact
    # answer is 1.6e-5 from the fp32 reference there, measured on the H200
    assert 5 * honest_rel < fp32.rel_l2 / 2
    ref = torch.randn(64, 64, generator=gen(1), dtype=torch.float64)
    honest = ref + honest_rel * ref.square().mean().sqrt() * torch.randn(64, 64, generator=gen(2), dtype=torch.float64)
    tf32 = ref * (1 + tf32_rel * torch.randn(64, 64, generator=gen(3), dtype=torch.float64))
    assert verdict(honest.float(), ref.float())["ok"]
    assert not verdict(tf32.float(), ref.float())["ok"]


def seq_fma_gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """k in order, fp32 accumulator, each product added unrounded (an FMA): a naive kernel."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        acc = (acc.double() + a[:, k:k + 1].double() * b[k:k + 1, :].double()).float()
    return acc


def tf32_round(x: torch.Tensor) -> torch.Tensor:
    i = x.contiguous().view(torch.int32)
    return ((i + 0xFFF + ((i >> 13) & 1)) & ~0x1FFF).view(torch.float32)


def test_gemm_with_k_8192_honest_orders_pass_and_lowered_precision_fails():
    a = torch.randn(32, 8192, generator=gen(4))
    b = torch.randn(8192, 32, generator=gen(5))
    ref = a @ b
    for honest in ((a.double() @ b.double()).float(), seq_fma_gemm(a, b),
                   sum(a[:, k:k + 512] @ b[k:k + 512] for k in range(0, 8192, 512))):
        v = verdict(honest, ref)
        assert v["ok"] and v["rel_l2_ratio"] < 0.5 and v["max_tol_ratio"] < 0.5, v
    for lowered in (tf32_round(a) @ tf32_round(b), a.bfloat16().float() @ b.bfloat16().float()):
        v = verdict(lowered, ref)
        assert not v["ok"] and v["rel_l2_err"] > 4 * cmp.TOLERANCES["fp32"].rel_l2


def test_the_verdict_does_not_depend_on_the_outputs_scale():
    """The absolute part is relative to the reference's RMS: the same relative error gets the
    same verdict at 1e-6 as at 1e6 (v2's absolute atol passed anything under 1e-4)."""
    ref = torch.randn(256, 64, generator=gen(6), dtype=torch.float64)
    ref[0, 0] = 0.0
    off = torch.zeros_like(ref)
    off[0, 0] = 2 * cmp.TOLERANCES["fp32"].atol  # one element, where the reference is 0, off by 2 atol x rms
    for scale in (1e-6, 1.0, 1e6):
        assert not verdict((ref + off).mul(scale).float(), ref.mul(scale).float())["ok"]
        assert verdict((ref + off / 4).mul(scale).float(), ref.mul(scale).float())["ok"]


def test_int8_gemm_with_small_outputs_fails_though_under_an_absolute_1e_4():
    a = torch.randn(64, 1024, generator=gen(7)) * 0.0035
    b = torch.randn(1024, 64, generator=gen(8)) * 0.0035
    ref = a @ b
    sa, sb = a.abs().max() / 127, b.abs().max() / 127
    int8 = ((torch.round(a / sa).double() @ torch.round(b / sb).double()) * (sa * sb).double()).float()
    assert float((int8 - ref).abs().max()) < 1e-4 and float(ref.abs().max()) < 3e-3
    v = verdict(int8, ref)
    assert not v["ok"] and v["rel_l2_err"] > 3e-3


def test_softmax_dropping_small_probabilities_fails_and_an_online_softmax_passes():
    x = torch.randn(4, 32768, generator=gen(9))
    ref = torch.softmax(x, -1)
    dropped = torch.where(ref < 1e-6, torch.zeros_like(ref), ref)
    assert float((dropped - ref).abs().max()) < 1e-6
    assert not verdict(dropped, ref)["ok"]
    m, s = torch.full((4, 1), -math.inf), torch.zeros(4, 1)
    for lo in range(0, 32768, 1024):  # flash-style: running max, rescaled running sum
        block = x[:, lo:lo + 1024]
        new_m = torch.maximum(m, block.amax(-1, keepdim=True))
        s = s * torch.exp(m - new_m) + torch.exp(block - new_m).sum(-1, keepdim=True)
        m = new_m
    assert verdict(torch.exp(x - m) / s, ref)["ok"]


def test_long_scans_in_any_order_pass_and_the_bound_covers_their_length():
    """A sequential fp32 scan's error at position k grows like u * sqrt(sum_j S_j^2), about
    u * k * sigma / sqrt(6) for a random walk, i.e. u * sqrt(n / 3) of the output's RMS at the
    end: 8.5e-6 of the RMS at n = 65536, under atol = 1e-4 of it, and the aggregate
    (u * sqrt(n / 6) ~ 6e-6) under 1e-5."""
    n = 65536
    assert 3 * U * math.sqrt(n / 3) < cmp.TOLERANCES["fp32"].atol
    x = torch.randn(4, n, generator=gen(10)) * 0.5
    ref = torch.cumsum(x, -1)
    sequential = torch.from_numpy(np.add.accumulate(x.numpy(), axis=-1, dtype=np.float32))
    v = verdict(sequential, ref)
    assert v["ok"] and v["max_tol_ratio"] < 0.5, v
    assert not verdict(torch.cumsum(x.bfloat16().float(), -1), ref)["ok"]


def test_a_systematic_error_under_every_per_element_bound_fails_the_aggregate():
    ref = torch.randn(4096, generator=gen(11))
    v = verdict(ref * (1 + 2e-4), ref)  # 2e-4 on every element: per element fine, but systematic
    assert not v["ok"] and v["max_tol_ratio"] < 1 and v["reason"].startswith("relative L2 error")


def test_an_all_zero_reference_needs_zeros():
    ref = torch.zeros(100)
    assert verdict(torch.zeros(100), ref)["ok"]
    assert not verdict(torch.full((100,), 1e-20), ref)["ok"]


def test_stressed_bounds_allow_conditioning_and_still_catch_overflow():
    """On inputs shifted by 128 of their RMS, layer norm's problem is 128 times worse
    conditioned: a one-pass variance (E[x^2] - E[x]^2, honest) is ~1e-3 off, over the fp32
    bound but inside the stressed one; NaN from an overflow fails either way."""
    x = torch.randn(64, 1024, generator=gen(12)) + 128.0
    ref = torch.nn.functional.layer_norm(x, (1024,))
    mean = x.mean(-1, keepdim=True)
    one_pass = (x - mean) * torch.rsqrt((x * x).mean(-1, keepdim=True) - mean * mean + 1e-5)
    assert not verdict(one_pass, ref)["ok"]
    assert verdict(one_pass, ref, stressed=True)["ok"]
    nan = one_pass.clone()
    nan[3, 5] = math.nan
    assert not verdict(nan, ref, stressed=True)["ok"]
    garbage = torch.randn(64, 1024, generator=gen(13))
    assert not verdict(garbage, ref, stressed=True)["ok"]


def test_the_references_own_sensitivity_widens_stressed_bounds():
    """Where a jitter of the inputs by 8 ulps moves the reference by 1%, the problem is that
    ill-conditioned there (a GRU in saturation), and honest kernels differ by more than the
    floor allows; where the jittered reference overflows, only Inf and NaN are judged."""
    ref = torch.randn(1024, generator=gen(19))
    moved = ref * (1 + 0.01 * torch.randn(1024, generator=gen(20)))
    cand = ref * (1 + 0.1 * torch.randn(1024, generator=gen(21)))
    assert not verdict(cand, ref, stressed=True)["ok"]
    wide = cmp.compare(cand, ref, "fp32", stressed=True, jittered=moved)
    assert wide["ok"] and wide["sensitivity_l2"] == pytest.approx(0.01, rel=0.1)
    assert not cmp.compare(torch.full_like(ref, 7.0), ref, "fp32", stressed=True, jittered=moved)["ok"]
    overflowed = moved.clone()
    overflowed[0] = math.inf
    assert cmp.compare(cand * 3, ref, "fp32", stressed=True, jittered=overflowed)["ok"]
    nan = cand.clone()
    nan[1] = math.nan
    assert not cmp.compare(nan, ref, "fp32", stressed=True, jittered=overflowed)["ok"]


def test_half_precision_is_judged_against_the_fp32_answer_with_room_for_eager():
    """bf16 eager rounds every partial sum of a scan to bf16, so a long cumsum stagnates (1.7
    relative L2 on the dev task level1/89): a kernel that accumulates in fp32 is right and must
    pass; one that rounds like eager on a short chain passes too; zeros do not."""
    x = torch.rand(4, 2048, generator=gen(22)).bfloat16()
    eager, running = torch.empty_like(x), torch.zeros(4, dtype=torch.bfloat16)
    for i in range(x.shape[1]):  # every partial sum rounded to bf16, as CUDA's bf16 cumsum gave
        running = running + x[:, i]
        eager[:, i] = running
    accurate = torch.cumsum(x.float(), -1)
    assert cmp.sensitivity(eager, accurate.bfloat16())[0] > 0.05  # eager is far off here
    assert cmp.compare(accurate.bfloat16(), eager, "bf16", accurate=accurate)["ok"]
    assert not cmp.compare(torch.zeros_like(eager), eager, "bf16", accurate=accurate)["ok"]
    lin = torch.randn(256, 256, generator=gen(23)).bfloat16() / 16
    y = torch.randn(64, 256, generator=gen(24)).bfloat16()
    chain = torch.nn.functional.layer_norm(torch.nn.functional.gelu(y @ lin), (256,))  # eager bf16
    exact = torch.nn.functional.layer_norm(torch.nn.functional.gelu(y.float() @ lin.float()), (256,))
    v = cmp.compare(chain.clone(), chain, "bf16", accurate=exact)
    assert v["ok"] and 0 < v["eager_rel_l2"] < cmp.TOLERANCES["bf16"].rel_l2
    e4m3 = lambda t: tf32_round_bits(t.float(), 3)  # noqa: E731
    fp8 = torch.nn.functional.layer_norm(torch.nn.functional.gelu(e4m3(y) @ e4m3(lin)), (256,)).bfloat16()
    assert not cmp.compare(fp8, chain, "bf16", accurate=exact)["ok"]


def tf32_round_bits(x: torch.Tensor, bits: int) -> torch.Tensor:
    drop = 23 - bits
    i = x.contiguous().view(torch.int32)
    return ((i + (1 << (drop - 1)) - 1 + ((i >> drop) & 1)) & ~((1 << drop) - 1)).view(torch.float32)


def test_stressed_half_precision_checks_only_inf_and_nan_and_stays_json():
    ref = torch.randn(256, generator=gen(14)).bfloat16()
    off = verdict(ref * 1.5, ref, "bf16", stressed=True)
    assert off["ok"]
    json.dumps(off, allow_nan=False)  # unbounded tolerances are null, not Infinity
    inf = ref.clone()
    inf[0] = math.inf
    assert not verdict(inf, ref, "bf16", stressed=True)["ok"]


def test_tf32_mode_passes_plain_fp32_and_truncated_tf32_and_fails_int8():
    """The tf32 reference rounds the operands to nearest; a kernel that does not use TF32 at all,
    or one whose tensor cores truncate, is as right as it."""
    a = torch.randn(64, 1024, generator=gen(15))
    b = torch.randn(1024, 64, generator=gen(16))
    ref = tf32_round(a) @ tf32_round(b)
    truncated = (a.view(torch.int32) & ~0x1FFF).view(torch.float32) @ (b.view(torch.int32) & ~0x1FFF).view(torch.float32)
    assert verdict(a @ b, ref, "tf32")["ok"] and verdict(truncated, ref, "tf32")["ok"]
    sa, sb = a.abs().max() / 127, b.abs().max() / 127
    int8 = (torch.round(a / sa) @ torch.round(b / sb)) * (sa * sb)
    assert not verdict(int8, ref, "tf32")["ok"]


# --- how trials are made ------------------------------------------------------------------------

def test_trials_are_the_asked_normal_ones_then_the_stressed_ones():
    trials = trial_seeds(5, 42)
    assert [t["stress"] for t in trials[:5]] == [None] * 5
    assert [t["stress"]["name"] for t in trials[5:]] == [s["name"] for s in STRESSES]
    assert trial_seeds(5, 42) == trials and trial_seeds(0, 42) == []
    assert len({t["inputs"] for t in trials}) == len(trials)


def test_stress_inputs_scales_and_shifts_floating_inputs_only():
    x = torch.randn(16, 32, generator=gen(17)) * 3.0
    ints, mask = torch.arange(10), torch.rand(10, generator=gen(18)) > 0.5
    pristine = x.clone()
    scaled = verify.stress_inputs([x, ints, mask, 0.5], STRESSES[0])
    assert torch.equal(scaled[0], x * 64) and scaled[1] is ints and scaled[2] is mask and scaled[3] == 0.5
    shifted = verify.stress_inputs([x], STRESSES[1])[0]
    rms = float(x.double().square().mean().sqrt())
    assert torch.equal(shifted, x + 128 * 2.0 ** round(math.log2(rms)))  # a power of two: same in every worker
    assert torch.equal(x, pristine)  # the seeded input itself is not touched
    assert torch.equal(verify.stress_inputs([x.clone()], STRESSES[1])[0], shifted)


def test_model_new_is_constructed_under_a_seed_no_trial_uses():
    trials = trial_seeds(5, 7)
    seed = construct_seed(trials)
    assert seed not in {t["weights"] for t in trials} | {t["inputs"] for t in trials} | {0}
    assert seed == construct_seed(trials) and seed != construct_seed(trial_seeds(5, 8))
    assert all(abs(seed - t["weights"]) > 10**6 for t in trials)  # not an offset of one


def test_init_inputs_leaves_the_callers_seed_in_place():
    class Task:
        @staticmethod
        def get_init_inputs():
            return [torch.randn(2)]

    torch.manual_seed(1234)
    first = loading.init_inputs(Task)
    after = torch.randn(3)
    torch.manual_seed(1234)
    assert torch.equal(after, torch.randn(3)) and torch.initial_seed() == 1234
    torch.manual_seed(99)
    assert torch.equal(loading.init_inputs(Task)[0], first[0])  # the same arguments whatever the caller's seed
