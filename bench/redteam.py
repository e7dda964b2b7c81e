"""Red team: candidates written against the harness's ideas, scored by the real evaluation; a verdict each.

    python bench/redteam.py --device cuda [--only NAME,...] [--out DIR]

Every candidate starts from the honest example kernel (examples/bias_gelu_scale/<device>/, one build
shared by all) and adds one attack in Python: an output that computes when read, clocks or the
harness's own timer patched from inside the process, eager slowed down in the candidate's process,
torch's compiler as the kernel, an output cache that starts once the timed runs begin, the output
finished in the harness's own checksum step, answers computed as the harness draws the inputs.
"caught" means the result was not credited as a faster correct kernel: rejected, failed, or
contended; "no gain" that it was credited no faster than the honest kernel (its work outside the
timed window charged to it), which also defeats the attack.
Prints a table and writes redteam.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelsmith.evaluation.evaluate import evaluate  # noqa: E402
from kernelsmith.evaluation.options import EvalOptions  # noqa: E402

EXAMPLE = ROOT / "examples" / "bias_gelu_scale"
HONEST = "return ext.bias_gelu_scale(x, self.bias, self.scale, 0)"

HEADER = '''import torch
import torch.nn as nn
from kernelsmith.ext import load_kernels

ext = load_kernels()
'''

MODEL = '''
class ModelNew(nn.Module):
    def __init__(self, n_features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n_features))
        self.scale = scale

    def forward(self, x):
        {body}
'''

TIMED = '''
import sys
def _timed():
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "time_call":
            return True
        frame = frame.f_back
    return False
'''  # whether the harness is timing this call: its timer's frame is on the stack

BESIDE = '''
import concurrent.futures, sys, threading
_thread, _side = concurrent.futures.ThreadPoolExecutor(1), []
class _Once(threading.Thread):  # a thread for one draw, gone before the parent reads the threads again
    def __init__(self, fn, *args):
        super().__init__(daemon=True)
        self.fn, self.args = fn, args
        self.start()
    def run(self):
        self.value = self.fn(*self.args)
    def result(self):
        self.join()
        return self.value
_submit = SUBMIT
_ready, _model = {}, []
def _answer(x, m):
    return ext.bias_gelu_scale(x, m.bias, m.scale, 0)
def _hook(frame, event, arg):
    if event != "return" or frame.f_code.co_name != "next" or not _model:
        return
    caller = frame.f_back
    if caller is None or caller.f_code.co_name != "interleave" or caller.f_locals.get("name") not in DRAWS:
        return
    x, m = arg[0], _model[0]
    if not x.is_cuda:
        _ready[x.data_ptr()] = (x, _submit(_answer, x, m))
        return
    _side[:] = _side or [torch.cuda.Stream()]
    _side[0].wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side[0]):
        out, done = _answer(x, m), torch.cuda.Event()
        done.record()
    _ready[x.data_ptr()] = (x, (out, done))
sys.setprofile(_hook)
'''
BESIDE_FORWARD = '''_model[:] = [self]
        hit = _ready.pop(x.data_ptr(), None)
        if hit is not None and hit[0] is x:
            if isinstance(hit[1], tuple):
                torch.cuda.current_stream().wait_event(hit[1][1])
                return hit[1][0]
            return hit[1].result()
        ''' + HONEST


def _beside(draws: str, submit: str) -> str:
    """BESIDE for these draws, the answer computed on a pool's thread or on a thread of its own per draw."""
    return BESIDE.replace("DRAWS", draws).replace("SUBMIT", submit)


ATTACKS = {
    "honest": ("", HONEST, "credited"),
    "lazy-subclass": ('''
class Lazy(torch.Tensor):
    pass
''', "return " + HONEST.removeprefix("return ") + ".as_subclass(Lazy)", "caught"),
    "tuple-subclass": ('''
class Outs(tuple):
    pass
''', "return Outs([" + HONEST.removeprefix("return ") + "])", "caught"),
    "torch-compile": ('''
import torch.nn.functional as F
_compiled = torch.compile(lambda x, b, s: F.gelu(x + b) * s)
''', "return _compiled(x, self.bias, self.scale)", "caught"),
    "slow-eager": ('''
import time, torch.nn.functional as F
_gelu = F.gelu
def _slow_gelu(*a, **k):
    out = _gelu(*a, **k)
    torch.cuda.synchronize() if out.is_cuda else None
    time.sleep(0.002)
    return out
F.gelu = _slow_gelu
''', HONEST, "caught"),
    "patched-harness-timer": ('''
import gc
def _halve_the_timer():
    for obj in gc.get_objects():
        if type(obj).__name__ == "Clocks" and not getattr(obj, "_ks_patched", False):
            real = obj.time_call
            def fast(fn, args, real=real):
                dev, full, host, out = real(fn, args)
                return dev * 0.3, full * 0.3, host * 0.3, out
            obj.time_call, obj._ks_patched = fast, True
''', "_halve_the_timer()\n        " + HONEST, "caught"),
    "cache-once-timed": ('''
import sys
_cache = []
''' + TIMED, '''if _timed() and _cache:
            return _cache[0]
        out = ''' + HONEST.removeprefix("return ") + '''
        if _timed():
            _cache.append(out)
        return out''', "caught"),
    # work moved out of the timed window into the harness's own steps, which the candidate replaced
    "finish-in-checksum": (TIMED + '''
import sys
_stash = []
_profile = sys.modules["kernelsmith.harness.profile"]
_record = _profile.Checksums.record
def _finish_then_record(self, name, seed, out, _record=_record):
    if name == "candidate" and _stash:
        x, model = _stash.pop()
        out.copy_(ext.bias_gelu_scale(x, model.bias, model.scale, 0))
    return _record(self, name, seed, out)
_profile.Checksums.record = _finish_then_record
''', '''if _timed():
            _stash.append((x, self))
            return torch.empty_like(x)
        ''' + HONEST, "caught"),
    "answer-at-draw": ('''
import sys
_ready, _model = {}, []
_profile = sys.modules["kernelsmith.harness.profile"]
_next = _profile.InputPool.next
def _next_and_answer(self, fresh=False, _next=_next):
    inputs = _next(self, fresh)
    if fresh and _model:  # every fresh draw, eager's too: no shift between the two contenders
        m = _model[0]
        _ready[inputs[0].data_ptr()] = ext.bias_gelu_scale(inputs[0], m.bias, m.scale, 0)
    return inputs
_profile.InputPool.next = _next_and_answer
''', '''_model[:] = [self]
        hit = _ready.pop(x.data_ptr(), None)
        _ready.clear()
        if hit is not None:
            return hit
        ''' + HONEST, "caught"),
    # nothing of the harness replaced: a profile hook only reads that a draw for the candidate's run returned,
    # and the answer is computed beside the harness's flush, on a thread (CPU) or a side stream (GPU)
    "answer-beside-flush": (_beside('("candidate",)', "_thread.submit"), BESIDE_FORWARD, "caught"),
    "answer-beside-flush-every": (_beside('("candidate", "eager")', "_thread.submit"), BESIDE_FORWARD, "caught"),
    "answer-beside-flush-thread": (_beside('("candidate",)', "_Once"), BESIDE_FORWARD, "caught"),
}

