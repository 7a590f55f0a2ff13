"""Limits on decoding one untrusted video: the wall-clock timeout and the worker memory cap.

The pool (vqa.workers) enforces them; this module only says how large they are.
"""
from __future__ import annotations

import math

from .errors import UsageError
from .types import SamplePlan, VideoInfo

# timeout_s="auto": a limit that only a stuck or pathological decode reaches. Each task (a probe,
# or one decode segment) gets it, counted from when a worker takes the task, with the time spent
# waiting for the parent's inference (back-pressure) left out: so it measures decoding alone.
# A worker decoded 1080p H.264 at about 80 frames/s here, views included, and the README's
# decode-only floor is about 58 frames/s per FFmpeg thread; 5 frames/s leaves room for 4K,
# HEVC/AV1 in software and a slower or busier machine. A sampled plan decodes its frames plus,
# before each run, up to a GOP from the keyframe the seek lands on (allowed: 10 s at 25 fps).
AUTO_TIMEOUT_FPS = 5.0
AUTO_TIMEOUT_SEEK_FRAMES = 250
AUTO_TIMEOUT_MIN_S = 120.0  # also the probe's limit: opening, reading headers, the keyframe scan
AUTO_TIMEOUT_MAX_S = 12 * 3600.0  # bounds a bogus declared frame count; pass a number for more
# worker_memory_mb="auto": the address space (RLIMIT_AS, virtual, not resident) a worker may use
# besides the shared ring. Measured here: 550 MiB at start-up (Python, numpy, OpenCV, FFmpeg's
# libraries), a peak of 724 MiB decoding 1080p H.264 every frame with one FFmpeg thread and 823
# MiB with two; each more FFmpeg thread reserves about 100 MiB (stack, malloc arena). A task
# gets up to `workers` threads when its video cannot be split, hence the per-worker term.
AUTO_MEMORY_BASE_MB = 2048
AUTO_MEMORY_PER_THREAD_MB = 128
AUTO_MEMORY_MIN_MB = 4096
MIN_WORKER_MEMORY_MB = 256  # below this a worker cannot even start Python and its libraries


def auto_timeout_s(info: VideoInfo, plan: SamplePlan) -> float:
    """The decode limit of timeout_s="auto" for ``plan`` on a video of ``info``.

    >>> from vqa.sample import plan_frames
    >>> info = VideoInfo(width=1920, height=1080, fps=25.0, duration_s=3600.0, frame_count=90000, codec="h264")
    >>> auto_timeout_s(info, plan_frames(info, "all")), auto_timeout_s(info, plan_frames(info))
    (18000.0, 406.4)
    """
    if info.frame_count <= 0:  # length unknown: the bound alone
        return AUTO_TIMEOUT_MAX_S
    if plan.mode == "all" or any(r.count == 0 for r in plan.runs):
        frames = info.frame_count
    else:
        frames = min(info.frame_count, sum(r.count + AUTO_TIMEOUT_SEEK_FRAMES for r in plan.runs))
    return min(AUTO_TIMEOUT_MAX_S, max(AUTO_TIMEOUT_MIN_S, frames / AUTO_TIMEOUT_FPS))


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
