"""Exceptions that carry an actionable message to the edges (CLI, job log, UI)."""


class LinguaForgeError(Exception):
    """Base class of every error LinguaForge raises on purpose.

    `detail` is optional text for people beyond the one-line message (the doctor's table): `--json`
    output carries it, and a job shows it as its error.
    """

    exit_code = 1
    detail = ""


class InputError(LinguaForgeError):
    """Bad input from the user: a wrong file, value or option. The CLI exits with 2.

    The message names the file, line or value at fault and says how to fix it.
    """

    exit_code = 2


class InternalError(LinguaForgeError):
    """A failure inside LinguaForge that the user's input did not cause. The CLI exits with 1."""

    exit_code = 1
