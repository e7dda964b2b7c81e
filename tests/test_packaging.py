"""What a user gets from `pip install kernelsmith` (a wheel, not this checkout): every Python package of the
source tree. The package list in pyproject.toml is explicit (skills/ and prompts/ are mapped in), and
kernelsmith.synth was once missing from it: `kernelsmith synth` worked here and failed installed."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_python_package_of_the_tree_is_in_the_wheels_package_list():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "kernelsmith").rglob("__init__.py")}
    assert found - listed == set(), f"packages a wheel would leave out: {sorted(found - listed)}"
