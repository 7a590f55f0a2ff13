"""Aggregation policy on hand-built frame results: no video, no model."""
from __future__ import annotations

import numpy as np
import pytest

import dataclasses

from vqa import aggregate as agg
from vqa.aggregate import FrameResult, _spans, _tidy, coverage
from vqa.model import load_model_spec
from vqa.preprocess import THUMB, FrameStats
from vqa.sample import plan_frames
from vqa.types import DEFECT_TYPES, MODEL_DEFECTS, Defect, Run, SamplePlan, VideoInfo

# The shipped model's rules (its manifest's decision block), under the names they had as constants.
DECISION = load_model_spec().decision
BLACK_LUMA_MEAN, BLACK_LUMA_P98 = DECISION.black_luma_mean, DECISION.black_luma_p98
CATEGORY_THRESHOLDS, DEFECT_PROBABILITY = DECISION.category_thresholds, DECISION.defect_probability
FREEZE_MAD, MIN_FROZEN_FRAMES = DECISION.freeze_mad, DECISION.min_frozen_frames
MIN_SEGMENT_FRAMES = DECISION.min_segment_frames


def aggregate(frames, plan, duration_s, decision=DECISION):
    return agg.aggregate(frames, plan, duration_s, decision)


def category(score, decision=DECISION):
    return agg.category(score, decision)


MERGE_GAP_S = DECISION.merge_gap_s


FPS = 25.0
QUIET = -8.0  # a logit whose probability is far below the flag threshold
LOUD = 8.0


def stats(*, luma: float = 120.0, p98: float = 200.0, thumb_seed: int | None = None,
          thumb: np.ndarray | None = None, p50: float | None = None) -> FrameStats:
    if thumb is None:
        rng = np.random.default_rng(thumb_seed)
        thumb = rng.integers(0, 256, (THUMB[1], THUMB[0]), dtype=np.uint8)
    return FrameStats(luma, p98, thumb, luma_p50=p50)


BLACK = dict(luma=0.5, p98=2.0, thumb=np.zeros((THUMB[1], THUMB[0]), np.uint8))
# Luminance that lets each exposure head speak (vqa.aggregate gates them on frame statistics).
# A dark frame here is between the luma under which it is dark whatever the head says and the
# most the dark head may speak at, so the head decides.
EXPOSURE = {"dark": dict(luma=(DECISION.dark_luma_alone + DECISION.dark_luma_mean) / 2, p98=120.0),
            "overexposed": dict(luma=200.0, p98=255.0)}
# The shipped rules, except that no frame is dark by its luma alone (for tests of other rules on dim frames).
HEAD_ONLY = dataclasses.replace(DECISION, dark_luma_alone=0.0, dark_luma_p50_alone=None)


def outputs(score: float = 70.0, **logits: float) -> np.ndarray:
    row = np.full(1 + len(MODEL_DEFECTS), QUIET)
    row[0] = score
    for name, value in logits.items():
        row[1 + MODEL_DEFECTS.index(name)] = value
    return row


def one_run_plan(n: int, duration_s: float) -> SamplePlan:
    return SamplePlan(mode="count", runs=(Run(0.0, n, 0.0, duration_s),), requested=n)


def frames_in_one_run(rows: list[np.ndarray], stats_list: list[FrameStats] | None = None
                      ) -> list[FrameResult]:
    stats_list = stats_list or [stats(thumb_seed=i) for i in range(len(rows))]
    return [FrameResult(0, i / FPS, row, st) for i, (row, st) in enumerate(zip(rows, stats_list))]


def of_type(defects, kind):
    return [d for d in defects if d.type == kind]


# --- categories --------------------------------------------------------------------------

def _boundaries():
    """Each shipped bound gives its category, and just under it the next one down."""
    names = [name for _, name in CATEGORY_THRESHOLDS] + ["bad"]
    cases = [(100.0, "excellent"), (0.0, "bad")]
    for i, (bound, name) in enumerate(CATEGORY_THRESHOLDS):
        cases += [(bound, name), (bound - 0.01, names[i + 1])]
    return cases


@pytest.mark.parametrize("score, expected", _boundaries())
def test_category_boundaries(score, expected):
    assert category(score) == expected


def test_the_shipped_bounds_are_the_viewer_vmaf_bands():
    # calibrate.py --categories chose them on validation (models/calibration.json)
    assert [b for b, _ in CATEGORY_THRESHOLDS] == [90.0, 70.0, 50.0, 30.0]


def test_thresholds_descend_and_cover_every_category():
    bounds = [b for b, _ in CATEGORY_THRESHOLDS]
    assert bounds == sorted(bounds, reverse=True)
    names = {category(b) for b in bounds} | {category(bounds[-1] - 1e-6)}
    assert names == {"excellent", "good", "fair", "poor", "bad"}


# --- the score ---------------------------------------------------------------------------

