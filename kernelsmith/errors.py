"""Typed errors shown to the user as one line with a hint (tracebacks only with --debug)."""

from __future__ import annotations


class KernelsmithError(Exception):
    """An error the user can act on. exit_code 2 means bad input."""

    exit_code = 2

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class BadInput(KernelsmithError):
    """A task, candidate, workdir or flag that cannot be used as given."""


class WorkerFailed(KernelsmithError):
    """The harness worker itself broke (not the candidate): a bug or a broken install."""

    exit_code = 3
