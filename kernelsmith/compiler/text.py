"""The fixed C++/CUDA text of the generated files, kept as real files in each target's `text/`
folder (package data), so that it reads, diffs and lints as C++ rather than as Python strings.

A generator pastes a file into what it writes, byte for byte. A file with `$field`s is a
`string.Template` the generator fills; one without is pasted as it is.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from string import Template


@cache
def template(package: str, name: str) -> Template:
    """`package`'s file text/<name>, read once per process."""
    return Template(files(package).joinpath("text", name).read_text(encoding="utf-8"))


def fixed(package: str, name: str) -> str:
    """A file that has no fields, as it is."""
    return template(package, name).template
