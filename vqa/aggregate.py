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
- category: the decision's category thresholds on the score, then capped by how much of the
  video the defects the score does not see cover (the decision's ``capped_by`` and category
  caps): a picture can be fine while a third of the clip is frozen, black or dark, and such a
  clip is not "excellent"; a clip dark, overexposed or frozen from start to end is at most
  "poor", and one black throughout is "bad". Coverage is the share of the timeline inside at
  least one such segment (overlaps counted once). Blur, noise, compression and low
  resolution already lower the score, so they do not cap it a second time.
- defects: a sampled frame stands for the stretch of the timeline up to the next sampled
  frame (or its run's span end); consecutive flagged frames merge into one segment; a
  segment needs the decision's min_segment_frames frames, so a single odd frame reports nothing. Segments
  of one type less than the decision's merge_gap_s apart are one stretch to a reader and are
  merged, and none has zero width.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .preprocess import FrameStats
from .types import DEFECT_TYPES, MODEL_DEFECTS, Defect, SamplePlan

CATEGORIES = ("excellent", "good", "fair", "poor", "bad")  # best first; part of the record contract


@dataclass(frozen=True)
class Decision:
    """The model's decision rules: the ``decision`` block of its manifest (models/vqa.json,
    read by vqa.model; documented in models/README.md), written there by scripts/model/calibrate.py.
    Nothing else holds these numbers: every function below takes them from here.

    - ``defect_probability``: a model defect is flagged on a frame at this probability, per type.
    - ``category_thresholds``: the lowest score of each category but "bad", best first.
    - ``category_caps``: (share of the timeline covered by the ``capped_by`` defects, best
      category allowed), strictest last; ``capped_by``: the defect types the score does not
      measure (exposure is left out of it by design, frozen frames are scored as the pictures
      they are, black frames are left out); ``black_throughout``: the share of the timeline
      black over which a video is "bad".
    - ``merge_gap_s``: segments of one type closer than this are merged into one.
    - ``min_segment_frames``: frames a defect segment needs (a single odd frame reports nothing).
    - ``black_luma_mean``, ``black_luma_p98``: a black frame's most (0..255 full-range luma).
    - ``freeze_mad``: mean absolute difference of grey thumbnails under which a frame repeats
      the one before; ``min_frozen_frames``: repeats in a row that make a frozen stretch.
    - ``dark_luma_mean``, ``dark_luma_p98`` (None: no bound): the most luma with which the dark
      head may speak; ``over_luma_p98``, ``over_luma_mean``: the least with which the
      overexposed head may (either bound suffices).
    """

    defect_probability: dict[str, float]
    category_thresholds: tuple[tuple[float, str], ...]
    category_caps: tuple[tuple[float, str], ...]
    capped_by: tuple[str, ...]
    black_throughout: float
    merge_gap_s: float
    min_segment_frames: int
    black_luma_mean: float
    black_luma_p98: float
    freeze_mad: float
    min_frozen_frames: int
    dark_luma_mean: float
    dark_luma_p98: float | None
    over_luma_p98: float
    over_luma_mean: float

    @classmethod
    def from_manifest(cls, block: dict) -> Decision:
        """From the manifest's ``decision`` block; KeyError, TypeError or ValueError when it
        is incomplete or wrong (vqa.model makes that E_MODEL_CORRUPT)."""
        thresholds = block["category_thresholds"]
        names = [name for name in CATEGORIES if name != "bad"]
        if sorted(thresholds) != sorted(names):
            raise ValueError(f"category_thresholds must name {', '.join(names)}")
        decision = cls(
            defect_probability={kind: float(block["defect_probability"][kind]) for kind in MODEL_DEFECTS},
            category_thresholds=tuple((float(thresholds[name]), name) for name in names),
            category_caps=tuple((float(c["coverage"]), str(c["best"])) for c in block["category_caps"]),
            capped_by=tuple(str(t) for t in block["capped_by"]),
            black_throughout=float(block["black_throughout"]),
            merge_gap_s=float(block["merge_gap_s"]),
            min_segment_frames=int(block["min_segment_frames"]),
            black_luma_mean=float(block["black"]["luma_mean_max"]),
            black_luma_p98=float(block["black"]["luma_p98_max"]),
            freeze_mad=float(block["frozen"]["thumb_mad_max"]),
            min_frozen_frames=int(block["frozen"]["min_frames"]),
            dark_luma_mean=float(block["dark"]["luma_mean_max"]),
            dark_luma_p98=None if block["dark"]["luma_p98_max"] is None else float(block["dark"]["luma_p98_max"]),
            over_luma_p98=float(block["overexposed"]["luma_p98_min"]),
            over_luma_mean=float(block["overexposed"]["luma_mean_min"]))
        bounds = [b for b, _ in decision.category_thresholds]
        if bounds != sorted(bounds, reverse=True) or any(cap not in CATEGORIES for _, cap in decision.category_caps):
            raise ValueError("category_thresholds must descend and category_caps name categories")
        if not set(decision.capped_by) <= set(DEFECT_TYPES):
            raise ValueError(f"capped_by must name defect types ({', '.join(DEFECT_TYPES)})")
        return decision

    def to_manifest(self) -> dict:
        """The manifest's ``decision`` block (the inverse of ``from_manifest``)."""
        return {
            "defect_probability": dict(self.defect_probability),
            "category_thresholds": {name: bound for bound, name in self.category_thresholds},
            "category_caps": [{"coverage": share, "best": cap} for share, cap in self.category_caps],
            "capped_by": list(self.capped_by),
            "black_throughout": self.black_throughout,
            "merge_gap_s": self.merge_gap_s,
            "min_segment_frames": self.min_segment_frames,
            "black": {"luma_mean_max": self.black_luma_mean, "luma_p98_max": self.black_luma_p98},
            "frozen": {"thumb_mad_max": self.freeze_mad, "min_frames": self.min_frozen_frames},
            "dark": {"luma_mean_max": self.dark_luma_mean, "luma_p98_max": self.dark_luma_p98},
            "overexposed": {"luma_p98_min": self.over_luma_p98, "luma_mean_min": self.over_luma_mean},
        }


@dataclass
class FrameResult:
    run: int
    pts_s: float
    outputs: np.ndarray  # (1 + len(MODEL_DEFECTS),): score, then logits
    stats: FrameStats


def category(score: float, coverage: float, decision: Decision, black: float = 0.0) -> str:
    """The category of a reported score, capped by the share of the timeline that the
    ``capped_by`` defects cover (``coverage``) and that black covers (``black``)."""
    name = next((name for bound, name in decision.category_thresholds if score >= bound), "bad")
    caps = [cap for share, cap in decision.category_caps if coverage >= share]
    if black >= decision.black_throughout:
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


def frozen_flags(frames: list[FrameResult], black: np.ndarray, plan: SamplePlan, decision: Decision) -> np.ndarray:
    """Frames that repeat their neighbour, in stretches of ``decision.min_frozen_frames`` or more."""
    same = np.zeros(len(frames), bool)  # same[i]: frame i repeats frame i-1
    for i in range(1, len(frames)):
        if _consecutive(plan, frames[i - 1].run, frames[i].run):
            d = _difference(frames[i - 1].stats, frames[i].stats)
            same[i] = d is not None and d < decision.freeze_mad
    flags = np.zeros(len(frames), bool)
    i = 1
    while i < len(frames):
        if same[i]:
            j = i
            while j + 1 < len(frames) and same[j + 1]:
                j += 1
            if j - i + 2 >= decision.min_frozen_frames:
                flags[i - 1:j + 1] = True
            i = j + 1
        else:
            i += 1
    return flags & ~black


def _black(frames: list[FrameResult], decision: Decision) -> np.ndarray:
    return np.array([f.stats.luma_mean <= decision.black_luma_mean and f.stats.luma_p98 <= decision.black_luma_p98
                     for f in frames], bool)


def timeline(frames: list[FrameResult], plan: SamplePlan, decision: Decision) -> list[dict]:
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
    black = _black(frames, decision)
    frozen = frozen_flags(frames, black, plan, decision)
    out = []
    for i, f in enumerate(frames):
        point = {"t_s": round(float(f.pts_s), 3), "score": round(float(scores[i]), 2)}
        point.update((kind, round(float(probs[i, k]), 3)) for k, kind in enumerate(MODEL_DEFECTS))
        point["black"], point["frozen"] = bool(black[i]), bool(frozen[i])
        out.append(point)
    return out


def aggregate(frames: list[FrameResult], plan: SamplePlan, duration_s: float, decision: Decision
              ) -> tuple[float, str, list[Defect]]:
    if not frames:
        raise ValueError("no frames to aggregate")
    outputs = np.stack([f.outputs for f in frames]).astype(np.float64)
    black = _black(frames, decision)
    scores = np.clip(outputs[:, 0], 0, 100)
    score = round(float(scores[~black].mean()), 1) if (~black).any() else 0.0
    probs = 1.0 / (1.0 + np.exp(-outputs[:, 1:]))
    mean = np.array([f.stats.luma_mean for f in frames])
    p98 = np.array([f.stats.luma_p98 for f in frames])
    d = decision
    dark = (mean <= d.dark_luma_mean) & (p98 <= (255.0 if d.dark_luma_p98 is None else d.dark_luma_p98))
    allowed = {"dark": dark, "overexposed": (p98 >= d.over_luma_p98) | (mean >= d.over_luma_mean)}
    spans = _spans(frames, plan, duration_s)
    min_frames = min(d.min_segment_frames, len(frames))
    defects: list[Defect] = []
    for k, kind in enumerate(MODEL_DEFECTS):
        # On black frames the picture-defect heads have nothing to judge; black says it all.
        flags = (probs[:, k] >= d.defect_probability[kind]) & ~black & allowed.get(kind, True)
        defects += _segments(flags, probs[:, k], spans, kind, min_frames)
    frozen = frozen_flags(frames, black, plan, d)
    defects += _segments(frozen, np.ones(len(frames)), spans, "frozen", min(d.min_frozen_frames, len(frames)))
    defects += _segments(black, np.ones(len(frames)), spans, "black", min_frames)
    widths = [b - a for a, b in spans if b > a]
    defects = _tidy(defects, min(widths) if widths else 1e-3, d.merge_gap_s)
    defects.sort(key=lambda d: (d.start_s, d.type))
    blind = coverage([x for x in defects if x.type in d.capped_by], duration_s)
    black_share = coverage([x for x in defects if x.type == "black"], duration_s)
    return score, category(score, blind, d, black_share), defects