def test_score_is_mean_of_clamped_frames_without_a_lone_black_frame():
    # A single black frame makes no segment (a cut): it has no picture to judge and is left out.
    rows = [outputs(120.0), outputs(-10.0), outputs(50.0), outputs(90.0)]
    st = [stats(thumb_seed=0), stats(thumb_seed=1), stats(thumb_seed=2), stats(**BLACK)]
    score, cat, _ = aggregate(frames_in_one_run(rows, st), one_run_plan(4, 4 / FPS), 4 / FPS)
    assert score == pytest.approx((100.0 + 0.0 + 50.0) / 3)
    assert cat == category(score)


def test_score_in_range_whatever_the_outputs():
    rng = np.random.default_rng(3)
    rows = [outputs(float(s)) for s in rng.uniform(-500, 500, 20)]
    score, _, _ = aggregate(frames_in_one_run(rows), one_run_plan(20, 20 / FPS), 20 / FPS)
    assert 0.0 <= score <= 100.0


def test_all_black_scores_zero_and_reports_black_only():
    rows = [outputs(95.0, blur=LOUD, dark=LOUD) for _ in range(4)]
    st = [stats(**BLACK) for _ in rows]
    score, cat, defects = aggregate(frames_in_one_run(rows, st), one_run_plan(4, 1.0), 1.0)
    assert score == round(DECISION.penalties.black_frame, 1) and cat == "bad"
    assert [d.type for d in defects] == ["black"]
    assert (defects[0].start_s, defects[0].end_s) == (0.0, 1.0)


@pytest.mark.parametrize("luma, p98, is_black", [
    (BLACK_LUMA_MEAN, BLACK_LUMA_P98, True),
    (BLACK_LUMA_MEAN + 0.01, BLACK_LUMA_P98, False),
    (BLACK_LUMA_MEAN, BLACK_LUMA_P98 + 0.01, False),
    (3.0, 60.0, False),  # a night scene: dark on average, with some bright detail
])
def test_black_frame_thresholds(luma, p98, is_black):
    rows = [outputs(40.0), outputs(40.0), outputs(80.0), outputs(80.0)]
    st = [stats(thumb_seed=0), stats(thumb_seed=1),
          stats(luma=luma, p98=p98, thumb_seed=2), stats(luma=luma, p98=p98, thumb_seed=3)]
    score, _, defects = aggregate(frames_in_one_run(rows, st), one_run_plan(4, 1.0), 1.0, HEAD_ONLY)
    black = DECISION.penalties.black_frame  # two black frames make a segment: each worth a black frame
    assert score == pytest.approx(round((80.0 + 2 * black) / 4, 1) if is_black else 60.0)
    assert bool(of_type(defects, "black")) == is_black


def test_no_frames_is_an_error():
    with pytest.raises(ValueError):
        aggregate([], one_run_plan(1, 1.0), 1.0)


# --- model defects -----------------------------------------------------------------------

@pytest.mark.parametrize("kind", MODEL_DEFECTS)
def test_single_flagged_frame_is_not_a_segment(kind):
    rows = [outputs(), outputs(), outputs(**{kind: LOUD}), outputs(), outputs()]
    _, _, defects = aggregate(frames_in_one_run(rows), one_run_plan(5, 1.0), 1.0)
    assert defects == []


@pytest.mark.parametrize("kind", MODEL_DEFECTS)
def test_two_flagged_frames_make_one_segment(kind):
    assert MIN_SEGMENT_FRAMES == 2
    rows = [outputs(), outputs(**{kind: LOUD}), outputs(**{kind: LOUD}), outputs(), outputs()]
    frames = frames_in_one_run(rows, [stats(thumb_seed=i, **EXPOSURE.get(kind, {})) for i in range(5)])
    _, _, defects = aggregate(frames, one_run_plan(5, 1.0), 1.0)
    assert [d.type for d in defects] == [kind]
    d = defects[0]
    # frame 1 stands for [pts1, pts2), frame 2 for [pts2, pts3)
    assert (d.start_s, d.end_s) == (frames[1].pts_s, frames[3].pts_s)
    assert d.severity == pytest.approx(1 / (1 + np.exp(-LOUD)))


def test_flags_separated_by_a_clean_frame_do_not_merge():
    rows = [outputs(blur=LOUD), outputs(), outputs(blur=LOUD), outputs(), outputs(blur=LOUD)]
    _, _, defects = aggregate(frames_in_one_run(rows), one_run_plan(5, 1.0), 1.0)
    assert defects == []


