"""From a video's frames to its record: counts, score, defects, warnings. Both engines end here."""
from __future__ import annotations

from ..aggregate import Decision, FrameResult, aggregate
from ..aggregate import timeline as frame_timeline
from ..codes import ErrorCode, WarningCode
from ..errors import InputError
from ..types import SamplePlan, VideoInfo, VideoScore
from ..words import counted

# Reading every frame, fewer frames than the container declares is truncation; this slack
# allows for edit lists and encoder delay, which can hide a frame or two.
TRUNCATED_SLACK = 0.02


def conclude(record: VideoScore, frames: list[FrameResult], plan: SamplePlan, planned: SamplePlan,
             info: VideoInfo, decoded: int, decode_errors: int, reader_warnings: list[str], *,
             decision: Decision, with_timeline: bool = False) -> None:
    """Fill a record from its frames in timeline order: counts, score, defects, warnings.
    ``plan`` is what the frames were read with, ``planned`` the plan the options made;
    ``decision``: the model's rules (its manifest's decision block)."""
    record.frames = {"sampled": len(frames), "decoded": decoded, "decode_errors": decode_errors}
    if not frames:
        if decoded:  # frames came out, none where the plan looked: timestamps that jump or lie
            raise InputError(f"{counted(decoded, 'frame was', 'frames were')} decoded, none at the times the plan "
                             "asked for: the stream's timestamps do not follow its length", code=ErrorCode.E_DECODE)
        raise InputError("no frame of the video could be decoded", code=ErrorCode.E_DECODE)
    record.score, record.category, record.defects = aggregate(frames, plan, info.duration_s, decision)
    last_run = sum(1 for f in frames if f.run == len(planned.runs) - 1)
    record.warnings = _warnings(record, planned, info, decode_errors, reader_warnings, last_run)
    if with_timeline:
        record.timeline = frame_timeline(frames, plan, decision)


def _warnings(record: VideoScore, plan, info, decode_errors: int, reader_warnings: list[str],
              last_run: int) -> list[str]:
    """``last_run``: frames found for the plan's last run, the one that may read to the end."""
    out = []
    if decode_errors:
        out.append(WarningCode.W_CORRUPT_FRAMES.say(
            f"{counted(decode_errors, 'packet or frame', 'packets or frames')} failed to decode"))
    sampled, wanted = record.frames["sampled"], sum(r.count for r in plan.runs)
    # A run short of frames within its stretch is a sparse stretch of a variable-frame-rate
    # clip; only a stream that ends before the last run is filled is truncated.
    if all(r.count > 0 for r in plan.runs) and sampled < wanted and last_run < plan.runs[-1].count:
        out.append(WarningCode.W_TRUNCATED.say(
            f"the stream ends early: {sampled} of {wanted} planned frames were found"))
    elif (plan.mode == "all" and info.frame_count_declared
          and sampled < info.frame_count * (1 - TRUNCATED_SLACK) - 1):
        out.append(WarningCode.W_TRUNCATED.say(
            f"{sampled} of the {info.frame_count} frames the file declares were found"))
    elif plan.mode != "all" and sampled < wanted:  # said: the score rests on fewer frames than planned
        out.append(WarningCode.W_VARIABLE_FPS.say(
            f"{sampled} of {wanted} planned frames were found: the timestamps leave stretches of the "
            "timeline without frames (gaps, or a variable frame rate)"))
    if info.rotation:
        out.append(WarningCode.W_ROTATED.say(f"the file asks for a {info.rotation} degree counter-clockwise turn "
                                             "(ffprobe's rotation); frames were turned upright"))
    # Segments of one video read by several workers can each notice the same thing: keep the first.
    seen = {w.split(":", 1)[0] for w in out}
    for w in reader_warnings:
        code = w.split(":", 1)[0]
        if code not in seen:
            seen.add(code)
            out.append(w)
    return out
