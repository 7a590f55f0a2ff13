"""What the default plan costs to decode: runs placed by keyframes (vqa.sample), counted in
the record's ``frames.decoded``."""
from __future__ import annotations

import dataclasses

import av
import pytest
from tests.support.clips import textured_frames, write_clip

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


@pytest.fixture(scope="module")
def gop_2s_ts(gop_2s) -> str:
    """The same packets in MPEG-TS, which has no index: seeks there go by bytes (PyAVReader)."""
    path = gop_2s[:-len(".mp4")] + ".ts"
    with av.open(gop_2s) as source, av.open(path, "w", format="mpegts") as out:
        video = source.streams.video[0]
        stream = out.add_stream_from_template(video)
        for packet in source.demux(video):
            if packet.dts is not None:
                packet.stream = stream
                out.mux(packet)
    return path


@pytest.mark.parametrize("workers", [0, 1])
def test_mpegts_costs_what_mp4_does(gop_2s, gop_2s_ts, workers):
    """Before, each run after the first was reached by decoding on (an index made of what a
    seek had passed looked like one keyframe at the start), or by timestamp seeks that
    landed mid-GOP and backed off a GOP: 1080p30 with 2 s keyframes (24 s), 329 frames decoded
    against the MP4's 40, 2.9 s against 0.6 s."""
    with vqa.Scorer(workers=workers) as scorer:
        mp4, ts = scorer.score(gop_2s), scorer.score(gop_2s_ts)
    assert mp4.ok and ts.ok, (mp4.error, ts.error)
    assert ts.frames == mp4.frames and ts.score == mp4.score and ts.warnings == mp4.warnings == []
    assert ts.frames["decoded"] <= 2 * ts.frames["sampled"], ts.frames


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


class ReadsOn(PyAVReader):
    """The PyAV reader without draining: a run's last frames come out as the next packets go in."""

    _drains = False


class DrainsEveryRun(PyAVReader):
    """Drains as if every read ended after each run, also where it reads on: the decoder is
    then started afresh at the last keyframe and led back to where the read goes on."""

    resumed = 0

    def _drain_pays(self) -> bool:
        if self._last_frames is not None:
            self._last_frames = dataclasses.replace(self._last_frames, next_start_s=None)
        return super()._drain_pays()

    def _resume_after_drain(self) -> None:
        DrainsEveryRun.resumed += 1
        super()._resume_after_drain()


def _read(cls, path, frames="default"):
    given = []

    class Counting(cls):
        def _note_given(self, packet, out) -> None:
            given.append(packet.pts)
            super()._note_given(packet, out)

    with Counting(path) as reader:
        plan = plan_frames(reader.info, frames, keyframes_s=reader.keyframe_times(10_000))
        read = list(reader.read(plan))
        return len(given), read, (reader.frames_decoded, reader.decode_errors, reader.warnings)


def test_a_runs_last_frames_are_drained_from_the_decoder_not_pushed_out_by_more_packets(gop_2s):
    drained, frames, counts = _read(PyAVReader, gop_2s)
    pushed, reference, reference_counts = _read(ReadsOn, gop_2s)
    assert drained < pushed  # x264 holds two frames back for its B-frames
    assert [(f.run, f.pts_s) for f in frames] == [(f.run, f.pts_s) for f in reference]
    assert all(np.array_equal(a.rgb, b.rgb) for a, b in zip(frames, reference))
    assert counts == reference_counts  # frames.decoded counts the frames grabbed, the same ones


@pytest.mark.parametrize("frames", ["default", 64, 200])
def test_reading_on_after_a_drain_gives_the_frames_reading_on_gives(gop_2s, frames):
    DrainsEveryRun.resumed = 0
    _, got, counts = _read(DrainsEveryRun, gop_2s, frames)
    _, reference, reference_counts = _read(ReadsOn, gop_2s, frames)
    assert DrainsEveryRun.resumed > 0
    assert [(f.run, f.pts_s) for f in got] == [(f.run, f.pts_s) for f in reference]
    assert all(np.array_equal(a.rgb, b.rgb) for a, b in zip(got, reference))
    # The frames passed over to get back are not grabbed (here the count is the same; where
    # frames before a run are dropped unseen (skip_frame), it may differ by those dropped).
    assert counts == reference_counts


# Keyframe times through the container's index (the NVDEC readers' way): the scan's, exactly.
INDEX_CASES = {  # name: (suffix, codec, encoder options)
    "x264_pyramid": (".mp4", "libx264", {"g": "12", "bf": "3", "b-pyramid": "normal", "sc_threshold": "0"}),
    "x264_open_gop": (".mp4", "libx264", {"g": "12", "bf": "3", "x264-params": "open-gop=1:keyint=12"}),
    "x265_open_gop": (".mov", "libx265", {"x265-params": "keyint=12:bframes=3:open-gop=1:log-level=none"}),
    "mpeg4_bframes": (".mp4", "mpeg4", {"g": "12", "bf": "2"}),
    "x264_mkv": (".mkv", "libx264", {"g": "12", "bf": "3"}),
    "x264_ts": (".ts", "libx264", {"g": "12", "bf": "3"}),
}


@pytest.mark.parametrize("name", list(INDEX_CASES))
def test_keyframes_from_the_index_are_the_scans(name, tmp_path, monkeypatch):
    from vqa.decode import pyav as pyav_reader

    suffix, codec, options = INDEX_CASES[name]
    path = str(tmp_path / f"{name}{suffix}")
    write_clip(path, textured_frames(60, 48, 64), fps=FPS, codec=codec, options=options)
    with PyAVReader(path) as reader:
        scanned, scanned_pos = reader.keyframe_times(10_000), dict(reader._keyframe_pos)
        monkeypatch.setattr(PyAVReader, "KEYFRAMES_FROM_INDEX", True)
        indexed = reader.keyframe_times(10_000)
        assert (indexed, reader._keyframe_pos) == (scanned, scanned_pos) and len(scanned) >= 4
    with pyav_reader.open_container(path, max_pixels=1 << 30, headers_only=True) as container:
        stream = pyav_reader._video_stream(container)
        keys = pyav_reader._indexed_keyframe_entries(stream, 10_000)
        used = keys is not None and pyav_reader._indexed_keyframes(container, stream, keys) is not None
    # MP4 and MOV index every frame; Matroska's cues and MPEG-TS do not, and are scanned
    assert used == (suffix in (".mp4", ".mov"))
