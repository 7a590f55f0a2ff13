"""Per-frame outputs -> one score, a category and timestamped defects for the video.

Policy, in one place:
- A frame's quality is the network's score for it, less what the defects the network does not
  see cost the frames they cover (the decision's ``penalties``, learned from VMAF against the
  clean clip by scripts/model/judgement.py): a frame inside a reported dark or overexposed
  segment loses points by its mean luma, a frozen frame loses a constant, and a black frame is
  worth a constant. A frame covered by several loses the largest one. Blur, noise, compression
  and low resolution already lower the network's score, so they cost nothing more.
- The dark and overexposed penalties are continuous in the heads' probabilities: a frame pays
  its curve's points times its weight, which rises from 0 to 1 across the decision's
  ``penalty_ramp`` (logits, centred on the head's threshold), and a frame's weight within a
  segment is the best, over the min_segment_frames-long windows that hold it, of the window's
  weakest frame (with 0/1 weights, exactly the segment rule). With a step, a head crossing its
  threshold on one frame cost that frame, and a neighbour it completed a segment with, the whole
  curve (about 40 points each): INT8 moved a dark clip by 3.4 points so. The reports keep the step.
- score: the mean of the frames' qualities (VMAF pools frames by their mean too), clamped to
  0..100 and reported to one decimal. The cost of a defect is then in proportion to the share
  of the sampled frames it spoils: a clip dark for a tenth of its length loses a tenth of what
  a clip dark throughout loses.
- category: the band of the reported score, always (the decision's ``category_thresholds``),
  so gating on the score and reading the category never disagree; the defects say why.
- defects: a sampled frame stands for the stretch of the timeline up to the next sampled
  frame (or its run's span end); consecutive flagged frames merge into one segment; a
  segment needs the decision's min_segment_frames frames, so a single odd frame reports
  nothing (and costs nothing). Segments of one type less than the decision's merge_gap_s apart
  are one stretch to a reader and are merged, and none has zero width.

Long because the policy is in one place: the decision block that holds its numbers, and every
step from a frame's outputs to the score, the category and the segments.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .preprocess import FrameStats
from .types import MODEL_DEFECTS, Defect, SamplePlan

CATEGORIES = ("excellent", "good", "fair", "poor", "bad")  # best first; part of the record contract


@dataclass(frozen=True)
class Curve:
    """Points a frame loses, by its mean luma (0..255): linear between the knots, flat beyond."""

    luma_mean: tuple[float, ...]
    points: tuple[float, ...]

    @classmethod
    def from_manifest(cls, block: dict, falling: bool) -> Curve:
        x = tuple(float(v) for v in block["luma_mean"])
        y = tuple(float(v) for v in block["points"])
        if len(x) != len(y) or not x or list(x) != sorted(set(x)):
            raise ValueError("a penalty curve needs as many points as ascending luma_mean knots")
        if any(not 0 <= v <= 100 for v in y):
            raise ValueError("a penalty curve's points lie in 0..100")
        steps = np.diff(y)
        if (falling and (steps > 0).any()) or (not falling and (steps < 0).any()):
            raise ValueError("the dark penalty must not rise with luma, the overexposed one must not fall")
        return cls(x, y)

    def to_manifest(self) -> dict:
        return {"luma_mean": list(self.luma_mean), "points": list(self.points)}

    def __call__(self, luma_mean: np.ndarray) -> np.ndarray:
        return np.interp(luma_mean, self.luma_mean, self.points)


@dataclass(frozen=True)
class Penalties:
    """What the defects the network does not see cost a frame they cover (see the module's policy)."""

    black_frame: float  # a black frame's quality
    frozen_points: float  # points a frozen frame loses
    dark: Curve
    overexposed: Curve

    @classmethod
    def from_manifest(cls, block: dict) -> Penalties:
        out = cls(black_frame=float(block["black"]["frame_score"]), frozen_points=float(block["frozen"]["points"]),
                  dark=Curve.from_manifest(block["dark"], falling=True),
                  overexposed=Curve.from_manifest(block["overexposed"], falling=False))
        if not (0 <= out.black_frame <= 100 and 0 <= out.frozen_points <= 100):
            raise ValueError("penalties lie in 0..100")
        return out

    def to_manifest(self) -> dict:
        return {"black": {"frame_score": self.black_frame}, "frozen": {"points": self.frozen_points},
                "dark": self.dark.to_manifest(), "overexposed": self.overexposed.to_manifest()}


@dataclass(frozen=True)
class Decision:
    """The model's decision rules: the ``decision`` block of its manifest (models/vqa.json,
    read by vqa.model; documented in docs/model/card.md), written there by
    scripts/model/judgement.py. Nothing else holds these numbers: every function below takes
    them from here.

    - ``defect_probability``: a model defect is flagged on a frame at this probability, per type.
    - ``category_thresholds``: the lowest score of each category but "bad", best first.
    - ``penalties``: what dark, overexposed, frozen and black frames cost (``Penalties``).
    - ``merge_gap_s``: segments of one type closer than this are merged into one.
    - ``min_segment_frames``: frames a defect segment needs (a single odd frame reports nothing).
    - ``black_luma_mean``, ``black_luma_p98``: a black frame's most (0..255 full-range luma).
    - ``freeze_mad``: mean absolute difference of grey thumbnails under which a frame repeats
      the one before; ``min_frozen_frames``: repeats in a row that make a frozen stretch.
    - ``dark_luma_mean``, ``dark_luma_p98`` (None: no bound): the most luma with which the dark
      head may speak; ``dark_luma_alone``: a frame this dark (mean luma) is dark whatever the
      head says; ``dark_luma_p50_alone`` (None: no such rule): a frame whose median luma is at
      most this is dark whatever the head says (a dim scene with a few bright lights has a
      median far under its mean); ``over_luma_p98``, ``over_luma_mean``: the least with which the
      overexposed head may (either bound suffices).
    - ``penalty_ramp``: the width, in logits centred on the dark and overexposed heads'
      thresholds, over which a frame's penalty rises from none to all (0: a step at the
      threshold, as the reports use).
    """

    defect_probability: dict[str, float]
    category_thresholds: tuple[tuple[float, str], ...]
    penalties: Penalties
    merge_gap_s: float
    min_segment_frames: int
    black_luma_mean: float
    black_luma_p98: float
    freeze_mad: float
    min_frozen_frames: int
    dark_luma_mean: float
    dark_luma_p98: float | None
    dark_luma_alone: float
    dark_luma_p50_alone: float | None
    over_luma_p98: float
    over_luma_mean: float
    penalty_ramp: float = 0.0

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
            penalties=Penalties.from_manifest(block["penalties"]),
            merge_gap_s=float(block["merge_gap_s"]),
            min_segment_frames=int(block["min_segment_frames"]),
            black_luma_mean=float(block["black"]["luma_mean_max"]),
            black_luma_p98=float(block["black"]["luma_p98_max"]),
            freeze_mad=float(block["frozen"]["thumb_mad_max"]),
            min_frozen_frames=int(block["frozen"]["min_frames"]),
            dark_luma_mean=float(block["dark"]["luma_mean_max"]),
            dark_luma_p98=None if block["dark"]["luma_p98_max"] is None else float(block["dark"]["luma_p98_max"]),
            dark_luma_alone=float(block["dark"]["luma_mean_alone"]),
            dark_luma_p50_alone=None if block["dark"].get("luma_p50_alone") is None
            else float(block["dark"]["luma_p50_alone"]),
            over_luma_p98=float(block["overexposed"]["luma_p98_min"]),
            over_luma_mean=float(block["overexposed"]["luma_mean_min"]),
            penalty_ramp=float(block.get("penalty_ramp", 0.0)))
        if not 0 <= decision.penalty_ramp < np.inf:
            raise ValueError("penalty_ramp is a width in logits: 0 or more")
        bounds = [b for b, _ in decision.category_thresholds]
        if bounds != sorted(bounds, reverse=True) or any(not 0 <= b <= 100 for b in bounds):
            raise ValueError("category_thresholds must descend within 0..100")
        return decision

    def to_manifest(self) -> dict:
        """The manifest's ``decision`` block (the inverse of ``from_manifest``)."""
        return {
            "defect_probability": dict(self.defect_probability),
            "category_thresholds": {name: bound for bound, name in self.category_thresholds},
            "penalties": self.penalties.to_manifest(),
            "merge_gap_s": self.merge_gap_s,
            "min_segment_frames": self.min_segment_frames,
            "black": {"luma_mean_max": self.black_luma_mean, "luma_p98_max": self.black_luma_p98},
            "frozen": {"thumb_mad_max": self.freeze_mad, "min_frames": self.min_frozen_frames},
            "dark": {"luma_mean_max": self.dark_luma_mean, "luma_p98_max": self.dark_luma_p98,
                     "luma_mean_alone": self.dark_luma_alone,
                     # written only when set: a manifest without the rule round-trips unchanged
                     **({} if self.dark_luma_p50_alone is None else {"luma_p50_alone": self.dark_luma_p50_alone})},
            "overexposed": {"luma_p98_min": self.over_luma_p98, "luma_mean_min": self.over_luma_mean},
            # written only when set: a manifest without it (a step, model 4.0.0) round-trips unchanged
            **({"penalty_ramp": self.penalty_ramp} if self.penalty_ramp else {}),
        }


