"""What the default plan costs to decode: runs placed by keyframes (vqa.sample), counted in
the record's ``frames.decoded``."""
from __future__ import annotations

import pytest
from clips import textured_frames, write_clip

import vqa
import numpy as np

from vqa.decode import open_video
from vqa.decode.pyav import PyAVReader
from vqa.sample import plan_frames

GOP_S, FPS = 2.0, 25


@pytest.fixture(scope="module")
def gop_2s(tmp_path_factory) -> str:
    """12 s at 25 fps with a keyframe every 2 s exactly (no scene-cut keyframes)."""
    path = tmp_path_factory.mktemp("gop") / "gop2s.mp4"
    gop = str(int(GOP_S * FPS))
    write_clip(path, textured_frames(12 * FPS, 96, 160), fps=FPS,
               options={"crf": "23", "g": gop, "keyint_min": gop, "sc_threshold": "0"})
    return str(path)


def test_the_clip_has_its_keyframes(gop_2s):
    with open_video(gop_2s) as reader:
        assert reader.keyframe_times(10_000) == pytest.approx([0, 2, 4, 6, 8, 10])


@pytest.mark.parametrize("workers", [0, 2])
def test_default_plan_decodes_at_most_twice_what_it_samples(gop_2s, workers):
    with vqa.Scorer(workers=workers) as scorer:
        record = scorer.score(gop_2s)  # with 2 workers the video is split between them
    assert record.ok, record.error
    assert record.frames["sampled"] == 32
    assert record.frames["decoded"] <= 2 * record.frames["sampled"], record.frames


def test_keyframe_placement_decodes_far_less_than_the_middle_one(gop_2s):
    decoded = {}
    for use in (False, True):
        with open_video(gop_2s) as reader:
            keys = reader.keyframe_times(10_000) if use else None
            frames = list(reader.read(plan_frames(reader.info, keyframes_s=keys)))
            assert len(frames) == 32
            decoded[use] = reader.frames_decoded
    assert decoded[True] * 2 <= decoded[False], decoded


def test_records_do_not_depend_on_the_engine(gop_2s):
    records = []
    for workers in (0, 1):
        with vqa.Scorer(workers=workers) as scorer:
            records.append(scorer.score(gop_2s))
    a, b = records
    # frames.decoded is the work done, which FFmpeg's threads can change by a frame or two
    # (workers=0 decodes with a thread per core); the frames scored cannot change.
    assert a.score == b.score and a.frames["sampled"] == b.frames["sampled"] and a.sampling == b.sampling
    assert a.frames["decoded"] <= 2 * a.frames["sampled"] and b.frames["decoded"] <= 2 * b.frames["sampled"]


class DecodesEveryFrame(PyAVReader):
    """The PyAV reader without skip_frame: every frame on the way to a run is decoded."""

    DROPS_BEFORE_RUNS = False

    def _skip_if_before_run(self, packet) -> None:
        pass


def test_frames_nothing_refers_to_are_dropped_on_the_way_to_a_run(gop_2s):
    got = {}
    for cls in (PyAVReader, DecodesEveryFrame):
        with cls(gop_2s) as reader:
            plan = plan_frames(reader.info, keyframes_s=reader.keyframe_times(10_000))
            got[cls] = (reader.frames_decoded, list(reader.read(plan)))
            got[cls] = (reader.frames_decoded, got[cls][1], reader.warnings)
    (dropped, frames, warnings), (every, reference, _) = got[PyAVReader], got[DecodesEveryFrame]
    assert dropped < every  # x264's B-frames are not referred to here
    assert [f.pts_s for f in frames] == [f.pts_s for f in reference]
    assert all(np.array_equal(a.rgb, b.rgb) for a, b in zip(frames, reference))
    assert warnings == []  # the gaps left by dropped frames are no variable frame rate
