"""Correctness in two processes that never share memory.

1. run_candidate (candidate worker): imports ModelNew, runs it on seeded fresh
   inputs and fresh weights under the run-time guards, and saves each output.
2. judge (reference worker, started after the candidate worker has exited):
   rebuilds the same inputs and weights from the seeds, runs the reference with
   TF32 off, and compares. The candidate never sees the reference outputs and
   cannot patch the process that computes or compares them.

Trials are described by evaluation/seeds.py: the normal ones, then stressed ones whose
floating inputs are scaled or shifted (stress_inputs). Both workers build a stressed trial's
inputs the same way; the judge skips one where the reference itself is not finite (the stress
took the task outside its domain) and judges the others with compare.STRESSED.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path

import torch

from kernelsmith.evaluation.seeds import construct_seed
from kernelsmith.harness import compare as cmp
from kernelsmith.harness import guards, handoff, loading, timing, transfer


def device_sync(device: str):
    if device == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def run_candidate(job: dict) -> dict:
    """Candidate side of verify. Returns facts; the judge decides correctness."""
    device, precision = job["device"], job["precision"]
    out_dir = Path(job["out_dir"])
    sync = device_sync(device)
    phases = timing.Phases()
    guards.set_precision_flags(precision)
    process_guard = guards.ProcessGuard()
    task = loading.load_module(job["reference"], "ks_reference")
    loading.require(task, "Model", "get_inputs", "get_init_inputs")
    process_guard.watch(task=task)
    facts: dict = {"trials": [], "violations": [], "stage": "load", "phases": phases.seconds}
    candidate_module = loading.load_module(job["candidate"], "ks_candidate")
    loading.require(candidate_module, "ModelNew")
    facts["stage"] = "construct"
    # under a seed unlike any trial's weights: a ModelNew that keeps what it drew at construction
    # (instead of the weights loaded into it) fails (init_inputs leaves this seed in place)
    torch.manual_seed(construct_seed(job["seeds"]))
    model = candidate_module.ModelNew(*loading.init_inputs(task)).to(device)
    phases.mark("load")
    facts["stage"] = "trials"
    last_out_bytes, buffers, judges_buffers = 0, None, handoff.client_from_env(device)
    for i, seeds in enumerate(job["seeds"]):
        buffers = reuse_buffers(buffers, trial_inputs(task, seeds, device, precision))
        phases.mark("inputs")
        trial = _candidate_trial(task, model, seeds, buffers, device, precision, sync, last_out_bytes)
        facts["trials"].append(trial)
        phases.mark("trials")
        if trial.get("error"):
            break
        last_out_bytes = trial["out_bytes"]
        trial["saved_to"] = transfer.save_outputs(trial.pop("outputs"), out_dir / f"trial{i}.bin", judges_buffers, i)
        if judges_buffers is not None and trial["saved_to"] == "file":
            trial["handoff_note"] = judges_buffers.why
        phases.mark("save")
    facts["violations"] += process_guard.violations()
    facts["stage"] = "done"
    return facts


def trial_inputs(task, seeds: dict, device: str, precision: str) -> list:
    """One trial's inputs: get_inputs() under the trial's seed, stressed when the trial is."""
    inputs = loading.seeded_inputs(task, seeds["inputs"], device, precision)
    return stress_inputs(inputs, seeds["stress"]) if seeds.get("stress") else inputs


@torch.no_grad()
def stress_inputs(inputs: list, stress: dict) -> list:
    """Every floating tensor input scaled by stress["scale"] and shifted by stress["shift_rms"]
    times its RMS (the RMS rounded to a power of two, so that two workers whose float64 sums
    differ in the last bit still add the same number). Integer and bool tensors (indices,
    masks) and Python scalars are left alone. The result is computed in the input's dtype,
    as the task would see such an input."""
    out = []
    for x in inputs:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            out.append(x)
            continue
        y = x * stress["scale"] if stress["scale"] != 1.0 else x.clone()
        if stress["shift_rms"] and x.numel():
            rms = float(x.double().square().mean().sqrt())
            if rms > 0 and math.isfinite(rms):
                y += stress["shift_rms"] * 2.0 ** round(math.log2(rms))
        out.append(y)
    return out


def reuse_buffers(buffers: list | None, fresh: list) -> list:
    """Fresh values at the previous trial's addresses: a cache keyed on the pointer
    (or a replay of an earlier call) returns a stale answer and fails."""
    if buffers is None or len(buffers) != len(fresh):
        return fresh
    reused = []
    for old, new in zip(buffers, fresh):
        same = isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor) and old.shape == new.shape \
            and old.dtype == new.dtype and old.stride() == new.stride()
        reused.append(old.copy_(new) if same else new)
    return reused


def _candidate_trial(task, model, seeds, inputs, device, precision, sync, last_out_bytes) -> dict:
    reference = loading.seeded_reference(task, seeds["weights"], device, precision)
    loading.load_weights(model, reference)
    del reference
    pristine = loading.clone_all(inputs)
    guards.poison(max(last_out_bytes, loading.nbytes(inputs)), device)
    params, threads_before = guards.parameter_values(model), guards.python_threads()
    state_before = guards.state_fingerprint(model)
    recorder, profiled = guards.OpRecorder(), guards.ProfiledOps()
    start = time.perf_counter()
    with profiled, torch.no_grad(), recorder:
        out = model(*inputs)
        still_recording = guards.recorder_still_active(recorder)
        sync()
    seconds = time.perf_counter() - start
    outputs = guards.flatten_outputs(out)
    trial = {"seconds": seconds, "violations": [], "out_bytes": 0}
    problems = guards.output_problems(outputs, device)
    if problems:
        trial["error"] = "; ".join(problems)
        return trial
    trial["violations"] = _trial_violations(recorder, profiled, still_recording, outputs, inputs, pristine,
                                            params, model, state_before, threads_before, sync)
    trial["aliases_input"] = guards.aliases_any(outputs, inputs)
    trial["mutated_inputs"] = guards.mutated_inputs(inputs, pristine)
    trial["out_bytes"] = loading.nbytes(outputs)
    trial["outputs"] = outputs  # saved at once by the caller, before the next trial can overwrite them
    return trial


def _trial_violations(recorder, profiled, still_recording, outputs, inputs, pristine, params, model,
                      state_before, threads_before, sync) -> list[str]:
    found = [v for v in (recorder.violation(), profiled.violation()) if v]
    if not still_recording:
        found.append("ModelNew.forward removed the harness's dispatch recorder")
    if guards.deferred_work(outputs, sync):
        found.append("output changed after forward returned and the device synced "
                     "(work left running on a side stream or thread)")
    new_threads = guards.python_threads() - threads_before
    if new_threads:
        found.append(f"forward left {len(new_threads)} Python thread(s) running")
    if guards.changed_parameters(model, params):
        found.append("forward modified the module's parameters: "
                     + ", ".join(guards.changed_parameters(model, params)[:5]))
    if guards.state_fingerprint(model) != state_before:
        found.append("forward changed the module's attributes (state kept across calls, e.g. an output cache)")
    return found


def judge(job: dict, facts: dict) -> dict:
    """Reference side: recompute each trial and compare with the candidate's saved outputs."""
    device, precision = job["device"], job["precision"]
    guards.set_precision_flags(precision)
    task = loading.load_module(job["reference"], "ks_reference")
    verdicts, phases = [], timing.Phases()
    # the parent sends this job only after the candidate's namespace is gone: nothing writes these now
    handed = handoff.SERVER.received() if handoff.SERVER is not None else {}
    for i, (seeds, trial) in enumerate(zip(job["seeds"], facts["trials"])):
        saved = (Path(job["out_dir"]) / f"trial{i}.bin", handed.get(i))
        verdict = _judge_trial(task, seeds, trial, saved, device, precision, phases)
        verdict["stress"] = (seeds.get("stress") or {}).get("name")
        verdicts.append(verdict)
    return {"trials": verdicts, "phases": phases.seconds}


