"""Errors whose message is complete for a user: what is wrong, where it was configured, and the fix."""

from __future__ import annotations


class ClearError(Exception):
    """The CLI prints such an error as one `error: ...` message, with no type name and no traceback: the
    message already names the setting, where it came from and what to do."""
