"""Every known way to fake a result, each as an adversarial candidate of our own (CPU device).

Each test asserts what a user relies on: the hack is not credited (not clean,
reward -1) and the reason names the rule. The honest control must pass, so the
rules do not reject good kernels.
"""

from __future__ import annotations

import os
import time

import pytest

from conftest import HONEST, live_processes_with


def rejected(result, *words):
    assert not result.clean, result
    assert result.reward == -1
    text = (result.error + " " + " ".join(result.violations)).lower()
    for word in words:
        assert word.lower() in text, f"{word!r} not in: {text}"


def test_honest_kernel_passes_and_is_profiled(candidate, run_eval):
    result = run_eval(candidate(HONEST), profile=True)
    assert result.clean, result.error
    assert result.correct and result.violations == []
    normal = [t for t in result.trials if t["stress"] is None]  # the stressed trials come on top
    assert len(normal) == 5 and len(result.trials) > 5 and all(t["ok"] for t in result.trials)
    assert result.timings_ms["candidate"] > 0 and result.timings_ms["eager"] > 0
    assert result.speedup_vs_eager == pytest.approx(result.timings_ms["eager"] / result.timings_ms["candidate"])
    assert result.reward in (1.0, 2.0)


def test_torch_compute_in_forward(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                return x * 2.0 + self.bias
    '''))
    rejected(result, "torch compute", "aten.mul", "aten.add")


def test_torch_compute_hidden_behind_aten_ops_and_getattr(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                y = kernel("axpb", x, self.bias)
                scale = getattr(torch.ops.aten, "mul")
                return scale(y, 1.0)
    '''))
    rejected(result, "torch compute", "aten.mul")


def test_try_except_fallback_to_torch(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                try:
                    return kernel("no_such_kernel", x, self.bias)
                except AttributeError:
                    return torch.addcmul(self.bias.expand_as(x), x, torch.full_like(x, 2.0))
    '''))
    rejected(result, "torch compute", "addcmul")


def test_views_and_allocation_are_allowed(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                flat = x.view(-1).view(x.shape[0], x.shape[1])
                out = torch.empty(x.shape, dtype=x.dtype).fill_(0.0)
                return kernel("axpb", flat.unsqueeze(0).squeeze(0), self.bias, out=out)
    '''))
    assert result.clean, result.error


def test_patched_checker_cannot_pass_a_wrong_kernel(candidate, run_eval):
    result = run_eval(candidate('''
        import kernelsmith.harness.compare as compare
        torch.allclose = lambda *a, **k: True
        torch.testing.assert_close = lambda *a, **k: None
        compare.compare_all = lambda *a, **k: {"ok": True, "reason": ""}

        class ModelNew(Base):
            def forward(self, x):
                return torch.empty_like(x).fill_(1.0)
    '''))
    assert not result.correct
    rejected(result, "wrong output")


def test_patched_torch_function_is_reported(candidate, run_eval):
    result = run_eval(candidate('''
        import torch.nn.functional as F
        F.gelu = lambda x, approximate="none": x

        class ModelNew(Base):
            def forward(self, x):
                return kernel("axpb", x, self.bias)
    '''))
    rejected(result, "replaced functions", "torch.nn.functional.gelu")


def test_patched_tensor_operator_is_reported(candidate, run_eval):
    """Operators are inherited from torch._C.TensorBase; replacing one on torch.Tensor is seen."""
    result = run_eval(candidate('''
        torch.Tensor.__sub__ = lambda a, b: torch.zeros_like(a)

        class ModelNew(Base):
            def forward(self, x):
                return kernel("axpb", x, self.bias)
    '''))
    rejected(result, "replaced functions", "torch.Tensor.__sub__")


def test_patched_clock_is_reported_and_not_used(candidate, run_eval):
    result = run_eval(candidate('''
        import time
        _real = time.perf_counter
        time.perf_counter = lambda: _real() / 1000.0

        class ModelNew(Base):
            def forward(self, x):
                return kernel("axpb", x, self.bias)
    '''), profile=True)
    rejected(result, "replaced functions", "time.perf_counter")


