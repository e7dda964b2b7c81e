"""What a user gets from `pip install kernelsmith` (a wheel, not this checkout): every Python package of the
source tree, and the data files the code reads. The package list in pyproject.toml is explicit (skills/ and
prompts/ are mapped in), and kernelsmith.synth was once missing from it: `kernelsmith synth` worked here and
failed installed."""

from __future__ import annotations

import sys
from fnmatch import fnmatch
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


def test_the_compilers_fixed_text_is_package_data():
    """The code generators paste fixed C++/CUDA text that lives in kernelsmith/compiler/<target>/text/ (read with
    importlib.resources): a file the package-data globs miss is in this checkout and not in a wheel, and every
    generated kernel would fail to build installed."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    texts = sorted((ROOT / "kernelsmith" / "compiler").rglob("text/*"))
    assert any(p.suffix == ".cuh" for p in texts) and any(p.suffix == ".h" for p in texts)
    missed = [str(p.relative_to(ROOT)) for p in texts
              if not any(fnmatch(p.relative_to(p.parents[1]).as_posix(), glob)
                         for glob in globs.get(".".join(p.parents[1].relative_to(ROOT).parts), []))]
    assert missed == [], f"fixed text a wheel would leave out: {missed}"
