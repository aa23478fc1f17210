"""Exceptions that carry an actionable message to the edges (CLI, job log, UI)."""


class LinguaForgeError(Exception):
    """Base class of every error LinguaForge raises on purpose."""

    exit_code = 1


class InputError(LinguaForgeError):
    """Bad input from the user: a wrong file, value or option. The CLI exits with 2.

    The message names the file, line or value at fault and says how to fix it.
    """

    exit_code = 2


class InternalError(LinguaForgeError):
    """A failure inside LinguaForge that the user's input did not cause. The CLI exits with 1."""

    exit_code = 1
