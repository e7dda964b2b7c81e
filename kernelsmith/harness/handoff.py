"""Judge-owned buffers for the candidate's outputs, handed over as file descriptors.

verify's candidate worker writes each trial's outputs somewhere the trusted judge reads them after
the candidate has gone. Through a file (transfer.py) every byte of a GPU output crosses the host
twice: 25 s of a 45 s verify on a 4 GB output on the H200. Here the judge allocates each trial's
buffer itself and sends its descriptor over a unix socket pair the parent made for the two workers
(SCM_RIGHTS):

- on the GPU, device memory from the CUDA driver's virtual memory API, exported as a POSIX file
  descriptor: the candidate maps it and copies its outputs in device to device;
- on the CPU, a memfd sealed against shrinking and growing: the candidate writes its outputs into it.

Why the judge can believe what it reads:
- it reads a buffer only after the parent has reaped the candidate's whole PID namespace (the judge
  gets its job only then), so nothing can write the buffer any more;
- a buffer holds only what the candidate could have written to its file anyway;
- the judge checks the layout the candidate claims against the size it allocated itself, and a
  sealed memfd cannot be truncated under the judge's mapping to fault it.

Legacy CUDA IPC handles (cudaIpcGetMemHandle) would not do: they are not opened across PID
namespaces, and the candidate's jail has its own. When the judge declines (over its memory
budget, no VMM support, no answer in time) or KERNELSMITH_OUTPUT_HANDOFF=0, the trial goes
through the file as before.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import socket
import threading

import torch

ENV = "KERNELSMITH_HANDOFF"  # "DEVICE,FD[,TRIALS]": set by the parent in both workers of one verify
MAX_TRIALS = 64
MAX_REQUEST = 512
# the judge's buffers may hold this share of the GPU's memory and must leave this share free: the
# candidate's later trials and the judge's own reference still need room. The free share is what keeps them
# from running out (it is checked at each buffer, against what the GPU has free then, other lanes' verifies
# included); the share itself only caps one verify. Seven 6.4 GB trial outputs (level1/21_Sigmoid) need 45 GB,
# 56% of an 80 GB H100; at 0.40 three of them went through the file there (docs/env.md).
GPU_SHARE, GPU_FREE_AFTER = 0.60, 0.25
HOST_SHARE = 0.25  # of MemAvailable when the judge starts
FIRST_ANSWER_S = 120.0  # the judge is importing torch while the candidate's first trial runs


class Declined(Exception):
    """The judge keeps no buffer for this trial: its outputs go to the file."""


def channel_from_env() -> tuple[str, int, int] | None:
    """(device, the socket's descriptor, how many trials the verify has: buffers beyond that are refused)."""
    parts = os.environ.get(ENV, "").split(",")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[1:]):
        return None
    return parts[0], int(parts[1]), min(int(parts[2]), MAX_TRIALS) if len(parts) > 2 else MAX_TRIALS


# -- the judge's side ---------------------------------------------------------------------------

class Server:
    """Answers the candidate's buffer requests on a thread, until the candidate's end closes."""

    def __init__(self, sock: socket.socket, allocator, trials: int = MAX_TRIALS):
        self.sock, self.allocator, self.trials, self._started = sock, allocator, trials, False
        self.buffers: dict[int, object] = {}
        self.declined: dict[int, str] = {}
        self._thread = threading.Thread(target=self._serve, name="ks-handoff", daemon=True)

    def start(self) -> "Server":
        self._thread.start()
        return self

    def received(self, timeout: float = 5.0) -> dict:
        """The buffers handed out, by trial. Called once the candidate is gone; a peer that
        still talks after that is cut off."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.sock.shutdown(socket.SHUT_RDWR)
            self._thread.join(timeout)
        return dict(self.buffers)

    def _serve(self) -> None:
        with self.sock:
            for request in _lines(self.sock):
                self._answer(request)

    def _start_allocator(self) -> None:
        """On the first request, so inside the candidate's hold of the GPU (runner.compute_lock): a judge
        does no GPU work, CUDA's start included, outside a job that holds the lock."""
        self._started = True
        try:
            self.allocator.start()
        except Exception as err:  # noqa: BLE001  (no buffers: every request is declined with the reason)
            self.allocator = _Refusing(f"{type(err).__name__}: {err}")

    def _answer(self, line: bytes) -> None:
        try:
            trial, nbytes = _parse(line)
        except Declined as why:
            return self._reply({"ok": False, "why": str(why)})
        if trial >= self.trials or trial in self.buffers or trial in self.declined:
            return self._reply({"ok": False, "why": f"trial {trial} is not one to answer"})
        if not self._started:
            self._start_allocator()
        try:
            buffer = self.allocator.allocate(nbytes)
            fd = buffer.export()
        except Exception as why:  # noqa: BLE001  (out of memory, a driver error: that trial goes to the file)
            self.declined[trial] = str(why)
            return self._reply({"ok": False, "why": str(why)})
        self.buffers[trial] = buffer
        self._reply({"ok": True, "size": buffer.size}, fd)

    def _reply(self, message: dict, fd: int | None = None) -> None:
        data = (json.dumps(message) + "\n").encode()
        try:
            if fd is None:
                self.sock.sendall(data)
            else:
                socket.send_fds(self.sock, [data], [fd])
        except OSError:
            pass  # the candidate is gone; it reads no answer
        finally:
            if fd is not None:
                os.close(fd)  # the judge keeps its own handle; the exported descriptor was the candidate's