@pytest.mark.parametrize("kind", MODEL_DEFECTS[:4])
def test_flag_threshold_is_inclusive_at_each_heads_probability(kind):
    p = DEFECT_PROBABILITY[kind]
    at, under = np.log(p / (1 - p)) + 1e-9, np.log(p / (1 - p)) - 0.01  # +1e-9: the logistic's rounding
    rows = [outputs(**{kind: at}), outputs(**{kind: at}), outputs(**{kind: under}), outputs(**{kind: under})]
    frames = frames_in_one_run(rows)
    _, _, defects = aggregate(frames, one_run_plan(4, 1.0), 1.0)
    assert [(d.type, d.start_s, d.end_s) for d in defects] == [(kind, 0.0, frames[2].pts_s)]
    assert defects[0].severity == pytest.approx(p)


def test_dark_bound_on_highlights_when_set():
    # A night scene: dark mean, bright highlights. Flagged with no bound, not under a bound of 150.
    st = [stats(luma=40.0, p98=230.0, thumb_seed=i) for i in range(4)]
    rows = [outputs(dark=LOUD)] * 4
    unbounded = dataclasses.replace(HEAD_ONLY, dark_luma_p98=None)
    _, _, defects = aggregate(frames_in_one_run(rows, st), one_run_plan(4, 1.0), 1.0, unbounded)
    assert of_type(defects, "dark")
    bounded = dataclasses.replace(HEAD_ONLY, dark_luma_p98=150.0)
    _, _, defects = aggregate(frames_in_one_run(rows, st), one_run_plan(4, 1.0), 1.0, bounded)
    assert not of_type(defects, "dark")


def test_severity_is_mean_probability_of_the_segment():
    logits = [0.5, 2.0, 4.0]
    rows = [outputs(compression=v) for v in logits]
    _, _, defects = aggregate(frames_in_one_run(rows), one_run_plan(3, 1.0), 1.0)
    expected = np.mean([1 / (1 + np.exp(-v)) for v in logits])
    assert [d.type for d in defects] == ["compression"]
    assert defects[0].severity == pytest.approx(expected)
    assert 0.0 <= defects[0].severity <= 1.0


def test_model_defects_are_not_reported_on_black_frames():
    rows = [outputs(dark=LOUD) for _ in range(4)]
    st = [stats(thumb_seed=0), stats(**BLACK), stats(**BLACK), stats(thumb_seed=1)]
    _, _, defects = aggregate(frames_in_one_run(rows, st), one_run_plan(4, 1.0), 1.0)
    assert [d.type for d in defects] == ["black"]


def test_one_frame_video_reports_its_defect():
    frames = frames_in_one_run([outputs(blur=LOUD)])
    _, _, defects = aggregate(frames, one_run_plan(1, 0.04), 0.04)
    assert [(d.type, d.start_s, d.end_s) for d in defects] == [("blur", 0.0, 0.04)]


def test_defects_sorted_by_start_then_type():
    n = 8
    rows = [outputs(noise=LOUD, blur=LOUD) if i >= 4 else outputs(overexposed=LOUD) for i in range(n)]
    bright = [stats(thumb_seed=i, **EXPOSURE["overexposed"]) for i in range(n)]
    _, _, defects = aggregate(frames_in_one_run(rows, bright), one_run_plan(n, 1.0), 1.0)
    keys = [(d.start_s, d.type) for d in defects]
    assert keys == sorted(keys)
    assert [d.type for d in defects] == ["overexposed", "blur", "noise"]
    assert {d.type for d in defects} <= set(DEFECT_TYPES)


# --- spans: the timeline each sampled frame stands for ------------------------------------

def planned_frames(info: VideoInfo, frames) -> tuple[SamplePlan, list[FrameResult]]:
    """The frames a decoder would return for a plan on a constant frame rate video: each run
    takes its count from its start, stopping at its span's end (the last run runs on)."""
    plan = plan_frames(info, frames)
    out = []
    for k, run in enumerate(plan.runs):
        first = int(np.ceil(run.start_s * info.fps - 1e-9))
        count = run.count or info.frame_count
        for j in range(count):
            pts = (first + j) / info.fps
            if k < len(plan.runs) - 1 and pts >= run.span_end_s:
                break
            out.append(FrameResult(k, pts, outputs(), stats(thumb_seed=len(out))))
    return plan, out


@pytest.mark.parametrize("duration_s, frames", [
    (10.0, "default"), (3.0, 12), (3.0, 7), (2.0, "all"), (7.3, 5),
    # Asking for nearly every frame: 13 runs of up to 4 frames (0.16 s) in spans of 0.154 s.
    (2.0, 49),
])
def test_spans_tile_the_timeline(duration_s, frames):
    info = VideoInfo(width=64, height=48, fps=FPS, duration_s=duration_s,
                     frame_count=round(duration_s * FPS), codec="h264")
    plan, results = planned_frames(info, frames)
    spans = _spans(results, plan, duration_s)
    assert len(spans) == len(results)
    assert spans[0][0] == 0.0
    assert spans[-1][1] == pytest.approx(duration_s)
    for (_a0, a1), (b0, _b1) in zip(spans, spans[1:]):
        assert a1 == b0  # no gap, no overlap: bit-identical edges
    for (s0, s1), f in zip(spans, results):
        assert s0 <= f.pts_s <= s1
    # run boundaries are the plan's span edges
    for k, run in enumerate(plan.runs):
        members = [s for s, f in zip(spans, results) if f.run == k]
        assert members[0][0] == run.span_start_s
        assert members[-1][1] == (run.span_end_s if run.span_end_s > 0 else duration_s)