def _judge_trial(task, seeds, trial, saved: tuple, device, precision, phases: timing.Phases) -> dict:
    stress = seeds.get("stress")
    if trial.get("error"):
        return {"ok": False, "reason": trial["error"]}
    model = loading.seeded_reference(task, seeds["weights"], device, precision)
    inputs = trial_inputs(task, seeds, device, precision)
    pristine = loading.clone_all(inputs)
    with torch.no_grad():
        reference = [r.detach() for r in guards.flatten_outputs(model(*inputs))]
    phases.mark("reference")
    if stress and not _finite(reference):
        # outside the task's domain (exp overflowed, a log of a negative): nothing to compare
        why = f"skipped: the reference is not finite on stressed inputs ({stress['name']})"
        return {"ok": None, "skipped": why, "reason": why, "violations": list(trial.get("violations", []))}
    jittered = _jittered_reference(model, inputs, seeds["inputs"]) if stress else None
    accurate = _accurate_reference(model, inputs) if precision in ("bf16", "fp16") and not stress else None
    phases.mark("reference")
    try:  # the judge's own buffer for this trial, or the mapped file; compare moves each to the device
        candidate = transfer.load_outputs(*saved)
    except (ValueError, OSError) as err:  # a layout that does not fit, or none
        return {"ok": False, "reason": f"the candidate's saved outputs cannot be read: {err}",
                "violations": list(trial.get("violations", []))}
    verdict = cmp.compare_all(candidate, reference, precision, stressed=bool(stress), jittered=jittered,
                              accurate=accurate)
    phases.mark("compare")
    verdict["outputs_in"] = transfer.where_saved(saved[0])
    if trial.get("handoff_note"):  # the candidate's word on why its outputs went to the file (informational)
        verdict["handoff_note"] = str(trial["handoff_note"])[:200]
    if stress and not verdict["ok"]:
        verdict["reason"] = f"on stressed inputs ({stress['name']}): {verdict['reason']}"
    verdict["violations"] = list(trial.get("violations", []))
    if trial.get("aliases_input") and not guards.aliases_any(reference, inputs):
        verdict["violations"].append("output shares memory with an input (the reference returns new memory)")
    if trial.get("mutated_inputs") and not guards.mutated_inputs(inputs, pristine):
        verdict["violations"].append(f"forward wrote into input(s) {trial['mutated_inputs']}")
    return verdict


