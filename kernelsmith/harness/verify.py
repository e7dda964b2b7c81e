"""Correctness in two processes that never share memory.

1. run_candidate (candidate worker): imports ModelNew, runs it on seeded fresh
   inputs and fresh weights under the run-time guards, and saves each output.
2. judge (reference worker, started after the candidate worker has exited):
   rebuilds the same inputs and weights from the seeds, runs the reference with
   TF32 off, and compares. The candidate never sees the reference outputs and
   cannot patch the process that computes or compares them.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from kernelsmith.harness import compare as cmp
from kernelsmith.harness import guards, loading, transfer

CONSTRUCT_SEED_OFFSET = 7_919  # ModelNew is built under another seed than any trial's weights


def device_sync(device: str):
    if device == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def run_candidate(job: dict) -> dict:
    """Candidate side of verify. Returns facts; the judge decides correctness."""
    device, precision = job["device"], job["precision"]
    out_dir = Path(job["out_dir"])
    sync = device_sync(device)
    guards.set_precision_flags(precision)
    process_guard = guards.ProcessGuard()
    task = loading.load_module(job["reference"], "ks_reference")
    loading.require(task, "Model", "get_inputs", "get_init_inputs")
    facts: dict = {"trials": [], "violations": [], "stage": "load"}
    candidate_module = loading.load_module(job["candidate"], "ks_candidate")
    loading.require(candidate_module, "ModelNew")
    facts["stage"] = "construct"
    torch.manual_seed(job["seeds"][0]["weights"] + CONSTRUCT_SEED_OFFSET)
    model = candidate_module.ModelNew(*loading.init_inputs(task)).to(device)
    facts["stage"] = "trials"
    last_out_bytes, buffers = 0, None
    for i, seeds in enumerate(job["seeds"]):
        buffers = reuse_buffers(buffers, loading.seeded_inputs(task, seeds["inputs"], device, precision))
        trial = _candidate_trial(task, model, seeds, buffers, device, precision, sync, last_out_bytes)
        facts["trials"].append(trial)
        if trial.get("error"):
            break
        last_out_bytes = trial["out_bytes"]
        transfer.save_outputs(trial.pop("outputs"), out_dir / f"trial{i}.bin")
    facts["violations"] += process_guard.violations()
    facts["stage"] = "done"
    return facts


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
    verdicts = []
    for i, (seeds, trial) in enumerate(zip(job["seeds"], facts["trials"])):
        verdicts.append(_judge_trial(task, seeds, trial, Path(job["out_dir"]) / f"trial{i}.bin",
                                     device, precision))
    return {"trials": verdicts}


def _judge_trial(task, seeds, trial, saved: Path, device, precision) -> dict:
    if trial.get("error"):
        return {"ok": False, "reason": trial["error"]}
    model = loading.seeded_reference(task, seeds["weights"], device, precision)
    inputs = loading.seeded_inputs(task, seeds["inputs"], device, precision)
    pristine = loading.clone_all(inputs)
    with torch.no_grad():
        reference = guards.flatten_outputs(model(*inputs))
    candidate = transfer.load_outputs(saved)  # mapped; compare copies each to the device
    verdict = cmp.compare_all(candidate, [r.detach() for r in reference], precision)
    verdict["violations"] = list(trial.get("violations", []))
    if trial.get("aliases_input") and not guards.aliases_any(reference, inputs):
        verdict["violations"].append("output shares memory with an input (the reference returns new memory)")
    if trial.get("mutated_inputs") and not guards.mutated_inputs(inputs, pristine):
        verdict["violations"].append(f"forward wrote into input(s) {trial['mutated_inputs']}")
    return verdict