# The attacks that replace a harness step again, with the patch check blinded first (a candidate that has read
# our source replaces the checker too; anything in its process can): what must catch them then is the layer
# no code in the worker reaches, the parent's clock (the candidate's cycles against eager's, and eager's
# against the calibration taken before the candidate was imported).
# The watch for profile and trace hooks (guards.Observers) is blinded alike: the answer-beside-flush attacks
# use one, so their -blind versions test the reading of the candidate's threads' CPU.
BLIND = ('import sys\nsys.modules["kernelsmith.harness.guards"].IdentitySnapshot.changed = lambda self: []\n'
         'sys.modules["kernelsmith.harness.guards"].Observers.check = lambda self: None\n')
ATTACKS.update({f"{name}-blind": (BLIND + ATTACKS[name][0], *ATTACKS[name][1:])
                for name in ("finish-in-checksum", "answer-at-draw", "answer-beside-flush", "answer-beside-flush-every",
                             "answer-beside-flush-thread")})


def write_candidate(folder: Path, device: str, name: str) -> Path:
    """NAME's model_new as folder/<name>.py; all candidates share folder/kernels/, so one build serves all."""
    prelude, body, _ = ATTACKS[name]
    if not (folder / "kernels").is_dir():
        shutil.copytree(EXAMPLE / device / "kernels", folder / "kernels")
    target = folder / (name.replace("-", "_") + ".py")
    target.write_text(HEADER + textwrap.dedent(prelude) + MODEL.format(body=body))
    return target


def verdict(result, honest_speedup: float | None) -> str:
    """caught: rejected, failed or contended; no gain: credited, but no faster than the honest kernel
    (work outside the timed window charged to it); credited."""
    if not result.clean or result.contended:
        return "caught"
    if honest_speedup and (result.speedup_vs_eager or 0) <= honest_speedup * 1.10:
        return "no gain"
    return "credited"


def as_expected(got: str, wanted: str) -> bool:
    return got == wanted or (wanted == "caught" and got == "no gain")


def why(result) -> str:
    return (result.error or (result.violations or [""])[0] or result.contended or "")[:110]


def write_rows(out: Path, rows: list[dict]) -> None:
    """redteam.json, replaced whole (a run killed by its time limit mid-write leaves the previous one)."""
    out.mkdir(parents=True, exist_ok=True)
    partial = out / "redteam.json.partial"
    partial.write_text(json.dumps(rows, indent=1))
    partial.replace(out / "redteam.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", default="")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    names = [n for n in ATTACKS if not args.only or n in args.only.split(",")]
    rows, honest_speedup = [], None
    write_rows(args.out, rows)
    with tempfile.TemporaryDirectory() as tmp:
        reference = Path(tmp) / "model.py"
        shutil.copy(EXAMPLE / "model.py", reference)
        for name in names:
            start = time.perf_counter()
            result = evaluate(reference, write_candidate(Path(tmp), args.device, name),
                              EvalOptions(device=args.device, min_runs=40, compile_baseline=False))
            got, wanted = verdict(result, honest_speedup), ATTACKS[name][2]
            if name == "honest" and got == "credited":
                honest_speedup = result.speedup_vs_eager
            ok = as_expected(got, wanted)
            rows.append({"candidate": name, "expected": wanted, "verdict": got, "ok": ok,
                         "speedup_vs_eager": result.speedup_vs_eager, "timings_ms": result.timings_ms, "clock": result.clock,
                         "why": why(result), "notes": result.notes, "jail": result.jail,
                         "seconds": round(time.perf_counter() - start, 1)})
            print(f"{name:24} expected {wanted:9} got {got:9} {'PASS' if ok else 'FAIL'}  "
                  f"x{result.speedup_vs_eager or 0:.2f}  {rows[-1]['why']}", flush=True)
            write_rows(args.out, rows)  # after each candidate: a run cut by a time limit keeps its clock readings
    print(f"{sum(r['ok'] for r in rows)}/{len(rows)} verdicts as expected")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
