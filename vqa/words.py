"""Counts in sentences a person reads: "1 video", "2 videos", "0 videos"."""
from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` in agreement.

        >>> counted(1, "video"), counted(0, "video"), counted(2, "entry", "entries")
        ('1 video', '0 videos', '2 entries')
    """
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
