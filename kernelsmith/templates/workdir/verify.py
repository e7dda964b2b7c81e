#!/usr/bin/env python3
"""Verify model_new.py against model.py with the installed kernelsmith (fixed infrastructure: do not edit)."""
import sys
from pathlib import Path

from kernelsmith.cli import main

if __name__ == "__main__":  # importing this file (e.g. as stdlib `profile`) must do nothing
    sys.exit(main(["verify", str(Path(__file__).resolve().parent), *sys.argv[1:]]))
