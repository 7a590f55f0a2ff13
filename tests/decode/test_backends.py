"""Every decode backend passes the same suite, on small clips written by tests/support/clips.py."""
from __future__ import annotations

import numpy as np
import pytest
from tests.support.clips import textured_frames, write_audio_clip, write_clip

import vqa.decode
from tests.support.required import REQUIRED_DECODERS

from vqa.decode import AVAILABLE_BACKENDS, open_video
from vqa.decode.base import SEEK_AHEAD_S
from vqa.errors import BackendUnavailable, InputError, UsageError
from vqa.sample import plan_frames
from vqa.types import Run, SamplePlan

BACKENDS = list(REQUIRED_DECODERS)  # a missing one fails its tests, never drops them
FPS = 25
H, W = 96, 160


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("clips")
    short = textured_frames(75, H, W)  # 3 s
    write_clip(d / "short.mp4", short)
    # 20 s with a keyframe every second, so runs 2.5 s apart are reached by seeking.
    write_clip(d / "long.mp4", textured_frames(500, H, W, seed=1), options={"crf": "18", "g": "25"})
    return {"dir": d, "short": d / "short.mp4", "short_src": short, "long": d / "long.mp4"}


def read_all(path, backend, plan_of=lambda info: plan_frames(info, "all")):
    with open_video(path, backend=backend) as reader:
        frames = list(reader.read(plan_of(reader.info)))
    return reader, frames


def pick(frames, plan):
    """The frames a plan should give, chosen from a full sequential read by the plan's rule."""
    out = []
    for k, run in enumerate(plan.runs):
        later = [f for f in frames if f.pts_s >= run.start_s - 1e-6]
        out += [(k, f) for f in (later if run.count == 0 else later[:run.count])]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_metadata(clips, backend):
    with open_video(clips["short"], backend=backend) as reader:
        info = reader.info
    assert (info.width, info.height, info.rotation) == (W, H, 0)
    assert info.fps == pytest.approx(FPS)
    assert info.duration_s == pytest.approx(3.0, abs=1 / FPS)
    assert info.frame_count == 75
    assert info.codec == "h264"
    assert info.pixel_format


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("frames, expected", [("default", 32), (10, 10), (1, 1), ("all", 75)])
def test_plan_gives_frames(clips, backend, frames, expected):
    reader, got = read_all(clips["short"], backend, lambda info: plan_frames(info, frames))
    assert len(got) == expected
    pts = [f.pts_s for f in got]
    assert all(a < b for a, b in zip(pts, pts[1:]))
    assert [f.run for f in got] == sorted(f.run for f in got)
    assert all(f.rgb.shape == (H, W, 3) and f.rgb.dtype == np.uint8 for f in got)
    for run_frames in _by_run(got).values():  # consecutive frames within a run
        assert np.allclose(np.diff([f.pts_s for f in run_frames]), 1 / FPS)
    assert reader.frames_decoded >= expected and reader.decode_errors == 0


def _by_run(frames):
    runs = {}
    for f in frames:
        runs.setdefault(f.run, []).append(f)
    return runs


@pytest.mark.parametrize("backend", BACKENDS)
def test_decoded_pixels_track_source(clips, backend):
    _, got = read_all(clips["short"], backend)
    diff = np.abs(np.stack([f.rgb for f in got]).astype(int) - clips["short_src"])
    assert diff.mean() < 8  # crf 18 with 4:2:0 chroma on fine noise


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("frames, runs_apart_s", [("default", 2.5), (7, 10.0), (50, 1.54)])
def test_seek_matches_sequential(clips, backend, frames, runs_apart_s):
    _, every = read_all(clips["long"], backend)
    assert len(every) == 500
    with open_video(clips["long"], backend=backend) as reader:
        plan = plan_frames(reader.info, frames)
        got = list(reader.read(plan))
    want = pick(every, plan)
    assert [(f.run, f.pts_s) for f in got] == [(k, f.pts_s) for k, f in want]
    for f, (_, w) in zip(got, want):
        assert np.array_equal(f.rgb, w.rgb), f"frame at {f.pts_s}s differs"
    if reader.SEEKS_AHEAD and runs_apart_s > SEEK_AHEAD_S:
        assert reader.frames_decoded < 250  # it skipped by seeking, not by decoding


