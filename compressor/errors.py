"""Errors a user can act on.

A ``CompressorError`` carries one line that says what is wrong and where; the
CLI prints it without a traceback and exits non-zero. Anything else reaching
the CLI is a bug in the toolkit and keeps its traceback.
"""


class CompressorError(Exception):
    """A problem with the user's input, data, checkpoint or environment."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, so temporary folders are removed on the way out."""


def where(path, line=None) -> str:
    """Format a location as ``path:line`` for error messages."""
    return f"{path}:{line}" if line is not None else str(path)
