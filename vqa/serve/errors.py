"""The service's own refusals, raised below the web layer and answered by it."""
from __future__ import annotations


class Busy(Exception):
    """The queue is full; ``retry_after_s`` estimates when a place frees up (429)."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s
