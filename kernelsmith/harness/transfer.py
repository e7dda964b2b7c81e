"""Candidate outputs from the candidate worker to the judge: raw bytes at aligned offsets, with
the layout (dtype, shape, offset, size of each output) beside them in `path.json`.

The bytes go into a buffer the judge allocated and handed over (handoff.py: device memory on the
GPU, a sealed memfd on the CPU) or, when the judge declines, into one file: each output streamed
through one pinned staging buffer, and mapped by the judge. (torch.save/torch.load of a multi-GB
output cost seconds per GB: pickling, a CRC, and a full read on load.)

The layout is the candidate's word, so the judge checks it against the bytes it has.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

STAGING_BYTES = 256 << 20
ALIGN = 64


class BadLayout(ValueError):
    """The candidate's layout does not fit the bytes the judge holds."""


def plan(outputs: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[dict], int]:
    """Each output as flat bytes, its place in the buffer (aligned, so the judge can view its dtype),
    and the buffer's size."""
    raws, layout, offset = [], [], 0
    for tensor in outputs:
        flat = tensor.detach().contiguous().reshape(-1)
        offset += -offset % ALIGN
        nbytes = flat.numel() * flat.element_size()
        layout.append({"dtype": str(flat.dtype).removeprefix("torch."), "shape": list(tensor.shape),
                       "offset": offset, "nbytes": nbytes})
        raws.append(flat.view(torch.uint8) if flat.numel() else flat.new_empty(0, dtype=torch.uint8))
        offset += nbytes
    return raws, layout, offset


def save_outputs(outputs: list[torch.Tensor], path: Path, handoff=None, trial: int = 0) -> str:
    """Write the outputs' bytes (to the judge's buffer through `handoff` when it takes them, else to
    `path`) and their layout to `path.json`; where they went."""
    raws, layout, total = plan(outputs)
    where = "handoff" if handoff is not None and handoff.send(trial, raws, layout, total) else "file"
    if where == "file":
        _write_file(raws, layout, path)
    _layout_path(path).write_text(json.dumps({"in": where, "outputs": layout}))
    return where


def load_outputs(path: Path, buffer=None) -> list[torch.Tensor]:
    """The outputs save_outputs wrote: views of the judge's buffer (`buffer`, handed off for this
    trial) or CPU tensors backed by the mapped file."""
    saved = json.loads(_layout_path(path).read_text())
    if not isinstance(saved, dict) or saved.get("in") not in ("file", "handoff"):
        raise BadLayout("the output layout is not kernelsmith's")
    layout = saved.get("outputs")
    if saved["in"] == "handoff":
        if buffer is None:
            raise BadLayout("the outputs claim a buffer the judge never handed out")
        return _views(buffer.bytes(), layout)
    size = path.stat().st_size if path.exists() else 0
    data = torch.from_file(str(path), shared=False, size=size, dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)
    return _views(data, layout)


def where_saved(path: Path) -> str:
    """"handoff" or "file": where the candidate says a trial's outputs went (informational)."""
    try:
        return str(json.loads(_layout_path(path).read_text()).get("in"))[:16]
    except (OSError, ValueError, AttributeError):
        return "unknown"


def _views(data: torch.Tensor, layout) -> list[torch.Tensor]:
    if not isinstance(layout, list):
        raise BadLayout("the output layout is not a list")
    return [_view(data, item) for item in layout]


def _view(data: torch.Tensor, item) -> torch.Tensor:
    try:
        dtype, shape = getattr(torch, item["dtype"]), [int(n) for n in item["shape"]]
        offset, nbytes = int(item["offset"]), int(item["nbytes"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise BadLayout("an output's layout entry is malformed") from None
    if not isinstance(dtype, torch.dtype) or min(shape, default=0) < 0 or offset < 0 or offset % ALIGN:
        raise BadLayout("an output's layout entry is malformed")
    numel = 1
    for n in shape:
        numel *= n
    if nbytes != numel * dtype.itemsize or offset + nbytes > data.numel():
        raise BadLayout(f"an output's layout ({nbytes} bytes at {offset}) does not fit the {data.numel()} bytes saved")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype, device=data.device)
    return data[offset:offset + nbytes].view(dtype).reshape(shape)


def _write_file(raws: list[torch.Tensor], layout: list[dict], path: Path) -> None:
    staging = None
    with open(path, "wb") as f:
        for raw, item in zip(raws, layout):
            f.write(bytes(item["offset"] - f.tell()))
            if raw.device.type == "cpu":
                f.write(raw.numpy().data)
                continue
            staging = staging if staging is not None else _pinned(min(STAGING_BYTES, max(raw.numel(), 1)))
            _write_via_staging(f, raw, staging)


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
