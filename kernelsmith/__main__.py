"""`python -m kernelsmith`: the same CLI as the `kernelsmith` command."""

import sys

from kernelsmith.cli import main

sys.exit(main())