@pytest.mark.parametrize("backend", BACKENDS)
def test_long_gop_is_decoded_once(tmp_path, backend):
    path = tmp_path / "gop.mp4"  # one keyframe: every seek would land back on frame 0
    write_clip(path, textured_frames(500, 48, 64), options={"crf": "18", "g": "1000"})  # 20 s
    _, every = read_all(path, backend)
    with open_video(path, backend=backend) as reader:
        plan = plan_frames(reader.info, "default")
        got = list(reader.read(plan))
    assert [f.pts_s for f in got] == [f.pts_s for _, f in pick(every, plan)]
    assert reader.frames_decoded <= len(every)


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_behind_the_decode_position(clips, backend):
    _, every = read_all(clips["long"], backend)
    plan = SamplePlan(mode="count", requested=8, runs=(
        Run(15.0, 4, 10.0, 20.0), Run(3.0, 2, 0.0, 10.0), Run(3.02, 2, 0.0, 10.0)))
    with open_video(clips["long"], backend=backend) as reader:
        got = list(reader.read(plan))
    want = pick(every, plan)
    assert [(f.run, f.pts_s) for f in got] == [(k, f.pts_s) for k, f in want]
    assert all(np.array_equal(f.rgb, w.rgb) for f, (_, w) in zip(got, want))


def test_backends_agree(clips):
    assert len(BACKENDS) >= 2
    results = {b: read_all(clips["long"], b, lambda info: plan_frames(info, 24))[1] for b in BACKENDS}
    ref_name, ref = BACKENDS[0], results[BACKENDS[0]]
    for name, got in results.items():
        assert [f.pts_s for f in got] == pytest.approx([f.pts_s for f in ref], abs=1e-6), name
        for f, r in zip(got, ref):
            diff = np.abs(f.rgb.astype(int) - r.rgb)
            assert diff.mean() < 1 and diff.max() <= 8, f"{name} vs {ref_name} at {f.pts_s}s"