def test_segment_ends_come_from_run_spans():
    """A defect that fills runs 1 and 2 of 4 is reported over exactly their spans."""
    info = VideoInfo(width=64, height=48, fps=FPS, duration_s=8.0, frame_count=200, codec="h264")
    plan, results = planned_frames(info, 16)
    assert len(plan.runs) == 4
    for r in results:
        if r.run in (1, 2):
            r.outputs = outputs(low_resolution=LOUD)
    _, _, defects = aggregate(results, plan, info.duration_s)
    assert [(d.type, d.start_s, d.end_s) for d in defects] == [
        ("low_resolution", plan.runs[1].span_start_s, plan.runs[2].span_end_s)]


def test_whole_video_defect_covers_zero_to_duration():
    info = VideoInfo(width=64, height=48, fps=FPS, duration_s=10.0, frame_count=250, codec="h264")
    plan, results = planned_frames(info, "default")
    for r in results:
        r.outputs = outputs(blur=LOUD)
    _, _, defects = aggregate(results, plan, info.duration_s)
    assert [(d.type, d.start_s, d.end_s) for d in defects] == [("blur", 0.0, 10.0)]


# --- frozen ------------------------------------------------------------------------------

def frozen_stats(pattern: str) -> list[FrameStats]:
    """One FrameStats per letter: equal letters share a thumbnail; "k" is a black frame."""
    thumbs = {}
    out = []
    for ch in pattern:
        if ch == "k":
            out.append(stats(**BLACK))
            continue
        if ch not in thumbs:
            thumbs[ch] = np.random.default_rng(ord(ch)).integers(0, 256, (THUMB[1], THUMB[0]),
                                                                 dtype=np.uint8)
        out.append(stats(thumb=thumbs[ch]))
    return out


def frozen_of(pattern: str, runs: list[int] | None = None):
    st = frozen_stats(pattern)
    frames = [FrameResult(0 if runs is None else runs[i], i / FPS, outputs(), s)
              for i, s in enumerate(st)]
    n_runs = 1 if runs is None else max(runs) + 1
    d = len(frames) / FPS
    # Sampled runs carry their frame counts (count 0 marks the pieces of an every-frame plan).
    counts = [sum(1 for f in frames if f.run == k) for k in range(n_runs)]
    plan = SamplePlan("count", tuple(Run(d * k / n_runs, counts[k], d * k / n_runs, d * (k + 1) / n_runs)
                                     for k in range(n_runs)), len(frames))
    _, _, defects = aggregate(frames, plan, d)
    return frames, defects


def test_three_repeated_frames_are_frozen():
    assert MIN_FROZEN_FRAMES == 3
    frames, defects = frozen_of("abbbcd")
    frozen = of_type(defects, "frozen")
    assert [(d.start_s, d.end_s, d.severity) for d in frozen] == [(frames[1].pts_s, frames[4].pts_s, 1.0)]


def test_two_repeated_frames_are_not_frozen():
    _, defects = frozen_of("abbcdde")
    assert of_type(defects, "frozen") == []


def test_small_changes_are_not_frozen():
    st = frozen_stats("aaaa")
    base = st[0].thumb
    moved = [base, np.clip(base.astype(int) + 1, 0, 255).astype(np.uint8), base,
             np.clip(base.astype(int) + 1, 0, 255).astype(np.uint8)]
    # each neighbour pair differs by about 1 grey level everywhere: far above FREEZE_MAD
    assert np.abs(moved[1].astype(int) - moved[0]).mean() > FREEZE_MAD
    frames = frames_in_one_run([outputs()] * 4, [stats(thumb=t) for t in moved])
    _, _, defects = aggregate(frames, one_run_plan(4, 1.0), 1.0)
    assert of_type(defects, "frozen") == []


def test_repeats_across_runs_do_not_count():
    # "aaaa" split 2 + 2 over two runs: no run holds 3 repeated frames
    _, defects = frozen_of("aaaa", runs=[0, 0, 1, 1])
    assert of_type(defects, "frozen") == []
    _, defects = frozen_of("aaaaaa", runs=[0, 0, 0, 1, 1, 1])
    assert len(of_type(defects, "frozen")) == 1  # two frozen runs side by side merge


def test_black_frames_are_black_not_frozen():
    frames, defects = frozen_of("abkkkkcd")
    assert of_type(defects, "frozen") == []
    black = of_type(defects, "black")
    assert [(d.start_s, d.end_s) for d in black] == [(frames[2].pts_s, frames[6].pts_s)]


