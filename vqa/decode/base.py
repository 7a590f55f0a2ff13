"""The one interface every decode backend implements, and the plan semantics they share.

A backend supplies four primitives (open, grab, retrieve, seek); ``VideoReader.read`` turns a
``SamplePlan`` into frames with them, so every backend selects frames by the same rule.

Inputs are untrusted uploads, so what one video may cost is bounded here, for every backend:
frame size (``MAX_PIXELS``, enforced by each backend at open), frames decoded
(``MAX_DECODE_FRAMES``) and timeline read (``MAX_DURATION_S``). A cap that stops decoding is
reported as a ``W_CAPPED`` warning, never silently.

Long because the read loop, the caps and the warnings it raises share one state
(what was decoded, where, and why it stopped); split, each part would reach into the others.
"""
from __future__ import annotations

import dataclasses
import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import ClassVar

import numpy as np

from vqa.codes import ErrorCode, WarningCode
from vqa.errors import InputError, UsageError
from vqa.files import OpenedFile, bad_path, fingerprint, has_proc_fd, missing, open_input
from vqa.limits import decode_budget_frames
from vqa.types import Frame, Run, SamplePlan, VideoInfo

# Packets read for the keyframe times (``keyframe_times``), which place a sampled plan's runs and
# cut a split plan: about 13 min at 25 fps; past it the plan is made without them.
KEYFRAME_SCAN_PACKETS = 20_000
# A run this far (seconds) ahead of the decode position is reached by seeking, not decoding.
SEEK_AHEAD_S = 2.0
# Plan starts and frame timestamps are compared with this slack, so float noise between
# backends (rational pts vs milliseconds) never moves a frame in or out of a run.
PTS_TOLERANCE_S = 1e-6

# Largest frame (width * height) a reader decodes: 8192x8192, about 67 Mpx. The largest
# pictures the top levels of H.264, HEVC and AV1 allow are about 35.7 Mpx (8K UHD, 7680x4320,
# is 33 Mpx), so every real video passes with 2x headroom, while one RGB frame stays under
# 202 MB. FFmpeg's own limit is about 268 Mpx, or 2 GB for one 16-bit RGBA frame.
MAX_PIXELS = 8192 * 8192
# Longest side over shortest side of a frame, beyond which a video is refused (E_ASPECT_RATIO)
# when it is opened. The widest real formats are about 4:1 (panoramas, 32:9 screens), 12:1
# for the odd LED-wall or line-scan clip; 8192x1 passes the pixel cap but is no picture.
MAX_ASPECT_RATIO = 32
# FFmpeg demuxers (their names, as FFmpeg's format_whitelist matches them) of real video
# containers and raw video streams; both backends refuse anything else at open. mov covers
# mp4/m4v/3gp/mj2, matroska covers mkv and webm. Left out on purpose: playlists and scripts
# that open other files (hls, dash, concat), image sequences and single images (image2,
# *_pipe), text rendered as video (tty), devices and network demuxers (lavfi, sdp, rtp,
# rtsp), and headerless raw video (rawvideo).
VIDEO_FORMATS = (
    "mov", "matroska", "avi", "mpegts", "mpeg", "mpegvideo", "flv", "asf", "ivf", "obu",
    "h264", "hevc", "vvc", "m4v", "mjpeg", "yuv4mpegpipe", "nut", "ogg", "mxf", "gif", "dv",
)
# Timeline read from one video: 6 hours. Runs planned past it are skipped (W_CAPPED), so a
# file that declares a duration of years cannot keep a worker seeking and decoding for hours.
MAX_DURATION_S = 6 * 3600.0
# Frames decoded from one video: 6 hours at 60 fps. It only bites on high frame rates or on
# timestamps that never advance (where the duration cap cannot), e.g. frames="all" on a
# 240 fps slow-motion clip longer than 1.5 hours.
MAX_DECODE_FRAMES = int(MAX_DURATION_S * 60)
# W_VARIABLE_FPS: an interval between consecutive decoded frames is irregular when it is more
# than this factor away from the median interval; the warning needs at least
# VFR_MIN_IRREGULAR such intervals and VFR_MIN_SHARE of all intervals seen, so a few dropped
# or corrupt frames in a constant-rate stream (one long gap each) do not raise it.
VFR_RATIO = 1.5
VFR_MIN_IRREGULAR = 3
VFR_MIN_SHARE = 0.1
# Intervals kept for the W_VARIABLE_FPS check (the first ones decoded; memory stays tiny).
VFR_MAX_INTERVALS = 4096