@dataclass
class FrameResult:
    run: int
    pts_s: float
    outputs: np.ndarray  # (1 + len(MODEL_DEFECTS),): score, then logits
    stats: FrameStats


def category(score: float, decision: Decision) -> str:
    """The band a reported score falls in: the category is the score's, always."""
    return next((name for bound, name in decision.category_thresholds if score >= bound), "bad")


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


def _stretches(flags: np.ndarray, min_frames: int) -> list[tuple[int, int]]:
    """(first, last) index of each run of flagged frames at least ``min_frames`` long."""
    out, i = [], 0
    while i < len(flags):
        if not flags[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(flags) and flags[j + 1]:
            j += 1
        if j - i + 1 >= min_frames:
            out.append((i, j))
        i = j + 1
    return out


def _segments(stretches: list[tuple[int, int]], values: np.ndarray, spans: list[tuple[float, float]],
              kind: str) -> list[Defect]:
    return [Defect(kind, float(np.clip(values[i:j + 1].mean(), 0, 1)), spans[i][0], spans[j][1]) for i, j in stretches]


def _weight(logits: np.ndarray, probability: float, ramp: float) -> np.ndarray:
    """0..1 per frame: how far its logit is past the threshold's, across ``ramp`` logits centred
    on it; a step at the threshold (inclusive, as the flags) when ``ramp`` is 0."""
    if ramp <= 0:
        return (1.0 / (1.0 + np.exp(-logits)) >= probability).astype(np.float64)
    p = min(max(probability, 1e-9), 1 - 1e-9)
    return np.clip(0.5 + (logits - np.log(p / (1 - p))) / ramp, 0.0, 1.0)


def _soft_covered(weight: np.ndarray, min_frames: int) -> np.ndarray:
    """``_covered(_stretches(weight > 0.5, min_frames))`` with degrees: a frame's is the best, over
    the windows of ``min_frames`` frames that hold it, of the window's weakest; with 0/1
    weights it is the same. Continuous in every weight, so no one frame's flag flips a
    neighbour's cost."""
    n = len(weight)
    k = max(1, min(min_frames, n))
    windows = np.lib.stride_tricks.sliding_window_view(weight, k).min(axis=1)  # window j: frames j..j+k-1
    padded = np.concatenate([np.zeros(k - 1), windows, np.zeros(k - 1)])
    return np.lib.stride_tricks.sliding_window_view(padded, k).max(axis=1)


def _covered(stretches: list[tuple[int, int]], n: int) -> np.ndarray:
    out = np.zeros(n, bool)
    for i, j in stretches:
        out[i:j + 1] = True
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
        if prev is not None and stats.thumb is not None and prev.thumb is not None:
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


@dataclass
class Assessment:
    """What ``aggregate`` found, frame by frame (timeline order), before it is pooled."""

    network: np.ndarray  # the network's score, 0..100
    quality: np.ndarray  # the score less the penalties, 0..100
    probability: np.ndarray  # (frames, len(MODEL_DEFECTS)) each model defect's probability
    covered: dict[str, np.ndarray]  # defect type -> frames inside a reported segment of it
    black: np.ndarray  # black frames, reported or not
    frozen: np.ndarray  # frames of a frozen stretch
    defects: list[Defect]


def assess(frames: list[FrameResult], plan: SamplePlan, duration_s: float, decision: Decision) -> Assessment:
    if not frames:
        raise ValueError("no frames to aggregate")
    d = decision
    outputs = np.stack([f.outputs for f in frames]).astype(np.float64)
    network = np.clip(outputs[:, 0], 0, 100)
    probs = 1.0 / (1.0 + np.exp(-outputs[:, 1:]))
    mean = np.array([f.stats.luma_mean for f in frames], np.float64)
    p98 = np.array([f.stats.luma_p98 for f in frames], np.float64)
    p50 = np.array([np.inf if f.stats.luma_p50 is None else f.stats.luma_p50 for f in frames], np.float64)
    black = _black(frames, d)
    dark = (mean <= d.dark_luma_mean) & (p98 <= (255.0 if d.dark_luma_p98 is None else d.dark_luma_p98))
    allowed = {"dark": dark, "overexposed": (p98 >= d.over_luma_p98) | (mean >= d.over_luma_mean)}
    spans = _spans(frames, plan, duration_s)
    n = len(frames)
    min_frames = min(d.min_segment_frames, n)
    defects: list[Defect] = []
    covered: dict[str, np.ndarray] = {}
    paid: dict[str, np.ndarray] = {}  # dark and overexposed: the share of its curve's points a frame pays
    for k, kind in enumerate(MODEL_DEFECTS):
        # On black frames the picture-defect heads have nothing to judge; black says it all.
        flags = (probs[:, k] >= d.defect_probability[kind]) & allowed.get(kind, np.ones(n, bool))
        certain = np.zeros(n, bool)  # flagged by luma alone: no head probability to ramp
        if kind == "dark":
            certain = mean <= d.dark_luma_alone
            if d.dark_luma_p50_alone is not None:
                certain |= p50 <= d.dark_luma_p50_alone
        flags = (flags | certain) & ~black
        runs = _stretches(flags, min_frames)
        defects += _segments(runs, probs[:, k], spans, kind)
        covered[kind] = _covered(runs, n)
        if kind in allowed:
            w = _weight(outputs[:, 1 + k], d.defect_probability[kind], d.penalty_ramp) * allowed[kind]
            paid[kind] = _soft_covered(np.where(certain, 1.0, w) * ~black, min_frames)
    frozen = frozen_flags(frames, black, plan, d)
    runs = _stretches(frozen, min(d.min_frozen_frames, n))
    defects += _segments(runs, np.ones(n), spans, "frozen")
    covered["frozen"] = _covered(runs, n)
    runs = _stretches(black, min_frames)
    defects += _segments(runs, np.ones(n), spans, "black")
    covered["black"] = _covered(runs, n)
    widths = [b - a for a, b in spans if b > a]
    defects = _tidy(defects, min(widths) if widths else 1e-3, d.merge_gap_s)
    defects.sort(key=lambda x: (x.start_s, x.type))

    pen = d.penalties
    loss = np.zeros(n)
    loss = np.maximum(loss, paid["dark"] * pen.dark(mean))
    loss = np.maximum(loss, paid["overexposed"] * pen.overexposed(mean))
    loss = np.maximum(loss, np.where(covered["frozen"], pen.frozen_points, 0.0))
    quality = np.clip(network - loss, 0, 100)
    quality = np.where(covered["black"], min(pen.black_frame, 100.0), quality)
    return Assessment(network, quality, probs, covered, black, frozen, defects)


def pooled(a: Assessment) -> float:
    """The video's score from its frames' qualities: their mean, to one decimal. A black frame
    that makes no segment alone (a cut) has no picture to judge and is left out."""
    keep = ~(a.black & ~a.covered["black"])
    return round(float(a.quality[keep].mean()), 1) if keep.any() else 0.0


def timeline(frames: list[FrameResult], plan: SamplePlan, decision: Decision) -> list[dict]:
    """The per-sampled-frame data behind a record, in timeline order: what ``aggregate`` saw.

    One dict per frame: ``t_s``, ``score`` (0..100, as the network gave it), ``quality`` (the
    score less what the frame's defects cost it, what the video's score averages), each model
    defect's probability under its type's name (0..1), and the frame-statistic flags ``black``
    and ``frozen`` (as the defects measure them). Numbers are rounded (3 decimals, the scores
    2), so a frame costs about 170 bytes of JSON.

    For example ``{"t_s": 0.545, "score": 77.31, "quality": 77.31, "blur": 0.012, ...,
    "black": false, "frozen": false}``.
    """
    if not frames:
        return []
    duration = max(f.pts_s for f in frames) + 1e-3
    a = assess(frames, plan, duration, decision)
    out = []
    for i, f in enumerate(frames):
        point: dict[str, float | bool] = {"t_s": round(float(f.pts_s), 3), "score": round(float(a.network[i]), 2),
                                          "quality": round(float(a.quality[i]), 2)}
        point.update((kind, round(float(a.probability[i, k]), 3)) for k, kind in enumerate(MODEL_DEFECTS))
        point["black"], point["frozen"] = bool(a.black[i]), bool(a.frozen[i])
        out.append(point)
    return out


def aggregate(frames: list[FrameResult], plan: SamplePlan, duration_s: float, decision: Decision
              ) -> tuple[float, str, list[Defect]]:
    a = assess(frames, plan, duration_s, decision)
    score = pooled(a)
    return score, category(score, decision), a.defects
