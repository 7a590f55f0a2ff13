"""What the parent and a decode worker say to each other: tasks one way, typed messages back.

``Ready`` once at start-up, then for each task ``Probed`` (a probe's answer) or ``Batch``
messages and ``Done``, or ``Failed``. The pool (vqa.engine.processes) adds ``Crashed`` and
``TimedOut`` for tasks whose worker died or ran past its limit.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..preprocess import FrameStats
from ..types import SamplePlan, VideoInfo


@dataclass(frozen=True)
class ProbeTask:
    task_id: int
    path: str
    decoder: str
    want_keyframes: bool
    timeout_s: float | None = None  # enforced by the parent (WorkerPool), from when a worker takes it


@dataclass(frozen=True)
class DecodeTask:
    task_id: int
    path: str
    decoder: str
    plan: SamplePlan  # the runs of this segment only
    run_offset: int  # index of the segment's first run in the video's plan
    open_end: bool  # the video's last segment: its last run may read to the end of the stream
    threads: int = 1  # FFmpeg threads: more than 1 only when a video could not be split
    timeout_s: float | None = None  # enforced by the parent (WorkerPool), from when a worker takes it


@dataclass(frozen=True)
class FrameMeta:
    run: int
    pts_s: float
    stats: FrameStats


# --- messages to the parent ------------------------------------------------------------------

@dataclass(frozen=True)
class Ready:
    """Once, at start-up: the worker takes tasks now. ``address_space_mb``: what it maps already
    (None where /proc cannot say), to check a memory limit against."""
    pid: int
    address_space_mb: int | None


@dataclass(frozen=True)
class Probed:
    task_id: int
    info: VideoInfo
    keyframes_s: list[float] | None


@dataclass(frozen=True)
class Batch:
    """``len(frames)`` views are in ring slot ``slot``; the parent releases it when done."""
    task_id: int
    slot: int
    frames: list[FrameMeta]


@dataclass(frozen=True)
class Done:
    task_id: int
    frames_decoded: int
    decode_errors: int
    warnings: list[str]


@dataclass(frozen=True)
class Failed:
    """The task failed; the video gets an error record."""
    task_id: int
    code: str
    message: str


@dataclass(frozen=True)
class Crashed:
    """From the pool: the task's worker died (killed, segfault); it was replaced."""
    task_id: int
    exitcode: int | None


@dataclass(frozen=True)
class TimedOut:
    """From the pool: the task ran past its limit; its worker was killed and replaced."""
    task_id: int
    elapsed_s: float
