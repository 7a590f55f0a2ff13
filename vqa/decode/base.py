"""The one interface every decode backend implements, and the plan semantics they share.

A backend supplies four primitives (open, grab, retrieve, seek); ``VideoReader.read`` turns a
``SamplePlan`` into frames with them, so every backend selects frames by the same rule.
"""
from __future__ import annotations

import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import ClassVar

import numpy as np

from vqa.errors import InputError, UsageError
from vqa.types import Frame, Run, SamplePlan, VideoInfo

# A run this far (seconds) ahead of the decode position is reached by seeking, not decoding.
SEEK_AHEAD_S = 2.0
# Plan starts and frame timestamps are compared with this slack, so float noise between
# backends (rational pts vs milliseconds) never moves a frame in or out of a run.
PTS_TOLERANCE_S = 1e-6


def check_input_path(path: str) -> None:
    """Raise InputError with a stable code for what can be told before any demuxer runs."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"no such file: {path!r}; check the path", code="E_NOT_FOUND") from None
    except PermissionError:
        raise InputError(f"cannot access {path!r}: permission denied", code="E_UNREADABLE") from None
    except OSError as exc:
        raise InputError(f"cannot access {path!r}: {exc.strerror}", code="E_UNREADABLE") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path!r} is a directory, expected a video file", code="E_NOT_VIDEO")
    if not stat.S_ISREG(st.st_mode):
        # A FIFO or device named like a video would block the decoder's open() for good.
        raise InputError(f"{path!r} is not a regular file", code="E_BAD_PATH")
    if st.st_size == 0:
        raise InputError(f"{path!r} is empty (0 bytes)", code="E_EMPTY")
    if not os.access(path, os.R_OK):
        raise InputError(f"cannot read {path!r}: permission denied", code="E_UNREADABLE")


class VideoReader(ABC):
    """Reads frames of one video's first video stream; a context manager, ``close()`` is explicit.

    ``frames_decoded`` counts frames the decoder produced (including those skipped to reach a run);
    ``decode_errors`` counts packets or frames that failed to decode; ``warnings`` collects
    "W_CODE: message" strings a backend noticed while reading (passed on to the record).
    """

    BACKEND_NAME: ClassVar[str] = ""
    # Whether jumping ahead with a seek lands on exactly the frames sequential decoding gives.
    SEEKS_AHEAD: ClassVar[bool] = False

    def __init__(self, path: str | os.PathLike[str], *, threads: int = 1):
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise UsageError(f"threads must be an int >= 1, got {threads!r}")
        self.path = os.fspath(path)
        self.threads = threads
        self.frames_decoded = 0
        self.decode_errors = 0
        self.warnings: list[str] = []
        self._last_pts_s: float | None = None  # pts of the last grabbed frame; None = at the start
        # A frame grabbed past the end of one run's span, kept for the next run.
        self._pending_pts_s: float | None = None
        self._closed = False
        check_input_path(self.path)
        try:
            self._info = self._open()
        except BaseException:
            self.close()
            raise

    # --- what a backend implements -------------------------------------------------------
    @abstractmethod
    def _open(self) -> VideoInfo:
        """Open ``self.path`` and return its metadata; raise InputError with a stable code."""

    @abstractmethod
    def _grab(self) -> float | None:
        """Decode the next frame in presentation order; its pts in seconds from stream start,
        or None at the end of the stream (and on every later call)."""

    @abstractmethod
    def _retrieve(self) -> np.ndarray | None:
        """The last grabbed frame as upright RGB uint8 HxWx3, or None if it cannot be converted."""

    @abstractmethod
    def _seek(self, t_s: float) -> None:
        """Position so the next grab returns a frame with pts <= t_s, or the first frame."""

    @abstractmethod
    def _release(self) -> None:
        """Free the backend's handles; called once, possibly after a failed ``_open``."""

    def keyframe_times(self, max_packets: int) -> list[float] | None:
        """Presentation times of the keyframes, or None where the backend cannot tell."""
        return None

    # --- shared behaviour ----------------------------------------------------------------
    @property
    def info(self) -> VideoInfo:
        return self._info

    def read(self, plan: SamplePlan, *, open_end: bool = True) -> Iterator[Frame]:
        """Yield the frames of each run in plan order, one at a time (memory is one frame).

        A run never reads past its span, so dense plans cannot take a frame twice. With
        ``open_end`` the last run is the exception, because declared durations are often
        short of the stream; a segment of a larger plan passes ``open_end=False``.
        """
        if self._closed:
            raise UsageError(f"{type(self).__name__} for {self.path!r} is closed")
        for k, run in enumerate(plan.runs):
            yield from self._read_run(k, run, bounded=k < len(plan.runs) - 1 or not open_end)

    def _read_run(self, k: int, run: Run, *, bounded: bool) -> Iterator[Frame]:
        start = run.start_s - PTS_TOLERANCE_S
        end = run.span_end_s - PTS_TOLERANCE_S if bounded else float("inf")
        last, pending = self._last_pts_s, self._pending_pts_s
        self._pending_pts_s = None
        if pending is not None and pending >= start:
            pass  # the frame in hand opens this run: no seek, no decode
        elif (last is not None and last >= start) or (self.SEEKS_AHEAD and (
                start > (last or 0.0) + SEEK_AHEAD_S or (last is None and start > 0.0))):
            # A fresh reader asked to start later (a worker's segment) seeks even a short way.
            # Behind us: only a seek back can reach it. Far ahead: a seek beats decoding the gap.
            self._seek(run.start_s)
            self._last_pts_s = pending = None
        else:
            pending = None
        taken = 0
        while run.count == 0 or taken < run.count:
            if pending is not None:
                pts, pending = pending, None
            else:
                pts = self._grab()
                if pts is None:
                    break
                self.frames_decoded += 1
                self._last_pts_s = pts
            if pts < start:
                continue
            if pts >= end:
                self._pending_pts_s = pts
                break
            rgb = self._retrieve()
            if rgb is None:
                self.decode_errors += 1
                continue
            yield Frame(run=k, pts_s=pts, rgb=rgb)
            taken += 1
        if self.frames_decoded == 0:
            raise InputError(f"no frame of {self.path!r} could be decoded", code="E_DECODE")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._release()

    def __enter__(self) -> VideoReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path!r} closed={self._closed}>"
