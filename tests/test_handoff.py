"""The judge's output buffers (harness/handoff.py): what the candidate's outputs travel in from the
candidate worker to the judge, and what a candidate that attacks that channel gets.

The candidate's side of the protocol runs in the candidate's process, so every part of it is
assumed hostile here: requests, layouts, the descriptors it was handed."""

from __future__ import annotations

import fcntl
import json
import os
import socket

import pytest
import torch

from conftest import HONEST
from kernelsmith.harness import handoff, transfer


@pytest.fixture
def channel():
    """A judge's server on one end of a socket pair, a candidate's client on the other."""
    judges, candidates = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server = handoff.Server(judges, handoff.HostAllocator()).start()
    client = handoff.Client("cpu", candidates.detach())
    yield server, client
    if client.sock is not None:
        client.sock.close()


def outputs():
    return [torch.randn(37, 5).t(), torch.randn(3, 4).to(torch.bfloat16), torch.tensor(2.5, dtype=torch.float64),
            torch.empty(0, 7), torch.tensor([True, False, True])]


def test_outputs_handed_to_the_judge_arrive_bit_for_bit(channel, tmp_path):
    server, client = channel
    sent = outputs()
    assert transfer.save_outputs(sent, tmp_path / "trial0.bin", client, 0) == "handoff"
    assert not (tmp_path / "trial0.bin").exists()  # nothing went through a file
    client.sock.close()  # the candidate's namespace ends
    buffers = server.received()
    loaded = transfer.load_outputs(tmp_path / "trial0.bin", buffers[0])
    assert [(t.dtype, t.shape) for t in loaded] == [(t.dtype, t.shape) for t in sent]
    assert all(torch.equal(a, b) for a, b in zip(loaded, sent))


def test_a_handed_buffer_cannot_be_shrunk_or_grown_under_the_judge(channel, tmp_path):
    server, client = channel
    client.sock.sendall(b'{"trial": 0, "nbytes": 4096}\n')
    answer, fds, _, _ = socket.recv_fds(client.sock, 512, 1)
    assert json.loads(answer)["ok"] and len(fds) == 1
    with pytest.raises(PermissionError):
        os.ftruncate(fds[0], 0)  # would fault the judge's mapping (SIGBUS) when it reads
    with pytest.raises(PermissionError):
        os.ftruncate(fds[0], 1 << 30)
    with pytest.raises(PermissionError):
        fcntl.fcntl(fds[0], fcntl.F_ADD_SEALS, 0)  # the seals themselves are sealed
    os.close(fds[0])


def test_a_layout_larger_than_the_judges_buffer_is_refused_not_read(channel, tmp_path):
    server, client = channel
    transfer.save_outputs([torch.ones(16)], tmp_path / "trial0.bin", client, 0)
    layout = tmp_path / "trial0.bin.json"
    claimed = json.loads(layout.read_text())
    claimed["outputs"][0].update(shape=[1 << 20], nbytes=4 << 20)  # read past the 64 bytes it was given
    layout.write_text(json.dumps(claimed))
    if client.sock is not None:
        client.sock.close()
    with pytest.raises(transfer.BadLayout, match="does not fit"):
        transfer.load_outputs(tmp_path / "trial0.bin", server.received()[0])


