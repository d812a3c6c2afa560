"""Errors the command line turns into exit status 2 with one message (never a traceback)."""


class UsageError(Exception):
    """Bad usage or bad input: an unknown option value, an unreadable file, a path that cannot be written."""
