"""Candidate outputs from the candidate worker to the judge, as raw bytes in one file.

torch.save/torch.load of a multi-GB output costs seconds per GB (pickling, a CRC,
and a full read on load), and verify moves five of them. Here the candidate side
streams each output's bytes through one pinned staging buffer, and the judge maps
the file and copies each output to its device once.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

STAGING_BYTES = 256 << 20
ALIGN = 64


def save_outputs(outputs: list[torch.Tensor], path: Path) -> None:
    """Write the outputs' bytes to `path` and their layout to `path.json`."""
    layout, staging = [], None
    with open(path, "wb") as f:
        for tensor in outputs:
            flat = tensor.detach().contiguous().reshape(-1)
            f.write(bytes(-f.tell() % ALIGN))  # each output starts aligned, so the judge can view its dtype
            layout.append({"dtype": str(flat.dtype).removeprefix("torch."), "shape": list(tensor.shape),
                           "offset": f.tell(), "nbytes": flat.numel() * flat.element_size()})
            raw = flat.view(torch.uint8) if flat.numel() else flat.new_empty(0, dtype=torch.uint8)
            if raw.device.type == "cpu":
                f.write(raw.numpy().data)
                continue
            staging = staging if staging is not None else _pinned(min(STAGING_BYTES, max(raw.numel(), 1)))
            _write_via_staging(f, raw, staging)
    _layout_path(path).write_text(json.dumps(layout))


def load_outputs(path: Path) -> list[torch.Tensor]:
    """The outputs written by save_outputs, as CPU tensors backed by the mapped file."""
    layout = json.loads(_layout_path(path).read_text())
    total = max((item["offset"] + item["nbytes"] for item in layout), default=0)
    data = torch.from_file(str(path), shared=False, size=total, dtype=torch.uint8) if total else None
    outputs = []
    for item in layout:
        dtype = getattr(torch, item["dtype"])
        if item["nbytes"] == 0:
            outputs.append(torch.empty(item["shape"], dtype=dtype))
            continue
        raw = data[item["offset"]:item["offset"] + item["nbytes"]]
        outputs.append(raw.view(dtype).reshape(item["shape"]))
    return outputs


def _layout_path(path: Path) -> Path:
    return Path(str(path) + ".json")


def _pinned(nbytes: int) -> torch.Tensor:
    try:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    except RuntimeError:  # pinning can fail under a tight memlock limit; pageable still works
        return torch.empty(nbytes, dtype=torch.uint8)


def _write_via_staging(f, raw: torch.Tensor, staging: torch.Tensor) -> None:
    for lo in range(0, raw.numel(), staging.numel()):
        chunk = raw[lo:lo + staging.numel()]
        part = staging[:chunk.numel()]
        part.copy_(chunk)
        f.write(part.numpy().data)
