#!/usr/bin/env python3
"""Build kernels/ with the installed kernelsmith (fixed infrastructure: do not edit)."""
import sys
from pathlib import Path

from kernelsmith.cli import main

sys.exit(main(["compile", str(Path(__file__).resolve().parent), *sys.argv[1:]]))