def test_outputs_claimed_in_a_buffer_the_judge_never_gave_are_refused(tmp_path):
    (tmp_path / "trial0.bin.json").write_text(json.dumps(
        {"in": "handoff", "outputs": [{"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16}]}))
    with pytest.raises(transfer.BadLayout, match="never handed out"):
        transfer.load_outputs(tmp_path / "trial0.bin", None)


@pytest.mark.parametrize("request_line", [b"not json", b'{"trial": 999, "nbytes": 64}', b'{"trial": 1, "nbytes": -5}',
                                          b'{"trial": true, "nbytes": 64}', b'{"trial": 2, "nbytes": 1e18}'])
def test_a_malformed_request_is_declined_and_the_server_goes_on(channel, request_line):
    server, client = channel
    client.sock.sendall(request_line + b"\n")
    answer, fds, _, _ = socket.recv_fds(client.sock, 512, 1)
    assert json.loads(answer)["ok"] is False and fds == []
    client.sock.sendall(b'{"trial": 0, "nbytes": 64}\n')  # a good one after it still gets a buffer
    answer, fds, _, _ = socket.recv_fds(client.sock, 512, 1)
    assert json.loads(answer)["ok"] and len(fds) == 1
    os.close(fds[0])


def test_one_buffer_per_trial_and_none_over_the_judges_budget(tmp_path):
    judges, candidates = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server = handoff.Server(judges, handoff.HostAllocator(budget=1 << 20)).start()
    client = handoff.Client("cpu", candidates.detach())
    assert transfer.save_outputs([torch.ones(8)], tmp_path / "a.bin", client, 3) == "handoff"
    # a second request for trial 3 is declined: the candidate cannot swap the buffer the judge reads
    assert transfer.save_outputs([torch.ones(8)], tmp_path / "b.bin", client, 3) == "file"
    # over the budget: the outputs go to the file, which the judge reads as before
    big = torch.arange(1 << 19, dtype=torch.float32)
    assert transfer.save_outputs([big], tmp_path / "c.bin", client, 4) == "file"
    assert torch.equal(transfer.load_outputs(tmp_path / "c.bin")[0], big)
    if client.sock is not None:
        client.sock.close()
    assert sorted(server.received()) == [3]
    assert "budget" in server.declined[4]


def test_the_judge_hands_out_no_buffer_beyond_the_verifys_trials(tmp_path):
    judges, candidates = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server = handoff.Server(judges, handoff.HostAllocator(), trials=2).start()
    client = handoff.Client("cpu", candidates.detach())
    assert transfer.save_outputs([torch.ones(8)], tmp_path / "a.bin", client, 1) == "handoff"
    assert transfer.save_outputs([torch.ones(8)], tmp_path / "b.bin", client, 2) == "file"  # no trial 2 in this verify
    client.sock.close()
    assert sorted(server.received()) == [1]


def test_a_candidate_with_no_judge_listening_falls_back_to_the_file(tmp_path, monkeypatch):
    judges, candidates = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    judges.close()  # the judge died, or was never started
    client = handoff.Client("cpu", candidates.detach())
    assert transfer.save_outputs([torch.ones(8)], tmp_path / "t.bin", client, 0) == "file"
    assert torch.equal(transfer.load_outputs(tmp_path / "t.bin")[0], torch.ones(8))


def test_verify_in_the_jail_hands_every_trial_to_the_judge(candidate, run_eval, monkeypatch):
    result = run_eval(candidate(HONEST))
    assert result.correct and result.clean, result.error
    assert {t["outputs_in"] for t in result.trials if not t.get("skipped")} == {"handoff"}
    monkeypatch.setenv("KERNELSMITH_OUTPUT_HANDOFF", "0")  # the file path, as before, on request
    result = run_eval(candidate(HONEST))
    assert result.correct and {t["outputs_in"] for t in result.trials if not t.get("skipped")} == {"file"}


def test_descriptors_the_candidate_sends_the_judge_are_not_kept(channel, tmp_path):
    server, client = channel
    with open(tmp_path / "bait", "w") as bait:  # an open file pushed at the judge along with a request
        socket.send_fds(client.sock, [b'{"trial": 0, "nbytes": 64}\n'], [bait.fileno()])
        answer, fds, _, _ = socket.recv_fds(client.sock, 512, 1)
    os.close(fds[0])
    assert json.loads(answer)["ok"]
    # the kernel dropped it once the bait was closed here: the judge's plain recv takes no rights
    assert str(tmp_path / "bait") not in {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                                          if os.path.exists(f"/proc/self/fd/{fd}")}


def test_a_candidate_that_keeps_its_end_open_does_not_hold_up_the_judge(channel):
    server, client = channel
    client.sock.sendall(b'{"trial": 0, "nbytes": 64}\n')
    os.close(socket.recv_fds(client.sock, 512, 1)[1][0])
    # the judge's job comes only once the candidate is gone; a stray holder of the socket is cut off
    assert sorted(server.received(timeout=0.5)) == [0]


def test_the_judge_starts_its_allocator_only_when_the_candidate_first_asks():
    """CUDA's start is GPU work: it must fall inside the candidate's hold of the GPU (runner.compute_lock),
    not whenever the prestarted judge happens to finish importing torch."""
    started = []

    class Recording(handoff.HostAllocator):
        def start(self):
            started.append(True)
            super().start()

    judges, candidates = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server = handoff.Server(judges, Recording()).start()
    client = handoff.Client("cpu", candidates.detach())
    server._thread.join(0.3)
    assert started == []  # serving, but nothing started before a request
    client.sock.sendall(b'{"trial": 0, "nbytes": 64}\n')
    os.close(socket.recv_fds(client.sock, 512, 1)[1][0])
    assert started == [True]
    client.sock.close()
    server.received()
