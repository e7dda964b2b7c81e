"""kernelsmith synth: training tasks composed from torch's own operators, checked by a rubric in the
sandbox pool and decontaminated against evaluation sets (docs/synth.md)."""
