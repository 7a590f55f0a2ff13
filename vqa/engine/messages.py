"""What the parent and a decode worker say to each other: tasks one way, typed messages back.

``Ready`` once at start-up, then for each task ``Probed`` (a probe's answer) and/or ``Batch``
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
class ProbeDecodeTask:
    """A video that is not split: the probe, then the decode of its whole plan, in one task
    that opens the file once. The worker plans as the parent does (``vqa.sample.plan_frames``
    of the probe's info and keyframes with ``frames``: a pure function), sends ``Probed``
    (not the task's last message), then the ``Batch`` messages and ``Done``. The parent
    holds the task to the probe's limit until ``Probed``, then to the decode's (WorkerPool.restart_clock)."""
    task_id: int
    path: str
    decoder: str
    frames: int | str  # ScoreOptions.frames
    timeout_s: float | None = None  # the probe's limit; enforced by the parent, from when a worker takes it


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
    cut: int = 0  # 0: the ring row holds the view; else the region of a mosaic (vqa.preprocess.cut)


# --- messages to the parent ------------------------------------------------------------------

@dataclass(frozen=True)
class Ready:
    """Once, at start-up: the worker takes tasks now. ``address_space_mb``: what it maps already
    (None where /proc cannot say), to check a memory limit against. ``decoder_error``: why the
    decoder's package did not import there (BackendUnavailable's message), else None."""
    pid: int
    address_space_mb: int | None
    decoder_error: str | None = None


@dataclass(frozen=True)
class Probed:
    """A probe's answer; the task's last message unless ``decoding`` (a ProbeDecodeTask goes on)."""
    task_id: int
    info: VideoInfo
    keyframes_s: list[float] | None
    decoding: bool = False


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