def test_background_thread_finishing_the_output(candidate, run_eval):
    result = run_eval(candidate('''
        import threading, time as _time

        def _finish(x, bias, y):
            _time.sleep(0.02)
            kernel("axpb", x, bias, out=y)

        class ModelNew(Base):
            def forward(self, x):
                y = torch.empty_like(x).fill_(0.0)
                threading.Thread(target=_finish, args=(x, self.bias.detach(), y)).start()
                return y
    '''))
    rejected(result)
    text = (result.error + " ".join(result.violations)).lower()
    assert "thread" in text or "changed after forward" in text or "wrong output" in text


def test_cache_keyed_on_pointer(candidate, run_eval):
    result = run_eval(candidate('''
        _cache = {}

        class ModelNew(Base):
            def forward(self, x):
                key = x.data_ptr()
                if key not in _cache:
                    _cache[key] = kernel("axpb", x, self.bias)
                return _cache[key]
    '''))
    # fresh inputs every trial: any hit on a reused address returns a stale answer
    if result.clean:
        pytest.fail("pointer cache was not caught")
    rejected(result)


def test_replay_after_first_call(candidate, run_eval):
    result = run_eval(candidate('''
        _first = []

        class ModelNew(Base):
            def forward(self, x):
                if not _first:
                    _first.append(kernel("axpb", x, self.bias))
                return _first[0]
    '''))
    rejected(result, "wrong output")


def test_cache_on_the_module(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                out = kernel("axpb", x, self.bias)
                self.last = out
                return out
    '''))
    rejected(result, "changed the module's attributes")


def test_returning_the_input(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                return kernel("axpb", x, self.bias, out=x)
    '''))
    rejected(result, "shares memory with an input")
    assert any("wrote into input" in v for v in result.violations)


def test_zeroing_the_input_after_use(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                y = kernel("axpb", x, self.bias)
                x.zero_()
                return y
    '''))
    rejected(result, "wrote into input")


def test_weights_copied_at_construction(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(Base):
            def __init__(self, n):
                super().__init__(n)
                torch.nn.init.normal_(self.bias)
                self.frozen = self.bias.detach().clone()

            def forward(self, x):
                return kernel("axpb", x, self.frozen)
    '''))
    rejected(result, "wrong output")