def test_frozen_stretch_then_black():
    frames, defects = frozen_of("aaaakkkk")
    assert [(d.type, d.start_s, d.end_s) for d in defects] == [
        ("frozen", 0.0, frames[4].pts_s), ("black", frames[4].pts_s, 8 / FPS)]


@pytest.mark.parametrize("kind, luma, p98, reported", [
    ("dark", 40.0, 120.0, True), ("dark", 120.0, 200.0, False),
    ("overexposed", 120.0, 250.0, True), ("overexposed", 190.0, 230.0, True),
    ("overexposed", 120.0, 200.0, False),
])
def test_exposure_heads_are_gated_by_frame_luminance(kind, luma, p98, reported):
    rows = [outputs(**{kind: LOUD})] * 4
    frames = frames_in_one_run(rows, [stats(luma=luma, p98=p98, thumb_seed=i) for i in range(4)])
    _, _, defects = aggregate(frames, one_run_plan(4, 1.0), 1.0)
    assert (kind in {d.type for d in defects}) == reported


def test_frozen_stretch_across_a_split_every_frame_plan_is_unchanged():
    """An every-frame plan cut at 1.0 s for two workers must find the same freeze as the whole."""
    n, fps = 10, 5.0
    still = np.zeros((THUMB[1], THUMB[0]), np.uint8)
    st = [stats(thumb=still) if 3 <= i <= 7 else stats(thumb_seed=i) for i in range(n)]
    whole = SamplePlan(mode="all", runs=(Run(0.0, 0, 0.0, 2.0),), requested=None)
    split = SamplePlan(mode="all", runs=(Run(0.0, 0, 0.0, 1.0), Run(1.0, 0, 1.0, 2.0)), requested=None)
    def frames_for(plan):
        return [FrameResult(0 if (plan is whole or i < 5) else 1, i / fps, outputs(), st[i]) for i in range(n)]
    a = aggregate(frames_for(whole), whole, 2.0)[2]
    b = aggregate(frames_for(split), split, 2.0)[2]
    assert [d.to_dict() for d in a] == [d.to_dict() for d in b]
    assert [d.type for d in a] == ["frozen"]


def test_freeze_chain_keeps_only_the_first_and_last_thumbnails_of_a_read():
    from vqa.aggregate import FreezeChain
    st = [stats(thumb_seed=i) for i in range(6)]
    chain = FreezeChain()
    for s in st:
        chain.add(s)
    assert [s.thumb is not None for s in st] == [True, False, False, False, False, True]
    assert st[0].mad_prev is None and all(s.mad_prev > 50 for s in st[1:])  # random thumbs differ


@pytest.mark.parametrize("cut", [None, 2, 5, 7])
def test_chained_reads_find_the_same_freezes_as_whole_thumbnails(cut):
    """Frames chained as a worker task reads them (cut: where a second task takes over) give
    the same defects as frames that keep every thumbnail."""
    import copy

    from vqa.aggregate import FreezeChain
    n, fps = 10, 5.0
    still = np.zeros((THUMB[1], THUMB[0]), np.uint8)
    st = [stats(thumb=still) if (1 <= i <= 3 or 6 <= i <= 8) else stats(thumb_seed=i) for i in range(n)]
    if cut is None:
        plan = SamplePlan(mode="all", runs=(Run(0.0, 0, 0.0, 2.0),), requested=None)
        reads = [range(n)]
    else:
        plan = SamplePlan(mode="all", runs=(Run(0.0, 0, 0.0, cut / fps), Run(cut / fps, 0, cut / fps, 2.0)),
                          requested=None)
        reads = [range(cut), range(cut, n)]
    def frames(stats_list):
        return [FrameResult(0 if cut is None or i < cut else 1, i / fps, outputs(), s)
                for i, s in enumerate(stats_list)]
    apart = dataclasses.replace(DECISION, merge_gap_s=0.0)  # two freezes 0.4 s apart stay two here
    expected = aggregate(frames(st), plan, 2.0, apart)[2]
    chained = copy.deepcopy(st)
    for read in reads:
        chain = FreezeChain()
        for i in read:
            chain.add(chained[i])
    got = aggregate(frames(chained), plan, 2.0, apart)[2]
    assert [d.to_dict() for d in got] == [d.to_dict() for d in expected]
    assert [d.type for d in got] == ["frozen", "frozen"]
    assert sum(s.thumb is not None for s in chained) == 2 * len(reads)


# --- what the defects the network does not see cost; the category is the score's band -------

PEN = DECISION.penalties


def exposure_row(kind: str) -> np.ndarray:
    row = outputs(95.0)
    row[1 + MODEL_DEFECTS.index(kind)] = 6.0
    return row


