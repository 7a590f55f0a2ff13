"""Limits on decoding one untrusted video: the wall-clock timeout and the worker memory cap.

The pool (vqa.engine.processes) enforces them; this module only says how large they are.
"""
from __future__ import annotations

import errno
import math

from .errors import UsageError
from .types import SamplePlan, VideoInfo

# timeout_s="auto": a limit that only a stuck or pathological decode reaches. Each task (a probe,
# or one decode segment) gets it, counted from when a worker takes the task, with the time spent
# waiting for the parent's inference (back-pressure) left out: so it measures decoding alone.
# A worker decoded 1080p H.264 at about 80 frames/s here, views included, and the measured
# decode-only floor is about 58 frames/s per FFmpeg thread; 5 frames/s leaves room for 4K,
# HEVC/AV1 in software and a slower or busier machine. A sampled plan decodes its frames plus,
# before each run, up to a GOP from the keyframe the seek lands on (allowed: 10 s at 25 fps).
AUTO_TIMEOUT_FPS = 5.0
AUTO_TIMEOUT_SEEK_FRAMES = 250
AUTO_TIMEOUT_MIN_S = 120.0  # also the probe's limit: opening, reading headers, the keyframe scan
AUTO_TIMEOUT_MAX_S = 12 * 3600.0  # bounds a bogus declared frame count; pass a number for more
# The frame size the rates above were measured at. Decoding costs about in proportion to the
# pixels, so a larger frame counts as several frames of this size (a 67 Mpx GIF canvas as 32).
REFERENCE_PIXELS = 1920 * 1080
# A length nothing says (not the header, not the packets): the bytes bound the work instead.
AUTO_TIMEOUT_BYTES_PER_S = 64 * 1024
# worker_memory_mb="auto": the address space (RLIMIT_AS, virtual, not resident) a worker may use
# besides the shared ring. Measured here: 550 MiB at start-up (Python, numpy, OpenCV, FFmpeg's
# libraries), a peak of 724 MiB decoding 1080p H.264 every frame with one FFmpeg thread and 823
# MiB with two; each more FFmpeg thread reserves about 100 MiB (stack, malloc arena). A task
# gets up to `workers` threads when its video cannot be split, hence the per-worker term.
AUTO_MEMORY_BASE_MB = 2048
AUTO_MEMORY_PER_THREAD_MB = 128
AUTO_MEMORY_MIN_MB = 4096
MIN_WORKER_MEMORY_MB = 256  # below this a worker cannot even start Python and its libraries


def _frame_weight(width: int, height: int) -> float:
    """How many reference frames one frame of this size costs to decode (at least 1)."""
    return max(1.0, width * height / REFERENCE_PIXELS)


def decode_budget_frames(plan: SamplePlan, width: int, height: int) -> int | None:
    """Frames a reader may decode for a sampled ``plan`` whatever the file declares, or None
    (no budget) for ``mode="all"``: each run's frames plus up to AUTO_TIMEOUT_SEEK_FRAMES to
    reach it, in reference frames (so fewer of a larger size). An open run (a video no longer
    than the plan, by its header) counts as ``requested`` frames.

    >>> from vqa.types import Run
    >>> plan = SamplePlan("default", tuple(Run(10.0 * k, 4, 10.0 * k, 10.0 * k + 10) for k in range(8)), 32)
    >>> decode_budget_frames(plan, 1920, 1080), decode_budget_frames(plan, 8192, 8192)
    (2032, 63)
    """
    if plan.mode == "all":
        return None
    wanted = sum(r.count or (plan.requested or 0) for r in plan.runs)
    return max(wanted, math.ceil((wanted + AUTO_TIMEOUT_SEEK_FRAMES * len(plan.runs)) / _frame_weight(width, height)))


def auto_timeout_s(info: VideoInfo, plan: SamplePlan) -> float:
    """The decode limit of timeout_s="auto" for ``plan`` on a video of ``info``.

    A sampled plan gets the time of its decode budget (``decode_budget_frames``), which holds
    whatever the header says; ``all`` gets the frames the file holds (declared or measured), or
    with no length known at all, the time to read its bytes at AUTO_TIMEOUT_BYTES_PER_S.

    >>> from vqa.sample import plan_frames
    >>> info = VideoInfo(width=1920, height=1080, fps=25.0, duration_s=3600.0, frame_count=90000, codec="h264")
    >>> auto_timeout_s(info, plan_frames(info, "all")), auto_timeout_s(info, plan_frames(info))
    (18000.0, 406.4)
    """
    weight = _frame_weight(info.width, info.height)
    budget = decode_budget_frames(plan, info.width, info.height)
    if budget is not None:
        seconds = min(budget, info.frame_count or budget) * weight / AUTO_TIMEOUT_FPS
    elif info.frame_count > 0:
        seconds = info.frame_count * weight / AUTO_TIMEOUT_FPS
    elif info.size_bytes > 0:
        seconds = info.size_bytes / AUTO_TIMEOUT_BYTES_PER_S
    else:
        seconds = AUTO_TIMEOUT_MAX_S
    return min(AUTO_TIMEOUT_MAX_S, max(AUTO_TIMEOUT_MIN_S, seconds))


def out_of_memory(exc: BaseException | None) -> bool:
    """True if ``exc`` is, or was raised while handling, a failed allocation: MemoryError
    (av.error.MemoryError, FFmpeg's ENOMEM, is one; the decoders may wrap it in an InputError),
    an OSError ENOMEM (mmap), OpenCV's cv::error for an allocation ("Insufficient memory",
    "Failed to allocate"), or a lazy import whose library could not be mapped."""
    seen = 0
    while exc is not None and seen < 8:
        if (isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM)
                or (isinstance(exc, ImportError) and "failed to map segment" in str(exc))
                or (type(exc).__module__.startswith("cv2") and any(
                    m in str(exc) for m in ("Insufficient memory", "Failed to allocate", "OutOfMemory")))):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def auto_worker_memory_mb(workers: int) -> int:
    return max(AUTO_MEMORY_MIN_MB, AUTO_MEMORY_BASE_MB + AUTO_MEMORY_PER_THREAD_MB * workers)


def check_limits(timeout_s, worker_memory_mb) -> None:
    if not (timeout_s in ("auto", None) or (isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool)
                                            and math.isfinite(timeout_s) and timeout_s >= 0)):
        raise UsageError(f"timeout_s must be 'auto', None or 0 (no limit), or seconds > 0, got {timeout_s!r}")
    if not (worker_memory_mb in ("auto", None, 0) or (isinstance(worker_memory_mb, int)
                                                     and not isinstance(worker_memory_mb, bool)
                                                     and worker_memory_mb >= MIN_WORKER_MEMORY_MB)):
        raise UsageError(f"worker_memory_mb must be 'auto', None or 0 (no limit), or an integer >= "
                         f"{MIN_WORKER_MEMORY_MB} (MiB), got {worker_memory_mb!r}")