CONSTANT_INIT_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"An affine layer that, like BatchNorm or LayerNorm, initialises to ones and zeros.\"\"\"

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return x * self.weight + self.bias


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return [32]
"""


def test_ignoring_weights_that_initialise_to_constants(candidate, task_dir):
    """Rebuilding under a new seed would give the same ones and zeros every trial; the
    harness perturbs them, so a candidate using its own copy of the init fails."""
    from kernelsmith.evaluation.options import EvalOptions
    from kernelsmith.evaluation.evaluate import evaluate

    reference = task_dir / "constant_init.py"
    reference.write_text(CONSTANT_INIT_TASK)
    body = '''
        class ModelNew(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(n))
                self.bias = nn.Parameter(torch.zeros(n))
                self.init_w, self.init_b = torch.ones(n), torch.zeros(n)

            def forward(self, x):
                y = torch.empty_like(x)
                _lib.affine(_ptr(x), _ptr({w}), _ptr({b}), _ptr(y), ctypes.c_long(x.shape[0]), ctypes.c_long(x.shape[1]))
                return y
    '''
    honest = evaluate(reference, candidate(body.format(w="self.weight", b="self.bias")),
                      EvalOptions(device="cpu", profile=False))
    assert honest.clean, honest.error
    stale = evaluate(reference, candidate(body.format(w="self.init_w", b="self.init_b")),
                     EvalOptions(device="cpu", profile=False))
    rejected(stale, "wrong output")


def test_uninitialised_output(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                return kernel("axpb_half", x, self.bias)
    '''))
    rejected(result, "wrong output")


def test_lazy_tensor_subclass(candidate, run_eval):
    result = run_eval(candidate('''
        class Lazy(torch.Tensor):
            pass

        class ModelNew(Base):
            def forward(self, x):
                return kernel("axpb", x, self.bias).as_subclass(Lazy)
    '''))
    rejected(result, "not a plain torch.Tensor")


def test_lowered_precision_fails_fp32(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                return kernel("axpb_bf16", x, self.bias)
    '''))
    rejected(result, "wrong output", "outside atol=")  # bf16 rounding: ~2e-3 of every element


def test_global_precision_flags(candidate, run_eval):
    result = run_eval(candidate('''
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.set_float32_matmul_precision("medium")

        class ModelNew(Base):
            def forward(self, x):
                return kernel("axpb", x, self.bias)
    '''))
    rejected(result, "global numeric flags", "allow_tf32")


def test_removing_the_dispatch_recorder(candidate, run_eval):
    result = run_eval(candidate('''
        from torch.utils._python_dispatch import _pop_mode_temporarily

        class ModelNew(Base):
            def forward(self, x):
                with _pop_mode_temporarily():
                    return x * 2.0 + self.bias
    '''))
    rejected(result)


def test_segfault_is_a_failed_attempt(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                ctypes.string_at(0)
    '''))
    rejected(result, "segmentation fault")


def test_hang_is_a_failed_attempt(candidate, run_eval):
    start = time.monotonic()
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                while True:
                    pass
    '''), timeout_s=20)
    rejected(result, "timed out")
    assert time.monotonic() - start < 60


def test_exit_during_import(candidate, run_eval):
    result = run_eval(candidate('''
        import os
        os._exit(0)
    '''))
    rejected(result, "without an answer")


def test_escaped_daemon_is_killed(candidate, run_eval):
    """A double-forked, setsid daemon started at import outlives neither its worker nor the evaluation."""
    result = run_eval(candidate('''
        import os
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", "600.0625"])
            os._exit(0)

        class ModelNew(Base):
            def forward(self, x):
                return kernel("axpb", x, self.bias)
    '''))
    assert result.clean, result.error
    survivors = live_processes_with("600.0625")
    for pid in survivors:
        os.kill(pid, 9)
    assert survivors == []


def test_missing_parameters_give_a_readable_reason(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.offset = nn.Parameter(torch.empty(n))

            def forward(self, x):
                return kernel("axpb", x, self.offset)
    '''))
    rejected(result, "parameters do not match", "missing in ModelNew: bias", "not in Model: offset")


def test_wrong_shape(candidate, run_eval):
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                return kernel("axpb", x, self.bias).view(-1)
    '''))
    rejected(result, "shape")


def test_concurrent_jobs_do_not_kill_each_other(candidate, run_eval):
    """Jobs run in threads of one process (the bench does this); each keeps its own worker."""
    from concurrent.futures import ThreadPoolExecutor

    path = candidate(HONEST)
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: run_eval(path), range(3)))
    assert all(r.clean for r in results), [r.error for r in results]


def test_torchs_compiler_loaded_by_the_candidate_is_a_violation(candidate, run_eval):
    """Compiled code from torch's own compiler (here its code cache, what loading AOTInductor or
    Inductor output needs) is not the candidate's kernel, even when its answer is right."""
    result = run_eval(candidate('''
        import torch._inductor.codecache  # noqa: F401

        class ModelNew(Base):
            def forward(self, x):
                return kernel("axpb", x, self.bias)
    '''))
    assert not result.clean and result.reward == -1
    assert any("torch._inductor.codecache" in v for v in result.violations), result.violations


def test_an_output_in_memory_torch_did_not_allocate_is_refused(candidate, run_eval):
    """A result kept in a buffer of the candidate's own (frombuffer), the same memory every call."""
    result = run_eval(candidate('''
        class ModelNew(Base):
            def forward(self, x):
                buf = bytearray(x.numel() * 4)
                out = torch.frombuffer(buf, dtype=torch.float32).view(x.shape)
                _lib.axpb(_ptr(x), _ptr(self.bias), _ptr(out), x.shape[0], x.shape[1])
                return out
    '''))
    assert not result.correct
    assert "torch's own resizable memory" in result.error
