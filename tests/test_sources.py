"""Task and candidate files run from their source text: a forged bytecode cache is never believed."""

import importlib.util
import os
import py_compile
import sys

from kernelsmith.evaluation.sources import load_source

REAL = "ANSWER = 'the real reference'\n"
FORGED = "ANSWER = 'forged'\n"


def _forge_cache(path):
    """A __pycache__ entry compiled from other code, stamped with the real source's mtime and size:
    exactly what the import system checks before it believes a cache."""
    fake = path.with_name("fake_src.py")
    fake.write_text(FORGED + " " * (len(REAL) - len(FORGED)))  # the same size as the real source
    os.utime(fake, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))
    py_compile.compile(str(fake), cfile=importlib.util.cache_from_source(str(path)))
    fake.unlink()


def test_a_forged_bytecode_cache_fools_import_but_not_load_source(tmp_path):
    path = tmp_path / "refmod.py"
    path.write_text(REAL)
    _forge_cache(path)
    sys.path.insert(0, str(tmp_path))
    try:
        assert importlib.import_module("refmod").ANSWER == "forged"  # the attack works on plain import
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("refmod", None)
    assert load_source(path, "ks_test_refmod", search_folder=False).ANSWER == "the real reference"
