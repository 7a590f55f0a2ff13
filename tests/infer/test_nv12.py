"""Views and frame statistics prepared from NV12 pictures in torch (issue 34's GPU preparation,
run here on the CPU): what the CPU path makes from FFmpeg's RGB, bit for bit."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
import torch
from av.video.reformatter import VideoReformatter

from vqa.infer.nv12 import NV12Preparer, matrix_of, nv12_of, pool, unsupported
from vqa.preprocess import TRAINING, cut, finish_views, frame_stats

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "sample_videos").glob("*.mp4"))


def cpu_view_and_stats(frame: av.VideoFrame):
    """What the CPU path makes of the frame: swscale's RGB (as vqa.decode.pyav converts), cut, stats."""
    rgb = VideoReformatter().reformat(frame, format="rgb24", threads=1).to_ndarray()
    pixels, region = cut(rgb, TRAINING, max_region=64)
    view = finish_views(np.ascontiguousarray(pixels).reshape(1, -1), [region])[0] if region else pixels
    return view, frame_stats(rgb)


def synthetic(h: int, w: int, colorspace: int, seed: int = 0) -> av.VideoFrame:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:h, :w]
    luma = 16 + (219 * (0.5 + 0.4 * np.sin(xx / 9.0) * np.cos(yy / 13.0))).astype(np.int64)
    chroma = rng.integers(40, 216, (h // 2, w), dtype=np.uint8)  # saturated colour: the matrix matters
    frame = av.VideoFrame.from_ndarray(np.concatenate([luma.astype(np.uint8), chroma], 0), format="yuv420p")
    frame.colorspace = colorspace
    return frame


def agreement(frames: list[av.VideoFrame], prep: NV12Preparer, matrix: str | None = None) -> tuple[int, float, float]:
    """Largest differences from the CPU path: of a view's pixels, of the mean luma, of the 98th
    percentile (the median and the freeze thumbnail are held here)."""
    view_d, mean_d, p98_d = 0, 0.0, 0.0
    for f in frames:
        view, stats = cpu_view_and_stats(f)
        nv = torch.from_numpy(nv12_of(f))[None]
        m = matrix or matrix_of(f.colorspace)
        got, got_stats = prep.views(nv, m)[0].numpy(), prep.stats(nv, m)[0]
        view_d = max(view_d, int(np.abs(got.astype(int) - view).max()))
        mean_d = max(mean_d, abs(got_stats.luma_mean - stats.luma_mean))
        p98_d = max(p98_d, abs(got_stats.luma_p98 - stats.luma_p98))
        if matrix is None:
            assert got_stats.luma_p50 == stats.luma_p50
            # OpenCV's general area filter sums in float: a few thumbnail pixels round the other way
            off = np.abs(got_stats.thumb.astype(int) - stats.thumb)
            assert off.max() <= 1 and (off > 0).mean() < 0.001
    return view_d, mean_d, p98_d


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_videos_prepare_as_the_cpu_path_does(path):
    with av.open(str(path)) as c:
        frames = [f for k, f in enumerate(c.decode(video=0)) if k % 9 == 0][:6]
    view_d, mean_d, p98_d = agreement(frames, NV12Preparer(TRAINING))
    assert view_d <= 2 and mean_d < 0.2 and p98_d <= 1


@pytest.mark.parametrize("h, w", [(720, 1280), (1080, 1920), (360, 640), (480, 854), (768, 1366), (2160, 3840)])
@pytest.mark.parametrize("colorspace", [1, 2, 5])
def test_every_size_and_matrix_prepares_bit_for_bit(h, w, colorspace):
    view_d, mean_d, p98_d = agreement([synthetic(h, w, colorspace)], NV12Preparer(TRAINING))
    assert (view_d, mean_d, p98_d) == (0, 0.0, 0.0)


def test_whole_factor_area_resampling_rounds_as_opencv():
    import cv2
    rng = np.random.default_rng(0)
    for f in (2, 3, 4):
        x = rng.integers(0, 256, (64 * f, 96 * f, 3)).astype(np.uint8)
        want = cv2.resize(x, (96, 64), interpolation=cv2.INTER_AREA)
        assert np.array_equal(pool(torch.from_numpy(x)[None], f, f)[0].numpy(), want)


def test_the_matrix_follows_the_stream_colour_space():
    # A BT.709 picture converted as BT.601 is off by tens of levels: the matrix is not a detail.
    frame = synthetic(720, 1280, colorspace=1)
    assert agreement([frame], NV12Preparer(TRAINING), matrix="bt601")[0] > 10
    assert matrix_of(1) == "bt709" and matrix_of(2) == matrix_of(5) == matrix_of(6) == "bt601"


def test_frames_this_path_cannot_prepare_say_why():
    assert unsupported(720, 1280, TRAINING) is None
    assert unsupported(720, 1281, TRAINING) == "odd frame size"
    assert unsupported(120, 160, TRAINING) == "frame smaller than the view"
    assert unsupported(720, 1280, TRAINING, colorspace=9) == "colour space 9"
    assert unsupported(720, 1280, TRAINING, full_range=True) == "full-range picture"


def test_a_batch_of_frames_is_the_frames_one_by_one():
    prep = NV12Preparer(TRAINING)
    frames = [torch.from_numpy(nv12_of(synthetic(720, 1280, 1, seed=s))) for s in range(3)]
    batch = prep.views(torch.stack(frames), "bt709")
    for k, f in enumerate(frames):
        assert torch.equal(batch[k], prep.views(f[None], "bt709")[0])
    stats = prep.stats(torch.stack(frames), "bt709")
    assert [s.luma_mean for s in stats] == [prep.stats(f[None], "bt709")[0].luma_mean for f in frames]
