"""kernelsmith: turn PyTorch modules into fast, verified CUDA kernels."""

__version__ = "0.1.0"
HARNESS_VERSION = "1"
