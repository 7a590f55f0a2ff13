"""The service's own refusals, raised below the web layer and answered by it."""
from __future__ import annotations

import errno
import sqlite3


class Busy(Exception):
    """The queue is full; ``retry_after_s`` estimates when a place frees up (429)."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


_NO_SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}  # EFBIG: a file-size limit, a disk full for this file


def no_space_error(exc: BaseException | None) -> bool:
    """A full disk anywhere in ``exc``'s chain: an OSError's errno, or SQLite's SQLITE_FULL."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE_ERRNOS:
            return True
        if isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
                                               or "disk is full" in str(exc)):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False
