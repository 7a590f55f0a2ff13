"""Per-frame outputs -> one score, a category and timestamped defects for the video.

Policy, in one place:
- score: the mean of the per-frame scores (VMAF pools frames by their mean too), clamped to
  0..100. Black frames are left out of the mean: there is no picture in them to judge. A
  video whose sampled frames are all black scores 0.
- The score measures damage to technical fidelity (blur, noise, compression, scaling).
  The model was trained so exposure does not move it (see models/README.md), and frozen
  frames are scored as the pictures they are; all three are reported as defects instead.
- The score is reported to one decimal, and the category follows the reported score, so
  the two never disagree (79.96 is 80.0 and "excellent").
- category: CATEGORY_THRESHOLDS on the score, then capped by how much of the video the
  defects the score does not see cover (SCORE_BLIND, CATEGORY_CAPS): a picture can be fine
  while a third of the clip is frozen, black or dark, and such a clip is not "excellent"; a
  clip dark, overexposed or frozen from start to end is at most "poor", and one black
  throughout is "bad". Coverage is the share of the timeline inside at least one such
  segment (overlaps counted once). Blur, noise, compression and low resolution already
  lower the score, so they do not cap it a second time.
- defects: a sampled frame stands for the stretch of the timeline up to the next sampled
  frame (or its run's span end); consecutive flagged frames merge into one segment; a
  segment needs MIN_SEGMENT_FRAMES frames, so a single odd frame reports nothing. Segments
  of one type less than MERGE_GAP_S apart are one stretch to a reader and are merged, and
  none has zero width.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .preprocess import FrameStats
from .types import MODEL_DEFECTS, Defect, SamplePlan

# Lower bounds of each category, highest first; below the last one is "bad".
CATEGORY_THRESHOLDS = ((80.0, "excellent"), (60.0, "good"), (40.0, "fair"), (20.0, "poor"))
CATEGORIES = tuple(name for _, name in CATEGORY_THRESHOLDS) + ("bad",)
# Defects the score does not measure (exposure is left out of it by design, frozen frames are
# scored as the pictures they are, black frames are left out): they cap the category instead.
SCORE_BLIND = ("dark", "overexposed", "frozen", "black")
# (share of the timeline they cover, best category allowed), strictest last. 0.9 is "from
# start to end" with room for a first or last sampled frame that escapes the flag.
CATEGORY_CAPS = ((0.2, "good"), (0.5, "fair"), (0.9, "poor"))
BLACK_THROUGHOUT = 0.9  # a video black over this share of its timeline is "bad"
MERGE_GAP_S = 1.0  # segments of one type closer than this are one stretch
# A model defect is flagged on a frame at this probability, per type. Chosen on validation
# content by scripts/calibrate.py for model 3.0.0 (models/calibration.json: the F1-best
# threshold of each head); see models/README.md. Compression's label needs VMAF and is not
# calibrated there: it keeps 0.5.
DEFECT_PROBABILITY = {"blur": 0.65, "noise": 0.75, "compression": 0.5, "low_resolution": 0.3, "dark": 0.4,
                      "overexposed": 0.4}
MIN_SEGMENT_FRAMES = 2
BLACK_LUMA_MEAN = 8.0  # 0..255 full-range luma: limited-range black decodes to about 0
BLACK_LUMA_P98 = 20.0  # and almost nothing brighter: an underexposed or night scene is not black
# Mean absolute difference of grey thumbnails (0..255) under which a frame repeats the last.
# Repeats measure under 0.01 (an encoder may still refine a static picture a little); a slow,
# dark pan measures over 0.1 on the same thumbnails.
FREEZE_MAD = 0.05
MIN_FROZEN_FRAMES = 3  # 3 identical frames in a row; pairs come from frame-rate conversion
# The exposure heads speak only where the frame's own luminance allows it: a frame is called
# dark only with a mean luma at most DARK_LUMA_MEAN, overexposed only with clipped highlights
# (98th percentile at least OVER_LUMA_P98) or a mean of at least OVER_LUMA_MEAN. Every
# training positive met these bounds by construction (see scripts/make_dataset.py); they
# stop the heads firing on well-exposed content unlike anything in training.
DARK_LUMA_MEAN = 70.0
# An underexposure dims the highlights too (training positives: gain <= 0.55); a night scene
# keeps some. scripts/calibrate.py chose 220 for model 3.0.0 on validation content (None: no bound).
DARK_LUMA_P98: float | None = 220.0
OVER_LUMA_P98 = 240.0
OVER_LUMA_MEAN = 170.0


@dataclass
class FrameResult:
    run: int
    pts_s: float
    outputs: np.ndarray  # (1 + len(MODEL_DEFECTS),): score, then logits
    stats: FrameStats


def category(score: float, coverage: float = 0.0, black: float = 0.0) -> str:
    """The category of a reported score, capped by the share of the timeline that score-blind
    defects cover (``coverage``) and that black covers (``black``)."""
    name = next((name for bound, name in CATEGORY_THRESHOLDS if score >= bound), "bad")
    caps = [cap for share, cap in CATEGORY_CAPS if coverage >= share]
    if black >= BLACK_THROUGHOUT:
        caps.append("bad")
    for cap in caps:
        if CATEGORIES.index(name) < CATEGORIES.index(cap):
            name = cap
    return name


def coverage(defects: list[Defect], duration_s: float) -> float:
    """Share of [0, duration_s] inside at least one defect segment."""
    if duration_s <= 0 or not defects:
        return 0.0
    covered, end = 0.0, 0.0
    for d in sorted(defects, key=lambda d: d.start_s):
        start = max(d.start_s, end)
        if d.end_s > start:
            covered += d.end_s - start
            end = d.end_s
    return min(1.0, covered / duration_s)


def _tidy(defects: list[Defect], min_width_s: float, gap_s: float = 0.0) -> list[Defect]:
    """Merge segments of one type that overlap or lie at most ``gap_s`` apart; give a
    zero-width one a frame's width."""
    out: list[Defect] = []
    for d in sorted(defects, key=lambda d: (d.type, d.start_s)):
        if d.end_s <= d.start_s:
            d = Defect(d.type, d.severity, d.start_s, d.start_s + min_width_s)
        last = out[-1] if out else None
        if last is not None and last.type == d.type and d.start_s <= last.end_s + gap_s + 1e-6:
            a, b = last.end_s - last.start_s, d.end_s - d.start_s
            severity = (last.severity * a + d.severity * b) / (a + b) if a + b > 0 else max(last.severity, d.severity)
            out[-1] = Defect(d.type, severity, last.start_s, max(last.end_s, d.end_s))
        else:
            out.append(d)
    return out


