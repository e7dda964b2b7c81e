"""The roofline of a task: its FLOPs (torch's flop counter) and the fewest bytes it must move.

The percentages are against measured ceilings of the GPU (bench/ceilings.py
measures them; the H200 row is our own measurement, see docs/results.md).
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from kernelsmith.harness import guards, loading
from kernelsmith.evaluation.ceilings import CEILINGS

def ceilings_for(device: str) -> dict | None:
    if device != "cuda":
        return None
    name = torch.cuda.get_device_name()
    for key, row in CEILINGS.items():
        if key in name:
            return {**row, "gpu": name}
    return None


def count(reference: torch.nn.Module, inputs: list) -> tuple[int, int]:
    """(flops, minimum bytes): inputs, parameters and outputs, each moved once."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        out = reference(*inputs)
    outputs = guards.flatten_outputs(out)
    state = list(reference.state_dict().values())
    return int(counter.get_total_flops()), loading.nbytes(inputs) + loading.nbytes(state) + loading.nbytes(outputs)


def measure(reference, inputs, device: str, precision: str) -> dict:
    try:
        flops, min_bytes = count(reference, inputs)
    except Exception as err:  # flop counting is best effort; never fails a profile
        return {"error": f"flop count failed: {err}"}
    return {"flops": flops, "min_bytes": min_bytes, "ceilings": ceilings_for(device)}