@pytest.mark.parametrize("kind", ["dark", "overexposed"])
def test_a_clip_dark_or_overexposed_throughout_loses_its_curves_points(kind):
    # 2 s, every frame scored 95 by the network and flagged: each loses the curve's points at its luma.
    st = [stats(thumb_seed=i, **EXPOSURE[kind]) for i in range(50)]
    score, cat, defects = aggregate(frames_in_one_run([exposure_row(kind)] * 50, st), one_run_plan(50, 2.0), 2.0)
    curve = getattr(PEN, kind)
    lost = float(curve(np.array([EXPOSURE[kind]["luma"]]))[0])
    assert lost > 0, "the shipped curve costs a flagged frame something"
    assert [d.type for d in defects] == [kind]
    assert score == pytest.approx(round(max(0.0, 95.0 - lost), 1))
    assert cat == category(score)


def test_penalty_is_in_proportion_to_the_share_of_frames_it_covers():
    # 100 frames scored 95; the first k dark: the score falls linearly in k, a tenth costs a tenth.
    def score_with(k):
        st = [stats(thumb_seed=i, **(EXPOSURE["dark"] if i < k else {})) for i in range(100)]
        rows = [exposure_row("dark") if i < k else outputs(95.0) for i in range(100)]
        return aggregate(frames_in_one_run(rows, st), one_run_plan(100, 4.0), 4.0)
    whole = 95.0 - score_with(100)[0]
    for k in (10, 25, 50):
        score, cat, _ = score_with(k)
        assert score == pytest.approx(95.0 - whole * k / 100, abs=0.1)
    assert score_with(10)[1] in ("excellent", "good"), "a video dark for a tenth of its length is not poor"


def test_a_clip_frozen_throughout_loses_the_frozen_points():
    still = np.full((THUMB[1], THUMB[0]), 90, np.uint8)
    st = [stats(thumb=still) for _ in range(50)]
    score, cat, defects = aggregate(frames_in_one_run([outputs(95.0)] * 50, st), one_run_plan(50, 2.0), 2.0)
    assert [d.type for d in defects] == ["frozen"]
    assert score == pytest.approx(round(max(0.0, 95.0 - PEN.frozen_points), 1)) and cat == category(score)


def test_a_clip_black_throughout_scores_a_black_frames_worth_and_is_bad():
    st = [stats(**BLACK) for _ in range(50)]
    score, cat, defects = aggregate(frames_in_one_run([outputs(95.0)] * 50, st), one_run_plan(50, 2.0), 2.0)
    assert score == round(PEN.black_frame, 1) and [d.type for d in defects] == ["black"] and cat == "bad"


def test_a_frame_with_two_defects_loses_the_larger_penalty_once():
    still = np.full((THUMB[1], THUMB[0]), 40, np.uint8)
    st = [stats(thumb=still, **EXPOSURE["dark"]) for _ in range(50)]
    score, _, defects = aggregate(frames_in_one_run([exposure_row("dark")] * 50, st), one_run_plan(50, 2.0), 2.0)
    assert {d.type for d in defects} == {"dark", "frozen"}
    lost = max(PEN.frozen_points, float(PEN.dark(np.array([EXPOSURE["dark"]["luma"]]))[0]))
    assert score == pytest.approx(round(max(0.0, 95.0 - lost), 1))


def test_picture_defects_cost_nothing_beyond_the_networks_score():
    # Blur over the whole clip: the network's score already says what it costs.
    row = outputs(95.0)
    row[1 + MODEL_DEFECTS.index("blur")] = 6.0
    st = [stats(thumb_seed=i) for i in range(50)]
    score, cat, defects = aggregate(frames_in_one_run([row] * 50, st), one_run_plan(50, 2.0), 2.0)
    assert [d.type for d in defects] == ["blur"] and score == 95.0 and cat == "excellent"


def test_a_frame_dark_enough_is_dark_whatever_the_head_says():
    luma = DECISION.dark_luma_alone
    assert luma > 0
    st = [stats(thumb_seed=i, luma=luma, p98=150.0) for i in range(10)]
    _, _, defects = aggregate(frames_in_one_run([outputs(95.0)] * 10, st), one_run_plan(10, 1.0), 1.0)
    assert [d.type for d in defects] == ["dark"]
    st = [stats(thumb_seed=i, luma=luma + 0.5, p98=150.0) for i in range(10)]
    _, _, defects = aggregate(frames_in_one_run([outputs(95.0)] * 10, st), one_run_plan(10, 1.0), 1.0)
    assert defects == []


