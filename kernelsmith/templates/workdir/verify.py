#!/usr/bin/env python3
"""Verify model_new.py against model.py with the installed kernelsmith (fixed infrastructure: do not edit)."""
import sys
from pathlib import Path

from kernelsmith.cli import main

sys.exit(main(["verify", str(Path(__file__).resolve().parent), *sys.argv[1:]]))
