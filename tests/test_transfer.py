"""Candidate outputs survive the trip from the candidate worker to the judge bit for bit."""

import torch

from kernelsmith.harness import transfer


def test_outputs_round_trip_bit_for_bit(tmp_path):
    outputs = [torch.randn(37, 5).t(),  # non-contiguous
               torch.randn(3, 4).to(torch.bfloat16),
               torch.tensor(2.5, dtype=torch.float64),  # 0-dim
               torch.empty(0, 7),
               torch.tensor([True, False, True]),
               torch.arange(10, dtype=torch.int64).view(2, 5)]
    path = tmp_path / "trial0.bin"
    transfer.save_outputs(outputs, path)
    loaded = transfer.load_outputs(path)
    assert len(loaded) == len(outputs)
    for got, want in zip(loaded, outputs):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)


def test_staging_buffer_smaller_than_the_output_writes_every_chunk(tmp_path):
    data = torch.arange(1000, dtype=torch.int32)
    path = tmp_path / "raw.bin"
    with open(path, "wb") as f:
        transfer._write_via_staging(f, data.view(torch.uint8), torch.empty(96, dtype=torch.uint8))
    assert torch.equal(torch.from_file(str(path), size=1000, dtype=torch.int32), data)
