"""Whether a session succeeded, in one line: for the summary a person reads and the exit status a script reads."""

from __future__ import annotations


def verdict(best: dict | None) -> tuple[bool, str]:
    """(success, one line) of a session's best kernel (Best as a dict): a success is a verified kernel measured
    faster than eager. A kernel that verified but is slower, or was never profiled, is committed (it is the
    best so far) but is not a success, and the line says so plainly."""
    if not best:
        return False, "no kernel verified"
    eager = best.get("speedup_vs_eager")
    if eager is None:
        return False, "a kernel verified, but none was profiled: not shown faster than eager"
    if eager <= 1.0:
        return False, f"no kernel beat eager; best {eager:.2f}x"
    return True, f"faster than eager: {eager:.2f}x"