@pytest.mark.parametrize("backend", BACKENDS)
def test_variable_frame_rate_keeps_stream_timestamps(tmp_path, backend):
    pts = [0.0, 0.04, 0.12, 0.13, 0.3, 0.31, 0.5, 0.54, 0.9, 1.0]
    path = tmp_path / "vfr.mkv"
    write_clip(path, textured_frames(len(pts), 48, 64), pts_s=pts)
    _, got = read_all(path, backend)
    assert [f.pts_s for f in got] == pytest.approx(pts, abs=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name, codec, pix_fmt", [
    ("p10.mp4", "libx264", "yuv420p10le"), ("hevc10.mp4", "libx265", "yuv420p10le"),
    ("p444.mp4", "libx264", "yuv444p"), ("gray.mkv", "ffv1", "gray"),
    ("alpha.mkv", "ffv1", "yuva420p"), ("jpeg.mkv", "mjpeg", "yuvj420p"),
])
def test_pixel_formats_become_rgb(tmp_path, backend, name, codec, pix_fmt):
    src = textured_frames(6, 48, 64)
    write_clip(tmp_path / name, src, codec=codec, pix_fmt=pix_fmt)
    _, got = read_all(tmp_path / name, backend)
    assert len(got) == 6
    rgb = np.stack([f.rgb for f in got])
    assert rgb.shape == src.shape and rgb.dtype == np.uint8
    if pix_fmt == "gray":
        assert np.abs(rgb[..., 0].astype(int) - rgb[..., 2]).max() <= 1  # grey stays grey
        luma = src @ np.array([0.299, 0.587, 0.114])
        assert np.abs(rgb[..., 1] - luma).mean() < 8
    else:
        assert np.abs(rgb.astype(int) - src).mean() < 10


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rotation", [90, 180, 270])
def test_rotation_is_applied_and_reported(tmp_path, backend, rotation):
    src = textured_frames(4, 48, 64)
    write_clip(tmp_path / "rot.mp4", src, rotation=rotation)
    reader, got = read_all(tmp_path / "rot.mp4", backend)
    assert reader.info.rotation == rotation
    upright = np.rot90(src, k=rotation // 90, axes=(1, 2))  # counter-clockwise, as np.rot90 turns
    assert (reader.info.height, reader.info.width) == upright.shape[1:3]
    assert np.abs(np.stack([f.rgb for f in got]).astype(int) - upright).mean() < 8


@pytest.mark.parametrize("backend", BACKENDS)
def test_open_errors_have_stable_codes(tmp_path, backend):
    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "noise.mp4").write_bytes(np.random.default_rng(0).bytes(4096))
    write_audio_clip(tmp_path / "audio.m4a")
    # OpenCV cannot tell "no video stream" from "not a video".
    no_video = {"E_NO_VIDEO_STREAM"} if backend == "pyav" else {"E_NO_VIDEO_STREAM", "E_NOT_VIDEO"}
    cases = [("missing.mp4", {"E_NOT_FOUND"}), ("empty.mp4", {"E_EMPTY"}),
             ("noise.mp4", {"E_NOT_VIDEO"}), ("audio.m4a", no_video), (".", {"E_NOT_VIDEO"})]
    for name, codes in cases:
        with pytest.raises(InputError) as err:
            open_video(tmp_path / name, backend=backend)
        assert err.value.code in codes, (name, err.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nothing_decodable_is_e_decode(clips, tmp_path, backend):
    data = bytearray(clips["short"].read_bytes())
    at = data.find(b"mdat")  # zero the coded frames, keep the container intact
    end = at - 4 + int.from_bytes(data[at - 4:at], "big")
    data[at + 4:end] = bytes(end - at - 4)
    (tmp_path / "zeroed.mp4").write_bytes(data)
    with pytest.raises(InputError) as err:
        read_all(tmp_path / "zeroed.mp4", backend)
    assert err.value.code == "E_DECODE"


def test_corrupt_packets_are_counted_not_raised(clips, tmp_path):
    # PyAV only: OpenCV reports no per-packet errors.
    data = bytearray(clips["short"].read_bytes())
    at = data.find(b"mdat")
    end = at - 4 + int.from_bytes(data[at - 4:at], "big")
    mid = (at + end) // 2
    data[mid:end] = np.random.default_rng(1).bytes(end - mid)
    (tmp_path / "half.mp4").write_bytes(data)
    reader, got = read_all(tmp_path / "half.mp4", "pyav")
    assert got and reader.decode_errors > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_and_threads(clips, backend):
    reader = open_video(clips["short"], backend=backend, threads=2)
    with reader:
        two = [f.rgb for f in reader.read(plan_frames(reader.info, 8))]
    reader.close()  # idempotent
    with pytest.raises(UsageError):
        next(reader.read(plan_frames(reader.info, 8)))
    with open_video(clips["short"], backend=backend, threads=1) as one_thread:
        one = [f.rgb for f in one_thread.read(plan_frames(one_thread.info, 8))]
    assert all(np.array_equal(a, b) for a, b in zip(one, two)) and len(one) == len(two) == 8
    with pytest.raises(UsageError):
        open_video(clips["short"], backend=backend, threads=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_under_way_when_the_reader_closes_says_it_is_closed(clips, backend):
    # Runs 10 s apart: the next one is reached by a seek (or by decoding on), after the close.
    plan = SamplePlan("count", (Run(0.0, 1, 0.0, 2.5), Run(10.0, 1, 10.0, 12.5)), 2)
    with open_video(clips["long"], backend=backend) as reader:
        frames = reader.read(plan)
        next(frames)
        reader.close()
        with pytest.raises(UsageError, match="is closed"):  # not AttributeError on None
            next(frames)


def test_open_video_backend_names(clips, monkeypatch):
    with pytest.raises(UsageError, match="pyav"):
        open_video(clips["short"], backend="ffmpeg-cli")
    monkeypatch.delitem(vqa.decode.AVAILABLE_BACKENDS, "opencv", raising=False)
    with pytest.raises(BackendUnavailable, match="opencv"):
        open_video(clips["short"], backend="opencv")
    assert AVAILABLE_BACKENDS["pyav"].BACKEND_NAME == "pyav"


@pytest.mark.parametrize("backend", BACKENDS)
def test_fifo_is_refused_before_open(tmp_path, backend):
    """A FIFO named like a video would block open() for good; it is refused by its type."""
    import os

    fifo = tmp_path / "pipe.mp4"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as err:
        open_video(fifo, backend=backend)
    assert err.value.code == "E_BAD_PATH"



def test_split_read_of_a_vfr_mp4_with_b_frames_decodes_each_frame_once(tmp_path):
    """A VFR MP4 with B-frames: FFmpeg's seek to a keyframe's time landed on the keyframe
    before it, so the second of two segments decoded a whole GOP to drop it (551 frames
    decoded for 300 with two workers). The reader now nudges the seek to the right GOP."""
    from vqa.sample import split_plan

    pts, t = [], 0.0
    for i in range(300):
        pts.append(round(t, 3))
        t += 0.033 if i % 3 else 0.05
    path = tmp_path / "vfr_b.mp4"
    write_clip(path, textured_frames(300, 96, 128), fps=25, pts_s=pts, options={"crf": "18", "g": "50"})
    with open_video(path) as reader:
        plan = plan_frames(reader.info, "all")
        _, segments = split_plan(plan, 2, keyframes_s=reader.keyframe_times(10_000))
    assert len(segments) == 2
    yielded = decoded = 0
    for segment, _ in segments:
        with open_video(path) as reader:
            yielded += sum(1 for _ in reader.read(segment, open_end=False))
            decoded += reader.frames_decoded
    assert yielded == 300
    assert decoded <= 302, decoded  # each segment may read one frame past its end


def _pyav_own_rgb(path) -> list[np.ndarray]:
    """Every frame as PyAV converts it by itself (``frame.to_ndarray``), for comparison."""
    import av

    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])]