@torch.no_grad()
def _accurate_reference(model, inputs: list) -> list:
    """bf16 and fp16 modes: the same function of the same (cast) weights and inputs, computed in
    fp32 with TF32 off; eager at the half precision is judged by its distance from this too."""
    wide = copy.deepcopy(model).float()
    up = [x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    outputs = [o.detach() for o in guards.flatten_outputs(wide(*up))]
    del wide
    return outputs


@torch.no_grad()
def _jittered_reference(model, inputs: list, seed: int) -> list:
    """The reference on the same inputs, every floating element moved by a relative
    +-SENSITIVITY_JITTER: how far that moves the output tells how ill-conditioned the task is
    at these (stressed) inputs, and widens what an honest kernel may differ by."""
    moved = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            gen = torch.Generator(device=x.device).manual_seed((seed + i) % 2**62)
            signs = torch.randint(0, 2, x.shape, generator=gen, device=x.device, dtype=x.dtype) * 2 - 1
            x = x * (1 + cmp.SENSITIVITY_JITTER * signs)
        moved.append(x)
    return [o.detach() for o in guards.flatten_outputs(model(*moved))]


def _finite(outputs: list) -> bool:
    return all(bool(torch.isfinite(o).all()) for o in outputs
               if isinstance(o, torch.Tensor) and (o.is_floating_point() or o.is_complex()))
