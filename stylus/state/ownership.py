"""The one failure a partition's store reports about who owns the partition."""

from __future__ import annotations


class OwnershipLost(RuntimeError):
    """A store refused to save a partition because its stored offset moved on since this instance read it:
    another instance owns the partition now, and this one is a zombie (frozen, or cut off past its session).
    Nothing of the refused save was written; the checkpoint stops there (stylus/runtime/checkpoint.py)."""