@pytest.mark.parametrize("name, codec, pix_fmt", [
    ("p420.mp4", "libx264", "yuv420p"), ("p10.mp4", "libx264", "yuv420p10le"),
    ("p444.mp4", "libx264", "yuv444p"), ("jpeg.mkv", "mjpeg", "yuvj420p"), ("size_change", None, None),
])
def test_pyav_reader_converts_as_pyav_does(tmp_path, name, codec, pix_fmt):
    # The reader converts through one swscale context of its own (issue 18): the pixels must
    # be those of PyAV's per-frame conversion, bit for bit, also when the size changes.
    if codec is None:
        from tests.support.malformed_media import size_change
        path = size_change(tmp_path)
    else:
        path = tmp_path / name
        write_clip(path, textured_frames(8, 72, 128), codec=codec, pix_fmt=pix_fmt)
    _, got = read_all(path, "pyav")
    want = _pyav_own_rgb(path)
    assert len(got) == len(want) > 0
    assert all(np.array_equal(f.rgb, w) for f, w in zip(got, want))
    if codec is None:
        assert {f.rgb.shape for f in got} == {w.shape for w in want} and len({w.shape for w in want}) == 2


@pytest.mark.parametrize("threads", [1, 2])
def test_pyav_reader_keeps_one_reformatter_on_one_thread(clips, monkeypatch, threads):
    # A new swscale context per frame (PyAV's frame.to_ndarray) set up its tables and a pool of
    # one thread per core for every frame; the reader keeps one, on one thread whatever the
    # decoder's threads (a pool beside them overran a worker's address space).
    import vqa.decode.pyav as pyav

    made, calls = [], []

    real = pyav.VideoReformatter

    class Spy:
        def __init__(self):
            self._real = real()
            made.append(self)

        def reformat(self, frame, **kwargs):
            calls.append(kwargs)
            return self._real.reformat(frame, **kwargs)

    monkeypatch.setattr(pyav, "VideoReformatter", Spy)
    with open_video(clips["short"], backend="pyav", threads=threads) as reader:
        got = list(reader.read(plan_frames(reader.info, "all")))
    assert len(got) == 75 and len(made) == 1 and len(calls) == 75
    assert all(c == {"format": "rgb24", "threads": 1} for c in calls)


def test_many_decode_threads_fit_a_workers_address_space():
    """A task with many FFmpeg threads decodes every frame inside a worker-sized RLIMIT_AS.
    A swscale pool kept per reader beside the decode threads once made every frame fail with
    EAGAIN (av.error.BlockingIOError) at 1.5 GB with 32 threads; the per-frame conversion
    before it passed there."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (1500 << 20, resource.RLIM_INFINITY))\n"
            "from vqa.decode import open_video\nfrom vqa.sample import plan_frames\n"
            f"with open_video({str(repo / 'sample_videos' / 'clean_coffee.mp4')!r}, backend='pyav', threads=32) as r:\n"
            "    print(sum(1 for _ in r.read(plan_frames(r.info, 'all'))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(repo)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) > 0