def test_a_dim_scene_is_dark_by_its_median_luma():
    # A night street: most of the frame near black, a few lamps lift the mean over the mean bound.
    # The rule is the fit's to choose (scripts/model/decide.py); here it is set by hand.
    bound = 40.0
    rule = dataclasses.replace(DECISION, dark_luma_p50_alone=bound)
    over_mean = DECISION.dark_luma_mean + 10.0  # the head may not speak this bright, nor the mean rule
    plan = one_run_plan(10, 1.0)
    dim = [stats(thumb_seed=i, luma=over_mean, p98=250.0, p50=bound) for i in range(10)]
    score, _, defects = aggregate(frames_in_one_run([outputs(95.0)] * 10, dim), plan, 1.0, rule)
    assert [d.type for d in defects] == ["dark"]
    assert score == pytest.approx(95.0 - float(DECISION.penalties.dark(np.array([over_mean]))[0]), abs=0.05)
    _, _, defects = aggregate(frames_in_one_run([outputs(95.0)] * 10, dim), plan, 1.0,
                              dataclasses.replace(DECISION, dark_luma_p50_alone=None))
    assert defects == []  # without the rule
    lit = [stats(thumb_seed=i, luma=over_mean, p98=250.0, p50=bound + 1.0) for i in range(10)]
    _, _, defects = aggregate(frames_in_one_run([outputs(95.0)] * 10, lit), plan, 1.0, rule)
    assert defects == []
    unknown = [stats(thumb_seed=i, luma=over_mean, p98=250.0) for i in range(10)]  # no median measured
    _, _, defects = aggregate(frames_in_one_run([outputs(95.0)] * 10, unknown), plan, 1.0, rule)
    assert defects == []
    assert agg.Decision.from_manifest(rule.to_manifest()) == rule  # the bound travels in the manifest


@pytest.mark.parametrize("block, broken", [
    ({"luma_mean": [0, 50], "points": [10, 20]}, "dark"),  # a dark penalty rising with luma
    ({"luma_mean": [50, 0], "points": [20, 10]}, "dark"),  # knots out of order
    ({"luma_mean": [0, 50], "points": [120, 10]}, "dark"),  # more than 100 points
])
def test_a_manifest_with_a_broken_curve_is_refused(block, broken):
    bad = DECISION.to_manifest()
    bad["penalties"][broken] = block
    with pytest.raises(ValueError):
        agg.Decision.from_manifest(bad)


def test_the_decision_block_round_trips():
    assert agg.Decision.from_manifest(DECISION.to_manifest()) == DECISION


def test_segments_of_one_type_less_than_a_second_apart_merge():
    # The clip: low resolution 0.0-2.8 s and 2.9-5.0 s is one stretch to a reader.
    d = [Defect("low_resolution", 0.8, 0.0, 2.8), Defect("low_resolution", 0.6, 2.9, 5.0),
         Defect("low_resolution", 0.7, 6.5, 7.0), Defect("blur", 0.9, 2.85, 2.88)]
    out = _tidy(d, 0.04, MERGE_GAP_S)
    assert [(x.start_s, x.end_s) for x in of_type(out, "low_resolution")] == [(0.0, 5.0), (6.5, 7.0)]
    assert len(of_type(out, "blur")) == 1


def test_flickering_flags_on_every_frame_give_one_segment():
    # --frames all: a head that flickers around its threshold, frame by frame, for 9.6 s.
    n = 240
    rows = []
    for i in range(n):
        row = outputs(60.0)
        row[1 + MODEL_DEFECTS.index("low_resolution")] = 6.0 if (i % 5) in (0, 1, 3) else -6.0
        rows.append(row)
    st = [stats(thumb_seed=i) for i in range(n)]
    _, _, defects = aggregate(frames_in_one_run(rows, st), one_run_plan(n, 9.6), 9.6)
    assert [d.type for d in defects] == ["low_resolution"]


def test_coverage_counts_overlaps_once():
    d = [Defect("dark", 1.0, 0.0, 2.0), Defect("noise", 1.0, 1.0, 3.0), Defect("black", 1.0, 3.5, 4.0)]
    assert coverage(d, 4.0) == pytest.approx(3.5 / 4.0)
    assert coverage([], 4.0) == 0.0


def test_clip_with_a_black_second_and_a_frozen_second_is_not_excellent():
    # 4 s at 25 fps, every frame scored 95: 1 s frozen (frames 25-49), 1 s black (75-99).
    still = np.full((THUMB[1], THUMB[0]), 90, np.uint8)
    st = [stats(thumb_seed=i) for i in range(100)]
    for i in range(25, 50):
        st[i] = stats(thumb=still)
    for i in range(75, 100):
        st[i] = stats(**BLACK)
    score, cat, defects = aggregate(frames_in_one_run([outputs(95.0)] * 100, st), one_run_plan(100, 4.0), 4.0)
    expected = (50 * 95.0 + 25 * max(0.0, 95.0 - PEN.frozen_points) + 25 * PEN.black_frame) / 100
    assert score == pytest.approx(round(expected, 1))
    assert {d.type for d in defects} == {"frozen", "black"}
    assert cat == category(score) and cat != "excellent"


