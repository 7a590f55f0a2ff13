"""Sampling is pure planning: tested on metadata alone, no video."""
from __future__ import annotations

import math

import pytest

from vqa.errors import UsageError
from vqa.sample import DEFAULT_FRAMES, DEFAULT_RUN_LENGTH, plan_frames
from vqa.types import VideoInfo


def info(duration_s: float = 60.0, fps: float = 25.0, frame_count: int | None = None) -> VideoInfo:
    if frame_count is None:
        frame_count = round(duration_s * fps)
    return VideoInfo(width=320, height=180, fps=fps, duration_s=duration_s,
                     frame_count=frame_count, codec="h264")


@pytest.mark.parametrize("frames, n_runs, total", [
    ("default", DEFAULT_FRAMES // DEFAULT_RUN_LENGTH, DEFAULT_FRAMES),
    (1, 1, 1), (4, 1, 4), (5, 2, 5), (10, 3, 10), (64, 16, 64), (333, 84, 333),
])
def test_counts(frames, n_runs, total):
    plan = plan_frames(info(), frames)
    assert len(plan.runs) == n_runs
    assert sum(r.count for r in plan.runs) == total == plan.requested
    counts = [r.count for r in plan.runs]
    assert max(counts) <= DEFAULT_RUN_LENGTH and max(counts) - min(counts) <= 1
    assert plan.mode == ("default" if frames == "default" else "count")


@pytest.mark.parametrize("duration_s, frames", [(60.0, "default"), (7.3, 10), (1.0, 17), (3600.0, 1000)])
def test_spans_tile_the_timeline(duration_s, frames):
    plan = plan_frames(info(duration_s), frames)
    assert plan.runs[0].span_start_s == 0.0
    assert plan.runs[-1].span_end_s == duration_s
    for a, b in zip(plan.runs, plan.runs[1:]):
        assert a.span_end_s == b.span_start_s  # exact, not approximately
    lengths = [r.span_end_s - r.span_start_s for r in plan.runs]
    assert max(lengths) - min(lengths) < 1e-9 * duration_s


def test_runs_sit_mid_span():
    fps = 25.0
    for run in plan_frames(info(10.0, fps), "default").runs:
        run_end = run.start_s + run.count / fps
        assert run.span_start_s <= run.start_s and run_end <= run.span_end_s
        # Equal margins either side of the run.
        assert math.isclose(run.start_s - run.span_start_s, run.span_end_s - run_end, abs_tol=1e-9)
    first = plan_frames(info(10.0, fps)).runs[0]
    assert math.isclose(first.start_s, (1.25 - 4 / 25) / 2)


def test_plan_too_dense_for_runs_takes_single_frames():
    # 49 of 50 frames as runs of 4 would need 0.16 s runs in 0.154 s spans: they would overlap.
    plan = plan_frames(info(2.0, 25.0, frame_count=50), 49)
    assert len(plan.runs) == 49 and all(r.count == 1 for r in plan.runs)
    for r in plan.runs:  # each run's one-frame window lies inside its span
        assert r.span_start_s <= r.start_s and r.start_s + 1 / 25.0 <= r.span_end_s + 1e-9


def test_deterministic_and_pure():
    a, b = info(123.4, 29.97), info(123.4, 29.97)
    assert plan_frames(a, 50) == plan_frames(b, 50)
    # Only duration, fps and frame_count matter, not size or codec.
    other = VideoInfo(width=1, height=1, fps=29.97, duration_s=123.4,
                      frame_count=a.frame_count, codec="vp9", rotation=90)
    assert plan_frames(other, 50) == plan_frames(a, 50)


@pytest.mark.parametrize("frames, mode", [("default", "default"), (100, "count"), (30, "count")])
def test_short_video_takes_every_frame(frames, mode):
    plan = plan_frames(info(1.2, 25.0), frames)  # 30 frames
    assert plan.mode == mode
    assert len(plan.runs) == 1
    run = plan.runs[0]
    assert (run.start_s, run.count, run.span_start_s, run.span_end_s) == (0.0, 0, 0.0, 1.2)


def test_all_mode():
    plan = plan_frames(info(12.0), "all")
    assert plan.mode == "all" and plan.requested is None
    assert [(r.start_s, r.count, r.span_start_s, r.span_end_s) for r in plan.runs] == [(0.0, 0, 0.0, 12.0)]


def test_unknown_length_takes_every_frame():
    plan = plan_frames(info(0.0, 25.0, frame_count=0), "default")
    assert [r.count for r in plan.runs] == [0]


@pytest.mark.parametrize("frames", [0, -3, "some", "32", 2.5, True, None])
def test_bad_frames(frames):
    with pytest.raises(UsageError):
        plan_frames(info(), frames)


@pytest.mark.parametrize("run_length", [0, -1, 1.5, "4"])
def test_bad_run_length(run_length):
    with pytest.raises(UsageError):
        plan_frames(info(), 8, run_length=run_length)


def test_run_length_one():
    plan = plan_frames(info(), 5, run_length=1)
    assert [r.count for r in plan.runs] == [1] * 5


def test_docstring_example():
    import doctest

    import vqa.sample
    assert doctest.testmod(vqa.sample).failed == 0


# --- placement by keyframes (vqa.sample's rules 1-3) -----------------------------------------

def test_unknown_keyframes_keep_the_middle_placement():
    assert plan_frames(info(10.0), keyframes_s=None) == plan_frames(info(10.0))


def test_runs_start_after_a_keyframe_or_at_the_span_start():
    fps = 25.0
    keys = [0.0, 2.0, 4.0, 6.0, 8.0]
    plan = plan_frames(info(10.0, fps), keyframes_s=keys)
    for run in plan.runs:
        inside = [k for k in keys if run.span_start_s <= k <= run.span_end_s - (run.count + 1) / fps]
        if inside:  # the frame after a keyframe in the span: half a frame past the keyframe
            assert any(math.isclose(run.start_s, k + 0.5 / fps) for k in inside)
        else:
            assert run.start_s == run.span_start_s
        # Whatever the rule, the run's frames lie inside its span.
        assert run.span_start_s <= run.start_s and run.start_s + run.count / fps <= run.span_end_s + 1e-9


def test_the_keyframe_nearest_the_middle_wins():
    # One span of 10 s (4 frames asked for): keyframes at 1, 4.5 and 8; the middle start is 4.92.
    plan = plan_frames(info(10.0, 25.0), 4, keyframes_s=[8.0, 1.0, 4.5])
    assert math.isclose(plan.runs[0].start_s, 4.5 + 0.02)


def test_a_keyframe_without_room_for_the_run_is_not_used():
    # Span [1.25, 2.5): a keyframe at 2.4 leaves 0.1 s, less than the 5 frames (0.2 s) needed.
    plan = plan_frames(info(10.0, 25.0), keyframes_s=[0.0, 2.4])
    assert plan.runs[1].start_s == plan.runs[1].span_start_s == 1.25


def test_keyframe_placement_keeps_counts_and_spans():
    keys = [i * 2.0 for i in range(30)]
    before, after = plan_frames(info(60.0), keyframes_s=None), plan_frames(info(60.0), keyframes_s=keys)
    assert [(r.count, r.span_start_s, r.span_end_s) for r in before.runs] == \
        [(r.count, r.span_start_s, r.span_end_s) for r in after.runs]
    assert before.to_dict() == after.to_dict()  # the record's sampling block does not change