def _lines(sock: socket.socket):
    pending = b""
    while True:
        try:
            chunk = sock.recv(4096)  # plain recv: descriptors the candidate sends along are dropped by the kernel
        except OSError:
            return
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            yield line
        if len(pending) > MAX_REQUEST:
            return


def _parse(line: bytes) -> tuple[int, int]:
    try:
        request = json.loads(line[:MAX_REQUEST])
        trial, nbytes = request["trial"], request["nbytes"]
    except (ValueError, KeyError, TypeError):
        raise Declined("malformed request") from None
    if not (isinstance(trial, int) and isinstance(nbytes, int)) or isinstance(trial, bool) \
            or not 0 <= trial < MAX_TRIALS or nbytes <= 0:
        raise Declined("malformed request")
    return trial, nbytes


SERVER: Server | None = None  # the judge worker's, started before its job arrives (worker.py)


def serve(device: str, fd: int, trials: int = MAX_TRIALS) -> Server:
    allocator = CudaAllocator() if device == "cuda" else HostAllocator()
    return Server(socket.socket(fileno=fd), allocator, trials).start()


class _Refusing:
    def __init__(self, why: str):
        self.why = why

    def allocate(self, nbytes: int):
        raise Declined(self.why)


class HostAllocator:
    """memfds sealed at their size, within a share of the memory available when the judge starts."""

    def __init__(self, budget: int | None = None):
        self.budget = budget

    def start(self) -> None:
        if self.budget is None:
            self.budget = int(HOST_SHARE * _mem_available())

    def allocate(self, nbytes: int) -> "HostBuffer":
        if nbytes > self.budget:
            raise Declined(f"{nbytes} bytes is over the judge's host budget ({self.budget} left)")
        fd = os.memfd_create("ks-trial-outputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, nbytes)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.budget -= nbytes
        return HostBuffer(fd, nbytes)


class HostBuffer:
    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size

    def export(self) -> int:
        return os.dup(self.fd)

    def bytes(self) -> torch.Tensor:
        """The buffer's contents as a uint8 tensor (a private mapping: the judge never writes it)."""
        return torch.from_file(f"/proc/self/fd/{self.fd}", shared=False, size=self.size, dtype=torch.uint8)


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


# -- the CUDA driver's virtual memory API, through ctypes (nothing links libcuda) ------------------

class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_PINNED, _POSIX_FD, _ON_DEVICE, _READ_WRITE = 1, 1, 1, 3


class Driver:
    """The few driver calls the handoff needs, on the device torch is using."""

    def __init__(self, ordinal: int):
        self.lib, self.ordinal = ctypes.CDLL("libcuda.so.1"), ordinal
        self.prop = _Prop(type=_PINNED, requestedHandleTypes=_POSIX_FD, location=_Location(_ON_DEVICE, ordinal))
        granularity = ctypes.c_size_t()
        self.call("cuMemGetAllocationGranularity", ctypes.byref(granularity), ctypes.byref(self.prop), 0)
        self.granularity = max(granularity.value, 1)

    def call(self, name: str, *args) -> None:
        code = getattr(self.lib, name)(*args)
        if code != 0:
            raise Declined(f"{name} failed with CUDA driver error {code}")

    def map(self, handle: int, size: int) -> int:
        """Map an allocation read-write into this process; its device address."""
        ptr = ctypes.c_uint64()
        self.call("cuMemAddressReserve", ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(self.granularity),
                  ctypes.c_uint64(0), ctypes.c_ulonglong(0))
        self.call("cuMemMap", ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(handle),
                  ctypes.c_ulonglong(0))
        access = _AccessDesc(location=_Location(_ON_DEVICE, self.ordinal), flags=_READ_WRITE)
        self.call("cuMemSetAccess", ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1))
        return ptr.value

    def unmap(self, ptr: int, handle: int, size: int) -> None:
        self.call("cuMemUnmap", ctypes.c_uint64(ptr), ctypes.c_size_t(size))
        self.call("cuMemAddressFree", ctypes.c_uint64(ptr), ctypes.c_size_t(size))
        self.call("cuMemRelease", ctypes.c_uint64(handle))


