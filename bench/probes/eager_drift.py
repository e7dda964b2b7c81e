"""Why is eager timed beside an honest candidate slower than eager in a clean process? (H200 probe)

    python bench/probes/eager_drift.py [--runs 3]

Evaluates the red team's honest candidate (examples/bias_gelu_scale) with the jail on and off, and a
candidate that is the reference itself, printing live eager, clean eager, candidate and the notes.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kernelsmith.evaluation.evaluate import evaluate  # noqa: E402
from kernelsmith.evaluation.options import EvalOptions  # noqa: E402
import redteam  # noqa: E402

# the reference itself as the candidate: eager beside eager, no kernels loaded
SELF = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n" + redteam.MODEL.format(
    body='return F.gelu(x + self.bias, approximate="none") * self.scale')


def show(label: str, result) -> None:
    t = result.timings_ms
    print(f"{label:18} live {t.get('eager_live', 0):.4f}  clean {t.get('eager', 0):.4f}  cand {t.get('candidate', 0):.4f}"
          f"  contended={bool(result.contended)}  jail={result.jail}  err={result.error[:80]!r}", flush=True)
    for note in result.notes:
        if "baselines" in note or "contended" in note:
            print("    ", note[:200])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        shutil.copy(redteam.EXAMPLE / "model.py", folder / "model.py")
        honest = redteam.write_candidate(folder, "cuda", "honest")
        (folder / "itself.py").write_text(SELF)
        for jail in ("", "none"):
            os.environ.pop("KERNELSMITH_JAIL", None)
            if jail:
                os.environ["KERNELSMITH_JAIL"] = jail
            for name, cand in (("honest", honest), ("itself", folder / "itself.py")):
                for i in range(args.runs):
                    result = evaluate(folder / "model.py", cand, EvalOptions(device="cuda", min_runs=100,
                                                                             compile_baseline=False))
                    show(f"{name} jail={jail or 'on'} #{i}", result)


if __name__ == "__main__":
    main()
