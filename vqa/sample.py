"""Plan which frames to decode: pure arithmetic on stream metadata, no video and no I/O.

A plan is a few short runs of consecutive frames spread over the whole video. Each run
stands for one equal stretch (span) of the timeline, so the runs see the whole video evenly
and a defect found in a run is reported over its span.

Where a run sits inside its span decides what it costs: a decoder reaches a run by seeking to
the keyframe at or before its start and decoding every frame from there, so a run in the
middle of a span can cost a whole GOP for its 4 frames. The rule, given the keyframes' times:

1. a span that holds a keyframe with room for the run after it: the run starts on the frame
   after that keyframe (the one nearest the span's middle placement when there are several).
   It costs the run's frames and the keyframe: nothing else. The keyframe itself is left out
   (``KEYFRAME_SKIP_FRAMES``): coded intra-only, it scores unlike the rest of its GOP;
2. a span without one: the run starts at the span's start, the cheapest point a decoder can
   reach there (it decodes on from the previous run, or from the keyframe before the span,
   and every later start only adds frames);
3. keyframes unknown (a backend that cannot list them, a stream too long to scan): every run
   sits in the middle of its span, as the plan did before it knew keyframes.

Readers then decode on instead of seeking back when the next run's keyframe is behind them
(``vqa.decode.base``). The plan stays a pure function of the stream's metadata, keyframe
times included, so a record is the same whichever engine read the video.

Worked example: a 10 s clip at 25 fps with the default 32 frames gives 8 runs of 4 frames.
The spans are [0, 1.25), [1.25, 2.5), ... [8.75, 10). A run of 4 frames lasts 4/25 = 0.16 s.
Without keyframes run 0 starts at 0 + (1.25 - 0.16) / 2 = 0.545 s and run 1 at 1.795 s.
With a keyframe every 2 s (0, 2, 4, 6, 8), run 0 starts on the frame after the keyframe 0
(start 0.02 s, half a frame short of it), run 1 on the frame after the keyframe 2 (inside
[1.25, 2.5)), run 2 at 2.5 (its span [2.5, 3.75) holds no keyframe) and run 3 after the
keyframe 4::

    >>> from vqa.types import VideoInfo
    >>> info = VideoInfo(width=64, height=48, fps=25.0, duration_s=10.0, frame_count=250, codec="h264")
    >>> plan = plan_frames(info)
    >>> len(plan.runs), plan.runs[0].count, round(plan.runs[0].start_s, 3), round(plan.runs[1].start_s, 3)
    (8, 4, 0.545, 1.795)
    >>> [round(r.start_s, 3) for r in plan_frames(info, keyframes_s=[0, 2, 4, 6, 8]).runs]
    [0.02, 2.02, 2.5, 4.02, 6.02, 6.25, 8.02, 8.75]

Decoding that clip (H.264, GOP 50) takes 5 frames for each run after a keyframe, and for
run 2 the 8 frames from 2.2 s to 2.48 s besides its own 4: 61 frames for 32, where the
middle placement decoded 185.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from vqa.errors import UsageError
from vqa.types import Run, SamplePlan, VideoInfo

DEFAULT_FRAMES = 32  # 8 runs of 4: enough for a stable score, cheap on long videos
DEFAULT_RUN_LENGTH = 4  # consecutive frames per run, so frozen frames can be measured
FRAME_MODES = ("default", "all")
# Keyframe and span times come from different arithmetic (packet timestamps, duration / runs):
# a keyframe this close to a span's edge counts as on it.
KEY_TOLERANCE_S = 1e-6
# A run placed by a keyframe starts this many frames after it. The keyframe itself is coded
# unlike the rest of its GOP (intra only) and, measured on compressed clips, scores lower than
# its neighbours: a run opening on it would pull the score down (scripts/bench/placement_delta.py).
KEYFRAME_SKIP_FRAMES = 1  # string values accepted for ``frames``; an int means "count"


def plan_frames(info: VideoInfo, frames: int | str = "default", *,
                run_length: int = DEFAULT_RUN_LENGTH, keyframes_s: Sequence[float] | None = None) -> SamplePlan:
    """Spread ``frames`` frames over the video as runs of ``run_length`` consecutive frames.

    ``frames`` is ``"default"`` (``DEFAULT_FRAMES``), ``"all"`` or an int N >= 1. N frames become
    ceil(N / run_length) runs whose counts differ by at most one and add up to exactly N. When
    the video has no more frames than asked for (or its length is unknown) the plan is one run
    that takes every frame (``count == 0``), keeping the requested mode.
    ``keyframes_s`` (the keyframes' presentation times, or None when unknown) places each run
    where it is cheapest to decode, by the rule in this module's docstring.
    A pure function of (duration_s, fps, frame_count, frames, run_length, keyframes_s).
    """
    if isinstance(run_length, bool) or not isinstance(run_length, int) or run_length < 1:
        raise UsageError(f"run_length must be an int >= 1, got {run_length!r}")
    duration = max(float(info.duration_s), 0.0)
    if frames == "all":
        return SamplePlan(mode="all", runs=(Run(0.0, 0, 0.0, duration),), requested=None)
    if frames == "default":
        mode, requested = "default", DEFAULT_FRAMES
    elif isinstance(frames, int) and not isinstance(frames, bool):
        if frames < 1:
            raise UsageError(f"frames must be >= 1, got {frames}; use 'all' to take every frame")
        mode, requested = "count", frames
    else:
        raise UsageError(f"frames must be an int >= 1 or one of {FRAME_MODES}, got {frames!r}")

    # Too short to sample, or no timeline to spread runs over: every frame is the honest answer.
    if (info.frame_count > 0 and requested >= info.frame_count) or duration <= 0 or info.fps <= 0:
        return SamplePlan(mode=mode, runs=(Run(0.0, 0, 0.0, duration),), requested=requested)

    n_runs = math.ceil(requested / run_length)
    base, extra = divmod(requested, n_runs)
    span_len = duration / n_runs
    if run_length > 1 and (base + (extra > 0)) / info.fps > span_len:
        # Runs longer than their spans would overlap: so dense a plan is single frames.
        return plan_frames(info, frames, run_length=1, keyframes_s=keyframes_s)
    keys = None if keyframes_s is None else sorted(float(k) for k in keyframes_s)
    runs = []
    for k in range(n_runs):
        count = base + (1 if k < extra else 0)
        span_start = duration * k / n_runs
        # Both ends come from the same formula so neighbouring spans share a bit-identical edge.
        span_end = duration if k == n_runs - 1 else duration * (k + 1) / n_runs
        middle = span_start + max(0.0, (span_len - count / info.fps) / 2)
        start = middle if keys is None else _cheapest_start(keys, span_start, span_end, count / info.fps,
                                                             1 / info.fps, middle)
        runs.append(Run(start_s=start, count=count, span_start_s=span_start, span_end_s=span_end))
    return SamplePlan(mode=mode, runs=tuple(runs), requested=requested)


def _cheapest_start(keys: list[float], span_start: float, span_end: float, run_s: float,
                    frame_s: float, middle: float) -> float:
    """Rules 1 and 2 of the module docstring: just after the keyframe nearest ``middle`` among
    those in the span with room for a run of ``run_s`` seconds after them, else the span's start."""
    lead = frame_s * KEYFRAME_SKIP_FRAMES
    lo = bisect.bisect_left(keys, span_start - KEY_TOLERANCE_S)
    hi = bisect.bisect_right(keys, span_end - run_s - lead + KEY_TOLERANCE_S)
    if lo >= hi:
        return span_start
    i = min(max(bisect.bisect_left(keys, middle), lo), hi - 1)
    # keys[i] is the first candidate at or after the middle (or the last one); the one before
    # it may be nearer. Ties go to the earlier keyframe.
    best = keys[i - 1] if i > lo and middle - keys[i - 1] <= keys[i] - middle else keys[i]
    # Half a frame short of the frame after the skipped ones: the run's first frame is the
    # first with pts >= start, whatever rounding the container's timestamps carry.
    return max(best + lead - frame_s / 2 if lead else best, span_start)


def split_plan(plan: SamplePlan, parts: int, *, keyframes_s: Sequence[float] | None = None
               ) -> tuple[SamplePlan, list[tuple[SamplePlan, int]]]:
    """Cut a plan into at most ``parts`` segments that separate decoders can read in parallel.

    Returns the plan the frames are aggregated with and the segments as (sub-plan, index of
    its first run). A segment only pays when its decoder can seek close to where it starts,
    so cuts go where a keyframe lies just before: ``keyframes_s`` lists the keyframes' times,
    or is None when they are unknown (then any cut is allowed). A plan of runs is cut into
    contiguous groups of runs; a plan that reads every frame (one open run) is cut at the
    keyframes nearest to equal shares of the timeline. Either way the aggregated plan tiles
    the timeline exactly as the unsplit one does.
    """
    if parts <= 1 or not plan.runs:
        return plan, [(plan, 0)]
    if len(plan.runs) == 1 and plan.runs[0].count == 0:
        whole = plan.runs[0]
        begin, end = whole.span_start_s, whole.span_end_s
        targets = [begin + (end - begin) * i / parts for i in range(1, parts)]
        cuts = targets if keyframes_s is None else [min(keyframes_s, key=lambda k: abs(k - t)) for t in targets
                                                    ] if keyframes_s else []
        edges = [begin, *sorted({c for c in cuts if begin < c < end}), end]
        if len(edges) == 2:
            return plan, [(plan, 0)]
        runs = tuple(Run(start_s=a if i else whole.start_s, count=0, span_start_s=a, span_end_s=b)
                     for i, (a, b) in enumerate(zip(edges, edges[1:])))
        split = SamplePlan(mode=plan.mode, runs=runs, requested=plan.requested)
        return split, [(SamplePlan(plan.mode, (r,), plan.requested), i) for i, r in enumerate(runs)]
    # Run j may open a segment when a keyframe lies after run j-1 began and by run j's start.
    allowed = [j for j in range(1, len(plan.runs)) if keyframes_s is None or any(
        plan.runs[j - 1].start_s < k <= plan.runs[j].start_s + 1e-6 for k in keyframes_s)]
    n = len(plan.runs)
    firsts = sorted({min(allowed, key=lambda j: abs(j - n * i / parts)) for i in range(1, parts)} if allowed else set())
    bounds = [0, *firsts, n]
    return plan, [(SamplePlan(plan.mode, plan.runs[a:b], plan.requested), a) for a, b in zip(bounds, bounds[1:])]