class CudaAllocator:
    """Device memory the judge owns and maps itself, exported to the candidate as descriptors."""

    def start(self) -> None:
        torch.cuda.init()
        self.driver = Driver(torch.cuda.current_device())
        context = ctypes.c_void_p()
        self.driver.call("cuDevicePrimaryCtxRetain", ctypes.byref(context), ctypes.c_int(self.driver.ordinal))
        self.driver.call("cuCtxSetCurrent", context)  # this thread's driver calls use torch's context
        self.total, self.given = torch.cuda.mem_get_info()[1], 0

    def allocate(self, nbytes: int) -> "CudaBuffer":
        size = -(-nbytes // self.driver.granularity) * self.driver.granularity
        free = torch.cuda.mem_get_info()[0]
        if self.given + size > GPU_SHARE * self.total or free - size < GPU_FREE_AFTER * self.total:
            raise Declined(f"{size} bytes is over the judge's GPU budget")
        handle = ctypes.c_uint64()
        self.driver.call("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(self.driver.prop),
                         ctypes.c_ulonglong(0))
        self.given += size
        return CudaBuffer(self.driver, handle.value, size, self.driver.map(handle.value, size))


class CudaBuffer:
    def __init__(self, driver: Driver, handle: int, size: int, ptr: int):
        self.driver, self.handle, self.size, self.ptr = driver, handle, size, ptr

    def export(self) -> int:
        fd = ctypes.c_int(-1)
        self.driver.call("cuMemExportToShareableHandle", ctypes.byref(fd), ctypes.c_uint64(self.handle),
                         ctypes.c_int(_POSIX_FD), ctypes.c_ulonglong(0))
        return fd.value

    def bytes(self) -> torch.Tensor:
        return device_bytes(self.ptr, self.size)


class _DeviceArray:
    def __init__(self, ptr: int, size: int):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def device_bytes(ptr: int, size: int) -> torch.Tensor:
    """A uint8 tensor over mapped device memory (torch does not own it)."""
    return torch.as_tensor(_DeviceArray(ptr, size), device="cuda")


# -- the candidate's side -----------------------------------------------------------------------

class Client:
    """Asks the judge for a buffer per trial and copies the trial's outputs into it."""

    def __init__(self, device: str, fd: int):
        self.device, self.sock, self.answered, self.why = device, socket.socket(fileno=fd), False, ""

    def send(self, trial: int, raws: list[torch.Tensor], layout: list[dict], total: int) -> bool:
        """True when the outputs are in the judge's buffer; False sends them to the file."""
        if total == 0 or self.sock is None:
            return False
        if self.device == "cuda":
            # blocks this process's allocator keeps but no tensor uses (earlier trials' outputs, a stressed
            # trial's float64 copies) count as used against the judge's free-memory rule: on an 80 GB H100 they
            # sent three of level1/21_Sigmoid's seven 6.4 GB outputs through the file (docs/env.md)
            torch.cuda.empty_cache()
        try:
            answer, fds = self._ask(trial, total)
        except (OSError, ValueError) as err:  # no judge, or it timed out: the file from now on
            self.why, self.sock = f"no answer from the judge: {type(err).__name__}: {err}", None
            return False
        if not answer.get("ok") or len(fds) != 1 or answer.get("size", 0) < total:
            for fd in fds:
                os.close(fd)
            self.why = str(answer.get("why") or "the judge's answer came without a buffer")
            return False
        try:
            self._fill(fds[0], int(answer["size"]), raws, layout)
        except (Declined, OSError, RuntimeError) as err:  # a driver call or copy failed: the outputs go to the file
            self.why = str(err)
            return False
        finally:
            os.close(fds[0])
        return True

    def _ask(self, trial: int, total: int) -> tuple[dict, list[int]]:
        self.sock.settimeout(30.0 if self.answered else FIRST_ANSWER_S)
        self.sock.sendall((json.dumps({"trial": trial, "nbytes": total}) + "\n").encode())
        data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_REQUEST, 1)
        self.answered = True
        return json.loads(data.split(b"\n", 1)[0]), fds

    def _fill(self, fd: int, size: int, raws: list[torch.Tensor], layout: list[dict]) -> None:
        if self.device == "cuda":
            _fill_device(fd, size, raws, layout)
        else:
            _fill_host(fd, raws, layout)


def _fill_host(fd: int, raws: list[torch.Tensor], layout: list[dict]) -> None:
    for raw, item in zip(raws, layout):
        if item["nbytes"]:
            os.pwrite(fd, raw.contiguous().numpy().data, item["offset"])


def _fill_device(fd: int, size: int, raws: list[torch.Tensor], layout: list[dict]) -> None:
    driver = Driver(torch.cuda.current_device())
    handle = ctypes.c_uint64()
    driver.call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), ctypes.c_int(_POSIX_FD))
    ptr = driver.map(handle.value, size)
    try:
        dst = device_bytes(ptr, size)
        for raw, item in zip(raws, layout):
            if item["nbytes"]:
                dst[item["offset"]:item["offset"] + item["nbytes"]].copy_(raw)
        torch.cuda.synchronize()
        del dst
    finally:
        driver.unmap(ptr, handle.value, size)


def client_from_env(device: str) -> Client | None:
    channel = channel_from_env()
    if channel is None or channel[0] != device:  # (KERNELSMITH_OUTPUT_HANDOFF=0: the parent made no channel)
        return None
    return Client(device, channel[1])