def check_input_path(path: str) -> None:
    """Raise InputError with a stable code for what can be told before any demuxer runs.
    (Readers open the file with ``vqa.files.open_input``, which checks the opened descriptor.)"""
    problem = bad_path(path)
    if problem is not None:
        raise problem
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise missing(path) from None
    except PermissionError:
        raise InputError(f"cannot access {path!r}: permission denied", code=ErrorCode.E_UNREADABLE) from None
    except OSError as exc:
        raise InputError(f"cannot access {path!r}: {exc.strerror}", code=ErrorCode.E_UNREADABLE) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path!r} is a directory, expected a video file", code=ErrorCode.E_NOT_VIDEO)
    if not stat.S_ISREG(st.st_mode):
        # A FIFO or device named like a video would block the decoder's open() for good.
        raise InputError(f"{path!r} is not a regular file", code=ErrorCode.E_BAD_PATH)
    if st.st_size == 0:
        raise InputError(f"{path!r} is empty (0 bytes)", code=ErrorCode.E_EMPTY)
    if not os.access(path, os.R_OK):
        raise InputError(f"cannot read {path!r}: permission denied", code=ErrorCode.E_UNREADABLE)


def check_frame_size(path: str, width: int, height: int, max_pixels: int, *, what: str) -> None:
    """Raise E_TOO_MANY_PIXELS when ``width * height`` is above ``max_pixels``, E_ASPECT_RATIO
    when the shape is absurd (``check_aspect``)."""
    check_aspect(path, width, height)
    if width * height > max_pixels:
        raise InputError(
            f"{path!r} {what} {width}x{height} frames ({width * height / 1e6:.1f} Mpx), above the "
            f"{max_pixels / 1e6:.1f} Mpx this reader decodes; a real video this large needs a "
            "reader made with a larger max_pixels", code=ErrorCode.E_TOO_MANY_PIXELS)


def check_aspect(path: str, width: int, height: int) -> None:
    """Raise E_ASPECT_RATIO for frames no camera or screen makes: one side more than
    MAX_ASPECT_RATIO times the other. Such shapes pass the pixel cap (8192x1 is 8 kpx) but make
    every per-frame step that works on squares (fragments, thumbnails) degenerate. A size not
    known yet (0) is left to the later checks."""
    short, long = min(width, height), max(width, height)
    if short > 0 and long > MAX_ASPECT_RATIO * short:
        raise InputError(
            f"{path!r} has {width}x{height} frames: an aspect ratio over {MAX_ASPECT_RATIO}:1 is "
            "refused (no real video is shaped so)", code=ErrorCode.E_ASPECT_RATIO)


def _positive(name: str, value: object, kind: type[int] | tuple[type[int], type[float]]) -> None:
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        raise UsageError(f"{name} must be a number > 0, got {value!r}")


@dataclasses.dataclass(frozen=True)
class LastFrames:
    """What a read still takes before it seeks or stops (``VideoReader._last_frames``):
    ``count`` frames (this grab's included) that show from ``start_s`` and before ``end_s``,
    frames before ``start_s`` passed over; then it goes on at ``next_start_s`` (None: the
    read ends)."""

    count: int
    start_s: float
    end_s: float
    next_start_s: float | None