def _spans(frames: list[FrameResult], plan: SamplePlan, duration_s: float) -> list[tuple[float, float]]:
    spans = []
    for i, f in enumerate(frames):
        run = plan.runs[f.run] if f.run < len(plan.runs) else None
        first = i == 0 or frames[i - 1].run != f.run
        last = i == len(frames) - 1 or frames[i + 1].run != f.run
        start = run.span_start_s if first and run else f.pts_s
        end = (run.span_end_s if run and run.span_end_s > 0 else duration_s) if last else frames[i + 1].pts_s
        spans.append((min(start, f.pts_s), max(end, f.pts_s)))
    return spans


def _segments(flags: np.ndarray, values: np.ndarray, spans, kind: str, min_frames: int) -> list[Defect]:
    out, i = [], 0
    while i < len(flags):
        if not flags[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(flags) and flags[j + 1]:
            j += 1
        if j - i + 1 >= min_frames:
            out.append(Defect(kind, float(np.clip(values[i:j + 1].mean(), 0, 1)), spans[i][0], spans[j][1]))
        i = j + 1
    return out


def _consecutive(plan: SamplePlan, run_a: int, run_b: int) -> bool:
    """Whether the last frame of run_a and the first of run_b are neighbours in the stream:
    the same run, or pieces of an every-frame plan cut apart for parallel decoding."""
    if run_a == run_b:
        return True
    a, b = plan.runs[run_a], plan.runs[run_b]
    return a.count == 0 and b.count == 0 and a.span_end_s == b.span_start_s


def thumb_mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b).mean())


class FreezeChain:
    """Compares each frame of one read (a reader's pass, or one worker task) with the frame
    read just before it, as the frames arrive, and lets the thumbnails go.

    Only a read's first and last thumbnails are kept: ``frozen_flags`` needs them to compare
    across the cut between two reads of one video. Memory then stays flat however many
    frames are scored (9 KB a frame otherwise: 11 GB at the frame cap).
    """

    def __init__(self) -> None:
        self._prev: FrameStats | None = None
        self._prev_is_first = False

    def add(self, stats: FrameStats) -> None:
        prev = self._prev
        if prev is not None:
            stats.mad_prev = thumb_mad(stats.thumb, prev.thumb)
            if not self._prev_is_first:
                prev.thumb = None
        self._prev_is_first = prev is None
        self._prev = stats


def _difference(prev: FrameStats, cur: FrameStats) -> float | None:
    if cur.mad_prev is not None:  # read one after the other: measured as they came
        return cur.mad_prev
    if prev.thumb is None or cur.thumb is None:
        return None
    return thumb_mad(cur.thumb, prev.thumb)  # last and first frames of two reads


