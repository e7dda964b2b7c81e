"""What the parent's census of a worker's mappings costs (evaluation/loads.py): a torch process (CUDA when it
has a GPU) is read from outside, the way the profile's clock reads its worker between timed runs.

    python3 bench/census_cost.py [--repeats 300]

Prints the maps' size and microseconds per call: the raw read alone, a census when the maps did not change
(read and hash), one when they did (read, hash, parse, every mapping already judged), and the first census
(every file judged; the candidate-reachable ones read and, once per content, run through nm)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from kernelsmith.evaluation import loads

CHILD = r'''
import sys, torch
device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.randn(512, 512, device=device)
(x @ x).sum().item()
torch.nn.functional.conv2d(torch.randn(4, 16, 32, 32, device=device), torch.randn(16, 16, 3, 3, device=device))
print(device, flush=True)
for line in sys.stdin:  # each line: one more allocation that maps memory, so the maps change
    keep = torch.empty(1 << 22, device="cpu"); print("ok", flush=True)
'''


def per_call_us(action, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        action()
    return (time.perf_counter() - start) / repeats * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    device = child.stdout.readline().strip()
    pid = child.pid
    raw = loads.read_proc(pid, "maps")
    print(f"{device} torch process: {len(raw.splitlines())} mappings, {len(raw)} bytes, "
          f"{len(loads.executable_mappings(raw))} executable file mappings")
    census = loads.LoadCensus()
    start = time.perf_counter()
    census.look([pid])
    print(f"first census (every file judged): {(time.perf_counter() - start) * 1e3:.1f} ms")
    print(f"raw read of /proc/PID/maps: {per_call_us(lambda: loads.read_proc(pid, 'maps'), args.repeats):.0f} us")
    print(f"census, maps unchanged: {per_call_us(lambda: census.look([pid]), args.repeats):.0f} us")

    def changed():
        child.stdin.write("\n")
        child.stdin.flush()
        child.stdout.readline()
        census._seen.clear()  # as if the bytes had changed: parse again

    start = time.perf_counter()
    for _ in range(args.repeats):
        changed()
        census.look([pid])
    print(f"census, maps changed (parsed again, nothing new): "
          f"{(time.perf_counter() - start) / args.repeats * 1e6 - per_call_us(changed, args.repeats):.0f} us")
    print("violation:", census.violation())
    child.stdin.close()
    child.wait()


if __name__ == "__main__":
    main()