class VideoReader(ABC):
    """Reads frames of one video's first video stream; a context manager, ``close()`` is explicit.

    ``frames_decoded`` counts frames the decoder produced (including those skipped to reach a run);
    ``decode_errors`` counts packets or frames that failed to decode; ``warnings`` collects
    "W_CODE: message" strings a backend noticed while reading (passed on to the record).

    ``max_pixels``, ``max_frames`` and ``max_duration_s`` bound what one video may cost
    (defaults: the module constants): a larger frame is ``E_TOO_MANY_PIXELS``; decoding stops
    at the frame or time cap with a ``W_CAPPED`` warning. Warnings noticed while reading:
    ``W_VARIABLE_FPS`` (irregular frame intervals), ``W_SIZE_CHANGED`` (frame size changed
    mid-stream), ``W_CAPPED``.
    """

    BACKEND_NAME: ClassVar[str] = ""
    # Whether jumping ahead with a seek lands on exactly the frames sequential decoding gives.
    SEEKS_AHEAD: ClassVar[bool] = False
    # Whether the backend may skip decoding frames no other frame refers to (B-frames, mostly)
    # when they come before the run being read (``_drop_before_s``): such frames are never
    # grabbed, so they are not counted in ``frames_decoded``.
    DROPS_BEFORE_RUNS: ClassVar[bool] = False

    def __init__(self, path: str | bytes | os.PathLike, *, threads: int = 1,
                 max_pixels: int = MAX_PIXELS, max_frames: int = MAX_DECODE_FRAMES,
                 max_duration_s: float = MAX_DURATION_S):
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise UsageError(f"threads must be an int >= 1, got {threads!r}")
        _positive("max_pixels", max_pixels, int)
        _positive("max_frames", max_frames, int)
        _positive("max_duration_s", max_duration_s, (int, float))
        # str always: bytes names (not UTF-8) become surrogate-escaped str, as os.fsdecode does,
        # which every os function and FFmpeg's open (through os.fsencode) turn back into bytes.
        self.path = os.fsdecode(path)
        self.threads = threads
        self.max_pixels, self.max_frames, self.max_duration_s = max_pixels, max_frames, max_duration_s
        self.frames_decoded = 0
        self.decode_errors = 0
        self.warnings: list[str] = []
        self._last_pts_s: float | None = None  # pts of the last grabbed frame; None = at the start
        # A frame grabbed past the end of one run's span, kept for the next run.
        self._pending_pts_s: float | None = None
        self._drop_before_s: float | None = None  # start of the run being read
        self._capped = False  # a cap stopped decoding: every later run is empty
        self._grab_pts_s: float | None = None  # pts of the previous grab, for frame intervals
        self._intervals_s: list[float] = []
        self._pts_backwards = 0  # consecutive grabs whose pts went back
        self._frame_shape: tuple[int, int] | None = None
        self._closed = False
        self._yielded = 0  # frames handed out by read()
        self._ended = False  # a grab found the end of the stream
        self._budget: int | None = None  # frames_decoded at which read() stops (sampled plans)
        self._open_run_limit: int | None = None
        # Set by _read_run before each grab: the frames it will still take before it seeks or
        # stops (``LastFrames``), or None where more decoding follows. A backend may then drain
        # its decoder for them instead of decoding packets whose frames nobody takes.
        self._last_frames: LastFrames | None = None
        # Opened once and checked (vqa.files); the backend reads this descriptor, not the path.
        self._file: OpenedFile = open_input(self.path)
        try:
            info = self._open()
            check_aspect(self.path, info.width, info.height)
            # Identity of the content read: what a job store keys the record on.
            self._info = dataclasses.replace(
                info, size_bytes=self._file.size_bytes, mtime_ns=self._file.mtime_ns,
                fingerprint=fingerprint(self._file.fd, self._file.size_bytes))
        except BaseException:
            self.close()
            raise

    @property
    def source(self) -> str:
        """The name a backend opens: the checked descriptor's /proc/self/fd entry (FFmpeg cannot
        resolve it to another file), or the path's real path where there is no /proc."""
        return self._file.source if has_proc_fd() else os.path.realpath(self.path)

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
        # A sampled plan is a bounded amount of work whatever the header says: past the budget
        # decoding stops (W_CAPPED). Readers that never seek read forward through the video,
        # so for them the frames the header declares are the budget, if that is more.
        budget = decode_budget_frames(plan, self._info.width, self._info.height)
        if budget is not None and not self.SEEKS_AHEAD:
            budget = max(budget, self._info.frame_count)
        self._budget = None if budget is None else self.frames_decoded + budget
        self._open_run_limit = plan.requested if plan.mode != "all" else None
        for k, run in enumerate(plan.runs):
            following = plan.runs[k + 1].start_s if k + 1 < len(plan.runs) else None
            yield from self._read_run(k, run, bounded=k < len(plan.runs) - 1 or not open_end, next_start_s=following)
        # The first segment (or the whole plan) found the stream's end before any run of its:
        # later segments, further on, find nothing either, so no frame can be taken twice.
        first_segment = plan.runs and plan.runs[0].span_start_s <= 0
        if first_segment and self._ended and not self._yielded and self.frames_decoded and plan.mode != "all":
            # The stream ended before the first run: its header declares more than it holds (a
            # reader that cannot measure the length). Score what is there, from the start.
            first = plan.runs[0]
            self._warn(WarningCode.W_TRUNCATED,
                       f"the stream ends before the first planned run at {first.start_s:.3f} s "
                       f"(the file declares {self._info.duration_s:.3f} s): the frames from its start were scored")
            self._seek(0.0)
            self._last_pts_s = self._pending_pts_s = self._grab_pts_s = None
            self._capped = False  # runs planned past the duration cap were the header's doing
            yield from self._read_run(0, Run(0.0, plan.requested or 0, 0.0, first.span_end_s), bounded=False)

    def _seek_pays(self, last: float | None, start_s: float) -> bool:
        """Whether to seek ahead to ``start_s`` rather than decode on from ``last``.

        A fresh reader asked to start later (a worker's segment) seeks even a short way. Then,
        where the keyframe at or before the start is known, seek exactly when it lies after
        the decode position: from there fewer frames lead to the start, however near it is.
        Otherwise seek when the start is more than SEEK_AHEAD_S away."""
        if last is None:
            return start_s > 0.0
        key = self._keyframe_before_s(start_s)
        if key is not None:
            return key > last + PTS_TOLERANCE_S
        return start_s > last + SEEK_AHEAD_S

    def _keyframe_before_s(self, t_s: float) -> float | None:
        """Time of the last keyframe at or before ``t_s``, or None where the backend cannot
        tell cheaply (no index). It may be early (a sparse index), never late."""
        return None

    def _over_budget(self) -> bool:
        return self._budget is not None and self.frames_decoded > self._budget

    def _seeks_to(self, last: float, start_s: float) -> bool:
        """Whether ``_read_run`` reaches a run that starts at ``start_s`` by ``_seek`` when
        the last frame it grabbed shows at ``last`` and none is pending (the test it makes)."""
        return last >= start_s - PTS_TOLERANCE_S or (self.SEEKS_AHEAD and self._seek_pays(last, start_s))

    def _read_run(self, k: int, run: Run, *, bounded: bool, next_start_s: float | None = None
                  ) -> Iterator[Frame]:
        """Yield the frames of run ``k``; ``next_start_s``: where the read goes next (the next
        run's start), None when it ends with this run."""
        if self._capped:
            return
        if run.start_s > self.max_duration_s:
            self._stop_at_cap(f"runs past {self.max_duration_s:g} s were not read (duration cap)")
            return
        start = run.start_s - PTS_TOLERANCE_S
        end = run.span_end_s - PTS_TOLERANCE_S if bounded else float("inf")
        last, pending = self._last_pts_s, self._pending_pts_s
        self._pending_pts_s = None
        if pending is not None and pending >= start:
            pass  # the frame in hand opens this run: no seek, no decode
        elif (last is not None and self._seeks_to(last, run.start_s)) or (
                last is None and self.SEEKS_AHEAD and self._seek_pays(last, run.start_s)):
            # Behind us: only a seek back can reach it. Ahead: see _seek_pays.
            self._seek(run.start_s)
            self._last_pts_s = pending = self._grab_pts_s = None
        else:
            pending = None
        taken, in_place = 0, False
        self._drop_before_s = start  # what a backend may leave undecoded (DROPS_BEFORE_RUNS)
        if self.DROPS_BEFORE_RUNS and self._grab_pts_s is not None and start > self._grab_pts_s + PTS_TOLERANCE_S:
            self._grab_pts_s = None  # frames up to the run may go undecoded: no interval spans them
        # An open run of a sampled plan (the header said the video is that short) takes no more
        # than the plan asked for, whatever the stream holds.
        limit = run.count or self._open_run_limit
        pts: float | None
        while limit is None or taken < limit:
            if pending is not None:
                pts, pending = pending, None
            else:
                # A run of a set count takes its frames and is done: what the decoder holds
                # may be all it needs (a backend checks that; a grab after it stays exact).
                self._last_frames = (LastFrames(run.count - taken, start, end, next_start_s)
                                     if run.count and limit == run.count and not in_place else None)
                try:
                    pts = self._grab()
                finally:
                    self._last_frames = None
                if pts is None:
                    self._ended = True
                    break
                self.frames_decoded += 1
                self._last_pts_s = pts
                if pts >= start or not self.DROPS_BEFORE_RUNS:
                    self._note_interval(pts)
                else:  # frames before the run may have been dropped unseen: no interval spans them
                    self._grab_pts_s = None
                if self.frames_decoded > self.max_frames:  # one past the cap: there was more
                    self._stop_at_cap(f"stopped after {self.max_frames} decoded frames (frame cap)")
                    break
                if pts > self.max_duration_s:
                    self._stop_at_cap(
                        f"stopped at {pts:.3f} s, past {self.max_duration_s:g} s (duration cap)")
                    break
                if not in_place and self._over_budget():
                    message = (f"decoding stopped at {pts:.3f} s after the plan's budget of "
                               f"{self._budget} decoded frames")
                    if self._yielded or pts >= start:
                        self._stop_at_cap(message)
                        break
                    # Nothing scored yet (a stream that cannot seek, a wrong length): the frames
                    # here stand in for this run rather than none at all.
                    in_place, start, end = True, -float("inf"), float("inf")
                    self._drop_before_s = start
                    self._stop_at_cap(f"{message}; run {k} was taken from there instead")
            if pts < start:
                continue
            if pts >= end:
                self._pending_pts_s = pts
                break
            rgb = self._retrieve()
            if rgb is None:
                self.decode_errors += 1
                continue
            self._note_shape(rgb, pts)
            self._yielded += 1
            yield self._frame_of(k, pts, rgb)
            taken += 1
        if run.count == 0 and limit is not None and taken >= limit and not self._capped:
            if self._grab() is not None:  # the header said no more: say that there was more
                self._stop_at_cap(f"the stream holds more than the {limit} frames the plan took "
                                  "(its header declares fewer); the rest was not read")
        self._check_intervals()
        if self.frames_decoded == 0:
            raise InputError(f"no frame of {self.path!r} could be decoded", code=ErrorCode.E_DECODE)

    def _frame_of(self, run: int, pts_s: float, pixels: np.ndarray) -> Frame:
        """What ``read`` yields for the pixels ``_retrieve`` gave (a reader whose pictures stay
        on the GPU yields its own kind: vqa.decode.nvdec_device)."""
        return Frame(run=run, pts_s=pts_s, rgb=pixels)

    # --- what reading noticed: warnings ---------------------------------------------------
    def _warn(self, code: str, message: str) -> None:
        if not any(w.startswith(code + ":") for w in self.warnings):
            self.warnings.append(f"{code}: {message}")

    def _stop_at_cap(self, message: str) -> None:
        self._capped = True
        self._warn(WarningCode.W_CAPPED, message)

    def _note_interval(self, pts: float) -> None:
        prev, self._grab_pts_s = self._grab_pts_s, pts
        if prev is not None and len(self._intervals_s) < VFR_MAX_INTERVALS:
            d = pts - prev
            if d > PTS_TOLERANCE_S:  # a duplicate timestamp says nothing
                self._intervals_s.append(d)
            elif d < -PTS_TOLERANCE_S:
                self._pts_backwards += 1

    def _check_intervals(self) -> None:
        """W_VARIABLE_FPS when a good share of frame intervals is far from the median one."""
        d = self._intervals_s
        if (len(d) < VFR_MIN_IRREGULAR or self._pts_backwards
                or any(w.startswith(f"{WarningCode.W_VARIABLE_FPS}:") for w in self.warnings)):
            return  # too few intervals, or timestamps out of order (AVI with B-frames): no verdict
        median = float(np.median(d))
        irregular = sum(1 for x in d if x > median * VFR_RATIO or x * VFR_RATIO < median)
        if irregular >= VFR_MIN_IRREGULAR and irregular >= VFR_MIN_SHARE * len(d):
            self._warn(WarningCode.W_VARIABLE_FPS, f"{irregular} of {len(d)} frame intervals differ from "
                       f"the median {median * 1000:.1f} ms by more than {VFR_RATIO}x "
                       f"({min(d) * 1000:.1f}-{max(d) * 1000:.1f} ms)")

    def _note_shape(self, rgb: np.ndarray, pts: float) -> None:
        shape = (rgb.shape[1], rgb.shape[0])
        if self._frame_shape is None:
            self._frame_shape = shape
        elif shape != self._frame_shape:
            self._warn(WarningCode.W_SIZE_CHANGED, f"frame size changed from {self._frame_shape[0]}x"
                       f"{self._frame_shape[1]} to {shape[0]}x{shape[1]} at {pts:.3f} s")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._release()
            finally:
                os.close(self._file.fd)

    def __enter__(self) -> VideoReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path!r} closed={self._closed}>"