def test_category_follows_the_reported_score():
    bound = CATEGORY_THRESHOLDS[0][0]
    rows = [outputs(bound - 0.04)] * 4  # rounds up to the bound
    score, cat, _ = aggregate(frames_in_one_run(rows), one_run_plan(4, 4 / FPS), 4 / FPS)
    assert score == bound and cat == "excellent"


def test_touching_segments_of_one_type_merge_and_none_has_zero_width():
    d = [Defect("blur", 0.6, 12.5, 12.6), Defect("blur", 0.8, 12.6, 12.7), Defect("blur", 1.0, 12.7, 12.8),
         Defect("noise", 0.7, 8.8, 8.8), Defect("blur", 0.9, 20.0, 21.0)]
    out = _tidy(d, 0.04)
    blur = of_type(out, "blur")
    assert [(x.start_s, x.end_s) for x in blur] == [(12.5, pytest.approx(12.8)), (20.0, 21.0)]
    assert blur[0].severity == pytest.approx(0.8)
    (noise,) = of_type(out, "noise")
    assert noise.end_s - noise.start_s == pytest.approx(0.04)


# --- a penalty continuous in the heads' probabilities ---------------------------------------

def _logit(p: float) -> float:
    return float(np.log(p / (1 - p)))


@pytest.mark.parametrize("kind", ["dark", "overexposed"])
def test_a_head_crossing_its_threshold_on_one_frame_moves_the_score_a_little(kind):
    # 10 frames scored 95, frame 4 surely flagged, frame 5 at the threshold -/+ 0.005: the step
    # made frames 4 and 5 a segment at once (two frames' full penalty, 8 points for dark); the
    # ramp moves their cost by the logit's move over the ramp's width.
    t = DECISION.defect_probability[kind]
    st = [stats(thumb_seed=i, **EXPOSURE[kind]) for i in range(10)]
    plan = one_run_plan(10, 10 / FPS)

    def score(p: float, decision: agg.Decision = DECISION) -> float:
        rows = [outputs(95.0) for _ in range(10)]
        rows[4][1 + MODEL_DEFECTS.index(kind)] = LOUD
        rows[5][1 + MODEL_DEFECTS.index(kind)] = _logit(p)
        return aggregate(frames_in_one_run(rows, st), plan, 10 / FPS, decision)[0]

    lost = float(getattr(PEN, kind)(np.array([EXPOSURE[kind]["luma"]]))[0])
    step = dataclasses.replace(DECISION, penalty_ramp=0.0)
    assert score(t - 0.005, step) - score(t + 0.005, step) == pytest.approx(2 * lost / 10, abs=0.1)
    assert DECISION.penalty_ramp > 0, "the shipped rule ramps"
    moved = (_logit(t + 0.005) - _logit(t - 0.005)) / DECISION.penalty_ramp
    assert abs(score(t - 0.005) - score(t + 0.005)) <= 2 * min(1.0, moved) * lost / 10 + 0.1


@pytest.mark.parametrize("seed", range(20))
def test_with_sure_weights_the_soft_cover_is_the_segment_rule(seed):
    rng = np.random.default_rng(seed)
    flags = rng.random(int(rng.integers(1, 30))) < 0.6
    for k in (1, 2, 3):
        k = min(k, len(flags))
        hard = agg._covered(agg._stretches(flags, k), len(flags))
        assert np.array_equal(agg._soft_covered(flags.astype(float), k), hard.astype(float))


def test_the_soft_cover_is_the_best_window_of_its_weakest_frame():
    w = np.array([0.0, 0.9, 0.3, 0.6, 1.0, 0.0])
    assert agg._soft_covered(w, 2) == pytest.approx([0.0, 0.3, 0.3, 0.6, 0.6, 0.0])


def test_reports_keep_the_step_whatever_the_ramp():
    # A frame just under the dark threshold pays part of its penalty but reports nothing.
    t = DECISION.defect_probability["dark"]
    st = [stats(thumb_seed=i, **EXPOSURE["dark"]) for i in range(10)]
    rows = [outputs(95.0, dark=_logit(t - 0.001)) for _ in range(10)]
    score, _, defects = aggregate(frames_in_one_run(rows, st), one_run_plan(10, 10 / FPS), 10 / FPS)
    assert defects == [] and score < 95.0


@pytest.mark.parametrize("ramp", [-0.5, float("inf"), float("nan")])
def test_a_manifest_with_a_bad_ramp_is_refused(ramp):
    bad = {**DECISION.to_manifest(), "penalty_ramp": ramp}
    with pytest.raises(ValueError):
        agg.Decision.from_manifest(bad)


def test_a_manifest_without_a_ramp_steps():
    block = DECISION.to_manifest()
    block.pop("penalty_ramp", None)
    decision = agg.Decision.from_manifest(block)
    assert decision.penalty_ramp == 0.0 and decision.to_manifest() == block
