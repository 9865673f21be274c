"""The one exception type users see.

A :class:`DbfsError` carries a single line that names the problem and the fix.
The CLI prints it as ``dbfs: error: <message>`` and exits with code 2; library
callers get the exception. Nothing else in dbfs should reach a user as a
traceback for bad input.
"""


class DbfsError(Exception):
    """Bad input or an unusable dataset: one line, problem and fix."""

    exit_code = 2


class ArgumentError(DbfsError, ValueError):
    """A Python API argument of the wrong type or outside its range, named with its valid range
    (also a ``ValueError``, so callers catching either get it)."""
