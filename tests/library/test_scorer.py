"""End to end through ``vqa.Scorer``: synthetic clips, each an obvious case.

Clips come from ``conftest.CLIP_RECIPES`` (a dead-leaves scene, 640x360, 25 fps, 2-3 s, with
one impairment each) and are encoded once per session; each Scorer is loaded once.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from tests.support.clips import write_audio_clip
from tests.support.scenes import FPS, SCENE_FRAMES

from vqa.decode import open_video
from vqa.sample import plan_frames
from vqa.types import DEFECT_TYPES

pytestmark = pytest.mark.slow

DECODERS = ["pyav", "opencv"]
BACKENDS = ["openvino", "pytorch"]
MODEL_CASES = ["blur", "noise", "compression", "low_resolution", "dark", "overexposed"]


def types_of(record) -> set[str]:
    return {d.type for d in record.defects}


def describe(record) -> str:
    return f"score {record.score:.2f} {record.category}; defects " + ", ".join(
        f"{d.type} {d.severity:.2f} {d.start_s:.2f}-{d.end_s:.2f}" for d in record.defects)


def check_ok(record, validate_record):
    assert record.status == "ok", record.error
    validate_record(record)
    for d in record.defects:
        assert d.type in DEFECT_TYPES
        assert 0 <= d.start_s < d.end_s <= record.video.duration_s + 1e-6
        assert 0 <= d.severity <= 1
    return record


# --- clean and impaired clips --------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("decoder", DECODERS)
def test_clean_clip(make_clip, scorer_for, validate_record, decoder, backend):
    r = check_ok(scorer_for(backend, decoder).score(make_clip("clean")), validate_record)
    assert types_of(r) == set(), describe(r)
    assert r.score >= 60, describe(r)
    assert r.category in ("good", "excellent")
    assert r.video.width == 640 and r.video.height == 360
    assert r.frames["sampled"] == 32 and r.frames["decode_errors"] == 0
    assert r.warnings == []


def test_clean_sample_video_has_no_defects(scorer_for, validate_record):
    """The committed reference clip (a photograph, crf 16) is clean on every head."""
    path = Path(__file__).resolve().parents[2] / "sample_videos" / "clean_coffee.mp4"
    r = check_ok(scorer_for().score(path), validate_record)
    assert r.defects == [], describe(r)
    assert r.score >= 80, describe(r)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("case", MODEL_CASES)
def test_model_defect_found(make_clip, scorer_for, validate_record, case, decoder):
    r = check_ok(scorer_for("openvino", decoder).score(make_clip(case)), validate_record)
    # An impairment the model sees covers most of a clip that is impaired throughout. The one
    # exception, measured: on this synthetic scene (a 4x downscale) the low-resolution head swings
    # from frame to frame (0.26 to 0.96 under model 4.2.0) and blur stays under 0.92, both under
    # 4.2.0's cross-validated thresholds (0.98, 0.97), so the loss of detail is reported as
    # compression, throughout, and scores bad. The card says so (low-resolution F1 on the
    # judgement test 0.947 -> 0.857).
    if case == "low_resolution":
        seen = {"low_resolution", "blur", "compression"}
        assert r.score < 30 and types_of(r) & seen, describe(r)
    else:
        seen = {case}
        assert case in types_of(r), describe(r)
    covered = _union_s([(d.start_s, d.end_s) for d in r.defects if d.type in seen])
    assert covered >= 0.5 * r.video.duration_s, describe(r)


def _union_s(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        total += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return total


@pytest.mark.parametrize("case", ["blur", "noise", "compression", "low_resolution"])
def test_fidelity_damage_lowers_the_score(make_clip, scorer_for, case):
    scorer = scorer_for()
    clean, bad = scorer.score(make_clip("clean")), scorer.score(make_clip(case))
    assert bad.score < clean.score - 10, f"clean {describe(clean)} / {case} {describe(bad)}"


def overlap(a0, a1, b0, b1) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


@pytest.mark.parametrize("decoder", DECODERS)
def test_frozen_middle_third(make_clip, scorer_for, validate_record, decoder):
    r = check_ok(scorer_for("openvino", decoder).score(make_clip("frozen")), validate_record)
    frozen = [d for d in r.defects if d.type == "frozen"]
    t0, t1 = (SCENE_FRAMES // 3) / FPS, (2 * SCENE_FRAMES // 3) / FPS  # 1.0 .. 2.0 s
    assert frozen, describe(r)
    span = r.video.duration_s / 8  # the default plan's span: reports are this coarse
    for d in frozen:
        assert overlap(d.start_s, d.end_s, t0, t1) > 0, describe(r)
        assert t0 - span <= d.start_s and d.end_s <= t1 + span, describe(r)
    assert "black" not in types_of(r)


@pytest.mark.parametrize("decoder", DECODERS)
def test_black_last_third(make_clip, scorer_for, validate_record, decoder):
    r = check_ok(scorer_for("openvino", decoder).score(make_clip("black")), validate_record)
    black = [d for d in r.defects if d.type == "black"]
    t0 = (2 * SCENE_FRAMES // 3) / FPS  # 2.0 s
    span = r.video.duration_s / 8
    assert len(black) == 1, describe(r)
    d = black[0]
    assert t0 - span <= d.start_s <= t0 + span, describe(r)
    assert d.end_s == pytest.approx(r.video.duration_s, abs=1 / FPS)
    assert "frozen" not in types_of(r), describe(r)
    # model defects are not reported on the black part
    for other in r.defects:
        if other.type != "black":
            assert other.end_s <= d.start_s + 1e-6, describe(r)


def test_score_falls_as_compression_rises(make_clip, scorer_for):
    scorer = scorer_for()
    scores = {crf: scorer.score(make_clip(f"crf{crf}")).score for crf in (18, 30, 40, 48)}
    s = [scores[c] for c in (18, 30, 40, 48)]
    assert s[0] >= s[1] - 1.0, scores  # a tie within 1 point allowed only for the top pair
    assert s[1] > s[2] > s[3], scores
    assert s[0] > s[3] + 20, scores


# --- determinism and backend agreement -------------------------------------------------------

def test_same_run_twice_is_identical(make_clip, scorer_for):
    path = make_clip("frozen")
    scorer = scorer_for()
    first, second = scorer.score(path).to_dict(), scorer.score(path).to_dict()
    assert first == second
    from vqa import Scorer
    with Scorer(backend="openvino", threads=2) as fresh:
        third = fresh.score(path).to_dict()
    assert third == first


@pytest.mark.parametrize("case", ["clean", "compression", "dark"])
def test_backends_agree_on_a_clip(make_clip, scorer_for, case):
    ov = scorer_for("openvino").score(make_clip(case))
    pt = scorer_for("pytorch").score(make_clip(case))
    assert abs(ov.score - pt.score) <= 0.5, (ov.score, pt.score)
    assert ov.frames == pt.frames


@pytest.mark.parametrize("case", ["clean", "blur"])
def test_decoders_agree_on_a_clip(make_clip, scorer_for, case):
    a = scorer_for("openvino", "pyav").score(make_clip(case))
    b = scorer_for("openvino", "opencv").score(make_clip(case))
    assert a.frames["sampled"] == b.frames["sampled"]
    assert abs(a.score - b.score) <= 1.0, (a.score, b.score)


# --- sampling ------------------------------------------------------------------------------

@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("frames", [8, "all"])
def test_frames_option(make_clip, scorer_for, validate_record, decoder, frames):
    r = check_ok(scorer_for("openvino", decoder, frames).score(make_clip("clean")), validate_record)
    expected = r.video.frame_count if frames == "all" else frames
    assert r.frames["sampled"] == expected
    assert r.config["sampling"] == frames
    assert r.sampling["mode"] == ("all" if frames == "all" else "count")


@pytest.mark.parametrize("decoder", DECODERS)
def test_sampled_frames_are_distinct(make_clip, decoder):
    """Asking for nearly every frame must not sample one frame twice.

    50 frames, 49 asked for: 13 runs of up to 4 frames (0.16 s) in spans of 0.154 s.
    """
    with open_video(make_clip("clean"), backend=decoder) as reader:
        plan = plan_frames(reader.info, 49)
        pts = [round(f.pts_s, 6) for f in reader.read(plan)]
    assert len(pts) == 49
    dupes = sorted({p for p in pts if pts.count(p) > 1})
    assert dupes == [], f"frames at {dupes} s were sampled twice"


# --- bad inputs give error records, never exceptions -----------------------------------------

@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory, make_clip):
    d = tmp_path_factory.mktemp("bad")
    (d / "random.mp4").write_bytes(np.random.default_rng(0).integers(0, 256, 20_000, np.uint8).tobytes())
    (d / "empty.mp4").write_bytes(b"")
    write_audio_clip(d / "audio.m4a")
    data = make_clip("clean").read_bytes()
    (d / "truncated.mp4").write_bytes(data[:int(len(data) * 0.3)])
    return d


EXPECTED_CODES = {
    "random.mp4": {"E_NOT_VIDEO", "E_DECODE"},
    "empty.mp4": {"E_EMPTY"},
    "missing.mp4": {"E_NOT_FOUND"},
    # OpenCV cannot tell an audio-only file from any other it cannot open (vqa/decode/opencv.py)
    "audio.m4a": {"pyav": {"E_NO_VIDEO_STREAM"}, "opencv": {"E_NOT_VIDEO"}},
}


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("name", sorted(EXPECTED_CODES))
def test_bad_input_is_an_error_record(bad_inputs, scorer_for, validate_record, decoder, name):
    path = bad_inputs / name
    r = scorer_for("openvino", decoder).score(path)
    d = validate_record(r)
    codes = EXPECTED_CODES[name]
    codes = codes[decoder] if isinstance(codes, dict) else codes
    assert r.status == "error" and d["score"] is None and d["category"] is None
    assert r.error["code"] in codes, r.error
    assert r.error["message"]
    assert r.path == os.fspath(path)


@pytest.mark.parametrize("decoder", DECODERS)
def test_truncated_mp4(bad_inputs, scorer_for, validate_record, decoder):
    r = scorer_for("openvino", decoder).score(bad_inputs / "truncated.mp4")
    validate_record(r)
    if r.status == "ok":
        assert r.warnings, "a truncated file scored without a warning"
    else:
        assert r.error["code"].startswith("E_")


def test_score_many_keeps_going_after_errors(bad_inputs, make_clip, scorer_for, validate_record):
    paths = [bad_inputs / "random.mp4", make_clip("clean"), bad_inputs / "empty.mp4",
             bad_inputs / "missing.mp4", make_clip("dark")]
    records = list(scorer_for().score_many(paths))
    assert [r.status for r in records] == ["error", "ok", "error", "error", "ok"]
    assert [r.path for r in records] == [os.fspath(p) for p in paths]
    for r in records:
        validate_record(r)