def frozen_flags(frames: list[FrameResult], black: np.ndarray, plan: SamplePlan) -> np.ndarray:
    """Frames that repeat their neighbour, in stretches of MIN_FROZEN_FRAMES or more."""
    same = np.zeros(len(frames), bool)  # same[i]: frame i repeats frame i-1
    for i in range(1, len(frames)):
        if _consecutive(plan, frames[i - 1].run, frames[i].run):
            d = _difference(frames[i - 1].stats, frames[i].stats)
            same[i] = d is not None and d < FREEZE_MAD
    flags = np.zeros(len(frames), bool)
    i = 1
    while i < len(frames):
        if same[i]:
            j = i
            while j + 1 < len(frames) and same[j + 1]:
                j += 1
            if j - i + 2 >= MIN_FROZEN_FRAMES:
                flags[i - 1:j + 1] = True
            i = j + 1
        else:
            i += 1
    return flags & ~black


def _black(frames: list[FrameResult]) -> np.ndarray:
    return np.array([f.stats.luma_mean <= BLACK_LUMA_MEAN and f.stats.luma_p98 <= BLACK_LUMA_P98
                     for f in frames], bool)


def timeline(frames: list[FrameResult], plan: SamplePlan) -> list[dict]:
    """The per-sampled-frame data behind a record, in timeline order: what ``aggregate`` saw.

    One dict per frame: ``t_s``, ``score`` (0..100, as the network gave it, before black frames
    are left out), each model defect's probability under its type's name (0..1), and the
    frame-statistic flags ``black`` and ``frozen`` (as the defects measure them). Numbers are
    rounded (3 decimals, the score 2), so a frame costs about 150 bytes of JSON.

    For example ``{"t_s": 0.545, "score": 77.31, "blur": 0.012, ..., "black": false,
    "frozen": false}``.
    """
    if not frames:
        return []
    outputs = np.stack([f.outputs for f in frames]).astype(np.float64)
    scores = np.clip(outputs[:, 0], 0, 100)
    probs = 1.0 / (1.0 + np.exp(-outputs[:, 1:]))
    black = _black(frames)
    frozen = frozen_flags(frames, black, plan)
    out = []
    for i, f in enumerate(frames):
        point = {"t_s": round(float(f.pts_s), 3), "score": round(float(scores[i]), 2)}
        point.update((kind, round(float(probs[i, k]), 3)) for k, kind in enumerate(MODEL_DEFECTS))
        point["black"], point["frozen"] = bool(black[i]), bool(frozen[i])
        out.append(point)
    return out


def aggregate(frames: list[FrameResult], plan: SamplePlan, duration_s: float
              ) -> tuple[float, str, list[Defect]]:
    if not frames:
        raise ValueError("no frames to aggregate")
    outputs = np.stack([f.outputs for f in frames]).astype(np.float64)
    black = _black(frames)
    scores = np.clip(outputs[:, 0], 0, 100)
    score = round(float(scores[~black].mean()), 1) if (~black).any() else 0.0
    probs = 1.0 / (1.0 + np.exp(-outputs[:, 1:]))
    mean = np.array([f.stats.luma_mean for f in frames])
    p98 = np.array([f.stats.luma_p98 for f in frames])
    dark = (mean <= DARK_LUMA_MEAN) & (p98 <= (255.0 if DARK_LUMA_P98 is None else DARK_LUMA_P98))
    allowed = {"dark": dark, "overexposed": (p98 >= OVER_LUMA_P98) | (mean >= OVER_LUMA_MEAN)}
    spans = _spans(frames, plan, duration_s)
    min_frames = min(MIN_SEGMENT_FRAMES, len(frames))
    defects: list[Defect] = []
    for k, kind in enumerate(MODEL_DEFECTS):
        # On black frames the picture-defect heads have nothing to judge; black says it all.
        flags = (probs[:, k] >= DEFECT_PROBABILITY[kind]) & ~black & allowed.get(kind, True)
        defects += _segments(flags, probs[:, k], spans, kind, min_frames)
    frozen = frozen_flags(frames, black, plan)
    defects += _segments(frozen, np.ones(len(frames)), spans, "frozen", min(MIN_FROZEN_FRAMES, len(frames)))
    defects += _segments(black, np.ones(len(frames)), spans, "black", min_frames)
    widths = [b - a for a, b in spans if b > a]
    defects = _tidy(defects, min(widths) if widths else 1e-3, MERGE_GAP_S)
    defects.sort(key=lambda d: (d.start_s, d.type))
    blind = coverage([d for d in defects if d.type in SCORE_BLIND], duration_s)
    black_share = coverage([d for d in defects if d.type == "black"], duration_s)
    return score, category(score, blind, black_share), defects
