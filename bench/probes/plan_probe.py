"""Why a task's plan fails on this machine: build_plan for each task file, the reason printed.

    python3 bench/probes/plan_probe.py TASK.py... [--device cuda]
"""
import sys
import traceback
import warnings

warnings.filterwarnings("ignore")
from kernelsmith.compiler.pipeline import build_plan  # noqa: E402

for task in sys.argv[1:]:
    try:
        built = build_plan(task, "cuda", "fp32")
        print(task, "->", built.unsupported or built.summary, flush=True)
    except Exception:  # the probe reports whatever breaks
        print(task, "-> CRASH", traceback.format_exc()[-1500:], flush=True)
